// Reference (scalar) dequantizers and quantizers for every supported GGML type.
//
// Dequantizers follow the published GGML block layouts exactly. Quantizers are simple
// round-to-nearest versions (the k-quant ones do not search for optimal scales); they exist to
// write test and synthetic models and to be the baseline for the offline quantizer.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include <strings.h>

#include "base/half.h"
#include "base/strings.h"
#include "formats/ggml_types.h"
#include "formats/x16_layout.h"

namespace paddock {
namespace {

void DequantF32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * 4);
}
void QuantF32(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * 4);
}
void DequantF16(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = Fp16ToFp32(s[i]);
}
void QuantF16(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = Fp32ToFp16(src[i]);
}
void DequantBF16(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFp32(s[i]);
}
void QuantBF16(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = Fp32ToBf16(src[i]);
}

// ---- legacy 32-element blocks ----

void DequantQ4_0(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = Fp16ToFp32(x[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>((x[i].qs[j] & 0x0f) - 8) * d;
      y[j + 16] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}
void QuantQ4_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax = 0, max = 0;
    for (int j = 0; j < kQK; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
      const int q1 = std::min(15, static_cast<int>(x[j + 16] * id + 8.5f));
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void DequantQ4_1(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = Fp16ToFp32(x[i].d), m = Fp16ToFp32(x[i].m);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(x[i].qs[j] & 0x0f) * d + m;
      y[j + 16] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
    }
  }
}
void QuantQ4_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float mn = x[0], mx = x[0];
    for (int j = 1; j < kQK; ++j) {
      mn = std::min(mn, x[j]);
      mx = std::max(mx, x[j]);
    }
    const float d = (mx - mn) / 15.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    y[i].m = Fp32ToFp16(mn);
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(15, static_cast<int>((x[j] - mn) * id + 0.5f));
      const int q1 = std::min(15, static_cast<int>((x[j + 16] - mn) * id + 0.5f));
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

template <class Block>
void DequantQ5(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const Block*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = Fp16ToFp32(x[i].d);
    float m = -16.0f * d;  // Q5_0: (q - 16) * d
    if constexpr (std::is_same_v<Block, BlockQ5_1>) m = Fp16ToFp32(x[i].m);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    for (int j = 0; j < 16; ++j) {
      const int h0 = ((qh >> j) << 4) & 0x10;
      const int h1 = (qh >> (j + 12)) & 0x10;
      y[j] = static_cast<float>((x[i].qs[j] & 0x0f) | h0) * d + m;
      y[j + 16] = static_cast<float>((x[i].qs[j] >> 4) | h1) * d + m;
    }
  }
}
void DequantQ5_0(const void* src, float* y, int64_t n) { DequantQ5<BlockQ5_0>(src, y, n); }
void DequantQ5_1(const void* src, float* y, int64_t n) { DequantQ5<BlockQ5_1>(src, y, n); }

void PackQ5(const int* q, uint8_t* qs, uint8_t* qh_bytes) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4));
    qh |= static_cast<uint32_t>((q[j] & 0x10) >> 4) << j;
    qh |= static_cast<uint32_t>((q[j + 16] & 0x10) >> 4) << (j + 16);
  }
  std::memcpy(qh_bytes, &qh, 4);
}
void QuantQ5_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax = 0, max = 0;
    for (int j = 0; j < kQK; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -16.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    int q[kQK];
    for (int j = 0; j < kQK; ++j) q[j] = std::min(31, static_cast<int>(x[j] * id + 16.5f));
    PackQ5(q, y[i].qs, y[i].qh);
  }
}
void QuantQ5_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float mn = x[0], mx = x[0];
    for (int j = 1; j < kQK; ++j) {
      mn = std::min(mn, x[j]);
      mx = std::max(mx, x[j]);
    }
    const float d = (mx - mn) / 31.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    y[i].m = Fp32ToFp16(mn);
    int q[kQK];
    for (int j = 0; j < kQK; ++j) q[j] = std::min(31, static_cast<int>((x[j] - mn) * id + 0.5f));
    PackQ5(q, y[i].qs, y[i].qh);
  }
}

void DequantQ8_0(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = Fp16ToFp32(x[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}
void QuantQ8_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    for (int j = 0; j < kQK; ++j) y[i].qs[j] = static_cast<int8_t>(std::lround(x[j] * id));
  }
}

// ---- k-quants (256-element super-blocks) ----

