// Tests of the continuous-batching service: batch invariance (alone == among others, with
// chunked prefill, static batching and preemption), admission control, cancellation,
// deadlines, priorities and shutdown.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "kv/kv_manager.h"
#include "model/weights.h"
#include "paddock/service.h"
#include "synth/synth.h"
#include "test_util.h"

namespace paddock {
namespace {

struct Outcome {
  std::string text;
  FinishReason finish;
  int generated;
};

// Reads a request to its end; `already` is text the caller read before.
Outcome Drain(RequestStream& s, std::string already = "") {
  std::string text = std::move(already);
  while (s.Wait(&text, 60) != RequestStream::Status::kDone) {
  }
  EXPECT_EQ(text, s.result().text);  // streamed pieces add up to the final text
  return {text, s.result().finish, s.result().generated_tokens};
}

std::unique_ptr<Service> MakeService(const std::string& model, const std::string& tokenizer,
                                     ServiceOptions so = {}, uint64_t kv_memory = 0,
                                     int max_batch = 64) {
  EngineOptions eo;
  eo.model_path = model;
  eo.tokenizer_path = tokenizer;
  eo.threads = 2;
  eo.max_batch = max_batch;
  eo.kv_memory = kv_memory;
  return Service::Create(Engine::Create(eo), so);
}

RequestOptions Greedy(int max_tokens, bool ignore_eos = false) {
  RequestOptions o;
  o.generate.max_tokens = max_tokens;
  o.generate.ignore_eos = ignore_eos;
  o.generate.sampling.temperature = 0;
  return o;
}

std::shared_ptr<RequestStream> SubmitOk(Service& s, const std::vector<int32_t>& prompt,
                                        const RequestOptions& o) {
  std::shared_ptr<RequestStream> st;
  EXPECT_EQ(s.Submit(prompt, o, &st), SubmitStatus::kAccepted);
  return st;
}

// Prompts of different lengths (1 to ~150 tokens) built from real text.
std::vector<std::vector<int32_t>> Prompts(const Engine& e, int n) {
  const char* seeds[] = {"Once upon a time",
                         "Lily and Tom went to the park",
                         "The sun was hot and the sky was blue.",
                         "A little dog",
                         "Mom said",
                         "One day, a big bird flew over the tree and saw a cat."};
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::string text;
    for (int k = 0; k <= i % 5; ++k) text += std::string(seeds[(i + k) % 6]) + (k % 2 ? " " : ". ");
    if (i == 0) text = "";
    out.push_back(e.Tokenize(text, true));
  }
  return out;
}

// Gauges are refreshed after each step; wait for the step that finished the last request (a
// service that is still busy after 60 s is a failure, not a pass).
ServiceStats Idle(Service& s) {
  for (int i = 0; i < 60000; ++i) {
    const ServiceStats st = s.Stats();
    if (st.running == 0 && st.waiting == 0) return st;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const ServiceStats st = s.Stats();
  ADD_FAILURE() << "the service is not idle after 60 s: " << st.running << " running, "
                << st.waiting << " waiting";
  return st;
}

void CheckBatchInvariance(const std::string& model, const std::string& tok, bool ignore_eos,
                          ServiceOptions so, uint64_t kv_memory = 0, int max_batch = 64) {
  auto svc = MakeService(model, tok, so, kv_memory, max_batch);
  auto prompts = Prompts(svc->engine(), 16);
  std::vector<Outcome> alone;
  for (size_t i = 0; i < prompts.size(); ++i) {
    alone.push_back(
        Drain(*SubmitOk(*svc, prompts[i], Greedy(20 + 9 * static_cast<int>(i), ignore_eos))));
  }
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t i = 0; i < prompts.size(); ++i)
    streams.push_back(SubmitOk(*svc, prompts[i], Greedy(20 + 9 * static_cast<int>(i), ignore_eos)));
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Outcome o = Drain(*streams[i]);
    EXPECT_EQ(o.text, alone[i].text) << "request " << i;
    EXPECT_EQ(o.finish, alone[i].finish) << "request " << i;
    EXPECT_EQ(o.generated, alone[i].generated) << "request " << i;
  }
  const ServiceStats st = Idle(*svc);
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.waiting, 0);
  EXPECT_EQ(st.memory.kv_used_blocks, 0);
}

