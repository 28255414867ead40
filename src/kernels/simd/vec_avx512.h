// kernels/simd/vec_avx512.h: the vector primitives on AVX-512 (F, BW, DQ, VL, VNNI): the only
// place the kernel families meet AVX-512 intrinsics directly, besides the ISA's own x16 tile.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "base/cpu.h"
#include "formats/ggml_types.h"

namespace paddock {
namespace PADDOCK_ISA_NS {

constexpr Isa kTableIsa = Isa::kAvx512;

struct VecF {
  __m512 v;
};
constexpr int kLanes = 16;
inline VecF Zero() {
  return {_mm512_setzero_ps()};
}
inline VecF Set1(float a) {
  return {_mm512_set1_ps(a)};
}
inline VecF Load(const float* p) {
  return {_mm512_loadu_ps(p)};
}
inline void Store(float* p, VecF a) {
  _mm512_storeu_ps(p, a.v);
}
inline VecF Add(VecF a, VecF b) {
  return {_mm512_add_ps(a.v, b.v)};
}
inline VecF Sub(VecF a, VecF b) {
  return {_mm512_sub_ps(a.v, b.v)};
}
inline VecF Mul(VecF a, VecF b) {
  return {_mm512_mul_ps(a.v, b.v)};
}
inline VecF Max(VecF a, VecF b) {
  return {_mm512_max_ps(a.v, b.v)};
}
inline VecF Fma(VecF a, VecF b, VecF c) {
  return {_mm512_fmadd_ps(a.v, b.v, c.v)};
}
inline float ReduceAdd(VecF a) {
  return _mm512_reduce_add_ps(a.v);
}
inline float ReduceMax(VecF a) {
  return _mm512_reduce_max_ps(a.v);
}
// dst[j * ds + i] = src[i * ss + j] for i, j < kLanes: a kLanes x kLanes block transposed
// (pairs, then quads within 128-bit lanes, then the lanes themselves).
inline void TransposeBlock(const float* src, int ss, float* dst, int ds) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * ss);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    const __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]),
                  c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int h = 0; h < 16; h += 8) {
    for (int k = 0; k < 4; ++k) {
      t[h + k] = _mm512_shuffle_f32x4(r[h + k], r[h + 4 + k], 0x88);
      t[h + 4 + k] = _mm512_shuffle_f32x4(r[h + k], r[h + 4 + k], 0xdd);
    }
  }
  for (int k = 0; k < 8; ++k) {
    _mm512_storeu_ps(dst + k * ds, _mm512_shuffle_f32x4(t[k], t[8 + k], 0x88));
    _mm512_storeu_ps(dst + (8 + k) * ds, _mm512_shuffle_f32x4(t[k], t[8 + k], 0xdd));
  }
}
// One fp16 value as a float (exact).
inline float F16ToF32(uint16_t h) {
  return _cvtsh_ss(h);
}
inline VecF LoadF16(const uint16_t* p) {
  return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
}
inline VecF LoadBf16(const uint16_t* p) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return {_mm512_castsi512_ps(_mm512_slli_epi32(w, 16))};
}
// Rounded to nearest even, as Fp32ToFp16 (F16C's conversion; NaNs stay NaNs).
inline void StoreF16(uint16_t* p, VecF a) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                      _mm512_cvtps_ph(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
// Rounded to nearest even, NaNs quieted: Fp32ToBf16's bits.
inline void StoreBf16(uint16_t* p, VecF a) {
  const __m512i x = _mm512_castps_si512(a.v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  __m512i r =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), odd), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
}
inline VecF LoadI8(const int8_t* p) {
  return {_mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))))};
}
// Integer lanes, for unpacking quantized weights in registers (writing unpacked values to
// memory and reloading them as a vector stalls on store forwarding).
struct VecI {
  __m512i v;
};
inline VecI LoadU8(const uint8_t* p) {  // kLanes bytes, zero-extended
  return {_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))};
}
inline VecI SetI(int32_t a) {
  return {_mm512_set1_epi32(a)};
}
inline VecI LaneIndex() {
  return {_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)};
}
inline VecI AddI(VecI a, VecI b) {
  return {_mm512_add_epi32(a.v, b.v)};
}
inline VecI AndI(VecI a, VecI b) {
  return {_mm512_and_si512(a.v, b.v)};
}
inline VecI OrI(VecI a, VecI b) {
  return {_mm512_or_si512(a.v, b.v)};
}
inline VecI ShrV(VecI a, VecI s) {
  return {_mm512_srlv_epi32(a.v, s.v)};
}
inline VecI ShlV(VecI a, VecI s) {
  return {_mm512_sllv_epi32(a.v, s.v)};
}
inline VecF ToFloat(VecI a) {
  return {_mm512_cvtepi32_ps(a.v)};
}
// Lane masks (comparisons, selection).
struct VecM {
  __mmask16 m;
};
inline VecF Div(VecF a, VecF b) {
  return {_mm512_div_ps(a.v, b.v)};
}
inline VecM CmpGe(VecF a, VecF b) {
  return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_GE_OQ)};
}
inline VecM CmpLt(VecF a, VecF b) {
  return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_LT_OQ)};
}
inline VecM And(VecM a, VecM b) {
  return {static_cast<__mmask16>(a.m & b.m)};
}
inline VecF Select(VecM m, VecF a, VecF b) {
  return {_mm512_mask_blend_ps(m.m, b.v, a.v)};
}
inline VecF Min(VecF a, VecF b) {
  return {_mm512_min_ps(a.v, b.v)};
}
inline VecF RoundNearest(VecF a) {
  return {_mm512_roundscale_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
}
// p * 2^n for integral n.
inline VecF Ldexp(VecF p, VecF n) {
  return {_mm512_scalef_ps(p.v, n.v)};
}

// Whole-register integer operations (bytes, 16- and 32-bit lanes) for the interleaved tiles.
inline VecI ZeroI() {
  return {_mm512_setzero_si512()};
}
inline void StoreRaw(uint8_t* p, VecI a) {
  _mm512_storeu_si512(p, a.v);
}
inline VecI LoadRaw(const uint8_t* p) {
  return {_mm512_loadu_si512(p)};
}  // kLanes * 4 bytes
// 16 bytes repeated in every 128-bit lane (a table for Lut16).
inline VecI Table16(const uint8_t* t) {
  return {_mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t)))};
}
// Per byte: the table byte indexed by its low 4 bits (indices 0..15).
inline VecI Lut16(VecI table, VecI idx) {
  return {_mm512_shuffle_epi8(table.v, idx.v)};
}
// kLanes uint16 values, zero-extended to the lanes.
inline VecI LoadU16(const uint8_t* p) {
  return {_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
}
// The sum of 16 int8 values (SSE2's sum of absolute differences on the bytes offset to unsigned).
inline int32_t SumI8x16(const int8_t* p) {
  const __m128i v = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)),
                                  _mm_set1_epi8(static_cast<char>(0x80)));
  const __m128i s = _mm_sad_epu8(v, _mm_setzero_si128());
  return _mm_cvtsi128_si32(s) + _mm_extract_epi16(s, 4) - 16 * 128;
}
// The lanes' bits as floats.
inline VecF BitsToFloat(VecI a) {
  return {_mm512_castsi512_ps(a.v)};
}
inline VecI Set1I8(int8_t a) {
  return {_mm512_set1_epi8(a)};
}
inline VecI XorI(VecI a, VecI b) {
  return {_mm512_xor_si512(a.v, b.v)};
}
inline VecI Sub8(VecI a, VecI b) {
  return {_mm512_sub_epi8(a.v, b.v)};
}
// |w| per byte, and x with w's sign per byte (0 where w is 0): the sign trick's operands.
inline VecI Abs8(VecI w) {
  return {_mm512_abs_epi8(w.v)};
}
inline VecI Sign8(VecI x, VecI w) {
  const __m512i zero = _mm512_setzero_si512();
  const __mmask64 neg = _mm512_movepi8_mask(w.v), nz = _mm512_test_epi8_mask(w.v, w.v);
  return {_mm512_maskz_mov_epi8(nz, _mm512_mask_sub_epi8(x.v, neg, zero, x.v))};
}
inline VecI SubI(VecI a, VecI b) {
  return {_mm512_sub_epi32(a.v, b.v)};
}
inline VecI Srl16(VecI a, int n) {
  return {_mm512_srli_epi16(a.v, static_cast<unsigned>(n))};
}
inline VecI Sll16(VecI a, int n) {
  return {_mm512_slli_epi16(a.v, static_cast<unsigned>(n))};
}
inline VecI Srl32(VecI a, int n) {
  return {_mm512_srli_epi32(a.v, static_cast<unsigned>(n))};
}
// Bytes of each 128-bit lane picked by idx (vpshufb; an index with its top bit set gives 0).
inline VecI Shuffle8(VecI a, VecI idx) {
  return {_mm512_shuffle_epi8(a.v, idx.v)};
}
// Per 32-bit lane: a.lo16 * b.lo16 + a.hi16 * b.hi16, the words signed (vpmaddwd).
inline VecI MulAddPairs16(VecI a, VecI b) {
  return {_mm512_madd_epi16(a.v, b.v)};
}
// Per 32-bit lane: lo's low word | hi's low word << 16.
inline VecI PackLoHi16(VecI lo, VecI hi) {
  return {_mm512_mask_blend_epi16(0xAAAAAAAAu, lo.v, _mm512_slli_epi32(hi.v, 16))};
}
inline VecI Sra32(VecI a, int n) {
  return {_mm512_srai_epi32(a.v, static_cast<unsigned>(n))};
}
// acc (int32 lanes) += the 4 products u8 x s8 of each lane (VNNI).
inline VecI DotU8S8(VecI acc, VecI u8, VecI s8) {
  return {_mm512_dpbusd_epi32(acc.v, u8.v, s8.v)};
}
// 8-bit interleaved quants are stored + 128 (unsigned). With VNNI they are the unsigned operand
// as stored: acc += (w + 128) . x, and kOffset8Zero x the activations' block sum comes out in
// the float epilogue.
// acc += u8 . (the 4 signed bytes at x in every lane): the broadcast folded into vpdpbusd's
// memory operand. GCC emits a separate vpbroadcastd for the intrinsic form, and in the token
// tiles that one extra instruction per dot product kept the front end, not the dot-product
// ports, the limit.
inline VecI DotU8S8Bcast(VecI acc, VecI u8, const int8_t* x) {
  __asm__("vpdpbusd %2%{1to16%}, %1, %0"
          : "+v"(acc.v)
          : "v"(u8.v), "m"(*reinterpret_cast<const int32_t*>(x)));
  return acc;
}
inline VecI DotOffset8(VecI acc, VecI w_stored, VecI x) {
  return DotU8S8(acc, w_stored, x);
}
constexpr float kOffset8Zero = 128.0f;
inline VecI DotOffset8Bcast(VecI acc, VecI w_stored, const int8_t* x) {
  return DotU8S8Bcast(acc, w_stored, x);
}
// VNNI's dpbusd is one instruction: no int16 sums (vec_avx2.h's kInt16Sums).
constexpr bool kInt16Sums = false;
inline VecI MulPairs16(VecI u8, VecI s8) {
  return {_mm512_maddubs_epi16(u8.v, s8.v)};
}
inline VecI Add16(VecI a, VecI b) {
  return {_mm512_add_epi16(a.v, b.v)};
}
inline VecI WidenPairs16(VecI acc, VecI p16) {
  return {_mm512_add_epi32(acc.v, _mm512_madd_epi16(p16.v, _mm512_set1_epi16(1)))};
}
// Two int32 chains per token where few tokens leave the latency exposed (16 rows per register
// leave room for them).
constexpr int kX16SplitTokens = 4;
// One register holds the whole 16-row group: X16Tile takes its blocks in one chunk.
constexpr int kX16ChunkBlocks = 0;