void PackScaleMinK4(const int* sc, const int* m, uint8_t* q) {
  std::memset(q, 0, 12);
  for (int j = 0; j < 4; ++j) {
    q[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    q[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    q[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0x0f) | ((m[j + 4] & 0x0f) << 4));
  }
}

template <class Block, bool kFiveBit>
void DequantQxK(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const Block*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = Fp16ToFp32(x[i].d), dmin = Fp16ToFp32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int c = 0; c < 4; ++c, q += 32) {
      int sc0, m0, sc1, m1;
      KQuantScaleMin(2 * c, x[i].scales, &sc0, &m0);
      KQuantScaleMin(2 * c + 1, x[i].scales, &sc1, &m1);
      const float d0 = d * static_cast<float>(sc0), mm0 = dmin * static_cast<float>(m0);
      const float d1 = d * static_cast<float>(sc1), mm1 = dmin * static_cast<float>(m1);
      for (int l = 0; l < 32; ++l) {
        int lo = q[l] & 0x0f, hi = q[l] >> 4;
        if constexpr (kFiveBit) {
          lo |= ((x[i].qh[l] >> (2 * c)) & 1) << 4;
          hi |= ((x[i].qh[l] >> (2 * c + 1)) & 1) << 4;
        }
        y[l] = d0 * static_cast<float>(lo) - mm0;
        y[l + 32] = d1 * static_cast<float>(hi) - mm1;
      }
      y += 64;
    }
  }
}
void DequantQ4_K(const void* s, float* y, int64_t n) { DequantQxK<BlockQ4_K, false>(s, y, n); }
void DequantQ5_K(const void* s, float* y, int64_t n) { DequantQxK<BlockQ5_K, true>(s, y, n); }

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
    const float iscale = (-1.0f + 0.1f * static_cast<float>(step) + static_cast<float>(nmax)) / (mx - mn);
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
          w[l] = importance != nullptr ? importance[i * kQK_K + 32 * j + l] * std::sqrt(sigma2 + v * v) : av + std::fabs(v);
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
void QuantQ4_K(const float* x, void* d, int64_t n) { QuantQxKRow<BlockQ4_K, false>(x, d, n, nullptr, false); }
void QuantQ5_K(const float* x, void* d, int64_t n) { QuantQxKRow<BlockQ5_K, true>(x, d, n, nullptr, false); }

void DequantQ6_K(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is + 0] * q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2] * q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4] * q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6] * q4);
      }
    }
  }
}
void QuantQ6_K(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ6_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float scale[16], max_scale = 0;
    for (int j = 0; j < 16; ++j) {
      float amax = 0;
      for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * j + l]));
      scale[j] = amax / 31.0f;
      max_scale = std::max(max_scale, scale[j]);
    }
    const float d = max_scale / 127.0f;
    y[i].d = Fp32ToFp16(d);
    const float dq = Fp16ToFp32(y[i].d);
    std::memset(y[i].ql, 0, sizeof(y[i].ql));
    std::memset(y[i].qh, 0, sizeof(y[i].qh));
    for (int j = 0; j < 16; ++j) {
      const int sc = dq > 0 ? std::min(127, static_cast<int>(std::lround(scale[j] / dq))) : 0;
      y[i].scales[j] = static_cast<int8_t>(sc);
      const float ds = dq * static_cast<float>(sc);
      for (int l = 0; l < 16; ++l) {
        const int e = 16 * j + l;  // element index in the super-block
        int q = ds > 0 ? static_cast<int>(std::lround(x[e] / ds)) : 0;
        q = std::clamp(q, -32, 31) + 32;
        const int half = e / 128, r = e % 128, g = r / 32, ll = r % 32;
        uint8_t* ql = y[i].ql + 64 * half;
        uint8_t* qh = y[i].qh + 32 * half;
        const int ql_idx = ll + ((g & 1) ? 32 : 0);
        if (g < 2) {
          ql[ql_idx] = static_cast<uint8_t>(ql[ql_idx] | (q & 0x0f));
        } else {
          ql[ql_idx] = static_cast<uint8_t>(ql[ql_idx] | ((q & 0x0f) << 4));
        }
        qh[ll] = static_cast<uint8_t>(qh[ll] | (((q >> 4) & 3) << (2 * g)));
      }
    }
  }
}

const TypeTraits kTraits[] = {
    {GgmlType::kF32, "F32", 1, 4, DequantF32, QuantF32},
    {GgmlType::kF16, "F16", 1, 2, DequantF16, QuantF16},
    {GgmlType::kQ4_0, "Q4_0", kQK, 18, DequantQ4_0, QuantQ4_0},
    {GgmlType::kQ4_1, "Q4_1", kQK, 20, DequantQ4_1, QuantQ4_1},
    {GgmlType::kQ5_0, "Q5_0", kQK, 22, DequantQ5_0, QuantQ5_0},
    {GgmlType::kQ5_1, "Q5_1", kQK, 24, DequantQ5_1, QuantQ5_1},
    {GgmlType::kQ8_0, "Q8_0", kQK, 34, DequantQ8_0, QuantQ8_0},
    {GgmlType::kQ8_1, "Q8_1", kQK, 36, nullptr, nullptr},
    {GgmlType::kQ2_K, "Q2_K", kQK_K, 84, nullptr, nullptr},
    {GgmlType::kQ3_K, "Q3_K", kQK_K, 110, nullptr, nullptr},
    {GgmlType::kQ4_K, "Q4_K", kQK_K, 144, DequantQ4_K, QuantQ4_K},
    {GgmlType::kQ5_K, "Q5_K", kQK_K, 176, DequantQ5_K, QuantQ5_K},
    {GgmlType::kQ6_K, "Q6_K", kQK_K, 210, DequantQ6_K, QuantQ6_K},
    {GgmlType::kQ8_K, "Q8_K", kQK_K, 292, nullptr, nullptr},
    {GgmlType::kI8, "I8", 1, 1, nullptr, nullptr},
    {GgmlType::kI16, "I16", 1, 2, nullptr, nullptr},
    {GgmlType::kI32, "I32", 1, 4, nullptr, nullptr},
    {GgmlType::kI64, "I64", 1, 8, nullptr, nullptr},
    {GgmlType::kF64, "F64", 1, 8, nullptr, nullptr},
    {GgmlType::kBF16, "BF16", 1, 2, DequantBF16, QuantBF16},
    // Paddock file types: 16-row interleaved, so no row dequantizer (X16Element; QuantizeX16).
    {GgmlType::kPQ8_C, "PQ8_C", 32, 32, nullptr, nullptr, 4},
    {GgmlType::kPQ4_G32, "PQ4_G32", 32, 18, nullptr, nullptr},
    {GgmlType::kPQ4_G64, "PQ4_G64", 64, 34, nullptr, nullptr},
    {GgmlType::kPQ4_G128, "PQ4_G128", 128, 66, nullptr, nullptr},
    {GgmlType::kPQ4_G32Z, "PQ4_G32Z", 32, 20, nullptr, nullptr},
    {GgmlType::kPQ4_G64Z, "PQ4_G64Z", 64, 36, nullptr, nullptr},
    {GgmlType::kPQ4_G128Z, "PQ4_G128Z", 128, 68, nullptr, nullptr},
    {GgmlType::kPS8_C, "PS8_C", 32, 22, nullptr, nullptr, 4},
};

}  // namespace