// A request with n = 2: both choices (the second forked after the prompt) equal the text of
// the request alone.
void CheckForksEqualAlone(Service& svc) {
  const auto prompt = svc.engine().Tokenize("Once upon a time, a little cat", true);
  const Outcome alone = Drain(*SubmitOk(svc, prompt, Greedy(24, true)));
  RequestOptions two = Greedy(24, true);
  two.n = 2;
  std::vector<std::shared_ptr<RequestStream>> streams;
  ASSERT_EQ(svc.Submit(prompt, two, &streams), SubmitStatus::kAccepted);
  ASSERT_EQ(streams.size(), 2u);
  for (auto& st : streams) EXPECT_EQ(Drain(*st).text, alone.text);
}

// 16 requests growing to ~200 tokens each in a pool of ~40 blocks: they must be preempted and
// recomputed, and still produce exactly what they produce alone.
void CheckPreemptionKeepsOutputs(Service& svc) {
  auto prompts = Prompts(svc.engine(), 16);
  std::vector<Outcome> alone;
  for (auto& p : prompts) alone.push_back(Drain(*SubmitOk(svc, p, Greedy(180, true))));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (auto& p : prompts) streams.push_back(SubmitOk(svc, p, Greedy(180, true)));
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(Drain(*streams[i]).text, alone[i].text) << "request " << i;
  const ServiceStats st = Idle(svc);
  EXPECT_GT(st.preemptions, 0u);
  EXPECT_EQ(st.memory.kv_used_blocks, 0);
}

// One sequence's recurrent state of the model at `path`, in bytes.
uint64_t KvStateBytesOf(const std::string& path) {
  return KvStateBytes(LoadModel(path)->config);
}

// slow: a model large enough (and a context long enough) that a request runs for seconds, so
// tests can act on it while it runs.
std::string SynthModel(GgmlType type, bool slow = false) {
  SynthSpec spec = SynthPreset("tiny");
  spec.type = type;
  spec.n_layers = 2;
  spec.context = 512;
  if (slow) {
    spec.dim = 256;
    spec.ffn_dim = 768;
    spec.n_layers = 4;
    spec.context = 8192;
  }
  const std::string path =
      test::TempPath(std::string("svc-synth-") + std::to_string(static_cast<int>(type)) +
                     (slow ? "-slow" : "") + ".gguf");
  WriteSyntheticModel(spec, path);
  return path;
}

TEST(Service, BatchInvarianceStories260K) {
  ServiceOptions so;
  so.max_batch_tokens = 48;  // forces chunked prefill alongside decodes
  CheckBatchInvariance(test::ModelPath("stories260K.bin"), test::ModelPath("tok512.bin"), false,
                       so);
}

TEST(Service, BatchInvarianceSyntheticQ4_0) {
  ServiceOptions so;
  so.max_batch_tokens = 40;
  CheckBatchInvariance(SynthModel(GgmlType::kQ4_0), "", true, so);
}

TEST(Service, BatchInvarianceSyntheticQ8_0) {
  CheckBatchInvariance(SynthModel(GgmlType::kQ8_0), "", true, ServiceOptions());
}

// Gemma 4 (its last layers on earlier layers' KV, per-layer inputs, local and global layers):
// requests batched with chunked prefill give what they give alone, and n = 2 greedy choices
// forking the prompt's blocks each give the text of one request alone.
TEST(Service, Gemma4BatchInvarianceAndForks) {
  const std::string path = test::TempPath("svc-gemma4.gguf");
  SynthSpec spec = SynthPreset("tiny-gemma4");
  spec.type = GgmlType::kQ8_0;
  WriteSyntheticModel(spec, path);
  ServiceOptions so;
  so.max_batch_tokens = 40;
  CheckBatchInvariance(path, "", true, so);
  auto svc = MakeService(path, "");
  CheckForksEqualAlone(*svc);
  EXPECT_EQ(Idle(*svc).memory.kv_used_blocks, 0);
}

