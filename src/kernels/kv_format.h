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
//
// Rotation: when head_dim is a power of two, the integer encodings store each head rotated by
// the normalized Walsh-Hadamard transform H (orthogonal and its own inverse). Rotation spreads
// outlier channels over the whole head, so one scale per head loses far less; attention
// compensates exactly: q.k = (Hq).(Hk), and sum p_t v_t = H sum p_t (H v_t).
//
// Scale granularity of the keys, measured (`paddock-kv-bench kscales`: attention KL and output
// error over 1,024 keys, head_dim 128 and 64, iid and outlier-channel keys with RoPE). With the
// rotation, int8 with one scale per head has a logit error 15-20% above scales per 32 elements
// (KL 20-45% above, both tiny; 3% more bytes), and on outlier keys a KL 4-5x below llama.cpp's
// unrotated q8_0 groups; per-channel scales over 32-token blocks (KIVI, asymmetric, 9% more
// bytes) do worse than the rotated head on outlier keys. For int4, groups of 32 (rotated) have
// a KL 20-35% below one scale per head, and on outlier keys 4-5x below unrotated q4_0. So: int8
// per head, int4 per 32, both rotated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace paddock {

enum class KvDtype : uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2, kI8 = 3, kI4 = 4 };
// Largest n_kv_heads * head_dim a KV row may have (encoders use a stack buffer of this size).
constexpr int kKvMaxRowElements = 16384;
constexpr int kKvDtypeCount = 5;

const char* KvDtypeName(KvDtype t);
// "f32", "f16", "bf16", "int8" (or "q8"), "int4" (or "q4"); throws Error otherwise.
KvDtype ParseKvDtype(std::string_view name);

// True if heads of this type and size are stored Hadamard-rotated.
inline bool KvRotated(KvDtype t, int head_dim) {
  return (t == KvDtype::kI8 || t == KvDtype::kI4) && head_dim >= 2 &&
         (head_dim & (head_dim - 1)) == 0;
}
// In-place normalized Walsh-Hadamard transform of n (a power of two) floats.
void Hadamard(float* x, int n);

// Elements per int4 group for a given head size (0 if head_dim is odd: int4 impossible).
int KvI4Group(int head_dim);
// Bytes of one token row of n_heads * head_dim values.
size_t KvRowBytes(KvDtype t, int n_heads, int head_dim);

}  // namespace paddock
