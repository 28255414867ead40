// Scalar reference kernels: straightforward loops, double accumulation where it matters.
#include <array>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "base/half.h"
#include "kernels/kernels.h"
#include "kernels/kv_rows.h"
#include "kernels/tables.h"

namespace paddock {
namespace {

float RefDot(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return static_cast<float>(s);
}

template <GgmlType T>
void RefGemv(const void* w, size_t row_bytes, int64_t cols, int64_t rows, const float* x,
             float* y) {
  const TypeTraits& tr = Traits(T);
  const int bs = tr.block_size == 1 ? 256 : tr.block_size;  // dequantize in chunks
  const size_t chunk_bytes = RowBytes(tr, bs);
  float buf[256];
  for (int64_t r = 0; r < rows; ++r) {
    const auto* row = static_cast<const uint8_t*>(w) + static_cast<size_t>(r) * row_bytes;
    double s = 0;
    for (int64_t c = 0; c < cols; c += bs) {
      const int64_t n = cols - c < bs ? cols - c : bs;
      tr.to_float(row + static_cast<size_t>(c / bs) * chunk_bytes, buf, n);
      for (int64_t i = 0; i < n; ++i) s += static_cast<double>(buf[i]) * x[c + i];
    }
    y[r] = static_cast<float>(s);
  }
}

void RefQuantizeAct(const float* x, int64_t n, int8_t* qs, float* d, float* ds) {
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* xb = x + b * kQK;
    float amax = 0;
    for (int i = 0; i < kQK; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
    const float scale = amax / 127.0f;
    const float id = scale > 0 ? 1.0f / scale : 0.0f;
    int32_t s = 0;
    for (int i = 0; i < kQK; ++i) {
      const int q = static_cast<int>(std::nearbyint(xb[i] * id));
      qs[b * kQK + i] = static_cast<int8_t>(q);
      s += q;
    }
    d[b] = ActScale(scale);
    ds[b] = d[b] * static_cast<float>(s);
  }
}

// Integer GEMV reference: exact integer dot per block, block scales applied in double.
template <GgmlType T>
void RefGemvQ8(const void* w, size_t row_bytes, int64_t cols, int64_t rows, const ActQ8& x,
               float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const auto* row = static_cast<const uint8_t*>(w) + static_cast<size_t>(r) * row_bytes;
    double acc = 0;
    for (int64_t b = 0; b < cols / kQK; ++b) {
      const int8_t* xq = x.qs + b * kQK;
      int32_t dot = 0;
      float dw;
      if constexpr (T == GgmlType::kQ8_0) {
        const auto* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
        dw = Fp16ToFp32(blk->d);
        for (int i = 0; i < kQK; ++i) dot += blk->qs[i] * xq[i];
      } else {
        const auto* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
        dw = Fp16ToFp32(blk->d);
        for (int i = 0; i < 16; ++i) {
          dot += ((blk->qs[i] & 15) - 8) * xq[i];
          dot += ((blk->qs[i] >> 4) - 8) * xq[i + 16];
        }
      }
      acc += static_cast<double>(dw) * static_cast<double>(x.d[b]) * dot;
    }
    y[r] = static_cast<float>(acc);
  }
}

// Row-split layouts (kQ4_0R, kQ8_0R): per row the nb fp16 scales, then the nb quant groups.
// The integer value of element j (0..31) of block b:
template <bool kQ4>
inline int SplitQuant(const uint8_t* qs, int64_t b, int j) {
  if constexpr (kQ4) {
    const uint8_t byte = qs[b * 16 + (j & 15)];
    return (j < 16 ? (byte & 15) : (byte >> 4)) - 8;
  } else {
    return reinterpret_cast<const int8_t*>(qs)[b * kQK + j];
  }
}

// Float activations.
template <bool kQ4>
void RefGemvSplit(const void* w, size_t row_bytes, int64_t cols, int64_t rows, const float* x,
                  float* y) {
  const int64_t nb = cols / kQK;
  for (int64_t r = 0; r < rows; ++r) {
    const auto* row = static_cast<const uint8_t*>(w) + static_cast<size_t>(r) * row_bytes;
    const auto* sc = reinterpret_cast<const uint16_t*>(row);
    double s = 0;
    for (int64_t b = 0; b < nb; ++b) {
      double dot = 0;
      for (int j = 0; j < kQK; ++j)
        dot += static_cast<double>(SplitQuant<kQ4>(row + 2 * nb, b, j)) * x[b * kQK + j];
      s += Fp16ToFp32(sc[b]) * dot;
    }
    y[r] = static_cast<float>(s);
  }
}

// Int8 activations.
template <bool kQ4>
void RefGemvQ8Split(const void* w, size_t row_bytes, int64_t cols, int64_t rows, const ActQ8& x,
                    float* y) {
  const int64_t nb = cols / kQK;
  for (int64_t r = 0; r < rows; ++r) {
    const auto* row = static_cast<const uint8_t*>(w) + static_cast<size_t>(r) * row_bytes;
    const auto* sc = reinterpret_cast<const uint16_t*>(row);
    double acc = 0;
    for (int64_t b = 0; b < nb; ++b) {
      int32_t dot = 0;
      for (int j = 0; j < kQK; ++j) dot += SplitQuant<kQ4>(row + 2 * nb, b, j) * x.qs[b * kQK + j];
      acc += static_cast<double>(Fp16ToFp32(sc[b])) * static_cast<double>(x.d[b]) * dot;
    }
    y[r] = static_cast<float>(acc);
  }
}

// 16-row interleaved layouts (ggml_types.h): row r is lane r % 16 of group r / 16 (`w` points
// at a group; rows of a call start on a group).
inline const uint8_t* X16Group(const void* w, size_t row_bytes, int64_t r) {
  return static_cast<const uint8_t*>(w) + static_cast<size_t>(r / kX16Rows) * kX16Rows * row_bytes;
}

template <GgmlType T>
void RefGemvX16(const void* w, size_t row_bytes, int64_t cols, int64_t rows, const float* x,
                float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* g = X16Group(w, row_bytes, r);
    double s = 0;
    for (int64_t c = 0; c < cols; ++c)
      s += static_cast<double>(X16Element(T, g, cols, static_cast<int>(r % kX16Rows), c)) * x[c];
    y[r] = static_cast<float>(s);
  }
}

