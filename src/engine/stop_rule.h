// engine/stop_rule.h: when generation ends, and the checks a prompt must pass: written once,
// for the single-sequence loop (Engine::GenerateTokens) and the scheduler (the Service).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "paddock/engine.h"

namespace paddock {

// The stop rule, applied to each sampled token in this order:
//   1. an end-of-generation token (unless ignore_eos) ends the sequence with kEos and is not
//      appended;
//   2. otherwise the token is appended; if its text completed a stop string: kStop;
//   3. max_tokens generated: kLength;
//   4. the sequence holds `limit` tokens (prompt + generated = the context): kContext.
inline bool EndsAtToken(bool is_end_token, bool ignore_eos) {
  return is_end_token && !ignore_eos;
}
inline std::optional<FinishReason> StopAfterAppend(bool stop_string, int generated, int max_tokens,
                                                   int length, int limit) {
  if (stop_string) return FinishReason::kStop;
  if (generated >= max_tokens) return FinishReason::kLength;
  if (length >= limit) return FinishReason::kContext;
  return std::nullopt;
}

// Throws Error unless the prompt is non-empty, leaves room for one generated token in a
// context of `context` tokens, and holds only ids of a vocabulary of n_vocab; and unless the
// options are valid (max_tokens >= 0, no empty stop string, sampling values in range).
void ValidatePrompt(const std::vector<int32_t>& prompt, int context, int n_vocab,
                    const GenerateOptions& options);

}  // namespace paddock
