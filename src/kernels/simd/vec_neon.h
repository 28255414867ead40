// kernels/simd/vec_neon.h: the vector primitives on AArch64 Advanced SIMD (NEON), at three
// levels compiled from this one header: ARMv8.0 (`neon`: the integer dot products widened
// through 16-bit products), ARMv8.2 dot products (`dotprod`: SDOT) and ARMv8.6 int8 matrix
// multiply (`i8mm`: USDOT for the mixed-sign dot, and the SMMLA tile of gemm_x16.cpp). A
// register holds 4 float or int32 lanes: a 16-row interleaved group is four registers.
// The integer dot products are exact at every level (no saturating int16 sums), so the three
// levels give bit-identical results.
#pragma once

#include <arm_neon.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "base/cpu.h"
#include "formats/ggml_types.h"
#include "formats/x16_layout.h"

namespace paddock {
namespace PADDOCK_ISA_NS {

#if defined(__ARM_FEATURE_MATMUL_INT8)
constexpr Isa kTableIsa = Isa::kI8mm;
#elif defined(__ARM_FEATURE_DOTPROD)
constexpr Isa kTableIsa = Isa::kDotprod;
#else
constexpr Isa kTableIsa = Isa::kNeon;
#endif

struct VecF {
  float32x4_t v;
};
constexpr int kLanes = 4;
inline VecF Zero() {
  return {vdupq_n_f32(0.0f)};
}
inline VecF Set1(float a) {
  return {vdupq_n_f32(a)};
}
inline VecF Load(const float* p) {
  return {vld1q_f32(p)};
}
inline void Store(float* p, VecF a) {
  vst1q_f32(p, a.v);
}
inline VecF Add(VecF a, VecF b) {
  return {vaddq_f32(a.v, b.v)};
}
inline VecF Sub(VecF a, VecF b) {
  return {vsubq_f32(a.v, b.v)};
}
inline VecF Mul(VecF a, VecF b) {
  return {vmulq_f32(a.v, b.v)};
}
inline VecF Max(VecF a, VecF b) {
  return {vmaxq_f32(a.v, b.v)};
}
inline VecF Fma(VecF a, VecF b, VecF c) {
  return {vfmaq_f32(c.v, a.v, b.v)};
}
inline float ReduceAdd(VecF a) {
  return vaddvq_f32(a.v);
}
inline float ReduceMax(VecF a) {
  return vmaxvq_f32(a.v);
}
// dst[j * ds + i] = src[i * ss + j] for i, j < kLanes: a 4 x 4 block transposed.
inline void TransposeBlock(const float* src, int ss, float* dst, int ds) {
  const float32x4_t r0 = vld1q_f32(src), r1 = vld1q_f32(src + ss), r2 = vld1q_f32(src + 2 * ss),
                    r3 = vld1q_f32(src + 3 * ss);
  const float32x4_t t0 = vtrn1q_f32(r0, r1), t1 = vtrn2q_f32(r0, r1), t2 = vtrn1q_f32(r2, r3),
                    t3 = vtrn2q_f32(r2, r3);
  auto f64 = [](float32x4_t x) { return vreinterpretq_f64_f32(x); };
  vst1q_f32(dst, vreinterpretq_f32_f64(vtrn1q_f64(f64(t0), f64(t2))));
  vst1q_f32(dst + ds, vreinterpretq_f32_f64(vtrn1q_f64(f64(t1), f64(t3))));
  vst1q_f32(dst + 2 * ds, vreinterpretq_f32_f64(vtrn2q_f64(f64(t0), f64(t2))));
  vst1q_f32(dst + 3 * ds, vreinterpretq_f32_f64(vtrn2q_f64(f64(t1), f64(t3))));
}
// One fp16 value as a float (exact).
inline float F16ToF32(uint16_t h) {
  __fp16 f;
  std::memcpy(&f, &h, 2);
  return static_cast<float>(f);
}
inline VecF LoadF16(const uint16_t* p) {
  return {vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)))};
}
inline VecF LoadBf16(const uint16_t* p) {
  return {vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16))};
}
// Rounded to nearest even (the FPCR's default mode), as Fp32ToFp16; NaNs stay NaNs.
inline void StoreF16(uint16_t* p, VecF a) {
  vst1_u16(p, vreinterpret_u16_f16(vcvt_f16_f32(a.v)));
}
// Rounded to nearest even, NaNs quieted: Fp32ToBf16's bits (the integer form, as on x86).
inline void StoreBf16(uint16_t* p, VecF a) {
  const uint32x4_t x = vreinterpretq_u32_f32(a.v);
  const uint32x4_t odd = vandq_u32(vshrq_n_u32(x, 16), vdupq_n_u32(1));
  uint32x4_t r = vshrq_n_u32(vaddq_u32(vaddq_u32(x, vdupq_n_u32(0x7fff)), odd), 16);
  const uint32x4_t nan = vcgtq_u32(vandq_u32(x, vdupq_n_u32(0x7fffffff)), vdupq_n_u32(0x7f800000));
  r = vbslq_u32(nan, vorrq_u32(vshrq_n_u32(x, 16), vdupq_n_u32(0x40)), r);
  vst1_u16(p, vmovn_u32(r));
}
inline uint32_t Load4Bytes(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline VecF LoadI8(const int8_t* p) {
  const int8x8_t b = vreinterpret_s8_u32(vdup_n_u32(Load4Bytes(p)));
  return {vcvtq_f32_s32(vmovl_s16(vget_low_s16(vmovl_s8(b))))};
}
struct VecI {
  int32x4_t v;
};
inline uint8x16_t U8(VecI a) {
  return vreinterpretq_u8_s32(a.v);
}
inline int8x16_t S8(VecI a) {
  return vreinterpretq_s8_s32(a.v);
}
inline VecI FromU8(uint8x16_t a) {
  return {vreinterpretq_s32_u8(a)};
}
inline VecI FromS8(int8x16_t a) {
  return {vreinterpretq_s32_s8(a)};
}
inline VecI FromU16(uint16x8_t a) {
  return {vreinterpretq_s32_u16(a)};
}
inline VecI LoadU8(const uint8_t* p) {
  const uint8x8_t b = vreinterpret_u8_u32(vdup_n_u32(Load4Bytes(p)));
  return {vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(vmovl_u8(b))))};
}
inline VecI SetI(int32_t a) {
  return {vdupq_n_s32(a)};
}
inline VecI LaneIndex() {
  static constexpr int32_t kIdx[4] = {0, 1, 2, 3};
  return {vld1q_s32(kIdx)};
}
inline VecI AddI(VecI a, VecI b) {
  return {vaddq_s32(a.v, b.v)};
}
inline VecI AndI(VecI a, VecI b) {
  return {vandq_s32(a.v, b.v)};
}
inline VecI OrI(VecI a, VecI b) {
  return {vorrq_s32(a.v, b.v)};
}
// Logical shifts by per-lane counts (0 for a count of 32 or more, as vpsrlvd / vpsllvd).
inline VecI ShrV(VecI a, VecI s) {
  return {vreinterpretq_s32_u32(vshlq_u32(vreinterpretq_u32_s32(a.v), vnegq_s32(s.v)))};
}
inline VecI ShlV(VecI a, VecI s) {
  return {vreinterpretq_s32_u32(vshlq_u32(vreinterpretq_u32_s32(a.v), s.v))};
}
inline VecF ToFloat(VecI a) {
  return {vcvtq_f32_s32(a.v)};
}
struct VecM {
  uint32x4_t m;
};
inline VecF Div(VecF a, VecF b) {
  return {vdivq_f32(a.v, b.v)};
}
inline VecM CmpGe(VecF a, VecF b) {
  return {vcgeq_f32(a.v, b.v)};
}
inline VecM CmpLt(VecF a, VecF b) {
  return {vcltq_f32(a.v, b.v)};
}
inline VecM And(VecM a, VecM b) {
  return {vandq_u32(a.m, b.m)};
}
inline VecF Select(VecM m, VecF a, VecF b) {
  return {vbslq_f32(m.m, a.v, b.v)};
}
inline VecF Min(VecF a, VecF b) {
  return {vminq_f32(a.v, b.v)};
}
inline VecF RoundNearest(VecF a) {
  return {vrndnq_f32(a.v)};
}
// p * 2^n for integral n (added to the exponent bits).
inline VecF Ldexp(VecF p, VecF n) {
  const int32x4_t bits = vshlq_n_s32(vcvtq_s32_f32(n.v), 23);
  return {vreinterpretq_f32_s32(vaddq_s32(vreinterpretq_s32_f32(p.v), bits))};
}