// Int8 activations: exact integer dot per block, scales (and minimums) applied in double.
template <GgmlType T>
void RefGemvQ8X16(const void* w, size_t row_bytes, int64_t cols, int64_t rows, const ActQ8& x,
                  float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const int i = static_cast<int>(r % kX16Rows);
    const uint8_t* g = X16Group(w, row_bytes, r);
    double acc = 0;
    for (int64_t b = 0; b < cols / kQK; ++b) {
      // d is constant over each half block (Q6_K's, Q3_K's and Q2_K's scales cover 16
      // elements), m over the block (times its activation sum ds) or, in Q2_K, over each half
      // (times the half's sum).
      float mh[2] = {0, 0};
      int32_t sums[2] = {0, 0};
      for (int h = 0; h < 2; ++h) {
        int32_t dot = 0;
        int q;
        float d = 0;
        for (int k = 16 * h; k < 16 * h + 16; ++k) {
          X16Quant(T, g, cols, i, b * kQK + k, &q, &d, &mh[h]);
          dot += q * x.qs[b * kQK + k];
          sums[h] += x.qs[b * kQK + k];
        }
        acc += static_cast<double>(d) * static_cast<double>(x.d[b]) * dot;
      }
      acc += mh[0] == mh[1] ? static_cast<double>(mh[1]) * x.ds[b]
                            : static_cast<double>(x.d[b]) * (static_cast<double>(mh[0]) * sums[0] +
                                                             static_cast<double>(mh[1]) * sums[1]);
    }
    y[r] = static_cast<float>(acc);
  }
}

// Q4_K with int8 activations: per 32-element sub-block an integer dot times d * sc * d_x,
// minus dmin * m * (d_x * sum(q_x)).
void RefGemvQ8Q4_K(const void* w, size_t row_bytes, int64_t cols, int64_t rows, const ActQ8& x,
                   float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const auto* blk = reinterpret_cast<const BlockQ4_K*>(static_cast<const uint8_t*>(w) +
                                                         static_cast<size_t>(r) * row_bytes);
    double acc = 0;
    for (int64_t i = 0; i < cols / kQK_K; ++i) {
      const double d = Fp16ToFp32(blk[i].d), dmin = Fp16ToFp32(blk[i].dmin);
      for (int c = 0; c < 4; ++c) {
        for (int half = 0; half < 2; ++half) {
          const int sub = 2 * c + half;
          int sc, m;
          KQuantScaleMin(sub, blk[i].scales, &sc, &m);
          const int64_t xb = i * 8 + sub;
          int32_t dot = 0;
          for (int l = 0; l < 32; ++l) {
            const int q = half ? (blk[i].qs[32 * c + l] >> 4) : (blk[i].qs[32 * c + l] & 15);
            dot += q * x.qs[xb * kQK + l];
          }
          acc += d * sc * static_cast<double>(x.d[xb]) * dot -
                 dmin * m * static_cast<double>(x.ds[xb]);
        }
      }
    }
    y[r] = static_cast<float>(acc);
  }
}

