#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

#include "base/strings.h"

namespace paddock {

void ValidateSampling(const SamplingParams& p) {
  if (!(p.temperature >= 0 && p.temperature <= 100))
    Fail("temperature %g is out of range [0, 100]", p.temperature);
  if (p.top_k < 0) Fail("top-k %d must not be negative", p.top_k);
  if (!(p.top_p > 0 && p.top_p <= 1)) Fail("top-p %g is out of range (0, 1]", p.top_p);
  if (!(p.min_p >= 0 && p.min_p <= 1)) Fail("min-p %g is out of range [0, 1]", p.min_p);
  if (!(p.repeat_penalty > 0 && p.repeat_penalty <= 100))
    Fail("repeat penalty %g is out of range (0, 100]", p.repeat_penalty);
  if (!(std::fabs(p.frequency_penalty) <= 2))
    Fail("frequency penalty %g is out of range [-2, 2]", p.frequency_penalty);
  if (!(std::fabs(p.presence_penalty) <= 2))
    Fail("presence penalty %g is out of range [-2, 2]", p.presence_penalty);
  if (p.penalty_last_n < 0) Fail("penalty window %d must not be negative", p.penalty_last_n);
  for (const auto& [id, bias] : p.logit_bias)
    if (id < 0 || !(std::fabs(bias) <= 100))
      Fail("logit bias %g for token %d is out of range [-100, 100]", bias, id);
}

void LogprobOf(const float* logits, int n_vocab, int32_t token, int k, TokenLogprob* out) {
  float mx = logits[0];
  for (int i = 1; i < n_vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
  const double lse = static_cast<double>(mx) + std::log(sum);
  out->token = token;
  out->logprob = static_cast<float>(static_cast<double>(logits[token]) - lse);
  // The k best by insertion into a sorted list of at most k (k <= 20).
  out->top.resize(static_cast<size_t>(std::max(0, k)));
  int have = 0;
  for (int i = 0; i < n_vocab && k > 0; ++i) {
    const float l = logits[i];
    if (have == k && !(l > out->top[static_cast<size_t>(k - 1)].logprob)) continue;
    int at = std::min(have, k - 1);
    while (at > 0 && l > out->top[static_cast<size_t>(at - 1)].logprob) {
      if (at < k) out->top[static_cast<size_t>(at)] = out->top[static_cast<size_t>(at - 1)];
      --at;
    }
    out->top[static_cast<size_t>(at)].token = i;
    out->top[static_cast<size_t>(at)].logprob = l;
    have = std::min(k, have + 1);
  }
  out->top.resize(static_cast<size_t>(have));
  for (auto& a : out->top) a.logprob = static_cast<float>(static_cast<double>(a.logprob) - lse);
}

Sampler::Sampler(int n_vocab)
    : n_vocab_(n_vocab),
      cand_(static_cast<size_t>(n_vocab)),
      w_(static_cast<size_t>(n_vocab)),
      counts_(static_cast<size_t>(n_vocab), 0) {}

void Sampler::Reset(const SamplingParams& p) {
  ValidateSampling(p);
  for (const auto& [id, bias] : p.logit_bias)
    if (id >= n_vocab_)
      Fail("logit bias for token %d: outside the vocabulary (0..%d)", id, n_vocab_ - 1);
  p_ = p;
  rng_.seed(p.seed);
}

void Sampler::ApplyPenalties(float* logits, const int32_t* history, int n_history) {
  const bool on =
      p_.repeat_penalty != 1.0f || p_.frequency_penalty != 0.0f || p_.presence_penalty != 0.0f;
  if (!on || p_.penalty_last_n == 0 || n_history == 0) return;
  const int start = std::max(0, n_history - p_.penalty_last_n);
  for (int i = start; i < n_history; ++i) counts_[static_cast<size_t>(history[i])]++;
  for (int i = start; i < n_history; ++i) {
    const int32_t id = history[i];
    int32_t& c = counts_[static_cast<size_t>(id)];
    if (c == 0) continue;  // already applied for this id
    float& l = logits[id];
    l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
    l -= static_cast<float>(c) * p_.frequency_penalty + p_.presence_penalty;
    c = 0;
  }
}

int Sampler::Sample(float* logits, const int32_t* history, int n_history, const uint64_t* allowed) {
  Prepare(logits, history, n_history, allowed);
  return Draw();
}

void Sampler::Prepare(float* logits, const int32_t* history, int n_history,
                      const uint64_t* allowed) {
  for (const auto& [id, bias] : p_.logit_bias) logits[id] += bias;
  ApplyPenalties(logits, history, n_history);
  auto ok = [allowed](int i) { return allowed == nullptr || ((allowed[i >> 6] >> (i & 63)) & 1); };
  if (p_.temperature <= 0.0f) {
    int best = -1;
    for (int i = 0; i < n_vocab_; ++i) {
      if (ok(i) && (best < 0 || logits[i] > logits[best])) best = i;
    }
    if (best < 0) best = 0;  // (nothing allowed: the caller's error; keep a valid id)
    cand_[0] = {logits[best], best};
    w_[0] = total_ = 1;
    n_ = 1;
    return;
  }
  size_t n = 0;
  if (allowed == nullptr) {
    n = static_cast<size_t>(n_vocab_);
    for (size_t i = 0; i < n; ++i) cand_[i] = {logits[i], static_cast<int32_t>(i)};
  } else {
    for (int i = 0; i < n_vocab_; ++i)
      if (ok(i)) cand_[n++] = {logits[i], static_cast<int32_t>(i)};
    if (n == 0) cand_[n++] = {logits[0], 0};
  }
  auto desc = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < n) {
    std::nth_element(cand_.begin(), cand_.begin() + p_.top_k, cand_.begin() + static_cast<long>(n),
                     desc);
    n = static_cast<size_t>(p_.top_k);
  }
  std::sort(cand_.begin(), cand_.begin() + static_cast<long>(n), desc);
  // Probabilities (untempered) for top-p and min-p.
  const float mx = cand_[0].logit;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(cand_[i].logit - mx));
  if (p_.top_p < 1.0f) {
    double cum = 0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      cum += std::exp(static_cast<double>(cand_[i].logit - mx)) / sum;
      if (cum >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
  }
  if (p_.min_p > 0.0f) {
    const double floor = std::log(static_cast<double>(p_.min_p));  // p_i / p_max >= min_p
    size_t keep = 1;
    while (keep < n && static_cast<double>(cand_[keep].logit - mx) >= floor) ++keep;
    n = keep;
  }
  // Temperature.
  total_ = 0;
  for (size_t i = 0; i < n; ++i) {
    w_[i] = std::exp(static_cast<double>(cand_[i].logit - mx) / p_.temperature);
    total_ += w_[i];
  }
  n_ = n;
}

int Sampler::Draw() {
  if (n_ == 1) {
    if (p_.temperature > 0.0f) (void)Uniform();  // a draw is a draw: the generator advances
    return cand_[0].id;
  }
  const double u = Uniform() * total_;
  double acc = 0;
  for (size_t i = 0; i < n_; ++i) {
    acc += w_[i];
    if (u < acc) return cand_[i].id;
  }
  return cand_[n_ - 1].id;
}

double Sampler::Uniform() {
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

double Sampler::Prob(int32_t id) const {
  for (size_t i = 0; i < n_; ++i) {
    if (cand_[i].id == id) return w_[i] / total_;
  }
  return 0.0;
}

}  // namespace paddock
