// Tests of the op list (model/layer_ops.h) and the one place that refuses (CheckSupport,
// model/backend.h): each op carries what it computes, and a backend's caps lacking an op
// kind, a feature, a weight type or a KV type refuse a model that needs it, naming it.
#include <gtest/gtest.h>

#include <string>

#include "model/backend.h"
#include "model/layer_ops.h"
#include "model/weights.h"
#include "paddock/error.h"
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
        EXPECT_FLOAT_EQ(op.scale, c.AttentionScale());
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

}  // namespace
}  // namespace paddock
