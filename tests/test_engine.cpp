// Engine behaviour around generation: stop strings, cancellation, EOS, context, bad options.
#include <gtest/gtest.h>

#include <string>

#include "paddock/error.h"
#include "paddock/paddock.h"
#include "test_util.h"

namespace paddock {
namespace {

std::unique_ptr<Engine> Stories(int context = 0) {
  EngineOptions eo;
  eo.model_path = test::ModelPath("stories260K.bin");
  eo.tokenizer_path = test::ModelPath("tok512.bin");
  eo.context = context;
  return Engine::Create(eo);
}

using test::Greedy;

TEST(Engine, StopStringEndsGenerationAndIsNotEmitted) {
  auto e = Stories();
  GenerateOptions o = Greedy(200);
  o.stop = {"park"};
  std::string streamed;
  GenerateResult r = e->Generate("", o, [&](std::string_view t) {
    streamed += t;
    return true;
  });
  EXPECT_EQ(r.finish, FinishReason::kStop);
  EXPECT_EQ(
      r.text,
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the ");
  EXPECT_EQ(streamed, r.text);
}

TEST(Engine, StopStringSpanningTokensIsHeldBackThenReleased) {
  auto e = Stories();
  GenerateOptions o = Greedy(30);
  o.stop = {"little boy"};  // "little" appears, "little boy" does not
  std::string streamed;
  GenerateResult r = e->Generate("", o, [&](std::string_view t) {
    streamed += t;
    return true;
  });
  EXPECT_EQ(r.finish, FinishReason::kLength);
  EXPECT_EQ(streamed, r.text);
  EXPECT_NE(r.text.find("little girl"), std::string::npos);
}

TEST(Engine, CallbackCanCancel) {
  auto e = Stories();
  int calls = 0;
  GenerateResult r = e->Generate("", Greedy(100), [&](std::string_view) { return ++calls < 5; });
  EXPECT_EQ(r.finish, FinishReason::kCancelled);
  EXPECT_EQ(calls, 5);
  EXPECT_EQ(r.generated_tokens, 5);
}

TEST(Engine, ContextLimitStopsGenerationCleanly) {
  auto e = Stories(32);
  GenerateResult r = e->Generate("Once upon a time", Greedy(100));
  EXPECT_EQ(r.finish, FinishReason::kContext);
  // The stop rule of the engine and the service alike: prompt + generated fill the context.
  EXPECT_EQ(r.prompt_tokens + r.generated_tokens, 32);
  GenerateOptions o = Greedy(5);
  std::string long_prompt;
  for (int i = 0; i < 40; ++i) long_prompt += " Lily";
  EXPECT_THROW(e->Generate(long_prompt, o), Error);
}

TEST(Engine, SeededSamplingIsReproducible) {
  auto e = Stories();
  GenerateOptions o;
  o.max_tokens = 40;
  o.sampling.seed = 1234;
  const std::string a = e->Generate("Lily", o).text;
  EXPECT_EQ(e->Generate("Lily", o).text, a);
  o.sampling.seed = 99;
  EXPECT_NE(e->Generate("Lily", o).text, a);
}

TEST(Engine, IgnoreEosKeepsGoing) {
  auto e = Stories();
  GenerateOptions o = Greedy(400);
  GenerateResult r = e->Generate("", o);
  // The greedy story ends (BOS) before 400 tokens; with ignore_eos it runs the full count.
  EXPECT_EQ(r.finish, FinishReason::kEos);
  o.ignore_eos = true;
  EXPECT_EQ(e->Generate("", o).generated_tokens, 400);
}

TEST(Engine, BadOptionsAndFilesAreErrors) {
  EngineOptions eo;
  eo.model_path = test::ModelPath("does-not-exist.gguf");
  EXPECT_THROW(Engine::Create(eo), Error);
  eo.model_path = test::ModelPath("stories260K.bin");
  EXPECT_THROW(Engine::Create(eo), Error);  // llama2.c checkpoint without its tokenizer
  eo.tokenizer_path = test::ModelPath("tokenizer.bin");
  try {
    Engine::Create(eo);
    FAIL() << "32000-token vocabulary accepted for a 512-token model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("do not belong together"), std::string::npos) << e.what();
  }
  eo.tokenizer_path = test::ModelPath("tok512.bin");
  eo.isa = "sse9";
  EXPECT_THROW(Engine::Create(eo), Error);
  eo.isa = "auto";
  eo.context = 100000;
  EXPECT_THROW(Engine::Create(eo), Error);
  eo.context = 0;
  auto e = Engine::Create(eo);
  GenerateOptions o = Greedy(-1);
  EXPECT_THROW(e->Generate("x", o), Error);
  o = Greedy(3);
  o.add_bos = false;
  EXPECT_THROW(e->Generate("", o), Error);  // nothing to condition on
  o.stop = {""};
  EXPECT_THROW(e->Generate("x", o), Error);
}

}  // namespace
}  // namespace paddock

#include "synth/synth.h"

namespace paddock {
namespace {

TEST(Bench, ReportsRooflineFiguresAndAProfileThatAddsUp) {
  SynthSpec s;
  s.dim = 512;
  s.n_heads = 8;
  s.n_kv_heads = 2;
  s.ffn_dim = 1024;
  s.n_layers = 4;
  s.context = 512;
  s.type = GgmlType::kQ4_0;
  const std::string path = test::TempPath("bench.gguf");
  WriteSyntheticModel(s, path);
  EngineOptions eo;
  eo.model_path = path;
  eo.max_batch = 64;
  eo.kv_tokens = 512;
  auto e = Engine::Create(eo);
  BenchOptions bo;
  bo.prompt_tokens = 32;
  bo.gen_tokens = 24;
  bo.batch = 3;
  bo.reps = 3;
  bo.profile = true;
  const BenchReport r = e->Bench(bo);
  EXPECT_GT(r.prefill_tps, 0);
  EXPECT_GT(r.decode_tps, 0);
  EXPECT_GT(r.batch_decode_tps, 0);
  EXPECT_LE(r.prefill_tps_min, r.prefill_tps);
  EXPECT_GE(r.prefill_tps_max, r.prefill_tps);
  EXPECT_GT(r.read_bandwidth_gbs, 0.5);
  EXPECT_GT(r.bandwidth_utilization, 0);
  // Each repetition against the probe runs around it: measured, and a share of the same order
  // as the one against the best-of-5 roofline (a pass, not the best, is its denominator).
  EXPECT_GT(r.bandwidth_utilization_paired, 0);
  EXPECT_LT(r.bandwidth_utilization_paired, 20 * r.bandwidth_utilization);
  if (r.peak_int8_gops > 0) {
    EXPECT_GT(r.compute_utilization_paired, 0);
    EXPECT_LT(r.compute_utilization_paired, 20 * r.compute_utilization);
  }
  EXPECT_GT(r.streamed_bytes, 0u);
  ASSERT_FALSE(r.profile.empty());
  double shares = 0;
  for (const auto& p : r.profile) shares += p.share;
  // The shares are the profiled time over the measured time, and the profiled
  // operators never exceed the step. How close they come is a speed figure
  // (within 5% in `paddock bench --profile` on an idle machine); here, with
  // 0.2 ms steps and other tests on both cores, a preemption between two
  // operators is unattributed, so only a loose floor is asserted.
  EXPECT_NEAR(shares, r.profiled_step_ms / r.measured_step_ms, 1e-6);
  EXPECT_LE(r.profiled_step_ms, r.measured_step_ms * 1.01);
  EXPECT_GT(r.profiled_step_ms, 0.6 * r.measured_step_ms);
}

}  // namespace
}  // namespace paddock
