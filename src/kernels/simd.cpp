// SIMD kernels, compiled once per instruction set (PADDOCK_ISA_NS = avx2 | avx512) with the
// matching compiler flags; see simd_vec.h for the vector abstraction.
//
// Quantized weights are unpacked in registers and multiplied with float32 activations (FMA);
// the per-block affine terms use per-block sums of x computed once per call. Accumulation is
// float32; results differ from the double-accumulating reference by rounding only (tests
// bound it). Integer dot products on quantized activations (VNNI) are a later step.
#include <cmath>
#include <cstring>

#include "base/half.h"
#include "kernels/kv_rows.h"
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

// Float-activation GEMM for F32 / F16 / BF16 weights: R rows x T tokens of accumulators in
// registers, so each weight vector is loaded (and converted) once for T tokens and each
// activation vector once for R rows. Every (row, token) pair has one accumulator and the same
// operations in the same order whatever R and T are, so the one-token GEMV (this with T = 1)
// is bit-identical to the same token inside a batch.
template <GgmlType W>
inline VecF LoadWeights(const uint8_t* row, int64_t i) {
  if constexpr (W == GgmlType::kF32) {
    return Load(reinterpret_cast<const float*>(row) + i);
  } else if constexpr (W == GgmlType::kF16) {
    return LoadF16(reinterpret_cast<const uint16_t*>(row) + i);
  } else {
    return LoadBf16(reinterpret_cast<const uint16_t*>(row) + i);
  }
}
template <GgmlType W>
inline float WeightAt(const uint8_t* row, int64_t i) {
  if constexpr (W == GgmlType::kF32) {
    return reinterpret_cast<const float*>(row)[i];
  } else if constexpr (W == GgmlType::kF16) {
    return Fp16ToFp32(reinterpret_cast<const uint16_t*>(row)[i]);
  } else {
    return Bf16ToFp32(reinterpret_cast<const uint16_t*>(row)[i]);
  }
}

template <GgmlType W, int R, int T>
void FloatTile(const uint8_t* w, size_t rb, int64_t cols, const float* x, float* y, int64_t ldy) {
  VecF acc[R][T];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) acc[r][t] = Zero();
  }
  int64_t i = 0;
  for (; i + kLanes <= cols; i += kLanes) {
    VecF xv[T];
    for (int t = 0; t < T; ++t) xv[t] = Load(x + t * cols + i);
    for (int r = 0; r < R; ++r) {
      const VecF wv = LoadWeights<W>(w + r * rb, i);
      for (int t = 0; t < T; ++t) acc[r][t] = Fma(wv, xv[t], acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      float s = ReduceAdd(acc[r][t]);
      for (int64_t j = i; j < cols; ++j) s += WeightAt<W>(w + r * rb, j) * x[t * cols + j];
      y[t * ldy + r] = s;
    }
  }
}

#if defined(__AVX512F__)
constexpr int kFloatRows = 4;
#else
constexpr int kFloatRows = 2;
#endif
constexpr int kFloatTokens = 4;

template <GgmlType W, int T>
void FloatRows(const uint8_t* w, size_t rb, int64_t cols, int64_t rows, const float* x, float* y, int64_t ldy) {
  int64_t r = 0;
  for (; r + kFloatRows <= rows; r += kFloatRows) FloatTile<W, kFloatRows, T>(w + r * rb, rb, cols, x, y + r, ldy);
  for (; r < rows; ++r) FloatTile<W, 1, T>(w + r * rb, rb, cols, x, y + r, ldy);
}

template <GgmlType W>
void GemmFloat(const void* w, size_t rb, int64_t cols, int64_t rows, const float* x, int n_tok, float* y, int64_t ldy) {
  const auto* wb = static_cast<const uint8_t*>(w);
  for (int t0 = 0; t0 < n_tok; t0 += kFloatTokens) {
    const float* xt = x + static_cast<int64_t>(t0) * cols;
    float* yt = y + static_cast<int64_t>(t0) * ldy;
    switch (n_tok - t0 < kFloatTokens ? n_tok - t0 : kFloatTokens) {
      case 4: FloatRows<W, 4>(wb, rb, cols, rows, xt, yt, ldy); break;
      case 3: FloatRows<W, 3>(wb, rb, cols, rows, xt, yt, ldy); break;
      case 2: FloatRows<W, 2>(wb, rb, cols, rows, xt, yt, ldy); break;
      default: FloatRows<W, 1>(wb, rb, cols, rows, xt, yt, ldy); break;
    }
  }
}

template <GgmlType W>
void GemvFloat(const void* w, size_t rb, int64_t cols, int64_t rows, const float* x, float* y) {
  GemmFloat<W>(w, rb, cols, rows, x, 1, y, rows);
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

// (byte >> shift) & mask for kLanes consecutive bytes.
inline VecI Bits(const uint8_t* p, int shift, int mask) {
  return AndI(ShrV(LoadU8(p), SetI(shift)), SetI(mask));
}

// Per-block sums of x over 32-element blocks, computed once per GEMV call and shared by all
// rows (the min/offset terms of the affine formats need them).
constexpr int kMaxBlockSums = 8192;  // cols up to 262144

void BlockSums(const float* x, int64_t cols, float* sums) {
  for (int64_t b = 0; b < cols / kQK; ++b) {
    VecF s = Zero();
    for (int j = 0; j < kQK; j += kLanes) s = Add(s, Load(x + b * kQK + j));
    sums[b] = ReduceAdd(s);
  }
}

// sum_j q_j * x_j over one 32-element legacy block: low nibbles (+ fifth bit) are elements
// 0..15, high nibbles 16..31; qh (may be null) holds bit j of element j.
inline VecF DotQ4Legacy(const uint8_t* qs, const uint8_t* qh_bytes, const float* x) {
  VecF acc = Zero();
  uint32_t qh = 0;
  if (qh_bytes != nullptr) std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 16; j += kLanes) {
    VecI lo = Bits(qs + j, 0, 15), hi = Bits(qs + j, 4, 15);
    if (qh_bytes != nullptr) {
      const VecI idx = AddI(LaneIndex(), SetI(j));
      lo = OrI(lo, ShlV(AndI(ShrV(SetI(static_cast<int32_t>(qh)), idx), SetI(1)), SetI(4)));
      hi = OrI(hi, ShlV(AndI(ShrV(SetI(static_cast<int32_t>(qh)), AddI(idx, SetI(16))), SetI(1)), SetI(4)));
    }
    acc = Fma(ToFloat(lo), Load(x + j), acc);
    acc = Fma(ToFloat(hi), Load(x + 16 + j), acc);
  }
  return acc;
}

// Legacy 4/5-bit formats: value = q * d + m, where m = -offset * d (Q4_0, Q5_0) or stored.
template <class Block, bool kFive, bool kMin>
void GemvQLegacy(const void* w, size_t rb, int64_t cols, int64_t rows, const float* x, float* y) {
  const int64_t nb = cols / kQK;
  float sums[kMaxBlockSums];
  BlockSums(x, cols, sums);
  for (int64_t r = 0; r < rows; ++r) {
    const auto* b = reinterpret_cast<const Block*>(static_cast<const uint8_t*>(w) + r * rb);
    VecF acc = Zero();
    float off = 0;
    for (int64_t i = 0; i < nb; ++i) {
      const uint8_t* qh = nullptr;
      if constexpr (kFive) qh = b[i].qh;
      const float d = Fp16ToFp32(b[i].d);
      acc = Fma(DotQ4Legacy(b[i].qs, qh, x + i * kQK), Set1(d), acc);
      if constexpr (kMin) {
        off += Fp16ToFp32(b[i].m) * sums[i];
      } else {
        off -= (kFive ? 16.0f : 8.0f) * d * sums[i];
      }
    }
    y[r] = ReduceAdd(acc) + off;
  }
}

// Q4_K / Q5_K: per 64-element chunk, low nibbles are one 32-element sub-block and high nibbles
// the next; value = d * sc * q - dmin * m.
template <class Block, bool kFive>
void GemvQxK(const void* w, size_t rb, int64_t cols, int64_t rows, const float* x, float* y) {
  const int64_t nb = cols / kQK_K;
  float sums[kMaxBlockSums];
  BlockSums(x, cols, sums);
  for (int64_t r = 0; r < rows; ++r) {
    const auto* b = reinterpret_cast<const Block*>(static_cast<const uint8_t*>(w) + r * rb);
    VecF acc = Zero();
    float off = 0;
    for (int64_t i = 0; i < nb; ++i) {
      const float d = Fp16ToFp32(b[i].d), dmin = Fp16ToFp32(b[i].dmin);
      const float* xb = x + i * kQK_K;
      for (int c = 0; c < 4; ++c) {
        int sc0, m0, sc1, m1;
        KQuantScaleMin(2 * c, b[i].scales, &sc0, &m0);
        KQuantScaleMin(2 * c + 1, b[i].scales, &sc1, &m1);
        VecF lo_acc = Zero(), hi_acc = Zero();
        const uint8_t* q = b[i].qs + 32 * c;
        for (int j = 0; j < 32; j += kLanes) {
          VecI lo = Bits(q + j, 0, 15), hi = Bits(q + j, 4, 15);
          if constexpr (kFive) {
            lo = OrI(lo, ShlV(Bits(b[i].qh + j, 2 * c, 1), SetI(4)));
            hi = OrI(hi, ShlV(Bits(b[i].qh + j, 2 * c + 1, 1), SetI(4)));
          }
          lo_acc = Fma(ToFloat(lo), Load(xb + 64 * c + j), lo_acc);
          hi_acc = Fma(ToFloat(hi), Load(xb + 64 * c + 32 + j), hi_acc);
        }
        acc = Fma(lo_acc, Set1(d * static_cast<float>(sc0)), acc);
        acc = Fma(hi_acc, Set1(d * static_cast<float>(sc1)), acc);
        off -= dmin * (static_cast<float>(m0) * sums[i * 8 + 2 * c] + static_cast<float>(m1) * sums[i * 8 + 2 * c + 1]);
      }
    }
    y[r] = ReduceAdd(acc) + off;
  }
}

