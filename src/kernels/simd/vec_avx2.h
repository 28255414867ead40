// kernels/simd/vec_avx2.h: the vector primitives on AVX2 + FMA + F16C: the only place the kernel
// families meet AVX2 intrinsics directly, besides the ISA's own x16 tile.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "base/cpu.h"
#include "formats/ggml_types.h"

namespace paddock {
namespace PADDOCK_ISA_NS {

constexpr Isa kTableIsa = Isa::kAvx2;

struct VecF {
  __m256 v;
};
constexpr int kLanes = 8;
inline VecF Zero() {
  return {_mm256_setzero_ps()};
}
inline VecF Set1(float a) {
  return {_mm256_set1_ps(a)};
}
inline VecF Load(const float* p) {
  return {_mm256_loadu_ps(p)};
}
inline void Store(float* p, VecF a) {
  _mm256_storeu_ps(p, a.v);
}
inline VecF Add(VecF a, VecF b) {
  return {_mm256_add_ps(a.v, b.v)};
}
inline VecF Sub(VecF a, VecF b) {
  return {_mm256_sub_ps(a.v, b.v)};
}
inline VecF Mul(VecF a, VecF b) {
  return {_mm256_mul_ps(a.v, b.v)};
}
inline VecF Max(VecF a, VecF b) {
  return {_mm256_max_ps(a.v, b.v)};
}
inline VecF Fma(VecF a, VecF b, VecF c) {
  return {_mm256_fmadd_ps(a.v, b.v, c.v)};
}
inline float ReduceAdd(VecF a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float ReduceMax(VecF a) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
// dst[j * ds + i] = src[i * ss + j] for i, j < kLanes: a kLanes x kLanes block transposed.
inline void TransposeBlock(const float* src, int ss, float* dst, int ds) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ss);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  for (int k = 0; k < 4; ++k) {
    _mm256_storeu_ps(dst + k * ds, _mm256_permute2f128_ps(r[k], r[4 + k], 0x20));
    _mm256_storeu_ps(dst + (4 + k) * ds, _mm256_permute2f128_ps(r[k], r[4 + k], 0x31));
  }
}
// One fp16 value as a float (exact).
inline float F16ToF32(uint16_t h) {
  return _cvtsh_ss(h);
}
inline VecF LoadF16(const uint16_t* p) {
  return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))};
}
inline VecF LoadBf16(const uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return {_mm256_castsi256_ps(_mm256_slli_epi32(w, 16))};
}
// Rounded to nearest even, as Fp32ToFp16 (F16C's conversion; NaNs stay NaNs).
inline void StoreF16(uint16_t* p, VecF a) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                   _mm256_cvtps_ph(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
// Rounded to nearest even, NaNs quieted: Fp32ToBf16's bits.
inline void StoreBf16(uint16_t* p, VecF a) {
  const __m256i x = _mm256_castps_si256(a.v);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  __m256i r =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), odd), 16);
  // NaN (|x| above infinity's bits, compared signed: |x| < 2^31): (x >> 16) | 0x40
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  const __m256i q = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
  r = _mm256_blendv_epi8(r, q, nan);
  // 8 dwords (each < 2^16) to 8 words
  const __m128i lo = _mm256_castsi256_si128(r), hi = _mm256_extracti128_si256(r, 1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm_packus_epi32(lo, hi));
}
inline VecF LoadI8(const int8_t* p) {
  return {_mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))))};
}
struct VecI {
  __m256i v;
};
inline VecI LoadU8(const uint8_t* p) {
  return {_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))};
}
inline VecI SetI(int32_t a) {
  return {_mm256_set1_epi32(a)};
}
inline VecI LaneIndex() {
  return {_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)};
}
inline VecI AddI(VecI a, VecI b) {
  return {_mm256_add_epi32(a.v, b.v)};
}
inline VecI AndI(VecI a, VecI b) {
  return {_mm256_and_si256(a.v, b.v)};
}
inline VecI OrI(VecI a, VecI b) {
  return {_mm256_or_si256(a.v, b.v)};
}
inline VecI ShrV(VecI a, VecI s) {
  return {_mm256_srlv_epi32(a.v, s.v)};
}
inline VecI ShlV(VecI a, VecI s) {
  return {_mm256_sllv_epi32(a.v, s.v)};
}
inline VecF ToFloat(VecI a) {
  return {_mm256_cvtepi32_ps(a.v)};
}
struct VecM {
  __m256 m;
};
inline VecF Div(VecF a, VecF b) {
  return {_mm256_div_ps(a.v, b.v)};
}
inline VecM CmpGe(VecF a, VecF b) {
  return {_mm256_cmp_ps(a.v, b.v, _CMP_GE_OQ)};
}
inline VecM CmpLt(VecF a, VecF b) {
  return {_mm256_cmp_ps(a.v, b.v, _CMP_LT_OQ)};
}
inline VecM And(VecM a, VecM b) {
  return {_mm256_and_ps(a.m, b.m)};
}
inline VecF Select(VecM m, VecF a, VecF b) {
  return {_mm256_blendv_ps(b.v, a.v, m.m)};
}
inline VecF Min(VecF a, VecF b) {
  return {_mm256_min_ps(a.v, b.v)};
}
inline VecF RoundNearest(VecF a) {
  return {_mm256_round_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
}
// p * 2^n for integral n (added to the exponent bits).
inline VecF Ldexp(VecF p, VecF n) {
  const __m256i bits = _mm256_slli_epi32(_mm256_cvtps_epi32(n.v), 23);
  return {_mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p.v), bits))};
}