// Q6_K with int8 activations: per 16-element sub-block an integer dot of (q - 32) with the
// activations, times d * sc * d_x (each 32-element activation block covers two sub-blocks).
void RefGemvQ8Q6_K(const void* w, size_t row_bytes, int64_t cols, int64_t rows, const ActQ8& x,
                   float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const auto* blk = reinterpret_cast<const BlockQ6_K*>(static_cast<const uint8_t*>(w) +
                                                         static_cast<size_t>(r) * row_bytes);
    double acc = 0;
    for (int64_t i = 0; i < cols / kQK_K; ++i) {
      const double d = Fp16ToFp32(blk[i].d);
      for (int e0 = 0; e0 < kQK_K; e0 += 16) {
        int32_t dot = 0;
        for (int e = e0; e < e0 + 16; ++e) {
          const int h = e / 128, rr = e % 128, g = rr / 32, l = rr % 32;
          const uint8_t lbyte = blk[i].ql[64 * h + l + ((g & 1) ? 32 : 0)];
          const int lo = g >= 2 ? (lbyte >> 4) : (lbyte & 15);
          const int hi = (blk[i].qh[32 * h + l] >> (2 * g)) & 3;
          dot += ((lo | (hi << 4)) - 32) * x.qs[i * kQK_K + e];
        }
        acc += d * blk[i].scales[e0 / 16] * static_cast<double>(x.d[(i * kQK_K + e0) / kQK]) * dot;
      }
    }
    y[r] = static_cast<float>(acc);
  }
}

// Float-activation reference GEMM: the reference GEMV of every token.
template <GemvFn Gemv>
void RefGemmFloat(const void* w, size_t row_bytes, int64_t cols, int64_t rows, const float* x,
                  int n_tok, float* y, int64_t ldy) {
  for (int t = 0; t < n_tok; ++t)
    Gemv(w, row_bytes, cols, rows, x + static_cast<int64_t>(t) * cols, y + t * ldy);
}

// BF16 weights x activations rounded to bf16 (nearest even): exact products, double sums.
void RefGemmBf16Dot(const void* w, size_t row_bytes, int64_t cols, int64_t rows, const float* x,
                    int n_tok, float* y, int64_t ldy) {
  for (int t = 0; t < n_tok; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      const auto* row = reinterpret_cast<const uint16_t*>(static_cast<const uint8_t*>(w) +
                                                          static_cast<size_t>(r) * row_bytes);
      double s = 0;
      for (int64_t c = 0; c < cols; ++c)
        s += static_cast<double>(Bf16ToFp32(row[c])) * Bf16ToFp32(Fp32ToBf16(x[t * cols + c]));
      y[t * ldy + r] = static_cast<float>(s);
    }
  }
}

}  // namespace

void RefGemmBf16Tiles(GgmlType type, const void* w, size_t row_bytes, int64_t cols, int64_t rows,
                      const float* x, int n_tok, float* y, int64_t ldy) {
  const auto* base = static_cast<const uint8_t*>(w);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* grp = base + static_cast<size_t>(r / kX16Rows) * kX16Rows * row_bytes;
    for (int64_t c = 0; c < cols; ++c)
      row[static_cast<size_t>(c)] =
          Bf16ToFp32(Fp32ToBf16(X16Element(type, grp, cols, static_cast<int>(r % kX16Rows), c)));
    for (int t = 0; t < n_tok; ++t) {
      double s = 0;
      for (int64_t c = 0; c < cols; ++c)
        s += static_cast<double>(row[static_cast<size_t>(c)]) *
             Bf16ToFp32(Fp32ToBf16(x[t * cols + c]));
      y[t * ldy + r] = static_cast<float>(s);
    }
  }
}

