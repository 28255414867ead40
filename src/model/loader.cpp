#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <utility>
#include <vector>

#include "base/half.h"
#include "base/mapped_file.h"
#include "base/strings.h"
#include "formats/gguf.h"
#include "formats/llama2c.h"
#include "model/weights.h"

namespace paddock {

namespace {

// A format-independent tensor listing (name -> view) that the binding step reads from.
struct TensorSource {
  std::string name;
  GgmlType type;
  int n_dims;
  int64_t ne[4];
  const uint8_t* data;
  uint64_t nbytes;
};

class Binder {
 public:
  Binder(const std::vector<TensorSource>& src, LoadedModel* m) : m_(m) {
    for (const auto& t : src) by_name_[t.name] = &t;
  }

  const TensorSource* Find(const std::string& name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second;
  }

  WeightTensor Matrix(const std::string& name, int64_t cols, int64_t rows, bool required = true) {
    const TensorSource* t = Find(name);
    if (t == nullptr) {
      if (required) Fail("model lacks tensor '%s'", name.c_str());
      return {};
    }
    if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != 1 || t->ne[3] != 1) {
      Fail("tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]", name.c_str(),
           (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
           (long long)cols, (long long)rows);
    }
    used_++;
    return View(*t, cols, rows, 0);
  }

  // A 3-D expert tensor [cols, rows, n]: one matrix per expert. Older Mixtral files hold one
  // 2-D tensor per expert instead ("ffn_gate.E.weight" for "ffn_gate_exps.weight"): read too.
  std::vector<WeightTensor> Experts(const std::string& prefix, const std::string& kind,
                                    int64_t cols, int64_t rows, int n) {
    const std::string name = prefix + kind + "_exps.weight";
    const TensorSource* t = Find(name);
    std::vector<WeightTensor> out;
    if (t == nullptr && Find(prefix + kind + ".0.weight") != nullptr) {
      for (int e = 0; e < n; ++e)
        out.push_back(
            Matrix(StrFormat("%s%s.%d.weight", prefix.c_str(), kind.c_str(), e), cols, rows));
      return out;
    }
    if (t == nullptr) Fail("model lacks tensor '%s'", name.c_str());
    if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != n || t->ne[3] != 1) {
      Fail("tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %d] (%d experts)",
           name.c_str(), (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
           (long long)t->ne[3], (long long)cols, (long long)rows, n, n);
    }
    used_++;
    for (int e = 0; e < n; ++e) out.push_back(View(*t, cols, rows, e));
    return out;
  }

  // A small vector converted to float32 (owned by the model).
  const float* Vector(const std::string& name, int64_t n, bool required = true) {
    const TensorSource* t = Find(name);
    if (t == nullptr) {
      if (required) Fail("model lacks tensor '%s'", name.c_str());
      return nullptr;
    }
    if (t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1) {
      Fail("tensor '%s' has %lld x %lld elements, expected a vector of %lld", name.c_str(),
           (long long)t->ne[0], (long long)t->ne[1], (long long)n);
    }
    const TypeTraits& tr = Traits(t->type);
    if (tr.to_float == nullptr)
      Fail("tensor '%s' has type %s, which Paddock cannot compute with", name.c_str(), tr.name);
    used_++;
    auto buf = std::make_unique<float[]>(static_cast<size_t>(n));
    tr.to_float(t->data, buf.get(), n);
    const float* p = buf.get();
    m_->owned.push_back(std::move(buf));
    return p;
  }

  // A small 2-D tensor [n, rows] converted to float32 (owned by the model): rows of n.
  const float* Rows(const std::string& name, int64_t n, int64_t rows) {
    const TensorSource* t = Find(name);
    if (t == nullptr) Fail("model lacks tensor '%s'", name.c_str());
    if (t->ne[0] != n || t->ne[1] != rows || t->ne[2] != 1 || t->ne[3] != 1) {
      Fail("tensor '%s' has shape [%lld, %lld, %lld], expected [%lld, %lld]", name.c_str(),
           (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)n,
           (long long)rows);
    }
    const TypeTraits& tr = Traits(t->type);
    if (tr.to_float == nullptr)
      Fail("tensor '%s' has type %s, which Paddock cannot compute with", name.c_str(), tr.name);
    used_++;
    auto buf = std::make_unique<float[]>(static_cast<size_t>(n * rows));
    tr.to_float(t->data, buf.get(), n * rows);
    const float* p = buf.get();
    m_->owned.push_back(std::move(buf));
    return p;
  }