const TypeTraits* FindTypeTraits(uint32_t type) {
  for (const auto& t : kTraits) {
    if (static_cast<uint32_t>(t.type) == type) return &t;
  }
  return nullptr;
}

// kQ4_0R, one row at a time (`n` is the row length): scales first, then quants.
static void DequantQ4_0R(const void* src, float* y, int64_t n) {
  const int64_t nb = n / kQK;
  const auto* sc = static_cast<const uint16_t*>(src);
  const auto* qs = static_cast<const uint8_t*>(src) + 2 * nb;
  for (int64_t b = 0; b < nb; ++b, y += kQK) {
    const float d = Fp16ToFp32(sc[b]);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>((qs[b * 16 + j] & 0x0f) - 8) * d;
      y[j + 16] = static_cast<float>((qs[b * 16 + j] >> 4) - 8) * d;
    }
  }
}

static void DequantQ8_0R(const void* src, float* y, int64_t n) {
  const int64_t nb = n / kQK;
  const auto* sc = static_cast<const uint16_t*>(src);
  const auto* qs = reinterpret_cast<const int8_t*>(static_cast<const uint8_t*>(src) + 2 * nb);
  for (int64_t b = 0; b < nb; ++b, y += kQK) {
    const float d = Fp16ToFp32(sc[b]);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(qs[b * kQK + j]) * d;
  }
}

static const TypeTraits kQ4_0RTraits = {GgmlType::kQ4_0R, "Q4_0R", kQK, 18, DequantQ4_0R, nullptr};
static const TypeTraits kQ8_0RTraits = {GgmlType::kQ8_0R, "Q8_0R", kQK, 34, DequantQ8_0R, nullptr};
// Rows of the interleaved layouts are not contiguous: no row dequantizer (X16Element reads one).
static const TypeTraits kQ4_0X16Traits = {GgmlType::kQ4_0X16, "Q4_0X16", kQK, 18, nullptr, nullptr};
static const TypeTraits kQ8_0X16Traits = {GgmlType::kQ8_0X16, "Q8_0X16", kQK, 34, nullptr, nullptr};
static const TypeTraits kQ4_KX16Traits = {GgmlType::kQ4_KX16, "Q4_KX16", kQK_K, 144, nullptr, nullptr};
static const TypeTraits kQ6_KX16Traits = {GgmlType::kQ6_KX16, "Q6_KX16", kQK_K, 210, nullptr, nullptr};
static const TypeTraits kQ5_0X16Traits = {GgmlType::kQ5_0X16, "Q5_0X16", kQK, 22, nullptr, nullptr};
static const TypeTraits kQ5_1X16Traits = {GgmlType::kQ5_1X16, "Q5_1X16", kQK, 24, nullptr, nullptr};
static const TypeTraits kQ5_KX16Traits = {GgmlType::kQ5_KX16, "Q5_KX16", kQK_K, 176, nullptr, nullptr};

const TypeTraits& Traits(GgmlType type) {
  if (type == GgmlType::kQ4_0R) return kQ4_0RTraits;
  if (type == GgmlType::kQ8_0R) return kQ8_0RTraits;
  if (type == GgmlType::kQ4_0X16) return kQ4_0X16Traits;
  if (type == GgmlType::kQ8_0X16) return kQ8_0X16Traits;
  if (type == GgmlType::kQ4_KX16) return kQ4_KX16Traits;
  if (type == GgmlType::kQ6_KX16) return kQ6_KX16Traits;
  if (type == GgmlType::kQ5_0X16) return kQ5_0X16Traits;
  if (type == GgmlType::kQ5_1X16) return kQ5_1X16Traits;
  if (type == GgmlType::kQ5_KX16) return kQ5_KX16Traits;
  return *FindTypeTraits(static_cast<uint32_t>(type));
}

void RepackQ8_0Rows(const void* src, void* dst, int64_t rows, int64_t cols) {
  const int64_t nb = cols / kQK;
  const size_t rb = static_cast<size_t>(nb) * sizeof(BlockQ8_0);
  for (int64_t r = 0; r < rows; ++r) {
    const auto* in = reinterpret_cast<const BlockQ8_0*>(static_cast<const uint8_t*>(src) + static_cast<size_t>(r) * rb);
    auto* out = static_cast<uint8_t*>(dst) + static_cast<size_t>(r) * rb;
    for (int64_t b = 0; b < nb; ++b) {
      std::memcpy(out + 2 * b, &in[b].d, 2);
      std::memcpy(out + 2 * nb + kQK * b, in[b].qs, kQK);
    }
  }
}