// Hybrid recurrent models (Qwen3.5, LFM2): 16 requests of different lengths
// batched with chunked prefill, each equal to itself alone; n = 2 forks copy the state; with
// fewer state slots than requests the rest wait their turn (and still agree); under KV
// pressure preempted sequences recompute their state from the start.
TEST(Service, HybridBatchInvarianceForksAndStateSlots) {
  std::string qwen35;
  // (The MoE variant's sequences are the engine tests': its steps are Qwen3.5's with experts.)
  for (const char* preset : {"tiny-qwen35", "tiny-lfm2"}) {
    SCOPED_TRACE(preset);
    const std::string path = test::TempPath(std::string("svc-") + preset + ".gguf");
    if (qwen35.empty()) qwen35 = path;
    SynthSpec spec = SynthPreset(preset);
    spec.type = GgmlType::kQ8_0;
    WriteSyntheticModel(spec, path);
    ServiceOptions so;
    so.max_batch_tokens = 40;  // prompts in chunks, the state carried across them
    CheckBatchInvariance(path, "", true, so);
    // 64-token steps: the prompts' whole aligned chunks on the chunked delta rule, each chunk
    // in one step whatever else runs.
    if (qwen35 == path) CheckBatchInvariance(path, "", true, ServiceOptions{});
    auto svc = MakeService(path, "");
    CheckForksEqualAlone(*svc);
    const ServiceStats idle = Idle(*svc);
    EXPECT_EQ(idle.memory.kv_used_states, 0);
    EXPECT_GT(idle.memory.kv_state_slots, 0);
  }
  // Three state slots for 8 requests: admission waits for a free slot.
  EngineOptions eo;
  eo.model_path = qwen35;
  eo.threads = 2;
  eo.state_slots = 3;
  auto svc = Service::Create(Engine::Create(eo), ServiceOptions{});
  auto prompts = Prompts(svc->engine(), 8);
  std::vector<Outcome> alone;
  for (auto& p : prompts) alone.push_back(Drain(*SubmitOk(*svc, p, Greedy(30, true))));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (auto& p : prompts) streams.push_back(SubmitOk(*svc, p, Greedy(30, true)));
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(Drain(*streams[i]).text, alone[i].text) << "request " << i;
  RequestOptions four = Greedy(4, true);
  four.n = 4;  // more choices than slots: refused at once, not left waiting
  EXPECT_THROW(svc->Submit(prompts[0], four, &streams), Error);
}

TEST(Service, HybridPreemptionRecomputesTheState) {
  const std::string path = test::TempPath("svc-qwen35-preempt.gguf");
  WriteSyntheticModel(SynthPreset("tiny-qwen35"), path);
  ServiceOptions so;
  so.kv_watermark = 1.0;
  const uint64_t per_token = InspectModel(path, "").kv_bytes_per_1k_tokens / 1000;
  EngineOptions eo;
  eo.model_path = path;
  eo.threads = 2;
  eo.state_slots = 20;
  eo.kv_memory = per_token * 16 * 40 + KvStateBytesOf(path) * (20 + 8);  // (+ the snapshots)
  CheckPreemptionKeepsOutputs(*Service::Create(Engine::Create(eo), so));
}

TEST(Service, StaticBatchingGivesTheSameOutputs) {
  ServiceOptions so;
  so.static_batching = true;
  CheckBatchInvariance(test::ModelPath("stories260K.bin"), test::ModelPath("tok512.bin"), false,
                       so);
}

TEST(Service, PreemptionUnderKvPressureKeepsOutputs) {
  // A pool of ~40 blocks of 16 tokens for 16 requests growing to ~200 tokens each: requests
  // must be preempted and recomputed, and still produce exactly what they produce alone.
  ServiceOptions so;
  so.kv_watermark = 1.0;
  const std::string model = test::ModelPath("stories260K.bin");
  const uint64_t per_token =
      InspectModel(model, test::ModelPath("tok512.bin")).kv_bytes_per_1k_tokens / 1000;
  CheckPreemptionKeepsOutputs(
      *MakeService(model, test::ModelPath("tok512.bin"), so, per_token * 16 * 40));
}

