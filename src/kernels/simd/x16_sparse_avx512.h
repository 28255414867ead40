// kernels/simd/x16_sparse_avx512.h: the AVX-512 VNNI register tile of the 2:4 sparse int8 layout
// (PS8_C), included by gemm_x16.cpp inside its namespace. The two ISAs' tiles differ in method, not
// only in width: activations enter as unsigned bytes (a + 128) with VNNI.

// 2:4 sparse int8 (PS8_C): per 8 elements of a row, the 4 stored values meet the 4 activations
// they multiply, picked out of the 8 by a byte shuffle whose indices are expanded from the
// stored 4-bit pair codes (shared by all tokens of the tile): half the multiply-adds of dense
// int8, and 5.5 bits per weight instead of 8.
inline void SparseStepIndices(int step, __m512i codes, __m512i* idx) {
  const __m512i rep = _mm512_broadcast_i32x4(
      _mm_setr_epi8(step, step, step, step, 4 + step, 4 + step, 4 + step, 4 + step, 8 + step,
                    8 + step, 8 + step, 8 + step, 12 + step, 12 + step, 12 + step, 12 + step));
  __m512i r = _mm512_shuffle_epi8(codes, rep);           // lane's code byte x 4
  r = _mm512_srlv_epi16(r, _mm512_set1_epi32(4 << 16));  // bytes 2, 3: high nibble
  r = _mm512_and_si512(r, _mm512_set1_epi8(15));
  r = _mm512_add_epi8(r, _mm512_set1_epi32(0x08000800));  // odd bytes: second of the pair
  const __m512i lut =
      _mm512_broadcast_i32x4(_mm_setr_epi8(0, 0, 0, 1, 1, 2, 0, 0, 1, 2, 3, 2, 3, 3, 0, 0));
  *idx = _mm512_add_epi8(_mm512_shuffle_epi8(lut, r),
                         _mm512_set1_epi32(0x04040000));  // group 2s + 1: +4
}

template <int T>
void SparseTile(const uint8_t* grp, int64_t cols, const int8_t* xq, const float* xd, float* y,
                int64_t ldy) {
  const int64_t nb = cols / kQK;
  const __m512 row_scale = _mm512_loadu_ps(reinterpret_cast<const float*>(grp));
  const uint8_t* p = grp + 64;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 facc[T];
  for (int t = 0; t < T; ++t) facc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, p += kSparse.block) {
    // Activations enter as unsigned (a + 128): start from -128 x the lane's stored-quant sum.
    const __m512i init = _mm512_sub_epi32(
        _mm512_setzero_si512(),
        _mm512_slli_epi32(
            _mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 7));
    __m512i acc[T];
    for (int t = 0; t < T; ++t) acc[t] = init;
    const __m512i codes = _mm512_loadu_si512(p + kSparse.extra);
    const int8_t* xb = xq + b * kQK;
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {
      __m512i idx;
      SparseStepIndices(s, codes, &idx);
      const __m512i w = _mm512_loadu_si512(p + kSparse.quants + 64 * s);
      for (int t = 0; t < T; ++t) {
        int64_t a8;
        std::memcpy(&a8, xb + t * cols + 8 * s, 8);
        const __m512i a = _mm512_xor_si512(_mm512_set1_epi64(a8), flip);
        acc[t] = _mm512_dpbusd_epi32(acc[t], _mm512_shuffle_epi8(a, idx), w);
      }
    }
    for (int t = 0; t < T; ++t)
      facc[t] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t]), _mm512_set1_ps(xd[t * nb + b]), facc[t]);
  }
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * ldy, _mm512_mul_ps(facc[t], row_scale));
}