void RepackQ4_0Rows(const void* src, void* dst, int64_t rows, int64_t cols) {
  const int64_t nb = cols / kQK;
  const size_t rb = static_cast<size_t>(nb) * sizeof(BlockQ4_0);
  for (int64_t r = 0; r < rows; ++r) {
    const auto* in = reinterpret_cast<const BlockQ4_0*>(static_cast<const uint8_t*>(src) + static_cast<size_t>(r) * rb);
    auto* out = static_cast<uint8_t*>(dst) + static_cast<size_t>(r) * rb;
    for (int64_t b = 0; b < nb; ++b) {
      std::memcpy(out + 2 * b, &in[b].d, 2);
      std::memcpy(out + 2 * nb + 16 * b, in[b].qs, 16);
    }
  }
}

namespace {

// Walks 16-row groups block by block; put(out, lane, block) writes one row's block into the
// interleaved block at `out`, which is `block_bytes` long.
// kElems: elements per source block (32, or 256 for the k-quants).
template <class Block, int kElems, class Put>
void RepackX16(const void* src, void* dst, int64_t rows, int64_t cols, size_t block_bytes, Put put) {
  const int64_t nb = cols / kElems;
  const size_t rb = static_cast<size_t>(nb) * sizeof(Block);
  auto* out = static_cast<uint8_t*>(dst);
  std::memset(out, 0, rb * static_cast<size_t>(rows));  // puts may OR bits into place
  for (int64_t g = 0; g < rows / kX16Rows; ++g) {
    for (int64_t b = 0; b < nb; ++b, out += block_bytes) {
      for (int i = 0; i < kX16Rows; ++i) {
        put(out, i, reinterpret_cast<const Block*>(static_cast<const uint8_t*>(src) + static_cast<size_t>(g * kX16Rows + i) * rb)[b]);
      }
    }
  }
}

}  // namespace

void RepackQ4_0X16(const void* src, void* dst, int64_t rows, int64_t cols) {
  RepackX16<BlockQ4_0, kQK>(src, dst, rows, cols, 32 + 4 * 64, [](uint8_t* out, int i, const BlockQ4_0& in) {
    std::memcpy(out + 2 * i, &in.d, 2);
    for (int m = 0; m < 4; ++m) std::memcpy(out + 32 + 64 * m + 4 * i, in.qs + 4 * m, 4);
  });
}

void RepackQ8_0X16(const void* src, void* dst, int64_t rows, int64_t cols) {
  RepackX16<BlockQ8_0, kQK>(src, dst, rows, cols, 32 + 8 * 64, [](uint8_t* out, int i, const BlockQ8_0& in) {
    std::memcpy(out + 2 * i, &in.d, 2);
    for (int k = 0; k < kQK; ++k) out[32 + 64 * (k / 4) + 4 * i + k % 4] = static_cast<uint8_t>(in.qs[k] + 128);
  });
}

void RepackQ4_1X16(const void* src, void* dst, int64_t rows, int64_t cols) {
  RepackX16<BlockQ4_1, kQK>(src, dst, rows, cols, 64 + 4 * 64, [](uint8_t* out, int i, const BlockQ4_1& in) {
    std::memcpy(out + 2 * i, &in.d, 2);
    std::memcpy(out + 32 + 2 * i, &in.m, 2);
    for (int m = 0; m < 4; ++m) std::memcpy(out + 64 + 64 * m + 4 * i, in.qs + 4 * m, 4);
  });
}

namespace {
// Position of element k (0..31) of lane i in a Q4 quant block (low nibbles: k < 16).
inline size_t Q4Byte(int i, int k) { return 64 * static_cast<size_t>((k % 16) / 4) + 4 * static_cast<size_t>(i) + k % 4; }
// Q6_KX16's high 2 bits of element k (0..31) of lane i: byte and shift in the 128-byte part.
inline size_t Q6HighByte(int i, int k) { return 64 * static_cast<size_t>(k / 16) + 4 * static_cast<size_t>(i) + k % 4; }
inline int Q6HighShift(int k) { return 2 * ((k % 16) / 4); }
// The 5th bit of element k (0..31) of lane i in a 5-bit type's 64-byte high-bit vector.
inline size_t Q5HighByte(int i, int k) { return 4 * static_cast<size_t>(i) + k % 4; }
inline int Q5HighBit(int k) { return (k % 16) / 4 + (k >= 16 ? 4 : 0); }
// Writes 5-bit quant q of element k of lane i into a block of nibbles followed by the 5th bits.
inline void PutQ5(uint8_t* blk, int i, int k, int q) {
  blk[Q4Byte(i, k)] |= static_cast<uint8_t>(k < 16 ? (q & 15) : (q & 15) << 4);
  blk[X16LayoutOf(X16Kind::kQ5S).extra + Q5HighByte(i, k)] |= static_cast<uint8_t>((q >> 4) << Q5HighBit(k));
}
// A Q5_0 / Q5_1 block's 32 quants (nibbles qs, 5th bits qh) into lane i of an X16 block.
inline void PutQ5Legacy(uint8_t* blk, int i, const uint8_t* qs, const uint8_t* qh_bytes) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int k = 0; k < kQK; ++k) {
    const int nib = k < 16 ? (qs[k] & 15) : (qs[k - 16] >> 4);
    PutQ5(blk, i, k, nib | static_cast<int>(((qh >> k) & 1) << 4));
  }
}
inline int GetQ5(const uint8_t* blk, int i, int k) {
  const uint8_t byte = blk[Q4Byte(i, k)];
  return (k < 16 ? (byte & 15) : (byte >> 4)) | (((blk[X16LayoutOf(X16Kind::kQ5S).extra + Q5HighByte(i, k)] >> Q5HighBit(k)) & 1) << 4);
}
}  // namespace

