// model/layer_ops.h: what one decoder layer computes, stated once per architecture.
//
// LayerOps lists each layer's operations in order over the step's named activations
// (model/activations.h: x the residual stream, xb a block's input and output, q/k/v the
// projections, att the attention output, hb/hb2 the FFN's hidden rows). It is derived once
// from the configuration and the weights a file has (a bias, a post-norm, experts), so the
// architectures are rows of the config table plus the ops their weights add, not code paths.
// Every backend runs this list: the CPU backend op by op on the kernel table (whether an op
// runs fused with its neighbours is decided inside it, never here), a device backend as
// recorded dispatches; a backend that cannot run an op refuses the model at load naming it
// (OpName), never at a step. Not here: the embedding and the output head (the step's ends,
// the same for every architecture), sampling, the KV cache's bookkeeping.
#pragma once

#include <cstdint>
#include <vector>

namespace paddock {

struct ModelConfig;
struct ModelWeights;
struct WeightTensor;

enum class OpKind : uint8_t {
  kNorm,       // [x += xb,] xb = norm(x) (RMSNorm, or LayerNorm with bias)
  kQkv,        // q, k, v = xb Wq, Wk, Wv (+ biases); QK-norm; RoPE (the config's kind)
  kStoreKv,    // k, v into the KV cache at the tokens' positions
  kAttention,  // att = softmax(q k^T / sqrt(hd)) v over the cache (GQA, window, soft-cap, sinks)
  kOutProj,    // xb = att Wo (+ bias)
  kPostNorm,   // xb = rmsnorm(xb) (Gemma 2/3's post-norms)
  kFfnUp,      // hb = glu(xb Wgate, xb Wup) (SwiGLU, GeGLU, gpt-oss's); GPT-2: gelu(xb Wup + b)
  kFfnDown,    // xb = hb Wdown (+ bias)
  kMoe,        // xb = the token's routed experts' FFNs, weighted (+ the shared expert)
  kResidual,   // x += xb
  kAddNorm,    // encoders' post-norm: x = norm(x [+ xb]) (no weight: x as is); xb = x
};

// Stable names, for errors ("the vulkan backend has no moe") and traces.
const char* OpName(OpKind kind);

struct LayerOp {
  OpKind kind;
  // kNorm, kPostNorm: the norm's weight (dim) and, LayerNorm, bias (else null).
  const float* w = nullptr;
  const float* b = nullptr;
  // kNorm, kAddNorm: whether the block output in xb is added to x first; the weights
  // that read its output (`next` first; their types choose how a backend prepares it); and
  // whether those are the step's own token rows (not a gathered expert's).
  bool residual = false;
  const WeightTensor* next = nullptr;
  const WeightTensor* also = nullptr;
  const WeightTensor* also2 = nullptr;
  bool token_rows = true;
};

// Per layer, its ops in order.
std::vector<std::vector<LayerOp>> LayerOps(const ModelConfig& cfg, const ModelWeights& w);

}  // namespace paddock
