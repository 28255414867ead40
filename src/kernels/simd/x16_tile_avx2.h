// kernels/simd/x16_tile_avx2.h: the AVX2 register tiles of the interleaved layouts (included
// by gemm_x16.cpp inside its namespace).

constexpr X16Layout kSparse = X16LayoutOf(X16Kind::kS8C);
constexpr X16Layout kQ6K = X16LayoutOf(X16Kind::kQ6K);

// AVX2 form of the 2:4 sparse int8 tile (see the AVX-512 one): 8-row halves, signed products
// through the sign trick (no zero point).
template <int T>
void SparseTile(const uint8_t* grp, int64_t cols, const int8_t* xq, const float* xd, float* y, int64_t ldy) {
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
      const __m256i codes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + kSparse.extra + 32 * h));
      const int8_t* xb = xq + b * kQK;
      for (int s = 0; s < 4; ++s) {
        const __m256i rep = _mm256_broadcastsi128_si256(_mm_setr_epi8(s, s, s, s, 4 + s, 4 + s, 4 + s, 4 + s, 8 + s, 8 + s, 8 + s, 8 + s,
                                                                      12 + s, 12 + s, 12 + s, 12 + s));
        __m256i r = _mm256_shuffle_epi8(codes, rep);
        // bytes 2, 3 take the high nibble: shift those words by 4
        r = _mm256_blend_epi16(r, _mm256_srli_epi16(r, 4), 0xAA);
        r = _mm256_and_si256(r, _mm256_set1_epi8(15));
        r = _mm256_add_epi8(r, _mm256_set1_epi32(0x08000800));
        const __m256i idx = _mm256_add_epi8(_mm256_shuffle_epi8(_mm256_broadcastsi128_si256(lut), r), _mm256_set1_epi32(0x04040000));
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + kSparse.quants + 64 * s + 32 * h));
        const __m256i wa = _mm256_abs_epi8(w);
        for (int t = 0; t < T; ++t) {
          int64_t a8;
          std::memcpy(&a8, xb + t * cols + 8 * s, 8);
          const __m256i a = _mm256_shuffle_epi8(_mm256_set1_epi64x(a8), idx);
          acc[t] = DpBusd(acc[t], wa, _mm256_sign_epi8(a, w));
        }
      }
      for (int t = 0; t < T; ++t) facc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[t]), _mm256_set1_ps(xd[t * nb + b]), facc[t]);
    }
    for (int t = 0; t < T; ++t) _mm256_storeu_ps(y + t * ldy + 8 * h, _mm256_mul_ps(facc[t], row_scale));
  }
}

// Q6_K block (see the AVX-512 form), rows 8h..8h+7. (a + 128) * (q - 32) pairs stay within
// maddubs' int16 range.
template <int T>
inline void Q6KBlock(const uint8_t* p, int h, const int8_t* xb, int64_t cols, const float* xd, int64_t nb,
                     __m256 s_lo, __m256 s_hi, __m256* facc) {
  const __m256i m4 = _mm256_set1_epi8(15), top = _mm256_set1_epi8(0x30), k32 = _mm256_set1_epi8(32),
                k128 = _mm256_set1_epi8(static_cast<char>(0x80));
  const __m256i h0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + kQ6K.extra + 32 * h));
  const __m256i h1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + kQ6K.extra + 64 + 32 * h));
  __m256i acc[T], acc2[T];
  for (int t = 0; t < T; ++t) acc[t] = acc2[t] = _mm256_setzero_si256();
  __m256i c_lo = _mm256_setzero_si256(), c_hi = c_lo;
  for (int m = 0; m < 4; ++m) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 * m + 32 * h));
    const __m256i hb0 = m == 3 ? _mm256_srli_epi16(h0, 2) : _mm256_slli_epi16(h0, 4 - 2 * m);
    const __m256i hb1 = m == 3 ? _mm256_srli_epi16(h1, 2) : _mm256_slli_epi16(h1, 4 - 2 * m);
    const __m256i wl = _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(v, m4), _mm256_and_si256(hb0, top)), k32);
    const __m256i wh = _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), _mm256_and_si256(hb1, top)), k32);
    c_lo = DpBusd(c_lo, k128, wl);
    c_hi = DpBusd(c_hi, k128, wh);
    for (int t = 0; t < T; ++t) {
      const int8_t* xt = xb + t * cols;
      acc[t] = DpBusd(acc[t], _mm256_set1_epi32(Load32(xt + 4 * m) ^ static_cast<int32_t>(0x80808080u)), wl);
      acc2[t] = DpBusd(acc2[t], _mm256_set1_epi32(Load32(xt + 16 + 4 * m) ^ static_cast<int32_t>(0x80808080u)), wh);
    }
  }
  for (int t = 0; t < T; ++t) {
    const __m256 f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(acc[t], c_lo)), s_lo,
                                     _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(acc2[t], c_hi)), s_hi));
    facc[t] = _mm256_fmadd_ps(f, _mm256_set1_ps(xd[t * nb]), facc[t]);
  }
}