  // Rows of a matrix whose heads interleave two parts of `hd` rows each (Qwen3.5's Q: each
  // head's query rows, then its gate rows): part `which` of every head, copied out (owned).
  WeightTensor Deinterleave(const WeightTensor& w, int64_t hd, int which) {
    if (IsX16(w.type)) Fail("an interleaved-type query projection cannot be split per head");
    WeightTensor out = w;
    out.rows = w.rows / 2;
    const size_t part = static_cast<size_t>(hd) * w.row_bytes, heads = out.rows / hd;
    void* p = nullptr;
    if (posix_memalign(&p, 64, heads * part + 64) != 0) throw std::bad_alloc();
    std::unique_ptr<uint8_t, LoadedModel::FreeDeleter> buf(static_cast<uint8_t*>(p));
    for (size_t h = 0; h < heads; ++h)
      std::memcpy(buf.get() + h * part, w.data + (2 * h + which) * part, part);
    out.data = buf.get();
    m_->relaid.push_back(std::move(buf));
    return out;
  }

  // A convolution's taps (the file's: K per channel) as K rows of ch (owned): the kernel reads
  // a tap's row across the channels (KernelTable::conv_token).
  const float* TapMajor(const float* per_channel, int K, int64_t ch) {
    auto buf = std::make_unique<float[]>(static_cast<size_t>(K * ch));
    for (int64_t c = 0; c < ch; ++c)
      for (int k = 0; k < K; ++k) buf[static_cast<size_t>(k * ch + c)] = per_channel[c * K + k];
    const float* p = buf.get();
    Own(std::move(buf));
    return p;
  }

  int used() const { return used_; }
  void Own(std::unique_ptr<float[]> buf) { m_->owned.push_back(std::move(buf)); }

 private:
  // Matrix `index` of `rows` rows of tensor t (checked to hold it).
  static WeightTensor View(const TensorSource& t, int64_t cols, int64_t rows, int index) {
    const TypeTraits& tr = Traits(t.type);
    if (IsX16(t.type)) {
      if (rows % kX16Rows != 0)
        Fail("tensor '%s' (%s) has %lld rows: interleaved types need a multiple of 16",
             t.name.c_str(), tr.name, (long long)rows);
    } else if (tr.to_float == nullptr) {
      Fail("tensor '%s' has type %s, which Paddock cannot compute with", t.name.c_str(), tr.name);
    }
    WeightTensor w;
    w.type = t.type;
    w.cols = cols;
    w.rows = rows;
    w.row_bytes = RowBytes(tr, cols);
    const uint64_t bytes = static_cast<uint64_t>(rows) * w.row_bytes;
    if ((static_cast<uint64_t>(index) + 1) * bytes > t.nbytes)
      Fail("tensor '%s' holds %llu bytes, too few for its shape", t.name.c_str(),
           (unsigned long long)t.nbytes);
    w.data = t.data + static_cast<size_t>(index) * bytes;
    return w;
  }