TEST(Service, QueueLimitRejectsAndCounts) {
  ServiceOptions so;
  so.max_running = 1;
  so.max_queue = 2;
  auto svc = MakeService(SynthModel(GgmlType::kF32, true), "", so);
  const auto p = svc->engine().Tokenize("hello", true);
  auto first = SubmitOk(*svc, p, Greedy(400, true));
  while (svc->Stats().running == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto second = SubmitOk(*svc, p, Greedy(5, true));
  auto third = SubmitOk(*svc, p, Greedy(5, true));
  std::shared_ptr<RequestStream> fourth;
  EXPECT_EQ(svc->Submit(p, Greedy(5, true), &fourth), SubmitStatus::kQueueFull);
  EXPECT_EQ(fourth, nullptr);
  EXPECT_EQ(svc->Stats().rejected, 1u);
  first->Cancel();
  EXPECT_EQ(Drain(*first).finish, FinishReason::kCancelled);
  EXPECT_EQ(Drain(*second).generated, 5);
  EXPECT_EQ(Drain(*third).generated, 5);
}

TEST(Service, CancelFreesBlocksAndDeadlineStops) {
  auto svc = MakeService(SynthModel(GgmlType::kF32, true), "", ServiceOptions());
  const auto p = svc->engine().Tokenize("hello world", true);
  auto s = SubmitOk(*svc, p, Greedy(100000, true));
  std::string text;
  while (text.size() < 20) ASSERT_NE(s->Wait(&text, 60), RequestStream::Status::kDone);
  s->Cancel();
  const Outcome o = Drain(*s, text);
  EXPECT_EQ(o.finish, FinishReason::kCancelled);
  EXPECT_LT(o.generated, 500);
  RequestOptions ro = Greedy(100000, true);
  ro.timeout_seconds = 0.05;
  auto t = SubmitOk(*svc, p, ro);
  EXPECT_EQ(Drain(*t).finish, FinishReason::kTimeout);
  const ServiceStats st = Idle(*svc);
  EXPECT_EQ(st.memory.kv_used_blocks, 0);
  EXPECT_EQ(st.timeouts, 1u);
}

TEST(Service, HigherPriorityIsAdmittedFirst) {
  ServiceOptions so;
  so.max_running = 1;
  auto svc = MakeService(SynthModel(GgmlType::kF32, true), "", so);
  const auto p = svc->engine().Tokenize("hello", true);
  auto blocker = SubmitOk(*svc, p, Greedy(300, true));
  while (svc->Stats().running == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  RequestOptions low = Greedy(3, true), high = Greedy(3, true);
  high.priority = 5;
  auto a = SubmitOk(*svc, p, low);
  auto b = SubmitOk(*svc, p, high);
  Drain(*blocker);
  Drain(*a);
  Drain(*b);
  // The scheduler's record: the blocker first, then the higher priority, then the other.
  EXPECT_EQ(blocker->admission_order(), 1u);
  EXPECT_EQ(b->admission_order(), 2u);
  EXPECT_EQ(a->admission_order(), 3u);
}

TEST(Service, InvalidRequestsThrowAndShutdownFinishesWork) {
  auto svc = MakeService(SynthModel(GgmlType::kF32, true), "", ServiceOptions());
  std::shared_ptr<RequestStream> s;
  EXPECT_THROW(svc->Submit({}, Greedy(5), &s), Error);
  EXPECT_THROW(svc->Submit({1, 100000}, Greedy(5), &s), Error);
  EXPECT_THROW(svc->Submit(std::vector<int32_t>(9000, 5), Greedy(5), &s), Error);
  RequestOptions bad = Greedy(5);
  bad.generate.sampling.top_p = 2;
  EXPECT_THROW(svc->Submit({1, 5}, bad, &s), Error);
  bad = Greedy(-1);
  EXPECT_THROW(svc->Submit({1, 5}, bad, &s), Error);
  auto a = SubmitOk(*svc, {1, 5, 6}, Greedy(30, true));
  svc->Shutdown(30);
  EXPECT_EQ(Drain(*a).generated, 30);  // in-flight work finished within the grace period
  EXPECT_EQ(svc->Submit({1, 5}, Greedy(5), &s), SubmitStatus::kShuttingDown);
}

TEST(Service, ShutdownWithoutGraceCancels) {
  auto svc = MakeService(SynthModel(GgmlType::kF32, true), "", ServiceOptions());
  auto a = SubmitOk(*svc, {1, 5, 6}, Greedy(100000, true));
  std::string text;
  a->Wait(&text, 60);
  svc->Shutdown(0);
  EXPECT_EQ(Drain(*a, text).finish, FinishReason::kCancelled);
}

}  // namespace
}  // namespace paddock

