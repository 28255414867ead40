#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/strings.h"

namespace paddock {

namespace {
// Weight bytes per row block in batched matmul: well inside L2 (1-2 MiB per core here).
constexpr size_t kMatmulBlockBytes = 64 * 1024;
constexpr size_t kFloatMatmulBlockBytes = 512 * 1024;
// Sequences per step (rows of last-token logits kept).
constexpr int kMaxItems = 256;
constexpr int kMaxThreadsForSplit = 256;  // bound on the position split of attention
}  // namespace

Transformer::Transformer(const LoadedModel& model, const KernelTable& kernels, ThreadPool& pool,
                         int max_batch, bool int8_activations)
    : model_(model), cfg_(model.config), k_(kernels), pool_(pool),
      max_batch_(std::max(1, max_batch)), max_items_(std::min(max_batch_, kMaxItems)),
      ctx_(model.config.context_length),
      int8_(int8_activations) {
  max_cols_ = static_cast<size_t>(std::max({cfg_.dim, cfg_.q_dim(), cfg_.ffn_dim}));
  glu_ = cfg_.ffn_act == FfnAct::kGeluTanh ? k_.gelu_mul : k_.silu_mul;
  const size_t act = static_cast<size_t>(max_batch_) * max_cols_;
  act_qs_.reset(new int8_t[act]);
  act_d_.reset(new float[act / kQK + 1]);
  act_ds_.reset(new float[act / kQK + 1]);
  const size_t B = static_cast<size_t>(max_batch_);
  const size_t T = static_cast<size_t>(pool_.size());
  const size_t half = static_cast<size_t>(cfg_.rope_dim / 2);
  const size_t sizes[] = {
      B * cfg_.dim, B * cfg_.dim, B * cfg_.q_dim(), B * cfg_.kv_dim(), B * cfg_.kv_dim(),
      B * cfg_.q_dim(), B * cfg_.ffn_dim, B * cfg_.ffn_dim, static_cast<size_t>(max_items_) * static_cast<size_t>(cfg_.n_vocab),
      B * half, B * half, T * static_cast<size_t>(std::max(ctx_, 2 * cfg_.n_heads)), T * static_cast<size_t>(cfg_.q_dim()),
      T * (AttendScratchFloats(cfg_.head_dim) + static_cast<size_t>(kAttnMaxRows) * cfg_.head_dim),
      2 * T * static_cast<size_t>(kAttnMaxRows) * (cfg_.head_dim + 2)};
  size_t total = 0;
  for (size_t s : sizes) total += (s + 15) / 16 * 16;  // 64-byte aligned slices
  arena_.reset(new float[total + 16]);
  arena_bytes_ = total * sizeof(float) + act + (act / kQK + 1) * 8;
  float* p = arena_.get();
  p += (16 - (reinterpret_cast<uintptr_t>(p) / 4) % 16) % 16;
  float** slots[] = {&x_, &xb_, &q_, &kv_k_, &kv_v_, &att_, &hb_, &hb2_, &logits_, &cos_, &sin_, &scores_, &qrot_, &attn_scratch_, &attn_part_};
  for (size_t i = 0; i < std::size(slots); ++i) {
    *slots[i] = p;
    p += (sizes[i] + 15) / 16 * 16;
  }
  std::memset(arena_.get(), 0, (total + 16) * sizeof(float));
  // At most one task per (token, head), or 2 per thread when positions are split.
  attn_tasks_.reserve(std::max(B * static_cast<size_t>(cfg_.n_heads), 2 * T));
  tok_pos_.assign(B, 0);
  tok_view_.assign(B, nullptr);
  item_last_.assign(static_cast<size_t>(max_items_), 0);
  rope_pos_scale_ = cfg_.rope_scaling == "linear" ? 1.0f / cfg_.rope_scaling_factor : 1.0f;
  inv_freq_.resize(half);
  const auto& factors = model_.weights.rope_freq_factors;
  for (size_t i = 0; i < half; ++i) {
    float f = 1.0f / std::pow(cfg_.rope_base, static_cast<float>(2 * i) / static_cast<float>(cfg_.rope_dim));
    if (!factors.empty()) f /= factors[i];
    inv_freq_[i] = f;
  }
}

const float* Transformer::Forward(const int32_t* tokens, int n, int pos, const KvView& kv) {
  if (n <= 0) Fail("Forward: no tokens");
  const float* logits = nullptr;
  for (int done = 0; done < n; done += max_batch_) {
    BatchItem item{tokens + done, std::min(max_batch_, n - done), pos + done, &kv};
    ForwardBatch(&item, 1, &logits);
  }
  return logits;
}

void Transformer::ForwardBatch(const BatchItem* items, int n_items, const float** logits) {
  if (n_items < 1 || n_items > max_items_) Fail("Forward: %d sequences in one step (1 to %d allowed)", n_items, max_items_);
  int n = 0;
  for (int i = 0; i < n_items; ++i) {
    const BatchItem& it = items[i];
    if (it.n <= 0 || it.kv == nullptr) Fail("Forward: empty batch item");
    if (it.pos < 0 || it.pos + it.n > it.kv->capacity() || it.pos + it.n > ctx_) {
      Fail("context full: positions up to %d requested, the KV cache holds %d", it.pos + it.n, std::min(it.kv->capacity(), ctx_));
    }
    if (n + it.n > max_batch_) Fail("Forward: %d tokens in one batch exceed the batch limit %d", n + it.n, max_batch_);
    for (int j = 0; j < it.n; ++j) {
      if (it.tokens[j] < 0 || it.tokens[j] >= cfg_.n_vocab) Fail("token id %d is outside the vocabulary (0..%d)", it.tokens[j], cfg_.n_vocab - 1);
      tok_pos_[static_cast<size_t>(n)] = it.pos + j;
      tok_view_[static_cast<size_t>(n)] = it.kv;
      ++n;
    }
    item_last_[static_cast<size_t>(i)] = n - 1;
  }
  const int dim = cfg_.dim;
  {
    ProfileScope ps(prof_, ProfOp::kEmbed);
    const WeightTensor& emb = model_.weights.tok_embd;
    const DequantizeFn to_float = Traits(emb.type).to_float;
    for (int i = 0, j = 0; i < n_items; ++i) {
      for (int t = 0; t < items[i].n; ++t, ++j) {
        float* xr = x_ + static_cast<size_t>(j) * dim;
        to_float(emb.data + static_cast<size_t>(items[i].tokens[t]) * emb.row_bytes, xr, dim);
        if (cfg_.embed_scale != 1.0f) {
          for (int d = 0; d < dim; ++d) xr[d] *= cfg_.embed_scale;
        }
        if (model_.weights.pos_embd) {  // learned absolute positions (GPT-2)
          const WeightTensor& pe = model_.weights.pos_embd;
          float* row = xb_;  // free until the first layer
          Traits(pe.type).to_float(pe.data + static_cast<size_t>(items[i].pos + t) * pe.row_bytes, row, dim);
          k_.add(xr, row, dim);
        }
      }
    }
    RopeTables(n);
  }
  pending_residual_ = false;
  for (int l = 0; l < cfg_.n_layers; ++l) Layer(l, n);
  if (pending_residual_) {  // the last layer's FFN residual
    ProfileScope ps(prof_, ProfOp::kResidual);
    ForTokens(n, [&](int j) { k_.add(x_ + static_cast<size_t>(j) * dim, xb_ + static_cast<size_t>(j) * dim, dim); });
    pending_residual_ = false;
  }
  // Only each item's last token needs logits.
  {
    ProfileScope ps(prof_, ProfOp::kLogits);
    for (int i = 0; i < n_items; ++i) {
      const float* last = x_ + static_cast<size_t>(item_last_[static_cast<size_t>(i)]) * dim;
      Norm(xb_ + static_cast<size_t>(i) * dim, last, model_.weights.output_norm, model_.weights.output_norm_b);
    }
  }
  if (stats_ != nullptr) {
    Accumulate(&stats_->output, xb_, n_items, dim);
    stats_->tokens += n;
  }
  const ActQ8 oq = QuantizeInput(xb_, n_items, dim, model_.weights.output);
  ProfileScope ps(prof_, ProfOp::kLogits);
  Matmul(model_.weights.output, xb_, oq, n_items, logits_);
  if (cfg_.final_softcap > 0) {
    const float c = cfg_.final_softcap;
    float* lg = logits_;
    for (size_t i = 0, e = static_cast<size_t>(n_items) * static_cast<size_t>(cfg_.n_vocab); i < e; ++i) lg[i] = c * std::tanh(lg[i] / c);
  }
  for (int i = 0; i < n_items; ++i) logits[i] = logits_ + static_cast<size_t>(i) * cfg_.n_vocab;
}

void Transformer::RopeTables(int n) {
  const int half = cfg_.rope_dim / 2;
  for (int j = 0; j < n; ++j) {
    const float p = static_cast<float>(tok_pos_[static_cast<size_t>(j)]) * rope_pos_scale_;
    for (int i = 0; i < half; ++i) {
      const float a = p * inv_freq_[static_cast<size_t>(i)];
      cos_[j * half + i] = std::cos(a);
      sin_[j * half + i] = std::sin(a);
    }
  }
}

void Transformer::set_act_stats(ActStats* s) {
  stats_ = s;
  if (s == nullptr) return;
  const size_t L = static_cast<size_t>(cfg_.n_layers);
  auto init = [&](std::vector<std::vector<double>>* v, int cols) {
    if (v->size() != L) v->assign(L, std::vector<double>(static_cast<size_t>(cols), 0.0));
  };
  init(&s->attn, cfg_.dim);
  init(&s->attn_out, cfg_.q_dim());
  init(&s->ffn, cfg_.dim);
  init(&s->down, cfg_.ffn_dim);
  if (s->output.empty()) s->output.assign(static_cast<size_t>(cfg_.dim), 0.0);
}

void Transformer::Accumulate(std::vector<double>* sums, const float* x, int n, int cols) {
  for (int j = 0; j < n; ++j) {
    const float* r = x + static_cast<size_t>(j) * static_cast<size_t>(cols);
    for (int c = 0; c < cols; ++c) (*sums)[static_cast<size_t>(c)] += static_cast<double>(r[c]) * r[c];
  }
}

ActQ8 Transformer::ResidualNormQuant(const float* delta, const float* w, const float* b, int n, const WeightTensor& next) {
  const int dim = cfg_.dim;
  const bool quant = TakesInt8(next, dim);
  {
    ProfileScope ps(prof_, ProfOp::kNorm);
    ForTokens(n, [&](int j) {
      const size_t r = static_cast<size_t>(j) * static_cast<size_t>(dim);
      if (delta != nullptr) k_.add(x_ + r, delta + r, dim);
      Norm(xb_ + r, x_ + r, w, b);
      if (quant) k_.quantize_act(xb_ + r, dim, act_qs_.get() + r, act_d_.get() + r / kQK, act_ds_.get() + r / kQK);
    });
  }
  return quant ? ActBuffers() : ActQ8{};
}

void Transformer::QkvEpilogue(const LayerWeights& w, int j, int h0, int h1) {
  const int hd = cfg_.head_dim, nq = cfg_.n_heads, nkv = cfg_.n_kv_heads;
  const int half = cfg_.rope_dim / 2;
  const bool half_split = cfg_.rope_style == RopeStyle::kHalfSplit;
  for (int h = h0; h < h1; ++h) {
    if (h < nq + nkv) {  // a query or key head
      const bool is_q = h < nq;
      const int hh = is_q ? h : h - nq;
      float* x = (is_q ? q_ + j * cfg_.q_dim() : kv_k_ + j * cfg_.kv_dim()) + hh * hd;
      const float* bias = is_q ? w.bq : w.bk;
      if (bias != nullptr) k_.add(x, bias + hh * hd, hd);
      const float* norm = is_q ? w.q_norm : w.k_norm;
      if (norm != nullptr) k_.rmsnorm(x, x, norm, hd, cfg_.norm_eps);
      if (half > 0) k_.rope(x, 1, hd, cfg_.rope_dim, cos_ + j * half, sin_ + j * half, half_split);
    } else if (w.bv != nullptr) {
      const int hh = h - nq - nkv;
      k_.add(kv_v_ + j * cfg_.kv_dim() + hh * hd, w.bv + hh * hd, hd);
    }
  }
}

void Transformer::Layer(int l, int n) {
  const LayerWeights& w = model_.weights.layers[static_cast<size_t>(l)];
  const int dim = cfg_.dim, qd = cfg_.q_dim(), kvd = cfg_.kv_dim(), hd = cfg_.head_dim;
  const int half = cfg_.rope_dim / 2;
  const bool half_split = cfg_.rope_style == RopeStyle::kHalfSplit;

  // Attention block: norm, Q/K/V projections, (bias), (QK-norm), RoPE, cache, attend, project.
  ActQ8 xq;
  if (fuse_norm_) {  // (the previous layer's FFN residual) + norm + quantize, one pass
    xq = ResidualNormQuant(pending_residual_ ? xb_ : nullptr, w.attn_norm, w.attn_norm_b, n, w.wq);
    pending_residual_ = false;
  } else {
    {
      ProfileScope ps(prof_, ProfOp::kNorm);
      for (int j = 0; j < n; ++j) Norm(xb_ + j * dim, x_ + j * dim, w.attn_norm, w.attn_norm_b);
    }
    xq = QuantizeInput(xb_, n, dim, w.wq);
  }
  const size_t li = static_cast<size_t>(l);
  if (stats_ != nullptr) Accumulate(&stats_->attn[li], xb_, n, dim);
  bool epilogue_done;
  {
    ProfileScope ps(prof_, ProfOp::kMatmulQkv);
    epilogue_done = MatmulQkv(w, xb_, xq, n);
  }
  for (int j = 0; j < n; ++j) {
    const KvView& kv = *tok_view_[static_cast<size_t>(j)];
    const KvLayerView& cache = kv.layers[l];
    const int pos = tok_pos_[static_cast<size_t>(j)];
    float* q = q_ + j * qd;
    float* k = kv_k_ + j * kvd;
    float* v = kv_v_ + j * kvd;
    if (!epilogue_done) {
      ProfileScope ps(prof_, ProfOp::kBiasNormRope);
      if (w.bq != nullptr) {
        k_.add(q, w.bq, qd);
        k_.add(k, w.bk, kvd);
        k_.add(v, w.bv, kvd);
      }
      if (w.q_norm != nullptr) {
        for (int h = 0; h < cfg_.n_heads; ++h) k_.rmsnorm(q + h * hd, q + h * hd, w.q_norm, hd, cfg_.norm_eps);
        for (int h = 0; h < cfg_.n_kv_heads; ++h) k_.rmsnorm(k + h * hd, k + h * hd, w.k_norm, hd, cfg_.norm_eps);
      }
      if (half > 0) {
        k_.rope(q, cfg_.n_heads, hd, cfg_.rope_dim, cos_ + j * half, sin_ + j * half, half_split);
        k_.rope(k, cfg_.n_kv_heads, hd, cfg_.rope_dim, cos_ + j * half, sin_ + j * half, half_split);
      }
    }
    ProfileScope ps(prof_, ProfOp::kKvStore);
    k_.kv_store[static_cast<int>(cache.k_type)](kv.K(l, pos), k, cfg_.n_kv_heads, hd);
    k_.kv_store[static_cast<int>(cache.v_type)](kv.V(l, pos), v, cfg_.n_kv_heads, hd);
  }
  {
    ProfileScope ps(prof_, ProfOp::kAttention);
    Attention(l, n);
  }
  if (stats_ != nullptr) Accumulate(&stats_->attn_out[li], att_, n, qd);
  const ActQ8 aq = QuantizeInput(att_, n, qd, w.wo);
  {
    ProfileScope ps(prof_, ProfOp::kMatmulOut);
    Matmul(w.wo, att_, aq, n, xb_);
    AddBias(xb_, w.bo, n, dim);
  }
  if (w.post_attn_norm != nullptr) {
    ProfileScope ps(prof_, ProfOp::kNorm);
    for (int j = 0; j < n; ++j) k_.rmsnorm(xb_ + j * dim, xb_ + j * dim, w.post_attn_norm, dim, cfg_.norm_eps);
  }
  // Feed-forward block: (residual) norm, gate/up, SwiGLU, down, residual.
  const WeightTensor& w_in = w.w_gate ? w.w_gate : w.w_up;
  ActQ8 fq;
  if (fuse_norm_) {
    fq = ResidualNormQuant(xb_, w.ffn_norm, w.ffn_norm_b, n, w_in);
  } else {
    {
      ProfileScope ps(prof_, ProfOp::kResidual);
      for (int j = 0; j < n; ++j) k_.add(x_ + j * dim, xb_ + j * dim, dim);
    }
    {
      ProfileScope ps(prof_, ProfOp::kNorm);
      for (int j = 0; j < n; ++j) Norm(xb_ + j * dim, x_ + j * dim, w.ffn_norm, w.ffn_norm_b);
    }
    fq = QuantizeInput(xb_, n, dim, w_in);
  }
  if (stats_ != nullptr) Accumulate(&stats_->ffn[li], xb_, n, dim);
  if (w.w_gate) {
    ProfileScope ps(prof_, ProfOp::kMatmulGateUp);  // includes SwiGLU / GeGLU
    MatmulGateUp(w, xb_, fq, n);
  } else {
    ProfileScope ps(prof_, ProfOp::kMatmulGateUp);  // up (+ bias) -> GELU (GPT-2)
    const int64_t ffn = cfg_.ffn_dim;
    Matmul(w.w_up, xb_, fq, n, hb_);
    AddBias(hb_, w.b_up, n, ffn);
    k_.gelu_mul(hb_, nullptr, n * ffn);
  }
  if (stats_ != nullptr) Accumulate(&stats_->down[li], hb_, n, cfg_.ffn_dim);
  const ActQ8 hq = QuantizeInput(hb_, n, cfg_.ffn_dim, w.w_down);
  {
    ProfileScope ps(prof_, ProfOp::kMatmulDown);
    Matmul(w.w_down, hb_, hq, n, xb_);
    AddBias(xb_, w.b_down, n, dim);
  }
  if (w.post_ffn_norm != nullptr) {
    ProfileScope ps(prof_, ProfOp::kNorm);
    for (int j = 0; j < n; ++j) k_.rmsnorm(xb_ + j * dim, xb_ + j * dim, w.post_ffn_norm, dim, cfg_.norm_eps);
  }
  if (fuse_norm_) {  // carried into the next layer's norm pass (or added before the logits)
    pending_residual_ = true;
    return;
  }
  ProfileScope ps(prof_, ProfOp::kResidual);
  for (int j = 0; j < n; ++j) k_.add(x_ + j * dim, xb_ + j * dim, dim);
}

void Transformer::AttentionFused(int l, int n) {
  const int hd = cfg_.head_dim, qd = cfg_.q_dim(), nkv = cfg_.n_kv_heads;
  const int group = cfg_.n_heads / cfg_.n_kv_heads;
  const float scale = cfg_.AttentionScale();
  // One task per run of tokens of one sequence, KV head and kAttnMaxRows of its (token, head)
  // query rows: the rows share every K/V tile.
  attn_tasks_.clear();
  for (int j0 = 0; j0 < n;) {
    int j1 = j0 + 1;
    while (j1 < n && tok_view_[static_cast<size_t>(j1)] == tok_view_[static_cast<size_t>(j0)]) ++j1;
    const int rows = (j1 - j0) * group;
    for (int g = 0; g < nkv; ++g) {
      for (int first = 0; first < rows; first += kAttnMaxRows) {
        attn_tasks_.push_back({j0, g, first, std::min(kAttnMaxRows, rows - first)});
      }
    }
    j0 = j1;
  }
  // Fewer tasks than threads over long ranges (decode, few KV heads): split each task's
  // positions so every thread works, and merge the partial results after.
  const int threads = pool_.size();
  const int n_base = static_cast<int>(attn_tasks_.size());
  int parts = 1;
  if (n_base < threads && tok_pos_[static_cast<size_t>(n - 1)] + 1 >= 4 * kAttnTile) {
    parts = std::min({(threads + n_base - 1) / n_base, 2 * threads / n_base, 2 * kMaxThreadsForSplit});
  }
  if (parts > 1) {
    attn_tasks_.resize(static_cast<size_t>(n_base * parts));  // within the planned capacity
    for (int i = n_base - 1; i >= 0; --i) {  // expand in place, back to front
      const AttnTask base = attn_tasks_[static_cast<size_t>(i)];
      for (int p = 0; p < parts; ++p) {
        AttnTask t = base;
        t.part = p;
        t.parts = parts;
        attn_tasks_[static_cast<size_t>(i * parts + p)] = t;
      }
    }
  }
  const size_t part_stride = static_cast<size_t>(kAttnMaxRows) * (hd + 2);
  const size_t stride = AttendScratchFloats(hd) + static_cast<size_t>(kAttnMaxRows) * hd;
  auto task = [&](int64_t begin, int64_t end, int t) {
    float* scratch = attn_scratch_ + static_cast<size_t>(t) * stride;
    float* qrot = scratch + AttendScratchFloats(hd);
    const float* q_rows[kAttnMaxRows];
    float* out_rows[kAttnMaxRows];
    int lo[kAttnMaxRows], hi[kAttnMaxRows];
    for (int64_t idx = begin; idx < end; ++idx) {
      const AttnTask& tk = attn_tasks_[static_cast<size_t>(idx)];
      const KvView& kv = *tok_view_[static_cast<size_t>(tk.j0)];
      const KvLayerView& cache = kv.layers[l];
      const int window = cfg_.LayerWindow(l, kv.window);
      KvRowsRef kr, vr;
      kr.base = cache.k;
      kr.row_bytes = cache.k_row_bytes;
      kr.type = cache.k_type;
      vr.base = cache.v;
      vr.row_bytes = cache.v_row_bytes;
      vr.type = cache.v_type;
      kr.table = vr.table = kv.table;
      kr.block_size = vr.block_size = kv.block_size;
      const bool rot_k = KvRotated(cache.k_type, hd);
      for (int r = 0; r < tk.count; ++r) {
        const int p = tk.first + r;
        const int j = tk.j0 + p / group, h = tk.g * group + p % group;
        const int pos = tok_pos_[static_cast<size_t>(j)];
        hi[r] = pos + 1;
        lo[r] = window > 0 ? std::max(0, pos - window + 1) : 0;
        const float* q = q_ + j * qd + h * hd;
        if (rot_k) {  // keys are stored rotated: (Hq).(Hk) = q.k
          float* qr = qrot + r * hd;
          std::memcpy(qr, q, sizeof(float) * hd);
          Hadamard(qr, hd);
          q = qr;
        }
        q_rows[r] = q;
        out_rows[r] = att_ + j * qd + h * hd;
      }
      if (tk.parts > 1) {  // this part's share of the positions, into its partial slot
        int t_begin = lo[0], t_end = hi[0];
        for (int r = 1; r < tk.count; ++r) {
          t_begin = std::min(t_begin, lo[r]);
          t_end = std::max(t_end, hi[r]);
        }
        const int c0 = t_begin + (t_end - t_begin) * tk.part / tk.parts;
        const int c1 = t_begin + (t_end - t_begin) * (tk.part + 1) / tk.parts;
        float* slot = attn_part_ + static_cast<size_t>(idx) * part_stride;
        for (int r = 0; r < tk.count; ++r) {
          lo[r] = std::max(lo[r], c0);
          hi[r] = std::max(lo[r], std::min(hi[r], c1));
          out_rows[r] = slot + static_cast<size_t>(r) * hd;
        }
        k_.attend_rows(q_rows, out_rows, tk.count, lo, hi, kr, vr, tk.g, nkv, hd, scale, cfg_.attn_softcap, scratch,
                       slot + static_cast<size_t>(kAttnMaxRows) * hd);
        continue;
      }
      k_.attend_rows(q_rows, out_rows, tk.count, lo, hi, kr, vr, tk.g, nkv, hd, scale, cfg_.attn_softcap, scratch, nullptr);
      if (KvRotated(cache.v_type, hd)) {  // values are stored rotated: rotate the sums back
        for (int r = 0; r < tk.count; ++r) Hadamard(out_rows[r], hd);
      }
    }
  };
  pool_.ParallelFor(static_cast<int64_t>(attn_tasks_.size()), task);
  if (parts == 1) return;
  for (int i = 0; i < n_base; ++i) {  // merge each task's parts, row by row
    const AttnTask& tk = attn_tasks_[static_cast<size_t>(i * parts)];
    const KvLayerView& cache = tok_view_[static_cast<size_t>(tk.j0)]->layers[l];
    for (int r = 0; r < tk.count; ++r) {
      const float* outs[2 * kMaxThreadsForSplit];
      const float* mls[2 * kMaxThreadsForSplit];
      for (int p = 0; p < parts; ++p) {
        const float* slot = attn_part_ + static_cast<size_t>(i * parts + p) * part_stride;
        outs[p] = slot + static_cast<size_t>(r) * hd;
        mls[p] = slot + static_cast<size_t>(kAttnMaxRows) * hd + 2 * r;
      }
      const int pidx = tk.first + r;
      const int j = tk.j0 + pidx / group, h = tk.g * group + pidx % group;
      float* out = att_ + j * qd + h * hd;
      MergeAttention(outs, mls, parts, hd, out);
      if (KvRotated(cache.v_type, hd)) Hadamard(out, hd);
    }
  }
}

void Transformer::Attention(int l, int n) {
  if (fuse_attn_) {
    AttentionFused(l, n);
    return;
  }
  const int hd = cfg_.head_dim, qd = cfg_.q_dim(), nkv = cfg_.n_kv_heads;
  const int group = cfg_.n_heads / cfg_.n_kv_heads;
  const float scale = cfg_.AttentionScale();
  auto task = [&](int64_t begin, int64_t end, int t) {
    float* scores = scores_ + static_cast<size_t>(t) * ctx_;
    float* qrot = qrot_ + static_cast<size_t>(t) * hd;
    for (int64_t idx = begin; idx < end; ++idx) {
      const int j = static_cast<int>(idx / cfg_.n_heads), h = static_cast<int>(idx % cfg_.n_heads);
      const KvView& kv = *tok_view_[static_cast<size_t>(j)];
      const KvLayerView& cache = kv.layers[l];
      const auto kdot = k_.kv_dot[static_cast<int>(cache.k_type)];
      const auto vaxpy = k_.kv_axpy[static_cast<int>(cache.v_type)];
      const bool rot_k = KvRotated(cache.k_type, hd), rot_v = KvRotated(cache.v_type, hd);
      const int window = cfg_.LayerWindow(l, kv.window);
      const int p = tok_pos_[static_cast<size_t>(j)];
      const int start = window > 0 ? std::max(0, p - window + 1) : 0;
      const float* q = q_ + j * qd + h * hd;
      if (rot_k) {  // keys are stored rotated: (Hq).(Hk) = q.k
        std::memcpy(qrot, q, sizeof(float) * hd);
        Hadamard(qrot, hd);
        q = qrot;
      }
      const int g = h / group;
      const int len = p - start + 1;
      for (int s = 0; s < len; ++s) scores[s] = kdot(q, kv.K(l, start + s), g, nkv, hd) * scale;
      if (cfg_.attn_softcap > 0) {
        for (int s = 0; s < len; ++s) scores[s] = cfg_.attn_softcap * std::tanh(scores[s] / cfg_.attn_softcap);
      }
      k_.softmax(scores, len);
      float* out = att_ + j * qd + h * hd;
      std::memset(out, 0, sizeof(float) * hd);
      for (int s = 0; s < len; ++s) vaxpy(out, scores[s], kv.V(l, start + s), g, nkv, hd);
      if (rot_v) Hadamard(out, hd);  // values are stored rotated: rotate the sum back
    }
  };
  pool_.ParallelFor(static_cast<int64_t>(n) * cfg_.n_heads, task);
}

bool Transformer::TakesInt8(const WeightTensor& w, int cols) const {
  return int8_ && cols % kQK == 0 && k_.gemv_q8[static_cast<int>(w.type)] != nullptr;
}

ActQ8 Transformer::QuantizeInput(const float* x, int n, int cols, const WeightTensor& w) {
  if (!TakesInt8(w, cols)) return {};
  ProfileScope ps(prof_, ProfOp::kQuantizeAct);
  ForTokens(n, [&](int j) {
    const size_t r = static_cast<size_t>(j) * static_cast<size_t>(cols);
    k_.quantize_act(x + r, cols, act_qs_.get() + r, act_d_.get() + r / kQK, act_ds_.get() + r / kQK);
  });
  return ActBuffers();
}

ActQ8 Transformer::ActBuffers() const {
  ActQ8 q;
  q.qs = act_qs_.get();
  q.d = act_d_.get();
  q.ds = act_ds_.get();
  return q;
}

void Transformer::MatmulRows(const WeightTensor& w, const float* x, const ActQ8& xq, int n,
                             float* y, int64_t begin, int64_t end) {
  const GemvQ8Fn gemv_q8 = xq.qs != nullptr ? k_.gemv_q8[static_cast<int>(w.type)] : nullptr;
  const GemvFn gemv = k_.gemv[static_cast<int>(w.type)];
  // Float activations: the BF16 dot product for BF16 weights where enabled and present, else
  // the float GEMM of the type (null: a GEMV per token).
  const bool bf16_dot = gemv_q8 == nullptr && bf16_dot_ && w.type == GgmlType::kBF16 && k_.gemm_bf16_dot != nullptr;
  const GemmFn gemm = gemv_q8 != nullptr ? nullptr : (bf16_dot ? k_.gemm_bf16_dot : k_.gemm[static_cast<int>(w.type)]);
  // Token j's input, in whichever form the kernel takes, times rows [r0, r0 + nr).
  auto run = [&](const uint8_t* wr, int64_t nr, int j, float* out) {
    if (gemv_q8 != nullptr) {
      gemv_q8(wr, w.row_bytes, w.cols, nr, xq.Token(j, w.cols), out);
    } else if (bf16_dot) {
      gemm(wr, w.row_bytes, w.cols, nr, x + static_cast<size_t>(j) * w.cols, 1, out, nr);
    } else {
      gemv(wr, w.row_bytes, w.cols, nr, x + static_cast<size_t>(j) * w.cols, out);
    }
  };
  // One token: the GEMV (bit-identical to the GEMM's result for that token, so a sequence's
  // results do not depend on its batch-mates; a kernel test holds both to that).
  if (n == 1) {
    run(w.data + static_cast<size_t>(begin) * w.row_bytes, end - begin, 0, y + begin);
    return;
  }
  // Several tokens: walk the rows in blocks small enough to stay in cache and run every token
  // over each block (an integer or float GEMM where the type has one, else a GEMV per token), so each
  // weight byte comes from memory once per chunk.
  const GemmQ8Fn gemm_q8 = gemv_q8 != nullptr ? k_.gemm_q8[static_cast<int>(w.type)] : nullptr;
  const int64_t unit = RowUnit(w);
  // Float activations are 4 bytes per element (int8: 1) and every token's must be re-read for
  // each block: larger blocks for them, so that traffic stays small next to the weights'.
  const size_t block_bytes = gemv_q8 != nullptr ? kMatmulBlockBytes : kFloatMatmulBlockBytes;
  const int64_t block = std::max<int64_t>(1, static_cast<int64_t>(block_bytes / w.row_bytes) / unit) * unit;
  for (int64_t r0 = begin; r0 < end; r0 += block) {
    const int64_t nr = std::min(block, end - r0);
    const uint8_t* wr = w.data + static_cast<size_t>(r0) * w.row_bytes;
    if (gemm_q8 != nullptr) {
      gemm_q8(wr, w.row_bytes, w.cols, nr, xq, n, y + r0, w.rows);
    } else if (gemm != nullptr) {
      gemm(wr, w.row_bytes, w.cols, nr, x, n, y + r0, w.rows);
    } else {
      for (int j = 0; j < n; ++j) run(wr, nr, j, y + static_cast<size_t>(j) * w.rows + r0);
    }
  }
}

// Rows are split between threads in whole 16-row groups for the interleaved layouts.
int64_t Transformer::RowUnit(const WeightTensor& w) { return IsX16(w.type) ? kX16Rows : 1; }

void Transformer::Matmul(const WeightTensor& w, const float* x, const ActQ8& xq, int n, float* y) {
  const int64_t u = RowUnit(w);
  pool_.ParallelFor(w.rows / u, [&](int64_t b, int64_t e, int) { MatmulRows(w, x, xq, n, y, b * u, e * u); });
}

bool Transformer::MatmulQkv(const LayerWeights& L, const float* x, const ActQ8& xq, int n) {
  // The fused pass is cut into whole heads, so each thread finishes its heads (bias, QK-norm,
  // RoPE) while they are in cache; a head must hold whole 16-row groups of interleaved weights.
  const int hd = cfg_.head_dim;
  const int64_t u = std::max({RowUnit(L.wq), RowUnit(L.wk), RowUnit(L.wv)});
  if (!fuse_qkv_ || hd % u != 0) {
    Matmul(L.wq, x, xq, n, q_);
    Matmul(L.wk, x, xq, n, kv_k_);
    Matmul(L.wv, x, xq, n, kv_v_);
    return false;
  }
  const WeightTensor* ws[3] = {&L.wq, &L.wk, &L.wv};
  float* ys[3] = {q_, kv_k_, kv_v_};
  const int heads = cfg_.n_heads + 2 * cfg_.n_kv_heads;
  pool_.ParallelFor(heads, [&](int64_t hb, int64_t he, int) {
    const int64_t b = hb * hd, e = he * hd;
    int64_t base = 0;
    for (int m = 0; m < 3; ++m) {
      const int64_t lo = std::max(b, base), hi = std::min(e, base + ws[m]->rows);
      if (lo < hi) MatmulRows(*ws[m], x, xq, n, ys[m], lo - base, hi - base);
      base += ws[m]->rows;
    }
    for (int j = 0; j < n; ++j) QkvEpilogue(L, j, static_cast<int>(hb), static_cast<int>(he));
  });
  return true;
}

void Transformer::MatmulGateUp(const LayerWeights& L, const float* x, const ActQ8& xq, int n) {
  const int64_t ffn = cfg_.ffn_dim;
  if (!fuse_ffn_) {
    Matmul(L.w_gate, x, xq, n, hb_);
    Matmul(L.w_up, x, xq, n, hb2_);
    glu_(hb_, hb2_, static_cast<int64_t>(n) * ffn);
    return;
  }
  // Each thread computes the same row slice of gate and up, then SwiGLU on that slice while it
  // is still in cache: one fork/join, no separate pass over the hidden activations.
  const int64_t u = std::max(RowUnit(L.w_gate), RowUnit(L.w_up));  // ffn % u == 0 (layout rule)
  pool_.ParallelFor(ffn / u, [&](int64_t b, int64_t e, int) {
    b *= u;
    e *= u;
    MatmulRows(L.w_gate, x, xq, n, hb_, b, e);
    MatmulRows(L.w_up, x, xq, n, hb2_, b, e);
    for (int j = 0; j < n; ++j) glu_(hb_ + j * ffn + b, hb2_ + j * ffn + b, e - b);
  });
}

}  // namespace paddock