namespace {

// Reference GEMM: the reference GEMV of every token.
template <GemvQ8Fn Gemv>
void RefGemmFromGemv(const void* w, size_t row_bytes, int64_t cols, int64_t rows, const ActQ8& x,
                     int n_tok, float* y, int64_t ldy) {
  for (int t = 0; t < n_tok; ++t) Gemv(w, row_bytes, cols, rows, x.Token(t, cols), y + t * ldy);
}

void RefRmsNorm(float* out, const float* x, const float* w, int64_t n, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(x[i] * inv * w[i]);
}

void RefLayerNorm(float* out, const float* x, const float* w, const float* b, int64_t n,
                  float eps) {
  double mean = 0, var = 0;
  for (int64_t i = 0; i < n; ++i) mean += x[i];
  mean /= static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  const double inv = 1.0 / std::sqrt(var / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i)
    out[i] = static_cast<float>((x[i] - mean) * inv * w[i] + (b != nullptr ? b[i] : 0.0));
}

void RefSoftmax(float* x, int64_t n) {
  if (n <= 0) return;
  float mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(std::exp(static_cast<double>(x[i]) - mx));
    sum += x[i];
  }
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(x[i] / sum);
}

void RefSiluMul(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = g[i];
    g[i] = static_cast<float>(v / (1.0 + std::exp(-v)) * u[i]);
  }
}

// GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
double RefGelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

void RefGeluMul(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    g[i] = static_cast<float>(RefGelu(g[i]) * (u != nullptr ? u[i] : 1.0));
}

void RefSoftcap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i)
    x[i] = static_cast<float>(cap * std::tanh(static_cast<double>(x[i]) / cap));
}

