// model/layer_ops.cpp: each layer's operations from the configuration and its weights.
#include "model/layer_ops.h"

#include "model/config.h"
#include "model/weights.h"

namespace paddock {

const char* OpName(OpKind kind) {
  switch (kind) {
    case OpKind::kNorm:
      return "norm";
    case OpKind::kQkv:
      return "qkv";
    case OpKind::kStoreKv:
      return "store_kv";
    case OpKind::kAttention:
      return "attention";
    case OpKind::kOutProj:
      return "out_proj";
    case OpKind::kPostNorm:
      return "post_norm";
    case OpKind::kFfnUp:
      return "ffn_up";
    case OpKind::kFfnDown:
      return "ffn_down";
    case OpKind::kMoe:
      return "moe";
    case OpKind::kResidual:
      return "residual";
    case OpKind::kAddNorm:
      return "add_norm";
  }
  return "?";
}

namespace {

// One decoder layer as the math reads (gemma.cpp's TransformerLayer): norm, attention,
// post-norm, residual, norm, FFN, post-norm, residual.
std::vector<LayerOp> OpsOf(const LayerWeights& w) {
  std::vector<LayerOp> ops;
  auto op = [&](OpKind k) -> LayerOp& { return ops.emplace_back(LayerOp{k}); };
  LayerOp& attn_norm = op(OpKind::kNorm);
  attn_norm.w = w.attn_norm;
  attn_norm.b = w.attn_norm_b;
  attn_norm.next = &w.wq;
  attn_norm.also = &w.wk;
  attn_norm.also2 = &w.wv;
  op(OpKind::kQkv);
  op(OpKind::kStoreKv);
  op(OpKind::kAttention);
  op(OpKind::kOutProj);
  if (w.post_attn_norm != nullptr) op(OpKind::kPostNorm).w = w.post_attn_norm;
  const bool moe = !w.experts.empty();
  LayerOp& ffn_norm = op(OpKind::kNorm);
  ffn_norm.w = w.ffn_norm;
  ffn_norm.b = w.ffn_norm_b;
  ffn_norm.residual = true;
  ffn_norm.next = moe ? &w.experts[0].gate : (w.w_gate ? &w.w_gate : &w.w_up);
  ffn_norm.also = w.w_gate ? &w.w_up : nullptr;
  ffn_norm.token_rows = !moe;
  if (moe) {
    op(OpKind::kMoe);
  } else {
    op(OpKind::kFfnUp);
    op(OpKind::kFfnDown);
  }
  if (w.post_ffn_norm != nullptr) op(OpKind::kPostNorm).w = w.post_ffn_norm;
  op(OpKind::kResidual);
  return ops;
}

// An encoder layer (BERT's post-norm): the layer's input taken as the block input (the first
// layer's normalized: the embeddings' LayerNorm), attention, x = norm(x + attention), FFN,
// x = norm(x + FFN).
std::vector<LayerOp> EncoderOpsOf(const ModelWeights& mw, size_t l) {
  const LayerWeights& w = mw.layers[l];
  std::vector<LayerOp> ops;
  auto op = [&](OpKind k) -> LayerOp& { return ops.emplace_back(LayerOp{k}); };
  LayerOp& in = op(OpKind::kAddNorm);
  in.w = l == 0 ? mw.embd_norm : nullptr;
  in.b = l == 0 ? mw.embd_norm_b : nullptr;
  in.next = &w.wq;
  in.also = &w.wk;
  in.also2 = &w.wv;
  op(OpKind::kQkv);
  op(OpKind::kStoreKv);
  op(OpKind::kAttention);
  op(OpKind::kOutProj);
  LayerOp& attn = op(OpKind::kAddNorm);
  attn.residual = true;
  attn.w = w.attn_norm;
  attn.b = w.attn_norm_b;
  attn.next = w.w_gate ? &w.w_gate : &w.w_up;
  attn.also = w.w_gate ? &w.w_up : nullptr;
  op(OpKind::kFfnUp);
  op(OpKind::kFfnDown);
  LayerOp& out = op(OpKind::kAddNorm);
  out.residual = true;
  out.w = w.ffn_norm;
  out.b = w.ffn_norm_b;
  return ops;
}

}  // namespace

std::vector<std::vector<LayerOp>> LayerOps(const ModelConfig& cfg, const ModelWeights& w) {
  std::vector<std::vector<LayerOp>> layers;
  layers.reserve(static_cast<size_t>(cfg.n_layers));
  for (int l = 0; l < cfg.n_layers && l < static_cast<int>(w.layers.size()); ++l)
    layers.push_back(cfg.encoder ? EncoderOpsOf(w, static_cast<size_t>(l))
                                 : OpsOf(w.layers[static_cast<size_t>(l)]));
  return layers;
}

}  // namespace paddock
