// Speculative decoding: greedy outputs identical with and without it (every proposer), the
// verification rule keeping the target's distribution exactly (a tiny vocabulary, chi-square),
// the KV cache's invariants under random accept/reject sequences, and bad configurations.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/sampler.h"
#include "engine/speculative.h"
#include "kv/kv_manager.h"
#include "paddock/error.h"
#include "paddock/paddock.h"
#include "paddock/service.h"
#include "synth/synth.h"
#include "test_util.h"

namespace paddock {
namespace {

using test::Greedy;

GenerateResult Generate(const std::string& model, const std::string& spec,
                        const std::string& prompt, const GenerateOptions& go,
                        const std::string& draft = "", bool fixed = false) {
  EngineOptions eo;
  eo.model_path = model;
  eo.spec = spec;
  eo.draft_model = draft;
  eo.spec_max = 6;
  eo.spec_fixed = fixed;
  auto e = Engine::Create(eo);
  return e->Generate(prompt, go);
}

TEST(Speculative, GreedyNgramOutputIsIdenticalOnStories260K) {
  const std::string m = test::ModelPath("stories260K.gguf");
  for (const char* prompt : {"Once upon a time", "Lily and Ben went to the park. Lily and Ben"}) {
    const GenerateResult plain = Generate(m, "off", prompt, Greedy(300, /*ignore_eos=*/true));
    const GenerateResult spec = Generate(m, "ngram", prompt, Greedy(300, /*ignore_eos=*/true));
    EXPECT_EQ(spec.text, plain.text) << prompt;
    EXPECT_EQ(spec.generated_tokens, plain.generated_tokens);
    EXPECT_GT(spec.draft_tokens, 0) << "the story repeats itself: n-grams should be proposed";
    EXPECT_GT(spec.accepted_tokens, 0);
    EXPECT_LE(spec.accepted_tokens, spec.draft_tokens);
  }
}

// Target and draft from the same seed: the draft is the same weights at a lower precision.
struct TargetAndDraft {
  std::string target = test::TempPath("spec-target.gguf");
  std::string draft = test::TempPath("spec-draft.gguf");
  TargetAndDraft() {
    SynthSpec s;
    s.n_layers = 3;
    s.type = GgmlType::kQ8_0;
    WriteSyntheticModel(s, target);
    s.type = GgmlType::kQ4_0;
    WriteSyntheticModel(s, draft);
  }
};

TEST(Speculative, GreedyDraftAndNgramOutputsAreIdenticalOnASyntheticModel) {
  TargetAndDraft m;
  const GenerateOptions go = Greedy(200, /*ignore_eos=*/true);
  const GenerateResult plain = Generate(m.target, "off", "ab", go);
  const GenerateResult ngram = Generate(m.target, "ngram", "ab", go);
  // (fixed: the tiny draft costs about as much as the tiny target, so the adaptive choice
  // would rightly not draft at all)
  const GenerateResult draft = Generate(m.target, "draft", "ab", go, m.draft, /*fixed=*/true);
  EXPECT_EQ(ngram.text, plain.text);
  EXPECT_EQ(draft.text, plain.text);
  EXPECT_GT(draft.draft_tokens, 0);
  // The same weights at 4 bits agree with the 8-bit target often (random weights give flat
  // distributions, so far from always).
  EXPECT_GT(draft.accepted_tokens * 5, draft.draft_tokens);
}

TEST(Speculative, StopStringsAndMaxTokensStayExact) {
  const std::string m = test::ModelPath("stories260K.gguf");
  GenerateOptions go = Greedy(150, /*ignore_eos=*/true);
  go.stop = {"park", "Lily said"};
  go.ignore_eos = false;
  const GenerateResult plain = Generate(m, "off", "Once upon a time", go);
  const GenerateResult spec = Generate(m, "ngram", "Once upon a time", go);
  EXPECT_EQ(spec.text, plain.text);
  EXPECT_EQ(spec.finish, plain.finish);
  for (int n : {1, 2, 7, 33}) {
    const GenerateResult a = Generate(m, "off", "Once upon a time", Greedy(n, /*ignore_eos=*/true));
    const GenerateResult b =
        Generate(m, "ngram", "Once upon a time", Greedy(n, /*ignore_eos=*/true));
    EXPECT_EQ(b.generated_tokens, n);
    EXPECT_EQ(b.text, a.text) << n;
  }
}

// With the draft length fixed, a seed reproduces sampled output (the adaptive choice follows
// measured timings, so only the distribution is reproducible then).
TEST(Speculative, SampledGenerationWithAFixedDraftLengthIsReproducible) {
  TargetAndDraft m;
  GenerateOptions go = Greedy(120, /*ignore_eos=*/true);
  go.sampling.temperature = 1.0f;
  go.sampling.top_k = 0;
  go.sampling.top_p = 1.0f;
  go.sampling.min_p = 0;
  go.sampling.seed = 42;
  for (const char* mode : {"ngram", "draft"}) {
    const std::string draft = mode == std::string("draft") ? m.draft : "";
    const GenerateResult a = Generate(m.target, mode, "ab", go, draft, /*fixed=*/true);
    const GenerateResult b = Generate(m.target, mode, "ab", go, draft, /*fixed=*/true);
    EXPECT_EQ(a.text, b.text) << mode;
    EXPECT_EQ(a.generated_tokens, 120);
  }
}

// The verification rule on a vocabulary of 6: whatever the draft distribution q, the first
// token emitted (the accepted draft, or the correction) is distributed as the target's p, and
// so is the second given the first. Chi-square over 200,000 trials per case.
double ChiSquare(const std::vector<int>& counts, const std::vector<double>& p, int n) {
  double chi = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] * n;
    if (e > 0) chi += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi;
}

std::vector<double> Softmax(const std::vector<float>& l) {
  double mx = l[0], s = 0;
  for (float v : l) mx = std::max(mx, static_cast<double>(v));
  std::vector<double> p;
  for (float v : l) s += std::exp(v - mx);
  for (float v : l) p.push_back(std::exp(v - mx) / s);
  return p;
}

TEST(Speculative, VerificationKeepsTheTargetDistributionExactly) {
  constexpr int V = 6, kTrials = 200000;
  const std::vector<float> l0 = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, -1.0f};
  const std::vector<float> l1 = {-0.3f, 1.5f, 0.4f, 0.1f, -2.0f, 0.8f};
  const std::vector<float> l2 = {0.5f, 0.5f, 0.5f, -0.5f, 1.0f, 0.0f};
  const std::vector<double> p0 = Softmax(l0), p1 = Softmax(l1);
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.min_p = 0;
  sp.seed = 7;
  // Draft distributions: a poor one (far from p), and one-hot (n-gram).
  const std::vector<double> q0 = {0.05, 0.4, 0.3, 0.05, 0.1, 0.1},
                            q1 = {0.3, 0.1, 0.1, 0.3, 0.1, 0.1};
  for (bool one_hot : {false, true}) {
    Sampler target(V);
    target.Reset(sp);
    std::mt19937_64 rng(99);
    std::vector<int> first(V, 0), second(V, 0);
    int second_n = 0;
    const int fixed_given = 3;  // the second token's distribution is checked given first == 3
    for (int t = 0; t < kTrials; ++t) {
      int32_t drafts[2];
      DraftDist q[2];
      auto draw = [&](const std::vector<double>& d) {
        double u = std::uniform_real_distribution<double>(0, 1)(rng), acc = 0;
        for (int i = 0; i < V; ++i) {
          acc += d[static_cast<size_t>(i)];
          if (u < acc) return i;
        }
        return V - 1;
      };
      if (one_hot) {
        drafts[0] = 1;  // the "n-gram" always proposes 1, then 3 (q one-hot)
        drafts[1] = 3;
      } else {
        drafts[0] = draw(q0);
        drafts[1] = draw(q1);
        for (int i = 0; i < V; ++i) {
          q[0].probs.emplace_back(i, q0[static_cast<size_t>(i)]);
          q[1].probs.emplace_back(i, q1[static_cast<size_t>(i)]);
        }
      }
      std::vector<float> r0 = l0, r1 = l1, r2 = l2;
      float* rows[3] = {r0.data(), r1.data(), r2.data()};
      const int32_t hist[3] = {0, drafts[0], drafts[1]};
      int32_t next = -1;
      const int a = VerifyDrafts(target, rows, drafts, 2, hist, 1, one_hot ? nullptr : q, &next);
      const int tok0 = a >= 1 ? drafts[0] : next;
      first[static_cast<size_t>(tok0)]++;
      // The second token: rows[1] is the distribution after drafts[0] only, so it is checked
      // when the first token was the draft (a >= 1).
      if (a >= 1 && drafts[0] == (one_hot ? 1 : fixed_given)) {
        const int tok1 = a >= 2 ? drafts[1] : next;
        second[static_cast<size_t>(tok1)]++;
        ++second_n;
      }
    }
    // 5 degrees of freedom: the 99.9% point is 20.5.
    EXPECT_LT(ChiSquare(first, p0, kTrials), 20.5) << "one-hot " << one_hot;
    ASSERT_GT(second_n, 1000);
    EXPECT_LT(ChiSquare(second, p1, second_n), 20.5) << "one-hot " << one_hot;
  }
}

