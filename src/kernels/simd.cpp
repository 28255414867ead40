// SIMD kernels, compiled once per instruction set (PADDOCK_ISA_NS = avx2 | avx512) with the
// matching compiler flags; see simd_vec.h for the vector abstraction.
//
// Weight formats without a dedicated path here are dequantized block by block (reference
// dequantizer into a stack buffer) and then dotted with vector FMAs. Accumulation is float32
// with several independent accumulators; results differ from the double-accumulating
// reference by rounding only (tests bound it).
#include <cmath>
#include <cstring>

#include "base/half.h"
#include "kernels/simd_vec.h"
#include "kernels/tables.h"

namespace paddock {
namespace PADDOCK_ISA_NS {
namespace {

float Dot(const float* a, const float* b, int64_t n) {
  VecF s0 = Zero(), s1 = Zero(), s2 = Zero(), s3 = Zero();
  int64_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    s0 = Fma(Load(a + i), Load(b + i), s0);
    s1 = Fma(Load(a + i + kLanes), Load(b + i + kLanes), s1);
    s2 = Fma(Load(a + i + 2 * kLanes), Load(b + i + 2 * kLanes), s2);
    s3 = Fma(Load(a + i + 3 * kLanes), Load(b + i + 3 * kLanes), s3);
  }
  for (; i + kLanes <= n; i += kLanes) s0 = Fma(Load(a + i), Load(b + i), s0);
  float s = ReduceAdd(Add(Add(s0, s1), Add(s2, s3)));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

template <class LoadFn, class ScalarFn>
float DotHalf(const uint16_t* w, const float* x, int64_t n, LoadFn load, ScalarFn scalar) {
  VecF s0 = Zero(), s1 = Zero();
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    s0 = Fma(load(w + i), Load(x + i), s0);
    s1 = Fma(load(w + i + kLanes), Load(x + i + kLanes), s1);
  }
  for (; i + kLanes <= n; i += kLanes) s0 = Fma(load(w + i), Load(x + i), s0);
  float s = ReduceAdd(Add(s0, s1));
  for (; i < n; ++i) s += scalar(w[i]) * x[i];
  return s;
}

void GemvF32(const void* w, size_t rb, int64_t cols, int64_t rows, const float* x, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    y[r] = Dot(reinterpret_cast<const float*>(static_cast<const uint8_t*>(w) + r * rb), x, cols);
  }
}

void GemvF16(const void* w, size_t rb, int64_t cols, int64_t rows, const float* x, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const auto* row = reinterpret_cast<const uint16_t*>(static_cast<const uint8_t*>(w) + r * rb);
    y[r] = DotHalf(row, x, cols, LoadF16, Fp16ToFp32);
  }
}

void GemvBF16(const void* w, size_t rb, int64_t cols, int64_t rows, const float* x, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const auto* row = reinterpret_cast<const uint16_t*>(static_cast<const uint8_t*>(w) + r * rb);
    y[r] = DotHalf(row, x, cols, LoadBf16, Bf16ToFp32);
  }
}

// Dot of 32 int8 quants with 32 floats.
inline VecF DotBlock32(const int8_t* q, const float* x, VecF acc) {
  for (int j = 0; j < 32; j += kLanes) acc = Fma(LoadI8(q + j), Load(x + j), acc);
  return acc;
}

void GemvQ8_0(const void* w, size_t rb, int64_t cols, int64_t rows, const float* x, float* y) {
  const int64_t nb = cols / kQK;
  for (int64_t r = 0; r < rows; ++r) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(static_cast<const uint8_t*>(w) + r * rb);
    VecF acc = Zero();
    for (int64_t i = 0; i < nb; ++i) {
      const VecF part = DotBlock32(b[i].qs, x + i * kQK, Zero());
      acc = Fma(part, Set1(Fp16ToFp32(b[i].d)), acc);
    }
    y[r] = ReduceAdd(acc);
  }
}

void GemvQ4_0(const void* w, size_t rb, int64_t cols, int64_t rows, const float* x, float* y) {
  const int64_t nb = cols / kQK;
  alignas(64) int8_t q[32];
  for (int64_t r = 0; r < rows; ++r) {
    const auto* b = reinterpret_cast<const BlockQ4_0*>(static_cast<const uint8_t*>(w) + r * rb);
    VecF acc = Zero();
    for (int64_t i = 0; i < nb; ++i) {
      for (int j = 0; j < 16; ++j) {
        q[j] = static_cast<int8_t>((b[i].qs[j] & 0x0f) - 8);
        q[j + 16] = static_cast<int8_t>((b[i].qs[j] >> 4) - 8);
      }
      const VecF part = DotBlock32(q, x + i * kQK, Zero());
      acc = Fma(part, Set1(Fp16ToFp32(b[i].d)), acc);
    }
    y[r] = ReduceAdd(acc);
  }
}