// Whole-register integer operations (bytes, 16- and 32-bit lanes) for the interleaved tiles.
inline VecI ZeroI() {
  return {vdupq_n_s32(0)};
}
inline void StoreRaw(uint8_t* p, VecI a) {
  vst1q_u8(p, U8(a));
}
inline VecI LoadRaw(const uint8_t* p) {
  return FromU8(vld1q_u8(p));
}
// A 16-byte table for Lut16.
inline VecI Table16(const uint8_t* t) {
  return FromU8(vld1q_u8(t));
}
// Per byte: the table byte indexed by its low 4 bits (indices 0..15).
inline VecI Lut16(VecI table, VecI idx) {
  return FromU8(vqtbl1q_u8(U8(table), U8(idx)));
}
// kLanes uint16 values, zero-extended to the lanes.
inline VecI LoadU16(const uint8_t* p) {
  uint16_t h[4];
  std::memcpy(h, p, 8);
  return {vreinterpretq_s32_u32(vmovl_u16(vld1_u16(h)))};
}
// The sum of 16 int8 values.
inline int32_t SumI8x16(const int8_t* p) {
  return vaddlvq_s8(vld1q_s8(p));
}
// The lanes' bits as floats.
inline VecF BitsToFloat(VecI a) {
  return {vreinterpretq_f32_s32(a.v)};
}
inline VecI Set1I8(int8_t a) {
  return FromS8(vdupq_n_s8(a));
}
inline VecI XorI(VecI a, VecI b) {
  return {veorq_s32(a.v, b.v)};
}
inline VecI Sub8(VecI a, VecI b) {
  return FromS8(vsubq_s8(S8(a), S8(b)));
}
// |w| per byte, and x with w's sign per byte (0 where w is 0): the sign trick's operands.
inline VecI Abs8(VecI w) {
  return FromS8(vabsq_s8(S8(w)));
}
inline VecI Sign8(VecI x, VecI w) {
  const int8x16_t xs = S8(x), ws = S8(w);
  const int8x16_t r = vbslq_s8(vcltzq_s8(ws), vnegq_s8(xs), xs);
  return FromS8(vbicq_s8(r, vreinterpretq_s8_u8(vceqzq_s8(ws))));
}
inline VecI SubI(VecI a, VecI b) {
  return {vsubq_s32(a.v, b.v)};
}
// Shifts by a run-time count (register forms: the immediate forms need a constant).
inline VecI Srl16(VecI a, int n) {
  return FromU16(vshlq_u16(vreinterpretq_u16_s32(a.v), vdupq_n_s16(static_cast<int16_t>(-n))));
}
inline VecI Sll16(VecI a, int n) {
  return FromU16(vshlq_u16(vreinterpretq_u16_s32(a.v), vdupq_n_s16(static_cast<int16_t>(n))));
}
inline VecI Srl32(VecI a, int n) {
  return {vreinterpretq_s32_u32(vshlq_u32(vreinterpretq_u32_s32(a.v), vdupq_n_s32(-n)))};
}
inline VecI Sra32(VecI a, int n) {
  return {vshlq_s32(a.v, vdupq_n_s32(-n))};
}
// Bytes of the register picked by idx (an index of 16 or more, top bit included, gives 0; the
// callers use indices 0..15 or 0x80, where this equals x86's vpshufb per 128-bit lane).
inline VecI Shuffle8(VecI a, VecI idx) {
  return FromU8(vqtbl1q_u8(U8(a), U8(idx)));
}
// Per 32-bit lane: a.lo16 * b.lo16 + a.hi16 * b.hi16, the words signed (vpmaddwd).
inline VecI MulAddPairs16(VecI a, VecI b) {
  const int16x8_t x = vreinterpretq_s16_s32(a.v), y = vreinterpretq_s16_s32(b.v);
  return {vpaddq_s32(vmull_s16(vget_low_s16(x), vget_low_s16(y)), vmull_high_s16(x, y))};
}
// Per 32-bit lane: lo's low word | hi's low word << 16.
inline VecI PackLoHi16(VecI lo, VecI hi) {
  return {vsliq_n_s32(lo.v, hi.v, 16)};
}

