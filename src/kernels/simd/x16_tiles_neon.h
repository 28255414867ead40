// kernels/simd/x16_tiles_neon.h: NEON's own tiles of the 16-row interleaved layouts, included by
// gemm_x16.cpp inside its namespace: the 2:4 sparse int8 tile (PS8_C), and on the dot-product
// levels the block dot products of the nibble and 8-bit kinds (IsaTiles::BlockDots: lane-indexed
// SDOT, and SMMLA for token pairs on i8mm).
//
// The 2:4 sparse tile. As on AVX2 and AVX-512, per 8 elements of a
// row the 4 stored values meet the 4 activations they multiply, picked out of the 8 by a byte
// table lookup (TBL) whose indices come from the stored 4-bit pair codes; the products are
// signed x signed (SDOT, or 16-bit products on ARMv8.0), so no zero point. A register holds 4
// rows: a 16-row group is four quarters, each its own pass.

// Byte indices (0..7 into the step's 8 activations) of step s for the 4 rows of a quarter.
inline uint8x16_t SparseStepIndices(int s, uint8x16_t codes) {
  const uint8_t b = static_cast<uint8_t>(s);
  const uint8x16_t rep = {b,
                          b,
                          b,
                          b,
                          static_cast<uint8_t>(4 + b),
                          static_cast<uint8_t>(4 + b),
                          static_cast<uint8_t>(4 + b),
                          static_cast<uint8_t>(4 + b),
                          static_cast<uint8_t>(8 + b),
                          static_cast<uint8_t>(8 + b),
                          static_cast<uint8_t>(8 + b),
                          static_cast<uint8_t>(8 + b),
                          static_cast<uint8_t>(12 + b),
                          static_cast<uint8_t>(12 + b),
                          static_cast<uint8_t>(12 + b),
                          static_cast<uint8_t>(12 + b)};
  uint8x16_t r = vqtbl1q_u8(codes, rep);  // the lane's code byte x 4
  // bytes 2, 3 of each lane take the high nibble: their word shifted right by 4
  static constexpr int16_t kShift[8] = {0, -4, 0, -4, 0, -4, 0, -4};
  r = vreinterpretq_u8_u16(vshlq_u16(vreinterpretq_u16_u8(r), vld1q_s16(kShift)));
  r = vandq_u8(r, vdupq_n_u8(15));
  r = vaddq_u8(r, vreinterpretq_u8_u32(vdupq_n_u32(0x08000800)));  // odd bytes: second of pair
  static constexpr uint8_t kLut[16] = {0, 0, 0, 1, 1, 2, 0, 0, 1, 2, 3, 2, 3, 3, 0, 0};
  return vaddq_u8(vqtbl1q_u8(vld1q_u8(kLut), r),
                  vreinterpretq_u8_u32(vdupq_n_u32(0x04040000)));  // group 2s + 1: +4
}

template <int T>
void SparseTile(const uint8_t* grp, int64_t cols, const int8_t* xq, const float* xd, float* y,
                int64_t ldy) {
  const int64_t nb = cols / kQK;
  for (int h = 0; h < kHalves; ++h) {
    const VecF row_scale = Load(reinterpret_cast<const float*>(grp) + kLanes * h);
    const uint8_t* p = grp + 64;
    VecF facc[T];
    for (int t = 0; t < T; ++t) facc[t] = Zero();
    for (int64_t b = 0; b < nb; ++b, p += kSparse.block) {
      VecI acc[T];
      for (int t = 0; t < T; ++t) acc[t] = ZeroI();
      const uint8x16_t codes = vld1q_u8(p + kSparse.extra + kRowBytes * h);
      const int8_t* xb = xq + b * kQK;
#pragma GCC unroll 4
      for (int s = 0; s < 4; ++s) {
        const uint8x16_t idx = SparseStepIndices(s, codes);
        const VecI w = LoadRaw(p + kSparse.quants + 64 * s + kRowBytes * h);
        for (int t = 0; t < T; ++t) {
          const int8x8_t a8 = vld1_s8(xb + t * cols + 8 * s);
          const VecI a = FromS8(vqtbl1q_s8(vcombine_s8(a8, a8), idx));
          acc[t] = DotS8S8(acc[t], w, a);
        }
      }
      for (int t = 0; t < T; ++t) facc[t] = Fma(ToFloat(acc[t]), Set1(xd[t * nb + b]), facc[t]);
    }
    for (int t = 0; t < T; ++t) Store(y + t * ldy + kLanes * h, Mul(facc[t], row_scale));
  }
}