void RefAdd(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void RefAxpy(float* y, float a, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void RefDeltaStep(float* m, const float* q, const float* k, const float* v, float decay, float beta,
                  float scale, float* out, int d) {
  for (int j = 0; j < d; ++j) {
    float* row = m + static_cast<size_t>(j) * d;
    double s = 0;
    for (int i = 0; i < d; ++i) {
      row[i] *= decay;
      s += static_cast<double>(row[i]) * k[i];
    }
    const float delta = (v[j] - static_cast<float>(s)) * beta;
    double o = 0;
    for (int i = 0; i < d; ++i) {
      row[i] += delta * k[i];
      o += static_cast<double>(row[i]) * q[i];
    }
    out[j] = static_cast<float>(o) * scale;
  }
}

// The chunked delta rule (KernelTable::delta_chunk), in doubles where it sums: within the
// chunk, delta_t = beta_t (v_t - e^{G_t} M_0 k_t) - sum_{s<t} beta_t e^{G_t - G_s} (k_t.k_s)
// delta_s (G: the cumulative log decay); out_t = scale (e^{G_t} M_0 q_t + sum_{s<=t}
// e^{G_t - G_s} (q_t.k_s) delta_s); M = e^{G_n} M_0 + sum_s e^{G_n - G_s} delta_s k_s^T.
void RefDeltaChunk(float* m, const float* q, const float* k, int ld_qk, const float* v, int ld_v,
                   const float* g, const float* beta, float scale, float* out, int ld_o, int n,
                   int d, float* scratch) {
  float* G = scratch;                    // (n)
  float* delta = scratch + kDeltaChunk;  // (n, d)
  for (int t = 0; t < n; ++t) G[t] = (t > 0 ? G[t - 1] : 0.0f) + g[t];
  auto dot = [&](const float* a, const float* b) {
    double acc = 0;
    for (int i = 0; i < d; ++i) acc += static_cast<double>(a[i]) * b[i];
    return acc;
  };
  for (int t = 0; t < n; ++t) {
    const float* kt = k + static_cast<size_t>(t) * ld_qk;
    float* dt = delta + static_cast<size_t>(t) * d;
    for (int j = 0; j < d; ++j) {
      double acc = v[static_cast<size_t>(t) * ld_v + j] -
                   std::exp(static_cast<double>(G[t])) * dot(m + static_cast<size_t>(j) * d, kt);
      for (int s = 0; s < t; ++s)
        acc -= std::exp(static_cast<double>(G[t] - G[s])) *
               dot(kt, k + static_cast<size_t>(s) * ld_qk) * delta[static_cast<size_t>(s) * d + j];
      dt[j] = static_cast<float>(beta[t] * acc);
    }
  }
  for (int t = 0; t < n; ++t) {
    const float* qt = q + static_cast<size_t>(t) * ld_qk;
    for (int j = 0; j < d; ++j) {
      double acc = std::exp(static_cast<double>(G[t])) * dot(m + static_cast<size_t>(j) * d, qt);
      for (int s = 0; s <= t; ++s)
        acc += std::exp(static_cast<double>(G[t] - G[s])) *
               dot(qt, k + static_cast<size_t>(s) * ld_qk) * delta[static_cast<size_t>(s) * d + j];
      out[static_cast<size_t>(t) * ld_o + j] = static_cast<float>(acc) * scale;
    }
  }
  for (int j = 0; j < d; ++j) {
    for (int i = 0; i < d; ++i) {
      double acc = std::exp(static_cast<double>(G[n - 1])) * m[static_cast<size_t>(j) * d + i];
      for (int s = 0; s < n; ++s)
        acc += std::exp(static_cast<double>(G[n - 1] - G[s])) *
               delta[static_cast<size_t>(s) * d + j] * k[static_cast<size_t>(s) * ld_qk + i];
      m[static_cast<size_t>(j) * d + i] = static_cast<float>(acc);
    }
  }
}

void RefConvToken(float* y, const float* const* in, const float* taps, int64_t ld_taps, int K,
                  int64_t ch, bool silu) {
  for (int64_t c = 0; c < ch; ++c) {
    double acc = 0;
    for (int k = 0; k < K; ++k) acc += static_cast<double>(in[k][c]) * taps[k * ld_taps + c];
    const float v = static_cast<float>(acc);
    y[c] = silu ? v / (1.0f + std::exp(-v)) : v;
  }
}

void RefLoraDown(const float* a, int rank, int64_t in, float s, const float* x, int n, float* t,
                 int t_stride) {
  for (int j = 0; j < n; ++j) {
    for (int r = 0; r < rank; ++r) {
      double acc = 0;
      for (int64_t i = 0; i < in; ++i)
        acc += static_cast<double>(a[r * in + i]) * x[static_cast<int64_t>(j) * in + i];
      t[j * t_stride + r] = static_cast<float>(acc) * s;
    }
  }
}

void RefLoraUp(const float* bt, int rank, int64_t out, const float* t, float* y, int64_t o0,
               int64_t o1) {
  for (int64_t o = o0; o < o1; ++o) {
    float acc = y[o];
    for (int r = 0; r < rank; ++r) acc += t[r] * bt[r * out + o];
    y[o] = acc;
  }
}

void RefRope(float* x, int n_heads, int head_dim, int rope_dim, const float* cos, const float* sin,
             bool half_split) {
  const int half = rope_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const int a = half_split ? i : 2 * i;
      const int b = half_split ? i + half : 2 * i + 1;
      const float v0 = v[a], v1 = v[b];
      v[a] = v0 * cos[i] - v1 * sin[i];
      v[b] = v0 * sin[i] + v1 * cos[i];
    }
  }
}

template <GgmlType T>
void SetRefX16(KernelTable* t) {
  t->gemv[static_cast<int>(T)] = RefGemvX16<T>;
  t->gemv_q8[static_cast<int>(T)] = RefGemvQ8X16<T>;
  t->gemm_q8[static_cast<int>(T)] = RefGemmFromGemv<RefGemvQ8X16<T>>;
}

}  // namespace

namespace {
template <size_t... I>
constexpr std::array<GemvFn, sizeof...(I)> GenericGemvs(std::index_sequence<I...>) {
  return {RefGemv<static_cast<GgmlType>(I)>...};
}
}  // namespace

void SetGenericGemv(KernelTable* t) {
  static constexpr auto kAll = GenericGemvs(std::make_index_sequence<kGgmlTypeCount>());
  for (int i = 0; i < kGgmlTypeCount; ++i) {
    const TypeTraits* tr = FindTypeTraits(static_cast<uint32_t>(i));
    if (t->gemv[i] == nullptr && tr != nullptr && tr->to_float != nullptr)
      t->gemv[i] = kAll[static_cast<size_t>(i)];
  }
}