// Any other block format: reference dequantization per block, vector dot.
template <GgmlType T>
void GemvDequant(const void* w, size_t rb, int64_t cols, int64_t rows, const float* x,
                 float* y) {
  const TypeTraits& tr = Traits(T);
  const int bs = tr.block_size;
  alignas(64) float buf[kQK_K];
  for (int64_t r = 0; r < rows; ++r) {
    const auto* row = static_cast<const uint8_t*>(w) + r * rb;
    VecF acc = Zero();
    for (int64_t c = 0; c < cols; c += bs) {
      tr.to_float(row + (c / bs) * tr.type_size, buf, bs);
      for (int j = 0; j < bs; j += kLanes) acc = Fma(Load(buf + j), Load(x + c + j), acc);
    }
    y[r] = ReduceAdd(acc);
  }
}

void RmsNorm(float* out, const float* x, const float* w, int64_t n, float eps) {
  const float ss = Dot(x, x, n);
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  const VecF vi = Set1(inv);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) Store(out + i, Mul(Mul(Load(x + i), vi), Load(w + i)));
  for (; i < n; ++i) out[i] = x[i] * inv * w[i];
}

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  float mx = x[0];
  int64_t i = 0;
  if (n >= kLanes) {
    VecF m = Load(x);
    for (i = kLanes; i + kLanes <= n; i += kLanes) m = Max(m, Load(x + i));
    mx = ReduceMax(m);
  }
  for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  float sum = 0;
  for (i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const VecF inv = Set1(1.0f / sum);
  for (i = 0; i + kLanes <= n; i += kLanes) Store(x + i, Mul(Load(x + i), inv));
  for (; i < n; ++i) x[i] *= 1.0f / sum;
}

void SiluMul(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void AddVec(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) Store(y + i, Add(Load(y + i), Load(x + i)));
  for (; i < n; ++i) y[i] += x[i];
}

void Axpy(float* y, float a, const float* x, int64_t n) {
  const VecF va = Set1(a);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) Store(y + i, Fma(va, Load(x + i), Load(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

void Rope(float* x, int n_heads, int head_dim, int rope_dim, const float* cos, const float* sin,
          bool half_split) {
  const int half = rope_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    if (half_split) {
      int i = 0;
      for (; i + kLanes <= half; i += kLanes) {
        const VecF v0 = Load(v + i), v1 = Load(v + half + i);
        const VecF c = Load(cos + i), s = Load(sin + i);
        Store(v + i, Sub(Mul(v0, c), Mul(v1, s)));
        Store(v + half + i, Fma(v0, s, Mul(v1, c)));
      }
      for (; i < half; ++i) {
        const float v0 = v[i], v1 = v[i + half];
        v[i] = v0 * cos[i] - v1 * sin[i];
        v[i + half] = v0 * sin[i] + v1 * cos[i];
      }
    } else {
      for (int i = 0; i < half; ++i) {
        const float v0 = v[2 * i], v1 = v[2 * i + 1];
        v[2 * i] = v0 * cos[i] - v1 * sin[i];
        v[2 * i + 1] = v0 * sin[i] + v1 * cos[i];
      }
    }
  }
}

}  // namespace

KernelTable MakeTable() {
  KernelTable t{};
  t.isa = kLanes == 16 ? Isa::kAvx512 : Isa::kAvx2;
  t.gemv[static_cast<int>(GgmlType::kF32)] = GemvF32;
  t.gemv[static_cast<int>(GgmlType::kF16)] = GemvF16;
  t.gemv[static_cast<int>(GgmlType::kBF16)] = GemvBF16;
  t.gemv[static_cast<int>(GgmlType::kQ8_0)] = GemvQ8_0;
  t.gemv[static_cast<int>(GgmlType::kQ4_0)] = GemvQ4_0;
  t.gemv[static_cast<int>(GgmlType::kQ4_1)] = GemvDequant<GgmlType::kQ4_1>;
  t.gemv[static_cast<int>(GgmlType::kQ5_0)] = GemvDequant<GgmlType::kQ5_0>;
  t.gemv[static_cast<int>(GgmlType::kQ5_1)] = GemvDequant<GgmlType::kQ5_1>;
  t.gemv[static_cast<int>(GgmlType::kQ4_K)] = GemvDequant<GgmlType::kQ4_K>;
  t.gemv[static_cast<int>(GgmlType::kQ5_K)] = GemvDequant<GgmlType::kQ5_K>;
  t.gemv[static_cast<int>(GgmlType::kQ6_K)] = GemvDequant<GgmlType::kQ6_K>;
  t.dot = Dot;
  t.rmsnorm = RmsNorm;
  t.softmax = Softmax;
  t.silu_mul = SiluMul;
  t.add = AddVec;
  t.axpy = Axpy;
  t.rope = Rope;
  return t;
}

}  // namespace PADDOCK_ISA_NS
}  // namespace paddock
