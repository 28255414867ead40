// model/layer_ops.cpp: each layer's operations, resolved from the configuration and its weights.
#include "model/layer_ops.h"

#include "model/weights.h"

namespace paddock {

const char* OpName(OpKind kind) {
  static const char* const kNames[] = {"norm",     "qkv",        "store_kv", "attention",
                                       "out_proj", "post_norm",  "ffn_up",   "ffn_down",
                                       "moe",      "residual",   "add_norm", "per_layer_input",
                                       "scale",    "short_conv", "delta_net"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(OpKind::kCount));
  const auto i = static_cast<size_t>(kind);
  return i < static_cast<size_t>(OpKind::kCount) ? kNames[i] : "?";
}

const char* OpFeatureName(OpFeature f) {
  static const char* const kNames[] = {"ungated FFNs (GPT-2)",
                                       "gpt-oss's clamped SwiGLU",
                                       "attention sinks",
                                       "QK-norm over whole rows",
                                       "bidirectional attention (encoders)",
                                       "normalized values (Gemma 4)",
                                       "KV shared across layers (Gemma 4)",
                                       "per-layer head sizes (Gemma 4)",
                                       "a dense FFN beside the experts (Gemma 4)",
                                       "gated attention output (Qwen3.5)"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(OpFeature::kCount));
  const auto i = static_cast<size_t>(f);
  return i < static_cast<size_t>(OpFeature::kCount) ? kNames[i] : "?";
}

namespace {

// Resolves ops for layer l: what each takes from the configuration and the layer's weights.
class LayerBuilder {
 public:
  LayerBuilder(const ModelConfig& c, const LayerWeights& w, int l, const float* vnorm = nullptr)
      : c_(c), w_(w), l_(l), vnorm_(vnorm) {}

  std::vector<LayerOp> ops;

  LayerOp& Op(OpKind k) {
    LayerOp& op = ops.emplace_back(LayerOp{k});
    op.layer = l_;
    op.n_heads = c_.n_heads;
    op.n_kv_heads = c_.LayerKvHeads(l_);
    op.head_dim = c_.LayerHeadDim(l_);
    op.kv_layer = c_.KvSource(l_);
    if (op.n_kv_heads != c_.n_kv_heads || op.head_dim != c_.head_dim)
      op.Need(OpFeature::kLayerShapes);
    return op;
  }
  LayerOp& Norm(OpKind k, const float* w, const float* b, bool residual) {
    LayerOp& op = Op(k);
    op.norm = {c_.layer_norm ? NormKind::kLayer : NormKind::kRms, c_.norm_eps, w, b};
    op.residual = residual;
    return op;
  }
  void Attention() {
    LayerOp& qkv = Op(OpKind::kQkv);
    qkv.mat[0] = &w_.wq, qkv.mat[1] = &w_.wk, qkv.mat[2] = &w_.wv;
    qkv.bias[0] = w_.bq, qkv.bias[1] = w_.bk, qkv.bias[2] = w_.bv;
    qkv.q_norm = w_.q_norm;
    qkv.k_norm = w_.k_norm;
    if (c_.qk_norm_full && (w_.q_norm != nullptr || w_.k_norm != nullptr))
      qkv.Need(OpFeature::kQkNormRows);
    qkv.norm.eps = c_.norm_eps;
    qkv.rope = {c_.LayerRopeDim(l_), c_.rope_style, c_.rope_base_local > 0 && c_.LayerIsLocal(l_)};
    if (qkv.rope.dims != c_.rope_dim) qkv.Need(OpFeature::kLayerShapes);
    if (c_.v_norm) {
      qkv.v_norm = vnorm_;
      qkv.Need(OpFeature::kValueNorm);
    }
    if (!w_.wv) qkv.mat[2] = nullptr;
    if (w_.wq_gate) {
      qkv.gate = &w_.wq_gate;
      qkv.Need(OpFeature::kAttnGate);
    }
    if (c_.StoresKv(l_)) Op(OpKind::kStoreKv);
    LayerOp& at = Op(OpKind::kAttention);
    if (at.kv_layer != l_) at.Need(OpFeature::kSharedKv);
    at.scale = c_.AttentionScale(l_);
    at.softcap = c_.attn_softcap;
    at.windowed = c_.LayerWindowed(l_);
    at.causal = c_.causal;
    if (!c_.causal) at.Need(OpFeature::kBidirectional);
    at.sinks = w_.attn_sinks;
    if (at.sinks != nullptr) at.Need(OpFeature::kAttnSinks);
    LayerOp& out = Op(OpKind::kOutProj);
    out.mat[0] = &w_.wo;
    out.bias[0] = w_.bo;
    if (w_.wq_gate) out.Need(OpFeature::kAttnGate);
  }
  // A recurrent layer's token mixer in place of attention (xb in, xb out).
  void Recurrent() {
    LayerOp& op = Op(c_.Kind(l_) == LayerKind::kShortConv ? OpKind::kShortConv : OpKind::kDeltaNet);
    op.mat[0] = &w_.rec_in;
    if (w_.rec_gate) op.mat[1] = &w_.rec_gate;
    op.mat[2] = &w_.rec_out;
    op.rec = &w_;
    op.norm.eps = c_.norm_eps;
  }
  Activation Act() const {
    return c_.ffn_act == FfnAct::kGeluTanh    ? Activation::kGeluTanh
           : c_.ffn_act == FfnAct::kSwigluOai ? Activation::kSwigluOai
                                              : Activation::kSilu;
  }
  void Ffn() {
    if (!w_.experts.empty()) {
      LayerOp& moe = Op(OpKind::kMoe);
      moe.experts = &w_;
      moe.act = Act();
      if (moe.act == Activation::kSwigluOai) moe.Need(OpFeature::kSwigluOai);
      if (w_.w_gate) moe.mat[0] = &w_.w_gate;
      if (w_.w_up) moe.mat[1] = &w_.w_up;
      if (w_.w_down) moe.mat[2] = &w_.w_down;
      if (w_.pre_norm_2 != nullptr) moe.Need(OpFeature::kMoeBranches);
      moe.norm.eps = c_.norm_eps;
      return;
    }
    LayerOp& up = Op(OpKind::kFfnUp);
    up.act = w_.w_gate ? Act() : Activation::kGeluTanh;
    if (w_.w_gate) up.mat[0] = &w_.w_gate;
    up.mat[1] = &w_.w_up;
    up.bias[1] = w_.b_up;
    if (!w_.w_gate) up.Need(OpFeature::kUngatedFfn);
    if (up.act == Activation::kSwigluOai) up.Need(OpFeature::kSwigluOai);
    LayerOp& down = Op(OpKind::kFfnDown);
    down.mat[0] = &w_.w_down;
    down.bias[0] = w_.b_down;
  }
  void PostNorm(const float* w) {
    if (w == nullptr) return;
    LayerOp& op = Op(OpKind::kPostNorm);
    op.norm = {NormKind::kRms, c_.norm_eps, w, nullptr};
  }

