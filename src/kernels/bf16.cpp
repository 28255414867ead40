// kernels/bf16.cpp: BF16 weights x bf16-rounded activations with AVX-512 BF16 (vdpbf16ps:
// 16 lanes x 2 products per instruction, accumulated in fp32). Compiled with -mavx512bf16 and
// installed by dispatch.cpp only on CPUs that have the instruction.
//
// Register tiles of 4 rows x up to 4 tokens over the bf16-rounded activations of each call
// (kernels/bf16_gemm.h: the rounding, the token tiles, batch invariance).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "base/half.h"
#include "formats/ggml_types.h"
#include "kernels/bf16_gemm.h"
#include "kernels/tables.h"

namespace paddock {
namespace avx512bf16 {
namespace {

struct Kernels {
  template <int R, int T>
  static void Tile(const uint8_t* w, size_t rb, int64_t cols, const uint16_t* xb, int64_t ldx,
                   float* y, int64_t ldy) {
    __m512 acc[R][T];
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 32 <= cols; i += 32) {
      __m512bh xv[T];
      for (int t = 0; t < T; ++t)
        xv[t] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(xb + t * ldx + i));
      for (int r = 0; r < R; ++r) {
        const __m512bh wv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(w + r * rb + 2 * i));
        for (int t = 0; t < T; ++t) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv, xv[t]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const auto* wr = reinterpret_cast<const uint16_t*>(w + r * rb);
      for (int t = 0; t < T; ++t) {
        y[t * ldy + r] = Bf16Tail(_mm512_reduce_add_ps(acc[r][t]), wr, xb + t * ldx, i, cols);
      }
    }
  }

  // Round to nearest even, 16 floats at a time (vcvtneps2bf16), the rest one by one the same way.
  static void ToBf16(const float* x, int64_t n, uint16_t* out) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + i));
      std::memcpy(out + i, &h, 32);
    }
    for (; i < n; ++i) out[i] = Fp32ToBf16(x[i]);
  }
};

}  // namespace

void GemmBf16Dot(const void* w, size_t rb, int64_t cols, int64_t rows, const float* x, int n_tok,
                 float* y, int64_t ldy) {
  Bf16DotGemm<Kernels>(w, rb, cols, rows, x, n_tok, y, ldy);
}

}  // namespace avx512bf16
}  // namespace paddock
