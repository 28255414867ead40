// formats/quants_fit.cpp: the fitted quantizers: Q4_K / Q5_K scales and mins by weighted least
// squares (llama.cpp's make_qkx2_quants search), and the int4 group encoders of the Paddock
// types with importance weights (activation statistics from calibration).
#include <strings.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "base/half.h"
#include "base/strings.h"
#include "formats/ggml_types.h"
#include "formats/quants_internal.h"
#include "formats/x16_layout.h"

namespace paddock {
namespace quants {
namespace {

// Weighted least-squares affine fit of n values to levels 0..nmax: x ~= scale * q - offset with
// offset >= 0 (the k-quants store the minimum as a non-negative offset). Candidate level
// assignments come from 21 inverse scales around nmax / (max - min) (as llama.cpp's
// make_qkx2_quants); for each, (scale, offset) is solved in closed form. Returns the best.
void FitAffine(const float* x, const float* w, int n, int nmax, float* scale, float* offset) {
  float mn = 0, mx = 0;
  for (int l = 0; l < n; ++l) {
    mn = std::min(mn, x[l]);
    mx = std::max(mx, x[l]);
  }
  *scale = (mx - mn) / static_cast<float>(nmax);
  *offset = -mn;
  if (mx <= mn) return;
  double best = 0;
  for (int l = 0; l < n; ++l) {
    const int q = std::clamp(static_cast<int>(std::lround((x[l] - mn) / *scale)), 0, nmax);
    const double e = *scale * q + mn - x[l];
    best += w[l] * e * e;
  }
  for (int step = 0; step <= 20; ++step) {
    const float iscale =
        (-1.0f + 0.1f * static_cast<float>(step) + static_cast<float>(nmax)) / (mx - mn);
    double sw = 0, swq = 0, swq2 = 0, swx = 0, swqx = 0;
    int qs[64];
    for (int l = 0; l < n; ++l) {
      qs[l] = std::clamp(static_cast<int>(std::lround(iscale * (x[l] - mn))), 0, nmax);
      sw += w[l];
      swq += w[l] * qs[l];
      swq2 += w[l] * qs[l] * qs[l];
      swx += w[l] * x[l];
      swqx += w[l] * qs[l] * x[l];
    }
    const double det = sw * swq2 - swq * swq;
    if (det <= 0) continue;
    double a = (sw * swqx - swx * swq) / det, b = (swq2 * swx - swq * swqx) / det;
    if (b > 0) {  // the offset cannot be negative: fit the scale alone
      b = 0;
      a = swq2 > 0 ? swqx / swq2 : 0;
    }
    if (a <= 0) continue;
    double err = 0;
    for (int l = 0; l < n; ++l) {
      const double e = a * qs[l] + b - x[l];
      err += w[l] * e * e;
    }
    if (err < best) {
      best = err;
      *scale = static_cast<float>(a);
      *offset = static_cast<float>(-b);
    }
  }
}

// K-quant encoding: per 32-element sub-block an affine (scale, min) pair, both quantized to 6
// bits against the super-block's fp16 d and dmin. Without `search`: the sub-block's min and
// max (round to nearest, the reference). With it: a weighted least-squares fit per sub-block,
// weights importance[l] * sqrt(sigma^2 + x^2) (activation statistics, as llama.cpp's imatrix)
// or rms(x) + |x| without statistics.

template <class Block, bool kFiveBit>
void QuantQxKRow(const float* x, void* dst, int64_t n, const float* importance, bool search) {
  constexpr int kMaxQ = kFiveBit ? 31 : 15;
  auto* y = static_cast<Block*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float scale[8], minv[8];
    float max_scale = 0, max_min = 0;
    double sum_x2 = 0;
    for (int l = 0; l < kQK_K; ++l) sum_x2 += static_cast<double>(x[l]) * x[l];
    const float sigma2 = static_cast<float>(2 * sum_x2 / kQK_K);
    for (int j = 0; j < 8; ++j) {
      if (search) {
        float w[32];
        double sub_x2 = 0;
        for (int l = 0; l < 32; ++l) sub_x2 += static_cast<double>(x[32 * j + l]) * x[32 * j + l];
        const float av = static_cast<float>(std::sqrt(sub_x2 / 32));
        for (int l = 0; l < 32; ++l) {
          const float v = x[32 * j + l];
          w[l] = importance != nullptr
                     ? importance[i * kQK_K + 32 * j + l] * std::sqrt(sigma2 + v * v)
                     : av + std::fabs(v);
        }
        FitAffine(x + 32 * j, w, 32, kMaxQ, &scale[j], &minv[j]);
      } else {
        float mn = 0, mx = 0;  // the min is stored as a non-negative offset, so clamp at 0
        for (int l = 0; l < 32; ++l) {
          mn = std::min(mn, x[32 * j + l]);
          mx = std::max(mx, x[32 * j + l]);
        }
        scale[j] = (mx - mn) / kMaxQ;
        minv[j] = -mn;
      }
      max_scale = std::max(max_scale, scale[j]);
      max_min = std::max(max_min, minv[j]);
    }
    const float d = max_scale / 63.0f, dmin = max_min / 63.0f;
    y[i].d = Fp32ToFp16(d);
    y[i].dmin = Fp32ToFp16(dmin);
    const float dq = Fp16ToFp32(y[i].d), dminq = Fp16ToFp32(y[i].dmin);
    int sc[8], m[8];
    for (int j = 0; j < 8; ++j) {
      sc[j] = dq > 0 ? std::min(63, static_cast<int>(std::lround(scale[j] / dq))) : 0;
      m[j] = dminq > 0 ? std::min(63, static_cast<int>(std::lround(minv[j] / dminq))) : 0;
    }
    PackScaleMinK4(sc, m, y[i].scales);
    if constexpr (kFiveBit) std::memset(y[i].qh, 0, sizeof(y[i].qh));
    for (int j = 0; j < 8; ++j) {
      const float ds = dq * static_cast<float>(sc[j]);
      const float off = dminq * static_cast<float>(m[j]);
      for (int l = 0; l < 32; ++l) {
        int q = ds > 0 ? static_cast<int>(std::lround((x[32 * j + l] + off) / ds)) : 0;
        q = std::clamp(q, 0, kMaxQ);
        const int c = j / 2, byte = 32 * c + l;
        if (j % 2 == 0) {
          y[i].qs[byte] = static_cast<uint8_t>((y[i].qs[byte] & 0xf0) | (q & 0x0f));
        } else {
          y[i].qs[byte] = static_cast<uint8_t>((y[i].qs[byte] & 0x0f) | ((q & 0x0f) << 4));
        }
        if constexpr (kFiveBit) {
          if (q & 0x10) y[i].qh[l] = static_cast<uint8_t>(y[i].qh[l] | (1u << j));
        }
      }
    }
  }
}

}  // namespace

void QuantKRow(bool five_bit, const float* x, void* dst, int64_t n, const float* importance,
               bool search) {
  if (five_bit) {
    QuantQxKRow<BlockQ5_K, true>(x, dst, n, importance, search);
  } else {
    QuantQxKRow<BlockQ4_K, false>(x, dst, n, importance, search);
  }
}

// Symmetric 4-bit group: value (q - 8) * d. Round-to-nearest takes d = max / -8 (as Q4_0);
// with importance weights, d is searched around it for the least weighted squared error.
float QuantGroupQ4S(const float* x, int n, const float* imp, int* q) {
  const float max = SignedAbsMax(x, n);
  // Levels from the unrounded scale (as Q4_0 does), error with the stored fp16 one.
  auto assign = [&](float d_exact, int* out) {
    const float id = d_exact != 0 ? 1.0f / d_exact : 0.0f;
    const float d = Fp16ToFp32(Fp32ToFp16(d_exact));
    double err = 0;
    for (int j = 0; j < n; ++j) {
      out[j] = std::min(15, std::max(0, static_cast<int>(x[j] * id + 8.5f)));
      const double e = x[j] - (out[j] - 8) * d;
      err += (imp != nullptr ? imp[j] : 1.0) * e * e;
    }
    return err;
  };
  float best_d = max / -8.0f;
  double best = assign(best_d, q);
  if (imp == nullptr || max == 0) return best_d;
  int trial[256];
  for (int step = -6; step <= 8; ++step) {
    if (step == 0) continue;
    for (float denom : {-8.0f, 7.0f}) {
      const float d = max / denom * (1.0f + 0.02f * static_cast<float>(step));
      const double err = assign(d, trial);
      if (err < best) {
        best = err;
        best_d = d;
        std::memcpy(q, trial, sizeof(int) * static_cast<size_t>(n));
      }
    }
  }
  return best_d;
}

// 4-bit group with a minimum: value q * d + m. Round-to-nearest spans [min, max]; with
// importance weights, shrunken ranges are tried and each assignment's (d, m) refitted by
// weighted least squares.
void QuantGroupQ4Z(const float* x, int n, const float* imp, int* q, float* d_out, float* m_out) {
  float mn, mx;
  MinMax(x, n, &mn, &mx);
  auto eval = [&](float d, float m, int* out) {
    double err = 0;
    const float id = d > 0 ? 1.0f / d : 0.0f;
    for (int j = 0; j < n; ++j) {
      out[j] = Level((x[j] - m) * id, 0, 15);
      const double e = x[j] - (out[j] * d + m);
      err += (imp != nullptr ? imp[j] : 1.0) * e * e;
    }
    return err;
  };
  auto round16 = [](float v) { return Fp16ToFp32(Fp32ToFp16(v)); };
  float bd = round16((mx - mn) / 15.0f), bm = round16(mn);
  double best = eval(bd, bm, q);
  if (imp == nullptr || mx == mn) {
    *d_out = bd;
    *m_out = bm;
    return;
  }
  int trial[256];
  for (int step = 1; step <= 8; ++step) {
    const float shrink = 0.025f * static_cast<float>(step);
    const float lo = mn + shrink * (mx - mn) * 0.5f, hi = mx - shrink * (mx - mn) * 0.5f;
    float d = (hi - lo) / 15.0f, m = lo;
    eval(d, m, trial);
    // Weighted least squares for (d, m) given the levels.
    double sw = 0, sq = 0, sqq = 0, sx = 0, sqx = 0;
    for (int j = 0; j < n; ++j) {
      const double w = imp[j];
      sw += w;
      sq += w * trial[j];
      sqq += w * trial[j] * trial[j];
      sx += w * x[j];
      sqx += w * trial[j] * x[j];
    }
    const double det = sw * sqq - sq * sq;
    if (det > 0) {
      d = static_cast<float>((sw * sqx - sq * sx) / det);
      m = static_cast<float>((sqq * sx - sq * sqx) / det);
    }
    if (!(d > 0)) continue;
    d = round16(d);
    m = round16(m);
    const double err = eval(d, m, trial);
    if (err < best) {
      best = err;
      bd = d;
      bm = m;
      std::memcpy(q, trial, sizeof(int) * static_cast<size_t>(n));
    }
  }
  *d_out = bd;
  *m_out = bm;
}

}  // namespace quants

bool HasFittedQuantizer(GgmlType t) {
  return t == GgmlType::kQ4_K || t == GgmlType::kQ5_K;
}

void QuantizeRowsFitted(GgmlType t, const float* src, int64_t rows, int64_t cols,
                        const float* importance, void* dst) {
  if (!HasFittedQuantizer(t))
    Fail("QuantizeRowsFitted: no fitted quantizer for %s", Traits(t).name);
  const size_t rb = RowBytes(Traits(t), cols);
  for (int64_t r = 0; r < rows; ++r) {
    auto* out = static_cast<uint8_t*>(dst) + static_cast<size_t>(r) * rb;
    if (t == GgmlType::kQ4_K) {
      quants::QuantKRow(false, src + r * cols, out, cols, importance, true);
    } else {
      quants::QuantKRow(true, src + r * cols, out, cols, importance, true);
    }
  }
}

}  // namespace paddock