// Sums of 4 consecutive int16 products per 32-bit lane (ARMv8.0: products widened to 16 bits).
inline int32x4_t Quads16(int16x8_t p_lo, int16x8_t p_hi) {
  return vpaddq_s32(vpaddlq_s16(p_lo), vpaddlq_s16(p_hi));
}
// acc (int32 lanes) += the 4 products s8 x s8 of each lane (exact at every level).
inline VecI DotS8S8(VecI acc, VecI a, VecI b) {
#if defined(__ARM_FEATURE_DOTPROD)
  return {vdotq_s32(acc.v, S8(a), S8(b))};
#else
  const int8x16_t x = S8(a), y = S8(b);
  return {vaddq_s32(acc.v, Quads16(vmull_s8(vget_low_s8(x), vget_low_s8(y)), vmull_high_s8(x, y)))};
#endif
}
// acc (int32 lanes) += the 4 products u8 x s8 of each lane. Exact on i8mm (USDOT) and ARMv8.0
// (16-bit products: 255 x 128 fits); the dotprod level takes the unsigned operand as signed
// (SDOT), exact for u8 <= 127, which every caller keeps: the unsigned operands are quants of at
// most 6 bits (the 8-bit and lookup kinds go through DotOffset8).
inline VecI DotU8S8(VecI acc, VecI u8, VecI s8) {
#if defined(__ARM_FEATURE_MATMUL_INT8)
  return {vusdotq_s32(acc.v, U8(u8), S8(s8))};
#elif defined(__ARM_FEATURE_DOTPROD)
  return {vdotq_s32(acc.v, S8(u8), S8(s8))};
#else
  const uint8x16_t u = U8(u8);
  const int8x16_t s = S8(s8);
  const int16x8_t lo =
      vmulq_s16(vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(u))), vmovl_s8(vget_low_s8(s)));
  const int16x8_t hi = vmulq_s16(vreinterpretq_s16_u16(vmovl_high_u8(u)), vmovl_high_s8(s));
  return {vaddq_s32(acc.v, Quads16(lo, hi))};
