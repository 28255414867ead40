// engine/sampler.h: next-token selection from logits.
//
// Order (as in llama.cpp's default chain): the logit biases, repetition/frequency/presence
// penalties over the last N tokens, DRY, then greedy (temperature 0), or Mirostat (v1 or v2,
// at the temperature), or top-k -> typical-p -> top-p -> min-p -> XTC -> temperature; then a
// draw from a seeded generator. All buffers are sized at construction (Reset sizes the DRY
// breakers' table once per request): Sample() never allocates.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "paddock/engine.h"

namespace paddock {

class Tokenizer;

class Sampler {
 public:
  explicit Sampler(int n_vocab);
  // Validates `p` (throws Error on out-of-range values) and reseeds.
  void Reset(const SamplingParams& p);
  // Picks the next token. `logits` (n_vocab) is modified by the penalties. `allowed`: a bitmask
  // over the vocabulary (constrained decoding, grammar/matcher.h) or null; tokens outside it are
  // never picked, whatever the other settings (it applies before top-k, top-p, min-p and the
  // temperature). At least one token must be allowed.
  int Sample(float* logits, const int32_t* history, int n_history,
             const uint64_t* allowed = nullptr);

  // Sample() in two halves, for speculative decoding: Prepare() applies the penalties and
  // builds the distribution the draw uses (the candidates left by top-k, top-p and min-p, with
  // their probabilities at the temperature; greedy: the argmax with probability 1); Draw()
  // draws from it. Sample() == Prepare() + Draw(), draw for draw.
  void Prepare(float* logits, const int32_t* history, int n_history,
               const uint64_t* allowed = nullptr);
  int Draw();
  // Under the prepared distribution: p(id) (0 outside the candidates), the candidates.
  double Prob(int32_t id) const;
  struct Candidate {
    float logit;
    int32_t id;
  };
  const Candidate* candidates() const { return cand_.data(); }
  int n_candidates() const { return static_cast<int>(n_); }
  double weight(int i) const { return w_[static_cast<size_t>(i)] / total_; }  // p(candidate i)
  // A uniform draw in [0, 1) from the request's generator.
  double Uniform();
  // A draw from the residual max(0, p - q) (renormalized): q(id) given by `q`. Returns -1
  // when the residual is empty (p <= q everywhere).
  template <class Q>
  int DrawResidual(const Q& q) {
    double total = 0;
    for (size_t i = 0; i < n_; ++i) total += std::max(0.0, w_[i] / total_ - q(cand_[i].id));
    if (!(total > 0)) return -1;
    const double u = Uniform() * total;
    double acc = 0;
    for (size_t i = 0; i < n_; ++i) {
      acc += std::max(0.0, w_[i] / total_ - q(cand_[i].id));
      if (u < acc) return cand_[i].id;
    }
    return cand_[n_ - 1].id;
  }
  bool greedy() const { return p_.temperature <= 0.0f; }

 private:
  void ApplyPenalties(float* logits, const int32_t* history, int n_history);
  void ApplyDry(float* logits, const int32_t* history, int n_history);
  size_t Typical(size_t n);
  size_t Xtc(size_t n);
  size_t Mirostat(size_t n);
  void Tempered(size_t n);

  int n_vocab_;
  SamplingParams p_;
  std::vector<Candidate> cand_;
  std::vector<double> w_;  // unnormalized probabilities of cand_[0..n_)
  size_t n_ = 0;
  double total_ = 1;
  std::vector<int32_t> counts_;
  std::vector<Candidate> tmp_;    // (n_vocab) typical-p's reordering
  std::vector<uint8_t> breaker_;  // (n_vocab) 1: a DRY sequence breaker
  std::vector<int32_t> dry_len_;  // (n_vocab) DRY: the longest repeat each token extends
  std::vector<int32_t> dry_touched_;
  double mu_ = 0;  // Mirostat's running maximum surprise
  std::mt19937_64 rng_;
};

// The token ids whose text holds one of `breakers` (DRY's sequence breakers): piece(id) gives a
// token's text.
template <class Piece>
std::vector<int32_t> DryBreakerTokens(int n_vocab, const std::vector<std::string>& breakers,
                                      const Piece& piece) {
  std::vector<int32_t> out;
  for (int id = 0; id < n_vocab; ++id) {
    const std::string_view t = piece(id);
    for (const std::string& b : breakers) {
      if (!b.empty() && t.find(b) != std::string_view::npos) {
        out.push_back(id);
        break;
      }
    }
  }
  return out;
}

// The log-softmax of `logits` (n_vocab, untouched) at `token`, and the k most likely tokens,
// best first (ties: lower id first); texts left empty. Allocation-free once out->top holds k.
void LogprobOf(const float* logits, int n_vocab, int32_t token, int k, TokenLogprob* out);

// DRY on: p->dry_breaker_tokens from p->dry_sequence_breakers over tok's vocabulary.
void ResolveDryBreakers(const Tokenizer& tok, SamplingParams* p);

// Throws Error naming the first out-of-range sampling value.
void ValidateSampling(const SamplingParams& p);

}  // namespace paddock