TEST(Speculative, GreedyVerificationAcceptsExactlyTheArgmaxRun) {
  Sampler s(4);
  SamplingParams sp;
  sp.temperature = 0;
  s.Reset(sp);
  std::vector<float> r0 = {0, 5, 1, 2}, r1 = {3, 0, 0, 0}, r2 = {0, 0, 9, 0};
  float* rows[3] = {r0.data(), r1.data(), r2.data()};
  const int32_t hist[3] = {0, 1, 0};
  int32_t drafts[2] = {1, 0}, next = -1;
  EXPECT_EQ(VerifyDrafts(s, rows, drafts, 2, hist, 1, nullptr, &next), 2);
  EXPECT_EQ(next, 2);  // all accepted: the bonus token from the last row
  r0 = {0, 5, 1, 2};
  r1 = {3, 0, 0, 0};
  drafts[1] = 2;
  EXPECT_EQ(VerifyDrafts(s, rows, drafts, 2, hist, 1, nullptr, &next), 1);
  EXPECT_EQ(next, 0);  // the correction: row 1's argmax
}

// Random accept/reject sequences: reserve for 1 + k, commit 1 + a, truncate the rest. The
// pool's invariants hold after every step, the sequence holds exactly its committed blocks,
// and every cached block's tokens are committed ones.
TEST(SpecKv, RandomAcceptRejectKeepsTheCacheConsistent) {
  const ModelConfig c = test::TinyKvConfig();
  KvManager kv(c, test::TinyKvOptions(4, 64, c), 0);
  std::mt19937 rng(3);
  for (int round = 0; round < 20; ++round) {
    const auto seq = kv.Create(200);
    std::vector<int32_t> committed;
    int pos = 0;
    while (pos < 150) {
      const int k = static_cast<int>(rng() % 7);
      ASSERT_TRUE(kv.Reserve(seq, pos + 1 + k));
      std::vector<int32_t> step(static_cast<size_t>(1 + k));
      for (auto& t : step) t = static_cast<int32_t>(rng() % 5);  // few ids: blocks repeat
      const int a = k == 0 ? 0 : static_cast<int>(rng() % (k + 1));
      kv.Commit(seq, step.data(), 1 + a);
      committed.insert(committed.end(), step.begin(), step.begin() + 1 + a);
      pos += 1 + a;
      kv.Truncate(seq, pos);
      ASSERT_EQ(kv.Length(seq), pos);
      ASSERT_EQ(kv.Table(seq).size(), static_cast<size_t>((pos + 3) / 4));
      kv.CheckInvariants();
    }
    // A new sequence with the same committed tokens finds its full blocks in the prefix
    // cache: they hold exactly those tokens (no rejected draft was ever registered).
    const auto again = kv.Create(200);
    const int hit = kv.MatchPrefix(again, committed.data(), static_cast<int>(committed.size()));
    EXPECT_EQ(hit, (static_cast<int>(committed.size()) - 1) / 4 * 4);
    kv.Free(again);
    kv.Free(seq);
    kv.CheckInvariants();
  }
  EXPECT_THROW(
      {
        const auto s = kv.Create(16);
        kv.Truncate(s, 1);  // longer than the sequence
      },
      Error);
}

