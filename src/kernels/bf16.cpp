// kernels/bf16.cpp: BF16 weights x bf16-rounded activations with AVX-512 BF16 (vdpbf16ps:
// 16 lanes x 2 products per instruction, accumulated in fp32). Compiled with -mavx512bf16 and
// installed by dispatch.cpp only on CPUs that have the instruction.
//
// Each call rounds its tokens' activations to bf16 (round to nearest even, as the reference)
// into a per-thread buffer, then runs register tiles of 4 rows x up to 4 tokens. Every
// (row, token) pair has one accumulator and the same operations whatever the tile, so a token
// alone gives the same bits as in a batch.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "base/half.h"
#include "formats/ggml_types.h"
#include "kernels/tables.h"

namespace paddock {
namespace avx512bf16 {
namespace {

constexpr int kRows = 4, kTokens = 4;

template <int R, int T>
void Tile(const uint8_t* w, size_t rb, int64_t cols, const uint16_t* xb, int64_t ldx, float* y,
          int64_t ldy) {
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
      float s = _mm512_reduce_add_ps(acc[r][t]);
      for (int64_t j = i; j < cols; ++j) s += Bf16ToFp32(wr[j]) * Bf16ToFp32(xb[t * ldx + j]);
      y[t * ldy + r] = s;
    }
  }
}

template <int T>
void Rows(const uint8_t* w, size_t rb, int64_t cols, int64_t rows, const uint16_t* xb, int64_t ldx,
          float* y, int64_t ldy) {
  int64_t r = 0;
  for (; r + kRows <= rows; r += kRows) Tile<kRows, T>(w + r * rb, rb, cols, xb, ldx, y + r, ldy);
  for (; r < rows; ++r) Tile<1, T>(w + r * rb, rb, cols, xb, ldx, y + r, ldy);
}

// Round to nearest even, 16 floats at a time (vcvtneps2bf16), the rest one by one the same way.
void ToBf16(const float* x, int64_t n, uint16_t* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + i));
    std::memcpy(out + i, &h, 32);
  }
  for (; i < n; ++i) out[i] = Fp32ToBf16(x[i]);
}

}  // namespace

void GemmBf16Dot(const void* w, size_t rb, int64_t cols, int64_t rows, const float* x, int n_tok,
                 float* y, int64_t ldy) {
  // The activations of one token tile as bf16, in a buffer that grows once per thread.
  thread_local std::vector<uint16_t> buf;
  const auto* wb = static_cast<const uint8_t*>(w);
  for (int t0 = 0; t0 < n_tok; t0 += kTokens) {
    const int T = n_tok - t0 < kTokens ? n_tok - t0 : kTokens;
    if (buf.size() < static_cast<size_t>(T) * static_cast<size_t>(cols))
      buf.resize(static_cast<size_t>(kTokens) * static_cast<size_t>(cols));
    for (int t = 0; t < T; ++t)
      ToBf16(x + static_cast<int64_t>(t0 + t) * cols, cols,
             buf.data() + static_cast<size_t>(t) * cols);
    float* yt = y + static_cast<int64_t>(t0) * ldy;
    switch (T) {
      case 4:
        Rows<4>(wb, rb, cols, rows, buf.data(), cols, yt, ldy);
        break;
      case 3:
        Rows<3>(wb, rb, cols, rows, buf.data(), cols, yt, ldy);
        break;
      case 2:
        Rows<2>(wb, rb, cols, rows, buf.data(), cols, yt, ldy);
        break;
      default:
        Rows<1>(wb, rb, cols, rows, buf.data(), cols, yt, ldy);
        break;
    }
  }
}

}  // namespace avx512bf16
}  // namespace paddock
