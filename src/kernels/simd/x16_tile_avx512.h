// kernels/simd/x16_tile_avx512.h: the AVX-512 VNNI register tiles of the interleaved layouts
// (included by gemm_x16.cpp inside its namespace).

constexpr X16Layout kSparse = X16LayoutOf(X16Kind::kS8C);
constexpr X16Layout kQ6K = X16LayoutOf(X16Kind::kQ6K);

// 2:4 sparse int8 (PS8_C): per 8 elements of a row, the 4 stored values meet the 4 activations
// they multiply, picked out of the 8 by a byte shuffle whose indices are expanded from the
// stored 4-bit pair codes (shared by all tokens of the tile): half the multiply-adds of dense
// int8, and 5.5 bits per weight instead of 8.
inline void SparseStepIndices(int step, __m512i codes, __m512i* idx) {
  const __m512i rep = _mm512_broadcast_i32x4(_mm_setr_epi8(step, step, step, step, 4 + step, 4 + step, 4 + step, 4 + step, 8 + step, 8 + step,
                                                           8 + step, 8 + step, 12 + step, 12 + step, 12 + step, 12 + step));
  __m512i r = _mm512_shuffle_epi8(codes, rep);                        // lane's code byte x 4
  r = _mm512_srlv_epi16(r, _mm512_set1_epi32(4 << 16));              // bytes 2, 3: high nibble
  r = _mm512_and_si512(r, _mm512_set1_epi8(15));
  r = _mm512_add_epi8(r, _mm512_set1_epi32(0x08000800));             // odd bytes: second of the pair
  const __m512i lut = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 0, 0, 1, 1, 2, 0, 0, 1, 2, 3, 2, 3, 3, 0, 0));
  *idx = _mm512_add_epi8(_mm512_shuffle_epi8(lut, r), _mm512_set1_epi32(0x04040000));  // group 2s + 1: +4
}

template <int T>
void SparseTile(const uint8_t* grp, int64_t cols, const int8_t* xq, const float* xd, float* y, int64_t ldy) {
  const int64_t nb = cols / kQK;
  const __m512 row_scale = _mm512_loadu_ps(reinterpret_cast<const float*>(grp));
  const uint8_t* p = grp + 64;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 facc[T];
  for (int t = 0; t < T; ++t) facc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, p += kSparse.block) {
    // Activations enter as unsigned (a + 128): start from -128 x the lane's stored-quant sum.
    const __m512i init = _mm512_sub_epi32(_mm512_setzero_si512(),
        _mm512_slli_epi32(_mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 7));
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
    for (int t = 0; t < T; ++t) facc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t]), _mm512_set1_ps(xd[t * nb + b]), facc[t]);
  }
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * ldy, _mm512_mul_ps(facc[t], row_scale));
}

// One Q6_K 32-element block of a 16-row group for T tokens. The 6-bit quants are rebuilt
// (low nibbles | high 2 bits << 4) and made signed (q - 32); the activations enter as unsigned
// bytes (a + 128), and 128 x each lane's quant sum (shared by all tokens) is taken back out.
// The first and second 16 elements have their own scales (s_lo, s_hi, times d).
template <int T>
inline void Q6KBlock(const uint8_t* p, const int8_t* xb, int64_t cols, const float* xd, int64_t nb,
                     __m512 s_lo, __m512 s_hi, __m512* facc) {
  const __m512i m4 = _mm512_set1_epi8(15), top = _mm512_set1_epi8(0x30), k32 = _mm512_set1_epi8(32),
                k128 = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i h0 = _mm512_loadu_si512(p + kQ6K.extra), h1 = _mm512_loadu_si512(p + kQ6K.extra + 64);
  __m512i acc[T], acc2[T];
  for (int t = 0; t < T; ++t) acc[t] = acc2[t] = _mm512_setzero_si512();
  __m512i c_lo = _mm512_setzero_si512(), c_hi = c_lo;
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {
    const __m512i v = _mm512_loadu_si512(p + 64 * m);
    // high bits 2m..2m+1 of each byte moved to bits 4..5
    const __m512i hb0 = m == 3 ? _mm512_srli_epi16(h0, 2) : _mm512_slli_epi16(h0, 4 - 2 * m);
    const __m512i hb1 = m == 3 ? _mm512_srli_epi16(h1, 2) : _mm512_slli_epi16(h1, 4 - 2 * m);
    const __m512i wl = _mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(v, m4), _mm512_and_si512(hb0, top)), k32);
    const __m512i wh = _mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), _mm512_and_si512(hb1, top)), k32);
    c_lo = _mm512_dpbusd_epi32(c_lo, k128, wl);
    c_hi = _mm512_dpbusd_epi32(c_hi, k128, wh);
    for (int t = 0; t < T; ++t) {
      const int8_t* xt = xb + t * cols;
      acc[t] = _mm512_dpbusd_epi32(acc[t], _mm512_set1_epi32(Load32(xt + 4 * m) ^ static_cast<int32_t>(0x80808080u)), wl);
      acc2[t] = _mm512_dpbusd_epi32(acc2[t], _mm512_set1_epi32(Load32(xt + 16 + 4 * m) ^ static_cast<int32_t>(0x80808080u)), wh);
    }
  }
  for (int t = 0; t < T; ++t) {
    const __m512 f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[t], c_lo)), s_lo,
                                     _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc2[t], c_hi)), s_hi));
    facc[t] = _mm512_fmadd_ps(f, _mm512_set1_ps(xd[t * nb]), facc[t]);
  }
}