// Q6_K: 16-element sub-blocks with int8 scales; q = (4 low bits | 2 high bits << 4) - 32.
void GemvQ6_K(const void* w, size_t rb, int64_t cols, int64_t rows, const float* x, float* y) {
  const int64_t nb = cols / kQK_K;
  for (int64_t r = 0; r < rows; ++r) {
    const auto* b = reinterpret_cast<const BlockQ6_K*>(static_cast<const uint8_t*>(w) + r * rb);
    VecF acc = Zero();
    for (int64_t i = 0; i < nb; ++i) {
      const float d = Fp16ToFp32(b[i].d);
      for (int half = 0; half < 2; ++half) {
        const uint8_t* ql = b[i].ql + 64 * half;
        const uint8_t* qh = b[i].qh + 32 * half;
        const int8_t* sc = b[i].scales + 8 * half;
        const float* xb = x + i * kQK_K + 128 * half;
        for (int g = 0; g < 4; ++g) {  // element group g: 32 * g .. 32 * g + 31
          const uint8_t* lp = ql + ((g & 1) ? 32 : 0);
          const int lshift = g >= 2 ? 4 : 0;
          for (int s = 0; s < 2; ++s) {  // 16-element sub-block, scale sc[2 * g + s]
            VecF part = Zero();
            for (int j = 16 * s; j < 16 * s + 16; j += kLanes) {
              const VecI q = OrI(Bits(lp + j, lshift, 15), ShlV(Bits(qh + j, 2 * g, 3), SetI(4)));
              part = Fma(Sub(ToFloat(q), Set1(32.0f)), Load(xb + 32 * g + j), part);
            }
            acc = Fma(part, Set1(d * static_cast<float>(sc[2 * g + s])), acc);
          }
        }
      }
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

void LayerNorm(float* out, const float* x, const float* w, const float* b, int64_t n, float eps) {
  VecF acc = Zero();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) acc = Add(acc, Load(x + i));
  float sum = ReduceAdd(acc);
  for (; i < n; ++i) sum += x[i];
  const float mean = sum / static_cast<float>(n);
  const VecF vm = Set1(mean);
  acc = Zero();
  for (i = 0; i + kLanes <= n; i += kLanes) {
    const VecF d = Sub(Load(x + i), vm);
    acc = Fma(d, d, acc);
  }
  float var = ReduceAdd(acc);
  for (; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  const float inv = 1.0f / std::sqrt(var / static_cast<float>(n) + eps);
  const VecF vi = Set1(inv);
  for (i = 0; i + kLanes <= n; i += kLanes) {
    const VecF y = Mul(Mul(Sub(Load(x + i), vm), vi), Load(w + i));
    Store(out + i, b != nullptr ? Add(y, Load(b + i)) : y);
  }
  for (; i < n; ++i) out[i] = (x[i] - mean) * inv * w[i] + (b != nullptr ? b[i] : 0.0f);
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

// GELU (tanh form) as tanh(y) = 1 - 2 / (exp(2y) + 1), in float.
void GeluMul(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = g[i];
    const float y = 0.7978845608f * (x + 0.044715f * x * x * x);
    const float t = y > 15.0f ? 1.0f : (y < -15.0f ? -1.0f : 1.0f - 2.0f / (std::exp(2.0f * y) + 1.0f));
    g[i] = 0.5f * x * (1.0f + t) * (u != nullptr ? u[i] : 1.0f);
  }
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

// ---- integer dot products (int8 activations) ----

// 8 int32 lanes += u8 x s8 products of 32 bytes (4 per lane). VNNI where the ISA has it,
// else maddubs + madd (safe from int16 saturation for |u8| <= 128 and |s8| <= 127).
inline __m256i DpBusd(__m256i acc, __m256i u8, __m256i s8) {
#if defined(__AVX512VNNI__)
  return _mm256_dpbusd_epi32(acc, u8, s8);
#else
  const __m256i p = _mm256_maddubs_epi16(u8, s8);
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
#endif
}

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

void QuantizeAct(const float* x, int64_t n, int8_t* qs, float* d, float* ds) {
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* xb = x + b * kQK;
    __m256 m = _mm256_setzero_ps();
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int i = 0; i < kQK; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + i)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float scale = amax / 127.0f;
    const float id = scale > 0 ? 1.0f / scale : 0.0f;
    const __m256 vid = _mm256_set1_ps(id);
    __m256i acc = _mm256_setzero_si256();
    for (int i = 0; i < kQK; i += 8) {
      const __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + i), vid));  // RNE
      acc = _mm256_add_epi32(acc, q);
      const __m128i q16 = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
      const __m128i q8 = _mm_packs_epi16(q16, q16);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(qs + b * kQK + i), q8);
    }
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
    s4 = _mm_hadd_epi32(s4, s4);
    s4 = _mm_hadd_epi32(s4, s4);
    d[b] = scale;
    ds[b] = scale * static_cast<float>(_mm_cvtsi128_si32(s4));
  }
}

int64_t Int8PeakProbe(int64_t iters) {
#if defined(__AVX512VNNI__)
  __m512i a[8];
  for (int k = 0; k < 8; ++k) a[k] = _mm512_set1_epi32(k);
  const __m512i u = _mm512_set1_epi8(3), v = _mm512_set1_epi8(-2);
  for (int64_t i = 0; i < iters; ++i) {
    for (int k = 0; k < 8; ++k) a[k] = _mm512_dpbusd_epi32(a[k], u, v);
  }
  __m512i s = a[0];
  for (int k = 1; k < 8; ++k) s = _mm512_add_epi32(s, a[k]);
  volatile int sink = _mm_cvtsi128_si32(_mm512_castsi512_si128(s));  // keeps the work alive
  (void)sink;
  return iters * 8 * 64 * 2;
#else
  __m256i a[8];
  for (int k = 0; k < 8; ++k) a[k] = _mm256_set1_epi32(k);
  const __m256i u = _mm256_set1_epi8(3), v = _mm256_set1_epi8(-2);
  for (int64_t i = 0; i < iters; ++i) {
    for (int k = 0; k < 8; ++k) a[k] = DpBusd(a[k], u, v);
  }
  __m256i s = a[0];
  for (int k = 1; k < 8; ++k) s = _mm256_add_epi32(s, a[k]);
  volatile int sink = _mm256_extract_epi32(s, 0);
  (void)sink;
  return iters * 8 * 32 * 2;
#endif
}

// Final reduction of the even/odd-block accumulators. The AVX-512 GEMM keeps the same two
// accumulators in one register and reduces it this way; using the same order here makes a
// one-token GEMV bit-identical to the same token in a batched GEMM (batch invariance).
inline float ReducePair(__m256 acc0, __m256 acc1) {
#if defined(__AVX512F__)
  return _mm512_reduce_add_ps(_mm512_insertf32x8(_mm512_castps256_ps512(acc0), acc1, 1));
#else
  return HorizontalSum(_mm256_add_ps(acc0, acc1));
#endif
}

void GemvQ8Q8_0(const void* w, size_t rb, int64_t cols, int64_t rows, const ActQ8& x, float* y) {
  const int64_t nb = cols / kQK;
  for (int64_t r = 0; r < rows; ++r) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(static_cast<const uint8_t*>(w) + r * rb);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
      const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qs));
      const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i + 1].qs));
      const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + i * kQK));
      const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + (i + 1) * kQK));
      const __m256i d0 = DpBusd(_mm256_setzero_si256(), _mm256_abs_epi8(w0), _mm256_sign_epi8(x0, w0));
      const __m256i d1 = DpBusd(_mm256_setzero_si256(), _mm256_abs_epi8(w1), _mm256_sign_epi8(x1, w1));
      acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d0), _mm256_set1_ps(_cvtsh_ss(b[i].d) * x.d[i]), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d1), _mm256_set1_ps(_cvtsh_ss(b[i + 1].d) * x.d[i + 1]), acc1);
    }
    float v = ReducePair(acc0, acc1);
    if (i < nb) {  // the odd last block, added after the reduction as the GEMM does
      const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qs));
      const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + i * kQK));
      const __m256i d0 = DpBusd(_mm256_setzero_si256(), _mm256_abs_epi8(w0), _mm256_sign_epi8(x0, w0));
      v += HorizontalSum(_mm256_cvtepi32_ps(d0)) * _cvtsh_ss(b[i].d) * x.d[i];
    }
    y[r] = v;
  }
}

// Q4_0 nibbles as 32 unsigned bytes in element order (low nibbles: 0..15, high: 16..31).
inline __m256i UnpackQ4(const uint8_t* qs) {
#if defined(__AVX512BW__)
  const __m256i raw = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  const __m256i shifted = _mm256_srlv_epi16(raw, _mm256_setr_epi16(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4));
  return _mm256_and_si256(shifted, _mm256_set1_epi8(15));
#else
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(15);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m), _mm_and_si128(raw, m));
#endif
}

// value = (q - 8) * d_w: sum = d_w * d_x * dot(q, x) - 8 * d_w * (d_x * sum(x)).
void GemvQ8Q4_0(const void* w, size_t rb, int64_t cols, int64_t rows, const ActQ8& x, float* y) {
  const int64_t nb = cols / kQK;
  float dw[kMaxBlockSums];  // the row's scales as floats
  for (int64_t r = 0; r < rows; ++r) {
    const auto* b = reinterpret_cast<const BlockQ4_0*>(static_cast<const uint8_t*>(w) + r * rb);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
      const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + i * kQK));
      const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + (i + 1) * kQK));
      const __m256i d0 = DpBusd(_mm256_setzero_si256(), UnpackQ4(b[i].qs), x0);
      const __m256i d1 = DpBusd(_mm256_setzero_si256(), UnpackQ4(b[i + 1].qs), x1);
      const float w0 = _cvtsh_ss(b[i].d), w1 = _cvtsh_ss(b[i + 1].d);
      dw[i] = w0;
      dw[i + 1] = w1;
      acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d0), _mm256_set1_ps(w0 * x.d[i]), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d1), _mm256_set1_ps(w1 * x.d[i + 1]), acc1);
    }
    float v = ReducePair(acc0, acc1);
    if (i < nb) {  // the odd last block, added after the reduction as the GEMM does
      const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + i * kQK));
      const __m256i d0 = DpBusd(_mm256_setzero_si256(), UnpackQ4(b[i].qs), x0);
      dw[i] = _cvtsh_ss(b[i].d);
      v += HorizontalSum(_mm256_cvtepi32_ps(d0)) * dw[i] * x.d[i];
    }
    y[r] = v - 8.0f * Dot(dw, x.ds, nb);  // the -8 zero point
  }
}

// Q4_K with int8 activations (see the reference): two 32-element sub-blocks per 32 bytes of
// quants (low nibbles, then high), each an integer dot with its activation block.
void GemvQ8Q4_K(const void* w, size_t rb, int64_t cols, int64_t rows, const ActQ8& x, float* y) {
  const int64_t nsb = cols / kQK_K;
  const __m256i low4 = _mm256_set1_epi8(15);
  for (int64_t r = 0; r < rows; ++r) {
    const auto* blk = reinterpret_cast<const BlockQ4_K*>(static_cast<const uint8_t*>(w) + r * rb);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    float corr = 0;
    for (int64_t i = 0; i < nsb; ++i) {
      const float d = _cvtsh_ss(blk[i].d), dmin = _cvtsh_ss(blk[i].dmin);
      for (int c = 0; c < 4; ++c) {
        int sc0, m0, sc1, m1;
        KQuantScaleMin(2 * c, blk[i].scales, &sc0, &m0);
        KQuantScaleMin(2 * c + 1, blk[i].scales, &sc1, &m1);
        const int64_t b0 = i * 8 + 2 * c;
        const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[i].qs + 32 * c));
        const __m256i lo = _mm256_and_si256(raw, low4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
        const __m256i d0 = DpBusd(_mm256_setzero_si256(), lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + b0 * kQK)));
        const __m256i d1 = DpBusd(_mm256_setzero_si256(), hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + (b0 + 1) * kQK)));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d0), _mm256_set1_ps(d * static_cast<float>(sc0) * x.d[b0]), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d1), _mm256_set1_ps(d * static_cast<float>(sc1) * x.d[b0 + 1]), acc1);
        corr += dmin * (static_cast<float>(m0) * x.ds[b0] + static_cast<float>(m1) * x.ds[b0 + 1]);
      }
    }
    y[r] = HorizontalSum(_mm256_add_ps(acc0, acc1)) - corr;
  }
}