// NEON's own block dot products for the nibble kinds (Q4_0, Q4_K, Q5_*, the int4 layouts) and
// the 8-bit ones (Q8_0, the int8 layout): a 32-element block of a quarter's 4 rows for T tokens
// into acc[t] (the rows' int32 sums, exact).
// - One token at a time: each token's 32 activation bytes loaded once (two registers) and the
//   weights dotted with them by lane-indexed SDOT (vector m, elements 4m..4m+3 of 4 rows, against
//   lane m of the activations), in place of a 4-byte broadcast load per instruction. On ARMv8.0
//   (no SDOT) the lane is duplicated across the rows and multiplied in 16 bits (SMULL: |w| <= 128
//   and |x| <= 127, so exact), summed pairwise into int32 (SADALP), folded per row per block.
// - Token pairs on the int8 matrix multiply (i8mm; SMMLA: a 2 x 8 by 8 x 2 product into 2 x 2
//   int32, 32 products per instruction against SDOT's 16): two consecutive vectors hold each
//   row's elements 4m..4m+7; zipping their 32-bit lanes gives the rows in pairs (r0 r1, r2 r3)
//   as SMMLA's 2 x 8 operands, two tokens' 8 activation bytes side by side the other (packed
//   once per tile: PackTokens); the 2 x 2 results are unzipped to a vector of rows per token. An
//   odd last token goes one at a time.
// Both give the same exact integers, so a token's result does not depend on its tile.
template <X16Kind K>
struct IsaTiles {
  // The tile's token pairs for SMMLA (i8mm; T >= 2): per pair j, block b and 8-element group e,
  // 16 bytes at xp + ((j nb + b) 4 + e) 16: the pair's first token's 8 activation bytes, then
  // the second's. False (nothing packed) where the tile has no pair.
  static bool PackTokens(const int8_t* xq, int64_t cols, int T, int8_t* xp) {
    if (!kMmla || T < 2) return false;
    const int64_t nb = cols / kQK;
    for (int j = 0; j < T / 2; ++j) {
      const int8_t* x0 = xq + 2 * j * cols;
      for (int64_t g = 0; g < 4 * nb; ++g) {
        const int8x16_t v = vcombine_s8(vld1_s8(x0 + 8 * g), vld1_s8(x0 + cols + 8 * g));
        vst1q_s8(xp + (j * 4 * nb + g) * 16, v);
      }
    }
    return true;
  }

