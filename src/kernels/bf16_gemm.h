// kernels/bf16_gemm.h: what the BF16 dot-product kernels share (kernels/bf16.cpp on AVX-512
// BF16, bf16_neon.cpp on Arm BF16), included by each inside its ISA's namespace. Each call rounds
// its tokens' activations to bf16 (round to nearest even, as the reference) into a per-thread
// buffer, then runs the ISA's register tiles (Isa::Rows<T>: every row, T tokens) over tiles of
// up to 4 tokens. Every (row, token) pair has one accumulator and the same operations whatever
// the tile, so a token alone gives the same bits as in a batch.
#pragma once

#include <cstdint>
#include <vector>

#include "base/half.h"

namespace paddock {

// The products of row wr and token xt from element i to the end (a tile's tail past its last
// whole vector), added to s.
inline float Bf16Tail(float s, const uint16_t* wr, const uint16_t* xt, int64_t i, int64_t cols) {
  for (int64_t j = i; j < cols; ++j) s += Bf16ToFp32(wr[j]) * Bf16ToFp32(xt[j]);
  return s;
}

// Every row for T tokens: the ISA's tiles of 4 rows, then of one.
template <class Isa, int T>
void Bf16Rows(const uint8_t* w, size_t rb, int64_t cols, int64_t rows, const uint16_t* xb,
              int64_t ldx, float* y, int64_t ldy) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) Isa::template Tile<4, T>(w + r * rb, rb, cols, xb, ldx, y + r, ldy);
  for (; r < rows; ++r) Isa::template Tile<1, T>(w + r * rb, rb, cols, xb, ldx, y + r, ldy);
}

// Isa: ToBf16(x, n, out) and template <int R, int T> Tile(w, rb, cols, xb, ldx, y, ldy), R rows
// x T tokens.
template <class Isa>
void Bf16DotGemm(const void* w, size_t rb, int64_t cols, int64_t rows, const float* x, int n_tok,
                 float* y, int64_t ldy) {
  constexpr int kTokens = 4;
  // The activations of one token tile as bf16, in a buffer that grows once per thread.
  thread_local std::vector<uint16_t> buf;
  const auto* wb = static_cast<const uint8_t*>(w);
  for (int t0 = 0; t0 < n_tok; t0 += kTokens) {
    const int T = n_tok - t0 < kTokens ? n_tok - t0 : kTokens;
    if (buf.size() < static_cast<size_t>(T) * static_cast<size_t>(cols))
      buf.resize(static_cast<size_t>(kTokens) * static_cast<size_t>(cols));
    for (int t = 0; t < T; ++t)
      Isa::ToBf16(x + static_cast<int64_t>(t0 + t) * cols, cols,
                  buf.data() + static_cast<size_t>(t) * cols);
    float* yt = y + static_cast<int64_t>(t0) * ldy;
    switch (T) {
      case 4:
        Bf16Rows<Isa, 4>(wb, rb, cols, rows, buf.data(), cols, yt, ldy);
        break;
      case 3:
        Bf16Rows<Isa, 3>(wb, rb, cols, rows, buf.data(), cols, yt, ldy);
        break;
      case 2:
        Bf16Rows<Isa, 2>(wb, rb, cols, rows, buf.data(), cols, yt, ldy);
        break;
      default:
        Bf16Rows<Isa, 1>(wb, rb, cols, rows, buf.data(), cols, yt, ldy);
        break;
    }
  }
}

}  // namespace paddock
