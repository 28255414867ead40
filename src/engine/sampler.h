// engine/sampler.h: next-token selection from logits.
//
// Order (as in llama.cpp's default chain): repetition/frequency/presence penalties over the
// last N tokens, then greedy (temperature 0) or top-k -> top-p -> min-p -> temperature ->
// a draw from a seeded generator. All buffers are sized at construction: Sample() never
// allocates.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "paddock/engine.h"

namespace paddock {

class Sampler {
 public:
  explicit Sampler(int n_vocab);
  // Validates `p` (throws Error on out-of-range values) and reseeds.
  void Reset(const SamplingParams& p);
  // Picks the next token. `logits` (n_vocab) is modified by the penalties.
  int Sample(float* logits, const int32_t* history, int n_history);

 private:
  struct Candidate {
    float logit;
    int32_t id;
  };
  void ApplyPenalties(float* logits, const int32_t* history, int n_history);

  int n_vocab_;
  SamplingParams p_;
  std::vector<Candidate> cand_;
  std::vector<int32_t> counts_;
  std::mt19937_64 rng_;
};

// Throws Error naming the first out-of-range sampling value.
void ValidateSampling(const SamplingParams& p);

}  // namespace paddock