#endif
}
// The 4 signed bytes at x in every lane.
inline VecI Bcast4Bytes(const int8_t* x) {
  return {vreinterpretq_s32_u32(vdupq_n_u32(Load4Bytes(x)))};
}
// acc += u8 . (the 4 signed bytes at x in every lane).
inline VecI DotU8S8Bcast(VecI acc, VecI u8, const int8_t* x) {
  return DotU8S8(acc, u8, Bcast4Bytes(x));
}
// 8-bit interleaved quants are stored + 128: flipping the top bit makes them signed again and
// the signed dot product takes them whole (no zero point left for the epilogue).
inline VecI DotOffset8(VecI acc, VecI w_stored, VecI x) {
  return DotS8S8(acc, XorI(w_stored, Set1I8(static_cast<int8_t>(0x80))), x);
}
constexpr float kOffset8Zero = 0.0f;
inline VecI DotOffset8Bcast(VecI acc, VecI w_stored, const int8_t* x) {
  return DotOffset8(acc, w_stored, Bcast4Bytes(x));
}
// The int16-sum path of x86 without VNNI (maddubs' saturating pair sums) is not taken here:
// every level's dot products land in int32 directly. The forms exist for the generic code.
constexpr bool kInt16Sums = false;
inline VecI MulPairs16(VecI u8, VecI s8) {
  const uint8x16_t u = U8(u8);
  const int8x16_t s = S8(s8);
  const int16x8_t lo =
      vmulq_s16(vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(u))), vmovl_s8(vget_low_s8(s)));
  const int16x8_t hi = vmulq_s16(vreinterpretq_s16_u16(vmovl_high_u8(u)), vmovl_high_s8(s));
  return {vreinterpretq_s32_s16(vqaddq_s16(vuzp1q_s16(lo, hi), vuzp2q_s16(lo, hi)))};
}
inline VecI Add16(VecI a, VecI b) {
  return {vreinterpretq_s32_s16(vaddq_s16(vreinterpretq_s16_s32(a.v), vreinterpretq_s16_s32(b.v)))};
}
inline VecI WidenPairs16(VecI acc, VecI p16) {
  return {vaddq_s32(acc.v, vpaddlq_s16(vreinterpretq_s16_s32(p16.v)))};
}
// One int32 chain per token; the one-token GEMV alternates the four quarters of a group by
// chunks of blocks (gemm_x16.cpp's X16Tile), as AVX2 its halves.
constexpr int kX16SplitTokens = 0;
constexpr int kX16ChunkBlocks = 1;