// Whole-register integer operations (bytes, 16- and 32-bit lanes) for the interleaved tiles.
inline VecI ZeroI() {
  return {_mm256_setzero_si256()};
}
inline void StoreRaw(uint8_t* p, VecI a) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), a.v);
}
inline VecI LoadRaw(const uint8_t* p) {
  return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))};
}
// 16 bytes repeated in every 128-bit lane (a table for Lut16).
inline VecI Table16(const uint8_t* t) {
  return {_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t)))};
}
// Per byte: the table byte indexed by its low 4 bits (indices 0..15).
inline VecI Lut16(VecI table, VecI idx) {
  return {_mm256_shuffle_epi8(table.v, idx.v)};
}
// kLanes uint16 values, zero-extended to the lanes.
inline VecI LoadU16(const uint8_t* p) {
  return {_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))};
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
  return {_mm256_castsi256_ps(a.v)};
}
inline VecI Set1I8(int8_t a) {
  return {_mm256_set1_epi8(a)};
}
inline VecI XorI(VecI a, VecI b) {
  return {_mm256_xor_si256(a.v, b.v)};
}
inline VecI Sub8(VecI a, VecI b) {
  return {_mm256_sub_epi8(a.v, b.v)};
}
// |w| per byte, and x with w's sign per byte (0 where w is 0): the sign trick's operands.
inline VecI Abs8(VecI w) {
  return {_mm256_abs_epi8(w.v)};
}
inline VecI Sign8(VecI x, VecI w) {
  return {_mm256_sign_epi8(x.v, w.v)};
}
inline VecI SubI(VecI a, VecI b) {
  return {_mm256_sub_epi32(a.v, b.v)};
}
inline VecI Srl16(VecI a, int n) {
  return {_mm256_srli_epi16(a.v, n)};
}
inline VecI Sll16(VecI a, int n) {
  return {_mm256_slli_epi16(a.v, n)};
}
inline VecI Srl32(VecI a, int n) {
  return {_mm256_srli_epi32(a.v, n)};
}
// Bytes of each 128-bit lane picked by idx (vpshufb; an index with its top bit set gives 0).
inline VecI Shuffle8(VecI a, VecI idx) {
  return {_mm256_shuffle_epi8(a.v, idx.v)};
}
// Per 32-bit lane: a.lo16 * b.lo16 + a.hi16 * b.hi16, the words signed (vpmaddwd).
inline VecI MulAddPairs16(VecI a, VecI b) {
  return {_mm256_madd_epi16(a.v, b.v)};
}
// Per 32-bit lane: lo's low word | hi's low word << 16.
inline VecI PackLoHi16(VecI lo, VecI hi) {
  return {_mm256_blend_epi16(lo.v, _mm256_slli_epi32(hi.v, 16), 0xAA)};
}
inline VecI Sra32(VecI a, int n) {
  return {_mm256_srai_epi32(a.v, n)};
}
// acc (int32 lanes) += the 4 products u8 x s8 of each lane: maddubs + madd (exact while each
// pair of products stays within int16: |u8| <= 128, or u8 <= 255 with |s8| <= 64).
inline VecI DotU8S8(VecI acc, VecI u8, VecI s8) {
  const __m256i p = _mm256_maddubs_epi16(u8.v, s8.v);
  return {_mm256_add_epi32(acc.v, _mm256_madd_epi16(p, _mm256_set1_epi16(1)))};
}
// acc += u8 . (the 4 signed bytes at x in every lane).
inline VecI DotU8S8Bcast(VecI acc, VecI u8, const int8_t* x) {
  int32_t v;
  std::memcpy(&v, x, sizeof v);
  return DotU8S8(acc, u8, {_mm256_set1_epi32(v)});
}
// 8-bit interleaved quants are stored + 128: (w + 128) x s8 pairs would overflow maddubs'
// int16, so the quants are made signed again and multiplied through the sign trick (no zero
// point left for the epilogue).
inline VecI DotOffset8(VecI acc, VecI w_stored, VecI x) {
  const __m256i w = _mm256_xor_si256(w_stored.v, _mm256_set1_epi8(static_cast<char>(0x80)));
  return DotU8S8(acc, {_mm256_abs_epi8(w)}, {_mm256_sign_epi8(x.v, w)});
}
constexpr float kOffset8Zero = 0.0f;
inline VecI DotOffset8Bcast(VecI acc, VecI w_stored, const int8_t* x) {
  int32_t v;
  std::memcpy(&v, x, sizeof v);
  return DotOffset8(acc, w_stored, {_mm256_set1_epi32(v)});
}
// Without VNNI a dot product is maddubs (u8 x s8 pairs to int16) + madd (pairs to int32) + add.
// Where the pair sums stay small (4-bit quants: 2 x 15 x 127 per pair, 8 of them within int16)
// the tile adds maddubs results in int16 and widens once per block: 2 instructions per 32
// products instead of 3, the same exact sums.
constexpr bool kInt16Sums = true;
inline VecI MulPairs16(VecI u8, VecI s8) {
  return {_mm256_maddubs_epi16(u8.v, s8.v)};
}
inline VecI Add16(VecI a, VecI b) {
  return {_mm256_add_epi16(a.v, b.v)};
}
// acc (int32 lanes) += the two int16 sums of each lane.
inline VecI WidenPairs16(VecI acc, VecI p16) {
  return {_mm256_add_epi32(acc.v, _mm256_madd_epi16(p16.v, _mm256_set1_epi16(1)))};
}
// One int32 chain per token (16 registers leave no room for a second).
constexpr int kX16SplitTokens = 0;
// Blocks per chunk of the interleaved kernels' half-alternating loop (gemm_x16.cpp's X16Tile):
// both 8-row halves of a chunk are computed before the next chunk is read.
constexpr int kX16ChunkBlocks = 2;

