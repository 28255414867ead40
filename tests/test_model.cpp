// Whole-model correctness: the real stories260K golden output, GGUF == llama2.c, and synthetic
// models of every architecture variant checked against the scalar reference path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "base/cpu.h"
#include "base/thread_pool.h"
#include "cpu/moe.h"
#include "cpu/transformer.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "kernels/kernels.h"
#include "kv/kv_manager.h"
#include "model/weights.h"
#include "paddock/error.h"
#include "paddock/paddock.h"
#include "synth/synth.h"
#include "test_forward.h"
#include "test_util.h"

namespace paddock {
namespace {

std::string Golden() {
  std::string g = test::ReadFile(test::ModelPath("stories260K.expected_t0.txt"));
  if (!g.empty() && g.back() == '\n') g.pop_back();
  return g;
}

using test::Greedy;

TEST(Model, Stories260KGoldenGreedyOutput) {
  // The reference program samples 256 tokens after BOS (the last one is printed, never fed).
  for (const char* isa : {"auto", "scalar"}) {
    for (int threads : {1, 2}) {
      EngineOptions eo;
      eo.model_path = test::ModelPath("stories260K.bin");
      eo.tokenizer_path = test::ModelPath("tok512.bin");
      eo.isa = isa;
      eo.threads = threads;
      auto e = Engine::Create(eo);
      std::string streamed;
      GenerateResult r = e->Generate("", Greedy(256), [&](std::string_view t) {
        streamed += t;
        return true;
      });
      EXPECT_EQ(r.text, Golden()) << isa << " threads=" << threads;
      EXPECT_EQ(streamed, r.text);
      EXPECT_EQ(r.generated_tokens, 256);
    }
  }
}

TEST(Model, Stories260KGgufContinuesTheStory) {
  EngineOptions eo;
  eo.model_path = test::ModelPath("stories260K.gguf");
  auto e = Engine::Create(eo);
  GenerateResult r = e->Generate("Once upon a time", Greedy(60));
  const std::string expect =
      ", there was a little girl named Lily. She loved to play outside in the park. One day, she "
      "saw a big, red ball.";
  EXPECT_EQ(r.text.substr(0, expect.size()), expect);
  // And it is the same story the llama2.c checkpoint tells from the same prompt.
  EngineOptions eb;
  eb.model_path = test::ModelPath("stories260K.bin");
  eb.tokenizer_path = test::ModelPath("tok512.bin");
  auto b = Engine::Create(eb);
  EXPECT_EQ(b->Generate("Once upon a time", Greedy(60)).text, r.text);
}

TEST(Model, GgufAndLlama2cLogitsAgree) {
  EngineOptions eg, eb;
  eg.model_path = test::ModelPath("stories260K.gguf");
  eb.model_path = test::ModelPath("stories260K.bin");
  eb.tokenizer_path = test::ModelPath("tok512.bin");
  auto g = Engine::Create(eg);
  auto b = Engine::Create(eb);
  const auto toks = g->Tokenize("One day, Lily met a cat.", true);
  ASSERT_EQ(toks, b->Tokenize("One day, Lily met a cat.", true));
  const float* lg = g->Evaluate(toks, 0);
  std::vector<float> a(lg, lg + 512);
  const float* lb = b->Evaluate(toks, 0);
  for (int i = 0; i < 512; ++i) ASSERT_NEAR(a[i], lb[i], 1e-4f) << i;
}

// --- synthetic architecture variants -------------------------------------------------------

KvCacheOptions F32Kv() {
  KvCacheOptions o;
  o.k_type = o.v_type = KvDtype::kF32;
  return o;
}

struct Runner {
  std::unique_ptr<LoadedModel> model;
  ThreadPool pool;
  std::unique_ptr<Transformer> tf;
  std::unique_ptr<KvManager> kv;
  KvManager::SeqId seq = -1;
  Runner(const std::string& path, Isa isa, int threads, int max_batch, KvCacheOptions ko = F32Kv(),
         bool int8_activations = false)
      : model(LoadModel(path)), pool(threads), max_batch_(max_batch), int8_(int8_activations) {
    kernels_ = &GetKernels(isa);
    tf = std::make_unique<Transformer>(*model, *kernels_, pool, max_batch,
                                       ForwardOptions{.int8_activations = int8_activations});
    kv = std::make_unique<KvManager>(model->config, ko, model->config.context_length);
  }
  // The same model on another kernel table (e.g. another prefetch mode); its ops resolved again
  // (they are resolved once at load: a test that changes the config or the weights calls this
  // or Resolve).
  void UseKernels(const KernelTable& k) {
    kernels_ = &k;
    model->ops = LayerOps(model->config, model->weights);
    tf = std::make_unique<Transformer>(*model, k, pool, max_batch_,
                                       ForwardOptions{.int8_activations = int8_});
  }
  void Resolve() { UseKernels(*kernels_); }
  const KernelTable* kernels_ = nullptr;
  int max_batch_;
  bool int8_;
  // Logits after the whole sequence, fed token by token (or all at once when `batched`).
  std::vector<float> Run(const std::vector<int32_t>& toks, bool batched) {
    const int V = model->config.n_vocab;
    if (seq >= 0) kv->Free(seq);
    seq = kv->Create(model->config.context_length);
    const float* l = test::FeedTokens(*tf, *kv, seq, toks, batched);
    return std::vector<float>(l, l + V);
  }
};

using test::RelErr;

std::vector<int32_t> SomeTokens(int n, int vocab) {
  std::vector<int32_t> t = {1};
  for (int i = 1; i < n; ++i) t.push_back(3 + (i * 37) % (vocab - 3));
  return t;
}

using Variant = test::SynthVariant;

std::vector<Variant> Variants() {
  std::vector<Variant> v = test::DenseVariants();
  const SynthSpec base;
  // Mixtures of experts: Mixtral (llama, softmax, normalized top 2 of 4), Qwen2 MoE (a gated
  // shared expert, top 3 of 6 unnormalized), Qwen3 MoE (QK-norm, normalized top 2 of 8,
  // narrower experts), OLMoE (whole-row QK-norm, top 2 of 5), and quantized experts on the
  // integer kernels (Q4_0, Q8_0, and Q4_K with a Q6_K mix).
  SynthSpec mixtral = base;
  mixtral.n_experts = 4;
  mixtral.n_experts_used = 2;
  v.push_back({"mixtral_moe", mixtral});
  SynthSpec qwen2moe = base;
  qwen2moe.arch = "qwen2moe";
  qwen2moe.qkv_bias = true;
  qwen2moe.n_experts = 6;
  qwen2moe.n_experts_used = 3;
  qwen2moe.expert_ffn_dim = 64;
  qwen2moe.shared_ffn_dim = 96;
  v.push_back({"qwen2moe_shared", qwen2moe});
  SynthSpec qwen3moe = base;
  qwen3moe.arch = "qwen3moe";
  qwen3moe.qk_norm = true;
  qwen3moe.head_dim = 32;
  qwen3moe.n_experts = 8;
  qwen3moe.n_experts_used = 2;
  qwen3moe.expert_ffn_dim = 32;
  v.push_back({"qwen3moe", qwen3moe});
  SynthSpec olmoe = base;
  olmoe.arch = "olmoe";
  olmoe.qk_norm = true;
  olmoe.n_experts = 5;
  olmoe.n_experts_used = 2;
  v.push_back({"olmoe", olmoe});
  for (GgmlType t : {GgmlType::kQ4_0, GgmlType::kQ8_0}) {
    SynthSpec q = qwen3moe;
    q.type = t;
    v.push_back({t == GgmlType::kQ4_0 ? "qwen3moe_q4_0" : "qwen3moe_q8_0", q});
  }
  // gpt-oss: MXFP4 experts with biases, a router bias, the clamped SwiGLU, softmax over the
  // top-k logits, attention sinks, alternating windowed layers, YaRN RoPE, Q/K/V/O biases.
  v.push_back({"gpt_oss", SynthPreset("tiny-gpt-oss")});
  SynthSpec gpt_oss_q = SynthPreset("tiny-gpt-oss");
  gpt_oss_q.type = GgmlType::kMXFP4;
  gpt_oss_q.dense_type = static_cast<int>(GgmlType::kQ8_0);
  v.push_back({"gpt_oss_mxfp4", gpt_oss_q});
  SynthSpec moe_k = qwen2moe;
  moe_k.dim = 256;
  moe_k.expert_ffn_dim = 256;
  moe_k.shared_ffn_dim = 512;
  moe_k.q4_k_m = true;
  v.push_back({"qwen2moe_q4_k_m", moe_k});
  for (GgmlType t : {GgmlType::kQ2_K, GgmlType::kQ3_K}) {  // rows of 256 for their blocks
    SynthSpec k = base;
    k.dim = 256;
    k.ffn_dim = 256;
    k.type = t;
    v.push_back({t == GgmlType::kQ2_K ? "llama_q2_k" : "llama_q3_k", k});
  }
  for (int mix = 0; mix < 2; ++mix) {  // llama.cpp's Q3_K_M and Q2_K file mixes
    SynthSpec k = base;
    k.dim = 256;
    k.ffn_dim = 256;
    k.n_heads = 8;
    k.n_kv_heads = 2;  // 4 query heads per KV head: the Q2_K mix's attn_v is Q4_K
    (mix == 0 ? k.q3_k_m : k.q2_k_m) = true;
    v.push_back({mix == 0 ? "llama_q3_k_m" : "llama_q2_k_m", k});
  }
  SynthSpec gpt2 = base;
  gpt2.arch = "gpt2";
  gpt2.n_kv_heads = 4;
  gpt2.context = 64;
  v.push_back({"gpt2_layernorm", gpt2});
  for (GgmlType t : {GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0, GgmlType::kQ4_0,
                     GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1}) {
    SynthSpec q = base;
    q.type = t;
    v.push_back({TypeName(t), q});
  }
  for (GgmlType t : {GgmlType::kIQ4_NL, GgmlType::kMXFP4}) {
    SynthSpec q = base;
    q.type = t;
    v.push_back({TypeName(t), q});
  }
  // Gemma 4: local heads of 16 and global of 32 (a quarter of their pairs rotated), the last
  // three layers on earlier layers' KV, per-layer inputs, normalized values, output scales;
  // its mixture (a dense FFN beside 8 experts, own norms and scales).
  v.push_back({"gemma4", SynthPreset("tiny-gemma4")});
  SynthSpec g4q = SynthPreset("tiny-gemma4");
  g4q.type = GgmlType::kQ8_0;
  v.push_back({"gemma4_q8_0", g4q});
  v.push_back({"gemma4_moe", SynthPreset("tiny-gemma4-moe")});
  SynthSpec g4mq = SynthPreset("tiny-gemma4-moe");
  g4mq.type = GgmlType::kQ8_0;
  v.push_back({"gemma4_moe_q8_0", g4mq});
  SynthSpec moe_mx = qwen3moe;  // gpt-oss's expert type on a mixture
  moe_mx.type = GgmlType::kMXFP4;
  v.push_back({"qwen3moe_mxfp4", moe_mx});
  for (GgmlType t : {GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kIQ4_XS}) {
    SynthSpec q = base;  // k-quants need rows of 256
    q.dim = 256;
    q.n_heads = 4;
    q.n_kv_heads = 2;
    q.ffn_dim = 512;
    q.type = t;
    v.push_back({TypeName(t), q});
  }
  return v;
}

std::string WriteVariant(const Variant& v) {
  const std::string path = test::TempPath(std::string(v.name) + ".gguf");
  WriteSyntheticModel(v.spec, path);
  return path;
}

// Tolerance: fast kernels accumulate in float32, the reference in double; logits agree to
// 1e-4 of their largest magnitude. With int8 activations (Q8_0/Q4_0 weights) a rounding-
// level difference upstream can move an activation by one int8 step, so the bound there is
// that of the activation quantization itself: 3e-2 (int8 vs float activations differ by
// 1-2% on these models).
constexpr double kLogitTol = 1e-4;
constexpr double kInt8LogitTol = 3e-2;

TEST(Model, EveryVariantMatchesTheScalarReference) {
  for (const Variant& v : Variants()) {
    const std::string path = WriteVariant(v);
    const auto toks = SomeTokens(11, v.spec.n_vocab);
    Runner ref(path, Isa::kScalar, 1, 4);
    Runner fast(path, DetectIsa(), 2, 4);
    const auto lr = ref.Run(toks, false);
    // BF16 weights take bf16-rounded activations (the BF16 dot product): like int8 ones, a
    // rounding-level difference upstream can move an activation by one bf16 step.
    const bool bf16 = v.spec.type == GgmlType::kBF16;
    const double tol = bf16 ? kInt8LogitTol : kLogitTol;
    EXPECT_LT(RelErr(fast.Run(toks, false), lr), tol) << v.name << " decode";
    EXPECT_LT(RelErr(fast.Run(toks, true), lr), tol) << v.name << " prefill (batched)";
    EXPECT_LT(RelErr(ref.Run(toks, true), lr), kLogitTol) << v.name << " reference batched";
    if (bf16) {  // against fp32 activations: the activations' bf16 rounding only
      test::Reconfigure(*ref.tf, [](ForwardOptions& o) { o.bf16_dot = false; });
      test::Reconfigure(*fast.tf, [](ForwardOptions& o) { o.bf16_dot = false; });
      const auto lf = ref.Run(toks, false);
      EXPECT_LT(RelErr(fast.Run(toks, false), lf), kLogitTol) << v.name << " fp32 activations";
      EXPECT_LT(RelErr(fast.Run(toks, true), lf), kLogitTol)
          << v.name << " fp32 activations, batched";
      EXPECT_LT(RelErr(lr, lf), kInt8LogitTol) << v.name << " bf16 vs fp32 activations";
    }
    Runner ref8(path, Isa::kScalar, 1, 4, F32Kv(), true);
    Runner fast8(path, DetectIsa(), 2, 4, F32Kv(), true);
    const auto lr8 = ref8.Run(toks, false);
    EXPECT_LT(RelErr(fast8.Run(toks, false), lr8), kInt8LogitTol) << v.name << " int8 decode";
    EXPECT_LT(RelErr(fast8.Run(toks, true), lr8), kInt8LogitTol) << v.name << " int8 prefill";
    EXPECT_LT(RelErr(lr8, lr), kInt8LogitTol) << v.name << " int8 vs float activations";
    double mx = 0;
    for (float x : lr) mx = std::max(mx, static_cast<double>(std::fabs(x)));
    EXPECT_GT(mx, 1e-3) << v.name << ": logits are degenerate";
  }
}

TEST(Moe, RoutingIsSoftmaxOrSigmoidThenTopKThenNormalizedAndScaled) {
  ModelConfig c;
  c.n_experts = 4;
  c.n_experts_used = 2;
  int ids[2];
  float w[2];
  const float tie[4] = {1, 3, 2, 3};  // equal best logits: the lower id first
  RouteToken(tie, c, ids, w);
  const double sum = 2 + std::exp(-1.0) + std::exp(-2.0);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 3);
  EXPECT_NEAR(w[0], 1 / sum, 1e-6);
  EXPECT_NEAR(w[1], 1 / sum, 1e-6);
  c.expert_norm = true;
  RouteToken(tie, c, ids, w);
  EXPECT_NEAR(w[0], 0.5, 1e-6);
  EXPECT_NEAR(w[1], 0.5, 1e-6);
  const float l[4] = {1, 3, 2, 0.5f};
  c.expert_norm = false;
  c.expert_gating = ExpertGating::kSigmoid;
  RouteToken(l, c, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  EXPECT_NEAR(w[0], 1 / (1 + std::exp(-3.0)), 1e-6);
  EXPECT_NEAR(w[1], 1 / (1 + std::exp(-2.0)), 1e-6);
  c.expert_gating = ExpertGating::kSoftmaxTopK;  // softmax over the chosen two
  c.expert_scale = 2.5f;
  RouteToken(l, c, ids, w);
  EXPECT_NEAR(w[0], 2.5 / (1 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(w[1], 2.5 / (1 + std::exp(1.0)), 1e-6);
  c.expert_gating = ExpertGating::kSoftmax;
  c.expert_scale = 1;
  c.n_experts_used = 4;  // every expert: weights sum to 1 without normalizing
  int all[4];
  float wa[4];
  RouteToken(l, c, all, wa);
  EXPECT_EQ(std::vector<int>(all, all + 4), (std::vector<int>{1, 2, 0, 3}));
  EXPECT_NEAR(wa[0] + wa[1] + wa[2] + wa[3], 1.0, 1e-6);
}

// A mixture whose routing is known: all router logits equal, so every token takes experts 0
// and 1 with weight 1/4 each (1/2 normalized); expert e is the dense FFN with its down
// projection times e + 1. The output is the dense model's with its down projection times
// (1 + 2) / 4 (normalized: (1 + 2) / 2), on every path (decode, batched, int8 kernels).
TEST(Moe, KnownRoutingGivesTheDenseModelsOutput) {
  for (GgmlType type : {GgmlType::kF32, GgmlType::kQ8_0}) {
    for (bool norm : {false, true}) {
      SynthSpec moe;
      moe.type = type;
      moe.n_experts = 4;
      moe.n_experts_used = 2;
      moe.expert_norm = norm ? 1 : 0;
      moe.experts_from_dense = true;
      moe.router_scale = 0;
      SynthSpec dense;
      dense.type = type;
      dense.ffn_down_scale = norm ? 1.5f : 0.75f;
      const std::string mp = test::TempPath("known_moe.gguf"),
                        dp = test::TempPath("known_dense.gguf");
      WriteSyntheticModel(moe, mp);
      WriteSyntheticModel(dense, dp);
      const auto toks = SomeTokens(9, 320);
      for (bool int8 : {false, true}) {
        Runner m(mp, DetectIsa(), 2, 16, F32Kv(), int8);
        Runner d(dp, DetectIsa(), 2, 16, F32Kv(), int8);
        ASSERT_EQ(m.model->config.n_experts, 4);
        EXPECT_EQ(m.model->config.expert_norm, norm);
        const double tol = type == GgmlType::kF32 ? 1e-5 : kInt8LogitTol;
        const auto want = d.Run(toks, false);
        EXPECT_LT(RelErr(m.Run(toks, false), want), tol) << TypeName(type) << " norm " << norm;
        EXPECT_LT(RelErr(m.Run(toks, true), want), tol) << TypeName(type) << " batched";
      }
    }
  }
  // With a real router the tokens spread over the experts: not the equal-logits output.
  SynthSpec routed;
  routed.n_experts = 4;
  routed.n_experts_used = 2;
  routed.experts_from_dense = true;
  SynthSpec flat = routed;
  flat.router_scale = 0;
  const std::string rp = test::TempPath("routed.gguf"), fp = test::TempPath("flat.gguf");
  WriteSyntheticModel(routed, rp);
  WriteSyntheticModel(flat, fp);
  const auto toks = SomeTokens(9, 320);
  Runner r(rp, DetectIsa(), 2, 16), f(fp, DetectIsa(), 2, 16);
  EXPECT_GT(RelErr(r.Run(toks, false), f.Run(toks, false)), 1e-3) << "router ignored";
}

// The llama.cpp mixes put their wider types where llama.cpp does.
TEST(Model, SynthMixesFollowLlamaCpp) {
  const auto vars = Variants();
  for (const Variant& v : vars) {
    if (!v.spec.q3_k_m && !v.spec.q2_k_m) continue;
    auto m = LoadModel(WriteVariant(v));
    const LayerWeights& l0 = m->weights.layers[0];
    EXPECT_EQ(m->weights.output.type, GgmlType::kQ6_K) << v.name;
    if (v.spec.q3_k_m) {
      EXPECT_EQ(l0.wq.type, GgmlType::kQ3_K);
      EXPECT_EQ(l0.wv.type, GgmlType::kQ5_K);  // the first two layers' attn_v
      EXPECT_EQ(l0.wo.type, GgmlType::kQ4_K);
      EXPECT_EQ(l0.w_down.type, GgmlType::kQ4_K);  // past the first sixteenth (2 layers)
    } else {
      EXPECT_EQ(l0.wq.type, GgmlType::kQ2_K);
      EXPECT_EQ(l0.wv.type, GgmlType::kQ4_K);
      EXPECT_EQ(l0.wo.type, GgmlType::kQ3_K);
      EXPECT_EQ(l0.w_down.type, GgmlType::kQ3_K);
    }
  }
}

TEST(Moe, ActiveParametersCountOnlyTheUsedExperts) {
  SynthSpec s;
  s.n_experts = 8;
  s.n_experts_used = 2;
  s.expert_ffn_dim = 32;
  const std::string path = test::TempPath("active.gguf");
  WriteSyntheticModel(s, path);
  auto m = LoadModel(path);
  const int64_t per_expert = 3 * 64 * 32;
  EXPECT_EQ(m->n_params - m->n_active_params, 2 * 6 * per_expert);  // 2 layers, 6 skipped
  EXPECT_EQ(m->weight_bytes - m->active_weight_bytes, 2u * 6u * per_expert * 4u);
}

// Each distinguishing feature must change the output: turning it off gives other logits.
TEST(Model, DistinguishingFeaturesAreNotIgnored) {
  const auto vars = Variants();
  auto find = [&](const char* n) {
    for (const auto& v : vars) {
      if (std::string(v.name) == n) return v;
    }
    ADD_FAILURE() << n;
    return vars[0];
  };
  const auto toks = SomeTokens(11, 320);
  {
    Runner r(WriteVariant(find("qwen2_bias")), DetectIsa(), 1, 4);
    EXPECT_TRUE(r.model->config.qkv_bias);
    const auto with = r.Run(toks, false);
    for (auto& l : r.model->weights.layers) l.bq = l.bk = l.bv = nullptr;
    r.Resolve();
    EXPECT_GT(RelErr(r.Run(toks, false), with), 1e-2) << "QKV bias ignored";
  }
  {
    // Mixture of experts: the shared expert and its gate, the weights' normalization, and
    // OLMoE's whole-row QK-norm each matter.
    Runner r(WriteVariant(find("qwen2moe_shared")), DetectIsa(), 1, 4);
    EXPECT_EQ(r.model->config.shared_ffn_dim, 96);
    EXPECT_FALSE(r.model->config.expert_norm);
    const auto with = r.Run(toks, false);
    for (auto& l : r.model->weights.layers) l.shared_gate = nullptr;
    EXPECT_GT(RelErr(r.Run(toks, false), with), 1e-3) << "shared expert gate ignored";
    r.model->config.expert_norm = true;
    const auto normed = r.Run(toks, false);
    r.model->config.expert_norm = false;
    EXPECT_GT(RelErr(normed, r.Run(toks, false)), 1e-3) << "expert weight norm ignored";
    Runner o(WriteVariant(find("olmoe")), DetectIsa(), 1, 4);
    EXPECT_TRUE(o.model->config.qk_norm_full);
    const auto full = o.Run(toks, false);
    for (auto& l : o.model->weights.layers) l.q_norm = l.k_norm = nullptr;
    o.model->config.qk_norm_full = false;
    o.Resolve();
    EXPECT_GT(RelErr(o.Run(toks, false), full), 1e-2) << "whole-row QK-norm ignored";
    // gpt-oss: sinks, YaRN, the clamped SwiGLU, the router's and the experts' biases.
    Runner gr(WriteVariant(find("gpt_oss")), DetectIsa(), 1, 4);
    const ModelConfig& gc = gr.model->config;
    EXPECT_TRUE(gc.attn_sinks);
    EXPECT_EQ(gc.swa_pattern, 2);
    EXPECT_EQ(gc.sliding_window, 4);
    EXPECT_EQ(gc.ffn_act, FfnAct::kSwigluOai);
    EXPECT_EQ(gc.expert_gating, ExpertGating::kSoftmaxTopK);
    EXPECT_EQ(gc.rope_scaling, "yarn");
    EXPECT_EQ(gc.rope_orig_ctx, 64);
    const auto g_with = gr.Run(toks, false);
    auto& gl = gr.model->weights.layers;
    std::vector<const float*> sinks;
    for (auto& l : gl) sinks.push_back(l.attn_sinks), l.attn_sinks = nullptr;
    gr.Resolve();
    EXPECT_GT(RelErr(gr.Run(toks, false), g_with), 1e-3) << "attention sinks ignored";
    for (size_t i = 0; i < gl.size(); ++i) gl[i].attn_sinks = sinks[i];
    gr.Resolve();
    EXPECT_LT(RelErr(gr.Run(toks, false), g_with), 1e-6);
    gr.model->config.rope_scaling = "none";
    gr.tf->SetContext(256);
    EXPECT_GT(RelErr(gr.Run(toks, false), g_with), 1e-3) << "YaRN ignored";
    gr.model->config.rope_scaling = "yarn";
    gr.tf->SetContext(256);
    const float* rb = gl[0].router_b;
    gl[0].router_b = nullptr;
    EXPECT_GT(RelErr(gr.Run(toks, false), g_with), 1e-4) << "router bias ignored";
    gl[0].router_b = rb;
    for (auto& e : gl[1].experts) e.b_down = nullptr, e.b_gate = e.b_up = nullptr;
    EXPECT_GT(RelErr(gr.Run(toks, false), g_with), 1e-3) << "expert biases ignored";
    Runner silu(WriteVariant(find("gpt_oss")), DetectIsa(), 1, 4);
    silu.model->config.ffn_act = FfnAct::kSilu;
    silu.Resolve();
    EXPECT_GT(RelErr(silu.Run(toks, false), g_with), 1e-3) << "clamped SwiGLU ignored";
    Runner x(WriteVariant(find("mixtral_moe")), DetectIsa(), 1, 4);
    EXPECT_TRUE(x.model->config.expert_norm);  // llama's (Mixtral's) default
    EXPECT_EQ(x.model->config.n_experts_used, 2);
  }
  {
    Runner r(WriteVariant(find("qwen3_qknorm")), DetectIsa(), 1, 4);
    EXPECT_TRUE(r.model->config.qk_norm);
    EXPECT_EQ(r.model->config.head_dim, 32);
    const auto with = r.Run(toks, false);
    for (auto& l : r.model->weights.layers) l.q_norm = l.k_norm = nullptr;
    r.Resolve();
    EXPECT_GT(RelErr(r.Run(toks, false), with), 1e-2) << "QK-norm ignored";
  }
  {
    const std::string path = WriteVariant(find("mistral_window"));
    Runner r(path, DetectIsa(), 1, 4);
    EXPECT_EQ(r.model->config.sliding_window, 5);
    EXPECT_EQ(r.kv->window(), 5);
    const std::vector<int32_t> short_toks(toks.begin(), toks.begin() + 5);
    const auto win_short = r.Run(short_toks, false);
    const auto win_long = r.Run(toks, false);
    KvCacheOptions no_window = F32Kv();
    no_window.sliding_window = 0;
    Runner full(path, DetectIsa(), 1, 4, no_window);
    EXPECT_LT(RelErr(full.Run(short_toks, false), win_short), 1e-6)
        << "window changed a short sequence";
    EXPECT_GT(RelErr(full.Run(toks, false), win_long), 1e-3) << "sliding window ignored";
  }
  {
    Runner r(WriteVariant(find("gemma_geglu")), DetectIsa(), 1, 4);
    EXPECT_EQ(r.model->config.ffn_act, FfnAct::kGeluTanh);
    EXPECT_FLOAT_EQ(r.model->config.embed_scale, 8.0f);  // sqrt(64)
    const auto with = r.Run(toks, false);
    r.model->config.embed_scale = 1.0f;
    EXPECT_GT(RelErr(r.Run(toks, false), with), 1e-3) << "embedding scale ignored";
    r.model->config.embed_scale = 8.0f;
    Runner silu(WriteVariant(find("gemma_geglu")), DetectIsa(), 1, 4);
    silu.model->config.ffn_act = FfnAct::kSilu;
    silu.Resolve();
    EXPECT_GT(RelErr(silu.Run(toks, false), with), 1e-3) << "GELU ignored";
  }
  {
    // Gemma 3: five local layers (window, RoPE base 10000) to one global (the file's base).
    Runner r(WriteVariant(find("gemma3_local_global")), DetectIsa(), 1, 4);
    const ModelConfig& c = r.model->config;
    EXPECT_EQ(c.swa_pattern, 6);
    EXPECT_FLOAT_EQ(c.rope_base_local, 10000.0f);
    EXPECT_FLOAT_EQ(c.rope_base, 1e6f);
    EXPECT_TRUE(c.qk_norm);
    EXPECT_TRUE(c.post_norms);
    EXPECT_EQ(c.LayerWindow(4, 4), 4);
    EXPECT_EQ(c.LayerWindow(5, 4), 0);
    EXPECT_EQ(c.LayerWindow(6, 4), 4);
    const auto with = r.Run(toks, false);
    // The local layers' RoPE base matters (a transformer built with it changed).
    Runner other(WriteVariant(find("gemma3_local_global")), DetectIsa(), 1, 4);
    other.model->config.rope_base_local = 500.0f;
    other.tf = std::make_unique<Transformer>(*other.model, GetKernels(DetectIsa()), other.pool, 4,
                                             ForwardOptions{.int8_activations = false});
    EXPECT_GT(RelErr(other.Run(toks, false), with), 1e-4) << "local RoPE base ignored";
  }
  {
    // Gemma 2: attention and final soft-capping, post-norms, local/global alternation.
    const std::string path = WriteVariant(find("gemma2_softcap"));
    Runner r(path, DetectIsa(), 1, 4);
    const ModelConfig& c = r.model->config;
    EXPECT_FLOAT_EQ(c.attn_softcap, 1.5f);
    EXPECT_FLOAT_EQ(c.final_softcap, 3.0f);
    EXPECT_EQ(c.swa_pattern, 2);
    EXPECT_EQ(c.LayerWindow(0, 4), 4);
    EXPECT_EQ(c.LayerWindow(1, 4), 0);
    EXPECT_EQ(c.LayerWindow(2, 4), 4);
    const auto with = r.Run(toks, false);
    double mx = 0;
    for (float x : with) mx = std::max(mx, static_cast<double>(std::fabs(x)));
    EXPECT_LE(mx, 3.0) << "final soft-cap not applied";
    // (The forward pass reads a layer's ops from the weights once: made anew after a change.)
    auto differs = [&](const char* what, auto&& change, auto&& undo) {
      change(r.model->config, r.model->weights);
      r.UseKernels(GetKernels(DetectIsa()));
      EXPECT_GT(RelErr(r.Run(toks, false), with), 1e-4) << what << " ignored";
      undo(r.model->config, r.model->weights);
      r.UseKernels(GetKernels(DetectIsa()));
    };
    differs(
        "attention soft-cap", [](ModelConfig& m, ModelWeights&) { m.attn_softcap = 0; },
        [](ModelConfig& m, ModelWeights&) { m.attn_softcap = 1.5f; });
    differs(
        "final soft-cap", [](ModelConfig& m, ModelWeights&) { m.final_softcap = 0; },
        [](ModelConfig& m, ModelWeights&) { m.final_softcap = 3.0f; });
    differs(
        "layer alternation", [](ModelConfig& m, ModelWeights&) { m.swa_pattern = 0; },
        [](ModelConfig& m, ModelWeights&) { m.swa_pattern = 2; });
    std::vector<const float*> saved;
    differs(
        "post-norms",
        [&](ModelConfig&, ModelWeights& w) {
          for (auto& l : w.layers) {
            saved.push_back(l.post_attn_norm);
            l.post_attn_norm = nullptr;
          }
        },
        [&](ModelConfig&, ModelWeights& w) {
          for (size_t i = 0; i < w.layers.size(); ++i) w.layers[i].post_attn_norm = saved[i];
        });
    EXPECT_LT(RelErr(r.Run(toks, false), with), 1e-7)
        << "restoring the features restores the logits";
    // Global layers keep every block: the KV manager must not release blocks out of the window.
    std::vector<int32_t> long_toks = SomeTokens(40, 320);
    r.Run(long_toks, false);
    for (int32_t b : r.kv->Table(r.seq))
      EXPECT_GT(b, 0) << "a block was released under alternating windows";
  }
  {
    // GPT-2: LayerNorm biases, learned positions and projection biases each matter; no RoPE.
    Runner r(WriteVariant(find("gpt2_layernorm")), DetectIsa(), 1, 4);
    const ModelConfig& c = r.model->config;
    EXPECT_TRUE(c.layer_norm);
    EXPECT_TRUE(c.learned_pos);
    EXPECT_FALSE(c.ffn_gated);
    EXPECT_EQ(c.rope_dim, 0);
    const auto with = r.Run(toks, false);
    auto& L = r.model->weights.layers;
    const float* nb = L[0].attn_norm_b;
    L[0].attn_norm_b = nullptr;
    r.UseKernels(GetKernels(DetectIsa()));  // the layers' ops made anew
    EXPECT_GT(RelErr(r.Run(toks, false), with), 1e-3) << "LayerNorm bias ignored";
    L[0].attn_norm_b = nb;
    r.UseKernels(GetKernels(DetectIsa()));
    r.model->config.layer_norm = false;
    r.Resolve();
    EXPECT_GT(RelErr(r.Run(toks, false), with), 1e-3) << "LayerNorm treated as RMSNorm";
    r.model->config.layer_norm = true;
    r.Resolve();
    const WeightTensor pe = r.model->weights.pos_embd;
    r.model->weights.pos_embd = WeightTensor();
    EXPECT_GT(RelErr(r.Run(toks, false), with), 1e-3) << "learned positions ignored";
    r.model->weights.pos_embd = pe;
    const float* bu = L[0].b_up;
    L[0].b_up = nullptr;
    r.Resolve();
    EXPECT_GT(RelErr(r.Run(toks, false), with), 1e-3) << "FFN bias ignored";
    L[0].b_up = bu;
    r.Resolve();
    EXPECT_LT(RelErr(r.Run(toks, false), with), 1e-7);
  }
  {
    // Phi-3's fused attn_qkv / ffn_up hold [q | k | v] and [gate | up]: the same weights written
    // as separate tensors (qwen2 layout: same NeoX RoPE, no bias) give the same logits.
    const std::string fused = WriteVariant(find("phi3_fused"));
    const GgufFile g = GgufFile::Open(fused);
    const SynthSpec& s = find("phi3_fused").spec;
    const std::string split = test::TempPath("phi3_split.gguf");
    GgufWriter out;
    const int qd = s.n_heads * (s.dim / s.n_heads), kvd = s.n_kv_heads * (s.dim / s.n_heads);
    // Metadata from the fused file under the qwen2 prefix.
    const GgufFile& src = g;
    out.SetString("general.architecture", "qwen2");
    out.SetU32("qwen2.context_length", static_cast<uint32_t>(s.context));
    out.SetU32("qwen2.embedding_length", static_cast<uint32_t>(s.dim));
    out.SetU32("qwen2.block_count", static_cast<uint32_t>(s.n_layers));
    out.SetU32("qwen2.feed_forward_length", static_cast<uint32_t>(s.ffn_dim));
    out.SetU32("qwen2.attention.head_count", static_cast<uint32_t>(s.n_heads));
    out.SetU32("qwen2.attention.head_count_kv", static_cast<uint32_t>(s.n_kv_heads));
    out.SetU32("qwen2.rope.dimension_count", static_cast<uint32_t>(s.dim / s.n_heads));
    out.SetF32("qwen2.rope.freq_base", s.rope_base);
    out.SetF32("qwen2.attention.layer_norm_rms_epsilon", 1e-5f);
    std::vector<std::string> toks_s;
    for (auto p : *src.GetStringArray("tokenizer.ggml.tokens")) toks_s.emplace_back(p);
    out.SetString("tokenizer.ggml.model", "llama");
    out.SetStringArray("tokenizer.ggml.tokens", toks_s);
    for (const auto& t : src.tensors()) {
      const std::string name(t.name);
      const size_t rb = t.nbytes / static_cast<size_t>(t.ne[1] > 0 ? t.ne[1] : 1);
      if (name.find("attn_qkv") != std::string::npos) {
        const std::string p = name.substr(0, name.find("attn_qkv"));
        out.AddTensor(p + "attn_q.weight", {t.ne[0], qd}, t.type, t.data,
                      rb * static_cast<size_t>(qd));
        out.AddTensor(p + "attn_k.weight", {t.ne[0], kvd}, t.type,
                      t.data + rb * static_cast<size_t>(qd), rb * static_cast<size_t>(kvd));
        out.AddTensor(p + "attn_v.weight", {t.ne[0], kvd}, t.type,
                      t.data + rb * static_cast<size_t>(qd + kvd), rb * static_cast<size_t>(kvd));
      } else if (name.find("ffn_up") != std::string::npos) {
        const std::string p = name.substr(0, name.find("ffn_up"));
        const int64_t f = t.ne[1] / 2;
        out.AddTensor(p + "ffn_gate.weight", {t.ne[0], f}, t.type, t.data,
                      rb * static_cast<size_t>(f));
        out.AddTensor(p + "ffn_up.weight", {t.ne[0], f}, t.type,
                      t.data + rb * static_cast<size_t>(f), rb * static_cast<size_t>(f));
      } else {
        std::vector<int64_t> ne;
        for (int d = 0; d < t.n_dims; ++d) ne.push_back(t.ne[d]);
        out.AddTensor(name, ne, t.type, t.data, t.nbytes);
      }
    }
    out.Write(split);
    Runner a(fused, DetectIsa(), 1, 4), b(split, DetectIsa(), 1, 4);
    EXPECT_EQ(a.model->config.rope_style, RopeStyle::kHalfSplit);
    EXPECT_LT(RelErr(a.Run(toks, false), b.Run(toks, false)), 1e-6)
        << "fused Phi-3 tensors split wrongly";
  }
  {
    Runner r(WriteVariant(find("qwen2_bias")), DetectIsa(), 1, 4);
    EXPECT_EQ(r.model->config.rope_style, RopeStyle::kHalfSplit);
    const auto neox = r.Run(toks, false);
    r.model->config.rope_style = RopeStyle::kAdjacentPairs;
    r.Resolve();
    EXPECT_GT(RelErr(r.Run(toks, false), neox), 1e-3) << "RoPE layout ignored";
  }
}

TEST(Model, ContextOverflowIsAnErrorNotACrash) {
  SynthSpec s;
  s.context = 16;
  const std::string path = test::TempPath("ctx16.gguf");
  WriteSyntheticModel(s, path);
  Runner r(path, DetectIsa(), 1, 4);
  const auto toks = SomeTokens(17, s.n_vocab);
  r.seq = r.kv->Create(32);
  ASSERT_TRUE(r.kv->Reserve(r.seq, 17));
  EXPECT_THROW(r.tf->Forward(toks.data(), 17, 0, r.kv->View(r.seq)), Error);
  const int32_t bad = 100000;
  EXPECT_THROW(r.tf->Forward(&bad, 1, 0, r.kv->View(r.seq)), Error);
}

}  // namespace
}  // namespace paddock

namespace paddock {
namespace {

// --- paged KV cache at model level ---------------------------------------------------------

std::vector<float> RunWithBlocks(const std::string& path, const std::vector<int32_t>& toks,
                                 int block_size, KvDtype type, bool batched) {
  KvCacheOptions o;
  o.block_size = block_size;
  o.k_type = o.v_type = type;
  Runner r(path, DetectIsa(), 2, 8, o);
  return r.Run(toks, batched);
}

TEST(PagedKv, PagedEqualsContiguous) {
  SynthSpec s;
  s.context = 512;
  const std::string synth = test::TempPath("paged.gguf");
  WriteSyntheticModel(s, synth);
  const std::string stories = test::ModelPath("stories260K.gguf");
  for (const std::string& path : {stories, synth}) {
    for (int len : {7, 33, 61}) {
      const auto toks = SomeTokens(len, 320);
      for (KvDtype type : {KvDtype::kF32, KvDtype::kF16, KvDtype::kI8}) {
        for (bool batched : {false, true}) {
          // Contiguous: one block as large as the context.
          const auto contiguous = RunWithBlocks(path, toks, 512, type, batched);
          for (int bs : {1, 16, 64}) {
            const auto paged = RunWithBlocks(path, toks, bs, type, batched);
            // Same numerics, other addresses: equal up to float rounding (in practice exactly).
            EXPECT_LE(RelErr(paged, contiguous), 1e-6)
                << path << " len " << len << " bs " << bs << " " << KvDtypeName(type);
          }
        }
      }
    }
  }
}

std::unique_ptr<Engine> StoriesEngine(const std::string& k_type, const std::string& v_type,
                                      bool prefix_cache = true,
                                      const std::string& layer_types = "") {
  EngineOptions eo;
  eo.model_path = test::ModelPath("stories260K.bin");
  eo.tokenizer_path = test::ModelPath("tok512.bin");
  eo.cache_type_k = k_type;
  eo.cache_type_v = v_type;
  eo.kv_layer_types = layer_types;
  eo.prefix_cache = prefix_cache;
  return Engine::Create(eo);
}

TEST(PagedKv, GoldenStoryWithReducedPrecisionKv) {
  // f16 and bf16 K/V, and int8 V, reproduce the f32 golden story exactly.
  for (auto kv : {std::pair{"f16", "f16"}, std::pair{"bf16", "bf16"}, std::pair{"f16", "int8"}}) {
    auto e = StoriesEngine(kv.first, kv.second);
    EXPECT_EQ(e->Generate("", Greedy(256)).text, Golden())
        << "K " << kv.first << " V " << kv.second;
  }
  // int8 K (one scale per token and head of 8) perturbs logits by up to ~0.6 on this model,
  // whose greedy path has top-1/top-2 gaps as small as 0.004: it follows the golden story for
  // its first 100+ tokens, then takes a near-tie the other way.
  auto e = StoriesEngine("int8", "int8");
  const std::string text = e->Generate("", Greedy(256)).text;
  size_t common = 0;
  while (common < text.size() && common < Golden().size() && text[common] == Golden()[common])
    ++common;
  EXPECT_GE(common, 250u);  // ~100 tokens
}

TEST(PagedKv, SharedPrefixIsReusedAndChangesNothing) {
  // ~1,000 tokens of shared prefix (the golden story, repeated), two different questions.
  std::string prefix;
  while (prefix.size() < 3000) prefix += Golden() + "\n";
  EngineOptions eo;
  eo.model_path = test::ModelPath("stories260K.gguf");
  auto cached = Engine::Create(eo);
  eo.prefix_cache = false;
  auto uncached = Engine::Create(eo);
  const int n_prefix = static_cast<int>(cached->Tokenize(prefix, true).size());
  ASSERT_GE(n_prefix, 1000);
  const std::string a = prefix + "Lily went to the park.", b = prefix + "Tom saw a big dog.";
  const GenerateResult first = cached->Generate(a, Greedy(20));
  EXPECT_EQ(first.cached_tokens, 0);
  const GenerateResult second = cached->Generate(b, Greedy(20));
  EXPECT_GE(second.cached_tokens, n_prefix * 9 / 10)
      << "second request recomputed too much of the prefix";
  EXPECT_EQ(second.text, uncached->Generate(b, Greedy(20)).text);
  const MemoryReport m = cached->Memory();
  EXPECT_GT(m.prefix_hits, 0);
  EXPECT_EQ(m.kv_used_blocks, 0);  // all sequences finished: every block is back in the pool
}

// Gemma 4 (shared KV, per-layer inputs, local and global layers): a shared prefix resumes from
// the cache, and n-gram speculation, with the same text as plain decoding from scratch. Steps of
// 16 tokens make the local layers' rings 64 positions (window 8): the prefix resumes from a
// snapshot of the rings (every block here).
TEST(PagedKv, Gemma4PrefixReuseAndSpeculationAreExact) {
  const std::string path = test::TempPath("gemma4-engine.gguf");
  WriteSyntheticModel(SynthPreset("tiny-gemma4"), path);
  std::string prefix;
  for (int i = 0; prefix.size() < 200; ++i) prefix += "the " + std::to_string(i % 7) + " cat ";
  EngineOptions eo;
  eo.model_path = path;
  eo.max_batch = 16;
  eo.state_snapshot_every = 1;
  auto cached = Engine::Create(eo);
  eo.prefix_cache = false;
  auto uncached = Engine::Create(eo);
  eo.spec = "ngram";
  auto spec = Engine::Create(eo);
  const int n_prefix = static_cast<int>(cached->Tokenize(prefix, true).size());
  ASSERT_GE(n_prefix, 100);
  const std::string a = prefix + "a dog", b = prefix + "a bird";
  EXPECT_EQ(cached->Generate(a, Greedy(24)).cached_tokens, 0);
  const GenerateResult second = cached->Generate(b, Greedy(24));
  EXPECT_GE(second.cached_tokens, n_prefix - 16);
  const std::string plain = uncached->Generate(b, Greedy(24)).text;
  EXPECT_EQ(second.text, plain);
  EXPECT_EQ(spec->Generate(b, Greedy(24)).text, plain);
  // The storing layers' f16 rows: the global one's in blocks (its 2 KV heads of 32), the two
  // local ones' in each sequence's rings (64 positions of 256 B) beside it.
  EXPECT_EQ(cached->Memory().kv_bytes_per_token, 256u);
  EXPECT_EQ(cached->Memory().kv_state_bytes, 64u * 256);
  eo.kv_rings = false;
  EXPECT_EQ(Engine::Create(eo)->Memory().kv_bytes_per_token, 512u);
}

// Past the window: the local layers' rings wrap many times (a 64-position ring, window 8, 300
// tokens) and the text is the text with every position in blocks, plain, speculating (drafts
// cut back in the rings) and as n = 2 forks in the service; a budget that holds the sequence
// only with rings runs it.
TEST(PagedKv, Gemma4RingsPastTheWindowAreExact) {
  const std::string path = test::TempPath("gemma4-rings.gguf");
  SynthSpec spec = SynthPreset("tiny-gemma4");
  spec.context = 512;
  WriteSyntheticModel(spec, path);
  EngineOptions eo;
  eo.model_path = path;
  eo.max_batch = 16;
  eo.kv_rings = false;
  const std::string prompt = "the cat sat on the mat and the dog ran to the big red house";
  const std::string blocks = Engine::Create(eo)->Generate(prompt, Greedy(300, true)).text;
  eo.kv_rings = true;
  auto rings = Engine::Create(eo);
  EXPECT_EQ(rings->Generate(prompt, Greedy(300, true)).text, blocks);
  EXPECT_EQ(rings->Memory().kv_bytes_per_token, 256u);
  eo.spec = "ngram";
  eo.spec_fixed = true;
  EXPECT_EQ(Engine::Create(eo)->Generate(prompt, Greedy(300, true)).text, blocks);
  eo.spec = "off";
  // 160 KiB: two sequences' rings (16 KiB each, no snapshots) and 31 blocks of 16 tokens of the
  // global layer's rows; every layer in blocks: 19 blocks, 304 positions.
  eo.kv_memory = 160 * 1024;
  eo.state_slots = 2;
  eo.state_snapshot_every = 0;
  auto small = Engine::Create(eo);
  const GenerateResult r = small->Generate(prompt, Greedy(300, true));
  EXPECT_EQ(r.text, blocks);
  EXPECT_EQ(r.finish, FinishReason::kLength);
  eo.kv_rings = false;  // the same budget in blocks of every layer: the context runs out
  EXPECT_EQ(Engine::Create(eo)->Generate(prompt, Greedy(300, true)).finish, FinishReason::kContext);
}

TEST(PagedKv, KvMemoryBudgetLimitsTheContextGracefully) {
  EngineOptions eo;
  eo.model_path = test::ModelPath("stories260K.gguf");
  eo.kv_memory = 64 * 1024;  // a few blocks only
  auto e = Engine::Create(eo);
  const MemoryReport m = e->Memory();
  EXPECT_LE(m.kv_allocated_bytes, 64u * 1024 + 64 * 10);  // + alignment of 10 regions
  GenerateOptions o = Greedy(1000);
  o.ignore_eos = true;
  const GenerateResult r = e->Generate("Once upon a time", o);
  EXPECT_EQ(r.finish, FinishReason::kContext);
  EXPECT_EQ(r.prompt_tokens + r.generated_tokens, m.kv_total_blocks * m.kv_block_size + 1);
}

}  // namespace
}  // namespace paddock

namespace paddock {
namespace {

// The batch tests' models: the real stories260K, a synthetic Q4_0 llama and a qwen3moe mixture
// of experts (whose sequences route differently), the synthetic ones written as PREFIX*.gguf.
std::vector<std::string> BatchModels(const std::string& prefix) {
  SynthSpec spec;
  spec.type = GgmlType::kQ4_0;
  spec.context = 256;
  const std::string synth = test::TempPath(prefix + ".gguf");
  WriteSyntheticModel(spec, synth);
  SynthSpec moe_spec = spec;
  moe_spec.arch = "qwen3moe";
  moe_spec.n_experts = 6;
  moe_spec.n_experts_used = 2;
  moe_spec.expert_ffn_dim = 64;
  const std::string moe = test::TempPath(prefix + "_moe.gguf");
  WriteSyntheticModel(moe_spec, moe);
  SynthSpec g4 = SynthPreset("tiny-gemma4");  // shared KV: the last layer stores none
  g4.type = GgmlType::kQ4_0;
  const std::string gemma4 = test::TempPath(prefix + "_gemma4.gguf");
  WriteSyntheticModel(g4, gemma4);
  return {test::ModelPath("stories260K.gguf"), synth, moe, gemma4};
}

// Sequences of different lengths stepping together must see exactly what they see alone.
TEST(Batch, ManySequencesTogetherEqualEachAlone) {
  for (const std::string& path : BatchModels("batch")) {
    for (bool int8 : {false, true}) {
      Runner r(path, DetectIsa(), 2, 96, KvCacheOptions(), int8);
      const int n_seq = 13;  // not a multiple of anything
      std::vector<std::vector<int32_t>> prompts(n_seq);
      for (int s = 0; s < n_seq; ++s) {
        prompts[s] = SomeTokens(1 + (s * 7) % 11, 320);
        prompts[s][0] = 1;
        for (size_t i = 1; i < prompts[s].size(); ++i)
          prompts[s][i] = 3 + (s * 31 + static_cast<int>(i) * 17) % 300;
      }
      // Alone: each prompt's last logits.
      std::vector<std::vector<float>> alone(n_seq);
      for (int s = 0; s < n_seq; ++s) alone[s] = r.Run(prompts[s], false);
      // Together: all prompts in one step (different lengths and positions), then 3 decode
      // steps of all sequences with their own greedy tokens, checked against a replay alone.
      KvManager& kv = *r.kv;
      std::vector<KvManager::SeqId> ids(n_seq);
      std::vector<KvView> views(n_seq);
      std::vector<Transformer::BatchItem> items(n_seq);
      for (int s = 0; s < n_seq; ++s) {
        ids[s] = kv.Create(64);
        ASSERT_TRUE(kv.Reserve(ids[s], static_cast<int>(prompts[s].size())));
        views[s] = kv.View(ids[s]);
        items[s] = {prompts[s].data(), static_cast<int>(prompts[s].size()), 0, &views[s]};
      }
      std::vector<const float*> logits(n_seq);
      r.tf->ForwardBatch(items.data(), n_seq, logits.data());
      const int V = r.model->config.n_vocab;
      const double tol = int8 ? kInt8LogitTol : 1e-5;
      for (int s = 0; s < n_seq; ++s) {
        EXPECT_LT(RelErr(std::vector<float>(logits[s], logits[s] + V), alone[s]), tol)
            << path << " seq " << s;
        kv.Commit(ids[s], prompts[s].data(), static_cast<int>(prompts[s].size()));
      }
      std::vector<int32_t> next(n_seq);
      for (int step = 0; step < 3; ++step) {
        for (int s = 0; s < n_seq; ++s) {
          next[s] = static_cast<int32_t>(std::max_element(logits[s], logits[s] + V) - logits[s]);
          prompts[s].push_back(next[s]);
          const int pos = static_cast<int>(prompts[s].size()) - 1;
          ASSERT_TRUE(kv.Reserve(ids[s], pos + 1));
          views[s] = kv.View(ids[s]);
          items[s] = {&next[s], 1, pos, &views[s]};
        }
        r.tf->ForwardBatch(items.data(), n_seq, logits.data());
        std::vector<std::vector<float>> got(n_seq);
        for (int s = 0; s < n_seq; ++s) {
          got[s].assign(logits[s], logits[s] + V);
          kv.Commit(ids[s], &next[s], 1);
        }
        for (int s = 0; s < n_seq; ++s) {
          const auto solo = [&] {
            Runner one(path, DetectIsa(), 2, 64, KvCacheOptions(), int8);
            return one.Run(prompts[s], false);
          }();
          EXPECT_LT(RelErr(got[s], solo), tol) << path << " step " << step << " seq " << s;
        }
      }
      for (auto id : ids) kv.Free(id);
    }
  }
}

}  // namespace
}  // namespace paddock

namespace paddock {
namespace {

// The last layer computes past its K/V only the rows whose logits were asked for: a prompt's
// last logits are bit-identical to the same row's when every row's logits are asked for (no
// row dropped), dense and mixture of experts, integer and float activations, and with prompts
// on the bf16 prefill; and the next token sees the same cache.
TEST(Batch, LastLayerOnTheLogitsRowsAloneChangesNoResult) {
  for (const std::string& path : BatchModels("prune")) {
    for (bool int8 : {false, true}) {
      Runner r(path, DetectIsa(), 2, 96, KvCacheOptions(), int8);
      const int V = r.model->config.n_vocab;
      KvManager& kv = *r.kv;
      // Two prompts in one step (70 tokens: on the bf16 prefill where the CPU has it; 9), then
      // one decode step each; once with one logits row per prompt, once with all.
      std::vector<std::vector<int32_t>> prompts = {SomeTokens(70, 300), SomeTokens(9, 300)};
      std::vector<float> got[2][2];  // [all rows][prompt, then decode] of sequence 0 and 1
      for (int all = 0; all < 2; ++all) {
        KvManager::SeqId ids[2];
        KvView views[2];
        Transformer::BatchItem items[2];
        for (int s = 0; s < 2; ++s) {
          const int n = static_cast<int>(prompts[s].size());
          ids[s] = kv.Create(96);
          ASSERT_TRUE(kv.Reserve(ids[s], n + 1));
          views[s] = kv.View(ids[s]);
          items[s] = {prompts[s].data(), n, 0, &views[s], all != 0 ? n : 1, n};
        }
        const float* logits[2];
        r.tf->ForwardBatch(items, 2, logits);
        int32_t next[2];
        for (int s = 0; s < 2; ++s) {
          const float* last = logits[s] + static_cast<size_t>(items[s].n_logits - 1) * V;
          got[all][0].insert(got[all][0].end(), last, last + V);
          next[s] = static_cast<int32_t>(std::max_element(last, last + V) - last);
          kv.Commit(ids[s], prompts[s].data(), items[s].n);
          items[s] = {&next[s], 1, items[s].n, &views[s], 1, items[s].n};
        }
        r.tf->ForwardBatch(items, 2, logits);
        for (int s = 0; s < 2; ++s) {
          got[all][1].insert(got[all][1].end(), logits[s], logits[s] + V);
          kv.Free(ids[s]);
        }
      }
      for (int step = 0; step < 2; ++step) {
        ASSERT_EQ(got[0][step].size(), got[1][step].size());
        EXPECT_EQ(0, std::memcmp(got[0][step].data(), got[1][step].data(),
                                 sizeof(float) * got[0][step].size()))
            << path << (int8 ? " int8" : " float") << (step == 0 ? " prompt" : " decode");
      }
    }
  }
}

}  // namespace
}  // namespace paddock

namespace paddock {
namespace {

// Q/K/V in one pass with the bias / QK-norm / RoPE epilogue, gate/up + SwiGLU, and residual +
// norm + quantize fused, against each pass on its own, on interleaved (re-laid) weights and on
// architectures with QKV biases (qwen2), QK-norm (qwen3), NeoX RoPE (phi3) and post norms (gemma2).
TEST(Fusion, FusedAndSeparatePassesGiveTheSameLogits) {
  for (const char* arch : {"llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3"}) {
    SynthSpec spec;
    spec.arch = arch;
    spec.type = GgmlType::kQ4_0;
    if (spec.arch == "qwen3" || spec.arch == "gemma3") spec.qk_norm = true;
    const std::string path = test::TempPath(std::string("fusion-") + arch + ".gguf");
    WriteSyntheticModel(spec, path);
    const auto toks = SomeTokens(9, spec.n_vocab);
    for (bool relaid : {false, true}) {
      for (bool batched : {false, true}) {
        Runner fused(path, DetectIsa(), 2, 16, KvCacheOptions(), true);
        Runner separate(path, DetectIsa(), 2, 16, KvCacheOptions(), true);
        if (relaid) {
          RelayoutWeights(fused.model.get());
          RelayoutWeights(separate.model.get());
        }
        test::Reconfigure(*separate.tf,
                          [](ForwardOptions& o) { o.fuse_qkv = o.fuse_ffn = o.fuse_norm = false; });
        EXPECT_LT(RelErr(fused.Run(toks, batched), separate.Run(toks, batched)), 1e-6)
            << arch << (relaid ? " relaid" : "");
      }
    }
    std::remove(path.c_str());
  }
}

}  // namespace
}  // namespace paddock

namespace paddock {
namespace {

TEST(Relayout, ReLaidWeightsGiveTheSameLogits) {
  const struct {
    GgmlType type, matrix;
  } cases[] = {{GgmlType::kQ4_0, GgmlType::kQ4_0X16},  {GgmlType::kQ8_0, GgmlType::kQ8_0X16},
               {GgmlType::kQ4_1, GgmlType::kPQ4_G32Z}, {GgmlType::kQ5_0, GgmlType::kQ5_0X16},
               {GgmlType::kQ5_1, GgmlType::kQ5_1X16},  {GgmlType::kIQ4_NL, GgmlType::kIQ4_NLX16},
               {GgmlType::kMXFP4, GgmlType::kMXFP4X16}};
  for (const auto& tc : cases) {
    SynthSpec spec;
    spec.type = tc.type;
    // The output matrix is the embedding table: re-laid into its own buffer like any matrix,
    // the embedding lookup reading rows of the file's.
    spec.tied_embeddings = true;
    const std::string path = test::TempPath("relayout.gguf");
    WriteSyntheticModel(spec, path);
    const auto toks = SomeTokens(9, spec.n_vocab);
    for (bool batched : {false, true}) {
      Runner plain(path, DetectIsa(), 2, 16, KvCacheOptions(), true);
      Runner relaid(path, DetectIsa(), 2, 16, KvCacheOptions(), true);
      RelayoutWeights(relaid.model.get());
      EXPECT_EQ(relaid.model->weights.layers[0].wq.type, tc.matrix);
      EXPECT_EQ(relaid.model->weights.output.type, tc.matrix);
      EXPECT_EQ(relaid.model->weights.tok_embd.type, tc.type);
      // Q4_1 / Q5_x have no integer kernel in their file layout (float activations there): the
      // re-laid one quantizes activations to int8, a ~1% difference; Q4_0 / Q8_0 are int8 both
      // ways.
      const double tol = tc.type == GgmlType::kQ4_0 || tc.type == GgmlType::kQ8_0 ? 1e-5 : 3e-2;
      EXPECT_LT(RelErr(relaid.Run(toks, batched), plain.Run(toks, batched)), tol)
          << TypeName(tc.type);
    }
    std::remove(path.c_str());
  }
  // Q2_K, Q3_K and IQ4_XS (rows of 256): their interleaved kernels against the file layout's
  // float path (int8 activations: the 3e-2 bound).
  for (GgmlType t : {GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kIQ4_XS}) {
    SynthSpec k;
    k.dim = 256;
    k.ffn_dim = 256;
    k.type = t;
    const std::string path = test::TempPath("relayout_k.gguf");
    WriteSyntheticModel(k, path);
    const auto toks = SomeTokens(9, k.n_vocab);
    for (bool batched : {false, true}) {
      Runner plain(path, DetectIsa(), 2, 16, KvCacheOptions(), true);
      Runner relaid(path, DetectIsa(), 2, 16, KvCacheOptions(), true);
      RelayoutWeights(relaid.model.get());
      EXPECT_TRUE(IsX16(relaid.model->weights.layers[0].wq.type)) << TypeName(t);
      EXPECT_LT(RelErr(relaid.Run(toks, batched), plain.Run(toks, batched)), 3e-2) << TypeName(t);
    }
    std::remove(path.c_str());
  }
  // Experts are re-laid one by one like dense matrices (each expert's 16-row groups).
  SynthSpec moe;
  moe.arch = "qwen3moe";
  moe.type = GgmlType::kQ4_0;
  moe.n_experts = 4;
  moe.n_experts_used = 2;
  moe.expert_ffn_dim = 64;
  const std::string path = test::TempPath("relayout_moe.gguf");
  WriteSyntheticModel(moe, path);
  const auto toks = SomeTokens(9, moe.n_vocab);
  for (bool batched : {false, true}) {
    Runner plain(path, DetectIsa(), 2, 16, KvCacheOptions(), true);
    Runner relaid(path, DetectIsa(), 2, 16, KvCacheOptions(), true);
    RelayoutWeights(relaid.model.get());
    const ExpertWeights& e = relaid.model->weights.layers[1].experts[3];
    EXPECT_EQ(e.gate.type, GgmlType::kQ4_0X16);
    EXPECT_EQ(e.down.type, GgmlType::kQ4_0X16);
    EXPECT_LT(RelErr(relaid.Run(toks, batched), plain.Run(toks, batched)), 1e-5);
  }
  std::remove(path.c_str());
}

// A Q4_K_M-style model (Q4_K matrices, Q6_K attn_v / ffn_down of the last layer and the
// output matrix) and a Q5_K one: the k-quants re-laid for the interleaved kernels give the file
// layout's logits, in decode and batched prefill, with and without prefetch; the embedding
// table keeps its file layout.
TEST(Relayout, KQuantMixGivesTheSameLogits) {
  for (bool q5 : {false, true}) {
    SynthSpec spec;
    spec.dim = 256;
    spec.ffn_dim = 512;
    spec.n_vocab = 512;
    spec.type = q5 ? GgmlType::kQ5_K : GgmlType::kQ4_K;
    spec.q4_k_m = !q5;
    const std::string path = test::TempPath("relayout-k.gguf");
    WriteSyntheticModel(spec, path);
    const auto toks = SomeTokens(11, spec.n_vocab);
    for (bool batched : {false, true}) {
      Runner plain(path, DetectIsa(), 2, 16, KvCacheOptions(), true);
      Runner relaid(path, DetectIsa(), 2, 16, KvCacheOptions(), true);
      RelayoutWeights(relaid.model.get());
      const ModelWeights& w = relaid.model->weights;
      const GgmlType main = q5 ? GgmlType::kQ5_KX16 : GgmlType::kQ4_KX16,
                     wide = q5 ? main : GgmlType::kQ6_KX16;
      EXPECT_EQ(w.layers[0].wq.type, main);
      EXPECT_EQ(w.layers[0].w_down.type, main);
      EXPECT_EQ(w.layers[1].w_down.type, wide);
      EXPECT_EQ(w.layers[1].wv.type, wide);
      EXPECT_EQ(w.output.type, wide);
      EXPECT_EQ(w.tok_embd.type, spec.type);
      // Q5_K has no integer kernel in its file layout (float activations there). The re-laid
      // kernels sum in another order (1e-7): where an activation lies that close to an int8
      // rounding boundary, one quant moves by one and these logits by about 1%, for every later
      // token (seen over 15 sequence lengths: even the file layout's AVX2 and AVX-512 kernels
      // against the scalar ones, at 2). The kernels themselves are held to the reference on the
      // same activations (Kernels.InterleavedKQuantsMatchTheFileLayouts and the GEMV/GEMM tests);
      // here a wrong layout or scale would move the logits by far more than 3%.
      const double tol = 3e-2;
      for (Prefetch prefetch : {Prefetch::kAuto, Prefetch::kOff, Prefetch::kAll}) {
        relaid.UseKernels(GetKernels(DetectIsa(), prefetch));
        EXPECT_LT(RelErr(relaid.Run(toks, batched), plain.Run(toks, batched)), tol)
            << q5 << batched << static_cast<int>(prefetch);
      }
    }
    std::remove(path.c_str());
  }
}

}  // namespace
}  // namespace paddock

namespace paddock {
namespace {

// The fused online-softmax attention equals the two-pass per-head attention (rounding only),
// for every KV type, with and without a window, and on both ISAs' tables.
// Decode past 128 positions with one KV head on 2 threads: the tiled kernel splits the
// positions between the threads and merges the partial softmax results; equal to two-pass.
TEST(Fusion, SplitPositionAttentionEqualsTwoPass) {
  SynthSpec spec;
  spec.n_heads = 4;
  spec.n_kv_heads = 1;
  spec.context = 320;
  spec.sliding_window = 0;
  const std::string path = test::TempPath("attn-mqa.gguf");
  WriteSyntheticModel(spec, path);
  const auto toks = SomeTokens(300, spec.n_vocab);
  for (Isa isa : {Isa::kScalar, DetectIsa()}) {
    for (KvDtype t : {KvDtype::kF16, KvDtype::kI8}) {
      KvCacheOptions o;
      o.k_type = o.v_type = t;
      Runner fused(path, isa, 2, 32, o);
      Runner two_pass(path, isa, 2, 32, o);
      test::Reconfigure(*two_pass.tf, [](ForwardOptions& o) { o.fuse_attn = false; });
      EXPECT_LT(RelErr(fused.Run(toks, false), two_pass.Run(toks, false)), 2e-5)
          << IsaName(isa) << " " << KvDtypeName(t);
    }
  }
  std::remove(path.c_str());
  // Attention sinks (gpt-oss) in the split positions' merge, the tiled pass and the two-pass
  // softmax alike; the window off so one task's positions are long enough to split.
  SynthSpec sinks = SynthPreset("tiny-gpt-oss");
  sinks.n_kv_heads = 1;
  sinks.sliding_window = 0;
  sinks.context = 320;
  const std::string spath = test::TempPath("attn-sinks.gguf");
  WriteSyntheticModel(sinks, spath);
  for (Isa isa : {Isa::kScalar, DetectIsa()}) {
    Runner fused(spath, isa, 2, 32);
    Runner two_pass(spath, isa, 2, 32);
    test::Reconfigure(*two_pass.tf, [](ForwardOptions& o) { o.fuse_attn = false; });
    EXPECT_LT(RelErr(fused.Run(toks, false), two_pass.Run(toks, false)), 2e-5)
        << IsaName(isa) << " sinks, split positions";
    EXPECT_LT(RelErr(fused.Run(toks, true), two_pass.Run(toks, true)), 2e-5)
        << IsaName(isa) << " sinks, batched";
  }
  std::remove(spath.c_str());
}

TEST(Fusion, FusedAttentionEqualsTwoPassAttention) {
  SynthSpec spec;
  spec.n_heads = 8;
  spec.n_kv_heads = 2;
  spec.sliding_window = 0;
  const std::string path = test::TempPath("attn.gguf");
  WriteSyntheticModel(spec, path);
  const auto toks = SomeTokens(23, spec.n_vocab);
  for (Isa isa : {Isa::kScalar, DetectIsa()}) {
    for (KvDtype t : {KvDtype::kF32, KvDtype::kF16, KvDtype::kI8, KvDtype::kI4}) {
      for (int window : {0, 7}) {
        KvCacheOptions o;
        o.k_type = o.v_type = t;
        o.sliding_window = window;
        o.block_size = 4;
        Runner fused(path, isa, 2, 32, o);
        Runner two_pass(path, isa, 2, 32, o);
        test::Reconfigure(*two_pass.tf, [](ForwardOptions& o) { o.fuse_attn = false; });
        for (bool batched : {false, true}) {
          EXPECT_LT(RelErr(fused.Run(toks, batched), two_pass.Run(toks, batched)), 2e-5)
              << IsaName(isa) << " " << KvDtypeName(t) << " window " << window << " batched "
              << batched;
        }
      }
    }
  }
}

}  // namespace
}  // namespace paddock

namespace paddock {
namespace {

// The bf16 prefill (AMX-BF16): a long prompt's tokens take it whatever their chunking, step or
// batch-mates (bit-identical), close to the integer path; a decode token in the same step as
// a prompt chunk gives exactly what it gives alone; switched off, the integer path exactly.
TEST(Bf16Prefill, PromptTokensTakeItWhateverTheirChunksAndBatchMates) {
  if (DetectIsa() != Isa::kAmx || !CpuHasAmxBf16()) GTEST_SKIP() << "no AMX-BF16 here";
  // Q4_K_M: Q6_K attn_v and ffn_down in some layers (their own bf16 GEMM); Q3_K_M: its Q4_K
  // matrices (attn_output, attn_v and ffn_down past the first layers) have one, its Q3_K and
  // Q5_K ones stay on int8.
  const struct {
    GgmlType type;
    bool q4_k_m, q3_k_m;
  } cases[] = {{GgmlType::kQ4_0, false, false},
               {GgmlType::kQ8_0, false, false},
               {GgmlType::kQ4_K, true, false},
               {GgmlType::kQ3_K, false, true}};
  for (const auto& c : cases) {
    const GgmlType type = c.type;
    SynthSpec spec;
    spec.type = type;
    spec.q4_k_m = c.q4_k_m;
    spec.q3_k_m = c.q3_k_m;
    spec.n_layers = 4;
    spec.dim = 256;
    spec.ffn_dim = 512;
    spec.context = 256;
    const std::string path = test::TempPath("bf16prefill.gguf");
    WriteSyntheticModel(spec, path);
    const int n = 80;
    const auto prompt = SomeTokens(n, spec.n_vocab);
    Runner r(path, Isa::kAmx, 2, 96, KvCacheOptions(), true);
    RelayoutWeights(r.model.get());
    r.tf = std::make_unique<Transformer>(*r.model, GetKernels(Isa::kAmx), r.pool, 96,
                                         ForwardOptions{.int8_activations = true});
    ASSERT_TRUE(r.tf->HasBf16Prefill());
    ASSERT_EQ(r.tf->Bf16PromptTokens(n), n);
    ASSERT_EQ(r.tf->Bf16PromptTokens(kBf16PrefillMinPrompt - 1), 0);
    const int V = spec.n_vocab;
    // The prompt in chunks of `chunk`, prompt_len n: the last token's logits.
    auto prefill = [&](int chunk, int prompt_len) {
      KvManager::SeqId s = r.kv->Create(spec.context);
      const float* l = nullptr;
      for (int i = 0; i < n; i += chunk) {
        const int m = std::min(chunk, n - i);
        EXPECT_TRUE(r.kv->Reserve(s, i + m));
        l = r.tf->Forward(&prompt[static_cast<size_t>(i)], m, i, r.kv->View(s), prompt_len);
        r.kv->Commit(s, &prompt[static_cast<size_t>(i)], m);
      }
      std::vector<float> out(l, l + V);
      r.kv->Free(s);
      return out;
    };
    const auto int8 = prefill(n, 0);
    const auto whole = prefill(n, n);
    EXPECT_NE(whole, int8) << TypeName(type) << ": the bf16 path did not run";
    EXPECT_LT(RelErr(whole, int8), kInt8LogitTol) << TypeName(type);
    for (int chunk : {1, 7, 16, 33}) EXPECT_EQ(prefill(chunk, n), whole) << "chunks of " << chunk;
    // A prompt of n - 5 and 5 generated tokens recomputed in one item (after a preemption):
    // the last 5 on the integer kernels, as when they were decoded one by one.
    EXPECT_EQ(prefill(n, n - 5), prefill(1, n - 5)) << "a recomputed sequence";
    // A prompt chunk and another sequence's decode token in one step.
    KvManager& kv = *r.kv;
    const KvManager::SeqId a = kv.Create(spec.context), b = kv.Create(spec.context);
    const std::vector<int32_t> other = SomeTokens(9, V);
    ASSERT_TRUE(kv.Reserve(b, 9));
    const float* lb_alone = r.tf->Forward(other.data(), 8, 0, kv.View(b));
    kv.Commit(b, other.data(), 8);
    (void)lb_alone;
    std::vector<float> b_alone;
    {  // b's ninth token alone, on a fork that is then dropped
      const KvManager::SeqId f = kv.Fork(b);
      ASSERT_TRUE(kv.Reserve(f, 9));
      const float* l = r.tf->Forward(&other[8], 1, 8, kv.View(f));
      b_alone.assign(l, l + V);
      kv.Free(f);
    }
    ASSERT_TRUE(kv.Reserve(a, n));
    const KvView va = kv.View(a), vb = kv.View(b);
    Transformer::BatchItem items[2] = {{prompt.data(), n, 0, &va}, {&other[8], 1, 8, &vb}};
    items[0].prompt_len = n;
    const float* logits[2];
    r.tf->ForwardBatch(items, 2, logits);
    EXPECT_EQ(std::vector<float>(logits[0], logits[0] + V), whole) << "the prompt in a mixed step";
    EXPECT_EQ(std::vector<float>(logits[1], logits[1] + V), b_alone) << "the decode token";
    kv.Free(a);
    kv.Free(b);
    test::Reconfigure(*r.tf, [](ForwardOptions& o) {
      o.fuse_qkv = o.fuse_ffn = o.fuse_norm = false;
    });  // the separate norm and quantize passes
    EXPECT_LT(RelErr(prefill(n, n), whole), 1e-5) << TypeName(type) << " unfused";
    test::Reconfigure(*r.tf,
                      [](ForwardOptions& o) { o.fuse_qkv = o.fuse_ffn = o.fuse_norm = true; });
    test::Reconfigure(*r.tf, [](ForwardOptions& o) { o.bf16_prefill = false; });
    EXPECT_EQ(prefill(n, n), int8) << "switched off";
    std::remove(path.c_str());
  }
}

}  // namespace
}  // namespace paddock