void RepackQ5_0X16(const void* src, void* dst, int64_t rows, int64_t cols) {
  RepackX16<BlockQ5_0, kQK>(src, dst, rows, cols, X16GroupBytes(X16Kind::kQ5S, 1), [](uint8_t* out, int i, const BlockQ5_0& in) {
    std::memcpy(out + 2 * i, &in.d, 2);
    PutQ5Legacy(out + 32, i, in.qs, in.qh);
  });
}

void RepackQ5_1X16(const void* src, void* dst, int64_t rows, int64_t cols) {
  RepackX16<BlockQ5_1, kQK>(src, dst, rows, cols, X16GroupBytes(X16Kind::kQ5Z, 1), [](uint8_t* out, int i, const BlockQ5_1& in) {
    std::memcpy(out + 2 * i, &in.d, 2);
    std::memcpy(out + 32 + 2 * i, &in.m, 2);
    PutQ5Legacy(out + 64, i, in.qs, in.qh);
  });
}

void RepackQ5_KX16(const void* src, void* dst, int64_t rows, int64_t cols) {
  RepackX16<BlockQ5_K, kQK_K>(src, dst, rows, cols, X16GroupBytes(X16Kind::kQ5K, 8), [](uint8_t* out, int i, const BlockQ5_K& in) {
    std::memcpy(out + 2 * i, &in.d, 2);
    std::memcpy(out + 32 + 2 * i, &in.dmin, 2);
    for (int v = 0; v < 3; ++v) std::memcpy(out + 64 + 64 * v + 4 * i, in.scales + 4 * v, 4);
    for (int e = 0; e < kQK_K; ++e) {  // sub-block j = e / 32: nibbles of chunk j / 2, 5th bit j of qh
      const int j = e / kQK, l = e % kQK;
      const uint8_t byte = in.qs[32 * (j / 2) + l];
      const int q = ((j % 2) == 0 ? (byte & 15) : (byte >> 4)) | (((in.qh[l] >> j) & 1) << 4);
      PutQ5(out + X16GroupBytes(X16Kind::kQ5K, j), i, l, q);
    }
  });
}

void RepackQ4_KX16(const void* src, void* dst, int64_t rows, int64_t cols) {
  RepackX16<BlockQ4_K, kQK_K>(src, dst, rows, cols, X16GroupBytes(X16Kind::kQ4K, 8), [](uint8_t* out, int i, const BlockQ4_K& in) {
    std::memcpy(out + 2 * i, &in.d, 2);
    std::memcpy(out + 32 + 2 * i, &in.dmin, 2);
    for (int v = 0; v < 3; ++v) std::memcpy(out + 64 + 64 * v + 4 * i, in.scales + 4 * v, 4);
    for (int e = 0; e < kQK_K; ++e) {  // file: per 64 elements, 32 bytes (low nibbles first)
      const uint8_t byte = in.qs[32 * (e / 64) + e % 32];
      const int q = (e % 64) < 32 ? (byte & 15) : (byte >> 4);
      const int k = e % kQK;
      out[X16GroupBytes(X16Kind::kQ4K, e / kQK) + Q4Byte(i, k)] |= static_cast<uint8_t>(k < 16 ? q : q << 4);
    }
  });
}

void RepackQ6_KX16(const void* src, void* dst, int64_t rows, int64_t cols) {
  RepackX16<BlockQ6_K, kQK_K>(src, dst, rows, cols, X16GroupBytes(X16Kind::kQ6K, 8), [](uint8_t* out, int i, const BlockQ6_K& in) {
    std::memcpy(out + 2 * i, &in.d, 2);
    for (int v = 0; v < 4; ++v) std::memcpy(out + 32 + 64 * v + 4 * i, in.scales + 4 * v, 4);
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, r = e % 128, g = r / 32, l = r % 32;
      const uint8_t lbyte = in.ql[64 * h + l + ((g & 1) ? 32 : 0)];
      const int lo = g >= 2 ? (lbyte >> 4) : (lbyte & 15);
      const int hi = (in.qh[32 * h + l] >> (2 * g)) & 3;
      const int k = e % kQK;
      uint8_t* blk = out + X16GroupBytes(X16Kind::kQ6K, e / kQK);
      blk[Q4Byte(i, k)] |= static_cast<uint8_t>(k < 16 ? lo : lo << 4);
      blk[X16LayoutOf(X16Kind::kQ6K).extra + Q6HighByte(i, k)] |= static_cast<uint8_t>(hi << Q6HighShift(k));
    }
  });
}

