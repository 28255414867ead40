// cpu/matmul.cpp: matrix multiplication dispatch: the int8 activation buffers, the kernel
// for a weight type (integer, BF16 dot or float; GEMV for one token, cache-blocked GEMM for
// several), threads split by the kernel table's row unit, and the fused Q/K/V and gate/up
// passes.
#include <algorithm>
#include <cstring>

#include "cpu/transformer.h"
#include "model/lora.h"

namespace paddock {

namespace {
// Float activations are re-read (4 bytes each) for every block: larger blocks for them.
constexpr size_t kFloatMatmulBlockBytes = 512 * 1024;
}  // namespace

bool Transformer::TakesInt8(const WeightTensor& w, int cols) const {
  return opt_.int8_activations && cols % kQK == 0 &&
         k_->gemv_q8[static_cast<int>(w.type)] != nullptr;
}

bool Transformer::TakesBf16(const WeightTensor& w, int cols, int n, bool prefill_ok) const {
  return prefill_ok && plan_.n_bf > 0 && n == n_step_ && act_bf_ != nullptr && TakesInt8(w, cols) &&
         k_->gemm_bf16_tiles[static_cast<int>(w.type)] != nullptr;
}

ActQ8 Transformer::QuantizeInput(const float* x, int n, int cols, const WeightTensor& w,
                                 bool prefill_ok, bool int8_too) {
  if (!TakesInt8(w, cols)) return {};
  const bool bf = TakesBf16(w, cols, n, prefill_ok);
  OpScope ps(this, ProfOp::kQuantizeAct);
  ForTokens(n, [&](int j) { QuantizeToken(x, j, n, cols, bf, int8_too); });
  return ActBuffers(n, bf);
}

void Transformer::QuantizeToken(const float* x, int j, int n, int cols, bool bf, bool int8_too) {
  const size_t r = static_cast<size_t>(j) * static_cast<size_t>(cols);
  // A prompt token: bf16 tiles for the weights with the bf16 GEMM, and int8 as well for any
  // weight sharing this input that has none (a k-quant mix's Q5_K or Q3_K attn_v).
  if (bf && plan_.bf[static_cast<size_t>(j)] != 0) {
    k_->pack_bf16_token(x + r, cols, plan_.bf_slot[static_cast<size_t>(j)], act_bf_);
    if (!int8_too) return;
  }
  k_->quantize_act(x + r, cols, act_qs_.get() + r, act_d_.get() + r / kQK, act_ds_.get() + r / kQK);
  if (PacksTiles(n) && j < n / kActTileTokens * kActTileTokens)
    k_->pack_act_token(ActBuffers(0), cols, j, act_tiles_.get(), act_tile_s_.get());
}

ActQ8 Transformer::ActBuffers(int n, bool bf) const {
  ActQ8 q;
  q.qs = act_qs_.get();
  q.d = act_d_.get();
  q.ds = act_ds_.get();
  if (bf) {
    q.bf = act_bf_;
    q.bf_rows = plan_.bf_rows.data();
    q.bf_tok = plan_.bf.data();
    q.bf_count = plan_.n_bf;
    q.int8_lead = n_int8_lead_;
  }
  if (PacksTiles(n)) {
    q.tiles = act_tiles_.get();
    q.tile_s = act_tile_s_.get();
    q.tile_count = n / kActTileTokens;
  }
  return q;
}

void Transformer::MatmulRows(const WeightTensor& w, const float* x, const ActQ8& xq, int n,
                             float* y, int64_t begin, int64_t end) {
  const GemvQ8Fn gemv_q8 = xq.qs != nullptr ? k_->gemv_q8[static_cast<int>(w.type)] : nullptr;
  const GemvFn gemv = k_->gemv[static_cast<int>(w.type)];
  // Float activations: the BF16 dot product for BF16 weights where enabled and present, else
  // the float GEMM of the type (null: a GEMV per token).
  const bool bf16_dot = gemv_q8 == nullptr && opt_.bf16_dot && w.type == GgmlType::kBF16 &&
                        k_->gemm_bf16_dot != nullptr;
  const GemmFn gemm = gemv_q8 != nullptr
                          ? nullptr
                          : (bf16_dot ? k_->gemm_bf16_dot : k_->gemm[static_cast<int>(w.type)]);
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
  // The step's prompt tokens on the bf16 tile GEMM, one call over the thread's rows (it blocks
  // them for L2 itself); the others (decode tokens of other sequences) as a step of their own
  // where they lead the step, else (generated tokens being recomputed after their prompt) one
  // GEMV each per row block below, as bit-identical as ever.
  const GemmBf16TilesFn bf16 =
      xq.bf_count > 0 ? k_->gemm_bf16_tiles[static_cast<int>(w.type)] : nullptr;
  const uint8_t* done = nullptr;  // tokens the bf16 GEMM computed
  if (bf16 != nullptr) {
    bf16(w.data + static_cast<size_t>(begin) * w.row_bytes, w.row_bytes, w.cols, end - begin, xq.bf,
         xq.bf_count, xq.bf_rows, y + begin, w.rows);
    if (xq.bf_count == n) return;
    if (xq.int8_lead == n - xq.bf_count) {
      ActQ8 lead = xq;
      lead.bf_count = 0;
      MatmulRows(w, x, lead, xq.int8_lead, y, begin, end);
      return;
    }
    done = xq.bf_tok;
  }
  // One token: the GEMV (bit-identical to the GEMM's result for that token, so a sequence's
  // results do not depend on its batch-mates; a kernel test holds both to that).
  if (n == 1) {
    run(w.data + static_cast<size_t>(begin) * w.row_bytes, end - begin, 0, y + begin);
    return;
  }
  // Several tokens: walk the rows in blocks small enough to stay in cache and run every token
  // over each block (an integer or float GEMM where the type has one, else a GEMV per token), so
  // each weight byte comes from memory once per chunk.
  const GemmQ8Fn gemm_q8 = gemv_q8 != nullptr ? k_->gemm_q8[static_cast<int>(w.type)] : nullptr;
  const int64_t unit = RowUnit(w);
  // Float activations are 4 bytes per element (int8: 1) and every token's must be re-read for
  // each block: larger blocks for them, so that traffic stays small next to the weights'.
  const size_t block_bytes = gemv_q8 != nullptr ? block_bytes_ : kFloatMatmulBlockBytes;
  const int64_t block =
      std::max<int64_t>(1, static_cast<int64_t>(block_bytes / w.row_bytes) / unit) * unit;
  for (int64_t r0 = begin; r0 < end; r0 += block) {
    const int64_t nr = std::min(block, end - r0);
    const uint8_t* wr = w.data + static_cast<size_t>(r0) * w.row_bytes;
    if (done != nullptr) {
      for (int j = 0; j < n; ++j)
        if (done[j] == 0) run(wr, nr, j, y + static_cast<size_t>(j) * w.rows + r0);
    } else if (gemm_q8 != nullptr) {
      gemm_q8(wr, w.row_bytes, w.cols, nr, xq, n, y + r0, w.rows);
    } else if (gemm != nullptr) {
      gemm(wr, w.row_bytes, w.cols, nr, x, n, y + r0, w.rows);
    } else {
      for (int j = 0; j < n; ++j) run(wr, nr, j, y + static_cast<size_t>(j) * w.rows + r0);
    }
  }
}

// Rows are split between threads in the kernel's row unit (whole 16-row groups for the
// interleaved layouts): the kernel table says, not the file format.
int64_t Transformer::RowUnit(const WeightTensor& w) const {
  return k_->row_unit[static_cast<int>(w.type)];
}

void Transformer::Matmul(const WeightTensor& w, const float* x, const ActQ8& xq, int n, float* y) {
  const int64_t u = RowUnit(w);
  // LoRA: the rank vectors first, then each thread adds the products to the outputs it just
  // computed (no pass of its own: a fork/join per matrix cost a quarter of decode's time).
  const WeightTensor* ws[1] = {&w};
  const bool lora = plan_.any_lora && lora_.Down(plan_.lora.data(), ws, 1, x, n);
  pool_.ParallelFor(w.rows / u, [&](int64_t b, int64_t e, int) {
    MatmulRows(w, x, xq, n, y, b * u, e * u);
    if (lora) lora_.Up(0, w, n, y, b * u, e * u);
  });
}

bool Transformer::MatmulQkv(const LayerOp& op, const float* x, const ActQ8& xq, int n) {
  const WeightTensor& wq = *op.mat[0];
  if (op.kv_layer != op.layer) {  // another layer's KV is read: the queries alone
    Matmul(wq, x, xq, n, a_.q);
    return false;
  }
  const WeightTensor& wk = *op.mat[1];
  if (op.mat[2] == nullptr) {  // V = K's projection (its own norm follows, no RoPE)
    Matmul(wq, x, xq, n, a_.q);
    Matmul(wk, x, xq, n, a_.kv_k);
    std::memcpy(a_.kv_v, a_.kv_k, sizeof(float) * static_cast<size_t>(n) * op.kv_dim());
    return false;
  }
  const WeightTensor& wv = *op.mat[2];
  // The fused pass is cut into whole heads, so each thread finishes its heads (bias, QK-norm,
  // RoPE) while they are in cache; a head must hold whole 16-row groups of interleaved weights.
  const int hd = op.head_dim;
  const int64_t u = std::max({RowUnit(wq), RowUnit(wk), RowUnit(wv)});
  // Whole-row QK-norm (OLMoE) needs every head of a row before the epilogue: unfused.
  if (!opt_.fuse_qkv || hd % u != 0 || op.Has(OpFeature::kQkNormRows)) {
    Matmul(wq, x, xq, n, a_.q);
    Matmul(wk, x, xq, n, a_.kv_k);
    Matmul(wv, x, xq, n, a_.kv_v);
    return false;
  }
  const WeightTensor* ws[3] = {&wq, &wk, &wv};
  float* ys[3] = {a_.q, a_.kv_k, a_.kv_v};
  // LoRA: each projection's product added to the rows just computed, before the epilogue.
  const bool lora = plan_.any_lora && lora_.Down(plan_.lora.data(), ws, 3, x, n);
  const int heads = op.n_heads + 2 * op.n_kv_heads;
  pool_.ParallelFor(heads, [&](int64_t hb, int64_t he, int) {
    const int64_t b = hb * hd, e = he * hd;
    int64_t base = 0;
    for (int m = 0; m < 3; ++m) {
      const int64_t lo = std::max(b, base), hi = std::min(e, base + ws[m]->rows);
      if (lo < hi) {
        MatmulRows(*ws[m], x, xq, n, ys[m], lo - base, hi - base);
        if (lora) lora_.Up(m, *ws[m], n, ys[m], lo - base, hi - base);
      }
      base += ws[m]->rows;
    }
    for (int j = 0; j < n; ++j) QkvEpilogue(op, j, static_cast<int>(hb), static_cast<int>(he));
  });
  return true;
}

void Transformer::MatmulGateUp(const WeightTensor& gate, const WeightTensor& up, const float* x,
                               const ActQ8& xq, int n) {
  const int64_t ffn = gate.rows;
  if (!opt_.fuse_ffn) {
    Matmul(gate, x, xq, n, a_.hb);
    Matmul(up, x, xq, n, a_.hb2);
    glu_(a_.hb, a_.hb2, static_cast<int64_t>(n) * ffn);
    return;
  }
  // Each thread computes the same row slice of gate and up, then SwiGLU on that slice while it
  // is still in cache: one fork/join, no separate pass over the hidden activations.
  const int64_t u = std::max(RowUnit(gate), RowUnit(up));  // ffn % u == 0 (layout rule)
  // LoRA: gate's and up's products added to the slice before the GLU.
  const WeightTensor* ws[2] = {&gate, &up};
  const bool lora = plan_.any_lora && lora_.Down(plan_.lora.data(), ws, 2, x, n);
  pool_.ParallelFor(ffn / u, [&](int64_t b, int64_t e, int) {
    b *= u;
    e *= u;
    MatmulRows(gate, x, xq, n, a_.hb, b, e);
    MatmulRows(up, x, xq, n, a_.hb2, b, e);
    if (lora) {
      lora_.Up(0, gate, n, a_.hb, b, e);
      lora_.Up(1, up, n, a_.hb2, b, e);
    }
    for (int j = 0; j < n; ++j) glu_(a_.hb + j * ffn + b, a_.hb2 + j * ffn + b, e - b);
  });
}

}  // namespace paddock
