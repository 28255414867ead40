// kernels/simd/gemm_float.cpp: float activations: the register-tiled GEMM for F32 / F16 / BF16
// weights (the one-token GEMV is the same tile), and the float-activation GEMVs of the
// quantized block formats (weights unpacked in registers, FMA; per-block affine terms from
// per-block sums of x computed once per call). Compiled once per ISA.
#include "kernels/simd/common.h"

namespace paddock {
namespace PADDOCK_ISA_NS {
namespace {

// Float-activation GEMM for F32 / F16 / BF16 weights: R rows x T tokens of accumulators in
// registers, so each weight vector is loaded (and converted) once for T tokens and each
// activation vector once for R rows. Every (row, token) pair has one accumulator and the same
// operations in the same order whatever R and T are, so the one-token GEMV (this with T = 1)
// is bit-identical to the same token inside a batch.
template <GgmlType W>
inline VecF LoadWeights(const uint8_t* row, int64_t i) {
  if constexpr (W == GgmlType::kF32) {
    return Load(reinterpret_cast<const float*>(row) + i);
  } else if constexpr (W == GgmlType::kF16) {
    return LoadF16(reinterpret_cast<const uint16_t*>(row) + i);
  } else {
    return LoadBf16(reinterpret_cast<const uint16_t*>(row) + i);
  }
}
template <GgmlType W>
inline float WeightAt(const uint8_t* row, int64_t i) {
  if constexpr (W == GgmlType::kF32) {
    return reinterpret_cast<const float*>(row)[i];
  } else if constexpr (W == GgmlType::kF16) {
    return Fp16ToFp32(reinterpret_cast<const uint16_t*>(row)[i]);
  } else {
    return Bf16ToFp32(reinterpret_cast<const uint16_t*>(row)[i]);
  }
}

template <GgmlType W, int R, int T>
void FloatTile(const uint8_t* w, size_t rb, int64_t cols, const float* x, float* y, int64_t ldy) {
  VecF acc[R][T];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) acc[r][t] = Zero();
  }
  int64_t i = 0;
  for (; i + kLanes <= cols; i += kLanes) {
    VecF xv[T];
    for (int t = 0; t < T; ++t) xv[t] = Load(x + t * cols + i);
    for (int r = 0; r < R; ++r) {
      const VecF wv = LoadWeights<W>(w + r * rb, i);
      for (int t = 0; t < T; ++t) acc[r][t] = Fma(wv, xv[t], acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      float s = ReduceAdd(acc[r][t]);
      for (int64_t j = i; j < cols; ++j) s += WeightAt<W>(w + r * rb, j) * x[t * cols + j];
      y[t * ldy + r] = s;
    }
  }
}

template <GgmlType W, int T>
void FloatRows(const uint8_t* w, size_t rb, int64_t cols, int64_t rows, const float* x, float* y,
               int64_t ldy) {
  int64_t r = 0;
  for (; r + kFloatRows <= rows; r += kFloatRows)
    FloatTile<W, kFloatRows, T>(w + r * rb, rb, cols, x, y + r, ldy);
  for (; r < rows; ++r) FloatTile<W, 1, T>(w + r * rb, rb, cols, x, y + r, ldy);
}

template <GgmlType W>
void GemmFloat(const void* w, size_t rb, int64_t cols, int64_t rows, const float* x, int n_tok,
               float* y, int64_t ldy) {
  const auto* wb = static_cast<const uint8_t*>(w);
  for (int t0 = 0; t0 < n_tok; t0 += kFloatTokens) {
    const float* xt = x + static_cast<int64_t>(t0) * cols;
    float* yt = y + static_cast<int64_t>(t0) * ldy;
    switch (n_tok - t0 < kFloatTokens ? n_tok - t0 : kFloatTokens) {
      case 6:
        FloatRows<W, 6>(wb, rb, cols, rows, xt, yt, ldy);
        break;
      case 5:
        FloatRows<W, 5>(wb, rb, cols, rows, xt, yt, ldy);
        break;
      case 4:
        FloatRows<W, 4>(wb, rb, cols, rows, xt, yt, ldy);
        break;
      case 3:
        FloatRows<W, 3>(wb, rb, cols, rows, xt, yt, ldy);
        break;
      case 2:
        FloatRows<W, 2>(wb, rb, cols, rows, xt, yt, ldy);
        break;
      default:
        FloatRows<W, 1>(wb, rb, cols, rows, xt, yt, ldy);
        break;
    }
  }
}

template <GgmlType W>
void GemvFloat(const void* w, size_t rb, int64_t cols, int64_t rows, const float* x, float* y) {
  GemmFloat<W>(w, rb, cols, rows, x, 1, y, rows);
}

void GemvQ8_0(const void* w, size_t rb, int64_t cols, int64_t rows, const float* x, float* y) {
  const int64_t nb = cols / kQK;
  for (int64_t r = 0; r < rows; ++r) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(static_cast<const uint8_t*>(w) + r * rb);
    VecF acc = Zero();
    for (int64_t i = 0; i < nb; ++i) {
      const VecF part = DotBlock32(b[i].qs, x + i * kQK, Zero());
      acc = Fma(part, Set1(Fp16ToFp32(b[i].d)), acc);
    }
    y[r] = ReduceAdd(acc);
  }
}

// Legacy 4/5-bit formats: value = q * d + m, where m = -offset * d (Q4_0, Q5_0) or stored.
template <class Block, bool kFive, bool kMin>
void GemvQLegacy(const void* w, size_t rb, int64_t cols, int64_t rows, const float* x, float* y) {
  const int64_t nb = cols / kQK;
  float sums[kMaxBlockSums];
  BlockSums(x, cols, sums);
  for (int64_t r = 0; r < rows; ++r) {
    const auto* b = reinterpret_cast<const Block*>(static_cast<const uint8_t*>(w) + r * rb);
    VecF acc = Zero();
    float off = 0;
    for (int64_t i = 0; i < nb; ++i) {
      const uint8_t* qh = nullptr;
      if constexpr (kFive) qh = b[i].qh;
      const float d = Fp16ToFp32(b[i].d);
      acc = Fma(DotQ4Legacy(b[i].qs, qh, x + i * kQK), Set1(d), acc);
      if constexpr (kMin) {
        off += Fp16ToFp32(b[i].m) * sums[i];
      } else {
        off -= (kFive ? 16.0f : 8.0f) * d * sums[i];
      }
    }
    y[r] = ReduceAdd(acc) + off;
  }
}

// Q4_K / Q5_K: per 64-element chunk, low nibbles are one 32-element sub-block and high nibbles
// the next; value = d * sc * q - dmin * m.
template <class Block, bool kFive>
void GemvQxK(const void* w, size_t rb, int64_t cols, int64_t rows, const float* x, float* y) {
  const int64_t nb = cols / kQK_K;
  float sums[kMaxBlockSums];
  BlockSums(x, cols, sums);
  for (int64_t r = 0; r < rows; ++r) {
    const auto* b = reinterpret_cast<const Block*>(static_cast<const uint8_t*>(w) + r * rb);
    VecF acc = Zero();
    float off = 0;
    for (int64_t i = 0; i < nb; ++i) {
      const float d = Fp16ToFp32(b[i].d), dmin = Fp16ToFp32(b[i].dmin);
      const float* xb = x + i * kQK_K;
      for (int c = 0; c < 4; ++c) {
        int sc0, m0, sc1, m1;
        KQuantScaleMin(2 * c, b[i].scales, &sc0, &m0);
        KQuantScaleMin(2 * c + 1, b[i].scales, &sc1, &m1);
        VecF lo_acc = Zero(), hi_acc = Zero();
        const uint8_t* q = b[i].qs + 32 * c;
        for (int j = 0; j < 32; j += kLanes) {
          VecI lo = Bits(q + j, 0, 15), hi = Bits(q + j, 4, 15);
          if constexpr (kFive) {
            lo = OrI(lo, ShlV(Bits(b[i].qh + j, 2 * c, 1), SetI(4)));
            hi = OrI(hi, ShlV(Bits(b[i].qh + j, 2 * c + 1, 1), SetI(4)));
          }
          lo_acc = Fma(ToFloat(lo), Load(xb + 64 * c + j), lo_acc);
          hi_acc = Fma(ToFloat(hi), Load(xb + 64 * c + 32 + j), hi_acc);
        }
        acc = Fma(lo_acc, Set1(d * static_cast<float>(sc0)), acc);
        acc = Fma(hi_acc, Set1(d * static_cast<float>(sc1)), acc);
        off -= dmin * (static_cast<float>(m0) * sums[i * 8 + 2 * c] +
                       static_cast<float>(m1) * sums[i * 8 + 2 * c + 1]);
      }
    }
    y[r] = ReduceAdd(acc) + off;
  }
}

// Q6_K: 16-element sub-blocks with int8 scales; q = (4 low bits | 2 high bits << 4) - 32.
void GemvQ6_K(const void* w, size_t rb, int64_t cols, int64_t rows, const float* x, float* y) {
  const int64_t nb = cols / kQK_K;
  for (int64_t r = 0; r < rows; ++r) {
    const auto* b = reinterpret_cast<const BlockQ6_K*>(static_cast<const uint8_t*>(w) + r * rb);
    VecF acc = Zero();
    for (int64_t i = 0; i < nb; ++i) {
      const float d = Fp16ToFp32(b[i].d);
      for (int half = 0; half < 2; ++half) {
        const uint8_t* ql = b[i].ql + 64 * half;
        const uint8_t* qh = b[i].qh + 32 * half;
        const int8_t* sc = b[i].scales + 8 * half;
        const float* xb = x + i * kQK_K + 128 * half;
        for (int g = 0; g < 4; ++g) {  // element group g: 32 * g .. 32 * g + 31
          const uint8_t* lp = ql + ((g & 1) ? 32 : 0);
          const int lshift = g >= 2 ? 4 : 0;
          for (int s = 0; s < 2; ++s) {  // 16-element sub-block, scale sc[2 * g + s]
            VecF part = Zero();
            for (int j = 16 * s; j < 16 * s + 16; j += kLanes) {
              const VecI q = OrI(Bits(lp + j, lshift, 15), ShlV(Bits(qh + j, 2 * g, 3), SetI(4)));
              part = Fma(Sub(ToFloat(q), Set1(32.0f)), Load(xb + 32 * g + j), part);
            }
            acc = Fma(part, Set1(d * static_cast<float>(sc[2 * g + s])), acc);
          }
        }
      }
    }
    y[r] = ReduceAdd(acc);
  }
}

// ---- Q4_0R: Q4_0 re-laid-out at load with each row's scales in front (ggml_types.h) ----

// Float activations.
void GemvQ4_0R(const void* w, size_t rb, int64_t cols, int64_t rows, const float* x, float* y) {
  const int64_t nb = cols / kQK;
  float sums[kMaxBlockSums];
  BlockSums(x, cols, sums);
  for (int64_t r = 0; r < rows; ++r) {
    const auto* row = static_cast<const uint8_t*>(w) + r * rb;
    const auto* sc = reinterpret_cast<const uint16_t*>(row);
    VecF acc = Zero();
    float off = 0;
    for (int64_t b = 0; b < nb; ++b) {
      const float d = F16ToF32(sc[b]);
      acc = Fma(DotQ4Legacy(row + 2 * nb + 16 * b, nullptr, x + b * kQK), Set1(d), acc);
      off -= 8.0f * d * sums[b];
    }
    y[r] = ReduceAdd(acc) + off;
  }
}

// kQ8_0R, float activations.
void GemvQ8_0R(const void* w, size_t rb, int64_t cols, int64_t rows, const float* x, float* y) {
  const int64_t nb = cols / kQK;
  for (int64_t r = 0; r < rows; ++r) {
    const auto* row = static_cast<const uint8_t*>(w) + r * rb;
    const auto* sc = reinterpret_cast<const uint16_t*>(row);
    const auto* qs = reinterpret_cast<const int8_t*>(row + 2 * nb);
    VecF acc = Zero();
    for (int64_t b = 0; b < nb; ++b)
      acc = Fma(DotBlock32(qs + b * kQK, x + b * kQK, Zero()), Set1(F16ToF32(sc[b])), acc);
    y[r] = ReduceAdd(acc);
  }
}

}  // namespace

