#include "kernels/kv_format.h"

#include <cmath>

#include "base/strings.h"

namespace paddock {

const char* KvDtypeName(KvDtype t) {
  switch (t) {
    case KvDtype::kF32:
      return "f32";
    case KvDtype::kF16:
      return "f16";
    case KvDtype::kBF16:
      return "bf16";
    case KvDtype::kI8:
      return "int8";
    case KvDtype::kI4:
      return "int4";
  }
  return "?";
}

KvDtype ParseKvDtype(std::string_view n) {
  if (n == "f32") return KvDtype::kF32;
  if (n == "f16") return KvDtype::kF16;
  if (n == "bf16") return KvDtype::kBF16;
  if (n == "int8" || n == "q8" || n == "i8") return KvDtype::kI8;
  if (n == "int4" || n == "q4" || n == "i4") return KvDtype::kI4;
  Fail("unknown KV cache type '%.*s' (expected f32, f16, bf16, int8 or int4)", (int)n.size(),
       n.data());
}

void Hadamard(float* x, int n) {
  for (int len = 1; len < n; len <<= 1) {
    for (int i = 0; i < n; i += 2 * len) {
      for (int j = i; j < i + len; ++j) {
        const float a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
    }
  }
  const float norm = 1.0f / std::sqrt(static_cast<float>(n));
  for (int i = 0; i < n; ++i) x[i] *= norm;
}

int KvI4Group(int head_dim) {
  for (int g : {32, 16, 8, 4, 2}) {
    if (head_dim % g == 0) return g;
  }
  return 0;
}

size_t KvRowBytes(KvDtype t, int n_heads, int head_dim) {
  const size_t n = static_cast<size_t>(n_heads) * static_cast<size_t>(head_dim);
  switch (t) {
    case KvDtype::kF32:
      return 4 * n;
    case KvDtype::kF16:
    case KvDtype::kBF16:
      return 2 * n;
    case KvDtype::kI8:
      return 4 * static_cast<size_t>(n_heads) + n;
    case KvDtype::kI4: {
      const int g = KvI4Group(head_dim);
      if (g == 0) Fail("int4 KV cache needs an even head size (got %d)", head_dim);
      return n / static_cast<size_t>(g) * (2 + static_cast<size_t>(g) / 2);
    }
  }
  return 0;
}

}  // namespace paddock
