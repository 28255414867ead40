// kernels/simd/x16_sparse_avx2.h: the AVX2 register tile of the 2:4 sparse int8 layout (PS8_C),
// included by gemm_x16.cpp inside its namespace. The two ISAs' tiles differ in method, not
// only in width: maddubs cannot take (a + 128) x w pairs, so the sign trick.

// AVX2 form of the 2:4 sparse int8 tile (see the AVX-512 one): 8-row halves, signed products
// through the sign trick (no zero point).
template <int T>
void SparseTile(const uint8_t* grp, int64_t cols, const int8_t* xq, const float* xd, float* y,
                int64_t ldy) {
  const int64_t nb = cols / kQK;
  const __m128i lut = _mm_setr_epi8(0, 0, 0, 1, 1, 2, 0, 0, 1, 2, 3, 2, 3, 3, 0, 0);
  for (int h = 0; h < 2; ++h) {
    const __m256 row_scale = _mm256_loadu_ps(reinterpret_cast<const float*>(grp) + 8 * h);
    const uint8_t* p = grp + 64;
    __m256 facc[T];
    for (int t = 0; t < T; ++t) facc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b, p += kSparse.block) {
      __m256i acc[T];
      for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_si256();
      const __m256i codes =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + kSparse.extra + 32 * h));
      const int8_t* xb = xq + b * kQK;
      for (int s = 0; s < 4; ++s) {
        const __m256i rep = _mm256_broadcastsi128_si256(
            _mm_setr_epi8(s, s, s, s, 4 + s, 4 + s, 4 + s, 4 + s, 8 + s, 8 + s, 8 + s, 8 + s,
                          12 + s, 12 + s, 12 + s, 12 + s));
        __m256i r = _mm256_shuffle_epi8(codes, rep);
        // bytes 2, 3 take the high nibble: shift those words by 4
        r = _mm256_blend_epi16(r, _mm256_srli_epi16(r, 4), 0xAA);
        r = _mm256_and_si256(r, _mm256_set1_epi8(15));
        r = _mm256_add_epi8(r, _mm256_set1_epi32(0x08000800));
        const __m256i idx =
            _mm256_add_epi8(_mm256_shuffle_epi8(_mm256_broadcastsi128_si256(lut), r),
                            _mm256_set1_epi32(0x04040000));
        const __m256i w = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(p + kSparse.quants + 64 * s + 32 * h));
        const __m256i wa = _mm256_abs_epi8(w);
        for (int t = 0; t < T; ++t) {
          int64_t a8;
          std::memcpy(&a8, xb + t * cols + 8 * s, 8);
          const __m256i a = _mm256_shuffle_epi8(_mm256_set1_epi64x(a8), idx);
          acc[t] = DpBusd(acc[t], wa, _mm256_sign_epi8(a, w));
        }
      }
      for (int t = 0; t < T; ++t)
        facc[t] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[t]), _mm256_set1_ps(xd[t * nb + b]), facc[t]);
    }
    for (int t = 0; t < T; ++t)
      _mm256_storeu_ps(y + t * ldy + 8 * h, _mm256_mul_ps(facc[t], row_scale));
  }
}