  // (always inlined: the accumulators stay in registers across the tile's blocks)
  // xp, b: PackTokens' pairs (null without) and the block's index.
  template <int T>
  __attribute__((always_inline)) static inline void BlockDots(const uint8_t* p, int h,
                                                              const int8_t* xb, int64_t cols,
                                                              VecI* acc, const int8_t* xp,
                                                              int64_t b) {
    constexpr X16Layout kL = X16LayoutOf(K);
    constexpr int P = kMmla ? T / 2 : 0;  // token pairs on SMMLA
    constexpr int S = T - 2 * P;          // tokens one at a time (lane-indexed SDOT)
    int32x4_t mm[P > 0 ? P : 1][2];
    for (int j = 0; j < P; ++j) mm[j][0] = mm[j][1] = vdupq_n_s32(0);
    int8x16_t xs[S > 0 ? S : 1][2];
    // ARMv8.0: 16-bit products (SMULL) summed pairwise into two int32 vectors (SADALP: rows 0-1
    // and 2-3, two lanes each), folded to one lane per row at the block's end (ADDP)
    int32x4_t pa[S > 0 ? S : 1][2];
    for (int i = 0; i < S; ++i) {
      xs[i][0] = vld1q_s8(xb + (2 * P + i) * cols);
      xs[i][1] = vld1q_s8(xb + (2 * P + i) * cols + 16);
      pa[i][0] = pa[i][1] = vdupq_n_s32(0);
    }
    // w0, w1: elements e..e+3 and e+4..e+7 of the quarter's 4 rows (signed bytes); e / 4 = the
    // lane of w0's activations in register r of a single token.
    auto step = [&](auto lane, uint8x16_t w0, uint8x16_t w1, int e, int r) {
      constexpr int l = decltype(lane)::value;
      if constexpr (P > 0) {
        const uint32x4_t u0 = vreinterpretq_u32_u8(w0), u1 = vreinterpretq_u32_u8(w1);
        const int8x16_t a01 = vreinterpretq_s8_u32(vzip1q_u32(u0, u1));
        const int8x16_t a23 = vreinterpretq_s8_u32(vzip2q_u32(u0, u1));
        const int64_t nb = cols / kQK;
        for (int j = 0; j < P; ++j) {
          const int8x16_t bx = vld1q_s8(xp + ((j * nb + b) * 4 + e / 8) * 16);
          mm[j][0] = vmmlaq_s32(mm[j][0], a01, bx);
          mm[j][1] = vmmlaq_s32(mm[j][1], a23, bx);
        }
      }
      for (int i = 0; i < S; ++i) {
#if defined(__ARM_FEATURE_DOTPROD)
        int32x4_t& a = acc[2 * P + i].v;
        a = vdotq_laneq_s32(a, vreinterpretq_s8_u8(w0), xs[i][r], l);
        a = vdotq_laneq_s32(a, vreinterpretq_s8_u8(w1), xs[i][r], l + 1);
#else
        const int32x4_t x = vreinterpretq_s32_s8(xs[i][r]);
        const int8x16_t x0 = vreinterpretq_s8_s32(vdupq_laneq_s32(x, l)),
                        x1 = vreinterpretq_s8_s32(vdupq_laneq_s32(x, l + 1));
        const int8x16_t v0 = vreinterpretq_s8_u8(w0), v1 = vreinterpretq_s8_u8(w1);
        pa[i][0] = vpadalq_s16(pa[i][0], vmull_s8(vget_low_s8(v0), vget_low_s8(x0)));
        pa[i][1] = vpadalq_s16(pa[i][1], vmull_high_s8(v0, x0));
        pa[i][0] = vpadalq_s16(pa[i][0], vmull_s8(vget_low_s8(v1), vget_low_s8(x1)));
        pa[i][1] = vpadalq_s16(pa[i][1], vmull_high_s8(v1, x1));
#endif
      }
    };
    using C0 = std::integral_constant<int, 0>;
    using C2 = std::integral_constant<int, 2>;
    if constexpr (X16IsQ4(K)) {
      const uint8x16_t m4 = vdupq_n_u8(15), b4 = vdupq_n_u8(16);
      uint8x16_t q5 = vdupq_n_u8(0);
      if constexpr (X16IsQ5(K)) q5 = vld1q_u8(p + kL.extra + kRowBytes * h);
      // Elements 4m.. (low nibbles) and 16 + 4m.. (high), with the 5th bits m and 4 + m.
      auto quants = [&](int m, uint8x16_t* lo, uint8x16_t* hi) {
        const uint8x16_t v = vld1q_u8(p + 64 * m + kRowBytes * h);
        *lo = vandq_u8(v, m4);
        *hi = vshrq_n_u8(v, 4);
        if constexpr (X16IsQ5(K)) {
          *lo = vorrq_u8(*lo, vandq_u8(vshlq_u8(q5, vdupq_n_s8(static_cast<int8_t>(4 - m))), b4));
          *hi = vorrq_u8(*hi, vandq_u8(vshlq_u8(q5, vdupq_n_s8(static_cast<int8_t>(-m))), b4));
        }
      };
      auto two = [&](auto lane) {
        constexpr int m = decltype(lane)::value;
        uint8x16_t lo0, hi0, lo1, hi1;
        quants(m, &lo0, &hi0);
        quants(m + 1, &lo1, &hi1);
        step(lane, lo0, lo1, 4 * m, 0);
        step(lane, hi0, hi1, 16 + 4 * m, 1);
      };
      two(C0{});
      two(C2{});
    } else {  // 8-bit quants stored + 128: the top bit flipped, signed
      const uint8x16_t flip = vdupq_n_u8(0x80);
      auto two = [&](auto lane, int g) {  // vectors g, g + 1: lanes g % 4, + 1 of register g / 4
        const uint8x16_t w0 = veorq_u8(vld1q_u8(p + 64 * g + kRowBytes * h), flip),
                         w1 = veorq_u8(vld1q_u8(p + 64 * (g + 1) + kRowBytes * h), flip);
        step(lane, w0, w1, 4 * g, g / 4);
      };
      two(C0{}, 0);
      two(C2{}, 2);
      two(C0{}, 4);
      two(C2{}, 6);
    }
    for (int j = 0; j < P; ++j) {
      acc[2 * j] = {vaddq_s32(acc[2 * j].v, vuzp1q_s32(mm[j][0], mm[j][1]))};
      acc[2 * j + 1] = {vaddq_s32(acc[2 * j + 1].v, vuzp2q_s32(mm[j][0], mm[j][1]))};
    }
#if !defined(__ARM_FEATURE_DOTPROD)
    for (int i = 0; i < S; ++i)
      acc[2 * P + i] = {vaddq_s32(acc[2 * P + i].v, vpaddq_s32(pa[i][0], pa[i][1]))};
#endif
  }
};
