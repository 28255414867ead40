// Perplexity and model comparison: the figures behave as they must on known inputs.
#include <gtest/gtest.h>

#include <cmath>

#include "paddock/paddock.h"
#include "synth/synth.h"
#include "test_util.h"

namespace paddock {
namespace {

std::unique_ptr<Engine> Load(const std::string& path, int ctx = 0) {
  EngineOptions o;
  o.model_path = path;
  o.threads = 2;
  o.context = ctx;
  return Engine::Create(o);
}

TEST(Eval, PerplexityOfTheModelsOwnGreedyTextIsLow) {
  auto e = Load(test::ModelPath("stories260K.gguf"));
  const std::string golden = test::ReadFile(test::ModelPath("stories260K.expected_t0.txt"));
  EvalOptions o;
  o.ctx = 64;
  const PerplexityReport own = Perplexity(*e, golden, o);
  // llama.cpp's windows: the text with BOS cut every 64 tokens, positions 32..62 scored.
  EXPECT_EQ(own.windows, static_cast<int>(e->Tokenize(golden, true).size() / 64));
  EXPECT_EQ(own.scored, static_cast<int64_t>(own.windows) * 31);
  // The earlier scheme, as an option: BOS + 63 text tokens, positions 31..62 scored.
  EvalOptions old = o;
  old.bos_prefix = true;
  const PerplexityReport prefixed = Perplexity(*e, golden, old);
  EXPECT_EQ(prefixed.windows, static_cast<int>(e->Tokenize(golden, false).size() / 63));
  EXPECT_EQ(prefixed.scored, static_cast<int64_t>(prefixed.windows) * 32);
  EXPECT_GT(own.ppl, 1.0);
  EXPECT_LT(own.ppl, 3.0);  // greedy text the model wrote itself
  EXPECT_GT(own.ppl_se, 0.0);
  // Scrambled words are much less likely.
  std::string scrambled;
  for (size_t i = 0; i + 7 < golden.size(); i += 7)
    scrambled += golden.substr((i * 7919) % (golden.size() - 7), 7);
  EXPECT_GT(Perplexity(*e, scrambled, o).ppl, 3 * own.ppl);
  // Too short for one window: a clear error.
  EXPECT_THROW(Perplexity(*e, "Once upon", o), Error);
}

// The windowing is llama.cpp's to the token: recompute the first two windows by hand (tokens
// cut every ctx with BOS written over each window's first token; NLL of token p + 1 from the
// logits at p for p = ctx/2 .. ctx-2).
TEST(Eval, PerplexityWindowsAreLlamaCppsToTheToken) {
  auto e = Load(test::ModelPath("stories260K.gguf"));
  const std::string text = test::ReadFile(test::ModelPath("stories260K.expected_t0.txt"));
  const int ctx = 48;
  const std::vector<int32_t> all = e->Tokenize(text, true);
  const int bos = all[0];
  double nll = 0;
  int64_t n = 0;
  for (int k = 0; k < 2; ++k) {
    std::vector<int32_t> win(all.begin() + k * ctx, all.begin() + (k + 1) * ctx);
    win[0] = bos;
    std::vector<int32_t> head(win.begin(), win.end() - 1);
    const float* logits = e->EvaluateAll(head, 0);
    const int V = e->info().n_vocab;
    for (int p = ctx / 2; p <= ctx - 2; ++p) {
      const float* row = logits + static_cast<size_t>(p) * static_cast<size_t>(V);
      double mx = row[0], sum = 0;
      for (int t = 1; t < V; ++t) mx = std::max(mx, static_cast<double>(row[t]));
      for (int t = 0; t < V; ++t) sum += std::exp(row[t] - mx);
      nll += -(row[win[static_cast<size_t>(p + 1)]] - mx - std::log(sum));
      ++n;
    }
  }
  EvalOptions o;
  o.ctx = ctx;
  o.max_windows = 2;
  const PerplexityReport r = Perplexity(*e, text, o);
  EXPECT_EQ(r.scored, n);
  EXPECT_NEAR(r.mean_nll, nll / static_cast<double>(n), 1e-9);
}

TEST(Eval, CompareAgainstItselfAndAnotherModel) {
  const std::string golden = test::ReadFile(test::ModelPath("stories260K.expected_t0.txt"));
  auto a = Load(test::ModelPath("stories260K.gguf"));
  EvalOptions o;
  o.ctx = 64;
  o.worst = 3;
  auto a2 = Load(test::ModelPath("stories260K.gguf"));
  const CompareReport self = Compare(*a, *a2, golden, o);
  EXPECT_NEAR(self.kl, 0.0, 1e-9);
  EXPECT_DOUBLE_EQ(self.top1_agreement, 1.0);
  EXPECT_DOUBLE_EQ(self.a.ppl, self.b.ppl);
  EXPECT_NEAR(self.a.ppl, Perplexity(*a, golden, o).ppl, 1e-9);
  EXPECT_EQ(self.worst.size(), 3u);
  // Two different random models over one vocabulary disagree.
  SynthSpec s = SynthPreset("tiny");
  s.context = 128;
  const std::string p1 = test::TempPath("eval-a.gguf"), p2 = test::TempPath("eval-b.gguf");
  WriteSyntheticModel(s, p1);
  s.seed = 99;
  WriteSyntheticModel(s, p2);
  auto m1 = Load(p1), m2 = Load(p2);
  EXPECT_THROW(Compare(*a, *m1, golden, o), Error);  // different vocabularies
  const CompareReport diff = Compare(*m1, *m2, golden, o);
  EXPECT_GT(diff.kl, 1e-3);
  EXPECT_LT(diff.top1_agreement, 1.0);
  EXPECT_GE(diff.kl_max, diff.worst[0].kl - 1e-12);
  EXPECT_GE(diff.worst[0].kl, diff.worst[1].kl);
}

}  // namespace
}  // namespace paddock
