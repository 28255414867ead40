// kernels/simd/gemm_int8_neon.cpp: int8 activations on NEON (gemm_int8.cpp's AArch64 twin):
// their quantization, the integer peak probe, and the integer GEMV of the file block layouts
// (Q8_0, Q4_0, Q4_K, Q6_K and the Q4_0R / Q8_0R row layouts; kept for --no-relayout: the
// interleaved layouts are gemm_x16.cpp). A 32-element block is two 16-byte registers; the dot
// products are vec_neon.h's (SDOT, USDOT, or 16-bit products on ARMv8.0), exact at every level.
// Several tokens run a GEMV each (the interleaved layouts carry the prefill).
#include "kernels/simd/common.h"

namespace paddock {
namespace PADDOCK_ISA_NS {
namespace {

// Identical bytes to every other table: d = amax / 127, q = round-to-nearest-even(x / d).
void QuantizeAct(const float* x, int64_t n, int8_t* qs, float* d, float* ds) {
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* xb = x + b * kQK;
    float32x4_t m = vdupq_n_f32(0.0f);
    for (int i = 0; i < kQK; i += 4) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(xb + i)));
    const float amax = vmaxvq_f32(m);
    const float scale = amax / 127.0f;
    const float id = scale > 0 ? 1.0f / scale : 0.0f;
    int32x4_t acc = vdupq_n_s32(0);
    for (int i = 0; i < kQK; i += 8) {
      const int32x4_t q0 = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(xb + i), id));
      const int32x4_t q1 = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(xb + i + 4), id));
      acc = vaddq_s32(acc, vaddq_s32(q0, q1));
      const int16x8_t q16 = vcombine_s16(vqmovn_s32(q0), vqmovn_s32(q1));
      vst1_s8(qs + b * kQK + i, vqmovn_s16(q16));
    }
    d[b] = ActScale(scale);
    ds[b] = d[b] * static_cast<float>(vaddvq_s32(acc));
  }
}

inline VecI Bytes16(const void* p) {
  return LoadRaw(static_cast<const uint8_t*>(p));
}
// The signed dot product of 32 int8 weights with a 32-byte activation block.
inline VecI DotQ8Block(const int8_t* w, const int8_t* x) {
  return DotS8S8(DotS8S8(ZeroI(), Bytes16(w), Bytes16(x)), Bytes16(w + 16), Bytes16(x + 16));
}
// A Q4_0 block's 16 nibble bytes (low nibbles: elements 0..15, high: 16..31) against its
// activations, the quants unsigned (0..15).
inline VecI DotQ4Block(const uint8_t* qs, const int8_t* x) {
  const VecI raw = Bytes16(qs), m4 = Set1I8(15);
  return DotU8S8(DotU8S8(ZeroI(), AndI(raw, m4), Bytes16(x)), AndI(Srl16(raw, 4), m4),
                 Bytes16(x + 16));
}

void GemvQ8Q8_0(const void* w, size_t rb, int64_t cols, int64_t rows, const ActQ8& x, float* y) {
  const int64_t nb = cols / kQK;
  for (int64_t r = 0; r < rows; ++r) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(static_cast<const uint8_t*>(w) + r * rb);
    VecF acc = Zero();
    for (int64_t i = 0; i < nb; ++i)
      acc =
          Fma(ToFloat(DotQ8Block(b[i].qs, x.qs + i * kQK)), Set1(Fp16ToFp32(b[i].d) * x.d[i]), acc);
    y[r] = ReduceAdd(acc);
  }
}

// value = (q - 8) * d_w: sum = d_w * d_x * dot(q, x) - 8 * d_w * (d_x * sum(x)).
void GemvQ8Q4_0(const void* w, size_t rb, int64_t cols, int64_t rows, const ActQ8& x, float* y) {
  const int64_t nb = cols / kQK;
  float dw[kMaxBlockSums];  // the row's scales as floats
  for (int64_t r = 0; r < rows; ++r) {
    const auto* b = reinterpret_cast<const BlockQ4_0*>(static_cast<const uint8_t*>(w) + r * rb);
    VecF acc = Zero();
    for (int64_t i = 0; i < nb; ++i) {
      dw[i] = Fp16ToFp32(b[i].d);
      acc = Fma(ToFloat(DotQ4Block(b[i].qs, x.qs + i * kQK)), Set1(dw[i] * x.d[i]), acc);
    }
    y[r] = ReduceAdd(acc) - 8.0f * Dot(dw, x.ds, nb);  // the -8 zero point
  }
}