// Q6_K with int8 activations (see the reference). Per 32-element group: rebuild the 6-bit
// quants in a register, dot them with the activations, subtract 32 x the activations (same
// dot with a constant 32), and scale the low 4 lanes (first 16 elements) and the high 4 lanes
// by their sub-block scales.
void GemvQ8Q6_K(const void* w, size_t rb, int64_t cols, int64_t rows, const ActQ8& x, float* y) {
  const int64_t nsb = cols / kQK_K;
  const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3), k32 = _mm256_set1_epi8(32);
  for (int64_t r = 0; r < rows; ++r) {
    const auto* blk = reinterpret_cast<const BlockQ6_K*>(static_cast<const uint8_t*>(w) + r * rb);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nsb; ++i) {
      const float d = _cvtsh_ss(blk[i].d);
      for (int h = 0; h < 2; ++h) {
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[i].qh + 32 * h));
        for (int g = 0; g < 4; ++g) {
          const __m256i lb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[i].ql + 64 * h + ((g & 1) ? 32 : 0)));
          const __m256i lo = _mm256_and_si256(g >= 2 ? _mm256_srli_epi16(lb, 4) : lb, m4);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), m2);
          const __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
          const int64_t b = i * 8 + 4 * h + g;  // activation block
          const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + b * kQK));
          const __m256i dp = _mm256_sub_epi32(DpBusd(_mm256_setzero_si256(), q, xq), DpBusd(_mm256_setzero_si256(), k32, xq));
          const float s = d * x.d[b];
          const int8_t* sc = blk[i].scales + 8 * h + 2 * g;
          const __m256 sv = _mm256_setr_m128(_mm_set1_ps(s * sc[0]), _mm_set1_ps(s * sc[1]));
          acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dp), sv, acc);
        }
      }
    }
    y[r] = HorizontalSum(acc);
  }
}

// ---- Q4_0R: Q4_0 re-laid-out at load with each row's scales in front (ggml_types.h) ----

constexpr int kLayoutQ8_0 = 0, kLayoutQ4_0 = 1, kLayoutQ4_0R = 2, kLayoutQ8_0R = 3;

// Float activations.
void GemvQ4_0R(const void* w, size_t rb, int64_t cols, int64_t rows, const float* x, float* y) {
  const int64_t nb = cols / kQK;
  float sums[kMaxBlockSums];
  BlockSums(x, cols, sums);
  for (int64_t r = 0; r < rows; ++r) {
    const auto* row = static_cast<const uint8_t*>(w) + r * rb;
    const auto* sc = reinterpret_cast<const uint16_t*>(row);
    VecF acc = Zero();
    float off = 0;
    for (int64_t b = 0; b < nb; ++b) {
      const float d = _cvtsh_ss(sc[b]);
      acc = Fma(DotQ4Legacy(row + 2 * nb + 16 * b, nullptr, x + b * kQK), Set1(d), acc);
      off -= 8.0f * d * sums[b];
    }
    y[r] = ReduceAdd(acc) + off;
  }
}

// Int8 activations: the row's scales are converted and multiplied by the activation scales
// 16 (AVX-512) or 8 blocks at a time, so each block costs unpack + dot + convert + FMA.
void GemvQ8Q4_0R(const void* w, size_t rb, int64_t cols, int64_t rows, const ActQ8& x, float* y) {
  const int64_t nb = cols / kQK;
  constexpr int G = kLanes;  // blocks per scale group
  alignas(64) float sv[G];
  float dw[kMaxBlockSums];  // the row's scales as floats (for the zero-point term)
  for (int64_t r = 0; r < rows; ++r) {
    const auto* row = static_cast<const uint8_t*>(w) + r * rb;
    const auto* sc = reinterpret_cast<const uint16_t*>(row);
    const uint8_t* qs = row + 2 * nb;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t b0 = 0;
    for (; b0 + G <= nb; b0 += G) {
      const VecF ws = LoadF16(sc + b0);
      Store(dw + b0, ws);
      Store(sv, Mul(ws, Load(x.d + b0)));
#pragma GCC unroll 16
      for (int k = 0; k < G; k += 2) {
        const int64_t b = b0 + k;
        const __m256i d0 = DpBusd(_mm256_setzero_si256(), UnpackQ4(qs + 16 * b),
                                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + b * kQK)));
        const __m256i d1 = DpBusd(_mm256_setzero_si256(), UnpackQ4(qs + 16 * (b + 1)),
                                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + (b + 1) * kQK)));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d0), _mm256_broadcast_ss(sv + k), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d1), _mm256_broadcast_ss(sv + k + 1), acc1);
      }
    }
    auto block = [&](int64_t b) {
      return _mm256_cvtepi32_ps(DpBusd(_mm256_setzero_si256(), UnpackQ4(qs + 16 * b),
                                       _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + b * kQK))));
    };
    for (int64_t b = b0; b < nb; ++b) dw[b] = _cvtsh_ss(sc[b]);
    int64_t b = b0;
    for (; b + 1 < nb; b += 2) {
      acc0 = _mm256_fmadd_ps(block(b), _mm256_set1_ps(dw[b] * x.d[b]), acc0);
      acc1 = _mm256_fmadd_ps(block(b + 1), _mm256_set1_ps(dw[b + 1] * x.d[b + 1]), acc1);
    }
    float v = ReducePair(acc0, acc1);
    if (b < nb) v += HorizontalSum(block(b)) * dw[b] * x.d[b];  // the odd last block, as the GEMM
    y[r] = v - 8.0f * Dot(dw, x.ds, nb);
  }
}

// kQ8_0R, float activations.
void GemvQ8_0R(const void* w, size_t rb, int64_t cols, int64_t rows, const float* x, float* y) {
  const int64_t nb = cols / kQK;
  for (int64_t r = 0; r < rows; ++r) {
    const auto* row = static_cast<const uint8_t*>(w) + r * rb;
    const auto* sc = reinterpret_cast<const uint16_t*>(row);
    const auto* qs = reinterpret_cast<const int8_t*>(row + 2 * nb);
    VecF acc = Zero();
    for (int64_t b = 0; b < nb; ++b) acc = Fma(DotBlock32(qs + b * kQK, x + b * kQK, Zero()), Set1(_cvtsh_ss(sc[b])), acc);
    y[r] = ReduceAdd(acc);
  }
}

// kQ8_0R, int8 activations (scales converted G blocks at a time, as for Q4_0R).
void GemvQ8Q8_0R(const void* w, size_t rb, int64_t cols, int64_t rows, const ActQ8& x, float* y) {
  const int64_t nb = cols / kQK;
  constexpr int G = kLanes;
  alignas(64) float sv[G];
  for (int64_t r = 0; r < rows; ++r) {
    const auto* row = static_cast<const uint8_t*>(w) + r * rb;
    const auto* sc = reinterpret_cast<const uint16_t*>(row);
    const auto* qs = reinterpret_cast<const int8_t*>(row + 2 * nb);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t b0 = 0;
    auto block = [&](int64_t b) {
      const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + b * kQK));
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + b * kQK));
      return _mm256_cvtepi32_ps(DpBusd(_mm256_setzero_si256(), _mm256_abs_epi8(wq), _mm256_sign_epi8(xq, wq)));
    };
    for (; b0 + G <= nb; b0 += G) {
      Store(sv, Mul(LoadF16(sc + b0), Load(x.d + b0)));
#pragma GCC unroll 16
      for (int k = 0; k < G; k += 2) {
        acc0 = _mm256_fmadd_ps(block(b0 + k), _mm256_broadcast_ss(sv + k), acc0);
        acc1 = _mm256_fmadd_ps(block(b0 + k + 1), _mm256_broadcast_ss(sv + k + 1), acc1);
      }
    }
    int64_t b = b0;
    for (; b + 1 < nb; b += 2) {
      acc0 = _mm256_fmadd_ps(block(b), _mm256_set1_ps(_cvtsh_ss(sc[b]) * x.d[b]), acc0);
      acc1 = _mm256_fmadd_ps(block(b + 1), _mm256_set1_ps(_cvtsh_ss(sc[b + 1]) * x.d[b + 1]), acc1);
    }
    float v = ReducePair(acc0, acc1);
    if (b < nb) v += HorizontalSum(block(b)) * _cvtsh_ss(sc[b]) * x.d[b];  // the odd last block, as the GEMM
    y[r] = v;
  }
}

// ---- integer GEMM: register tiles of R rows x T tokens ----

#if defined(__AVX512F__)
// Two consecutive blocks' scales as [s0 x 8 | s1 x 8].
inline __m512 PairScales(const float* s) {
  const __m128 two = _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s)));  // unaligned
  return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0), _mm512_castps128_ps512(two));
}

// Weights of two consecutive blocks as 64 bytes for dpbusd (u8), with the matching signed
// activation operand: Q4_0 passes x through (offset handled separately), Q8_0 moves the
// weight's sign onto x.
// kL: weight layout, kLayoutQ8_0, kLayoutQ4_0 or kLayoutQ4_0R (scales in front of the row).
template <int kL>
inline __m512i WeightPair(const uint8_t* row, int64_t b, size_t block_bytes, int64_t nb) {
  if constexpr (kL == kLayoutQ4_0R) {
    const uint8_t* q = row + 2 * nb + 16 * b;
    return _mm512_inserti64x4(_mm512_castsi256_si512(UnpackQ4(q)), UnpackQ4(q + 16), 1);
  } else if constexpr (kL == kLayoutQ8_0R) {
    return _mm512_loadu_si512(row + 2 * nb + kQK * b);
  }
  const uint8_t* p0 = row + static_cast<size_t>(b) * block_bytes + 2;  // skip the fp16 scale
  const uint8_t* p1 = p0 + block_bytes;
  if constexpr (kL == kLayoutQ4_0) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(UnpackQ4(p0)), UnpackQ4(p1), 1);
  } else {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p0))),
                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p1)), 1);
  }
}

inline float ReduceZ(__m512 v) { return _mm512_reduce_add_ps(v); }

// One R x T tile over block pairs [0, nb2 * 2); odd tail blocks and the Q4_0 offset are added
// by the caller.
template <int kL, int R, int T>
void GemmTile(const uint8_t* w, size_t rb, int64_t cols, const float* dw, const ActQ8& x,
              float* out /* [T][R] */) {
  constexpr bool kQ4 = kL == kLayoutQ4_0 || kL == kLayoutQ4_0R;
  const size_t bb = kQ4 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
  const int64_t nb = cols / kQK;
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b + 1 < nb; b += 2) {
    __m512i xv[T];
    __m512 dx[T];
    for (int t = 0; t < T; ++t) {
      xv[t] = _mm512_loadu_si512(x.qs + t * cols + b * kQK);
      dx[t] = PairScales(x.d + t * nb + b);
    }
    for (int r = 0; r < R; ++r) {
      const __m512i wv = WeightPair<kL>(w + static_cast<size_t>(r) * rb, b, bb, nb);
      const __m512 dwr = PairScales(dw + r * nb + b);
      const __m512i wabs = kQ4 ? wv : _mm512_abs_epi8(wv);
      const __mmask64 neg = kQ4 ? 0 : _mm512_movepi8_mask(wv);
      for (int t = 0; t < T; ++t) {
        // Q8_0: x * sign(w) (negate where w < 0; w == 0 contributes 0 through |w| anyway).
        const __m512i xs = kQ4 ? xv[t] : _mm512_mask_sub_epi8(xv[t], neg, _mm512_setzero_si512(), xv[t]);
        const __m512i dp = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wabs, xs);
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), _mm512_mul_ps(dwr, dx[t]), acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) out[t * R + r] = ReduceZ(acc[r][t]);
  }
}

