// kernels/simd/common.h: helpers shared by the per-ISA kernel families (each family file is
// compiled once per instruction set, PADDOCK_ISA_NS = avx2 | avx512). Intrinsics live in the
// vector headers (vec.h); here only code written once over them. Internal to kernels/simd.
#pragma once

#include <cmath>
#include <cstring>

#include "base/half.h"
#include "formats/x16_layout.h"
#include "kernels/kv_rows.h"
#include "kernels/simd/vec.h"
#include "kernels/tables.h"

namespace paddock {
namespace PADDOCK_ISA_NS {

inline float Dot(const float* a, const float* b, int64_t n) {
  VecF s0 = Zero(), s1 = Zero(), s2 = Zero(), s3 = Zero();
  int64_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    s0 = Fma(Load(a + i), Load(b + i), s0);
    s1 = Fma(Load(a + i + kLanes), Load(b + i + kLanes), s1);
    s2 = Fma(Load(a + i + 2 * kLanes), Load(b + i + 2 * kLanes), s2);
    s3 = Fma(Load(a + i + 3 * kLanes), Load(b + i + 3 * kLanes), s3);
  }
  for (; i + kLanes <= n; i += kLanes) s0 = Fma(Load(a + i), Load(b + i), s0);
  float s = ReduceAdd(Add(Add(s0, s1), Add(s2, s3)));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

template <class LoadFn, class ScalarFn>
inline float DotHalf(const uint16_t* w, const float* x, int64_t n, LoadFn load, ScalarFn scalar) {
  VecF s0 = Zero(), s1 = Zero();
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    s0 = Fma(load(w + i), Load(x + i), s0);
    s1 = Fma(load(w + i + kLanes), Load(x + i + kLanes), s1);
  }
  for (; i + kLanes <= n; i += kLanes) s0 = Fma(load(w + i), Load(x + i), s0);
  float s = ReduceAdd(Add(s0, s1));
  for (; i < n; ++i) s += scalar(w[i]) * x[i];
  return s;
}

// Dot of 32 int8 quants with 32 floats.
inline VecF DotBlock32(const int8_t* q, const float* x, VecF acc) {
  for (int j = 0; j < 32; j += kLanes) acc = Fma(LoadI8(q + j), Load(x + j), acc);
  return acc;
}

// (byte >> shift) & mask for kLanes consecutive bytes.
inline VecI Bits(const uint8_t* p, int shift, int mask) {
  return AndI(ShrV(LoadU8(p), SetI(shift)), SetI(mask));
}

// Per-block sums of x over 32-element blocks, computed once per GEMV call and shared by all
// rows (the min/offset terms of the affine formats need them).
constexpr int kMaxBlockSums = 8192;  // cols up to 262144

inline void BlockSums(const float* x, int64_t cols, float* sums) {
  for (int64_t b = 0; b < cols / kQK; ++b) {
    VecF s = Zero();
    for (int j = 0; j < kQK; j += kLanes) s = Add(s, Load(x + b * kQK + j));
    sums[b] = ReduceAdd(s);
  }
}

// sum_j q_j * x_j over one 32-element legacy block: low nibbles (+ fifth bit) are elements
// 0..15, high nibbles 16..31; qh (may be null) holds bit j of element j.
inline VecF DotQ4Legacy(const uint8_t* qs, const uint8_t* qh_bytes, const float* x) {
  VecF acc = Zero();
  uint32_t qh = 0;
  if (qh_bytes != nullptr) std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 16; j += kLanes) {
    VecI lo = Bits(qs + j, 0, 15), hi = Bits(qs + j, 4, 15);
    if (qh_bytes != nullptr) {
      const VecI idx = AddI(LaneIndex(), SetI(j));
      lo = OrI(lo, ShlV(AndI(ShrV(SetI(static_cast<int32_t>(qh)), idx), SetI(1)), SetI(4)));
      hi = OrI(hi, ShlV(AndI(ShrV(SetI(static_cast<int32_t>(qh)), AddI(idx, SetI(16))), SetI(1)),
                        SetI(4)));
    }
    acc = Fma(ToFloat(lo), Load(x + j), acc);
    acc = Fma(ToFloat(hi), Load(x + 16 + j), acc);
  }
  return acc;
}

