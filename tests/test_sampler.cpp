#include <gtest/gtest.h>

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
