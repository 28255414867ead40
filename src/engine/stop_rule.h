// engine/stop_rule.h: the per-token rule, and the checks a prompt must pass: written once, for
// the single-sequence loop (Engine::GenerateTokens), the scheduler's postprocess (the Service)
// and the n > 1 forks' first tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "engine/sequence.h"
#include "paddock/engine.h"

namespace paddock {

class Tokenizer;
namespace grammar {
class Matcher;
}

// Whether t ends generation: an end-of-generation token of the vocabulary, or BOS.
bool IsEndToken(const Tokenizer& tok, int32_t t);

// Advances a grammar by t, t having been appended; true when the output is whole: the grammar
// refuses t, nothing can follow, or it can end here and `at_limit` (no token may follow).
bool GrammarCompletes(grammar::Matcher& m, int32_t t, bool at_limit);

// The per-token rule: applies sampled token t to s and says why s ends, if it does.
//   1. an end token (is_end, unless s.ignore_eos) ends s with kEos, t not appended;
//   2. t is appended (s.tokens, s.generated); text(t) takes its text and says whether it
//      completed a stop string: kStop;
//   3. max_tokens generated: kLength;
//   4. s holds `limit` tokens (prompt + generated = the context): kContext;
//   5. with a grammar (non-null) and t not an end token, t advances it; a grammar that
//      completes (GrammarCompletes) ends s with kEos, t kept, unless 2 holds.
// `text` is any callable bool(int32_t); no allocation here.
template <class TextFn>
std::optional<FinishReason> ApplyToken(Sequence& s, int32_t t, bool is_end,
                                       grammar::Matcher* grammar, TextFn&& text) {
  if (is_end && !s.ignore_eos) return FinishReason::kEos;
  s.tokens.push_back(t);
  s.generated++;
  std::optional<FinishReason> why;
  if (text(t)) {
    why = FinishReason::kStop;
  } else if (s.generated >= s.max_tokens) {
    why = FinishReason::kLength;
  } else if (static_cast<int>(s.tokens.size()) >= s.limit) {
    why = FinishReason::kContext;
  }
  if (grammar != nullptr && !is_end && GrammarCompletes(*grammar, t, why.has_value()) &&
      why != FinishReason::kStop)
    why = FinishReason::kEos;
  return why;
}

// Throws Error unless the prompt is non-empty, leaves room for one generated token in a
// context of `context` tokens, and holds only ids of a vocabulary of n_vocab; and unless the
// options are valid (max_tokens >= 0, no empty stop string, sampling values in range).
void ValidatePrompt(const std::vector<int32_t>& prompt, int context, int n_vocab,
                    const GenerateOptions& options);

}  // namespace paddock