TEST(Speculative, BadConfigurationsAreClearErrors) {
  TargetAndDraft m;
  EngineOptions eo;
  eo.model_path = m.target;
  eo.spec = "draft";
  eo.draft_model = test::ModelPath("stories260K.gguf");  // another vocabulary
  try {
    Engine::Create(eo);
    ADD_FAILURE() << "a draft with another vocabulary was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vocabulary"), std::string::npos) << e.what();
  }
  eo.model_path = m.draft;  // the 4-bit model as target, the 8-bit one as "draft": larger
  eo.draft_model = m.target;
  try {
    Engine::Create(eo);
    ADD_FAILURE() << "a draft larger than the target was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not smaller"), std::string::npos) << e.what();
  }
  eo.model_path = m.target;
  eo.draft_model = m.draft;
  for (int bad : {0, 17, 1000}) {
    eo.spec_max = bad;
    EXPECT_THROW(Engine::Create(eo), Error) << bad;
  }
  eo.spec_max = 4;
  eo.spec = "lookahead";
  EXPECT_THROW(Engine::Create(eo), Error);
  eo.spec = "ngram";  // a draft model without --spec draft
  EXPECT_THROW(Engine::Create(eo), Error);
  eo.spec = "draft";
  eo.draft_model = "";
  EXPECT_THROW(Engine::Create(eo), Error);
}

