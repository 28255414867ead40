// cpu/attention.cpp: the attention step of a layer: the Q/K/V epilogue (bias, QK-norm,
// RoPE), the KV store, and attention itself: tiled (tasks planned over sequences, KV heads
// and query rows, split over positions when there are fewer tasks than threads) or two-pass.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/transformer.h"

namespace paddock {

void Transformer::QkvEpilogue(const LayerOp& op, int j, int h0, int h1) {
  const bool local = op.rope.local;
  const float* cos = local ? a_.cos_local : a_.cos;
  const float* sin = local ? a_.sin_local : a_.sin;
  const int hd = op.head_dim, nq = op.n_heads, nkv = op.n_kv_heads;
  const int half = op.rope.dims / 2;
  const bool half_split = op.rope.style == RopeStyle::kHalfSplit;
  const bool per_head_norm = !op.Has(OpFeature::kQkNormRows);
  const int qd = op.q_dim(), kvd = op.kv_dim();
  // A layer reading another's KV computes its queries alone.
  const int nk = op.kv_layer == op.layer ? nkv : 0;
  for (int h = h0; h < h1 && h < nq + 2 * nk; ++h) {
    if (h < nq + nk) {  // a query or key head
      const bool is_q = h < nq;
      const int hh = is_q ? h : h - nq;
      float* x = (is_q ? a_.q + j * qd : a_.kv_k + j * kvd) + hh * hd;
      const float* bias = op.bias[is_q ? 0 : 1];
      if (bias != nullptr) k_->add(x, bias + hh * hd, hd);
      const float* norm = !per_head_norm ? nullptr : is_q ? op.q_norm : op.k_norm;
      if (norm != nullptr) k_->rmsnorm(x, x, norm, hd, op.norm.eps);
      if (half > 0) k_->rope(x, 1, hd, op.rope.dims, cos + j * half, sin + j * half, half_split);
    } else {
      float* v = a_.kv_v + j * kvd + (h - nq - nk) * hd;
      if (op.bias[2] != nullptr) k_->add(v, op.bias[2] + (h - nq - nk) * hd, hd);
      if (op.v_norm != nullptr) k_->rmsnorm(v, v, op.v_norm, hd, op.norm.eps);
    }
  }
}

// Token j's K and V rows into its sequence's cache at its position (threads over tokens: each
// token's rows are its own).
void Transformer::StoreKv(const LayerOp& op, int n) {
  const int l = op.layer, hd = op.head_dim, nkv = op.n_kv_heads, kvd = op.kv_dim();
  ForTokens(n, [&](int j) {
    const KvView& kv = *plan_.view[static_cast<size_t>(j)];
    const KvLayerView& cache = kv.layers[l];
    const int pos = plan_.pos[static_cast<size_t>(j)];
    k_->kv_store[static_cast<int>(cache.k_type)](kv.K(l, pos), a_.kv_k + j * kvd, nkv, hd);
    k_->kv_store[static_cast<int>(cache.v_type)](kv.V(l, pos), a_.kv_v + j * kvd, nkv, hd);
  });
}

// Tiled attention: plan the tasks, run them over the threads, merge split parts.
void Transformer::AttentionTiled(const LayerOp& op, int n) {
  const int parts = PlanAttention(op, n);
  pool_.ParallelFor(static_cast<int64_t>(attn_tasks_.size()),
                    [&](int64_t begin, int64_t end, int t) {
                      for (int64_t idx = begin; idx < end; ++idx)
                        AttendTask(op, static_cast<size_t>(idx), t);
                    });
  if (parts > 1) MergeAttentionParts(op, parts);
}

// One task per run of tokens of one sequence, KV head and up to kAttnMaxRows of its (token,
// head) query rows: the rows share every K/V tile. With fewer tasks than threads over long ranges
// (decode, few KV heads), each task's positions are split in `parts` (returned) so every
// thread works; the partial results are merged after.
int Transformer::PlanAttention(const LayerOp& op, int n) {
  const int nkv = op.n_kv_heads;
  const int group = op.n_heads / op.n_kv_heads;
  const int threads = pool_.size();
  // fn(j0, rows) for each run of tokens [j0, ...) of one sequence, with its query rows.
  auto for_each_run = [&](auto fn) {
    for (int j0 = 0; j0 < n;) {
      int j1 = j0 + 1;
      while (j1 < n && plan_.view[static_cast<size_t>(j1)] == plan_.view[static_cast<size_t>(j0)])
        ++j1;
      fn(j0, (j1 - j0) * group);
      j0 = j1;
    }
  };
  // Rows per task: kAttnMaxRows (each K/V tile read once for them all), halved while that leaves
  // fewer than two tasks per thread.
  auto tasks_of = [&](int chunk) {
    int count = 0;
    for_each_run([&](int, int rows) { count += nkv * ((rows + chunk - 1) / chunk); });
    return count;
  };
  int chunk = kAttnMaxRows;
  while (chunk > 16 && tasks_of(chunk) < 2 * threads) chunk /= 2;
  attn_tasks_.clear();
  for_each_run([&](int j0, int rows) {
    for (int g = 0; g < nkv; ++g) {
      for (int first = 0; first < rows; first += chunk) {
        attn_tasks_.push_back({j0, g, first, std::min(chunk, rows - first)});
      }
    }
  });
  const int n_base = static_cast<int>(attn_tasks_.size());
  int parts = 1;
  if (n_base < threads && plan_.pos[static_cast<size_t>(n - 1)] + 1 >= 4 * kAttnTile) {
    parts = std::min({(threads + n_base - 1) / n_base, 2 * threads / n_base, 2 * kAttnMaxSplit});
  }
  if (parts > 1) {
    attn_tasks_.resize(static_cast<size_t>(n_base * parts));  // within the planned capacity
    for (int i = n_base - 1; i >= 0; --i) {                   // expand in place, back to front
      const AttnTask base = attn_tasks_[static_cast<size_t>(i)];
      for (int p = 0; p < parts; ++p) {
        AttnTask t = base;
        t.part = p;
        t.parts = parts;
        attn_tasks_[static_cast<size_t>(i * parts + p)] = t;
      }
    }
  }
  return parts;
}

namespace {

// A layer's keys or values as the attention kernel reads them: rows through the block table.
KvRowsRef KvRows(const KvView& kv, int l, bool v) {
  const KvLayerView& L = kv.layers[l];
  KvRowsRef r;
  r.base = v ? kv.VBase(l) : kv.KBase(l);
  r.row_bytes = v ? L.v_row_bytes : L.k_row_bytes;
  r.type = v ? L.v_type : L.k_type;
  r.table = kv.Table(l);
  r.block_size = kv.block_size;
  return r;
}

// Part `part` of `parts` of the positions the rows cover together: each row's [lo, hi)
// narrowed to it (possibly empty).
void NarrowToPart(int part, int parts, int count, int* lo, int* hi) {
  int t_begin = lo[0], t_end = hi[0];
  for (int r = 1; r < count; ++r) {
    t_begin = std::min(t_begin, lo[r]);
    t_end = std::max(t_end, hi[r]);
  }
  const int c0 = t_begin + (t_end - t_begin) * part / parts;
  const int c1 = t_begin + (t_end - t_begin) * (part + 1) / parts;
  for (int r = 0; r < count; ++r) {
    lo[r] = std::max(lo[r], c0);
    hi[r] = std::max(lo[r], std::min(hi[r], c1));
  }
}

}  // namespace

// Task idx on thread t: its query rows (rotated where keys are stored rotated), their
// causal / window ranges, and the tiled kernel; a split task writes its partial slot.
void Transformer::AttendTask(const LayerOp& op, size_t idx, int t) {
  const int l = op.kv_layer;
  const int hd = op.head_dim, qd = op.q_dim(), nkv = op.n_kv_heads;
  const int group = op.n_heads / op.n_kv_heads;
  const float scale = op.scale, softcap = op.softcap;
  float* scratch = a_.attn_scratch + static_cast<size_t>(t) * AttnScratchStride();
  float* qrot = scratch + AttendScratchFloats(hd);
  const float* q_rows[kAttnMaxRows];
  float* out_rows[kAttnMaxRows];
  int lo[kAttnMaxRows], hi[kAttnMaxRows];
  const AttnTask& tk = attn_tasks_[idx];
  const KvView& kv = *plan_.view[static_cast<size_t>(tk.j0)];
  const KvLayerView& cache = kv.layers[l];
  const int window = op.windowed ? kv.window : 0;
  const KvRowsRef kr = KvRows(kv, l, false);
  const KvRowsRef vr = KvRows(kv, l, true);
  const bool rot_k = KvRotated(cache.k_type, hd);
  for (int r = 0; r < tk.count; ++r) {
    const int p = tk.first + r;
    const int j = tk.j0 + p / group, h = tk.g * group + p % group;
    const int pos = plan_.pos[static_cast<size_t>(j)];
    hi[r] = std::max(pos + 1, plan_.attend_end[static_cast<size_t>(j)]);
    lo[r] = window > 0 ? std::max(0, pos - window + 1) : 0;
    const float* q = a_.q + j * qd + h * hd;
    if (rot_k) {  // keys are stored rotated: (Hq).(Hk) = q.k
      float* qr = qrot + r * hd;
      std::memcpy(qr, q, sizeof(float) * hd);
      Hadamard(qr, hd);
      q = qr;
    }
    q_rows[r] = q;
    out_rows[r] = a_.att + j * qd + h * hd;
  }
  const float* sinks = op.sinks;
  if (tk.parts == 1 && sinks != nullptr) {
    // Attention sinks: the rows unnormalized into this thread's partial slot (free when no task
    // is split), then normalized with the sink's logit in the denominator.
    float* slot = a_.attn_part + static_cast<size_t>(t) * AttnPartStride();
    float* ml = slot + static_cast<size_t>(kAttnMaxRows) * hd;
    float* dst[kAttnMaxRows];
    for (int r = 0; r < tk.count; ++r) {
      dst[r] = out_rows[r];
      out_rows[r] = slot + static_cast<size_t>(r) * hd;
    }
    k_->attend_rows(q_rows, out_rows, tk.count, lo, hi, kr, vr, tk.g, nkv, hd, scale, softcap,
                    scratch, ml);
    for (int r = 0; r < tk.count; ++r) {
      const float* part = out_rows[r];
      const float* pml = ml + 2 * r;
      const int h = tk.g * group + (tk.first + r) % group;
      MergeAttention(&part, &pml, 1, hd, dst[r], sinks[h]);
      if (KvRotated(cache.v_type, hd)) Hadamard(dst[r], hd);
    }
    return;
  }
  if (tk.parts == 1) {
    k_->attend_rows(q_rows, out_rows, tk.count, lo, hi, kr, vr, tk.g, nkv, hd, scale, softcap,
                    scratch, nullptr);
    if (KvRotated(cache.v_type, hd)) {  // values are stored rotated: rotate the sums back
      for (int r = 0; r < tk.count; ++r) Hadamard(out_rows[r], hd);
    }
    return;
  }
  // This part's share of the positions, into its partial slot.
  NarrowToPart(tk.part, tk.parts, tk.count, lo, hi);
  float* slot = a_.attn_part + idx * AttnPartStride();
  for (int r = 0; r < tk.count; ++r) out_rows[r] = slot + static_cast<size_t>(r) * hd;
  k_->attend_rows(q_rows, out_rows, tk.count, lo, hi, kr, vr, tk.g, nkv, hd, scale, softcap,
                  scratch, slot + static_cast<size_t>(kAttnMaxRows) * hd);
}

// Each split task's parts merged row by row (MergeAttention) into a_.att.
void Transformer::MergeAttentionParts(const LayerOp& op, int parts) {
  const int l = op.kv_layer;
  const int hd = op.head_dim, qd = op.q_dim();
  const int group = op.n_heads / op.n_kv_heads;
  const int n_base = static_cast<int>(attn_tasks_.size()) / parts;
  for (int i = 0; i < n_base; ++i) {
    const AttnTask& tk = attn_tasks_[static_cast<size_t>(i * parts)];
    const KvLayerView& cache = plan_.view[static_cast<size_t>(tk.j0)]->layers[l];
    for (int r = 0; r < tk.count; ++r) {
      const float* outs[2 * kAttnMaxSplit];
      const float* mls[2 * kAttnMaxSplit];
      for (int p = 0; p < parts; ++p) {
        const float* slot = a_.attn_part + static_cast<size_t>(i * parts + p) * AttnPartStride();
        outs[p] = slot + static_cast<size_t>(r) * hd;
        mls[p] = slot + static_cast<size_t>(kAttnMaxRows) * hd + 2 * r;
      }
      const int pidx = tk.first + r;
      const int j = tk.j0 + pidx / group, h = tk.g * group + pidx % group;
      float* out = a_.att + j * qd + h * hd;
      const float* sinks = op.sinks;
      MergeAttention(outs, mls, parts, hd, out, sinks != nullptr ? sinks[h] : -1e30f);
      if (KvRotated(cache.v_type, hd)) Hadamard(out, hd);
    }
  }
}

void Transformer::Attention(const LayerOp& op, int n) {
  if (opt_.fuse_attn) {
    AttentionTiled(op, n);
    return;
  }
  const int l = op.kv_layer;
  const int hd = op.head_dim, qd = op.q_dim(), nkv = op.n_kv_heads;
  const int group = op.n_heads / op.n_kv_heads;
  const float scale = op.scale, softcap = op.softcap;
  const float* sinks = op.sinks;
  auto task = [&](int64_t begin, int64_t end, int t) {
    float* scores = a_.scores + static_cast<size_t>(t) * ctx_;
    float* qrot = a_.qrot + static_cast<size_t>(t) * hd;
    for (int64_t idx = begin; idx < end; ++idx) {
      const int j = static_cast<int>(idx / op.n_heads), h = static_cast<int>(idx % op.n_heads);
      const KvView& kv = *plan_.view[static_cast<size_t>(j)];
      const KvLayerView& cache = kv.layers[l];
      const auto kdot = k_->kv_dot[static_cast<int>(cache.k_type)];
      const auto vaxpy = k_->kv_axpy[static_cast<int>(cache.v_type)];
      const bool rot_k = KvRotated(cache.k_type, hd), rot_v = KvRotated(cache.v_type, hd);
      const int window = op.windowed ? kv.window : 0;
      const int p = plan_.pos[static_cast<size_t>(j)];
      const int start = window > 0 ? std::max(0, p - window + 1) : 0;
      const float* q = a_.q + j * qd + h * hd;
      if (rot_k) {  // keys are stored rotated: (Hq).(Hk) = q.k
        std::memcpy(qrot, q, sizeof(float) * hd);
        Hadamard(qrot, hd);
        q = qrot;
      }
      const int g = h / group;
      const int len = p - start + 1;
      for (int s = 0; s < len; ++s) scores[s] = kdot(q, kv.K(l, start + s), g, nkv, hd) * scale;
      if (softcap > 0) {
        for (int s = 0; s < len; ++s) scores[s] = softcap * std::tanh(scores[s] / softcap);
      }
      if (sinks == nullptr) {
        k_->softmax(scores, len);
      } else {  // the sink's logit joins the denominator, with no value of its own
        float mx = sinks[h];
        for (int s = 0; s < len; ++s) mx = std::max(mx, scores[s]);
        double sum = std::exp(static_cast<double>(sinks[h] - mx));
        for (int s = 0; s < len; ++s) sum += scores[s] = std::exp(scores[s] - mx);
        const float inv = static_cast<float>(1.0 / sum);
        for (int s = 0; s < len; ++s) scores[s] *= inv;
      }
      float* out = a_.att + j * qd + h * hd;
      std::memset(out, 0, sizeof(float) * hd);
      for (int s = 0; s < len; ++s) vaxpy(out, scores[s], kv.V(l, start + s), g, nkv, hd);
      if (rot_v) Hadamard(out, hd);  // values are stored rotated: rotate the sum back
    }
  };
  pool_.ParallelFor(static_cast<int64_t>(n) * op.n_heads, task);
}

}  // namespace paddock