// Q4_K with int8 activations (see the reference): two 32-element sub-blocks per 32 bytes of
// quants (low nibbles, then high), each an integer dot with its activation block.
void GemvQ8Q4_K(const void* w, size_t rb, int64_t cols, int64_t rows, const ActQ8& x, float* y) {
  const int64_t nsb = cols / kQK_K;
  const VecI m4 = Set1I8(15);
  for (int64_t r = 0; r < rows; ++r) {
    const auto* blk = reinterpret_cast<const BlockQ4_K*>(static_cast<const uint8_t*>(w) + r * rb);
    VecF acc = Zero();
    float corr = 0;
    for (int64_t i = 0; i < nsb; ++i) {
      const float d = Fp16ToFp32(blk[i].d), dmin = Fp16ToFp32(blk[i].dmin);
      for (int c = 0; c < 4; ++c) {
        int sc0, m0, sc1, m1;
        KQuantScaleMin(2 * c, blk[i].scales, &sc0, &m0);
        KQuantScaleMin(2 * c + 1, blk[i].scales, &sc1, &m1);
        const int64_t b0 = i * 8 + 2 * c;
        const uint8_t* q = blk[i].qs + 32 * c;
        const int8_t* x0 = x.qs + b0 * kQK;
        const VecI r0 = Bytes16(q), r1 = Bytes16(q + 16);
        const VecI d0 =
            DotU8S8(DotU8S8(ZeroI(), AndI(r0, m4), Bytes16(x0)), AndI(r1, m4), Bytes16(x0 + 16));
        const VecI d1 = DotU8S8(DotU8S8(ZeroI(), AndI(Srl16(r0, 4), m4), Bytes16(x0 + kQK)),
                                AndI(Srl16(r1, 4), m4), Bytes16(x0 + kQK + 16));
        acc = Fma(ToFloat(d0), Set1(d * static_cast<float>(sc0) * x.d[b0]), acc);
        acc = Fma(ToFloat(d1), Set1(d * static_cast<float>(sc1) * x.d[b0 + 1]), acc);
        corr += dmin * (static_cast<float>(m0) * x.ds[b0] + static_cast<float>(m1) * x.ds[b0 + 1]);
      }
    }
    y[r] = ReduceAdd(acc) - corr;
  }
}

// Q6_K with int8 activations (see the reference). Per 16 elements: the 6-bit quants rebuilt
// unsigned (0..63) in a register, dotted with the activations, less 32 x their sum, scaled by
// the 16 elements' sub-block scale.
void GemvQ8Q6_K(const void* w, size_t rb, int64_t cols, int64_t rows, const ActQ8& x, float* y) {
  const int64_t nsb = cols / kQK_K;
  const VecI m4 = Set1I8(15), m2 = Set1I8(3), k32 = Set1I8(32);
  for (int64_t r = 0; r < rows; ++r) {
    const auto* blk = reinterpret_cast<const BlockQ6_K*>(static_cast<const uint8_t*>(w) + r * rb);
    VecF acc = Zero();
    for (int64_t i = 0; i < nsb; ++i) {
      const float d = Fp16ToFp32(blk[i].d);
      for (int h = 0; h < 2; ++h) {
        for (int g = 0; g < 4; ++g) {
          const int64_t b = i * 8 + 4 * h + g;  // activation block
          const float s = d * x.d[b];
          for (int k = 0; k < 2; ++k) {  // the block's two 16-element halves
            const VecI lb = Bytes16(blk[i].ql + 64 * h + ((g & 1) ? 32 : 0) + 16 * k);
            const VecI qh = Bytes16(blk[i].qh + 32 * h + 16 * k);
            const VecI lo = AndI(g >= 2 ? Srl16(lb, 4) : lb, m4);
            const VecI hi = AndI(Srl16(qh, 2 * g), m2);
            const int8_t* xq = x.qs + b * kQK + 16 * k;
            const VecI xv = Bytes16(xq);
            const VecI dp =
                SubI(DotU8S8(ZeroI(), OrI(lo, Sll16(hi, 4)), xv), DotU8S8(ZeroI(), k32, xv));
            const int8_t* sc = blk[i].scales + 8 * h + 2 * g;
            acc = Fma(ToFloat(dp), Set1(s * static_cast<float>(sc[k])), acc);
          }
        }
      }
    }
    y[r] = ReduceAdd(acc);
  }
}