template <int kL, int R>
void GemmRows(const uint8_t* w, size_t rb, int64_t cols, const float* dw, const ActQ8& x, int n_tok,
              float* y, int64_t ldy) {
  const int64_t nb = cols / kQK;
  float out[4 * 4];
  for (int t0 = 0; t0 < n_tok; t0 += 4) {
    const int T = n_tok - t0 < 4 ? n_tok - t0 : 4;
    const ActQ8 xt = x.Token(t0, cols);
    switch (T) {
      case 4: GemmTile<kL, R, 4>(w, rb, cols, dw, xt, out); break;
      case 3: GemmTile<kL, R, 3>(w, rb, cols, dw, xt, out); break;
      case 2: GemmTile<kL, R, 2>(w, rb, cols, dw, xt, out); break;
      default: GemmTile<kL, R, 1>(w, rb, cols, dw, xt, out); break;
    }
    for (int t = 0; t < T; ++t) {
      const int8_t* xq = xt.qs + t * cols;
      const float* xd = xt.d + t * nb;
      const float* xds = xt.ds + t * nb;
      for (int r = 0; r < R; ++r) {
        float v = out[t * R + r];
        const uint8_t* row = w + static_cast<size_t>(r) * rb;
        if (nb % 2 == 1) {  // the odd last block
          const int64_t b = nb - 1;
          const __m256i xb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * kQK));
          __m256i dp;
          if constexpr (kL == kLayoutQ4_0R) {
            dp = DpBusd(_mm256_setzero_si256(), UnpackQ4(row + 2 * nb + 16 * b), xb);
          } else if constexpr (kL == kLayoutQ4_0) {
            dp = DpBusd(_mm256_setzero_si256(), UnpackQ4(reinterpret_cast<const BlockQ4_0*>(row)[b].qs), xb);
          } else if constexpr (kL == kLayoutQ8_0R) {
            const __m256i wb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * nb + kQK * b));
            dp = DpBusd(_mm256_setzero_si256(), _mm256_abs_epi8(wb), _mm256_sign_epi8(xb, wb));
          } else {
            const __m256i wb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const BlockQ8_0*>(row)[b].qs));
            dp = DpBusd(_mm256_setzero_si256(), _mm256_abs_epi8(wb), _mm256_sign_epi8(xb, wb));
          }
          v += HorizontalSum(_mm256_cvtepi32_ps(dp)) * dw[r * nb + b] * xd[b];
        }
        if constexpr (kL == kLayoutQ4_0 || kL == kLayoutQ4_0R) v -= 8.0f * Dot(dw + r * nb, xds, nb);  // the -8 zero point
        y[(t0 + t) * ldy + r] = v;
      }
    }
  }
}

template <int kL>
void GemmQ8(const void* w, size_t rb, int64_t cols, int64_t rows, const ActQ8& x, int n_tok,
            float* y, int64_t ldy) {
  const int64_t nb = cols / kQK;
  constexpr bool kQ4 = kL == kLayoutQ4_0 || kL == kLayoutQ4_0R;
  const size_t bb = kQ4 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
  float dw[4 * kMaxBlockSums];  // the tile's weight scales as floats
  const auto* base = static_cast<const uint8_t*>(w);
  for (int64_t r0 = 0; r0 < rows; r0 += 4) {
    const int R = rows - r0 < 4 ? static_cast<int>(rows - r0) : 4;
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = base + static_cast<size_t>(r0 + r) * rb;
      int64_t b = 0;
      if constexpr (kL == kLayoutQ4_0R || kL == kLayoutQ8_0R) {  // contiguous scales: 16 at a time
        for (; b + 16 <= nb; b += 16) {
          _mm512_storeu_ps(dw + r * nb + b, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * b))));
        }
        for (; b < nb; ++b) {
          uint16_t h;
          std::memcpy(&h, row + 2 * b, 2);
          dw[r * nb + b] = _cvtsh_ss(h);
        }
      } else {
        for (; b < nb; ++b) {
          uint16_t h;
          std::memcpy(&h, row + static_cast<size_t>(b) * bb, 2);
          dw[r * nb + b] = _cvtsh_ss(h);
        }
      }
    }
    const uint8_t* wr = base + static_cast<size_t>(r0) * rb;
    float* yr = y + r0;
    switch (R) {
      case 4: GemmRows<kL, 4>(wr, rb, cols, dw, x, n_tok, yr, ldy); break;
      case 3: GemmRows<kL, 3>(wr, rb, cols, dw, x, n_tok, yr, ldy); break;
      case 2: GemmRows<kL, 2>(wr, rb, cols, dw, x, n_tok, yr, ldy); break;
      default: GemmRows<kL, 1>(wr, rb, cols, dw, x, n_tok, yr, ldy); break;
    }
  }
}
#else
// AVX2: one GEMV per token (each weight block is reused from cache by the caller's row tiling).
template <int kL>
void GemmQ8(const void* w, size_t rb, int64_t cols, int64_t rows, const ActQ8& x, int n_tok,
            float* y, int64_t ldy) {
  for (int t = 0; t < n_tok; ++t) {
    const ActQ8 xt = x.Token(t, cols);
    if constexpr (kL == kLayoutQ4_0R) GemvQ8Q4_0R(w, rb, cols, rows, xt, y + t * ldy);
    else if constexpr (kL == kLayoutQ8_0R) GemvQ8Q8_0R(w, rb, cols, rows, xt, y + t * ldy);
    else if constexpr (kL == kLayoutQ4_0) GemvQ8Q4_0(w, rb, cols, rows, xt, y + t * ldy);
    else GemvQ8Q8_0(w, rb, cols, rows, xt, y + t * ldy);
  }
}
#endif

// ---- KV rows ----

template <KvDtype T>
float KvDot(const float* q, const uint8_t* row, int head, int nh, int hd) {
  const int off = head * hd;
  if constexpr (T == KvDtype::kF32) {
    return Dot(q, reinterpret_cast<const float*>(row) + off, hd);
  } else if constexpr (T == KvDtype::kF16) {
    return DotHalf(reinterpret_cast<const uint16_t*>(row) + off, q, hd, LoadF16, Fp16ToFp32);
  } else if constexpr (T == KvDtype::kBF16) {
    return DotHalf(reinterpret_cast<const uint16_t*>(row) + off, q, hd, LoadBf16, Bf16ToFp32);
  } else if constexpr (T == KvDtype::kI8) {
    float d;
    std::memcpy(&d, row + 4 * head, 4);
    const auto* w = reinterpret_cast<const int8_t*>(row + 4 * nh) + off;
    VecF acc = Zero();
    int i = 0;
    for (; i + kLanes <= hd; i += kLanes) acc = Fma(LoadI8(w + i), Load(q + i), acc);
    float s = ReduceAdd(acc);
    for (; i < hd; ++i) s += static_cast<float>(w[i]) * q[i];
    return d * s;
  } else {
    const int g = KvI4Group(hd);
    if (g / 2 < kLanes) {
      float buf[256];
      float s = 0;
      for (int c = 0; c < hd; c += 256) {
        const int n = hd - c < 256 ? hd - c : 256;
        KvDecodeHead(T, row, head, nh, hd, c, n, buf);
        for (int i = 0; i < n; ++i) s += buf[i] * q[c + i];
      }
      return s;
    }
    const uint8_t* grp = row + static_cast<size_t>(off / g) * (2 + g / 2);
    VecF acc = Zero();
    for (int s = 0; s < hd; s += g, grp += 2 + g / 2) {
      uint16_t dh;
      std::memcpy(&dh, grp, 2);
      VecF part = Zero();
      for (int j = 0; j < g / 2; j += kLanes) {
        part = Fma(Sub(ToFloat(Bits(grp + 2 + j, 0, 15)), Set1(8.0f)), Load(q + s + j), part);
        part = Fma(Sub(ToFloat(Bits(grp + 2 + j, 4, 15)), Set1(8.0f)), Load(q + s + g / 2 + j), part);
      }
      acc = Fma(part, Set1(Fp16ToFp32(dh)), acc);
    }
    return ReduceAdd(acc);
  }
}

template <KvDtype T>
void KvAxpy(float* y, float a, const uint8_t* row, int head, int nh, int hd) {
  const int off = head * hd;
  const VecF va = Set1(a);
  int i = 0;
  if constexpr (T == KvDtype::kF32) {
    Axpy(y, a, reinterpret_cast<const float*>(row) + off, hd);
    return;
  } else if constexpr (T == KvDtype::kF16 || T == KvDtype::kBF16) {
    const auto* w = reinterpret_cast<const uint16_t*>(row) + off;
    for (; i + kLanes <= hd; i += kLanes) {
      const VecF v = T == KvDtype::kF16 ? LoadF16(w + i) : LoadBf16(w + i);
      Store(y + i, Fma(va, v, Load(y + i)));
    }
    for (; i < hd; ++i) y[i] += a * (T == KvDtype::kF16 ? Fp16ToFp32(w[i]) : Bf16ToFp32(w[i]));
  } else if constexpr (T == KvDtype::kI8) {
    float d;
    std::memcpy(&d, row + 4 * head, 4);
    const auto* w = reinterpret_cast<const int8_t*>(row + 4 * nh) + off;
    const VecF vad = Set1(a * d);
    for (; i + kLanes <= hd; i += kLanes) Store(y + i, Fma(vad, LoadI8(w + i), Load(y + i)));
    for (; i < hd; ++i) y[i] += a * d * static_cast<float>(w[i]);
  } else {
    float buf[256];
    for (int c = 0; c < hd; c += 256) {
      const int n = hd - c < 256 ? hd - c : 256;
      KvDecodeHead(T, row, head, nh, hd, c, n, buf);
      for (int j = 0; j < n; ++j) y[c + j] += a * buf[j];
    }
  }
}



// ---- 16-row interleaved layouts (X16Kind; ggml_types.h) ----
// One row per 32-bit lane: per 32-element block and token, 8 dot-product instructions advance
// all 16 rows by 4 elements each into an int32 accumulator (exact), then one convert and one or
// two FMAs apply the scales to the 16 rows at once:
//   kQ4S, kQ8B: y += d_w * (d_x * dot + c)        c = -Z * (d_x * sum(q_x)), Z = 8 or 128
//   kQ8C:       y += d_x * dot + c, y *= d_w (per row) at the end
//   kQ4Z:       y += d_w * (d_x * dot) + m_w * (d_x * sum(q_x))
// (Z: the zero point the stored quants carry; 8-bit quants are stored offset by 128 so the
// weights are the unsigned operand.) No horizontal sums. A lane's operations and their order do
// not depend on how many tokens share the tile, so a token alone (the GEMV) gives bit-identical
// results to the same token in a batch.

inline int32_t Load32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// 5-bit kinds: Q4's nibble blocks plus a vector of 5th bits.
constexpr bool IsQ5(X16Kind k) { return k == X16Kind::kQ5S || k == X16Kind::kQ5Z || k == X16Kind::kQ5K; }
// Kinds whose quants are nibbles (+ 5th bits) dotted as unsigned bytes with the activations.
constexpr bool IsQ4(X16Kind k) { return k == X16Kind::kQ4S || k == X16Kind::kQ4Z || k == X16Kind::kQ4K || IsQ5(k); }
// Scale and minimum per block (value q * d + m); k-quant scales (6-bit, per 32, from the super-block header).
constexpr bool HasMin(X16Kind k) { return k == X16Kind::kQ4Z || k == X16Kind::kQ5Z || k == X16Kind::kQ4K || k == X16Kind::kQ5K; }
constexpr bool IsK(X16Kind k) { return k == X16Kind::kQ4K || k == X16Kind::kQ5K; }
constexpr size_t X16Header(X16Kind k) {
  return (k == X16Kind::kQ4Z || k == X16Kind::kQ5Z) ? 64 : (k == X16Kind::kQ8C ? 0 : (IsK(k) ? 256 : (k == X16Kind::kQ6K ? 288 : 32)));
}
constexpr size_t X16Block(X16Kind k) { return IsQ5(k) ? 320 : (IsQ4(k) ? 256 : (k == X16Kind::kQ6K ? 384 : 512)); }
// Software prefetch of the weight stream, kWeightPrefetchBytes ahead, for the kinds where it
// was measured to help: the k-quants, whose super-block headers seem to keep the hardware
// prefetcher behind (one core streaming from memory: Q4_K 21 -> 38 GB/s, Q5_K 19 -> 34, Q6_K
// 29 -> 37); Q4_0, Q5_0, Q5_1, Q8_0 are at the hardware prefetcher's pace already and lose a
// little with it (`paddock bench --kernels`). SetWeightPrefetch switches it off, or on for
// every kind, to measure.
template <X16Kind K>
inline void PrefetchWeights(const uint8_t* p) {
  constexpr Prefetch kMin = PrefetchesByDefault(K) ? Prefetch::kAuto : Prefetch::kAll;
  if (static_cast<int>(WeightPrefetch()) >= static_cast<int>(kMin)) {
    for (size_t l = 0; l < X16Block(K); l += 64) _mm_prefetch(reinterpret_cast<const char*>(p + kWeightPrefetchBytes + l), _MM_HINT_T0);
  }
}