// One 16-row group x T tokens (token t's quants at xq + t * cols, scales at xd/xds + t * nb).
// G: elements per scale group.
template <X16Kind K, int G, int T, bool kPf>
void X16Tile(const uint8_t* grp, int64_t cols, const int8_t* xq, const float* xd, const float* xds,
             float* y, int64_t ldy) {
  constexpr bool kSplit = T <= 4;  // two int32 chains per token where few tokens hide latency
  constexpr int BPS = G / kQK;
  constexpr float kZero = K == X16Kind::kQ4S ? 8.0f : (K == X16Kind::kQ5S ? 16.0f : (HasMin(K) ? 0.0f : 128.0f));
  const int64_t nb = cols / kQK;
  const __m512i m4 = _mm512_set1_epi8(15);
  const uint8_t* p = grp;
  __m512 row_scale = _mm512_setzero_ps();
  if constexpr (K == X16Kind::kQ8C) {
    row_scale = _mm512_loadu_ps(reinterpret_cast<const float*>(p));
    p += 64;
  }
  __m512 facc[T];
  for (int t = 0; t < T; ++t) facc[t] = _mm512_setzero_ps();
  for (int64_t b0 = 0; b0 < nb; b0 += BPS) {
    __m512 sw = _mm512_setzero_ps(), mw = _mm512_setzero_ps(), dv = _mm512_setzero_ps(), ndmin = dv;
    __m512i sc_lo = _mm512_setzero_si512(), sc_hi = sc_lo, mn_lo = sc_lo, mn_hi = sc_lo;
    if constexpr (IsK(K)) {
      // d, -dmin, and the 6-bit scales / mins unpacked to bytes: sc_lo = sub-blocks 0..3 (byte
      // j of each lane), sc_hi = 4..7 (the k-quant packing, 16 lanes at once).
      dv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
      ndmin = _mm512_sub_ps(_mm512_setzero_ps(), _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32))));
      const __m512i u0 = _mm512_loadu_si512(p + 64), u1 = _mm512_loadu_si512(p + 128), u2 = _mm512_loadu_si512(p + 192);
      const __m512i m6 = _mm512_set1_epi8(63), m4b = _mm512_set1_epi8(15), top = _mm512_set1_epi8(0x30);
      sc_lo = _mm512_and_si512(u0, m6);
      mn_lo = _mm512_and_si512(u1, m6);
      sc_hi = _mm512_or_si512(_mm512_and_si512(u2, m4b), _mm512_and_si512(_mm512_srli_epi32(u0, 2), top));
      mn_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), m4b), _mm512_and_si512(_mm512_srli_epi32(u1, 2), top));
    } else if constexpr (K == X16Kind::kQ6K) {
      dv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    } else {
      if constexpr (K != X16Kind::kQ8C) sw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
      if constexpr (HasMin(K)) mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)));
    }
    const uint8_t* hdr = p;
    p += X16LayoutOf(K).header;
    for (int bi = 0; bi < BPS; ++bi, p += X16LayoutOf(K).block) {
      const int64_t b = b0 + bi;
      const int8_t* xb = xq + b * kQK;
      PrefetchWeights<K, kPf>(p);
      if constexpr (K == X16Kind::kQ6K) {
        // Sub-block scales 2 bi (first 16 elements) and 2 bi + 1, sign-extended from their bytes.
        const __m512i sv = _mm512_loadu_si512(hdr + 32 + 64 * (bi / 2));
        const __m512i shl_lo = _mm512_set1_epi32(24 - 16 * (bi % 2)), shl_hi = _mm512_set1_epi32(16 - 16 * (bi % 2));
        const __m512 s_lo = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_sllv_epi32(sv, shl_lo), 24)));
        const __m512 s_hi = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_sllv_epi32(sv, shl_hi), 24)));
        Q6KBlock<T>(p, xb, cols, xd + b, nb, s_lo, s_hi, facc);
        continue;
      }
      if constexpr (IsK(K)) {
        const __m512i shift = _mm512_set1_epi32(8 * (bi % 4)), byte = _mm512_set1_epi32(255);
        const __m512i sc = _mm512_and_si512(_mm512_srlv_epi32(bi < 4 ? sc_lo : sc_hi, shift), byte);
        const __m512i mn = _mm512_and_si512(_mm512_srlv_epi32(bi < 4 ? mn_lo : mn_hi, shift), byte);
        sw = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(sc));
        mw = _mm512_mul_ps(ndmin, _mm512_cvtepi32_ps(mn));
      }
      __m512i acc[T], acc2[T];
      for (int t = 0; t < T; ++t) acc[t] = acc2[t] = _mm512_setzero_si512();
      if constexpr (IsQ4(K)) {
        __m512i q5 = _mm512_setzero_si512();
        if constexpr (IsQ5(K)) q5 = _mm512_loadu_si512(p + X16LayoutOf(K).extra);
#pragma GCC unroll 4
        for (int m = 0; m < 4; ++m) {
          const __m512i v = _mm512_loadu_si512(p + 64 * m);
          __m512i lo = _mm512_and_si512(v, m4);
          __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
          if constexpr (IsQ5(K)) {  // 5th bits m (low half) and 4 + m (high half) to bit 4
            const __m512i b4 = _mm512_set1_epi8(16);
            lo = _mm512_or_si512(lo, _mm512_and_si512(_mm512_slli_epi16(q5, 4 - m), b4));
            hi = _mm512_or_si512(hi, _mm512_and_si512(_mm512_srli_epi16(q5, m), b4));
          }
          for (int t = 0; t < T; ++t) {
            const int8_t* xt = xb + t * cols;
            acc[t] = _mm512_dpbusd_epi32(acc[t], lo, _mm512_set1_epi32(Load32(xt + 4 * m)));
            __m512i& a2 = kSplit ? acc2[t] : acc[t];
            a2 = _mm512_dpbusd_epi32(a2, hi, _mm512_set1_epi32(Load32(xt + 16 + 4 * m)));
          }
        }
      } else {
#pragma GCC unroll 8
        for (int g = 0; g < 8; ++g) {
          const __m512i v = _mm512_loadu_si512(p + 64 * g);
          for (int t = 0; t < T; ++t) {
            __m512i& a = (kSplit && (g & 1)) ? acc2[t] : acc[t];
            a = _mm512_dpbusd_epi32(a, v, _mm512_set1_epi32(Load32(xb + t * cols + 4 * g)));
          }
        }
      }
      for (int t = 0; t < T; ++t) {
        const __m512 f = _mm512_cvtepi32_ps(kSplit ? _mm512_add_epi32(acc[t], acc2[t]) : acc[t]);
        const float d = xd[t * nb + b], ds = xds[t * nb + b];
        if constexpr (HasMin(K)) {
          facc[t] = _mm512_fmadd_ps(_mm512_mul_ps(f, _mm512_set1_ps(d)), sw, facc[t]);
          facc[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(ds), facc[t]);
        } else {
          const __m512 tmp = _mm512_fmadd_ps(f, _mm512_set1_ps(d), _mm512_set1_ps(-kZero * ds));
          facc[t] = K == X16Kind::kQ8C ? _mm512_add_ps(facc[t], tmp) : _mm512_fmadd_ps(tmp, sw, facc[t]);
        }
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    if constexpr (K == X16Kind::kQ8C) facc[t] = _mm512_mul_ps(facc[t], row_scale);
    _mm512_storeu_ps(y + t * ldy, facc[t]);
  }
}
