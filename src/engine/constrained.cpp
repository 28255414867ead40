#include "engine/constrained.h"

#include "base/timer.h"
#include "model/tokenizer.h"

namespace paddock {

namespace {
std::string GbnfOf(GrammarKind kind, std::string_view text) {
  return kind == GrammarKind::kGbnf         ? std::string(text)
         : kind == GrammarKind::kJsonSchema ? grammar::JsonSchemaToGbnf(text)
                                            : grammar::JsonObjectGbnf();
}
}  // namespace

std::shared_ptr<const grammar::TokenTrie> TokenTrieOf(const Tokenizer& tok) {
  std::vector<std::string> bytes(static_cast<size_t>(tok.vocab_size()));
  const int prev = tok.bos() == 0 ? 1 : 0;  // any token but BOS: no leading space stripped
  for (int i = 0; i < tok.vocab_size(); ++i) {
    const TokenAttr a = tok.Attr(i);
    if (a == TokenAttr::kControl || a == TokenAttr::kUnknown || a == TokenAttr::kUnused) continue;
    bytes[static_cast<size_t>(i)] = std::string(tok.Decode(prev, i));
  }
  return std::make_shared<grammar::TokenTrie>(std::move(bytes), tok.end_of_generation());
}

std::shared_ptr<const Grammar> GrammarCache::Compile(GrammarKind kind, std::string_view text) {
  std::string key(1, static_cast<char>('0' + static_cast<int>(kind)));
  key.append(text);
  std::shared_ptr<const grammar::TokenTrie> trie;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
      if (it->first == key) {
        lru_.splice(lru_.begin(), lru_, it);
        return it->second;
      }
    }
    if (!trie_) trie_ = TokenTrieOf(*tok_);
    trie = trie_;
  }
  // Compiled outside the lock (a request's thread, not the engine's).
  const double t0 = NowSeconds();
  auto g = std::make_shared<Grammar>();
  g->gbnf = GbnfOf(kind, text);
  g->g = std::make_shared<grammar::TokenGrammar>(grammar::ParseGbnf(g->gbnf), trie);
  g->compile_seconds = NowSeconds() - t0;
  std::lock_guard<std::mutex> lock(mu_);
  lru_.emplace_front(std::move(key), g);
  if (lru_.size() > capacity_) lru_.pop_back();
  return g;
}

std::string GrammarGbnf(GrammarKind kind, std::string_view text) {
  std::string gbnf = GbnfOf(kind, text);
  grammar::ParseGbnf(gbnf);
  return gbnf;
}

const uint64_t* Constraint::Mask(double* seconds, int remaining) {
  const double t0 = NowSeconds();
  matcher.FillMask(mask.data(), remaining >= 1 ? static_cast<uint32_t>(remaining - 1) : 0);
  if (seconds != nullptr) *seconds += NowSeconds() - t0;
  return mask.data();
}

}  // namespace paddock
