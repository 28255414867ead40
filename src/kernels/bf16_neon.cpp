// kernels/bf16_neon.cpp: BF16 weights x bf16-rounded activations on AArch64's BF16 extension
// (FEAT_BF16: BFMLALB / BFMLALT, the even and the odd elements of 8 bf16 pairs multiplied
// exactly and added into 4 fp32 lanes, fused: the products exact, the sums in fp32, as the
// reference and AVX-512's vdpbf16ps). Compiled with +bf16 and installed by dispatch_arm.cpp only
// on CPUs whose HWCAP2 has it. (BFDOT and BFMMLA are faster per instruction but round their
// intermediate sums to odd: not the reference's arithmetic.)
//
// Register tiles of 4 rows x up to 4 tokens, as kernels/bf16.cpp (kernels/bf16_gemm.h: the
// activations' rounding to bf16 with Fp32ToBf16's bits, the token tiles, batch invariance).
#include <arm_neon.h>

#include <cstdint>
#include <cstring>

#include "base/half.h"
#include "formats/ggml_types.h"
#include "kernels/bf16_gemm.h"
#include "kernels/tables.h"

namespace paddock {
namespace neonbf16 {
namespace {

inline bfloat16x8_t LoadBf16x8(const uint16_t* p) {
  return vreinterpretq_bf16_u16(vld1q_u16(p));
}

struct Kernels {
  template <int R, int T>
  static void Tile(const uint8_t* w, size_t rb, int64_t cols, const uint16_t* xb, int64_t ldx,
                   float* y, int64_t ldy) {
    float32x4_t acc[R][T];
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t) acc[r][t] = vdupq_n_f32(0.0f);
    }
    int64_t i = 0;
    for (; i + 8 <= cols; i += 8) {
      bfloat16x8_t xv[T];
      for (int t = 0; t < T; ++t) xv[t] = LoadBf16x8(xb + t * ldx + i);
      for (int r = 0; r < R; ++r) {
        const bfloat16x8_t wv = LoadBf16x8(reinterpret_cast<const uint16_t*>(w + r * rb) + i);
        for (int t = 0; t < T; ++t) {
          acc[r][t] = vbfmlalbq_f32(acc[r][t], wv, xv[t]);
          acc[r][t] = vbfmlaltq_f32(acc[r][t], wv, xv[t]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      const auto* wr = reinterpret_cast<const uint16_t*>(w + r * rb);
      for (int t = 0; t < T; ++t) {
        y[t * ldy + r] = Bf16Tail(vaddvq_f32(acc[r][t]), wr, xb + t * ldx, i, cols);
      }
    }
  }

  // Round to nearest even with Fp32ToBf16's bits (NaNs quieted), 4 floats at a time.
  static void ToBf16(const float* x, int64_t n, uint16_t* out) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
      const uint32x4_t v = vreinterpretq_u32_f32(vld1q_f32(x + i));
      const uint32x4_t odd = vandq_u32(vshrq_n_u32(v, 16), vdupq_n_u32(1));
      uint32x4_t r = vshrq_n_u32(vaddq_u32(vaddq_u32(v, vdupq_n_u32(0x7fff)), odd), 16);
      const uint32x4_t nan =
          vcgtq_u32(vandq_u32(v, vdupq_n_u32(0x7fffffff)), vdupq_n_u32(0x7f800000));
      r = vbslq_u32(nan, vorrq_u32(vshrq_n_u32(v, 16), vdupq_n_u32(0x40)), r);
      vst1_u16(out + i, vmovn_u32(r));
    }
    for (; i < n; ++i) out[i] = Fp32ToBf16(x[i]);
  }
};

}  // namespace

void GemmBf16Dot(const void* w, size_t rb, int64_t cols, int64_t rows, const float* x, int n_tok,
                 float* y, int64_t ldy) {
  Bf16DotGemm<Kernels>(w, rb, cols, rows, x, n_tok, y, ldy);
}

}  // namespace neonbf16
}  // namespace paddock
