// kernels/kv_format.h: how one token's keys (or values) are encoded in the KV cache.
//
// A row holds one token's kv_dim = n_heads * head_dim values in one of these encodings:
//   kF32   float32
//   kF16   IEEE half
//   kBF16  bfloat16
//   kI8    int8 with one float32 scale per head: [n_heads scales][kv_dim int8]
//   kI4    4-bit symmetric groups: per group of G elements (G = 32, or the largest of 16/8/4/2
//          dividing head_dim when head_dim is not a multiple of 32) an fp16 scale then G/2
//          bytes; byte i holds element i (low nibble) and element i + G/2 (high nibble), as
//          in GGML's Q4_0; value (q - 8) * scale.
// Quantize on write (kv_store), dequantize inside attention (kv_dot, kv_axpy).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace paddock {

enum class KvDtype : uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2, kI8 = 3, kI4 = 4 };
constexpr int kKvDtypeCount = 5;

const char* KvDtypeName(KvDtype t);
// "f32", "f16", "bf16", "int8" (or "q8"), "int4" (or "q4"); throws Error otherwise.
KvDtype ParseKvDtype(std::string_view name);

// Elements per int4 group for a given head size (0 if head_dim is odd: int4 impossible).
int KvI4Group(int head_dim);
// Bytes of one token row of n_heads * head_dim values.
size_t KvRowBytes(KvDtype t, int n_heads, int head_dim);

}  // namespace paddock