  LoadedModel* m_;
  std::map<std::string, const TensorSource*> by_name_;
  int used_ = 0;
};

// Rows [r0, r0 + n) of a matrix, as a matrix of its own (fused tensors: Phi-3's attn_qkv and
// gate/up).
WeightTensor RowSlice(const WeightTensor& w, int64_t r0, int64_t n) {
  if (IsX16(w.type) && (r0 % kX16Rows != 0 || n % kX16Rows != 0))
    Fail("an interleaved fused tensor must split at multiples of 16 rows");
  WeightTensor s = w;
  s.rows = n;
  s.data = w.data + static_cast<size_t>(r0) * w.row_bytes;
  return s;
}

// A mixture-of-experts FFN: router, the experts, and the shared expert with its gate if any.
void BindExperts(Binder* b, const std::string& p, const ModelConfig& c, LayerWeights* L) {
  L->router = b->Matrix(p + "ffn_gate_inp.weight", c.dim, c.n_experts);
  if (IsX16(L->router.type))
    Fail("tensor '%sffn_gate_inp.weight' (the router) has the interleaved type %s", p.c_str(),
         TypeName(L->router.type));
  std::vector<WeightTensor> gate, up;
  if (b->Find(p + "ffn_gate_up_exps.weight") != nullptr) {  // fused: each expert's [gate | up]
    for (const WeightTensor& gu : b->Experts(
             p, "ffn_gate_up", c.dim, 2 * static_cast<int64_t>(c.expert_ffn_dim), c.n_experts)) {
      gate.push_back(RowSlice(gu, 0, c.expert_ffn_dim));
      up.push_back(RowSlice(gu, c.expert_ffn_dim, c.expert_ffn_dim));
    }
  } else {
    gate = b->Experts(p, "ffn_gate", c.dim, c.expert_ffn_dim, c.n_experts);
    up = b->Experts(p, "ffn_up", c.dim, c.expert_ffn_dim, c.n_experts);
  }
  const auto down = b->Experts(p, "ffn_down", c.expert_ffn_dim, c.dim, c.n_experts);
  L->experts.resize(static_cast<size_t>(c.n_experts));
  for (size_t e = 0; e < L->experts.size(); ++e) L->experts[e] = {gate[e], up[e], down[e]};
  // Biases (gpt-oss): the router's, and per expert a row of each 2-D expert bias tensor.
  L->router_b = b->Vector(p + "ffn_gate_inp.bias", c.n_experts, false);
  if (b->Find(p + "ffn_gate_exps.bias") != nullptr) {
    const float* bg = b->Rows(p + "ffn_gate_exps.bias", c.expert_ffn_dim, c.n_experts);
    const float* bu = b->Rows(p + "ffn_up_exps.bias", c.expert_ffn_dim, c.n_experts);
    const float* bd = b->Rows(p + "ffn_down_exps.bias", c.dim, c.n_experts);
    for (size_t e = 0; e < L->experts.size(); ++e) {
      L->experts[e].b_gate = bg + e * static_cast<size_t>(c.expert_ffn_dim);
      L->experts[e].b_up = bu + e * static_cast<size_t>(c.expert_ffn_dim);
      L->experts[e].b_down = bd + e * static_cast<size_t>(c.dim);
    }
  }
  if (b->Find(p + "ffn_up_shexp.weight") != nullptr) {
    if (c.shared_ffn_dim <= 0)
      Fail(
          "tensor '%sffn_up_shexp.weight' is a shared expert, but the metadata lacks "
          "'%s.expert_shared_feed_forward_length'",
          p.c_str(), c.arch.c_str());
    L->w_gate = b->Matrix(p + "ffn_gate_shexp.weight", c.dim, c.shared_ffn_dim);
    L->w_up = b->Matrix(p + "ffn_up_shexp.weight", c.dim, c.shared_ffn_dim);
    L->w_down = b->Matrix(p + "ffn_down_shexp.weight", c.shared_ffn_dim, c.dim);
    L->shared_gate = b->Vector(p + "ffn_gate_inp_shexp.weight", c.dim, false);
  }
}

// The model-wide tensors: embeddings, final norm, classifier (or the tied embeddings), RoPE
// factors.
void BindGlobals(Binder& b, ModelConfig& c, ModelWeights& w) {
  w.tok_embd = b.Matrix("token_embd.weight", c.dim, c.n_vocab);
  // The embedding is read a row at a time: interleaved (matrix-only) types cannot hold it.
  if (IsX16(w.tok_embd.type))
    Fail("token_embd.weight has the interleaved type %s, which cannot be an embedding table",
         TypeName(w.tok_embd.type));
  // (LFM2's converter names the final norm token_embd_norm)
  w.output_norm =
      b.Vector(c.arch == "lfm2" ? "token_embd_norm.weight" : "output_norm.weight", c.dim);
  if (c.layer_norm) w.output_norm_b = b.Vector("output_norm.bias", c.dim);
  if (c.learned_pos) w.pos_embd = b.Matrix("position_embd.weight", c.dim, c.context_length);
  if (w.pos_embd && IsX16(w.pos_embd.type))
    Fail("position_embd.weight cannot have an interleaved type");
  w.output = b.Matrix("output.weight", c.dim, c.n_vocab, false);
  c.tied_embeddings = !w.output;
  if (c.tied_embeddings) w.output = w.tok_embd;
  const int half = c.rope_dim / 2;
  if (b.Find("rope_freqs.weight") != nullptr) {
    const float* f = b.Vector("rope_freqs.weight", half);
    w.rope_freq_factors.assign(f, f + half);
  } else if (c.rope_scaling == "llama3") {
    Fail("RoPE scaling 'llama3' needs its factors, the tensor 'rope_freqs.weight'");
  }
  if (b.Find("rope_factors_long.weight") != nullptr) {  // Phi-3 longrope
    const float* lf = b.Vector("rope_factors_long.weight", half);
    const float* sf = b.Vector("rope_factors_short.weight", half);
    w.rope_factors_long.assign(lf, lf + half);
    w.rope_factors_short.assign(sf, sf + half);
  } else if (c.rope_scaling == "longrope") {
    Fail("RoPE scaling 'longrope' needs its factors, the tensor 'rope_factors_long.weight'");
  }
  if (c.v_norm) {  // ones: the values' norm has no weight
    auto ones = std::make_unique<float[]>(static_cast<size_t>(c.max_head_dim()));
    std::fill(ones.get(), ones.get() + c.max_head_dim(), 1.0f);
    w.ones = ones.get();
    b.Own(std::move(ones));
  }
  if (c.per_layer_dim > 0) {  // Gemma 4's per-layer embeddings
    const int64_t width = static_cast<int64_t>(c.n_layers) * c.per_layer_dim;
    w.pl_tok_embd = b.Matrix("per_layer_token_embd.weight", width, c.n_vocab);
    if (IsX16(w.pl_tok_embd.type))
      Fail("per_layer_token_embd.weight has the interleaved type %s (it is read a row at a time)",
           TypeName(w.pl_tok_embd.type));
    w.pl_model_proj = b.Matrix("per_layer_model_proj.weight", c.dim, width);
    w.pl_proj_norm = b.Vector("per_layer_proj_norm.weight", c.per_layer_dim);
  }
}

// A layer's attention: Q/K/V (fused or not, with biases), output, sinks, QK norms; the shapes
// are layer l's (Gemma 4: local and global heads differ; a layer sharing another's KV may have
// no K/V of its own, and a missing V projection means V = K).
void BindAttention(Binder& b, const std::string& p, int l, const ModelConfig& c, LayerWeights& L) {
  const int hd = c.LayerHeadDim(l), qd = c.n_heads * hd, kvd = c.LayerKvHeads(l) * hd;
  if (b.Find(p + "attn_qkv.weight") != nullptr) {  // fused Q/K/V (Phi-3): rows [q | k | v]
    const WeightTensor qkv = b.Matrix(p + "attn_qkv.weight", c.dim, qd + 2 * kvd);
    L.wq = RowSlice(qkv, 0, qd);
    L.wk = RowSlice(qkv, qd, kvd);
    L.wv = RowSlice(qkv, qd + kvd, kvd);
    if (c.qkv_bias) {  // fused bias [q | k | v]
      const float* bqkv = b.Vector(p + "attn_qkv.bias", qd + 2 * kvd);
      L.bq = bqkv;
      L.bk = bqkv + qd;
      L.bv = bqkv + qd + kvd;
    }
  } else {
    if (!c.attn_gate) L.wq = b.Matrix(p + "attn_q.weight", c.dim, qd);
    if (c.StoresKv(l)) {  // (else another layer's KV is read: its K/V tensors, if any, unused)
      L.wk = b.Matrix(p + "attn_k.weight", c.dim, kvd);
      L.wv = b.Matrix(p + "attn_v.weight", c.dim, kvd, !c.v_norm);
    }
  }
  if (c.attn_gate) {  // Qwen3.5: per head, hd query rows then hd gate rows
    const WeightTensor qg = b.Matrix(p + "attn_q.weight", c.dim, 2 * qd);
    L.wq = b.Deinterleave(qg, hd, 0);
    L.wq_gate = b.Deinterleave(qg, hd, 1);
  }
  L.wo = b.Matrix(p + "attn_output.weight", qd, c.dim);
  if (!c.layer_norm) L.bo = b.Vector(p + "attn_output.bias", c.dim, false);  // gpt-oss
  if (c.attn_sinks) {
    L.attn_sinks = b.Find(p + "attn_sinks.weight") != nullptr
                       ? b.Vector(p + "attn_sinks.weight", c.n_heads)
                       : b.Vector(p + "attn_sinks", c.n_heads);
  }
  if (c.qkv_bias && L.bq == nullptr) {
    L.bq = b.Vector(p + "attn_q.bias", qd);
    L.bk = b.Vector(p + "attn_k.bias", kvd);
    L.bv = b.Vector(p + "attn_v.bias", kvd);
  }
  if (c.qk_norm) {  // per head, or over the whole row (OLMoE)
    L.q_norm = b.Vector(p + "attn_q_norm.weight", c.qk_norm_full ? qd : hd);
    if (c.StoresKv(l)) L.k_norm = b.Vector(p + "attn_k_norm.weight", c.qk_norm_full ? kvd : hd);
  }
}

// A layer's FFN: experts (a router), GPT-2's ungated MLP, fused or separate gate/up, down.
void BindFfn(Binder& b, const std::string& p, int l, const ModelConfig& c, LayerWeights& L) {
  const int ffn = c.LayerFfnDim(l);
  const bool moe_layer = b.Find(p + "ffn_gate_inp.weight") != nullptr;
  if (moe_layer && !c.is_moe())
    Fail(
        "tensor '%sffn_gate_inp.weight' is a mixture-of-experts router, but the metadata gives "
        "no '%s.expert_count'",
        p.c_str(), c.arch.c_str());
  if (moe_layer) {
    BindExperts(&b, p, c, &L);
    if (c.arch != "gemma4") return;  // (Gemma 4's MoE layers keep a dense FFN beside them)
    L.router_scale = b.Vector(p + "ffn_gate_inp.scale", c.dim);
    L.expert_scale = b.Vector(p + "ffn_down_exps.scale", c.n_experts, false);
    L.pre_norm_2 = b.Vector(p + "pre_ffw_norm_2.weight", c.dim);
    L.post_norm_1 = b.Vector(p + "post_ffw_norm_1.weight", c.dim);
    L.post_norm_2 = b.Vector(p + "post_ffw_norm_2.weight", c.dim);
  }
  if (!c.ffn_gated) {  // GPT-2: up -> GELU -> down, with biases
    L.w_up = b.Matrix(p + "ffn_up.weight", c.dim, ffn);
    L.b_up = b.Vector(p + "ffn_up.bias", ffn);
    L.b_down = b.Vector(p + "ffn_down.bias", c.dim);
    L.bo = b.Vector(p + "attn_output.bias", c.dim);
  } else if (b.Find(p + "ffn_gate.weight") == nullptr && b.Find(p + "ffn_up.weight") != nullptr) {
    // fused gate/up (Phi-3): rows [gate | up]
    const WeightTensor gu = b.Matrix(p + "ffn_up.weight", c.dim, 2 * static_cast<int64_t>(ffn));
    L.w_gate = RowSlice(gu, 0, ffn);
    L.w_up = RowSlice(gu, ffn, ffn);
  } else {
    L.w_gate = b.Matrix(p + "ffn_gate.weight", c.dim, ffn);
    L.w_up = b.Matrix(p + "ffn_up.weight", c.dim, ffn);
  }
  L.w_down = b.Matrix(p + "ffn_down.weight", ffn, c.dim);
}

// Gemma 4's per layer extras: the output scale and the per-layer input's gate, projection and
// post-norm.
void BindPerLayer(Binder& b, const std::string& p, const ModelConfig& c, LayerWeights& L) {
  L.out_scale = b.Vector(p + "layer_output_scale.weight", 1, false);
  if (c.per_layer_dim <= 0) return;
  L.pl_gate = b.Matrix(p + "inp_gate.weight", c.dim, c.per_layer_dim);
  L.pl_proj = b.Matrix(p + "proj.weight", c.per_layer_dim, c.dim);
  L.pl_post_norm = b.Vector(p + "post_norm.weight", c.dim);
}

// A recurrent layer's tensors (llama.cpp's names): LFM2's short convolution, Qwen3.5's Gated
// DeltaNet.
void BindRecurrent(Binder& b, const std::string& p, int l, const ModelConfig& c, LayerWeights& L) {
  const int K = c.conv_kernel;
  if (c.Kind(l) == LayerKind::kShortConv) {
    L.rec_in = b.Matrix(p + "shortconv.in_proj.weight", c.dim, 3 * static_cast<int64_t>(c.dim));
    L.conv = b.TapMajor(b.Rows(p + "shortconv.conv.weight", K, c.dim), K, c.dim);
    L.rec_out = b.Matrix(p + "shortconv.out_proj.weight", c.dim, c.dim);
    return;
  }
  const int hv = c.ssm_v_heads, vd = c.ssm_value_dim();
  L.rec_in = b.Matrix(p + "attn_qkv.weight", c.dim, c.ssm_conv_dim());
  L.rec_gate = b.Matrix(p + "attn_gate.weight", c.dim, vd);
  L.rec_beta = b.Matrix(p + "ssm_beta.weight", c.dim, hv);
  L.rec_alpha = b.Matrix(p + "ssm_alpha.weight", c.dim, hv);
  L.conv = b.TapMajor(b.Rows(p + "ssm_conv1d.weight", K, c.ssm_conv_dim()), K, c.ssm_conv_dim());
  L.ssm_dt = b.Vector(p + "ssm_dt.bias", hv);
  L.ssm_a = b.Vector(p + "ssm_a", hv);
  L.ssm_norm = b.Vector(p + "ssm_norm.weight", c.ssm_state);
  L.rec_out = b.Matrix(p + "ssm_out.weight", vd, c.dim);
}

// Layer l of c from the tensors named p... (a prediction block's: its file layer's names).
void BindLayerAt(Binder& b, const std::string& p, int l, const ModelConfig& c, LayerWeights& L) {
  L.attn_norm = b.Vector(p + "attn_norm.weight", c.dim);
  if (c.layer_norm) {
    L.attn_norm_b = b.Vector(p + "attn_norm.bias", c.dim);
    L.ffn_norm_b = b.Vector(p + "ffn_norm.bias", c.dim);
  }
  if (c.Recurrent(l)) {
    BindRecurrent(b, p, l, c, L);
  } else {
    BindAttention(b, p, l, c, L);
  }
  // gpt-oss names its pre-FFN norm post_attention_norm.
  L.ffn_norm = !c.post_norms && b.Find(p + "ffn_norm.weight") == nullptr &&
                       b.Find(p + "post_attention_norm.weight") != nullptr
                   ? b.Vector(p + "post_attention_norm.weight", c.dim)
                   : b.Vector(p + "ffn_norm.weight", c.dim);
  BindFfn(b, p, l, c, L);
  if (c.post_norms) {
    L.post_attn_norm = b.Vector(p + "post_attention_norm.weight", c.dim);
    L.post_ffn_norm = b.Vector(p + "post_ffw_norm.weight", c.dim);
  }
  if (c.arch == "gemma4") BindPerLayer(b, p, c, L);
}

void BindLayer(Binder& b, int l, const ModelConfig& c, LayerWeights& L) {
  BindLayerAt(b, StrFormat("blk.%d.", l), l, c, L);
}

// The first multi-token-prediction block (file layer n_layers): its attention layer, the input
// projection and norms, and the head's norm and head where it has its own.
void BindMtp(Binder& b, const ModelConfig& c, ModelWeights& w) {
  const std::string p = StrFormat("blk.%d.", c.n_layers);
  MtpWeights& m = w.mtp.emplace_back();
  BindLayerAt(b, p, 0, MtpBlockConfig(c), m.layer);
  m.eh_proj = b.Matrix(p + "nextn.eh_proj.weight", 2 * static_cast<int64_t>(c.dim), c.dim);
  m.enorm = b.Vector(p + "nextn.enorm.weight", c.dim);
  m.hnorm = b.Vector(p + "nextn.hnorm.weight", c.dim);
  m.head_norm = b.Vector(p + "nextn.shared_head_norm.weight", c.dim, false);
  if (b.Find(p + "nextn.embed_tokens.weight") != nullptr)
    m.embed = b.Matrix(p + "nextn.embed_tokens.weight", c.dim, c.n_vocab);
  if (b.Find(p + "nextn.shared_head_head.weight") != nullptr)
    m.head = b.Matrix(p + "nextn.shared_head_head.weight", c.dim, c.n_vocab);
}

// An encoder (llama.cpp's tensor names): the embeddings, their LayerNorm, token type 0's row,
// a reranker's classification head; no output head (the embeddings stand in for it, unused).
void BindEncoderGlobals(Binder& b, ModelConfig& c, ModelWeights& w) {
  w.tok_embd = b.Matrix("token_embd.weight", c.dim, c.n_vocab);
  if (IsX16(w.tok_embd.type))
    Fail("token_embd.weight has the interleaved type %s, which cannot be an embedding table",
         TypeName(w.tok_embd.type));
  w.output = w.tok_embd;
  c.tied_embeddings = true;
  if (c.learned_pos) w.pos_embd = b.Matrix("position_embd.weight", c.dim, c.context_length);
  if (w.pos_embd && IsX16(w.pos_embd.type))
    Fail("position_embd.weight cannot have an interleaved type");
  if (const TensorSource* t = b.Find("token_types.weight"))
    w.type0 = b.Rows("token_types.weight", c.dim, t->ne[1]);  // row 0: "sentence A"
  w.embd_norm = b.Vector("token_embd_norm.weight", c.dim);
  w.embd_norm_b = b.Vector("token_embd_norm.bias", c.dim);
  if (b.Find("cls.weight") != nullptr) {
    w.cls = b.Rows("cls.weight", c.dim, c.dim);
    w.cls_b = b.Vector("cls.bias", c.dim);
    if (b.Find("cls.output.weight") != nullptr) {
      w.cls_out = b.Rows("cls.output.weight", c.dim, 1);
      w.cls_out_b = b.Vector("cls.output.bias", 1);
    }
  }
}

// An encoder layer: attention (separate Q/K/V with biases, or fused), the post-norms, the FFN
// (BERT: GELU MLP with biases; NomicBERT: SwiGLU).
void BindEncoderLayer(Binder& b, int l, const ModelConfig& c, LayerWeights& L) {
  const std::string p = StrFormat("blk.%d.", l);
  BindAttention(b, p, l, c, L);
  L.bo = b.Vector(p + "attn_output.bias", c.dim, false);
  L.attn_norm = b.Vector(p + "attn_output_norm.weight", c.dim);
  L.attn_norm_b = b.Vector(p + "attn_output_norm.bias", c.dim);
  L.ffn_norm = b.Vector(p + "layer_output_norm.weight", c.dim);
  L.ffn_norm_b = b.Vector(p + "layer_output_norm.bias", c.dim);
  if (c.ffn_gated) L.w_gate = b.Matrix(p + "ffn_gate.weight", c.dim, c.ffn_dim);
  L.w_up = b.Matrix(p + "ffn_up.weight", c.dim, c.ffn_dim);
  L.b_up = b.Vector(p + "ffn_up.bias", c.ffn_dim, false);
  L.w_down = b.Matrix(p + "ffn_down.weight", c.ffn_dim, c.dim);
  L.b_down = b.Vector(p + "ffn_down.bias", c.dim, false);
}

// Parameters and bytes per tensor type; per token only the used experts are read, so the
// others' parameters are not active.
void CountParameters(const std::vector<TensorSource>& src, LoadedModel* m) {
  std::map<std::string, TensorTypeCount> counts;
  for (const auto& t : src) {
    int64_t n = 1;
    for (int d = 0; d < 4; ++d) n *= t.ne[d];
    m->n_params += n;
    m->weight_bytes += t.nbytes;
    auto& tc = counts[TypeName(t.type)];
    tc.type = TypeName(t.type);
    tc.count++;
    tc.bytes += t.nbytes;
  }
  for (auto& kv : counts) m->type_counts.push_back(kv.second);
  const ModelConfig& c = m->config;
  m->n_active_params = m->n_params;
  m->active_weight_bytes = m->weight_bytes;
  for (const LayerWeights& L : m->weights.layers) {
    if (L.experts.empty()) continue;
    const ExpertWeights& e = L.experts[0];
    int64_t params = 0;
    uint64_t bytes = 0;
    for (const WeightTensor* t : {&e.gate, &e.up, &e.down}) {
      params += t->rows * t->cols;
      bytes += static_cast<uint64_t>(t->rows) * t->row_bytes;
    }
    const int skipped = c.n_experts - c.n_experts_used;
    m->n_active_params -= skipped * params;
    m->active_weight_bytes -= static_cast<uint64_t>(skipped) * bytes;
  }
  for (const auto& t : src) {  // prediction layers: read only when speculating (--spec mtp)
    int layer = -1;
    if (std::sscanf(t.name.c_str(), "blk.%d.", &layer) != 1 || layer < c.n_layers) continue;
    int64_t n = 1;
    for (int d = 0; d < 4; ++d) n *= t.ne[d];
    m->n_active_params -= n;
    m->active_weight_bytes -= t.nbytes;
    m->nextn_bytes += t.nbytes;
  }
  const WeightTensor& pl = m->weights.pl_tok_embd;  // Gemma 4: a row per token, not streamed
  if (pl) {
    m->n_active_params -= (pl.rows - 1) * pl.cols;
    m->active_weight_bytes -= static_cast<uint64_t>(pl.rows - 1) * pl.row_bytes;
  }
}

void BindWeights(const std::vector<TensorSource>& src, LoadedModel* m) {
  ModelConfig& c = m->config;
  Binder b(src, m);
  const TensorSource* emb = b.Find("token_embd.weight");
  if (emb == nullptr) Fail("model lacks tensor 'token_embd.weight'");
  if (c.n_vocab == 0) c.n_vocab = static_cast<int>(emb->ne[1]);
  c.Validate();
  ModelWeights& w = m->weights;
  (c.encoder ? BindEncoderGlobals : BindGlobals)(b, c, w);
  w.layers.resize(static_cast<size_t>(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l)
    (c.encoder ? BindEncoderLayer : BindLayer)(b, l, c, w.layers[static_cast<size_t>(l)]);
  if (c.nextn_layers > 0) BindMtp(b, c, w);
  if (c.is_moe()) {
    bool any = false;
    for (const LayerWeights& L : w.layers) any = any || !L.experts.empty();
    if (!any)
      Fail("the metadata gives %d experts but no layer has a router ('blk.0.ffn_gate_inp.weight')",
           c.n_experts);
  }
  CountParameters(src, m);
}

bool IsGguf(const std::string& path) {
  auto f = MappedFile::Open(path, false);  // (4 bytes read)
  return f->size() >= 4 && std::memcmp(f->data(), "GGUF", 4) == 0;
}

std::unique_ptr<LoadedModel> LoadGguf(const std::string& path, bool need_tokenizer, bool populate) {
  auto g = std::make_shared<GgufFile>(GgufFile::Open(path, populate));
  auto m = std::make_unique<LoadedModel>();
  m->path = path;
  m->format = StrFormat("GGUF v%u", g->version());
  try {
    m->config = ConfigFromGguf(*g);
    std::vector<TensorSource> src;
    bool paddock_types = false;
    for (const auto& t : g->tensors()) {
      src.push_back(
          {t.name, t.type, t.n_dims, {t.ne[0], t.ne[1], t.ne[2], t.ne[3]}, t.data, t.nbytes});
      paddock_types = paddock_types || IsPaddockFileType(t.type);
    }
    if (paddock_types) {  // the interleaved layouts are versioned (docs/quantization.md)
      const int64_t v = g->GetInt("paddock.quantization_version").value_or(0);
      if (v != static_cast<int64_t>(kPaddockQuantVersion)) {
        Fail(
            "the file uses Paddock tensor types of layout version %lld; this Paddock reads version "
            "%u",
            (long long)v, kPaddockQuantVersion);
      }
    }
    BindWeights(src, m.get());
    if (need_tokenizer) m->tokenizer = std::make_unique<Tokenizer>(Tokenizer::FromGguf(*g));
    if (auto t = g->GetString("tokenizer.chat_template")) m->chat_template = std::string(*t);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
  m->storage = g;
  return m;
}

std::unique_ptr<LoadedModel> LoadLlama2c(const std::string& path, bool populate) {
  auto ck = std::make_shared<Llama2cCheckpoint>(OpenLlama2c(path, populate));
  auto m = std::make_unique<LoadedModel>();
  m->path = path;
  m->format = "llama2.c";
  try {
    m->config = ConfigFromLlama2c(ck->config);
    std::vector<TensorSource> src;
    for (const auto& t : ck->tensors) {
      src.push_back({t.name,
                     GgmlType::kF32,
                     2,
                     {t.ne[0], t.ne[1], 1, 1},
                     reinterpret_cast<const uint8_t*>(t.data),
                     static_cast<uint64_t>(t.ne[0] * t.ne[1]) * 4u});
    }
    BindWeights(src, m.get());
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
  m->storage = ck;
  return m;
}

}  // namespace

namespace {
uint64_t TensorBytes(const WeightTensor& t) {
  return t ? static_cast<uint64_t>(t.rows) * t.row_bytes : 0;
}
}  // namespace

uint64_t LayerWeightBytes(const LoadedModel& m, int layer) {
  const LayerWeights& L = m.weights.layers[static_cast<size_t>(layer)];
  uint64_t b = 0;
  for (const WeightTensor* t :
       {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down, &L.router})
    b += TensorBytes(*t);
  for (const ExpertWeights& e : L.experts)
    b += TensorBytes(e.gate) + TensorBytes(e.up) + TensorBytes(e.down);
  return b + 4u * 4u * static_cast<uint64_t>(m.config.dim);  // the norms, roughly
}

uint64_t EmbeddingBytes(const LoadedModel& m) {
  return TensorBytes(m.weights.tok_embd);
}

uint64_t OutputHeadBytes(const LoadedModel& m) {
  return m.config.tied_embeddings ? 0 : TensorBytes(m.weights.output);
}

std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& path) {
  if (IsGguf(path)) {
    GgufFile g = GgufFile::Open(path);
    try {
      return std::make_unique<Tokenizer>(Tokenizer::FromGguf(g));
    } catch (const Error& e) {
      throw Error(path + ": " + e.what());
    }
  }
  return std::make_unique<Tokenizer>(Tokenizer::FromLlama2c(ReadLlama2cTokenizer(path)));
}

std::unique_ptr<LoadedModel> LoadModel(const std::string& path, const std::string& tokenizer_path,
                                       bool populate) {
  std::unique_ptr<LoadedModel> m =
      IsGguf(path) ? LoadGguf(path, tokenizer_path.empty(), populate) : LoadLlama2c(path, populate);
  if (!tokenizer_path.empty()) {
    m->tokenizer = LoadTokenizer(tokenizer_path);
  }
  if (!m->tokenizer)
    Fail("%s: a llama2.c checkpoint has no vocabulary; pass its tokenizer with -z", path.c_str());
  if (m->tokenizer->vocab_size() != m->config.n_vocab) {
    Fail(
        "tokenizer has %d tokens but model '%s' has a vocabulary of %d: they do not belong "
        "together",
        m->tokenizer->vocab_size(), path.c_str(), m->config.n_vocab);
  }
  m->ops = LayerOps(m->config, m->weights);
  return m;
}

}  // namespace paddock