namespace paddock {
namespace {

// Embeddings: the inputs of one request share forwards; each vector equals the input's vector
// computed alone (batch-invariant kernels), with room for all at once or for a few at a time
// (rounds), and while generations hold most of the cache (the job waits for room).
TEST(Service, EmbeddingsBatchedEqualAlone) {
  const std::string model = test::ModelPath("stories260K.bin");
  const std::string tok = test::ModelPath("tok512.bin");
  const uint64_t per_token = InspectModel(model, tok).kv_bytes_per_1k_tokens / 1000;
  for (uint64_t kv_tokens : {0ull, 16ull * 24}) {  // default; 24 blocks: a few inputs per round
    auto svc = MakeService(model, tok, ServiceOptions(), per_token * kv_tokens, 32);
    auto inputs = Prompts(svc->engine(), 12);
    inputs[0] = svc->engine().Tokenize("Sun", true);
    for (auto pooling : {Service::Pooling::kMean, Service::Pooling::kLast}) {
      const auto batch = svc->Embed(inputs, pooling);
      ASSERT_EQ(batch.size(), inputs.size());
      for (size_t k = 0; k < inputs.size(); ++k) {
        const auto alone = svc->Embed({inputs[k]}, pooling);
        ASSERT_EQ(alone[0].size(), batch[k].size());
        double norm = 0;
        for (size_t d = 0; d < alone[0].size(); ++d) {
          EXPECT_NEAR(alone[0][d], batch[k][d], 1e-6) << "input " << k << " dim " << d;
          norm += double(batch[k][d]) * batch[k][d];
        }
        EXPECT_NEAR(norm, 1.0, 1e-5);
      }
    }
    // While generations run (and hold blocks), embeddings still come back, equal.
    const auto reference = svc->Embed(inputs, Service::Pooling::kMean);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (auto& p : Prompts(svc->engine(), 4))
      streams.push_back(SubmitOk(*svc, p, Greedy(60, true)));
    const auto during = svc->Embed(inputs, Service::Pooling::kMean);
    for (auto& s : streams) Drain(*s);
    for (size_t k = 0; k < inputs.size(); ++k)
      for (size_t d = 0; d < reference[k].size(); ++d)
        ASSERT_NEAR(reference[k][d], during[k][d], 1e-6) << "input " << k;
    EXPECT_EQ(Idle(*svc).memory.kv_used_blocks, 0);
  }
}

TEST(Service, EmbeddingsRefuseBadInput) {
  auto svc =
      MakeService(test::ModelPath("stories260K.bin"), test::ModelPath("tok512.bin"), {}, 0, 32);
  EXPECT_THROW(svc->Embed({{}}, Service::Pooling::kMean), Error);
  EXPECT_THROW(svc->Embed({{1, 100000}}, Service::Pooling::kMean), Error);
  EXPECT_THROW(svc->Embed({std::vector<int32_t>(5000, 1)}, Service::Pooling::kMean), Error);
}

}  // namespace
}  // namespace paddock