bool X16RelayoutOf(GgmlType from, GgmlType* to, X16RepackFn* repack) {
  switch (from) {
    case GgmlType::kQ4_0: *to = GgmlType::kQ4_0X16; *repack = RepackQ4_0X16; return true;
    case GgmlType::kQ8_0: *to = GgmlType::kQ8_0X16; *repack = RepackQ8_0X16; return true;
    case GgmlType::kQ4_1: *to = GgmlType::kPQ4_G32Z; *repack = RepackQ4_1X16; return true;  // same values
    case GgmlType::kQ5_0: *to = GgmlType::kQ5_0X16; *repack = RepackQ5_0X16; return true;
    case GgmlType::kQ5_1: *to = GgmlType::kQ5_1X16; *repack = RepackQ5_1X16; return true;
    case GgmlType::kQ4_K: *to = GgmlType::kQ4_KX16; *repack = RepackQ4_KX16; return true;
    case GgmlType::kQ5_K: *to = GgmlType::kQ5_KX16; *repack = RepackQ5_KX16; return true;
    case GgmlType::kQ6_K: *to = GgmlType::kQ6_KX16; *repack = RepackQ6_KX16; return true;
    default: return false;
  }
}

bool X16FormatOf(GgmlType t, X16Format* f) {
  switch (t) {
    case GgmlType::kQ4_0X16:
    case GgmlType::kPQ4_G32: *f = {X16Kind::kQ4S, 32}; return true;
    case GgmlType::kPQ4_G64: *f = {X16Kind::kQ4S, 64}; return true;
    case GgmlType::kPQ4_G128: *f = {X16Kind::kQ4S, 128}; return true;
    case GgmlType::kPQ4_G32Z: *f = {X16Kind::kQ4Z, 32}; return true;
    case GgmlType::kPQ4_G64Z: *f = {X16Kind::kQ4Z, 64}; return true;
    case GgmlType::kPQ4_G128Z: *f = {X16Kind::kQ4Z, 128}; return true;
    case GgmlType::kQ8_0X16: *f = {X16Kind::kQ8B, 32}; return true;
    case GgmlType::kPQ8_C: *f = {X16Kind::kQ8C, 32}; return true;
    case GgmlType::kPS8_C: *f = {X16Kind::kS8C, 32}; return true;
    case GgmlType::kQ4_KX16: *f = {X16Kind::kQ4K, kQK_K}; return true;
    case GgmlType::kQ6_KX16: *f = {X16Kind::kQ6K, kQK_K}; return true;
    case GgmlType::kQ5_0X16: *f = {X16Kind::kQ5S, kQK}; return true;
    case GgmlType::kQ5_1X16: *f = {X16Kind::kQ5Z, kQK}; return true;
    case GgmlType::kQ5_KX16: *f = {X16Kind::kQ5K, kQK_K}; return true;
    default: return false;
  }
}

namespace {

// Byte geometry of a 16-row group: a prefix (PQ8_C's row scales), then per scale group a
// header (scales, minimums) and G / 32 quant blocks.
struct X16Geometry {  // formats/x16_layout.h, for one format's group size
  size_t prefix, header, block;
  int blocks_per_group;
  explicit X16Geometry(const X16Format& f)
      : prefix(X16LayoutOf(f.kind).prefix),
        header(X16LayoutOf(f.kind).header),
        block(X16LayoutOf(f.kind).block),
        blocks_per_group(f.group / kQK) {}
  size_t GroupStride() const { return header + static_cast<size_t>(blocks_per_group) * block; }
};

inline size_t Q8Byte(int i, int k) { return 64 * static_cast<size_t>(k / 4) + 4 * static_cast<size_t>(i) + k % 4; }

}  // namespace

