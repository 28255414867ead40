// Tests of the op list (model/layer_ops.h) and the one place that refuses (CheckSupport,
// model/backend.h): each op carries what it computes, and a backend's caps lacking an op
// kind, a feature, a weight type or a KV type refuse a model that needs it, naming it.
#include <gtest/gtest.h>

#include <string>

#include "base/thread_pool.h"
#include "cpu/transformer.h"
#include "kv/kv_manager.h"
#include "model/backend.h"
#include "model/layer_ops.h"
#include "model/split_backend.h"
#include "model/weights.h"
#include "paddock/error.h"
#include "synth/synth.h"
#include "test_util.h"

namespace paddock {
namespace {

std::unique_ptr<LoadedModel> LoadVariant(const std::string& name) {
  for (const test::SynthVariant& v : test::DenseVariants()) {
    if (v.name != name) continue;
    const std::string path = test::TempPath("ops-" + v.name + ".gguf");
    WriteSyntheticModel(v.spec, path);
    return LoadModel(path);
  }
  ADD_FAILURE() << "no variant " << name;
  return nullptr;
}

// CheckSupport's error, or "" when it accepts.
std::string Refusal(const LoadedModel& m, const BackendCaps& caps, const SupportQuery& q = {}) {
  try {
    CheckSupport(m, caps, q);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

uint32_t Without(uint32_t bits, int bit) {
  return bits & ~(1u << bit);
}

TEST(Ops, EachOpCarriesWhatItComputes) {
  auto m = LoadVariant("gemma3_local_global");
  const ModelConfig& c = m->config;
  ASSERT_EQ(m->ops.size(), static_cast<size_t>(c.n_layers));
  for (const auto& layer : m->ops) {
    for (const LayerOp& op : layer) {
      const int l = op.layer;
      if (op.kind == OpKind::kAttention) {
        EXPECT_EQ(op.windowed, c.LayerIsLocal(l)) << l;
        EXPECT_FLOAT_EQ(op.scale, c.AttentionScale(l));
        EXPECT_FLOAT_EQ(op.softcap, c.attn_softcap);
        EXPECT_TRUE(op.causal);
        EXPECT_EQ(op.head_dim, c.head_dim);
      } else if (op.kind == OpKind::kQkv) {
        EXPECT_EQ(op.rope.local, c.LayerIsLocal(l)) << l;
        EXPECT_EQ(op.rope.dims, c.rope_dim);
        EXPECT_NE(op.q_norm, nullptr);
        EXPECT_EQ(op.mat[0], &m->weights.layers[static_cast<size_t>(l)].wq);
      } else if (op.kind == OpKind::kFfnUp) {
        EXPECT_EQ(op.act, Activation::kGeluTanh);
      } else if (op.kind == OpKind::kPostNorm) {
        EXPECT_NE(op.norm.w, nullptr);
        EXPECT_FLOAT_EQ(op.norm.eps, c.norm_eps);
      }
      EXPECT_EQ(op.features, 0u) << OpName(op.kind);
    }
  }
  // A norm's readers are the next op's matrices (the CPU's fused pass quantizes for them).
  const WeightTensor* reads[3];
  bool token_rows = false;
  EXPECT_EQ(ReadersOf(m->ops[0], 0, reads, &token_rows), 3);
  EXPECT_EQ(reads[1], &m->weights.layers[0].wk);
  EXPECT_TRUE(token_rows);
}

TEST(Ops, ABackendLackingAnOpKindRefusesAModelUsingItByName) {
  auto m = LoadVariant("gemma2_softcap");     // post-norms
  EXPECT_EQ(Refusal(*m, BackendCaps{}), "");  // the CPU's caps: everything
  BackendCaps caps;
  caps.name = "test";
  caps.ops = Without(caps.ops, static_cast<int>(OpKind::kPostNorm));
  caps.fallback = "--device cpu runs it";
  EXPECT_EQ(Refusal(*m, caps), "the test backend has no post_norm (layer 0); --device cpu runs it");
  // The same caps run a model without the op.
  EXPECT_EQ(Refusal(*LoadVariant("llama_gqa_f32"), caps), "");
  // A range without the op's layers passes (a split's part).
  SupportQuery tail;
  tail.layer_begin = m->config.n_layers;
  EXPECT_EQ(Refusal(*m, caps, tail), "");
}

TEST(Ops, FeaturesWeightTypesKvTypesAndAdaptersAreCheckedTheSameWay) {
  auto m = LoadVariant("llama_gqa_f32");
  BackendCaps caps;
  caps.name = "test";
  caps.weight_types = {GgmlType::kF16, GgmlType::kQ8_0};
  EXPECT_NE(Refusal(*m, caps).find("the test backend has no shader for F32 weights (layer 0's "
                                   "attn_q); it runs F16 and Q8_0"),
            std::string::npos)
      << Refusal(*m, caps);
  caps.weight_types.clear();
  caps.kv_types = 1u << static_cast<int>(KvDtype::kF16);
  SupportQuery q;
  q.k_types.assign(static_cast<size_t>(m->config.n_layers), KvDtype::kF16);
  q.v_types = q.k_types;
  EXPECT_EQ(Refusal(*m, caps, q), "");
  q.v_types.back() = KvDtype::kI8;
  EXPECT_NE(Refusal(*m, caps, q).find("KV cache of int8 (layer 1"), std::string::npos)
      << Refusal(*m, caps, q);
  caps.lora = false;
  SupportQuery lora;
  lora.lora = true;
  EXPECT_NE(Refusal(*m, caps, lora).find("has no LoRA adapters"), std::string::npos);
  caps.max_head_dim = 8;
  EXPECT_NE(Refusal(*m, caps).find("attention over heads of"), std::string::npos);
  // A feature: whole-row QK-norm (OLMoE) is a kQkv the caps may lack.
  SynthSpec olmoe;
  olmoe.arch = "olmoe";
  olmoe.qk_norm = true;
  olmoe.n_experts = 4;
  olmoe.n_experts_used = 2;
  const std::string path = test::TempPath("ops-olmoe.gguf");
  WriteSyntheticModel(olmoe, path);
  auto o = LoadModel(path);
  BackendCaps no_rows;
  no_rows.name = "test";
  no_rows.features = Without(no_rows.features, static_cast<int>(OpFeature::kQkNormRows));
  EXPECT_EQ(Refusal(*o, no_rows),
            "the test backend has no QK-norm over whole rows (layer 0's qkv)");
}

// Gemma 4's ops: local and global heads of their own sizes and rotated dims, the last layers
// reading earlier layers' KV (no store of their own), normalized values, the per-layer input
// and output scale; the KV bytes count only the storing layers; a backend without the
// features refuses naming one.
TEST(Ops, Gemma4LayersCarryTheirShapesAndShareKv) {
  const std::string path = test::TempPath("ops-gemma4.gguf");
  WriteSyntheticModel(SynthPreset("tiny-gemma4"), path);
  auto m = LoadModel(path);
  const ModelConfig& c = m->config;
  ASSERT_EQ(c.n_layers, 6);
  EXPECT_EQ(c.kv_layers, 3);
  const int source[6] = {0, 1, 2, 1, 1, 2};  // local layers 3, 4 read 1's; global 5 reads 2's
  size_t kv_bytes = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    const bool global = l % 3 == 2;
    EXPECT_EQ(c.LayerIsLocal(l), !global) << l;
    EXPECT_EQ(c.KvSource(l), source[l]) << l;
    bool store = false, per_layer = false, scale = false;
    for (const LayerOp& op : m->ops[static_cast<size_t>(l)]) {
      store = store || op.kind == OpKind::kStoreKv;
      per_layer = per_layer || op.kind == OpKind::kPerLayerInput;
      scale = scale || op.kind == OpKind::kScale;
      if (op.kind == OpKind::kQkv) {
        EXPECT_EQ(op.head_dim, global ? 32 : 16) << l;
        EXPECT_EQ(op.rope.dims, global ? 32 : 8) << l;
        EXPECT_NE(op.v_norm, nullptr);
        EXPECT_TRUE(op.Has(OpFeature::kValueNorm));
      }
      if (op.kind == OpKind::kAttention) {
        EXPECT_EQ(op.kv_layer, source[l]) << l;
        EXPECT_EQ(op.Has(OpFeature::kSharedKv), source[l] != l) << l;
        EXPECT_FLOAT_EQ(op.scale, 1.0f);
        EXPECT_EQ(op.windowed, !global) << l;
      }
    }
    EXPECT_EQ(store, l < 3) << l;
    EXPECT_TRUE(per_layer && scale) << l;
    if (l < 3) kv_bytes += 2 * 2 * static_cast<size_t>(c.LayerKvHeads(l) * c.LayerHeadDim(l));
  }
  EXPECT_EQ(KvBytesPerToken(c, KvCacheOptions()), kv_bytes);  // f16 K and V, storing layers
  EXPECT_EQ(kv_bytes, 512u);
  BackendCaps caps;
  caps.name = "test";
  caps.features = Without(caps.features, static_cast<int>(OpFeature::kValueNorm));
  EXPECT_EQ(Refusal(*m, caps),
            "the test backend has no normalized values (Gemma 4) (layer 0's qkv)");
  caps.features = Without(~0u, static_cast<int>(OpFeature::kSharedKv));
  EXPECT_EQ(Refusal(*m, caps),
            "the test backend has no KV shared across layers (Gemma 4) (layer 3's attention)");
  caps.features = ~0u;
  caps.ops = Without(caps.ops, static_cast<int>(OpKind::kPerLayerInput));
  EXPECT_EQ(Refusal(*m, caps), "the test backend has no per_layer_input (layer 0)");
}

// Hybrid recurrent models: Qwen3.5's Gated DeltaNet layers between gated attention layers,
// LFM2's short convolutions between attention layers; only the attention layers store KV rows,
// the recurrent ones a state per sequence; a backend without the recurrent ops refuses naming
// the first.
TEST(Ops, HybridLayersMixTokensByAttentionOrRecurrence) {
  const std::string q = test::TempPath("ops-qwen35.gguf"), f = test::TempPath("ops-lfm2.gguf");
  WriteSyntheticModel(SynthPreset("tiny-qwen35"), q);
  WriteSyntheticModel(SynthPreset("tiny-lfm2"), f);
  auto m = LoadModel(q);
  const ModelConfig& c = m->config;
  ASSERT_EQ(c.n_layers, 8);
  EXPECT_TRUE(c.attn_gate && c.qk_norm && c.hybrid());
  for (int l = 0; l < c.n_layers; ++l) {
    const bool attn = l == 3 || l == 7;
    EXPECT_EQ(c.Kind(l), attn ? LayerKind::kAttention : LayerKind::kDeltaNet) << l;
    EXPECT_EQ(c.StoresKv(l), attn) << l;
    // The conv window (3 rows of q|k|v: 2 x 32 + 64 channels), then 4 heads' 16 x 16 states.
    EXPECT_EQ(c.StateFloats(l), attn ? 0u : 3u * 128 + 4u * 16 * 16) << l;
    bool delta = false;
    for (const LayerOp& op : m->ops[static_cast<size_t>(l)]) {
      delta = delta || op.kind == OpKind::kDeltaNet;
      if (op.kind == OpKind::kQkv || op.kind == OpKind::kOutProj)
        EXPECT_TRUE(op.Has(OpFeature::kAttnGate)) << l;
      if (op.kind == OpKind::kQkv) EXPECT_EQ(op.rope.dims, 8);
    }
    EXPECT_EQ(delta, !attn) << l;
  }
  EXPECT_EQ(KvBytesPerToken(c, KvCacheOptions()), 2u * 2 * 2 * 64);  // 2 layers' f16 K and V
  EXPECT_EQ(KvStateBytes(c), 6u * (3 * 128 + 4 * 16 * 16) * 4);
  BackendCaps caps;
  caps.name = "test";
  caps.ops = Without(caps.ops, static_cast<int>(OpKind::kDeltaNet));
  EXPECT_EQ(Refusal(*m, caps), "the test backend has no delta_net (layer 0)");
  caps.ops = ~0u;
  caps.features = Without(~0u, static_cast<int>(OpFeature::kAttnGate));
  EXPECT_EQ(Refusal(*m, caps),
            "the test backend has no gated attention output (Qwen3.5) (layer 3's qkv)");
  auto l2 = LoadModel(f);
  const ModelConfig& d = l2->config;
  for (int l = 0; l < d.n_layers; ++l) {
    const bool attn = l == 2 || l == 4;
    EXPECT_EQ(d.Kind(l), attn ? LayerKind::kAttention : LayerKind::kShortConv) << l;
    EXPECT_EQ(d.StateFloats(l), attn ? 0u : 2u * 64) << l;  // the window: 2 rows of dim
  }
  EXPECT_TRUE(d.qk_norm);
  caps.features = ~0u;
  caps.ops = Without(~0u, static_cast<int>(OpKind::kShortConv));
  EXPECT_EQ(Refusal(*l2, caps), "the test backend has no short_conv (layer 0)");
}

// Two backends over consecutive layer ranges, composed through the seam (the residual stream
// handed from the first to the second, the KV store split by layer), give the logits of one
// backend over every layer, bit for bit: two sequences batched, a prompt step then decodes.
void CheckSplitEqualsWhole(std::unique_ptr<LoadedModel> m) {
  const ModelConfig& c = m->config;
  ASSERT_GE(c.n_layers, 2);
  ThreadPool pool(2);
  const KernelTable& k = GetKernels(DetectIsa());
  ForwardOptions fo;
  fo.int8_activations = false;
  Transformer whole(*m, k, pool, 16, fo);
  auto first = std::make_unique<Transformer>(*m, k, pool, 16, fo);
  auto second = std::make_unique<Transformer>(*m, k, pool, 16, fo);
  first->SetLayers(0, 1);
  second->SetLayers(1, c.n_layers);
  std::unique_ptr<Backend> split = NewSplitBackend(std::move(first), std::move(second));
  KvCacheOptions ko;
  ko.k_type = ko.v_type = KvDtype::kF32;
  KvManager kv_whole(c, ko, 256, &whole), kv_split(c, ko, 256, split.get());
  Backend* backends[2] = {&whole, split.get()};
  KvManager* kvs[2] = {&kv_whole, &kv_split};
  std::vector<std::vector<int32_t>> seqs = {{1, 7, 9, 11, 13}, {1, 20, 21}};
  std::vector<float> got[2];
  for (int b = 0; b < 2; ++b) {
    KvManager& kv = *kvs[b];
    KvManager::SeqId ids[2] = {kv.Create(64), kv.Create(64)};
    int pos[2] = {0, 0};
    for (int step = 0; step < 4; ++step) {
      std::vector<int32_t> toks[2];
      KvView views[2];
      StepItem items[2];
      for (int i = 0; i < 2; ++i) {
        toks[i] = step == 0 ? seqs[static_cast<size_t>(i)] : std::vector<int32_t>{3 + step + i};
        const int n = static_cast<int>(toks[i].size());
        ASSERT_TRUE(kv.Reserve(ids[i], pos[i] + n));
        views[i] = kv.View(ids[i]);
        items[i] = StepItem{toks[i].data(), n, pos[i], &views[i]};
      }
      const float* rows[2];
      backends[b]->Step(items, 2, StepOutput::kLogits, rows);
      for (int i = 0; i < 2; ++i) {
        got[b].insert(got[b].end(), rows[i], rows[i] + c.n_vocab);
        kv.Commit(ids[i], toks[i].data(), static_cast<int>(toks[i].size()));
        pos[i] += static_cast<int>(toks[i].size());
      }
    }
  }
  ASSERT_EQ(got[0].size(), got[1].size());
  EXPECT_TRUE(got[0] == got[1]) << c.arch << ": the split's logits differ from one backend's";
}

TEST(Ops, TwoBackendsOverLayerRangesEqualOneOverEveryLayer) {
  CheckSplitEqualsWhole(LoadVariant("gemma2_softcap"));
  // Gemma 4: the second part computes its per-layer inputs from the tokens; its sharing layers
  // read KV it holds. A split between a sharing layer and its source is refused.
  const std::string path = test::TempPath("ops-gemma4-split.gguf");
  WriteSyntheticModel(SynthPreset("tiny-gemma4"), path);
  CheckSplitEqualsWhole(LoadModel(path));
  auto m = LoadModel(path);
  ThreadPool pool(1);
  auto first = std::make_unique<Transformer>(*m, GetKernels(Isa::kScalar), pool, 4);
  auto second = std::make_unique<Transformer>(*m, GetKernels(Isa::kScalar), pool, 4);
  first->SetLayers(0, 3);
  second->SetLayers(3, 6);
  try {
    NewSplitBackend(std::move(first), std::move(second));
    ADD_FAILURE() << "a split cutting layer 3 from its KV source was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 3 reads layer 1's KV cache"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace paddock
