// model/layer_ops.h: what one layer computes, stated once per model and read by every backend.
//
// LayerOps lists each layer's operations in order over the step's named activations
// (model/activations.h: x the residual stream, xb a block's input and output, q/k/v the
// projections, att the attention output, hb/hb2 the FFN's hidden rows). It is resolved once
// per model from the configuration and the weights a file has (a bias, a post-norm, experts):
// each op carries everything it needs (its weight and bias views, the norm's kind and epsilon,
// the activation, the RoPE layout, the window, the soft-caps, the head sizes), so a backend
// reads only the op list, never the configuration or the layer's weights, and an architecture
// is a row of the config table plus the ops its weights add. A backend declares what it
// executes (BackendCaps, model/backend.h); CheckSupport (model/backend.cpp) refuses a model at
// load naming the first op, type or feature it lacks, in one place. How a backend fuses ops
// is its own plan derived from this list (the CPU's: cpu/transformer.h), never a field here.
// Not here: the embedding and the output head (the step's ends: model/step.h), sampling, the
// KV cache's bookkeeping.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace paddock {

struct ModelWeights;
struct LayerWeights;
struct WeightTensor;

enum class OpKind : uint8_t {
  kNorm,           // [x += xb,] xb = norm(x) (RMSNorm, or LayerNorm with bias)
  kQkv,            // q, k, v = xb Wq, Wk, Wv (+ biases); QK-norm; RoPE
  kStoreKv,        // k, v into the KV cache at the tokens' positions
  kAttention,      // att = softmax(q k^T scale) v over the cache (GQA, window, soft-cap, sinks)
  kOutProj,        // xb = att Wo (+ bias)
  kPostNorm,       // xb = rmsnorm(xb) (Gemma 2/3's post-norms)
  kFfnUp,          // hb = act(xb Wgate) * (xb Wup) (gated); GPT-2: gelu(xb Wup + b)
  kFfnDown,        // xb = hb Wdown (+ bias)
  kMoe,            // xb = the token's routed experts' FFNs, weighted (+ the shared expert)
  kResidual,       // x += xb
  kAddNorm,        // encoders' post-norm: x = norm(x [+ xb]) (no weight: x as is); xb = x
  kPerLayerInput,  // x += norm((gelu(x Wgate) * the token's input for this layer) Wproj) (Gemma 4)
  kScale,          // x *= the layer's output scale (Gemma 4)
  kShortConv,      // xb = Wout(c * conv(b * x)), [b|c|x] = xb Win (LFM2; a conv window per seq)
  kDeltaNet,       // xb = the Gated DeltaNet of xb (Qwen3.5; conv window and delta-rule state)
  kCount
};

// What an op needs beyond its kind: a backend without a feature refuses the ops that need it.
enum class OpFeature : uint8_t {
  kUngatedFfn,     // kFfnUp without a gate (GPT-2: gelu(xb Wup + b))
  kSwigluOai,      // kFfnUp / kMoe with gpt-oss's clamped SwiGLU
  kAttnSinks,      // kAttention with learned sink logits (gpt-oss)
  kQkNormRows,     // kQkv's QK-norm over whole Q and K rows (OLMoE), not per head
  kBidirectional,  // kAttention where every token sees its whole input (encoders)
  kValueNorm,      // kQkv: values RMS-normalized per head (Gemma 4); V = K without Wv
  kSharedKv,       // kAttention over an earlier layer's KV cache (Gemma 4)
  kLayerShapes,    // heads of this layer's own size or count (Gemma 4's local and global)
  kMoeBranches,    // kMoe as Gemma 4's: a dense FFN and the experts from x, each post-normed
  kAttnGate,       // kQkv also gives an output gate; kOutProj: att *= sigmoid(gate) (Qwen3.5)
  kCount
};

// Stable names, for errors ("the vulkan backend has no moe") and traces.
const char* OpName(OpKind kind);
const char* OpFeatureName(OpFeature f);

enum class NormKind : uint8_t { kRms, kLayer };