// The row layouts: nb fp16 scales, then the blocks' quants (16 or 32 bytes each).
void GemvQ8Q4_0R(const void* w, size_t rb, int64_t cols, int64_t rows, const ActQ8& x, float* y) {
  const int64_t nb = cols / kQK;
  float dw[kMaxBlockSums];
  for (int64_t r = 0; r < rows; ++r) {
    const auto* row = static_cast<const uint8_t*>(w) + r * rb;
    const auto* sc = reinterpret_cast<const uint16_t*>(row);
    const uint8_t* qs = row + 2 * nb;
    VecF acc = Zero();
    for (int64_t b = 0; b < nb; ++b) {
      dw[b] = Fp16ToFp32(sc[b]);
      acc = Fma(ToFloat(DotQ4Block(qs + 16 * b, x.qs + b * kQK)), Set1(dw[b] * x.d[b]), acc);
    }
    y[r] = ReduceAdd(acc) - 8.0f * Dot(dw, x.ds, nb);
  }
}

void GemvQ8Q8_0R(const void* w, size_t rb, int64_t cols, int64_t rows, const ActQ8& x, float* y) {
  const int64_t nb = cols / kQK;
  for (int64_t r = 0; r < rows; ++r) {
    const auto* row = static_cast<const uint8_t*>(w) + r * rb;
    const auto* sc = reinterpret_cast<const uint16_t*>(row);
    const auto* qs = reinterpret_cast<const int8_t*>(row + 2 * nb);
    VecF acc = Zero();
    for (int64_t b = 0; b < nb; ++b)
      acc = Fma(ToFloat(DotQ8Block(qs + b * kQK, x.qs + b * kQK)), Set1(Fp16ToFp32(sc[b]) * x.d[b]),
                acc);
    y[r] = ReduceAdd(acc);
  }
}

// Several tokens: one GEMV each (a token's result as alone).
template <GemvQ8Fn kGemv>
void GemmQ8(const void* w, size_t rb, int64_t cols, int64_t rows, const ActQ8& x, int n_tok,
            float* y, int64_t ldy) {
  for (int t = 0; t < n_tok; ++t) kGemv(w, rb, cols, rows, x.Token(t, cols), y + t * ldy);
}

}  // namespace

void SetInt8Kernels(KernelTable* t) {
  t->gemv_q8[static_cast<int>(GgmlType::kQ8_0)] = GemvQ8Q8_0;
  t->gemv_q8[static_cast<int>(GgmlType::kQ4_0)] = GemvQ8Q4_0;
  t->gemv_q8[static_cast<int>(GgmlType::kQ4_0R)] = GemvQ8Q4_0R;
  t->gemv_q8[static_cast<int>(GgmlType::kQ8_0R)] = GemvQ8Q8_0R;
  t->gemv_q8[static_cast<int>(GgmlType::kQ4_K)] = GemvQ8Q4_K;
  t->gemv_q8[static_cast<int>(GgmlType::kQ6_K)] = GemvQ8Q6_K;
  t->gemm_q8[static_cast<int>(GgmlType::kQ8_0)] = GemmQ8<GemvQ8Q8_0>;
  t->gemm_q8[static_cast<int>(GgmlType::kQ4_0)] = GemmQ8<GemvQ8Q4_0>;
  t->gemm_q8[static_cast<int>(GgmlType::kQ4_0R)] = GemmQ8<GemvQ8Q4_0R>;
  t->gemm_q8[static_cast<int>(GgmlType::kQ8_0R)] = GemmQ8<GemvQ8Q8_0R>;
  t->quantize_act = QuantizeAct;
  t->int8_peak_probe = DotProductPeak;
}

}  // namespace PADDOCK_ISA_NS
}  // namespace paddock