// Tokens per register tile: Q6_K keeps two int32 accumulators per token (its scales change
// every 16 elements), so it takes fewer at once.
#if defined(__AVX512VNNI__)
constexpr int X16MaxTile(X16Kind k) { return k == X16Kind::kQ6K ? 6 : 8; }
#else
constexpr int X16MaxTile(X16Kind) { return 4; }
#endif

#if defined(__AVX512VNNI__)
// 2:4 sparse int8 (PS8_C): per 8 elements of a row, the 4 stored values meet the 4 activations
// they multiply, picked out of the 8 by a byte shuffle whose indices are expanded from the
// stored 4-bit pair codes (shared by all tokens of the tile): half the multiply-adds of dense
// int8, and 5.5 bits per weight instead of 8.
inline void SparseStepIndices(int step, __m512i codes, __m512i* idx) {
  const __m512i rep = _mm512_broadcast_i32x4(_mm_setr_epi8(step, step, step, step, 4 + step, 4 + step, 4 + step, 4 + step, 8 + step, 8 + step,
                                                           8 + step, 8 + step, 12 + step, 12 + step, 12 + step, 12 + step));
  __m512i r = _mm512_shuffle_epi8(codes, rep);                        // lane's code byte x 4
  r = _mm512_srlv_epi16(r, _mm512_set1_epi32(4 << 16));              // bytes 2, 3: high nibble
  r = _mm512_and_si512(r, _mm512_set1_epi8(15));
  r = _mm512_add_epi8(r, _mm512_set1_epi32(0x08000800));             // odd bytes: second of the pair
  const __m512i lut = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 0, 0, 1, 1, 2, 0, 0, 1, 2, 3, 2, 3, 3, 0, 0));
  *idx = _mm512_add_epi8(_mm512_shuffle_epi8(lut, r), _mm512_set1_epi32(0x04040000));  // group 2s + 1: +4
}

template <int T>
void SparseTile(const uint8_t* grp, int64_t cols, const int8_t* xq, const float* xd, float* y, int64_t ldy) {
  const int64_t nb = cols / kQK;
  const __m512 row_scale = _mm512_loadu_ps(reinterpret_cast<const float*>(grp));
  const uint8_t* p = grp + 64;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 facc[T];
  for (int t = 0; t < T; ++t) facc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, p += 352) {
    // Activations enter as unsigned (a + 128): start from -128 x the lane's stored-quant sum.
    const __m512i init = _mm512_sub_epi32(_mm512_setzero_si512(),
        _mm512_slli_epi32(_mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 7));
    __m512i acc[T];
    for (int t = 0; t < T; ++t) acc[t] = init;
    const __m512i codes = _mm512_loadu_si512(p + 288);
    const int8_t* xb = xq + b * kQK;
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {
      __m512i idx;
      SparseStepIndices(s, codes, &idx);
      const __m512i w = _mm512_loadu_si512(p + 32 + 64 * s);
      for (int t = 0; t < T; ++t) {
        int64_t a8;
        std::memcpy(&a8, xb + t * cols + 8 * s, 8);
        const __m512i a = _mm512_xor_si512(_mm512_set1_epi64(a8), flip);
        acc[t] = _mm512_dpbusd_epi32(acc[t], _mm512_shuffle_epi8(a, idx), w);
      }
    }
    for (int t = 0; t < T; ++t) facc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t]), _mm512_set1_ps(xd[t * nb + b]), facc[t]);
  }
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * ldy, _mm512_mul_ps(facc[t], row_scale));
}

// One Q6_K 32-element block of a 16-row group for T tokens. The 6-bit quants are rebuilt
// (low nibbles | high 2 bits << 4) and made signed (q - 32); the activations enter as unsigned
// bytes (a + 128), and 128 x each lane's quant sum (shared by all tokens) is taken back out.
// The first and second 16 elements have their own scales (s_lo, s_hi, times d).
template <int T>
inline void Q6KBlock(const uint8_t* p, const int8_t* xb, int64_t cols, const float* xd, int64_t nb,
                     __m512 s_lo, __m512 s_hi, __m512* facc) {
  const __m512i m4 = _mm512_set1_epi8(15), top = _mm512_set1_epi8(0x30), k32 = _mm512_set1_epi8(32),
                k128 = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i h0 = _mm512_loadu_si512(p + 256), h1 = _mm512_loadu_si512(p + 320);
  __m512i acc[T], acc2[T];
  for (int t = 0; t < T; ++t) acc[t] = acc2[t] = _mm512_setzero_si512();
  __m512i c_lo = _mm512_setzero_si512(), c_hi = c_lo;
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {
    const __m512i v = _mm512_loadu_si512(p + 64 * m);
    // high bits 2m..2m+1 of each byte moved to bits 4..5
    const __m512i hb0 = m == 3 ? _mm512_srli_epi16(h0, 2) : _mm512_slli_epi16(h0, 4 - 2 * m);
    const __m512i hb1 = m == 3 ? _mm512_srli_epi16(h1, 2) : _mm512_slli_epi16(h1, 4 - 2 * m);
    const __m512i wl = _mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(v, m4), _mm512_and_si512(hb0, top)), k32);
    const __m512i wh = _mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), _mm512_and_si512(hb1, top)), k32);
    c_lo = _mm512_dpbusd_epi32(c_lo, k128, wl);
    c_hi = _mm512_dpbusd_epi32(c_hi, k128, wh);
    for (int t = 0; t < T; ++t) {
      const int8_t* xt = xb + t * cols;
      acc[t] = _mm512_dpbusd_epi32(acc[t], _mm512_set1_epi32(Load32(xt + 4 * m) ^ static_cast<int32_t>(0x80808080u)), wl);
      acc2[t] = _mm512_dpbusd_epi32(acc2[t], _mm512_set1_epi32(Load32(xt + 16 + 4 * m) ^ static_cast<int32_t>(0x80808080u)), wh);
    }
  }
  for (int t = 0; t < T; ++t) {
    const __m512 f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[t], c_lo)), s_lo,
                                     _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc2[t], c_hi)), s_hi));
    facc[t] = _mm512_fmadd_ps(f, _mm512_set1_ps(xd[t * nb]), facc[t]);
  }
}