void SetFloatKernels(KernelTable* t) {
  t->gemv[static_cast<int>(GgmlType::kF32)] = GemvFloat<GgmlType::kF32>;
  t->gemv[static_cast<int>(GgmlType::kF16)] = GemvFloat<GgmlType::kF16>;
  t->gemv[static_cast<int>(GgmlType::kBF16)] = GemvFloat<GgmlType::kBF16>;
  t->gemm[static_cast<int>(GgmlType::kF32)] = GemmFloat<GgmlType::kF32>;
  t->gemm[static_cast<int>(GgmlType::kF16)] = GemmFloat<GgmlType::kF16>;
  t->gemm[static_cast<int>(GgmlType::kBF16)] = GemmFloat<GgmlType::kBF16>;
  t->gemv[static_cast<int>(GgmlType::kQ8_0)] = GemvQ8_0;
  t->gemv[static_cast<int>(GgmlType::kQ4_0)] = GemvQLegacy<BlockQ4_0, false, false>;
  t->gemv[static_cast<int>(GgmlType::kQ4_1)] = GemvQLegacy<BlockQ4_1, false, true>;
  t->gemv[static_cast<int>(GgmlType::kQ5_0)] = GemvQLegacy<BlockQ5_0, true, false>;
  t->gemv[static_cast<int>(GgmlType::kQ5_1)] = GemvQLegacy<BlockQ5_1, true, true>;
  t->gemv[static_cast<int>(GgmlType::kQ4_K)] = GemvQxK<BlockQ4_K, false>;
  t->gemv[static_cast<int>(GgmlType::kQ5_K)] = GemvQxK<BlockQ5_K, true>;
  t->gemv[static_cast<int>(GgmlType::kQ6_K)] = GemvQ6_K;
  t->gemv[static_cast<int>(GgmlType::kQ4_0R)] = GemvQ4_0R;
  t->gemv[static_cast<int>(GgmlType::kQ8_0R)] = GemvQ8_0R;
}

}  // namespace PADDOCK_ISA_NS
}  // namespace paddock
