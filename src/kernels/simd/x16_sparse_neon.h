// kernels/simd/x16_sparse_neon.h: the NEON register tile of the 2:4 sparse int8 layout (PS8_C),
// included by gemm_x16.cpp inside its namespace. As on AVX2 and AVX-512, per 8 elements of a
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
