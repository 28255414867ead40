#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

#include "base/strings.h"
#include "model/tokenizer.h"

namespace paddock {

namespace {
constexpr int kDryMaxLength = 64;  // repeats are measured up to this many tokens
}  // namespace

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
  if (!(p.typical_p > 0 && p.typical_p <= 1))
    Fail("typical-p %g is out of range (0, 1]", p.typical_p);
  if (!(p.xtc_probability >= 0 && p.xtc_probability <= 1))
    Fail("XTC probability %g is out of range [0, 1]", p.xtc_probability);
  if (!(p.xtc_threshold >= 0 && p.xtc_threshold <= 1))
    Fail("XTC threshold %g is out of range [0, 1]", p.xtc_threshold);
  if (p.mirostat < 0 || p.mirostat > 2) Fail("mirostat %d is not 0, 1 or 2", p.mirostat);
  if (!(p.mirostat_tau >= 0 && p.mirostat_tau <= 100))
    Fail("mirostat tau %g is out of range [0, 100]", p.mirostat_tau);
  if (!(p.mirostat_eta >= 0 && p.mirostat_eta <= 1))
    Fail("mirostat eta %g is out of range [0, 1]", p.mirostat_eta);
  if (!(p.dry_multiplier >= 0 && p.dry_multiplier <= 100))
    Fail("DRY multiplier %g is out of range [0, 100]", p.dry_multiplier);
  if (!(p.dry_base >= 1 && p.dry_base <= 100))
    Fail("DRY base %g is out of range [1, 100]", p.dry_base);
  if (p.dry_allowed_length < 1 || p.dry_allowed_length > 1000)
    Fail("DRY allowed length %d is out of range [1, 1000]", p.dry_allowed_length);
  if (p.dry_penalty_last_n < -1) Fail("DRY window %d is below -1", p.dry_penalty_last_n);
  if (p.dry_sequence_breakers.size() > 32) Fail("at most 32 DRY sequence breakers");
  for (const std::string& b : p.dry_sequence_breakers)
    if (b.empty() || b.size() > 64) Fail("a DRY sequence breaker is 1-64 bytes");
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

std::vector<std::string> DefaultDryBreakers() {
  return {"\n", ":", "\"", "*"};
}

void ResolveDryBreakers(const Tokenizer& tok, SamplingParams* p) {
  if (p->dry_multiplier <= 0) return;
  p->dry_breaker_tokens = DryBreakerTokens(tok.vocab_size(), p->dry_sequence_breakers,
                                           [&](int id) { return tok.Decode(id, id); });
}

Sampler::Sampler(int n_vocab)
    : n_vocab_(n_vocab),
      cand_(static_cast<size_t>(n_vocab)),
      w_(static_cast<size_t>(n_vocab)),
      counts_(static_cast<size_t>(n_vocab), 0),
      tmp_(static_cast<size_t>(n_vocab)),
      dry_len_(static_cast<size_t>(n_vocab), 0) {}

void Sampler::Reset(const SamplingParams& p) {
  ValidateSampling(p);
  for (const auto& [id, bias] : p.logit_bias)
    if (id >= n_vocab_)
      Fail("logit bias for token %d: outside the vocabulary (0..%d)", id, n_vocab_ - 1);
  p_ = p;
  rng_.seed(p.seed);
  mu_ = 2.0 * p.mirostat_tau;
  if (p.dry_multiplier > 0) {
    breaker_.assign(static_cast<size_t>(n_vocab_), 0);
    for (int32_t id : p.dry_breaker_tokens)
      if (id >= 0 && id < n_vocab_) breaker_[static_cast<size_t>(id)] = 1;
    dry_touched_.reserve(static_cast<size_t>(n_vocab_));  // distinct tokens at most
  }
}

// DRY ("don't repeat yourself"): for each earlier occurrence of the context's last token, the
// length of the repeat ending there (the tokens before it matching the context's tail, up to
// kDryMaxLength, never across a breaker); the token that followed it would extend the repeat.
// Each such token's logit is lowered by multiplier * base^(length - allowed) for its longest.
void Sampler::ApplyDry(float* logits, const int32_t* history, int n_history) {
  if (p_.dry_multiplier <= 0 || p_.dry_penalty_last_n == 0 || n_history < 2) return;
  const int start = p_.dry_penalty_last_n < 0 ? 0 : std::max(0, n_history - p_.dry_penalty_last_n);
  const int32_t* h = history + start;
  const int n = n_history - start;
  auto breaks = [&](int32_t id) { return breaker_[static_cast<size_t>(id)] != 0; };
  if (n < 2 || breaks(h[n - 1])) return;
  dry_touched_.clear();
  for (int i = n - 2; i >= 0; --i) {  // i: the end of an earlier occurrence
    int len = 0;
    while (len < kDryMaxLength && i - len >= 0 && h[i - len] == h[n - 1 - len] &&
           !breaks(h[i - len]))
      ++len;
    if (len < p_.dry_allowed_length) continue;
    const int32_t next = h[i + 1];
    int32_t& best = dry_len_[static_cast<size_t>(next)];
    if (best == 0) dry_touched_.push_back(next);
    best = std::max(best, static_cast<int32_t>(len));
  }
  for (int32_t id : dry_touched_) {
    int32_t& len = dry_len_[static_cast<size_t>(id)];
    logits[id] -=
        p_.dry_multiplier * std::pow(p_.dry_base, static_cast<float>(len - p_.dry_allowed_length));
    len = 0;
  }
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
  ApplyDry(logits, history, n_history);
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
  if (p_.mirostat != 0) {
    std::sort(cand_.begin(), cand_.begin() + static_cast<long>(n), desc);
    n_ = Mirostat(n);
    return;
  }
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < n) {
    std::nth_element(cand_.begin(), cand_.begin() + p_.top_k, cand_.begin() + static_cast<long>(n),
                     desc);
    n = static_cast<size_t>(p_.top_k);
  }
  std::sort(cand_.begin(), cand_.begin() + static_cast<long>(n), desc);
  if (p_.typical_p < 1.0f) n = Typical(n);
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
  if (p_.xtc_probability > 0.0f) n = Xtc(n);
  Tempered(n);
}