// Float GEMM register tile: rows per tile (2 x 4 tokens of 256-bit accumulators).
constexpr int kFloatRows = 2;
// Tokens per float-GEMM tile (gemm_float.cpp): 2 x 4 accumulators of the 16 registers.
constexpr int kFloatTokens = 4;
// No block dot products of the ISA's own here (NEON has them: vec_neon.h).
constexpr bool kIsaBlocks = false;
constexpr bool X16IsaBlockKind(X16Kind) {
  return false;
}
// Tokens per register tile of the interleaved integer kernels.
constexpr int X16MaxTile(X16Kind) {
  return 4;
}
#define PADDOCK_X16_TILES_HEADER "kernels/simd/x16_sparse_avx2.h"

// 8 int32 lanes += u8 x s8 products of 32 bytes (4 per lane): maddubs + madd (safe from int16
// saturation for |u8| <= 128 and |s8| <= 127).
inline __m256i DpBusd(__m256i acc, __m256i u8, __m256i s8) {
  const __m256i p = _mm256_maddubs_epi16(u8, s8);
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}
inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Final reduction of the even/odd-block accumulators (see vec_avx512.h).
inline float ReducePair(__m256 acc0, __m256 acc1) {
  return HorizontalSum(_mm256_add_ps(acc0, acc1));
}
// Q4_0 nibbles as 32 unsigned bytes in element order (low nibbles: 0..15, high: 16..31).
inline __m256i UnpackQ4(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(15);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m), _mm_and_si128(raw, m));
}
// Runs `iters` iterations of 8 independent int8 dot-product instructions; returns the int8
// operations done (multiply + add = 2): the machine's integer peak, for benchmarks.
// The fastest exact int8 dot product this ISA has: maddubs summed in int16 (kInt16Sums), one
// widening per 8 (the wrap of the probe's constant operands is irrelevant to its timing).
inline int64_t DotProductPeak(int64_t iters) {
  __m256i a[8], v[8];
  for (int k = 0; k < 8; ++k) {
    a[k] = _mm256_set1_epi32(k);
    v[k] = _mm256_set1_epi8(static_cast<char>(k - 4));
  }
  __m256i u = _mm256_set1_epi8(3);
  const __m256i one = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < iters; i += 8) {
    __m256i s[8];
    for (int k = 0; k < 8; ++k) s[k] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      __asm__("" : "+x"(u));  // opaque: the products cannot be hoisted or shared
      for (int k = 0; k < 8; ++k) s[k] = _mm256_add_epi16(s[k], _mm256_maddubs_epi16(u, v[k]));
    }
    for (int k = 0; k < 8; ++k) a[k] = _mm256_add_epi32(a[k], _mm256_madd_epi16(s[k], one));
  }
  __m256i s = a[0];
  for (int k = 1; k < 8; ++k) s = _mm256_add_epi32(s, a[k]);
  volatile int sink = _mm256_extract_epi32(s, 0);
  (void)sink;
  return iters * 8 * 32 * 2;
}

}  // namespace PADDOCK_ISA_NS
}  // namespace paddock