namespace paddock {
namespace {

// Constrained and free requests in one batch: the masks are computed in parallel across the
// batch's requests, and every output equals the same request run alone (and parses).
TEST(Service, ConstrainedBatchEqualsAlone) {
  auto svc =
      MakeService(test::ModelPath("stories260K.bin"), test::ModelPath("tok512.bin"), {}, 0, 64);
  auto g = svc->engine().CompileGrammar(
      GrammarKind::kJsonSchema,
      R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
          "tags": {"type": "array", "items": {"enum": ["a", "bb", "ccc"]}, "maxItems": 4}},
          "required": ["name", "tags"], "additionalProperties": false})");
  auto prompts = Prompts(svc->engine(), 12);
  auto options = [&](size_t i) {
    RequestOptions o;
    o.generate.max_tokens = 60;
    o.generate.sampling.temperature = 1;
    o.generate.sampling.seed = 7 + i;
    if (i % 3 != 2) o.generate.grammar = g;
    return o;
  };
  std::vector<Outcome> alone;
  for (size_t i = 0; i < prompts.size(); ++i)
    alone.push_back(Drain(*SubmitOk(*svc, prompts[i], options(i))));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t i = 0; i < prompts.size(); ++i)
    streams.push_back(SubmitOk(*svc, prompts[i], options(i)));
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Outcome o = Drain(*streams[i]);
    EXPECT_EQ(o.text, alone[i].text) << "request " << i;
    if (i % 3 != 2) {
      EXPECT_EQ(o.text.front(), '{') << o.text;
      EXPECT_EQ(o.text.back(), '}') << o.text;
      EXPECT_NE(o.text.find("\"tags\""), std::string::npos) << o.text;
    }
  }
  EXPECT_GT(svc->Stats().grammar_masks, 0u);
}

// Two models on one ComputeShare (serve --models-dir): one thread pool, steps in turn. Each
// model's requests, run while the other's run, give what they give alone.
TEST(Service, ModelsSharingAPoolGiveTheirOwnOutputs) {
  const std::string a_path = test::ModelPath("stories260K.bin"),
                    a_tok = test::ModelPath("tok512.bin");
  const std::string b_path = SynthModel(GgmlType::kQ8_0);
  auto run = [&](Service& s, int n, bool tokens_from_b) {
    std::vector<std::shared_ptr<RequestStream>> st;
    const std::vector<std::vector<int32_t>> ps = Prompts(s.engine(), n);
    for (const auto& p : ps) {
      std::vector<int32_t> q = p;
      if (tokens_from_b)
        for (int32_t& t : q) t %= s.engine().info().n_vocab;
      st.push_back(SubmitOk(s, q, Greedy(24, true)));
    }
    return st;
  };
  std::vector<std::string> alone_a, alone_b;
  {
    auto a = MakeService(a_path, a_tok);
    for (auto& st : run(*a, 4, false)) alone_a.push_back(Drain(*st).text);
    auto b = MakeService(b_path, "");
    for (auto& st : run(*b, 4, true)) alone_b.push_back(Drain(*st).text);
  }
  auto share = ComputeShare::Create(2);
  auto make = [&](const std::string& m, const std::string& t) {
    EngineOptions eo;
    eo.model_path = m;
    eo.tokenizer_path = t;
    eo.max_batch = 64;
    eo.compute = share;
    return Service::Create(Engine::Create(eo), ServiceOptions());
  };
  auto a = make(a_path, a_tok);
  auto b = make(b_path, "");
  EXPECT_EQ(a->engine().info().threads, 2);
  auto sa = run(*a, 4, false);
  auto sb = run(*b, 4, true);
  for (size_t i = 0; i < sa.size(); ++i) EXPECT_EQ(Drain(*sa[i]).text, alone_a[i]);
  for (size_t i = 0; i < sb.size(); ++i) EXPECT_EQ(Drain(*sb[i]).text, alone_b[i]);
  EXPECT_GT(a->Stats().steps, 0u);
  EXPECT_GT(b->Stats().steps, 0u);
}

// The estimate a memory budget admits models by: weights and KV exactly, scratch an upper bound
// within a quarter of the engine's own figure.
TEST(Service, EstimateMemoryBoundsWhatTheEngineHolds) {
  for (const std::string& path :
       {test::ModelPath("stories260K.gguf"), SynthModel(GgmlType::kQ4_0)}) {
    EngineOptions eo;
    eo.model_path = path;
    eo.threads = 2;
    eo.kv_sequences = 3;
    const MemoryReport est = EstimateMemory(eo);
    const MemoryReport got = Engine::Create(eo)->Memory();
    EXPECT_EQ(est.weight_bytes, got.weight_bytes) << path;
    EXPECT_EQ(est.kv_allocated_bytes, got.kv_allocated_bytes) << path;
    EXPECT_GE(est.scratch_bytes, got.scratch_bytes) << path;
    EXPECT_LE(est.scratch_bytes, got.scratch_bytes + got.scratch_bytes / 4 + 65536) << path;
  }
}

}  // namespace
}  // namespace paddock