void X16Quant(GgmlType type, const uint8_t* group, int64_t cols, int row, int64_t col, int* q, float* d, float* m) {
  X16Format f{};
  X16FormatOf(type, &f);
  const X16Geometry geo(f);
  const int64_t s = col / f.group;
  const int blk = static_cast<int>((col % f.group) / kQK), k = static_cast<int>(col % kQK);
  const uint8_t* sg = group + geo.prefix + static_cast<size_t>(s) * geo.GroupStride();
  const uint8_t* quants = sg + geo.header + static_cast<size_t>(blk) * geo.block;
  *m = 0;
  if (f.kind == X16Kind::kQ5S || f.kind == X16Kind::kQ5Z) {
    uint16_t h;
    std::memcpy(&h, sg + 2 * row, 2);
    *d = Fp16ToFp32(h);
    if (f.kind == X16Kind::kQ5Z) {
      std::memcpy(&h, sg + 32 + 2 * row, 2);
      *m = Fp16ToFp32(h);
    }
    *q = GetQ5(quants, row, k) - (f.kind == X16Kind::kQ5S ? 16 : 0);
    return;
  }
  if (f.kind == X16Kind::kQ4K || f.kind == X16Kind::kQ5K) {
    uint16_t h[2];
    std::memcpy(&h[0], sg + 2 * row, 2);
    std::memcpy(&h[1], sg + 32 + 2 * row, 2);
    uint8_t scales[12];
    for (int v = 0; v < 3; ++v) std::memcpy(scales + 4 * v, sg + 64 + 64 * v + 4 * row, 4);
    int sc, mn;
    KQuantScaleMin(blk, scales, &sc, &mn);
    const uint8_t byte = quants[Q4Byte(row, k)];
    *q = f.kind == X16Kind::kQ5K ? GetQ5(quants, row, k) : (k < 16 ? (byte & 15) : (byte >> 4));
    *d = Fp16ToFp32(h[0]) * static_cast<float>(sc);
    *m = -(Fp16ToFp32(h[1]) * static_cast<float>(mn));
    return;
  }
  if (f.kind == X16Kind::kQ6K) {
    uint16_t h;
    std::memcpy(&h, sg + 2 * row, 2);
    const int sub = static_cast<int>((col % kQK_K) / 16);
    const auto sc = static_cast<int8_t>(sg[32 + 64 * (sub / 4) + 4 * row + sub % 4]);
    const uint8_t byte = quants[Q4Byte(row, k)];
    const int lo = k < 16 ? (byte & 15) : (byte >> 4);
    const int hi = (quants[X16LayoutOf(X16Kind::kQ6K).extra + Q6HighByte(row, k)] >> Q6HighShift(k)) & 3;
    *q = (lo | (hi << 4)) - 32;
    *d = Fp16ToFp32(h) * static_cast<float>(sc);
    return;
  }
  if (f.kind == X16Kind::kQ8C || f.kind == X16Kind::kS8C) {
    std::memcpy(d, group + 4 * row, 4);
  } else {
    uint16_t h;
    std::memcpy(&h, sg + 2 * row, 2);
    *d = Fp16ToFp32(h);
    if (f.kind == X16Kind::kQ4Z) {
      std::memcpy(&h, sg + 32 + 2 * row, 2);
      *m = Fp16ToFp32(h);
    }
  }
  if (f.kind == X16Kind::kS8C) {  // stored or pruned (0)
    const int step = k / 8, grp = k / 4, pos = k % 4;
    const uint8_t code = quants[X16LayoutOf(X16Kind::kS8C).extra + 4 * row + step];
    const int c = (grp % 2 == 0) ? (code & 15) : (code >> 4);
    *q = 0;
    for (int j = 0; j < 2; ++j) {
      if (kSparsePairs[c][j] == pos) *q = static_cast<int8_t>(quants[32 + 64 * step + 4 * row + 2 * (grp % 2) + j]);
    }
  } else if (f.kind == X16Kind::kQ4S || f.kind == X16Kind::kQ4Z) {
    const uint8_t byte = quants[Q4Byte(row, k)];
    const int nib = k < 16 ? (byte & 15) : (byte >> 4);
    *q = f.kind == X16Kind::kQ4S ? nib - 8 : nib;
  } else {
    *q = quants[Q8Byte(row, k)] - 128;
  }
}

float X16Element(GgmlType type, const uint8_t* group, int64_t cols, int row, int64_t col) {
  int q;
  float d, m;
  X16Quant(type, group, cols, row, col, &q, &d, &m);
  return static_cast<float>(q) * d + m;
}