// Float GEMM register tile: 4 rows x 4 tokens of the 32 registers.
constexpr int kFloatRows = 4;
constexpr int kFloatTokens = 4;
// gemm_x16.cpp's blocks of the nibble and 8-bit kinds in NEON's own code (x16_tiles_neon.h's
// IsaTiles::BlockDots) at every level: SMULL/SADALP (ARMv8.0), lane-indexed SDOT, and on i8mm
// (kMmla) the int8 matrix multiply for token pairs.
constexpr bool kIsaBlocks = true;
#if defined(__ARM_FEATURE_MATMUL_INT8)
constexpr bool kMmla = true;
#else
constexpr bool kMmla = false;
#endif
constexpr bool X16IsaBlockKind(X16Kind k) {
  return X16IsQ4(k) || k == X16Kind::kQ8B || k == X16Kind::kQ8C;
}
// Tokens per register tile of the interleaved integer kernels: 8 on SMMLA (4 token pairs x 2
// row pairs of accumulators per quarter), else 4.
constexpr int X16MaxTile(X16Kind k) {
  return kMmla && X16IsaBlockKind(k) ? 8 : 4;
}
#define PADDOCK_X16_TILES_HEADER "kernels/simd/x16_tiles_neon.h"

// Runs `iters` iterations of 8 independent int8 dot-product instructions; returns the int8
// operations done (multiply + add = 2): the machine's integer peak, for benchmarks. SDOT
// (16 products) where the CPU has it, else a widening multiply-accumulate (8 products).
inline int64_t DotProductPeak(int64_t iters) {
  int32x4_t a[8];
  int8x16_t v[8];
  for (int k = 0; k < 8; ++k) {
    a[k] = vdupq_n_s32(k);
    v[k] = vdupq_n_s8(static_cast<int8_t>(k - 4));
  }
  int8x16_t u = vdupq_n_s8(3);
  for (int64_t i = 0; i < iters; i += 8) {
    for (int j = 0; j < 8; ++j) {
      __asm__("" : "+w"(u));  // opaque: the products cannot be hoisted or shared
#if defined(__ARM_FEATURE_DOTPROD)
      for (int k = 0; k < 8; ++k) a[k] = vdotq_s32(a[k], u, v[k]);
#else
      for (int k = 0; k < 8; ++k)
        a[k] = vreinterpretq_s32_s16(
            vmlal_s8(vreinterpretq_s16_s32(a[k]), vget_low_s8(u), vget_low_s8(v[k])));
#endif
    }
  }
  int32x4_t s = a[0];
  for (int k = 1; k < 8; ++k) s = vaddq_s32(s, a[k]);
  volatile int sink = vgetq_lane_s32(s, 0);
  (void)sink;
#if defined(__ARM_FEATURE_DOTPROD)
  return iters * 8 * 16 * 2;
#else
  return iters * 8 * 8 * 2;
#endif
}

}  // namespace PADDOCK_ISA_NS
}  // namespace paddock