// w_ = the candidates' probabilities at the temperature (unnormalized; total_ their sum).
void Sampler::Tempered(size_t n) {
  const float mx = cand_[0].logit;
  total_ = 0;
  for (size_t i = 0; i < n; ++i) {
    w_[i] = std::exp(static_cast<double>(cand_[i].logit - mx) / p_.temperature);
    total_ += w_[i];
  }
  n_ = n;
}

// Locally typical sampling over the n sorted candidates: those whose surprise is closest to the
// distribution's entropy, until their mass reaches typical_p; kept in logit order.
size_t Sampler::Typical(size_t n) {
  if (n < 2) return n;
  const float mx = cand_[0].logit;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(cand_[i].logit - mx));
  const double log_sum = std::log(sum);
  double entropy = 0;
  for (size_t i = 0; i < n; ++i) {
    const double lp = static_cast<double>(cand_[i].logit - mx) - log_sum;
    entropy -= std::exp(lp) * lp;
  }
  // tmp_: the candidates by |surprise - entropy| (ties: logit order), logit carried along.
  for (size_t i = 0; i < n; ++i) {
    const double lp = static_cast<double>(cand_[i].logit - mx) - log_sum;
    w_[i] = std::fabs(-lp - entropy);
    tmp_[i] = {static_cast<float>(i), cand_[i].id};  // logit slot: the index, restored below
  }
  std::stable_sort(tmp_.begin(), tmp_.begin() + static_cast<long>(n),
                   [&](const Candidate& a, const Candidate& b) {
                     return w_[static_cast<size_t>(a.logit)] < w_[static_cast<size_t>(b.logit)];
                   });
  double cum = 0;
  size_t keep = n;
  for (size_t k = 0; k < n; ++k) {
    const size_t i = static_cast<size_t>(tmp_[k].logit);
    cum += std::exp(static_cast<double>(cand_[i].logit - mx) - log_sum);
    if (cum >= p_.typical_p) {
      keep = k + 1;
      break;
    }
  }
  // The kept ones back in logit order: mark them, then compact cand_ in place.
  for (size_t k = 0; k < keep; ++k) w_[static_cast<size_t>(tmp_[k].logit)] = -1;
  size_t out = 0;
  for (size_t i = 0; i < n; ++i)
    if (w_[i] < 0) cand_[out++] = cand_[i];
  return out;
}

