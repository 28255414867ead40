// engine/sequence.h: a sequence as the scheduler and the per-token rule see it (its tokens,
// counts and limits, its KV sequence, its drafts), with no model, text or grammar in it: the
// service's requests derive from it and add those.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/kv_manager.h"

namespace paddock {

class LoraAdapter;

// One request as the scheduler sees it. The Service derives its Request from it.
struct Sequence {
  Sequence() = default;
  Sequence(const Sequence&) = default;  // (a fork starts as a copy: ForkFrom)
  Sequence& operator=(const Sequence&) = default;
  virtual ~Sequence() = default;
  uint64_t arrival = 0;         // submission order (ties in priority: earlier first)
  int priority = 0;             // higher first
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int n_prompt = 0;
  int computed = 0;  // leading tokens whose K/V are in the cache
  int generated = 0;
  int max_tokens = 0;  // tokens to generate at most (0: prompt only)
  int limit = 0;       // tokens (prompt + generated) the sequence may reach (the context)
  bool ignore_eos = false;
  int forks = 0;              // choices still to fork from it after its prompt (n - 1)
  KvManager::SeqId seq = -1;  // its KV sequence while running
  uint64_t admission = 0;     // the scheduler's record: n for the n-th first admission (0: never)
  int cached_tokens = 0;      // prompt tokens found in the prefix cache at first admission
  // Speculative decoding (set by the caller before Schedule, for a decoding sequence): the
  // step's tokens [t, d1..dk], t = tokens.back() the one to compute, d the drafts. Schedule
  // may cut the drafts to the budget; the caller verifies and sets `accepted` (drafts kept);
  // Commit records t and the accepted drafts in the KV cache; Postprocess applies the per-token
  // rule to the accepted drafts (appending them to `tokens`), then to the token sampled after
  // them, and clears the drafts.
  std::vector<int32_t> draft;
  int accepted = 0;
  // Its LoRA adapter (the request's RequestOptions::lora, which keeps it alive), or null.
  const LoraAdapter* lora = nullptr;
  // Images in the prompt: per prompt token, the position its attention ends at (0: causal), or
  // null. A bidirectional image span (Gemma 3) must run whole in one step.
  const int32_t* attend_end = nullptr;
  // A prompt chunk of n tokens from `computed`, cut before a bidirectional span it would split,
  // or (starting at one) the whole span if `budget` holds it; 0: nothing fits this step.
  int WholeSpans(int n, int budget) const {
    const int b = computed, e = computed + n;
    if (attend_end == nullptr || n <= 0 || e > n_prompt) return n;
    const int end = attend_end[e - 1];
    if (end <= e) return n;
    int st = e - 1;
    while (st > b && attend_end[st - 1] == end) --st;
    if (st > b) return st - b;
    return end - b <= budget ? end - b : 0;
  }
  bool admitted_once() const { return admission != 0; }
  int to_compute() const { return static_cast<int>(tokens.size()) - computed; }
  // The tokens a scheduled chunk of n computes (the draft buffer when speculating).
  const int32_t* step_tokens() const {
    return draft.empty() ? tokens.data() + computed : draft.data();
  }
};

}  // namespace paddock