  // Gemma 4's per-layer input and output scale, after the layer's residual.
  void PerLayer() {
    if (w_.pl_gate) {
      LayerOp& op = Op(OpKind::kPerLayerInput);
      op.mat[0] = &w_.pl_gate;
      op.mat[1] = &w_.pl_proj;
      op.norm = {NormKind::kRms, c_.norm_eps, w_.pl_post_norm, nullptr};
      op.act = Activation::kGeluTanh;
    }
    if (w_.out_scale != nullptr) Op(OpKind::kScale).scale_by = *w_.out_scale;
  }

 private:
  const ModelConfig& c_;
  const LayerWeights& w_;
  int l_;
  const float* vnorm_;
};

// One decoder layer as the math reads (gemma.cpp's TransformerLayer): norm, attention,
// post-norm, residual, norm, FFN, post-norm, residual.
std::vector<LayerOp> DecoderOps(const ModelConfig& c, const ModelWeights& mw, int l) {
  const LayerWeights& w = mw.layers[static_cast<size_t>(l)];
  LayerBuilder b(c, w, l, mw.ones);
  b.Norm(OpKind::kNorm, w.attn_norm, w.attn_norm_b, false);
  if (c.Recurrent(l)) {
    b.Recurrent();
  } else {
    b.Attention();
  }
  b.PostNorm(w.post_attn_norm);
  b.Norm(OpKind::kNorm, w.ffn_norm, w.ffn_norm_b, true);
  b.Ffn();
  b.PostNorm(w.post_ffn_norm);
  b.Op(OpKind::kResidual);
  b.PerLayer();
  return std::move(b.ops);
}

// An encoder layer (BERT's post-norm): the layer's input taken as the block input (the first
// layer's normalized: the embeddings' LayerNorm), attention, x = norm(x + attention), FFN,
// x = norm(x + FFN).
std::vector<LayerOp> EncoderOps(const ModelConfig& c, const ModelWeights& mw, int l) {
  const LayerWeights& w = mw.layers[static_cast<size_t>(l)];
  LayerBuilder b(c, w, l);
  b.Norm(OpKind::kAddNorm, l == 0 ? mw.embd_norm : nullptr, l == 0 ? mw.embd_norm_b : nullptr,
         false);
  b.Attention();
  b.Norm(OpKind::kAddNorm, w.attn_norm, w.attn_norm_b, true);
  b.Ffn();
  b.Norm(OpKind::kAddNorm, w.ffn_norm, w.ffn_norm_b, true);
  return std::move(b.ops);
}

}  // namespace

LayerOpList LayerOps(const ModelConfig& cfg, const ModelWeights& w) {
  LayerOpList layers;
  layers.reserve(static_cast<size_t>(cfg.n_layers));
  for (int l = 0; l < cfg.n_layers && l < static_cast<int>(w.layers.size()); ++l)
    layers.push_back(cfg.encoder ? EncoderOps(cfg, w, l) : DecoderOps(cfg, w, l));
  return layers;
}

int ReadersOf(const std::vector<LayerOp>& ops, size_t i, const WeightTensor* out[3],
              bool* token_rows) {
  *token_rows = true;
  out[0] = out[1] = out[2] = nullptr;
  if (i + 1 >= ops.size()) return 0;
  const LayerOp& next = ops[i + 1];
  int n = 0;
  switch (next.kind) {
    case OpKind::kQkv:
    case OpKind::kFfnUp:
      for (const WeightTensor* m : next.mat)
        if (m != nullptr && *m) out[n++] = m;
      return n;
    case OpKind::kShortConv:
    case OpKind::kDeltaNet:    // the input projections (the output one reads the mixer's rows):
      out[n++] = next.mat[0];  // the DeltaNet's beta (and alpha, its like) may lack the others'
      if (next.kind == OpKind::kDeltaNet) out[n++] = &next.rec->rec_beta;  // bf16 prefill GEMM
      if (next.mat[1] != nullptr) out[n++] = next.mat[1];
      return n;
    case OpKind::kMoe:
      *token_rows = false;
      out[0] = &next.experts->experts[0].gate;
      return 1;
    default:
      return 0;
  }
}

}  // namespace paddock