// AVX2: the group as two 8-row halves, each a 256-bit half of every 64-byte vector. 8-bit
// offset quants would overflow maddubs' int16 pairs, so they are turned back into signed
// values and multiplied through the sign trick (no zero point left).
template <X16Kind K, int G, int T, bool kPf>
void X16Tile(const uint8_t* grp, int64_t cols, const int8_t* xq, const float* xd, const float* xds,
             float* y, int64_t ldy) {
  constexpr int BPS = G / kQK;
  const int64_t nb = cols / kQK;
  const __m256i m4 = _mm256_set1_epi8(15), flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int h = 0; h < 2; ++h) {
    const uint8_t* p = grp;
    __m256 row_scale = _mm256_setzero_ps();
    if constexpr (K == X16Kind::kQ8C) {
      row_scale = _mm256_loadu_ps(reinterpret_cast<const float*>(p) + 8 * h);
      p += 64;
    }
    __m256 facc[T];
    for (int t = 0; t < T; ++t) facc[t] = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += BPS) {
      __m256 sw = _mm256_setzero_ps(), mw = _mm256_setzero_ps(), dv = _mm256_setzero_ps(), ndmin = dv;
      __m256i sc_lo = _mm256_setzero_si256(), sc_hi = sc_lo, mn_lo = sc_lo, mn_hi = sc_lo;
      if constexpr (IsK(K)) {  // see the AVX-512 form
        dv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * h)));
        ndmin = _mm256_sub_ps(_mm256_setzero_ps(), _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 32 + 16 * h))));
        const __m256i u0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 + 32 * h));
        const __m256i u1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 128 + 32 * h));
        const __m256i u2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 192 + 32 * h));
        const __m256i m6 = _mm256_set1_epi8(63), m4b = _mm256_set1_epi8(15), top = _mm256_set1_epi8(0x30);
        sc_lo = _mm256_and_si256(u0, m6);
        mn_lo = _mm256_and_si256(u1, m6);
        sc_hi = _mm256_or_si256(_mm256_and_si256(u2, m4b), _mm256_and_si256(_mm256_srli_epi32(u0, 2), top));
        mn_hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u2, 4), m4b), _mm256_and_si256(_mm256_srli_epi32(u1, 2), top));
      } else if constexpr (K == X16Kind::kQ6K) {
        dv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * h)));
      } else {
        if constexpr (K != X16Kind::kQ8C) sw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * h)));
        if constexpr (HasMin(K)) mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 32 + 16 * h)));
      }
      const uint8_t* hdr = p;
      p += X16LayoutOf(K).header;
      for (int bi = 0; bi < BPS; ++bi, p += X16LayoutOf(K).block) {
        const int64_t b = b0 + bi;
        const int8_t* xb = xq + b * kQK;
        if (h == 0) PrefetchWeights<K, kPf>(p);
        if constexpr (K == X16Kind::kQ6K) {
          const __m256i sv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hdr + 32 + 64 * (bi / 2) + 32 * h));
          const __m256i shl_lo = _mm256_set1_epi32(24 - 16 * (bi % 2)), shl_hi = _mm256_set1_epi32(16 - 16 * (bi % 2));
          const __m256 s_lo = _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_sllv_epi32(sv, shl_lo), 24)));
          const __m256 s_hi = _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_sllv_epi32(sv, shl_hi), 24)));
          Q6KBlock<T>(p, h, xb, cols, xd + b, nb, s_lo, s_hi, facc);
          continue;
        }
        if constexpr (IsK(K)) {
          const __m256i shift = _mm256_set1_epi32(8 * (bi % 4)), byte = _mm256_set1_epi32(255);
          sw = _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(bi < 4 ? sc_lo : sc_hi, shift), byte)));
          mw = _mm256_mul_ps(ndmin, _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(bi < 4 ? mn_lo : mn_hi, shift), byte)));
        }
        __m256i acc[T];
        for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_si256();
        if constexpr (IsQ4(K)) {
          __m256i q5 = _mm256_setzero_si256();
          if constexpr (IsQ5(K)) q5 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + kQ6K.extra + 32 * h));
          for (int m = 0; m < 4; ++m) {
            const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 * m + 32 * h));
            __m256i lo = _mm256_and_si256(v, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            if constexpr (IsQ5(K)) {
              const __m256i b4 = _mm256_set1_epi8(16);
              lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(q5, 4 - m), b4));
              hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_srli_epi16(q5, m), b4));
            }
            for (int t = 0; t < T; ++t) {
              const int8_t* xt = xb + t * cols;
              acc[t] = DpBusd(acc[t], lo, _mm256_set1_epi32(Load32(xt + 4 * m)));
              acc[t] = DpBusd(acc[t], hi, _mm256_set1_epi32(Load32(xt + 16 + 4 * m)));
            }
          }
        } else {
          for (int g = 0; g < 8; ++g) {
            const __m256i v = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 * g + 32 * h)), flip);
            const __m256i va = _mm256_abs_epi8(v);
            for (int t = 0; t < T; ++t) {
              const __m256i xv = _mm256_set1_epi32(Load32(xb + t * cols + 4 * g));
              acc[t] = DpBusd(acc[t], va, _mm256_sign_epi8(xv, v));
            }
          }
        }
        for (int t = 0; t < T; ++t) {
          const __m256 f = _mm256_cvtepi32_ps(acc[t]);
          const float d = xd[t * nb + b], ds = xds[t * nb + b];
          if constexpr (HasMin(K)) {
            facc[t] = _mm256_fmadd_ps(_mm256_mul_ps(f, _mm256_set1_ps(d)), sw, facc[t]);
            facc[t] = _mm256_fmadd_ps(mw, _mm256_set1_ps(ds), facc[t]);
          } else if constexpr (K == X16Kind::kQ4S || K == X16Kind::kQ5S) {
            facc[t] = _mm256_fmadd_ps(_mm256_fmadd_ps(f, _mm256_set1_ps(d), _mm256_set1_ps((K == X16Kind::kQ5S ? -16.0f : -8.0f) * ds)), sw, facc[t]);
          } else if constexpr (K == X16Kind::kQ8B) {
            facc[t] = _mm256_fmadd_ps(_mm256_mul_ps(f, _mm256_set1_ps(d)), sw, facc[t]);
          } else {
            facc[t] = _mm256_fmadd_ps(f, _mm256_set1_ps(d), facc[t]);
          }
        }
      }
    }
    for (int t = 0; t < T; ++t) {
      if constexpr (K == X16Kind::kQ8C) facc[t] = _mm256_mul_ps(facc[t], row_scale);
      _mm256_storeu_ps(y + t * ldy + 8 * h, facc[t]);
    }
  }
}