// One 16-row group x T tokens (token t's quants at xq + t * cols, scales at xd/xds + t * nb).
// G: elements per scale group.
template <X16Kind K, int G, int T>
void X16Tile(const uint8_t* grp, int64_t cols, const int8_t* xq, const float* xd, const float* xds,
             float* y, int64_t ldy) {
  constexpr bool kSplit = T <= 4;  // two int32 chains per token where few tokens hide latency
  constexpr int BPS = G / kQK;
  constexpr float kZero = K == X16Kind::kQ4S ? 8.0f : (K == X16Kind::kQ5S ? 16.0f : (HasMin(K) ? 0.0f : 128.0f));
  const int64_t nb = cols / kQK;
  const __m512i m4 = _mm512_set1_epi8(15);
  const uint8_t* p = grp;
  __m512 row_scale = _mm512_setzero_ps();
  if constexpr (K == X16Kind::kQ8C) {
    row_scale = _mm512_loadu_ps(reinterpret_cast<const float*>(p));
    p += 64;
  }
  __m512 facc[T];
  for (int t = 0; t < T; ++t) facc[t] = _mm512_setzero_ps();
  for (int64_t b0 = 0; b0 < nb; b0 += BPS) {
    __m512 sw = _mm512_setzero_ps(), mw = _mm512_setzero_ps(), dv = _mm512_setzero_ps(), ndmin = dv;
    __m512i sc_lo = _mm512_setzero_si512(), sc_hi = sc_lo, mn_lo = sc_lo, mn_hi = sc_lo;
    if constexpr (IsK(K)) {
      // d, -dmin, and the 6-bit scales / mins unpacked to bytes: sc_lo = sub-blocks 0..3 (byte
      // j of each lane), sc_hi = 4..7 (the k-quant packing, 16 lanes at once).
      dv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
      ndmin = _mm512_sub_ps(_mm512_setzero_ps(), _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32))));
      const __m512i u0 = _mm512_loadu_si512(p + 64), u1 = _mm512_loadu_si512(p + 128), u2 = _mm512_loadu_si512(p + 192);
      const __m512i m6 = _mm512_set1_epi8(63), m4b = _mm512_set1_epi8(15), top = _mm512_set1_epi8(0x30);
      sc_lo = _mm512_and_si512(u0, m6);
      mn_lo = _mm512_and_si512(u1, m6);
      sc_hi = _mm512_or_si512(_mm512_and_si512(u2, m4b), _mm512_and_si512(_mm512_srli_epi32(u0, 2), top));
      mn_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), m4b), _mm512_and_si512(_mm512_srli_epi32(u1, 2), top));
    } else if constexpr (K == X16Kind::kQ6K) {
      dv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    } else {
      if constexpr (K != X16Kind::kQ8C) sw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
      if constexpr (HasMin(K)) mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)));
    }
    const uint8_t* hdr = p;
    p += X16Header(K);
    for (int bi = 0; bi < BPS; ++bi, p += X16Block(K)) {
      const int64_t b = b0 + bi;
      const int8_t* xb = xq + b * kQK;
      PrefetchWeights<K>(p);
      if constexpr (K == X16Kind::kQ6K) {
        // Sub-block scales 2 bi (first 16 elements) and 2 bi + 1, sign-extended from their bytes.
        const __m512i sv = _mm512_loadu_si512(hdr + 32 + 64 * (bi / 2));
        const __m512i shl_lo = _mm512_set1_epi32(24 - 16 * (bi % 2)), shl_hi = _mm512_set1_epi32(16 - 16 * (bi % 2));
        const __m512 s_lo = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_sllv_epi32(sv, shl_lo), 24)));
        const __m512 s_hi = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_sllv_epi32(sv, shl_hi), 24)));
        Q6KBlock<T>(p, xb, cols, xd + b, nb, s_lo, s_hi, facc);
        continue;
      }
      if constexpr (IsK(K)) {
        const __m512i shift = _mm512_set1_epi32(8 * (bi % 4)), byte = _mm512_set1_epi32(255);
        const __m512i sc = _mm512_and_si512(_mm512_srlv_epi32(bi < 4 ? sc_lo : sc_hi, shift), byte);
        const __m512i mn = _mm512_and_si512(_mm512_srlv_epi32(bi < 4 ? mn_lo : mn_hi, shift), byte);
        sw = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(sc));
        mw = _mm512_mul_ps(ndmin, _mm512_cvtepi32_ps(mn));
      }
      __m512i acc[T], acc2[T];
      for (int t = 0; t < T; ++t) acc[t] = acc2[t] = _mm512_setzero_si512();
      if constexpr (IsQ4(K)) {
        __m512i q5 = _mm512_setzero_si512();
        if constexpr (IsQ5(K)) q5 = _mm512_loadu_si512(p + 256);
#pragma GCC unroll 4
        for (int m = 0; m < 4; ++m) {
          const __m512i v = _mm512_loadu_si512(p + 64 * m);
          __m512i lo = _mm512_and_si512(v, m4);
          __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
          if constexpr (IsQ5(K)) {  // 5th bits m (low half) and 4 + m (high half) to bit 4
            const __m512i b4 = _mm512_set1_epi8(16);
            lo = _mm512_or_si512(lo, _mm512_and_si512(_mm512_slli_epi16(q5, 4 - m), b4));
            hi = _mm512_or_si512(hi, _mm512_and_si512(_mm512_srli_epi16(q5, m), b4));
          }
          for (int t = 0; t < T; ++t) {
            const int8_t* xt = xb + t * cols;
            acc[t] = _mm512_dpbusd_epi32(acc[t], lo, _mm512_set1_epi32(Load32(xt + 4 * m)));
            __m512i& a2 = kSplit ? acc2[t] : acc[t];
            a2 = _mm512_dpbusd_epi32(a2, hi, _mm512_set1_epi32(Load32(xt + 16 + 4 * m)));
          }
        }
      } else {
#pragma GCC unroll 8
        for (int g = 0; g < 8; ++g) {
          const __m512i v = _mm512_loadu_si512(p + 64 * g);
          for (int t = 0; t < T; ++t) {
            __m512i& a = (kSplit && (g & 1)) ? acc2[t] : acc[t];
            a = _mm512_dpbusd_epi32(a, v, _mm512_set1_epi32(Load32(xb + t * cols + 4 * g)));
          }
        }
      }
      for (int t = 0; t < T; ++t) {
        const __m512 f = _mm512_cvtepi32_ps(kSplit ? _mm512_add_epi32(acc[t], acc2[t]) : acc[t]);
        const float d = xd[t * nb + b], ds = xds[t * nb + b];
        if constexpr (HasMin(K)) {
          facc[t] = _mm512_fmadd_ps(_mm512_mul_ps(f, _mm512_set1_ps(d)), sw, facc[t]);
          facc[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(ds), facc[t]);
        } else {
          const __m512 tmp = _mm512_fmadd_ps(f, _mm512_set1_ps(d), _mm512_set1_ps(-kZero * ds));
          facc[t] = K == X16Kind::kQ8C ? _mm512_add_ps(facc[t], tmp) : _mm512_fmadd_ps(tmp, sw, facc[t]);
        }
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    if constexpr (K == X16Kind::kQ8C) facc[t] = _mm512_mul_ps(facc[t], row_scale);
    _mm512_storeu_ps(y + t * ldy, facc[t]);
  }
}
#else
// AVX2 form of the 2:4 sparse int8 tile (see the AVX-512 one): 8-row halves, signed products
// through the sign trick (no zero point).
template <int T>
void SparseTile(const uint8_t* grp, int64_t cols, const int8_t* xq, const float* xd, float* y, int64_t ldy) {
  const int64_t nb = cols / kQK;
  const __m128i lut = _mm_setr_epi8(0, 0, 0, 1, 1, 2, 0, 0, 1, 2, 3, 2, 3, 3, 0, 0);
  for (int h = 0; h < 2; ++h) {
    const __m256 row_scale = _mm256_loadu_ps(reinterpret_cast<const float*>(grp) + 8 * h);
    const uint8_t* p = grp + 64;
    __m256 facc[T];
    for (int t = 0; t < T; ++t) facc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b, p += 352) {
      __m256i acc[T];
      for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_si256();
      const __m256i codes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 288 + 32 * h));
      const int8_t* xb = xq + b * kQK;
      for (int s = 0; s < 4; ++s) {
        const __m256i rep = _mm256_broadcastsi128_si256(_mm_setr_epi8(s, s, s, s, 4 + s, 4 + s, 4 + s, 4 + s, 8 + s, 8 + s, 8 + s, 8 + s,
                                                                      12 + s, 12 + s, 12 + s, 12 + s));
        __m256i r = _mm256_shuffle_epi8(codes, rep);
        // bytes 2, 3 take the high nibble: shift those words by 4
        r = _mm256_blend_epi16(r, _mm256_srli_epi16(r, 4), 0xAA);
        r = _mm256_and_si256(r, _mm256_set1_epi8(15));
        r = _mm256_add_epi8(r, _mm256_set1_epi32(0x08000800));
        const __m256i idx = _mm256_add_epi8(_mm256_shuffle_epi8(_mm256_broadcastsi128_si256(lut), r), _mm256_set1_epi32(0x04040000));
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 + 64 * s + 32 * h));
        const __m256i wa = _mm256_abs_epi8(w);
        for (int t = 0; t < T; ++t) {
          int64_t a8;
          std::memcpy(&a8, xb + t * cols + 8 * s, 8);
          const __m256i a = _mm256_shuffle_epi8(_mm256_set1_epi64x(a8), idx);
          acc[t] = DpBusd(acc[t], wa, _mm256_sign_epi8(a, w));
        }
      }
      for (int t = 0; t < T; ++t) facc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[t]), _mm256_set1_ps(xd[t * nb + b]), facc[t]);
    }
    for (int t = 0; t < T; ++t) _mm256_storeu_ps(y + t * ldy + 8 * h, _mm256_mul_ps(facc[t], row_scale));
  }
}

// Q6_K block (see the AVX-512 form), rows 8h..8h+7. (a + 128) * (q - 32) pairs stay within
// maddubs' int16 range.
template <int T>
inline void Q6KBlock(const uint8_t* p, int h, const int8_t* xb, int64_t cols, const float* xd, int64_t nb,
                     __m256 s_lo, __m256 s_hi, __m256* facc) {
  const __m256i m4 = _mm256_set1_epi8(15), top = _mm256_set1_epi8(0x30), k32 = _mm256_set1_epi8(32),
                k128 = _mm256_set1_epi8(static_cast<char>(0x80));
  const __m256i h0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 256 + 32 * h));
  const __m256i h1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 320 + 32 * h));
  __m256i acc[T], acc2[T];
  for (int t = 0; t < T; ++t) acc[t] = acc2[t] = _mm256_setzero_si256();
  __m256i c_lo = _mm256_setzero_si256(), c_hi = c_lo;
  for (int m = 0; m < 4; ++m) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 * m + 32 * h));
    const __m256i hb0 = m == 3 ? _mm256_srli_epi16(h0, 2) : _mm256_slli_epi16(h0, 4 - 2 * m);
    const __m256i hb1 = m == 3 ? _mm256_srli_epi16(h1, 2) : _mm256_slli_epi16(h1, 4 - 2 * m);
    const __m256i wl = _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(v, m4), _mm256_and_si256(hb0, top)), k32);
    const __m256i wh = _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), _mm256_and_si256(hb1, top)), k32);
    c_lo = DpBusd(c_lo, k128, wl);
    c_hi = DpBusd(c_hi, k128, wh);
    for (int t = 0; t < T; ++t) {
      const int8_t* xt = xb + t * cols;
      acc[t] = DpBusd(acc[t], _mm256_set1_epi32(Load32(xt + 4 * m) ^ static_cast<int32_t>(0x80808080u)), wl);
      acc2[t] = DpBusd(acc2[t], _mm256_set1_epi32(Load32(xt + 16 + 4 * m) ^ static_cast<int32_t>(0x80808080u)), wh);
    }
  }
  for (int t = 0; t < T; ++t) {
    const __m256 f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(acc[t], c_lo)), s_lo,
                                     _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(acc2[t], c_hi)), s_hi));
    facc[t] = _mm256_fmadd_ps(f, _mm256_set1_ps(xd[t * nb]), facc[t]);
  }
}

// AVX2: the group as two 8-row halves, each a 256-bit half of every 64-byte vector. 8-bit
// offset quants would overflow maddubs' int16 pairs, so they are turned back into signed
// values and multiplied through the sign trick (no zero point left).
template <X16Kind K, int G, int T>
void X16Tile(const uint8_t* grp, int64_t cols, const int8_t* xq, const float* xd, const float* xds,
             float* y, int64_t ldy) {
  constexpr int BPS = G / kQK;
  const int64_t nb = cols / kQK;
  const __m256i m4 = _mm256_set1_epi8(15), flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int h = 0; h < 2; ++h) {
    const uint8_t* p = grp;
    __m256 row_scale = _mm256_setzero_ps();
    if constexpr (K == X16Kind::kQ8C) {
      row_scale = _mm256_loadu_ps(reinterpret_cast<const float*>(p) + 8 * h);
      p += 64;
    }
    __m256 facc[T];
    for (int t = 0; t < T; ++t) facc[t] = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += BPS) {
      __m256 sw = _mm256_setzero_ps(), mw = _mm256_setzero_ps(), dv = _mm256_setzero_ps(), ndmin = dv;
      __m256i sc_lo = _mm256_setzero_si256(), sc_hi = sc_lo, mn_lo = sc_lo, mn_hi = sc_lo;
      if constexpr (IsK(K)) {  // see the AVX-512 form
        dv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * h)));
        ndmin = _mm256_sub_ps(_mm256_setzero_ps(), _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 32 + 16 * h))));
        const __m256i u0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 + 32 * h));
        const __m256i u1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 128 + 32 * h));
        const __m256i u2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 192 + 32 * h));
        const __m256i m6 = _mm256_set1_epi8(63), m4b = _mm256_set1_epi8(15), top = _mm256_set1_epi8(0x30);
        sc_lo = _mm256_and_si256(u0, m6);
        mn_lo = _mm256_and_si256(u1, m6);
        sc_hi = _mm256_or_si256(_mm256_and_si256(u2, m4b), _mm256_and_si256(_mm256_srli_epi32(u0, 2), top));
        mn_hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u2, 4), m4b), _mm256_and_si256(_mm256_srli_epi32(u1, 2), top));
      } else if constexpr (K == X16Kind::kQ6K) {
        dv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * h)));
      } else {
        if constexpr (K != X16Kind::kQ8C) sw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * h)));
        if constexpr (HasMin(K)) mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 32 + 16 * h)));
      }
      const uint8_t* hdr = p;
      p += X16Header(K);
      for (int bi = 0; bi < BPS; ++bi, p += X16Block(K)) {
        const int64_t b = b0 + bi;
        const int8_t* xb = xq + b * kQK;
        if (h == 0) PrefetchWeights<K>(p);
        if constexpr (K == X16Kind::kQ6K) {
          const __m256i sv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hdr + 32 + 64 * (bi / 2) + 32 * h));
          const __m256i shl_lo = _mm256_set1_epi32(24 - 16 * (bi % 2)), shl_hi = _mm256_set1_epi32(16 - 16 * (bi % 2));
          const __m256 s_lo = _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_sllv_epi32(sv, shl_lo), 24)));
          const __m256 s_hi = _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_sllv_epi32(sv, shl_hi), 24)));
          Q6KBlock<T>(p, h, xb, cols, xd + b, nb, s_lo, s_hi, facc);
          continue;
        }
        if constexpr (IsK(K)) {
          const __m256i shift = _mm256_set1_epi32(8 * (bi % 4)), byte = _mm256_set1_epi32(255);
          sw = _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(bi < 4 ? sc_lo : sc_hi, shift), byte)));
          mw = _mm256_mul_ps(ndmin, _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(bi < 4 ? mn_lo : mn_hi, shift), byte)));
        }
        __m256i acc[T];
        for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_si256();
        if constexpr (IsQ4(K)) {
          __m256i q5 = _mm256_setzero_si256();
          if constexpr (IsQ5(K)) q5 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 256 + 32 * h));
          for (int m = 0; m < 4; ++m) {
            const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 * m + 32 * h));
            __m256i lo = _mm256_and_si256(v, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            if constexpr (IsQ5(K)) {
              const __m256i b4 = _mm256_set1_epi8(16);
              lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(q5, 4 - m), b4));
              hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_srli_epi16(q5, m), b4));
            }
            for (int t = 0; t < T; ++t) {
              const int8_t* xt = xb + t * cols;
              acc[t] = DpBusd(acc[t], lo, _mm256_set1_epi32(Load32(xt + 4 * m)));
              acc[t] = DpBusd(acc[t], hi, _mm256_set1_epi32(Load32(xt + 16 + 4 * m)));
            }
          }
        } else {
          for (int g = 0; g < 8; ++g) {
            const __m256i v = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 * g + 32 * h)), flip);
            const __m256i va = _mm256_abs_epi8(v);
            for (int t = 0; t < T; ++t) {
              const __m256i xv = _mm256_set1_epi32(Load32(xb + t * cols + 4 * g));
              acc[t] = DpBusd(acc[t], va, _mm256_sign_epi8(xv, v));
            }
          }
        }
        for (int t = 0; t < T; ++t) {
          const __m256 f = _mm256_cvtepi32_ps(acc[t]);
          const float d = xd[t * nb + b], ds = xds[t * nb + b];
          if constexpr (HasMin(K)) {
            facc[t] = _mm256_fmadd_ps(_mm256_mul_ps(f, _mm256_set1_ps(d)), sw, facc[t]);
            facc[t] = _mm256_fmadd_ps(mw, _mm256_set1_ps(ds), facc[t]);
          } else if constexpr (K == X16Kind::kQ4S || K == X16Kind::kQ5S) {
            facc[t] = _mm256_fmadd_ps(_mm256_fmadd_ps(f, _mm256_set1_ps(d), _mm256_set1_ps((K == X16Kind::kQ5S ? -16.0f : -8.0f) * ds)), sw, facc[t]);
          } else if constexpr (K == X16Kind::kQ8B) {
            facc[t] = _mm256_fmadd_ps(_mm256_mul_ps(f, _mm256_set1_ps(d)), sw, facc[t]);
          } else {
            facc[t] = _mm256_fmadd_ps(f, _mm256_set1_ps(d), facc[t]);
          }
        }
      }
    }
    for (int t = 0; t < T; ++t) {
      if constexpr (K == X16Kind::kQ8C) facc[t] = _mm256_mul_ps(facc[t], row_scale);
      _mm256_storeu_ps(y + t * ldy + 8 * h, facc[t]);
    }
  }
}
#endif

