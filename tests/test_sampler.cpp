#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "engine/sampler.h"
#include "paddock/error.h"

namespace paddock {
namespace {

SamplingParams Params(float temp, int top_k = 0, float top_p = 1.0f, float min_p = 0.0f) {
  SamplingParams p;
  p.temperature = temp;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

TEST(Sampler, GreedyPicksTheFirstMaximum) {
  Sampler s(5);
  s.Reset(Params(0));
  std::vector<float> l = {0.1f, 3.0f, -1.0f, 3.0f, 2.0f};
  EXPECT_EQ(s.Sample(l.data(), nullptr, 0), 1);
}

TEST(Sampler, SameSeedSameTokensAndDifferentSeedDiffers) {
  std::vector<float> base(100);
  for (int i = 0; i < 100; ++i) base[i] = std::sin(i * 0.7f);
  auto draw = [&](uint64_t seed) {
    Sampler s(100);
    SamplingParams p = Params(1.0f);
    p.seed = seed;
    s.Reset(p);
    std::vector<int> out;
    for (int k = 0; k < 50; ++k) {
      auto l = base;
      out.push_back(s.Sample(l.data(), nullptr, 0));
    }
    return out;
  };
  EXPECT_EQ(draw(42), draw(42));
  EXPECT_NE(draw(42), draw(43));
}

TEST(Sampler, TopKOneIsGreedyAndTopKLimitsTheSupport) {
  std::vector<float> base = {1.0f, 5.0f, 4.0f, 3.0f, 0.0f, -2.0f};
  Sampler s(6);
  s.Reset(Params(1.0f, 1));
  for (int k = 0; k < 20; ++k) {
    auto l = base;
    EXPECT_EQ(s.Sample(l.data(), nullptr, 0), 1);
  }
  s.Reset(Params(5.0f, 3));
  for (int k = 0; k < 300; ++k) {
    auto l = base;
    const int t = s.Sample(l.data(), nullptr, 0);
    EXPECT_TRUE(t == 1 || t == 2 || t == 3) << t;
  }
}

TEST(Sampler, TopPAndMinPCutTheTail) {
  // Probabilities ~ {0.6, 0.3, 0.1 (spread over many)}.
  std::vector<float> base(12, std::log(0.01f));
  base[0] = std::log(0.6f);
  base[1] = std::log(0.3f);
  Sampler s(12);
  s.Reset(Params(1.0f, 0, 0.85f));
  for (int k = 0; k < 300; ++k) {
    auto l = base;
    const int t = s.Sample(l.data(), nullptr, 0);
    EXPECT_TRUE(t == 0 || t == 1) << t;
  }
  s.Reset(Params(1.0f, 0, 1.0f, 0.6f));  // keep p >= 0.6 * 0.6 = 0.36: only token 0
  for (int k = 0; k < 50; ++k) {
    auto l = base;
    EXPECT_EQ(s.Sample(l.data(), nullptr, 0), 0);
  }
}

TEST(Sampler, TemperatureFollowsTheDistribution) {
  std::vector<float> base = {std::log(0.7f), std::log(0.2f), std::log(0.1f)};
  Sampler s(3);
  s.Reset(Params(1.0f));
  std::map<int, int> hist;
  const int n = 20000;
  for (int k = 0; k < n; ++k) {
    auto l = base;
    hist[s.Sample(l.data(), nullptr, 0)]++;
  }
  EXPECT_NEAR(hist[0] / double(n), 0.7, 0.02);
  EXPECT_NEAR(hist[1] / double(n), 0.2, 0.02);
  EXPECT_NEAR(hist[2] / double(n), 0.1, 0.02);
}

TEST(Sampler, PenaltiesDemoteRepeatedTokens) {
  Sampler s(4);
  SamplingParams p = Params(0);
  p.repeat_penalty = 2.0f;
  s.Reset(p);
  std::vector<float> l = {2.0f, 1.5f, 0.0f, -1.0f};
  const int32_t hist[] = {0};
  EXPECT_EQ(s.Sample(l.data(), hist, 1), 1);  // 2.0 / 2 = 1.0 < 1.5
  EXPECT_FLOAT_EQ(l[0], 1.0f);
  p.repeat_penalty = 1.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  s.Reset(p);
  std::vector<float> l2 = {2.0f, 1.5f, 0.0f, -1.0f};
  const int32_t hist2[] = {0, 3, 0};
  s.Sample(l2.data(), hist2, 3);
  EXPECT_FLOAT_EQ(l2[0], 2.0f - 2 * 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(l2[3], -1.0f - 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(l2[1], 1.5f);
}

TEST(Sampler, LogitBiasBansAndForcesTokens) {
  Sampler s(5);
  const std::vector<float> base = {0.1f, 3.0f, -1.0f, 2.5f, 2.0f};
  SamplingParams p = Params(0);
  p.logit_bias = {{1, -100.0f}};
  s.Reset(p);
  std::vector<float> l = base;
  EXPECT_EQ(s.Sample(l.data(), nullptr, 0), 3);  // the argmax banned: the next best
  p = Params(1.0f);
  p.logit_bias = {{2, 100.0f}};
  s.Reset(p);
  for (int i = 0; i < 200; ++i) {
    l = base;
    EXPECT_EQ(s.Sample(l.data(), nullptr, 0), 2);  // +100 all but forces it
  }
  p.logit_bias = {{5, 1.0f}};
  EXPECT_THROW(s.Reset(p), Error);  // outside the vocabulary
  p.logit_bias = {{0, 101.0f}};
  EXPECT_THROW(s.Reset(p), Error);
}

TEST(Sampler, OutOfRangeParametersAreRejected) {
  Sampler s(4);
  EXPECT_THROW(s.Reset(Params(-1)), Error);
  EXPECT_THROW(s.Reset(Params(1, -1)), Error);
  EXPECT_THROW(s.Reset(Params(1, 0, 0.0f)), Error);
  EXPECT_THROW(s.Reset(Params(1, 0, 1.5f)), Error);
  EXPECT_THROW(s.Reset(Params(1, 0, 1.0f, 2.0f)), Error);
  EXPECT_THROW(s.Reset(Params(NAN)), Error);
}

}  // namespace
}  // namespace paddock

namespace paddock {
namespace {

// The candidate ids Prepare() left, as a set.
std::vector<int32_t> Kept(const Sampler& s) {
  std::vector<int32_t> ids;
  for (int i = 0; i < s.n_candidates(); ++i) ids.push_back(s.candidates()[i].id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::vector<double> Softmax(const std::vector<float>& l) {
  double mx = l[0], sum = 0;
  for (float x : l) mx = std::max(mx, static_cast<double>(x));
  std::vector<double> p(l.size());
  for (size_t i = 0; i < l.size(); ++i) sum += p[i] = std::exp(l[i] - mx);
  for (double& x : p) x /= sum;
  return p;
}

std::vector<float> Logits(int n, float scale) {
  std::vector<float> l(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) l[static_cast<size_t>(i)] = scale * std::sin(1.3f * i + 0.2f);
  return l;
}

// Typical-p against a reference: tokens by |-log p - H| ascending until their mass reaches p.
TEST(Sampler, TypicalPKeepsTheTokensNearestTheEntropy) {
  for (float tp : {0.2f, 0.5f, 0.9f}) {
    const std::vector<float> l = Logits(40, 3.0f);
    const std::vector<double> p = Softmax(l);
    double h = 0;
    for (double x : p) h -= x * std::log(x);
    std::vector<int> order(p.size());
    for (size_t i = 0; i < p.size(); ++i) order[i] = static_cast<int>(i);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      // ties in |surprise - H| keep logit order, as the sampler's stable sort does
      const double da = std::fabs(-std::log(p[a]) - h), db = std::fabs(-std::log(p[b]) - h);
      return da < db || (da == db && (l[a] > l[b] || (l[a] == l[b] && a < b)));
    });
    std::vector<int32_t> want;
    double cum = 0;
    for (int id : order) {
      want.push_back(id);
      cum += p[static_cast<size_t>(id)];
      if (cum >= tp) break;
    }
    std::sort(want.begin(), want.end());
    Sampler s(40);
    SamplingParams sp = Params(1.0f);
    sp.typical_p = tp;
    s.Reset(sp);
    auto work = l;
    s.Prepare(work.data(), nullptr, 0);
    EXPECT_EQ(Kept(s), want) << "typical_p " << tp;
    for (int i = 1; i < s.n_candidates(); ++i)  // still in logit order for what follows
      EXPECT_GE(s.candidates()[i - 1].logit, s.candidates()[i].logit);
  }
}

// XTC at probability 1 against a reference: all tokens at or above the threshold but the least
// likely of them are removed; with one or none above it, nothing is.
TEST(Sampler, XtcRemovesTheTopChoicesButTheLastAboveTheThreshold) {
  const std::vector<float> l = {2.0f, 1.9f, 1.8f, 0.0f, -1.0f, -2.0f};
  const std::vector<double> p = Softmax(l);
  for (float th : {0.05f, 0.2f, 0.5f}) {
    std::vector<int32_t> want;
    int above = 0;
    for (double x : p) above += x >= th;
    for (int i = 0; i < 6; ++i)
      if (above < 2 || i >= above - 1) want.push_back(i);
    Sampler s(6);
    SamplingParams sp = Params(1.0f);
    sp.xtc_probability = 1.0f;
    sp.xtc_threshold = th;
    s.Reset(sp);
    auto work = l;
    s.Prepare(work.data(), nullptr, 0);
    EXPECT_EQ(Kept(s), want) << "threshold " << th;
  }
  Sampler s(6);  // probability 0: off
  SamplingParams sp = Params(1.0f);
  sp.xtc_threshold = 0.05f;
  s.Reset(sp);
  auto work = l;
  s.Prepare(work.data(), nullptr, 0);
  EXPECT_EQ(s.n_candidates(), 6);
}

// Mirostat 2.0 against a reference: the tokens with surprise -log2 p <= mu (mu starts at 2 tau),
// then mu -= eta (surprise of the pick among them - tau), draw after draw.
TEST(Sampler, Mirostat2TruncatesBySurpriseAndTracksTheTarget) {
  const std::vector<float> l = Logits(64, 4.0f);
  Sampler s(64);
  SamplingParams sp = Params(1.0f);
  sp.mirostat = 2;
  sp.mirostat_tau = 3.0f;
  sp.mirostat_eta = 0.5f;
  sp.seed = 7;
  s.Reset(sp);
  double mu = 2 * 3.0;
  const std::vector<double> p = Softmax(l);
  for (int step = 0; step < 20; ++step) {
    std::vector<int32_t> want;
    double kept_mass = 0;
    int best = 0;
    for (int i = 0; i < 64; ++i)
      best = p[static_cast<size_t>(i)] > p[static_cast<size_t>(best)] ? i : best;
    for (int i = 0; i < 64; ++i)
      if (-std::log2(p[static_cast<size_t>(i)]) <= mu || i == best) want.push_back(i);
    for (int32_t id : want) kept_mass += p[static_cast<size_t>(id)];
    auto work = l;
    s.Prepare(work.data(), nullptr, 0);
    ASSERT_EQ(Kept(s), want) << "step " << step;
    const int t = s.Draw();
    mu -= 0.5 * (-std::log2(p[static_cast<size_t>(t)] / kept_mass) - 3.0);
  }
}

// Mirostat 1.0 keeps a top-k prefix whose size follows mu, and never fewer than one token.
TEST(Sampler, Mirostat1KeepsATopKPrefix) {
  const std::vector<float> l = Logits(200, 5.0f);
  Sampler s(200);
  SamplingParams sp = Params(0.8f);
  sp.mirostat = 1;
  s.Reset(sp);
  for (int step = 0; step < 10; ++step) {
    auto work = l;
    s.Prepare(work.data(), nullptr, 0);
    ASSERT_GE(s.n_candidates(), 1);
    for (int i = 1; i < s.n_candidates(); ++i)
      EXPECT_GE(s.candidates()[i - 1].logit, s.candidates()[i].logit);
    s.Draw();
  }
}

// DRY against a brute-force reference: for every earlier position where the context's tail
// repeats (at least allowed tokens, never across a breaker), the token that followed loses
// multiplier * base^(length - allowed), by its longest repeat.
TEST(Sampler, DryPenalizesTheTokenThatWouldExtendARepeat) {
  const int V = 16;
  const std::vector<int32_t> h = {1, 2, 3, 4, 5, 1, 2, 3, 9, 7, 1, 2, 3, 4, 0, 1, 2, 3};
  const int breaker = 0;  // token 0 is a breaker ("\n")
  SamplingParams sp = Params(1.0f);
  sp.dry_multiplier = 0.8f;
  sp.dry_base = 1.75f;
  sp.dry_allowed_length = 2;
  sp.dry_breaker_tokens = {breaker};
  std::vector<int> longest(V, 0);
  const int n = static_cast<int>(h.size());
  for (int i = 0; i + 1 < n; ++i) {
    int len = 0;
    while (i - len >= 0 && h[i - len] == h[n - 1 - len] && h[i - len] != breaker) ++len;
    if (len >= 2 && i != n - 1) longest[h[i + 1]] = std::max(longest[h[i + 1]], len);
  }
  std::vector<float> want(V, 0.5f);
  for (int id = 0; id < V; ++id)
    if (longest[id] > 0) want[id] -= 0.8f * std::pow(1.75f, static_cast<float>(longest[id] - 2));
  Sampler s(V);
  s.Reset(sp);
  std::vector<float> work(V, 0.5f);
  s.Prepare(work.data(), h.data(), n);
  for (int id = 0; id < V; ++id) EXPECT_FLOAT_EQ(work[id], want[id]) << "token " << id;
  EXPECT_LT(work[4], 0.5f);  // "1 2 3" was followed by 4 and by 9
  EXPECT_LT(work[9], 0.5f);
  EXPECT_EQ(work[7], 0.5f);
  // The tail ends in a breaker: nothing is penalized.
  std::vector<int32_t> h2 = h;
  h2.push_back(breaker);
  std::vector<float> work2(V, 0.5f);
  s.Reset(sp);
  s.Prepare(work2.data(), h2.data(), static_cast<int>(h2.size()));
  for (int id = 0; id < V; ++id) EXPECT_EQ(work2[id], 0.5f);
}

TEST(Sampler, LlamaSamplerRangesAreChecked) {
  Sampler s(10);
  auto bad = [&](auto set) {
    SamplingParams p = Params(1.0f);
    set(p);
    EXPECT_THROW(s.Reset(p), Error);
  };
  bad([](SamplingParams& p) { p.typical_p = 0; });
  bad([](SamplingParams& p) { p.xtc_probability = 1.5f; });
  bad([](SamplingParams& p) { p.mirostat = 3; });
  bad([](SamplingParams& p) { p.dry_base = 0.5f; });
  bad([](SamplingParams& p) { p.dry_allowed_length = 0; });
  bad([](SamplingParams& p) { p.dry_sequence_breakers = {""}; });
}

}  // namespace
}  // namespace paddock