// ---- 16-row interleaved layouts: scale decoding shared by the register and AMX tiles ----
// Per scale group of the k-quants: d, -dmin, and the 6-bit scales / mins unpacked to bytes:
// sc_lo = sub-blocks 0..3 (byte j of each lane), sc_hi = 4..7 (the k-quant packing, all lanes
// at once).
struct KHeader {
  VecF d, ndmin;
  VecI sc_lo, sc_hi, mn_lo, mn_hi;
};
inline KHeader LoadKHeader(const uint8_t* p, int h) {
  KHeader k;
  k.d = LoadF16(reinterpret_cast<const uint16_t*>(p) + kLanes * h);
  k.ndmin = Sub(Zero(), LoadF16(reinterpret_cast<const uint16_t*>(p + 32) + kLanes * h));
  const VecI u0 = LoadRaw(p + 64 + 4 * kLanes * h), u1 = LoadRaw(p + 128 + 4 * kLanes * h),
             u2 = LoadRaw(p + 192 + 4 * kLanes * h);
  const VecI m6 = Set1I8(63), m4 = Set1I8(15), top = Set1I8(0x30);
  k.sc_lo = AndI(u0, m6);
  k.mn_lo = AndI(u1, m6);
  k.sc_hi = OrI(AndI(u2, m4), AndI(Srl32(u0, 2), top));
  k.mn_hi = OrI(AndI(Srl32(u2, 4), m4), AndI(Srl32(u1, 2), top));
  return k;
}

// Q6_K's sub-block scales 2 bi (first 16 elements of block bi) and 2 bi + 1 for half h of a
// 16-row group, sign-extended from their bytes (after the header's 16 fp16 d) and times d.
inline void Q6KScales(const uint8_t* hdr, int h, int bi, VecF d, VecF* s_lo, VecF* s_hi) {
  const VecI sv = LoadRaw(hdr + 32 + 64 * (bi / 2) + 4 * kLanes * h);
  *s_lo = Mul(d, ToFloat(Sra32(ShlV(sv, SetI(24 - 16 * (bi % 2))), 24)));
  *s_hi = Mul(d, ToFloat(Sra32(ShlV(sv, SetI(16 - 16 * (bi % 2))), 24)));
}

// y += a * x
inline void Axpy(float* y, float a, const float* x, int64_t n) {
  const VecF va = Set1(a);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) Store(y + i, Fma(va, Load(x + i), Load(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

// Per-ISA family setters: each fills its entries of the table (table.cpp calls them all).
void SetFloatKernels(KernelTable* t);
void SetElementwiseKernels(KernelTable* t);
void SetInt8Kernels(KernelTable* t);
void SetX16Kernels(KernelTable* t, Prefetch prefetch);
void SetAttentionKernels(KernelTable* t);
void SetRecurrentKernels(KernelTable* t);

// exp(x) for a vector, to about 2 ulp: 2^n * P(r) with x = n ln2 + r, |r| <= ln2 / 2, a
// degree-6 polynomial. Inputs below -87 give 0 (as they round to 0 in float anyway).
inline VecF ExpV(VecF x) {
  const VecF xc = Max(Min(x, Set1(88.0f)), Set1(-87.0f));
  const VecF n = RoundNearest(Mul(xc, Set1(1.44269504088896341f)));
  VecF r = Fma(n, Set1(-0.693359375f), xc);
  r = Fma(n, Set1(2.12194440e-4f), r);
  VecF p = Set1(1.9875691500e-4f);
  p = Fma(p, r, Set1(1.3981999507e-3f));
  p = Fma(p, r, Set1(8.3334519073e-3f));
  p = Fma(p, r, Set1(4.1665795894e-2f));
  p = Fma(p, r, Set1(1.6666665459e-1f));
  p = Fma(p, r, Set1(5.0000001201e-1f));
  p = Fma(Mul(p, r), r, Add(r, Set1(1.0f)));
  return Select(CmpGe(x, Set1(-87.0f)), Ldexp(p, n), Zero());
}

}  // namespace PADDOCK_ISA_NS
}  // namespace paddock