// Float GEMM register tile: rows per tile (4 x 4 tokens of 512-bit accumulators).
constexpr int kFloatRows = 4;
// Tokens per float-GEMM tile (gemm_float.cpp): 4 x 6 accumulators of the 32 registers: 9% faster
// than 4 x 4 on an encoder's F16 steps (Zen 4), 8 spills.
constexpr int kFloatTokens = 6;
// No block dot products of the ISA's own here (NEON has them: vec_neon.h).
constexpr bool kIsaBlocks = false;
constexpr bool X16IsaBlockKind(X16Kind) {
  return false;
}
// Tokens per register tile of the interleaved integer kernels (Q6_K keeps two int32
// accumulators per token, so it takes fewer).
constexpr int X16MaxTile(X16Kind k) {
  return k == X16Kind::kQ6K ? 6 : 8;
}
#define PADDOCK_X16_TILES_HEADER "kernels/simd/x16_sparse_avx512.h"

// 8 int32 lanes += u8 x s8 products of 32 bytes (4 per lane): VNNI.
inline __m256i DpBusd(__m256i acc, __m256i u8, __m256i s8) {
  return _mm256_dpbusd_epi32(acc, u8, s8);
}
inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Final reduction of the even/odd-block accumulators. The AVX-512 GEMM keeps the same two
// accumulators in one register and reduces it this way; the GEMV reduces the same way, so a
// one-token GEMV is bit-identical to the same token in a batched GEMM (batch invariance).
inline float ReducePair(__m256 acc0, __m256 acc1) {
  return _mm512_reduce_add_ps(_mm512_insertf32x8(_mm512_castps256_ps512(acc0), acc1, 1));
}
// Q4_0 nibbles as 32 unsigned bytes in element order (low nibbles: 0..15, high: 16..31).
inline __m256i UnpackQ4(const uint8_t* qs) {
  const __m256i raw =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  const __m256i shifted =
      _mm256_srlv_epi16(raw, _mm256_setr_epi16(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4));
  return _mm256_and_si256(shifted, _mm256_set1_epi8(15));
}
// Runs `iters` iterations of 8 independent int8 dot-product instructions; returns the int8
// operations done (multiply + add = 2): the machine's integer peak, for benchmarks.
inline int64_t DotProductPeak(int64_t iters) {
  __m512i a[8];
  for (int k = 0; k < 8; ++k) a[k] = _mm512_set1_epi32(k);
  const __m512i u = _mm512_set1_epi8(3), v = _mm512_set1_epi8(-2);
  for (int64_t i = 0; i < iters; ++i) {
    for (int k = 0; k < 8; ++k) a[k] = _mm512_dpbusd_epi32(a[k], u, v);
  }
  __m512i s = a[0];
  for (int k = 1; k < 8; ++k) s = _mm512_add_epi32(s, a[k]);
  volatile int sink = _mm_cvtsi128_si32(_mm512_castsi512_si128(s));  // keeps the work alive
  (void)sink;
  return iters * 8 * 64 * 2;
}

}  // namespace PADDOCK_ISA_NS
}  // namespace paddock