// The tile of a kind: the 2:4 sparse kind has its own.
template <X16Kind K, int G, int T>
inline void Tile(const uint8_t* grp, int64_t cols, const int8_t* xq, const float* xd, const float* xds, float* y, int64_t ldy) {
  if constexpr (K == X16Kind::kS8C) {
    SparseTile<T>(grp, cols, xq, xd, y, ldy);
  } else {
    X16Tile<K, G, T>(grp, cols, xq, xd, xds, y, ldy);
  }
}

// Token tiles outside (a tile's activations stay in L1), 16-row groups inside.
template <X16Kind K, int G>
void GemmX16(const void* w, size_t rb, int64_t cols, int64_t rows, const ActQ8& x, int n_tok,
             float* y, int64_t ldy) {
  const int64_t nb = cols / kQK;
  const auto* base = static_cast<const uint8_t*>(w);
  const size_t group_bytes = kX16Rows * rb;
  constexpr int kMaxT = X16MaxTile(K);
  for (int t0 = 0; t0 < n_tok; t0 += kMaxT) {
    const int T = n_tok - t0 < kMaxT ? n_tok - t0 : kMaxT;
    const int8_t* xq = x.qs + static_cast<int64_t>(t0) * cols;
    const float* xd = x.d + static_cast<int64_t>(t0) * nb;
    const float* xds = x.ds + static_cast<int64_t>(t0) * nb;
    for (int64_t g = 0; g < rows / kX16Rows; ++g) {
      const uint8_t* grp = base + static_cast<size_t>(g) * group_bytes;
      float* yg = y + static_cast<int64_t>(t0) * ldy + g * kX16Rows;
      switch (T) {
#if defined(__AVX512VNNI__)
        case 8: if constexpr (kMaxT >= 8) Tile<K, G, 8>(grp, cols, xq, xd, xds, yg, ldy); break;
        case 7: if constexpr (kMaxT >= 7) Tile<K, G, 7>(grp, cols, xq, xd, xds, yg, ldy); break;
        case 6: Tile<K, G, 6>(grp, cols, xq, xd, xds, yg, ldy); break;
        case 5: Tile<K, G, 5>(grp, cols, xq, xd, xds, yg, ldy); break;
#endif
        case 4: Tile<K, G, 4>(grp, cols, xq, xd, xds, yg, ldy); break;
        case 3: Tile<K, G, 3>(grp, cols, xq, xd, xds, yg, ldy); break;
        case 2: Tile<K, G, 2>(grp, cols, xq, xd, xds, yg, ldy); break;
        default: Tile<K, G, 1>(grp, cols, xq, xd, xds, yg, ldy); break;
      }
    }
  }
}

template <X16Kind K, int G>
void GemvQ8X16(const void* w, size_t rb, int64_t cols, int64_t rows, const ActQ8& x, float* y) {
  GemmX16<K, G>(w, rb, cols, rows, x, 1, y, rows);
}

template <GgmlType Type, X16Kind K, int G>
void SetX16(KernelTable* t) {
  t->gemv_q8[static_cast<int>(Type)] = GemvQ8X16<K, G>;
  t->gemm_q8[static_cast<int>(Type)] = GemmX16<K, G>;
}

// ---- tiled attention over query rows (AttendRows) ----

// exp(x) for a vector, to about 2 ulp: 2^n * P(r) with x = n ln2 + r, |r| <= ln2 / 2, a
// degree-6 polynomial. Inputs below -87 give 0 (as they round to 0 in float anyway).
inline VecF ExpV(VecF x) {
#if defined(__AVX512F__)
  const __m512 xc = _mm512_max_ps(_mm512_min_ps(x.v, _mm512_set1_ps(88.0f)), _mm512_set1_ps(-87.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#else
  const __m256 xc = _mm256_max_ps(_mm256_min_ps(x.v, _mm256_set1_ps(88.0f)), _mm256_set1_ps(-87.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#endif
  VecF r = Fma({n}, Set1(-0.693359375f), {xc});
  r = Fma({n}, Set1(2.12194440e-4f), r);
  VecF p = Set1(1.9875691500e-4f);
  p = Fma(p, r, Set1(1.3981999507e-3f));
  p = Fma(p, r, Set1(8.3334519073e-3f));
  p = Fma(p, r, Set1(4.1665795894e-2f));
  p = Fma(p, r, Set1(1.6666665459e-1f));
  p = Fma(p, r, Set1(5.0000001201e-1f));
  p = Fma(Mul(p, r), r, Add(r, Set1(1.0f)));
#if defined(__AVX512F__)
  __m512 e = _mm512_scalef_ps(p.v, n);
  return {_mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x.v, _mm512_set1_ps(-87.0f), _CMP_GE_OQ), e)};
#else
  const __m256i bits = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
  const __m256 e = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p.v), bits));
  return {_mm256_and_ps(e, _mm256_cmp_ps(x.v, _mm256_set1_ps(-87.0f), _CMP_GE_OQ))};
#endif
}

// Head `head` of a K/V row as hd floats.
template <KvDtype T>
void KvDecode(float* y, const uint8_t* row, int head, int nh, int hd) {
  if constexpr (T == KvDtype::kF32) {
    std::memcpy(y, reinterpret_cast<const float*>(row) + head * hd, sizeof(float) * static_cast<size_t>(hd));
  } else if constexpr (T == KvDtype::kI4) {
    KvDecodeHead(T, row, head, nh, hd, 0, hd, y);
  } else {
    std::memset(y, 0, sizeof(float) * static_cast<size_t>(hd));
    KvAxpy<T>(y, 1.0f, row, head, nh, hd);  // 0 + 1 * x: exact
  }
}

