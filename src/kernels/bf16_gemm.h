// kernels/bf16_gemm.h: what the BF16 dot-product kernels share (kernels/bf16.cpp on AVX-512
// BF16, bf16_neon.cpp on Arm BF16), included by each inside its ISA's namespace. Each call rounds
// its tokens' activations to bf16 (round to nearest even, as the reference) into a per-thread
// buffer, then runs the ISA's register tiles (Isa::Rows<T>: every row, T tokens) over tiles of
// up to 4 tokens. Every (row, token) pair has one accumulator and the same operations whatever
// the tile, so a token alone gives the same bits as in a batch.
#pragma once

#include <cstdint>
#include <vector>

namespace paddock {

// Isa: ToBf16(x, n, out) and template <int T> Rows(w, rb, cols, rows, xb, ldx, y, ldy).
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
        Isa::template Rows<4>(wb, rb, cols, rows, buf.data(), cols, yt, ldy);
        break;
      case 3:
        Isa::template Rows<3>(wb, rb, cols, rows, buf.data(), cols, yt, ldy);
        break;
      case 2:
        Isa::template Rows<2>(wb, rb, cols, rows, buf.data(), cols, yt, ldy);
        break;
      default:
        Isa::template Rows<1>(wb, rb, cols, rows, buf.data(), cols, yt, ldy);
        break;
    }
  }
}

}  // namespace paddock
