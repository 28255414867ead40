// formats/x16_layout.h: the one description of every 16-row interleaved layout (X16Kind),
// used by the re-layout and quantizer code (formats/quants.cpp) and the kernels
// (kernels/simd/gemm_x16.cpp). A matrix is a sequence of 16-row groups; a group is `prefix`
// bytes, then per scale group of G elements a `header` and G / 32 blocks of `block` bytes.
// What the bytes hold is documented in ggml_types.h beside X16Kind.
#pragma once

#include <cstddef>

#include "formats/ggml_types.h"

namespace paddock {

struct X16Layout {
  size_t prefix;  // bytes before the first scale group: per-row fp32 scales (kQ8C, kS8C)
  size_t header;  // bytes at the start of each scale group (scales, minimums, k-quant header)
  size_t block;   // bytes per 32-element block of 16 rows
  size_t quants;  // offset of the quant vectors in a block (kS8C: after the 16 int16 sums)
  size_t extra;   // offset of the extra vectors in a block: 5th bits (Q5), high bits (Q6_K),
                  // 2:4 pair codes (kS8C); 0 where none
};

// 5-bit kinds: Q4's nibble blocks plus a vector of 5th bits.
constexpr bool X16IsQ5(X16Kind k) {
  return k == X16Kind::kQ5S || k == X16Kind::kQ5Z || k == X16Kind::kQ5K;
}
// Kinds whose quants are nibbles (+ 5th bits) dotted as unsigned bytes with the activations.
constexpr bool X16IsQ4(X16Kind k) {
  return k == X16Kind::kQ4S || k == X16Kind::kQ4Z || k == X16Kind::kQ4K || X16IsQ5(k);
}
// Scale and minimum per block (value q * d + m).
constexpr bool X16HasMin(X16Kind k) {
  return k == X16Kind::kQ4Z || k == X16Kind::kQ5Z || k == X16Kind::kQ4K || k == X16Kind::kQ5K;
}
// Lookup kinds: nibbles index a value grid (ggml_types.h).
constexpr bool X16IsLut(X16Kind k) {
  return k == X16Kind::kL4S || k == X16Kind::kL4X || k == X16Kind::kM4;
}
// k-quant super-block header (6-bit scales and mins per 32 elements).
constexpr bool X16IsK(X16Kind k) {
  return k == X16Kind::kQ4K || k == X16Kind::kQ5K;
}

constexpr X16Layout X16LayoutOf(X16Kind k) {
  switch (k) {
    case X16Kind::kQ4S:
      return {0, 32, 256, 0, 0};  // 16 fp16 d | nibbles
    case X16Kind::kQ4Z:
      return {0, 64, 256, 0, 0};  // 16 fp16 d, 16 fp16 m | nibbles
    case X16Kind::kQ5S:
      return {0, 32, 320, 0, 256};  // d | nibbles, 5th bits
    case X16Kind::kQ5Z:
      return {0, 64, 320, 0, 256};  // d, m | nibbles, 5th bits
    case X16Kind::kQ8B:
      return {0, 32, 512, 0, 0};  // d | int8 + 128
    case X16Kind::kQ8C:
      return {64, 0, 512, 0, 0};  // row scales | int8 + 128
    case X16Kind::kS8C:
      return {64, 0, 352, 32, 288};  // row scales | sums, 4 of 8, codes
    case X16Kind::kQ4K:
      return {0, 256, 256, 0, 0};  // d, dmin, 12 scale bytes | nibbles
    case X16Kind::kQ5K:
      return {0, 256, 320, 0, 256};  // as Q4_K | nibbles, 5th bits
    case X16Kind::kQ6K:
      return {0, 288, 384, 0, 256};  // d, int8 scales | nibbles, high bits
    case X16Kind::kL4S:
      return {0, 32, 256, 0, 0};  // 16 fp16 d | nibbles
    case X16Kind::kL4X:
      return {0, 128, 256, 0, 0};  // 16 fp16 d, scales_l lanes, 16 scales_h | nibbles
    case X16Kind::kM4:
      return {0, 16, 256, 0, 0};  // 16 E8M0 exponents | nibbles
    case X16Kind::kQ3K:
      return {0, 224, 192, 0, 128};  // d, packed scales | 2-bit planes, high bits
    case X16Kind::kQ2K:
      return {0, 320, 128, 0, 0};  // d, dmin, scale/min bytes | 2-bit planes
  }
  return {0, 0, 0, 0, 0};
}

// Bytes of one scale group of `blocks` 32-element blocks (header included).
constexpr size_t X16GroupBytes(X16Kind k, int blocks) {
  return X16LayoutOf(k).header + static_cast<size_t>(blocks) * X16LayoutOf(k).block;
}

}  // namespace paddock