// XTC ("exclude top choices"): with probability xtc_probability, every candidate at or above
// xtc_threshold except the least likely of them is removed (nothing when fewer than two are).
size_t Sampler::Xtc(size_t n) {
  if (n < 2 || Uniform() >= p_.xtc_probability) return n;
  const float mx = cand_[0].logit;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(cand_[i].logit - mx));
  size_t above = 0;  // candidates with p >= threshold (a prefix: they are sorted)
  while (above < n && std::exp(static_cast<double>(cand_[above].logit - mx)) / sum >=
                          static_cast<double>(p_.xtc_threshold))
    ++above;
  if (above < 2) return n;
  const size_t drop = above - 1;
  for (size_t i = drop; i < n; ++i) cand_[i - drop] = cand_[i];
  return n - drop;
}

// Mirostat over the n candidates in logit order, at the temperature: v2 keeps the tokens whose
// surprise (-log2 p) is at most mu; v1 estimates the Zipf exponent from the top 100 and keeps
// the top k that target mu. Draw() moves mu toward tau by the chosen token's surprise.
size_t Sampler::Mirostat(size_t n) {
  Tempered(n);
  if (p_.mirostat == 2) {
    size_t keep = 1;
    while (keep < n && -std::log2(w_[keep] / total_) <= mu_) ++keep;
    n = keep;
  } else {
    const size_t m = std::min<size_t>(100, n);
    double sum_ti_bi = 0, sum_ti_sq = 0;
    for (size_t i = 0; i + 1 < m; ++i) {
      const double t_i = std::log(static_cast<double>(i + 2) / static_cast<double>(i + 1));
      const double b_i = std::log(w_[i] / w_[i + 1]);
      sum_ti_bi += t_i * b_i;
      sum_ti_sq += t_i * t_i;
    }
    const double s_hat = sum_ti_sq > 0 ? sum_ti_bi / sum_ti_sq : 1.0;
    const double eps = s_hat - 1;
    double k = static_cast<double>(n_vocab_);
    if (std::fabs(eps) > 1e-9 && s_hat > 0)
      k = std::pow(eps * std::exp2(mu_) / (1 - std::pow(static_cast<double>(n_vocab_), -eps)),
                   1 / s_hat);
    if (!(k >= 1)) k = 1;  // (NaN too)
    n = std::min(n, static_cast<size_t>(std::min(k, static_cast<double>(n))));
  }
  total_ = 0;
  for (size_t i = 0; i < n; ++i) total_ += w_[i];
  return n;
}

int Sampler::Draw() {
  size_t pick = n_ - 1;
  if (n_ == 1) {
    if (p_.temperature > 0.0f) (void)Uniform();  // a draw is a draw: the generator advances
    pick = 0;
  } else {
    const double u = Uniform() * total_;
    double acc = 0;
    for (size_t i = 0; i < n_; ++i) {
      acc += w_[i];
      if (u < acc) {
        pick = i;
        break;
      }
    }
  }
  if (p_.mirostat != 0 && p_.temperature > 0.0f) {
    const double surprise = -std::log2(w_[pick] / total_);
    mu_ -= static_cast<double>(p_.mirostat_eta) * (surprise - static_cast<double>(p_.mirostat_tau));
  }
  return cand_[pick].id;
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