// The server: speculation per request inside continuous batching. 16 concurrent greedy requests
// give the same outputs with and without it (n-gram and draft model), drafts are verified
// (counted in the stats), and every block is back at the end.
std::vector<std::string> ServiceOutputs(const std::string& model, const std::string& spec,
                                        const std::string& draft, ServiceStats* stats) {
  EngineOptions eo;
  eo.model_path = model;
  eo.threads = 2;
  eo.max_batch = 64;
  eo.spec = spec;
  eo.draft_model = draft;
  eo.spec_max = 5;
  eo.spec_fixed = !draft.empty();  // the tiny draft costs as much as the target: force it
  ServiceOptions so;
  so.max_batch_tokens = 48;
  auto svc = Service::Create(Engine::Create(eo), so);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 16; ++i) {
    std::vector<int32_t> prompt = {1};
    for (int j = 0; j < 3 + i % 5; ++j) prompt.push_back(3 + (i * 7 + j * 3) % 200);
    RequestOptions o;
    o.generate.max_tokens = 30 + 7 * i;
    o.generate.ignore_eos = true;
    o.generate.sampling.temperature = 0;
    std::shared_ptr<RequestStream> st;
    EXPECT_EQ(svc->Submit(prompt, o, &st), SubmitStatus::kAccepted);
    streams.push_back(st);
  }
  std::vector<std::string> out;
  for (auto& st : streams) {
    std::string text;
    while (st->Wait(&text, 60) != RequestStream::Status::kDone) {
    }
    EXPECT_EQ(text, st->result().text);
    out.push_back(text);
  }
  for (int i = 0; i < 5000 && svc->Stats().running > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  *stats = svc->Stats();
  return out;
}

TEST(SpecService, GreedyOutputsInABatchOf16EqualPlainDecoding) {
  TargetAndDraft m;
  ServiceStats plain_stats, ngram_stats, draft_stats;
  const auto plain = ServiceOutputs(m.target, "off", "", &plain_stats);
  const auto ngram = ServiceOutputs(m.target, "ngram", "", &ngram_stats);
  const auto draft = ServiceOutputs(m.target, "draft", m.draft, &draft_stats);
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(ngram[i], plain[i]) << "request " << i;
    EXPECT_EQ(draft[i], plain[i]) << "request " << i;
  }
  EXPECT_EQ(plain_stats.spec_draft_tokens, 0u);
  EXPECT_GT(draft_stats.spec_draft_tokens, 0u);
  EXPECT_GT(draft_stats.spec_accepted_tokens, 0u);
  EXPECT_LE(ngram_stats.spec_accepted_tokens, ngram_stats.spec_draft_tokens);
  for (const ServiceStats* st : {&plain_stats, &ngram_stats, &draft_stats}) {
    EXPECT_EQ(st->memory.kv_used_blocks, 0);
    EXPECT_EQ(st->generation_tokens, plain_stats.generation_tokens);
  }
}

TEST(Speculative, ControllerNeverChoosesALosingDraftLength) {
  // Verification cost grows with k; with no acceptance the controller drafts nothing except a
  // periodic one-token probe; with high acceptance it drafts several.
  SpecController c({1.0, 1.05, 1.1, 1.2, 1.3, 1.4, 1.6, 1.8, 2.0}, 8, 0.0);
  for (int i = 0; i < 50; ++i) c.Observe(4, 0);
  int probes = 0;
  for (int i = 0; i < 64; ++i) {
    const int k = c.Choose();
    EXPECT_LE(k, 1);
    probes += k;
  }
  EXPECT_EQ(probes, 64 / SpecController::kProbeEvery);
  for (int i = 0; i < 50; ++i) c.Observe(4, 4);
  EXPECT_GE(c.Choose(), 4);
  // An expensive draft model: drafting costs as much as verifying saves.
  SpecController d({1.0, 1.05, 1.1, 1.2, 1.3}, 4, 1.0);
  for (int i = 0; i < 50; ++i) d.Observe(4, 2);
  EXPECT_EQ(d.Choose(), 0);
}

TEST(Speculative, ControllerCountsAHybridsRecomputation) {
  // A hybrid model recomputes the accepted tokens after a rejection: at 60% acceptance drafts
  // from a prediction block (0.3 of a step each) pay without that cost and lose with it; at
  // 95% they pay either way. Probes of costly drafts come 4x less often.
  const std::vector<double> cost = {1.0, 1.08, 1.2, 1.29, 1.29};
  SpecController plain(cost, 4, 0.3, false, true, 0.6, false);
  SpecController hybrid(cost, 4, 0.3, false, true, 0.6, true);
  for (int i = 0; i < 50; ++i) {
    plain.Observe(5, 3);
    hybrid.Observe(5, 3);
  }
  EXPECT_GE(plain.Choose(), 1);
  EXPECT_EQ(hybrid.Choose(), 0);
  int probes = 0;
  for (int i = 0; i < 128; ++i) probes += hybrid.Choose();
  EXPECT_EQ(probes, 128 / (4 * SpecController::kProbeEvery));
  for (int i = 0; i < 80; ++i) hybrid.Observe(20, 19);
  EXPECT_GE(hybrid.Choose(), 1);
}

}  // namespace
}  // namespace paddock
