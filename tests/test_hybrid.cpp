// Hybrid recurrent models (Qwen3.5's Gated DeltaNet, LFM2's short convolutions) in the engine:
// the state carried across prompt chunks, speculative decoding putting the state back before
// it recomputes the accepted tokens (greedy text exact), the memory report.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "cpu/transformer.h"
#include "kernels/kernels.h"
#include "kv/kv_manager.h"
#include "model/weights.h"
#include "paddock/error.h"
#include "paddock/paddock.h"
#include "paddock/service.h"
#include "synth/synth.h"
#include "test_util.h"

namespace paddock {
namespace {

using test::Greedy;

std::string HybridModel(const std::string& preset, GgmlType type, float mixer_scale = 1.0f) {
  SynthSpec spec = SynthPreset(preset);
  spec.type = type;
  spec.mixer_scale = mixer_scale;
  spec.context = 2048;
  const std::string path =
      test::TempPath("hybrid-" + preset + "-" + TypeName(type) + "-" +
                     std::to_string(static_cast<int>(mixer_scale * 100)) + ".gguf");
  WriteSyntheticModel(spec, path);
  return path;
}

std::unique_ptr<Engine> MakeEngine(const std::string& path, int max_batch = 64,
                                   const std::string& spec = "off", bool chunked = true) {
  EngineOptions eo;
  eo.model_path = path;
  eo.threads = 2;
  eo.max_batch = max_batch;
  eo.spec = spec;
  eo.spec_max = 4;
  eo.spec_fixed = true;  // (drafts every step: the controller's cost curve is measured, timed)
  eo.forward.chunked_delta = chunked;
  return Engine::Create(eo);
}

// The prompts submitted together to a service speculating with `spec` (steps of max_batch
// tokens): each text equals plain decoding alone. Returns the service's statistics.
ServiceStats ServiceMatchesAlone(const std::string& path, const std::vector<std::string>& prompts,
                                 int max_batch, const std::string& spec, int tokens) {
  std::vector<std::string> plain;
  auto e = MakeEngine(path, max_batch);
  for (const std::string& p : prompts) plain.push_back(e->Generate(p, Greedy(tokens, true)).text);
  auto svc = Service::Create(MakeEngine(path, max_batch, spec), ServiceOptions{});
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const std::string& p : prompts) {
    RequestOptions o;
    o.generate = Greedy(tokens, true);
    std::shared_ptr<RequestStream> st;
    EXPECT_EQ(svc->Submit(svc->engine().Tokenize(p, true), o, &st), SubmitStatus::kAccepted);
    streams.push_back(st);
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    std::string text;
    while (streams[i] && streams[i]->Wait(&text, 60) != RequestStream::Status::kDone) {
    }
    EXPECT_EQ(text, plain[i]) << prompts[i];
  }
  return svc->Stats();
}

const char* const kPresets[] = {"tiny-qwen35", "tiny-qwen35moe", "tiny-lfm2"};

// A prompt run in steps of 7 tokens (the state carried from step to step) gives the text of the
// prompt in one step, token by token; with the chunked delta rule, steps of 64 (a chunk each)
// give the text of steps of 256.
TEST(Hybrid, ChunkedPrefillCarriesTheState) {
  std::string prompt;
  for (int i = 0; prompt.size() < 190; ++i) prompt += "the " + std::to_string(i % 11) + " dog ";
  for (const char* preset : kPresets) {
    SCOPED_TRACE(preset);
    const std::string path = HybridModel(preset, GgmlType::kQ8_0);
    const GenerateOptions g = Greedy(32, true);
    const GenerateResult whole = MakeEngine(path, 64, "off", false)->Generate(prompt, g);
    EXPECT_EQ(MakeEngine(path, 7, "off", false)->Generate(prompt, g).text, whole.text);
    EXPECT_GE(whole.prompt_tokens, 128);
    EXPECT_EQ(whole.cached_tokens, 0);
    EXPECT_EQ(MakeEngine(path, 64)->Generate(prompt, g).text,
              MakeEngine(path, 256)->Generate(prompt, g).text);
  }
}

// The chunked delta rule against token by token: the prompt's last logits within rounding,
// and the greedy text the same.
TEST(Hybrid, ChunkedDeltaRuleAgreesWithTokenByToken) {
  std::string prompt;
  for (int i = 0; prompt.size() < 250; ++i) prompt += "a " + std::to_string(i % 13) + " b ";
  for (const char* preset : {"tiny-qwen35", "tiny-qwen35moe"}) {
    SCOPED_TRACE(preset);
    const std::string path = HybridModel(preset, GgmlType::kF32);
    GenerateResult r[2];
    for (int chunked = 0; chunked < 2; ++chunked) {
      EngineOptions eo;
      eo.model_path = path;
      eo.threads = 2;
      eo.forward.chunked_delta = chunked != 0;
      auto svc = Service::Create(Engine::Create(eo), ServiceOptions{});
      const std::vector<int32_t> toks = svc->engine().Tokenize(prompt, true);
      ASSERT_GE(toks.size(), 128u);  // two whole chunks at least
      RequestOptions o;
      o.generate = Greedy(32, true);
      o.generate.logprobs = 8;  // the first token's: the prompt's last logits
      std::shared_ptr<RequestStream> st;
      ASSERT_EQ(svc->Submit(toks, o, &st), SubmitStatus::kAccepted);
      std::string text;
      while (st->Wait(&text, 60) != RequestStream::Status::kDone) {
      }
      r[chunked] = st->result();
    }
    ASSERT_FALSE(r[0].logprobs.empty() || r[1].logprobs.empty());
    double worst = 0;
    for (size_t i = 0; i < r[0].logprobs[0].top.size(); ++i) {
      EXPECT_EQ(r[0].logprobs[0].top[i].token, r[1].logprobs[0].top[i].token);
      worst = std::max(worst, std::fabs(static_cast<double>(r[0].logprobs[0].top[i].logprob) -
                                        r[1].logprobs[0].top[i].logprob));
    }
    EXPECT_LT(worst, 1e-3);
    EXPECT_GT(worst, 0);  // (another path: not the same bits)
    EXPECT_EQ(r[0].text, r[1].text);
  }
}

// Drafts run through the recurrent state; where some are rejected the state is put back and
// the accepted ones recomputed, so greedy text is plain decoding's. Small mixer outputs make
// the text repeat, so n-gram drafts are accepted, and rejected too.
TEST(Hybrid, SpeculationPutsTheStateBack) {
  for (const char* preset : kPresets) {
    SCOPED_TRACE(preset);
    const std::string path = HybridModel(preset, GgmlType::kF32, 0.05f);
    const GenerateResult plain = MakeEngine(path)->Generate("the cat sat", Greedy(200, true));
    const GenerateResult spec =
        MakeEngine(path, 64, "ngram")->Generate("the cat sat", Greedy(200, true));
    EXPECT_EQ(spec.text, plain.text);
    EXPECT_GT(spec.accepted_tokens, 0);
    EXPECT_LT(spec.accepted_tokens, spec.draft_tokens);
    std::fprintf(stderr, "%s: %d drafted, %d accepted\n", preset, spec.draft_tokens,
                 spec.accepted_tokens);
  }
}

// The same in the service: requests batched, some verifying drafts while others decode or
// prefill; each text equals plain decoding alone.
TEST(Hybrid, ServiceSpeculationPutsTheStateBack) {
  const ServiceStats st = ServiceMatchesAlone(
      HybridModel("tiny-lfm2", GgmlType::kF32, 0.05f),
      {"the cat sat", "a dog ran to the", "once", "the big red bird flew"}, 64, "ngram", 120);
  EXPECT_GT(st.spec_accepted_tokens, 0u);
  EXPECT_LT(st.spec_accepted_tokens, st.spec_draft_tokens);
}

// A verification's recurrent states put back and replayed over the accepted tokens
// (Backend::ReplayState) equal, bit for bit, the states after running those tokens again, for
// both kinds of recurrent layer and any number accepted.
TEST(Hybrid, ReplayedStateEqualsRecomputed) {
  for (const char* preset : {"tiny-qwen35", "tiny-lfm2"}) {
    SCOPED_TRACE(preset);
    auto m = LoadModel(HybridModel(preset, GgmlType::kQ8_0));
    ThreadPool pool(2);
    Transformer tf(*m, GetKernels(DetectIsa()), pool, 32);
    KvCacheOptions ko;
    ko.prefix_cache = false;
    KvManager kv(m->config, ko, 256, &tf);
    const KvManager::SeqId seq = kv.Create(128);
    std::vector<int32_t> toks(25);
    for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<int32_t>(3 + (i * 37) % 250);
    ASSERT_TRUE(kv.Reserve(seq, 25));
    const KvView view = kv.View(seq);
    auto step = [&](const int32_t* t, int n, int pos, bool keep) {
      StepItem it{t, n, pos, &view, 1};
      it.keep_state_inputs = keep;
      const float* rows = nullptr;
      kv.BeginStep();
      tf.Step(&it, 1, StepOutput::kLogits, &rows);
      kv.EndStep();
    };
    step(toks.data(), 20, 0, false);
    std::vector<uint8_t> before(kv.state_bytes()), replayed(before.size()), again(before.size());
    kv.SaveState(seq, before.data());
    for (int accepted : {1, 3, 5}) {
      step(toks.data() + 20, 5, 20, true);  // the verification of 5 tokens
      kv.LoadState(seq, before.data());
      ASSERT_TRUE(tf.ReplayState(0, accepted));
      kv.SaveState(seq, replayed.data());
      kv.LoadState(seq, before.data());
      step(toks.data() + 20, accepted, 20, false);
      kv.SaveState(seq, again.data());
      EXPECT_EQ(std::memcmp(replayed.data(), again.data(), again.size()), 0) << accepted;
      EXPECT_NE(std::memcmp(replayed.data(), before.data(), before.size()), 0) << accepted;
      kv.LoadState(seq, before.data());
    }
    EXPECT_FALSE(tf.ReplayState(0, 1));  // (the last step kept nothing)
    kv.Free(seq);
  }
}

// --spec mtp: the file's prediction block drafts (its own KV following the target's tokens and
// hidden states, the drafts chained through its own state); verification keeps greedy text
// plain decoding's, through the state put back after rejections. Steps of 16 tokens make the
// prompt reach the block in chunks. (The drafts themselves are checked against llama.cpp's in
// tests/cli_test.sh.)
TEST(Hybrid, MtpSpeculationIsExact) {
  const std::string prompt = "the cat sat on the mat and the dog ran to the big red house";
  for (const auto& [preset, type] : {std::pair{"tiny-qwen35-mtp", GgmlType::kF32},
                                     std::pair{"tiny-qwen35moe-mtp", GgmlType::kQ8_0}}) {
    SCOPED_TRACE(preset);
    const std::string path = HybridModel(preset, type, 0.05f);
    const GenerateResult plain = MakeEngine(path, 16)->Generate(prompt, Greedy(120, true));
    auto e = MakeEngine(path, 16, "mtp");
    for (int run = 0; run < 2; ++run) {  // (the second from the prefix cache: a later start)
      const GenerateResult spec = e->Generate(prompt, Greedy(120, true));
      EXPECT_EQ(spec.text, plain.text);
      EXPECT_GT(spec.draft_tokens, 100);
      std::fprintf(stderr, "%s: %d drafted, %d accepted\n", preset, spec.draft_tokens,
                   spec.accepted_tokens);
    }
  }
  try {
    MakeEngine(HybridModel("tiny-qwen35", GgmlType::kF32), 64, "mtp");
    ADD_FAILURE() << "a model without prediction layers took --spec mtp";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no multi-token-prediction layers"), std::string::npos)
        << e.what();
  }
}

// The same in the service: six requests batched (prompts in chunks of 16 tokens beside
// decodes and verifications), four holding the block's slots and drafting, two without one;
// each text equals plain decoding alone.
TEST(Hybrid, ServiceMtpSpeculationIsExact) {
  const ServiceStats st = ServiceMatchesAlone(
      HybridModel("tiny-qwen35-mtp", GgmlType::kF32, 0.05f),
      {"the cat sat on the mat and then it slept", "a dog ran to the", "once",
       "the big red bird flew over the green hills to the sea", "two", "a b c d e f g"},
      16, "mtp", 80);
  EXPECT_GT(st.spec_draft_tokens, 100u);
  std::fprintf(stderr, "service: %llu drafted, %llu accepted\n",
               (unsigned long long)st.spec_draft_tokens,
               (unsigned long long)st.spec_accepted_tokens);
}

// A prompt sharing a long prefix with an earlier one resumes from the last state snapshot
// (its blocks and the recurrent state there), with the text of a run from scratch; without
// snapshots nothing is reused.
TEST(Hybrid, SharedPrefixResumesFromASnapshot) {
  std::string prefix;
  for (int i = 0; prefix.size() < 600; ++i) prefix += "the " + std::to_string(i % 7) + " cat ";
  for (const char* preset : kPresets) {
    SCOPED_TRACE(preset);
    const std::string path = HybridModel(preset, GgmlType::kQ8_0);
    EngineOptions eo;
    eo.model_path = path;
    eo.threads = 2;
    eo.context = 1024;
    auto cached = Engine::Create(eo);
    eo.state_snapshot_every = 0;
    auto plain = Engine::Create(eo);
    const int n_prefix = static_cast<int>(cached->Tokenize(prefix, true).size());
    ASSERT_GE(n_prefix, 300);
    const std::string a = prefix + "a dog", b = prefix + "a bird";
    EXPECT_EQ(cached->Generate(a, Greedy(24, true)).cached_tokens, 0);
    EXPECT_GE(cached->Memory().kv_state_snapshots, n_prefix / 128);
    const GenerateResult second = cached->Generate(b, Greedy(24, true));
    EXPECT_GE(second.cached_tokens, n_prefix / 128 * 128);  // the last snapshot in the prefix
    EXPECT_EQ(second.cached_tokens % 128, 0);
    const GenerateResult scratch = plain->Generate(b, Greedy(24, true));
    EXPECT_EQ(scratch.cached_tokens, 0);
    EXPECT_EQ(second.text, scratch.text);
    EXPECT_EQ(plain->Memory().kv_state_snapshots, 0);
  }
  // Generated tokens keep no snapshot (their states come token by token; a later prompt holding
  // them computes them in chunks): a prompt of under 128 tokens generating past 128 keeps none.
  EngineOptions eo;
  eo.model_path = HybridModel("tiny-qwen35", GgmlType::kQ8_0);
  auto e = Engine::Create(eo);
  std::vector<int32_t> prompt(100, 300);
  const GenerateResult r = e->GenerateTokens(prompt, Greedy(60, true));
  EXPECT_EQ(r.generated_tokens, 60);
  EXPECT_EQ(e->Memory().kv_state_snapshots, 0);
}

TEST(Hybrid, MemoryReportCountsTheStates) {
  const std::string path = HybridModel("tiny-qwen35", GgmlType::kF32);
  EngineOptions eo;
  eo.model_path = path;
  eo.state_slots = 5;
  auto e = Engine::Create(eo);
  const MemoryReport m = e->Memory();
  EXPECT_EQ(m.kv_state_slots, 5);
  EXPECT_EQ(m.kv_state_bytes, 6u * (3 * 128 + 4 * 16 * 16) * 4);
  EXPECT_EQ(m.kv_state_snapshot_slots, 8);
  EXPECT_GE(m.kv_allocated_bytes, (5 + 8) * m.kv_state_bytes);
  EXPECT_EQ(m.kv_used_states, 0);
  eo.state_slots = 5000;
  EXPECT_THROW(Engine::Create(eo), Error);
  eo.state_slots = 4;
  eo.kv_memory = 3 * m.kv_state_bytes;  // the states alone exceed the budget
  EXPECT_THROW(Engine::Create(eo), Error);
}

}  // namespace
}  // namespace paddock
