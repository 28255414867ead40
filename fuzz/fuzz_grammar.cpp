// libFuzzer target: grammars (grammar/cfg.h, grammar/matcher.h). The first byte picks the input
// kind: even, a GBNF grammar; odd, a JSON Schema (translated to GBNF). Whatever parses is bound
// to a small vocabulary and walked: masks, the per-token reference, accepting tokens. Every input
// is refused with an Error or runs; a crash, an escaping exception or runaway memory is not fine.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grammar/cfg.h"
#include "grammar/matcher.h"
#include "paddock/error.h"

namespace {

std::shared_ptr<const paddock::grammar::TokenTrie> Vocab() {
  static const auto trie = [] {
    std::vector<std::string> toks = {
        "",     "{",     "}",    "[",    "]",        "\"", ":", ",", " ", "\n",
        "true", "false", "null", "0",    "1",        "-",  ".", "e", "a", "ab",
        "\":",  "\",",   "\xc3", "\xa9", "\xc3\xa9", "\\", "u", "x", "ba"};
    for (int b = 32; b < 127; ++b) toks.push_back(std::string(1, static_cast<char>(b)));
    return std::make_shared<paddock::grammar::TokenTrie>(std::move(toks), std::vector<int32_t>{0});
  }();
  return trie;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > 4096) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    const std::string gbnf = (data[0] & 1) != 0 ? paddock::grammar::JsonSchemaToGbnf(text) : text;
    auto g = std::make_shared<paddock::grammar::TokenGrammar>(
        paddock::grammar::ParseGbnf(gbnf, 1 << 15), Vocab(), 16);
    paddock::grammar::Matcher m(g);
    std::vector<uint64_t> mask((static_cast<size_t>(g->trie().n_vocab()) + 63) / 64);
    for (int step = 0; step < 8 && !m.Done() && !m.Dead(); ++step) {
      m.FillMask(mask.data(), step % 2 == 0 ? paddock::grammar::Matcher::kNoBudget : 6);
      int pick = -1;
      for (int id = 0; id < g->trie().n_vocab(); ++id) {
        const bool fast = paddock::grammar::Allowed(mask, id);
        if (step % 2 == 0 && fast != m.AllowsRef(id)) __builtin_trap();  // fast != reference
        if (fast && id != 0 && pick < 0 && (id + step) % 3 == 0) pick = id;
      }
      if (pick < 0) break;
      if (!m.AcceptToken(pick)) __builtin_trap();  // an allowed token must be accepted
    }
  } catch (const paddock::Error&) {
  }
  return 0;
}