// The FFN's activation: act(gate) * up.
enum class Activation : uint8_t {
  kSilu,       // SwiGLU
  kGeluTanh,   // GeGLU (Gemma); ungated GPT-2: gelu(up)
  kSwigluOai,  // gpt-oss's clamped SwiGLU
};

struct OpNorm {
  NormKind kind = NormKind::kRms;
  float eps = 1e-5f;
  const float* w = nullptr;  // (width) null: no weight (kAddNorm takes x as is)
  const float* b = nullptr;  // (width) LayerNorm's bias, else null
};

struct OpRope {
  int dims = 0;  // rotated dims per head (0: none, learned positions)
  RopeStyle style = RopeStyle::kAdjacentPairs;
  bool local = false;  // the local layers' angle table (Gemma 3's second base)
};

struct LayerOp {
  OpKind kind;
  int layer = 0;
  uint32_t features = 0;  // bit per OpFeature
  // kNorm, kPostNorm, kAddNorm: the norm (width dim); residual: x += xb first. kQkv: only
  // norm.eps, its QK-norm's epsilon.
  OpNorm norm;
  bool residual = false;
  // The matrices the op multiplies by and their biases (null: none): kQkv Wq, Wk, Wv; kOutProj
  // Wo; kFfnUp the gate (null when ungated) and up; kFfnDown Wdown; kMoe the shared expert's
  // gate, up, down (null when it has none).
  const WeightTensor* mat[3] = {nullptr, nullptr, nullptr};
  const float* bias[3] = {nullptr, nullptr, nullptr};
  // kQkv: QK-norm weights (head_dim per head, or the whole rows with kQkNormRows), RoPE.
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  OpRope rope;
  // kQkv, kStoreKv, kAttention: the heads. kQkv: the values' norm weight (ones: the norm has
  // no weight) with kValueNorm; mat[2] null: V is K's projection. kStoreKv, kAttention: the
  // layer whose KV cache they write and read (this one, or an earlier one's with kSharedKv).
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  const float* v_norm = nullptr;
  int kv_layer = 0;
  // kAttention: score scale, soft-cap (0: none), whether the layer uses the KV view's window,
  // causal (else each token sees its whole input), sink logits (n_heads) or null.
  float scale = 1.0f;
  float softcap = 0.0f;
  bool windowed = false;
  bool causal = true;
  const float* sinks = nullptr;
  // kFfnUp, kMoe: the activation.
  Activation act = Activation::kSilu;
  // kMoe: the routed experts and the router (the layer's weights, model/weights.h).
  const LayerWeights* experts = nullptr;
  // kPerLayerInput: mat[0] the gate, mat[1] the projection, norm the post-norm; it reads the
  // token's per-layer input of op.layer (the step computes them: cpu/transformer.cpp's
  // PerLayerInputs). kScale: the factor.
  float scale_by = 1.0f;
  // kQkv with kAttnGate: the gate's projection (q_dim rows of dim).
  const WeightTensor* gate = nullptr;
  // kShortConv, kDeltaNet: mat[0] the input projection, mat[1] the DeltaNet's z gate (null
  // for a short convolution), mat[2] the output projection; the layer's weights for the rest
  // (conv taps, the DeltaNet's beta/alpha rows, decay bias and A, gated norm). The state a
  // sequence carries is in its KV view (KvLayerView::state).
  const LayerWeights* rec = nullptr;

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }

  bool Has(OpFeature f) const { return (features >> static_cast<int>(f)) & 1u; }
  void Need(OpFeature f) { features |= 1u << static_cast<int>(f); }
};

using LayerOpList = std::vector<std::vector<LayerOp>>;

// Per layer, its ops in order, resolved from the configuration and the weights.
LayerOpList LayerOps(const ModelConfig& cfg, const ModelWeights& w);

// The ops that read op `i`'s output xb as their matrix input: the next op's matrices, in the
// order a backend's fused pass would quantize for (Wq, Wk, Wv; gate, up; the first expert's
// gate). Returns how many (0: none, or not the step's token rows: *token_rows false for kMoe).
int ReadersOf(const std::vector<LayerOp>& ops, size_t i, const WeightTensor* out[3],
              bool* token_rows);

}  // namespace paddock