namespace {

// Round to the nearest quant level in [lo, hi].
inline int Level(float v, int lo, int hi) { return std::min(hi, std::max(lo, static_cast<int>(std::lround(v)))); }

// Symmetric 4-bit group: value (q - 8) * d. Round-to-nearest takes d = max / -8 (as Q4_0);
// with importance weights, d is searched around it for the least weighted squared error.
float QuantGroupQ4S(const float* x, int n, const float* imp, int* q) {
  float amax = 0, max = 0;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
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
  if (imp == nullptr || amax == 0) return best_d;
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
  float mn = x[0], mx = x[0];
  for (int j = 1; j < n; ++j) {
    mn = std::min(mn, x[j]);
    mx = std::max(mx, x[j]);
  }
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

}  // namespace

void QuantizeX16(GgmlType type, const float* src, int64_t rows, int64_t cols, const float* importance, void* dst) {
  X16Format f{};
  if (!X16FormatOf(type, &f)) Fail("QuantizeX16: %s is not an interleaved type", Traits(type).name);
  if (!IsPaddockFileType(type)) Fail("QuantizeX16: %s is a load-time layout of a llama.cpp type, not a file type", Traits(type).name);
  const X16Geometry geo(f);
  const size_t group_bytes = static_cast<size_t>(kX16Rows) * RowBytes(Traits(type), cols);
  auto* out = static_cast<uint8_t*>(dst);
  std::memset(out, 0, group_bytes * static_cast<size_t>(rows / kX16Rows));
  int q[256];
  for (int64_t g = 0; g < rows / kX16Rows; ++g) {
    uint8_t* grp = out + static_cast<size_t>(g) * group_bytes;
    for (int i = 0; i < kX16Rows; ++i) {
      const float* x = src + static_cast<size_t>(g * kX16Rows + i) * static_cast<size_t>(cols);
      if (f.kind == X16Kind::kS8C) {
        // Prune 2 of every 4 (keep the largest |w| * sqrt(importance)), then int8 per row.
        std::vector<uint8_t> codes(static_cast<size_t>(cols / 4));
        float amax = 0;
        for (int64_t g4 = 0; g4 < cols / 4; ++g4) {
          float score[4];
          for (int p = 0; p < 4; ++p) {
            const int64_t c = 4 * g4 + p;
            score[p] = std::fabs(x[c]) * (importance != nullptr ? std::sqrt(importance[c]) : 1.0f);
          }
          int best = 0;
          for (int code = 1; code < 6; ++code) {
            if (score[kSparsePairs[code][0]] + score[kSparsePairs[code][1]] > score[kSparsePairs[best][0]] + score[kSparsePairs[best][1]]) best = code;
          }
          codes[static_cast<size_t>(g4)] = static_cast<uint8_t>(best);
          for (int j = 0; j < 2; ++j) amax = std::max(amax, std::fabs(x[4 * g4 + kSparsePairs[best][j]]));
        }
        const float row_d = amax / 127.0f, id = row_d != 0 ? 1.0f / row_d : 0.0f;
        std::memcpy(grp + 4 * i, &row_d, 4);
        for (int64_t b = 0; b < cols / kQK; ++b) {
          uint8_t* blk = grp + geo.prefix + static_cast<size_t>(b) * geo.block;
          int sum = 0;
          for (int step = 0; step < 4; ++step) {
            uint8_t code_byte = 0;
            for (int half = 0; half < 2; ++half) {
              const int64_t g4 = b * 8 + 2 * step + half;
              const uint8_t code = codes[static_cast<size_t>(g4)];
              code_byte = static_cast<uint8_t>(code_byte | (half == 0 ? code : code << 4));
              for (int j = 0; j < 2; ++j) {
                const int q = Level(x[4 * g4 + kSparsePairs[code][j]] * id, -127, 127);
                sum += q;
                blk[32 + 64 * step + 4 * i + 2 * half + j] = static_cast<uint8_t>(static_cast<int8_t>(q));
              }
            }
            blk[X16LayoutOf(X16Kind::kS8C).extra + 4 * i + step] = code_byte;
          }
          const int16_t s16 = static_cast<int16_t>(sum);
          std::memcpy(blk + 2 * i, &s16, 2);
        }
        continue;
      }
      if (f.kind == X16Kind::kQ8C || f.kind == X16Kind::kQ8B) {
        float row_d = 0;
        if (f.kind == X16Kind::kQ8C) {
          float amax = 0;
          for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(x[c]));
          row_d = amax / 127.0f;
          std::memcpy(grp + 4 * i, &row_d, 4);
        }
        for (int64_t b = 0; b < cols / kQK; ++b) {
          float d = row_d;
          uint8_t* sg = grp + geo.prefix + static_cast<size_t>(b) * geo.GroupStride();
          if (f.kind == X16Kind::kQ8B) {
            float amax = 0;
            for (int k = 0; k < kQK; ++k) amax = std::max(amax, std::fabs(x[b * kQK + k]));
            const uint16_t h = Fp32ToFp16(amax / 127.0f);
            std::memcpy(sg + 2 * i, &h, 2);
            d = Fp16ToFp32(h);
          }
          const float id = d != 0 ? 1.0f / d : 0.0f;
          uint8_t* quants = sg + geo.header;
          for (int k = 0; k < kQK; ++k) quants[Q8Byte(i, k)] = static_cast<uint8_t>(Level(x[b * kQK + k] * id, -127, 127) + 128);
        }
        continue;
      }
      for (int64_t s = 0; s < cols / f.group; ++s) {
        const float* xs = x + s * f.group;
        const float* imp = importance != nullptr ? importance + s * f.group : nullptr;
        uint8_t* sg = grp + static_cast<size_t>(s) * geo.GroupStride();
        float d, m = 0;
        if (f.kind == X16Kind::kQ4S) {
          d = QuantGroupQ4S(xs, f.group, imp, q);
        } else {
          QuantGroupQ4Z(xs, f.group, imp, q, &d, &m);
          const uint16_t hm = Fp32ToFp16(m);
          std::memcpy(sg + 32 + 2 * i, &hm, 2);
        }
        const uint16_t hd = Fp32ToFp16(d);
        std::memcpy(sg + 2 * i, &hd, 2);
        for (int e = 0; e < f.group; ++e) {
          uint8_t* quants = sg + geo.header + static_cast<size_t>(e / kQK) * geo.block;
          const int k = e % kQK;
          quants[Q4Byte(i, k)] |= static_cast<uint8_t>(k < 16 ? q[e] : q[e] << 4);
        }
      }
    }
  }
}

void DequantizeMatrix(GgmlType type, const uint8_t* data, int64_t rows, int64_t cols, float* out) {
  const TypeTraits& tr = Traits(type);
  const size_t rb = RowBytes(tr, cols);
  if (!IsX16(type)) {
    if (tr.to_float == nullptr) Fail("cannot dequantize type %s", tr.name);
    for (int64_t r = 0; r < rows; ++r) tr.to_float(data + static_cast<size_t>(r) * rb, out + r * cols, cols);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* grp = data + static_cast<size_t>(r / kX16Rows) * kX16Rows * rb;
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = X16Element(type, grp, cols, static_cast<int>(r % kX16Rows), c);
  }
}

bool HasFittedQuantizer(GgmlType t) { return t == GgmlType::kQ4_K || t == GgmlType::kQ5_K; }

void QuantizeRowsFitted(GgmlType t, const float* src, int64_t rows, int64_t cols, const float* importance, void* dst) {
  if (!HasFittedQuantizer(t)) Fail("QuantizeRowsFitted: no fitted quantizer for %s", Traits(t).name);
  const size_t rb = RowBytes(Traits(t), cols);
  for (int64_t r = 0; r < rows; ++r) {
    auto* out = static_cast<uint8_t*>(dst) + static_cast<size_t>(r) * rb;
    if (t == GgmlType::kQ4_K) {
      QuantQxKRow<BlockQ4_K, false>(src + r * cols, out, cols, importance, true);
    } else {
      QuantQxKRow<BlockQ5_K, true>(src + r * cols, out, cols, importance, true);
    }
  }
}

const TypeTraits* FindTypeTraitsByName(const char* name) {
  for (const auto& t : kTraits) {
    if (strcasecmp(t.name, name) == 0) return &t;
  }
  return nullptr;
}

}  // namespace paddock