KernelTable MakeScalarTable() {
  KernelTable t{};
  t.isa = Isa::kScalar;
  SetGenericGemv(&t);  // every type with a dequantizer
  t.gemm[static_cast<int>(GgmlType::kF32)] = RefGemmFloat<RefGemv<GgmlType::kF32>>;
  t.gemm[static_cast<int>(GgmlType::kF16)] = RefGemmFloat<RefGemv<GgmlType::kF16>>;
  t.gemm[static_cast<int>(GgmlType::kBF16)] = RefGemmFloat<RefGemv<GgmlType::kBF16>>;
  t.gemm_bf16_dot = RefGemmBf16Dot;
  t.gemv_q8[static_cast<int>(GgmlType::kQ8_0)] = RefGemvQ8<GgmlType::kQ8_0>;
  t.gemv_q8[static_cast<int>(GgmlType::kQ4_0)] = RefGemvQ8<GgmlType::kQ4_0>;
  t.gemm_q8[static_cast<int>(GgmlType::kQ8_0)] = RefGemmFromGemv<RefGemvQ8<GgmlType::kQ8_0>>;
  t.gemm_q8[static_cast<int>(GgmlType::kQ4_0)] = RefGemmFromGemv<RefGemvQ8<GgmlType::kQ4_0>>;
  t.gemv[static_cast<int>(GgmlType::kQ4_0R)] = RefGemvSplit<true>;
  t.gemv[static_cast<int>(GgmlType::kQ8_0R)] = RefGemvSplit<false>;
  t.gemv_q8[static_cast<int>(GgmlType::kQ4_0R)] = RefGemvQ8Split<true>;
  t.gemv_q8[static_cast<int>(GgmlType::kQ8_0R)] = RefGemvQ8Split<false>;
  t.gemm_q8[static_cast<int>(GgmlType::kQ4_0R)] = RefGemmFromGemv<RefGemvQ8Split<true>>;
  t.gemm_q8[static_cast<int>(GgmlType::kQ8_0R)] = RefGemmFromGemv<RefGemvQ8Split<false>>;
  SetRefX16<GgmlType::kQ4_0X16>(&t);
  SetRefX16<GgmlType::kQ8_0X16>(&t);
  SetRefX16<GgmlType::kPQ8_C>(&t);
  SetRefX16<GgmlType::kPS8_C>(&t);
  SetRefX16<GgmlType::kPQ4_G32>(&t);
  SetRefX16<GgmlType::kPQ4_G64>(&t);
  SetRefX16<GgmlType::kPQ4_G128>(&t);
  SetRefX16<GgmlType::kPQ4_G32Z>(&t);
  SetRefX16<GgmlType::kPQ4_G64Z>(&t);
  SetRefX16<GgmlType::kPQ4_G128Z>(&t);
  SetRefX16<GgmlType::kQ4_KX16>(&t);
  SetRefX16<GgmlType::kQ6_KX16>(&t);
  SetRefX16<GgmlType::kQ5_0X16>(&t);
  SetRefX16<GgmlType::kQ5_1X16>(&t);
  SetRefX16<GgmlType::kQ5_KX16>(&t);
  SetRefX16<GgmlType::kIQ4_NLX16>(&t);
  SetRefX16<GgmlType::kIQ4_XSX16>(&t);
  SetRefX16<GgmlType::kMXFP4X16>(&t);
  SetRefX16<GgmlType::kQ3_KX16>(&t);
  SetRefX16<GgmlType::kQ2_KX16>(&t);
  t.gemv_q8[static_cast<int>(GgmlType::kQ4_K)] = RefGemvQ8Q4_K;
  t.gemv_q8[static_cast<int>(GgmlType::kQ6_K)] = RefGemvQ8Q6_K;
  t.quantize_act = RefQuantizeAct;
  t.dot = RefDot;
  t.rmsnorm = RefRmsNorm;
  t.softmax = RefSoftmax;
  t.silu_mul = RefSiluMul;
  t.gelu_mul = RefGeluMul;
  t.softcap = RefSoftcap;
  t.layernorm = RefLayerNorm;
  t.add = RefAdd;
  t.axpy = RefAxpy;
  t.delta_step = RefDeltaStep;
  t.delta_chunk = RefDeltaChunk;
  t.conv_token = RefConvToken;
  t.lora_down = RefLoraDown;
  t.lora_up = RefLoraUp;
  t.rope = RefRope;
  SetReferenceKvKernels(&t);
  return t;
}

}  // namespace paddock
