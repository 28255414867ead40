// kernels/simd_vec.h: a minimal float-vector abstraction so that simd.cpp is written once and
// compiled per instruction set. Only what the kernels need; every function is inline.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace paddock {
namespace PADDOCK_ISA_NS {

#if defined(__AVX512F__)
struct VecF {
  __m512 v;
};
constexpr int kLanes = 16;
inline VecF Zero() { return {_mm512_setzero_ps()}; }
inline VecF Set1(float a) { return {_mm512_set1_ps(a)}; }
inline VecF Load(const float* p) { return {_mm512_loadu_ps(p)}; }
inline void Store(float* p, VecF a) { _mm512_storeu_ps(p, a.v); }
inline VecF Add(VecF a, VecF b) { return {_mm512_add_ps(a.v, b.v)}; }
inline VecF Sub(VecF a, VecF b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline VecF Mul(VecF a, VecF b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline VecF Max(VecF a, VecF b) { return {_mm512_max_ps(a.v, b.v)}; }
inline VecF Fma(VecF a, VecF b, VecF c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
inline float ReduceAdd(VecF a) { return _mm512_reduce_add_ps(a.v); }
inline float ReduceMax(VecF a) { return _mm512_reduce_max_ps(a.v); }
inline VecF LoadF16(const uint16_t* p) {
  return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
}
inline VecF LoadBf16(const uint16_t* p) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return {_mm512_castsi512_ps(_mm512_slli_epi32(w, 16))};
}
inline VecF LoadI8(const int8_t* p) {
  return {_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))))};
}
// Integer lanes, for unpacking quantized weights in registers (writing unpacked values to
// memory and reloading them as a vector stalls on store forwarding).
struct VecI {
  __m512i v;
};
inline VecI LoadU8(const uint8_t* p) {  // kLanes bytes, zero-extended
  return {_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))};
}
inline VecI SetI(int32_t a) { return {_mm512_set1_epi32(a)}; }
inline VecI LaneIndex() { return {_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)}; }
inline VecI AddI(VecI a, VecI b) { return {_mm512_add_epi32(a.v, b.v)}; }
inline VecI AndI(VecI a, VecI b) { return {_mm512_and_si512(a.v, b.v)}; }
inline VecI OrI(VecI a, VecI b) { return {_mm512_or_si512(a.v, b.v)}; }
inline VecI ShrV(VecI a, VecI s) { return {_mm512_srlv_epi32(a.v, s.v)}; }
inline VecI ShlV(VecI a, VecI s) { return {_mm512_sllv_epi32(a.v, s.v)}; }
inline VecF ToFloat(VecI a) { return {_mm512_cvtepi32_ps(a.v)}; }
// Lane masks (comparisons, selection).
struct VecM {
  __mmask16 m;
};
inline VecF Div(VecF a, VecF b) { return {_mm512_div_ps(a.v, b.v)}; }
inline VecM CmpGe(VecF a, VecF b) { return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_GE_OQ)}; }
inline VecM CmpLt(VecF a, VecF b) { return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_LT_OQ)}; }
inline VecM And(VecM a, VecM b) { return {static_cast<__mmask16>(a.m & b.m)}; }
inline VecF Select(VecM m, VecF a, VecF b) { return {_mm512_mask_blend_ps(m.m, b.v, a.v)}; }
#else  // AVX2 + FMA + F16C
struct VecF {
  __m256 v;
};
constexpr int kLanes = 8;
inline VecF Zero() { return {_mm256_setzero_ps()}; }
inline VecF Set1(float a) { return {_mm256_set1_ps(a)}; }
inline VecF Load(const float* p) { return {_mm256_loadu_ps(p)}; }
inline void Store(float* p, VecF a) { _mm256_storeu_ps(p, a.v); }
inline VecF Add(VecF a, VecF b) { return {_mm256_add_ps(a.v, b.v)}; }
inline VecF Sub(VecF a, VecF b) { return {_mm256_sub_ps(a.v, b.v)}; }
inline VecF Mul(VecF a, VecF b) { return {_mm256_mul_ps(a.v, b.v)}; }
inline VecF Max(VecF a, VecF b) { return {_mm256_max_ps(a.v, b.v)}; }
inline VecF Fma(VecF a, VecF b, VecF c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; }
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
inline VecF LoadF16(const uint16_t* p) {
  return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))};
}
inline VecF LoadBf16(const uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return {_mm256_castsi256_ps(_mm256_slli_epi32(w, 16))};
}
inline VecF LoadI8(const int8_t* p) {
  return {_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))))};
}
struct VecI {
  __m256i v;
};
inline VecI LoadU8(const uint8_t* p) {
  return {_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))};
}
inline VecI SetI(int32_t a) { return {_mm256_set1_epi32(a)}; }
inline VecI LaneIndex() { return {_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)}; }
inline VecI AddI(VecI a, VecI b) { return {_mm256_add_epi32(a.v, b.v)}; }
inline VecI AndI(VecI a, VecI b) { return {_mm256_and_si256(a.v, b.v)}; }
inline VecI OrI(VecI a, VecI b) { return {_mm256_or_si256(a.v, b.v)}; }
inline VecI ShrV(VecI a, VecI s) { return {_mm256_srlv_epi32(a.v, s.v)}; }
inline VecI ShlV(VecI a, VecI s) { return {_mm256_sllv_epi32(a.v, s.v)}; }
inline VecF ToFloat(VecI a) { return {_mm256_cvtepi32_ps(a.v)}; }
struct VecM {
  __m256 m;
};
inline VecF Div(VecF a, VecF b) { return {_mm256_div_ps(a.v, b.v)}; }
inline VecM CmpGe(VecF a, VecF b) { return {_mm256_cmp_ps(a.v, b.v, _CMP_GE_OQ)}; }
inline VecM CmpLt(VecF a, VecF b) { return {_mm256_cmp_ps(a.v, b.v, _CMP_LT_OQ)}; }
inline VecM And(VecM a, VecM b) { return {_mm256_and_ps(a.m, b.m)}; }
inline VecF Select(VecM m, VecF a, VecF b) { return {_mm256_blendv_ps(b.v, a.v, m.m)}; }
#endif

}  // namespace PADDOCK_ISA_NS
}  // namespace paddock