// Lanes are query rows: scores, the running max / sum and the output accumulators are vectors
// over up to kLanes rows, so the softmax and the rescaling are vector operations and each
// decoded K/V element is one broadcast for all rows. Masked (invisible) positions get
// probability 0, never a NaN.
template <KvDtype KT, KvDtype VT>
void AttendLanes(const float* const* q_rows, float* const* out_rows, int n_rows, const int* lo,
                 const int* hi, const KvRowsRef& k, const KvRowsRef& v, int g, int n_kv, int hd,
                 float scale, float softcap, float* scratch, float* ml) {
  constexpr int L = kLanes, TILE = kAttnTile;
  float* qt = scratch;                                  // [hd][L] queries, scaled
  float* ot = qt + static_cast<size_t>(hd) * L;         // [hd][L] output accumulators
  float* kr = ot + static_cast<size_t>(hd) * L;         // [TILE][hd] decoded keys
  float* vr = kr + static_cast<size_t>(TILE) * hd;      // [TILE][hd] decoded values
  float* pt = vr + static_cast<size_t>(TILE) * hd;      // [TILE][L] scores, then probabilities
  alignas(64) float lo_f[L], hi_f[L], tmp[L];
  int t_begin = 1 << 30, t_end = 0;
  for (int r = 0; r < L; ++r) {
    const bool real = r < n_rows && lo[r] < hi[r];
    lo_f[r] = real ? static_cast<float>(lo[r]) : 0.0f;
    hi_f[r] = real ? static_cast<float>(hi[r]) : 0.0f;
    if (real) {
      t_begin = std::min(t_begin, lo[r]);
      t_end = std::max(t_end, hi[r]);
    }
  }
  for (int d = 0; d < hd; ++d) {
    for (int r = 0; r < L; ++r) qt[d * L + r] = r < n_rows ? q_rows[r][d] * scale : 0.0f;
  }
  std::memset(ot, 0, sizeof(float) * static_cast<size_t>(hd) * L);
  const VecF vlo = Load(lo_f), vhi = Load(hi_f), kNeg = Set1(-1e30f);
  VecF m = kNeg, l = Zero();
  for (int t0 = t_begin; t0 < t_end; t0 += TILE) {
    const int nt = std::min(TILE, t_end - t0);
    for (int i = 0; i < nt; ++i) {
      KvDecode<KT>(kr + i * hd, k.Row(t0 + i), g, n_kv, hd);
      KvDecode<VT>(vr + i * hd, v.Row(t0 + i), g, n_kv, hd);
    }
    // Scores of 4 positions at a time (the query column is loaded once for the 4).
    VecF mx = kNeg;
    for (int i = 0; i < nt; i += 4) {
      const int ni = std::min(4, nt - i);
      VecF s0 = Zero(), s1 = Zero(), s2 = Zero(), s3 = Zero();
      const float* k0 = kr + i * hd;
      for (int d = 0; d < hd; ++d) {
        const VecF qd = Load(qt + d * L);
        s0 = Fma(qd, Set1(k0[d]), s0);
        if (ni > 1) s1 = Fma(qd, Set1(k0[hd + d]), s1);
        if (ni > 2) s2 = Fma(qd, Set1(k0[2 * hd + d]), s2);
        if (ni > 3) s3 = Fma(qd, Set1(k0[3 * hd + d]), s3);
      }
      const VecF ss[4] = {s0, s1, s2, s3};
      for (int j = 0; j < ni; ++j) {
        VecF s = ss[j];
        if (softcap > 0) {  // softcap * tanh(s / softcap), tanh(y) = 1 - 2 / (exp(2y) + 1)
          const VecF e = ExpV(Mul(s, Set1(2.0f / softcap)));
          s = Mul(Set1(softcap), Sub(Set1(1.0f), Div(Set1(2.0f), Add(e, Set1(1.0f)))));
        }
        const VecF pos = Set1(static_cast<float>(t0 + i + j));
        s = Select(And(CmpGe(pos, vlo), CmpLt(pos, vhi)), s, kNeg);
        Store(pt + (i + j) * L, s);
        mx = Max(mx, s);
      }
    }
    const VecF m_new = Max(m, mx);
    const VecF c = ExpV(Sub(m, m_new));
    l = Mul(l, c);
    for (int d = 0; d < hd; ++d) Store(ot + d * L, Mul(Load(ot + d * L), c));
    m = m_new;
    for (int i = 0; i < nt; ++i) {
      const VecF s = Load(pt + i * L);
      const VecF pos = Set1(static_cast<float>(t0 + i));
      const VecF p = Select(And(CmpGe(pos, vlo), CmpLt(pos, vhi)), ExpV(Sub(s, m)), Zero());
      l = Add(l, p);
      Store(pt + i * L, p);
    }
    // out[d] += sum_i p_i * v_i[d], 8 output columns in registers at a time.
    int d = 0;
    for (; d + 8 <= hd; d += 8) {
      VecF o[8];
      for (int u = 0; u < 8; ++u) o[u] = Load(ot + (d + u) * L);
      for (int i = 0; i < nt; ++i) {
        const VecF p = Load(pt + i * L);
        const float* vi = vr + i * hd + d;
        for (int u = 0; u < 8; ++u) o[u] = Fma(p, Set1(vi[u]), o[u]);
      }
      for (int u = 0; u < 8; ++u) Store(ot + (d + u) * L, o[u]);
    }
    for (; d < hd; ++d) {
      VecF o = Load(ot + d * L);
      for (int i = 0; i < nt; ++i) o = Fma(Load(pt + i * L), Set1(vr[i * hd + d]), o);
      Store(ot + d * L, o);
    }
  }
  Store(tmp, l);
  alignas(64) float mx_rows[L];
  Store(mx_rows, m);
  for (int r = 0; r < n_rows; ++r) {
    const bool real = lo[r] < hi[r];
    if (ml != nullptr) {  // partial: unnormalized, with the row's max and sum
      ml[2 * r] = real ? mx_rows[r] : -1e30f;
      ml[2 * r + 1] = real ? tmp[r] : 0.0f;
    }
    const float inv = ml != nullptr ? 1.0f : (tmp[r] > 0 ? 1.0f / tmp[r] : 0.0f);
    for (int d = 0; d < hd; ++d) out_rows[r][d] = real ? ot[d * L + r] * inv : 0.0f;
  }
}

template <KvDtype KT, KvDtype VT>
void AttendRowsT(const float* const* q_rows, float* const* out_rows, int n_rows, const int* lo,
                 const int* hi, const KvRowsRef& k, const KvRowsRef& v, int g, int n_kv, int hd,
                 float scale, float softcap, float* scratch, float* ml) {
  for (int r0 = 0; r0 < n_rows; r0 += kLanes) {
    AttendLanes<KT, VT>(q_rows + r0, out_rows + r0, std::min(kLanes, n_rows - r0), lo + r0, hi + r0, k, v, g, n_kv,
                        hd, scale, softcap, scratch, ml != nullptr ? ml + 2 * r0 : nullptr);
  }
}

template <KvDtype KT>
AttendRowsFn AttendRowsFor(KvDtype vt) {
  switch (vt) {
    case KvDtype::kF32: return AttendRowsT<KT, KvDtype::kF32>;
    case KvDtype::kF16: return AttendRowsT<KT, KvDtype::kF16>;
    case KvDtype::kBF16: return AttendRowsT<KT, KvDtype::kBF16>;
    case KvDtype::kI8: return AttendRowsT<KT, KvDtype::kI8>;
    case KvDtype::kI4: return AttendRowsT<KT, KvDtype::kI4>;
  }
  return nullptr;
}

void AttendRows(const float* const* q_rows, float* const* out_rows, int n_rows, const int* lo,
                const int* hi, const KvRowsRef& k, const KvRowsRef& v, int g, int n_kv, int hd,
                float scale, float softcap, float* scratch, float* ml) {
  AttendRowsFn f = nullptr;
  switch (k.type) {
    case KvDtype::kF32: f = AttendRowsFor<KvDtype::kF32>(v.type); break;
    case KvDtype::kF16: f = AttendRowsFor<KvDtype::kF16>(v.type); break;
    case KvDtype::kBF16: f = AttendRowsFor<KvDtype::kBF16>(v.type); break;
    case KvDtype::kI8: f = AttendRowsFor<KvDtype::kI8>(v.type); break;
    case KvDtype::kI4: f = AttendRowsFor<KvDtype::kI4>(v.type); break;
  }
  f(q_rows, out_rows, n_rows, lo, hi, k, v, g, n_kv, hd, scale, softcap, scratch, ml);
}

}  // namespace

KernelTable MakeTable() {
  KernelTable t{};
  t.isa = kLanes == 16 ? Isa::kAvx512 : Isa::kAvx2;
  t.gemv[static_cast<int>(GgmlType::kF32)] = GemvFloat<GgmlType::kF32>;
  t.gemv[static_cast<int>(GgmlType::kF16)] = GemvFloat<GgmlType::kF16>;
  t.gemv[static_cast<int>(GgmlType::kBF16)] = GemvFloat<GgmlType::kBF16>;
  t.gemm[static_cast<int>(GgmlType::kF32)] = GemmFloat<GgmlType::kF32>;
  t.gemm[static_cast<int>(GgmlType::kF16)] = GemmFloat<GgmlType::kF16>;
  t.gemm[static_cast<int>(GgmlType::kBF16)] = GemmFloat<GgmlType::kBF16>;
  t.gemv[static_cast<int>(GgmlType::kQ8_0)] = GemvQ8_0;
  t.gemv[static_cast<int>(GgmlType::kQ4_0)] = GemvQLegacy<BlockQ4_0, false, false>;
  t.gemv[static_cast<int>(GgmlType::kQ4_1)] = GemvQLegacy<BlockQ4_1, false, true>;
  t.gemv[static_cast<int>(GgmlType::kQ5_0)] = GemvQLegacy<BlockQ5_0, true, false>;
  t.gemv[static_cast<int>(GgmlType::kQ5_1)] = GemvQLegacy<BlockQ5_1, true, true>;
  t.gemv[static_cast<int>(GgmlType::kQ4_K)] = GemvQxK<BlockQ4_K, false>;
  t.gemv[static_cast<int>(GgmlType::kQ5_K)] = GemvQxK<BlockQ5_K, true>;
  t.gemv[static_cast<int>(GgmlType::kQ6_K)] = GemvQ6_K;
  t.gemv_q8[static_cast<int>(GgmlType::kQ8_0)] = GemvQ8Q8_0;
  t.gemv_q8[static_cast<int>(GgmlType::kQ4_0)] = GemvQ8Q4_0;
  t.gemm_q8[static_cast<int>(GgmlType::kQ8_0)] = GemmQ8<kLayoutQ8_0>;
  t.gemm_q8[static_cast<int>(GgmlType::kQ4_0)] = GemmQ8<kLayoutQ4_0>;
  t.gemm_q8[static_cast<int>(GgmlType::kQ4_0R)] = GemmQ8<kLayoutQ4_0R>;
  t.gemv[static_cast<int>(GgmlType::kQ4_0R)] = GemvQ4_0R;
  t.gemv_q8[static_cast<int>(GgmlType::kQ4_0R)] = GemvQ8Q4_0R;
  t.gemv_q8[static_cast<int>(GgmlType::kQ4_K)] = GemvQ8Q4_K;
  t.gemv_q8[static_cast<int>(GgmlType::kQ6_K)] = GemvQ8Q6_K;
  t.gemm_q8[static_cast<int>(GgmlType::kQ8_0R)] = GemmQ8<kLayoutQ8_0R>;
  t.gemv[static_cast<int>(GgmlType::kQ8_0R)] = GemvQ8_0R;
  t.gemv_q8[static_cast<int>(GgmlType::kQ8_0R)] = GemvQ8Q8_0R;
  SetX16<GgmlType::kQ4_0X16, X16Kind::kQ4S, 32>(&t);
  SetX16<GgmlType::kQ8_0X16, X16Kind::kQ8B, 32>(&t);
  SetX16<GgmlType::kPQ8_C, X16Kind::kQ8C, 32>(&t);
  SetX16<GgmlType::kPS8_C, X16Kind::kS8C, 32>(&t);
  SetX16<GgmlType::kPQ4_G32, X16Kind::kQ4S, 32>(&t);
  SetX16<GgmlType::kPQ4_G64, X16Kind::kQ4S, 64>(&t);
  SetX16<GgmlType::kPQ4_G128, X16Kind::kQ4S, 128>(&t);
  SetX16<GgmlType::kPQ4_G32Z, X16Kind::kQ4Z, 32>(&t);
  SetX16<GgmlType::kPQ4_G64Z, X16Kind::kQ4Z, 64>(&t);
  SetX16<GgmlType::kPQ4_G128Z, X16Kind::kQ4Z, 128>(&t);
  SetX16<GgmlType::kQ4_KX16, X16Kind::kQ4K, kQK_K>(&t);
  SetX16<GgmlType::kQ6_KX16, X16Kind::kQ6K, kQK_K>(&t);
  SetX16<GgmlType::kQ5_0X16, X16Kind::kQ5S, kQK>(&t);
  SetX16<GgmlType::kQ5_1X16, X16Kind::kQ5Z, kQK>(&t);
  SetX16<GgmlType::kQ5_KX16, X16Kind::kQ5K, kQK_K>(&t);
  t.quantize_act = QuantizeAct;
  t.int8_peak_probe = Int8PeakProbe;
  t.dot = Dot;
  t.rmsnorm = RmsNorm;
  t.softmax = Softmax;
  t.silu_mul = SiluMul;
  t.gelu_mul = GeluMul;
  t.layernorm = LayerNorm;
  t.add = AddVec;
  t.axpy = Axpy;
  t.rope = Rope;
  SetKvStoreKernels(&t);
  t.kv_dot[0] = KvDot<KvDtype::kF32>;
  t.kv_dot[1] = KvDot<KvDtype::kF16>;
  t.kv_dot[2] = KvDot<KvDtype::kBF16>;
  t.kv_dot[3] = KvDot<KvDtype::kI8>;
  t.kv_dot[4] = KvDot<KvDtype::kI4>;
  t.kv_axpy[0] = KvAxpy<KvDtype::kF32>;
  t.kv_axpy[1] = KvAxpy<KvDtype::kF16>;
  t.kv_axpy[2] = KvAxpy<KvDtype::kBF16>;
  t.kv_axpy[3] = KvAxpy<KvDtype::kI8>;
  t.kv_axpy[4] = KvAxpy<KvDtype::kI4>;
  t.attend_rows = AttendRows;
  return t;
}

}  // namespace PADDOCK_ISA_NS
}  // namespace paddock
