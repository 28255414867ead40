// formats/quants_ref.cpp: the reference (scalar) dequantizers and round-to-nearest quantizers of
// every supported GGML type, and the type traits table.
//
// Dequantizers follow the published GGML block layouts exactly. Quantizers are round to
// nearest (the fitted k-quant encoder is quants_fit.cpp); they write test and synthetic models
// and are the baseline for the offline quantizer. The interleaved layouts: quants_x16.cpp.
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
using namespace quants;
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
    int q[kQK];
    y[i].d = Fp32ToFp16(QuantBlockSym(x, 4, q));
    for (int j = 0; j < 16; ++j) y[i].qs[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
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
    int q[kQK];
    float d, m;
    QuantBlockAffine(x, 4, q, &d, &m);
    y[i].d = Fp32ToFp16(d);
    y[i].m = Fp32ToFp16(m);
    for (int j = 0; j < 16; ++j) y[i].qs[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
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
void DequantQ5_0(const void* src, float* y, int64_t n) {
  DequantQ5<BlockQ5_0>(src, y, n);
}
void DequantQ5_1(const void* src, float* y, int64_t n) {
  DequantQ5<BlockQ5_1>(src, y, n);
}

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
    int q[kQK];
    y[i].d = Fp32ToFp16(QuantBlockSym(x, 5, q));
    PackQ5(q, y[i].qs, y[i].qh);
  }
}
void QuantQ5_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    int q[kQK];
    float d, m;
    QuantBlockAffine(x, 5, q, &d, &m);
    y[i].d = Fp32ToFp16(d);
    y[i].m = Fp32ToFp16(m);
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
void DequantQ4_K(const void* s, float* y, int64_t n) {
  DequantQxK<BlockQ4_K, false>(s, y, n);
}
void DequantQ5_K(const void* s, float* y, int64_t n) {
  DequantQxK<BlockQ5_K, true>(s, y, n);
}
void QuantQ4_K(const float* x, void* d, int64_t n) {
  QuantKRow(false, x, d, n, nullptr, false);
}
void QuantQ5_K(const float* x, void* d, int64_t n) {
  QuantKRow(true, x, d, n, nullptr, false);
}

// ---- Q2_K and Q3_K: 16 sub-blocks of 16 elements ----
// Element e of a super-block: half h = e / 128, group j = (e % 128) / 32, l = e % 32; its 2
// low bits at qs[32h + l] >> 2j, its sub-block e / 16.

void DequantQ2_K(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ2_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    const float d = Fp16ToFp32(x[i].d), dmin = Fp16ToFp32(x[i].dmin);
    for (int e = 0; e < kQK_K; ++e) {
      const int q = (x[i].qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
      const uint8_t sc = x[i].scales[e / 16];
      y[e] = d * static_cast<float>(sc & 15) * static_cast<float>(q) -
             dmin * static_cast<float>(sc >> 4);
    }
  }
}

// Round to nearest: per sub-block the range [min(0, min x), max x] over 3 steps; the steps and
// the minimums quantized to 4 bits against the super-block's d and dmin.
void QuantQ2_K(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ2_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float step[16], mins[16], max_step = 0, max_min = 0;
    for (int b = 0; b < 16; ++b) {
      float mn, mx;
      MinMax(x + 16 * b, 16, &mn, &mx);
      mn = std::min(mn, 0.0f);
      step[b] = (mx - mn) / 3.0f;
      mins[b] = -mn;
      max_step = std::max(max_step, step[b]);
      max_min = std::max(max_min, mins[b]);
    }
    const float d = max_step / 15.0f, dmin = max_min / 15.0f;
    y[i].d = Fp32ToFp16(d);
    y[i].dmin = Fp32ToFp16(dmin);
    const float dq = Fp16ToFp32(y[i].d), dminq = Fp16ToFp32(y[i].dmin);
    std::memset(y[i].qs, 0, sizeof(y[i].qs));
    for (int b = 0; b < 16; ++b) {
      const int sc = dq > 0 ? Level(step[b] / dq, 0, 15) : 0;
      const int m = dminq > 0 ? Level(mins[b] / dminq, 0, 15) : 0;
      y[i].scales[b] = static_cast<uint8_t>(sc | (m << 4));
      const float s = dq * static_cast<float>(sc), off = dminq * static_cast<float>(m);
      for (int k = 0; k < 16; ++k) {
        const int e = 16 * b + k;
        const int q = s > 0 ? Level((x[e] + off) / s, 0, 3) : 0;
        y[i].qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>(q << (2 * ((e % 128) / 32)));
      }
    }
  }
}

// The 16 6-bit Q3_K scales from their 12 bytes: bytes 0-3 hold the low nibbles of scales 0-3
// and (high nibbles) 8-11, bytes 4-7 those of 4-7 and 12-15, bytes 8-11 the top 2 bits of all
// (scale j + 4k at bits 2k of byte 8 + j).
void UnpackQ3KScales(const uint8_t* p, int* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = (p[j] & 15) | (((p[8 + j] >> 0) & 3) << 4);
    s[j + 4] = (p[j + 4] & 15) | (((p[8 + j] >> 2) & 3) << 4);
    s[j + 8] = (p[j] >> 4) | (((p[8 + j] >> 4) & 3) << 4);
    s[j + 12] = (p[j + 4] >> 4) | (((p[8 + j] >> 6) & 3) << 4);
  }
}

void DequantQ3_K(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ3_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    const float d = Fp16ToFp32(x[i].d);
    int sc[16];
    UnpackQ3KScales(x[i].scales, sc);
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, j = (e % 128) / 32, l = e % 32;
      const int low = (x[i].qs[32 * h + l] >> (2 * j)) & 3;
      const int q = low - ((x[i].hmask[l] >> (4 * h + j)) & 1 ? 0 : 4);
      y[e] = d * static_cast<float>(sc[e / 16] - 32) * static_cast<float>(q);
    }
  }
}

// Round to nearest: per sub-block a symmetric step max|x| / 4 (levels -4..3), the steps
// quantized to 6 signed bits against the super-block's d.
void QuantQ3_K(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ3_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float step[16], max_step = 0;
    for (int b = 0; b < 16; ++b) {
      step[b] = std::fabs(SignedAbsMax(x + 16 * b, 16)) / 4.0f;
      max_step = std::max(max_step, step[b]);
    }
    y[i].d = Fp32ToFp16(max_step / 31.0f);
    const float dq = Fp16ToFp32(y[i].d);
    int sc[16];
    for (int b = 0; b < 16; ++b) sc[b] = dq > 0 ? Level(step[b] / dq, 0, 31) : 0;
    std::memset(y[i].scales, 0, sizeof(y[i].scales));
    for (int j = 0; j < 4; ++j) {
      const int s0 = sc[j] + 32, s1 = sc[j + 4] + 32, s2 = sc[j + 8] + 32, s3 = sc[j + 12] + 32;
      y[i].scales[j] = static_cast<uint8_t>((s0 & 15) | ((s2 & 15) << 4));
      y[i].scales[j + 4] = static_cast<uint8_t>((s1 & 15) | ((s3 & 15) << 4));
      y[i].scales[8 + j] =
          static_cast<uint8_t>((s0 >> 4) | ((s1 >> 4) << 2) | ((s2 >> 4) << 4) | ((s3 >> 4) << 6));
    }
    std::memset(y[i].qs, 0, sizeof(y[i].qs));
    std::memset(y[i].hmask, 0, sizeof(y[i].hmask));
    for (int e = 0; e < kQK_K; ++e) {
      const float s = dq * static_cast<float>(sc[e / 16]);
      const int v = s > 0 ? Level(x[e] / s, -4, 3) : 0;
      const int h = e / 128, j = (e % 128) / 32, l = e % 32;
      const int low = v >= 0 ? v : v + 4;
      y[i].qs[32 * h + l] |= static_cast<uint8_t>(low << (2 * j));
      if (v >= 0) y[i].hmask[l] |= static_cast<uint8_t>(1 << (4 * h + j));
    }
  }
}

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

// ---- lookup types: IQ4_NL, IQ4_XS (a non-linear 4-bit grid) and MXFP4 (FP4 + E8M0) ----

// The grid index nearest to v (values ascending).
int NearestIndex(const int8_t* values, float v) {
  int best = 0;
  float err = std::fabs(v - values[0]);
  for (int i = 1; i < 16; ++i) {
    const float e = std::fabs(v - values[i]);
    if (e < err) {
      err = e;
      best = i;
    }
  }
  return best;
}

// Nibble q of element j (0..31) of a 16-byte nibble block (Q4_0's order).
inline int Nibble(const uint8_t* qs, int j) {
  return j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4);
}
// 32 elements of a lookup type: d times the grid value each nibble indexes.
inline void DequantGridBlock(float d, const int8_t* grid, const uint8_t* qs, float* y) {
  for (int j = 0; j < kQK; ++j) y[j] = d * grid[Nibble(qs, j)];
}
inline void PackNibbles(const int* q, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
}

// The scale of a block of 32 on the IQ4 grid: the candidates between max / -127 and nearby
// (ggml tries the same family), each scored by its squared error after re-fitting d by least
// squares to the chosen indices; the best d and indices are returned.
float FitIq4Block(const float* x, int* q) {
  const float max = SignedAbsMax(x, 32);
  if (max == 0) {
    for (int j = 0; j < 32; ++j) q[j] = NearestIndex(kIq4NlValues, 0);
    return 0;
  }
  float best_d = 0, best_err = INFINITY;
  int trial[32];
  for (int itry = -7; itry <= 7; ++itry) {
    const float id = (static_cast<float>(itry) + kIq4NlValues[0]) / max;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
      trial[j] = NearestIndex(kIq4NlValues, x[j] * id);
      const float v = kIq4NlValues[trial[j]];
      sumqx += v * x[j];
      sumq2 += v * v;
    }
    const float d = sumq2 > 0 ? sumqx / sumq2 : 0;
    float err = 0;
    for (int j = 0; j < 32; ++j) {
      const float e = x[j] - d * kIq4NlValues[trial[j]];
      err += e * e;
    }
    if (err < best_err) {
      best_err = err;
      best_d = d;
      std::copy(trial, trial + 32, q);
    }
  }
  return best_d;
}

void DequantIQ4_NL(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_NL*>(src);
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK)
    DequantGridBlock(Fp16ToFp32(x[b].d), kIq4NlValues, x[b].qs, y);
}
void QuantIQ4_NL(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockIQ4_NL*>(dst);
  int q[32];
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    const float d = FitIq4Block(x, q);
    y[b].d = Fp32ToFp16(d);
    // Re-pick the indices for the stored (fp16-rounded) scale.
    const float ds = Fp16ToFp32(y[b].d), id = ds != 0 ? 1.0f / ds : 0.0f;
    for (int j = 0; j < 32; ++j) q[j] = NearestIndex(kIq4NlValues, x[j] * id);
    PackNibbles(q, y[b].qs);
  }
}

int Iq4XsScale(const BlockIQ4_XS& b, int ib) {
  return ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 15) | (((b.scales_h >> (2 * ib)) & 3) << 4);
}
void DequantIQ4_XS(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_XS*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = Fp16ToFp32(x[b].d);
    for (int ib = 0; ib < 8; ++ib, y += kQK)
      DequantGridBlock(d * static_cast<float>(Iq4XsScale(x[b], ib) - 32), kIq4NlValues,
                       x[b].qs + 16 * ib, y);
  }
}
// Per sub-block the IQ4 fit; the super-block d maps the largest sub-block scale to -32 (6-bit
// signed scales ls - 32 in -32..31), then each sub-block's indices are re-picked for its
// stored scale.
void QuantIQ4_XS(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockIQ4_XS*>(dst);
  int q[32];
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    float sub[8], amax = 0, max = 0;
    for (int ib = 0; ib < 8; ++ib) {
      sub[ib] = FitIq4Block(x + kQK * ib, q);
      if (std::fabs(sub[ib]) > amax) {
        amax = std::fabs(sub[ib]);
        max = sub[ib];
      }
    }
    BlockIQ4_XS& o = y[b];
    std::memset(&o, 0, sizeof(o));
    const float d = max / -32.0f;
    o.d = Fp32ToFp16(d);
    const float ds = Fp16ToFp32(o.d), id = ds != 0 ? 1.0f / ds : 0.0f;
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = Level(sub[ib] * id, -32, 31) + 32;
      o.scales_l[ib / 2] = static_cast<uint8_t>(o.scales_l[ib / 2] | ((ls & 15) << (4 * (ib % 2))));
      o.scales_h = static_cast<uint16_t>(o.scales_h | ((ls >> 4) << (2 * ib)));
      const float dl = ds * static_cast<float>(ls - 32), idl = dl != 0 ? 1.0f / dl : 0.0f;
      for (int j = 0; j < 32; ++j) q[j] = NearestIndex(kIq4NlValues, x[kQK * ib + j] * idl);
      PackNibbles(q, o.qs + 16 * ib);
    }
  }
}

void DequantMXFP4(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockMXFP4*>(src);
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK)
    DequantGridBlock(Mxfp4Scale(x[b].e), kMxfp4Values, x[b].qs, y);
}
// As ggml's reference: e = floor(log2(amax)) - 2 + 127 (the largest value lands in the grid's
// top octave), each element to the nearest grid value.
void QuantMXFP4(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockMXFP4*>(dst);
  int q[32];
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const int e =
        amax > 0 ? std::clamp(static_cast<int>(std::floor(std::log2(amax))) - 2 + 127, 0, 255) : 0;
    y[b].e = static_cast<uint8_t>(e);
    const float d = Mxfp4Scale(y[b].e);
    for (int j = 0; j < kQK; ++j) {
      int best = 0;
      float err = std::fabs(kMxfp4Values[0] * d - x[j]);
      for (int i = 1; i < 16; ++i) {
        const float e2 = std::fabs(kMxfp4Values[i] * d - x[j]);
        if (e2 < err) {
          err = e2;
          best = i;
        }
      }
      q[j] = best;
    }
    PackNibbles(q, y[b].qs);
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
    {GgmlType::kQ2_K, "Q2_K", kQK_K, 84, DequantQ2_K, QuantQ2_K},
    {GgmlType::kQ3_K, "Q3_K", kQK_K, 110, DequantQ3_K, QuantQ3_K},
    {GgmlType::kQ4_K, "Q4_K", kQK_K, 144, DequantQ4_K, QuantQ4_K},
    {GgmlType::kQ5_K, "Q5_K", kQK_K, 176, DequantQ5_K, QuantQ5_K},
    {GgmlType::kQ6_K, "Q6_K", kQK_K, 210, DequantQ6_K, QuantQ6_K},
    {GgmlType::kQ8_K, "Q8_K", kQK_K, 292, nullptr, nullptr},
    {GgmlType::kIQ4_NL, "IQ4_NL", kQK, 18, DequantIQ4_NL, QuantIQ4_NL},
    {GgmlType::kIQ4_XS, "IQ4_XS", kQK_K, 136, DequantIQ4_XS, QuantIQ4_XS},
    {GgmlType::kMXFP4, "MXFP4", kQK, 17, DequantMXFP4, QuantMXFP4},
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
static const TypeTraits kQ4_KX16Traits = {
    GgmlType::kQ4_KX16, "Q4_KX16", kQK_K, 144, nullptr, nullptr};
static const TypeTraits kQ6_KX16Traits = {
    GgmlType::kQ6_KX16, "Q6_KX16", kQK_K, 210, nullptr, nullptr};
static const TypeTraits kQ5_0X16Traits = {GgmlType::kQ5_0X16, "Q5_0X16", kQK, 22, nullptr, nullptr};
static const TypeTraits kQ5_1X16Traits = {GgmlType::kQ5_1X16, "Q5_1X16", kQK, 24, nullptr, nullptr};
static const TypeTraits kQ5_KX16Traits = {
    GgmlType::kQ5_KX16, "Q5_KX16", kQK_K, 176, nullptr, nullptr};
static const TypeTraits kIQ4_NLX16Traits = {
    GgmlType::kIQ4_NLX16, "IQ4_NLX16", kQK, 18, nullptr, nullptr};
static const TypeTraits kIQ4_XSX16Traits = {
    GgmlType::kIQ4_XSX16, "IQ4_XSX16", kQK_K, 136, nullptr, nullptr};
static const TypeTraits kMXFP4X16Traits = {
    GgmlType::kMXFP4X16, "MXFP4X16", kQK, 17, nullptr, nullptr};
static const TypeTraits kQ3_KX16Traits = {
    GgmlType::kQ3_KX16, "Q3_KX16", kQK_K, 110, nullptr, nullptr};
static const TypeTraits kQ2_KX16Traits = {
    GgmlType::kQ2_KX16, "Q2_KX16", kQK_K, 84, nullptr, nullptr};

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
  if (type == GgmlType::kIQ4_NLX16) return kIQ4_NLX16Traits;
  if (type == GgmlType::kIQ4_XSX16) return kIQ4_XSX16Traits;
  if (type == GgmlType::kMXFP4X16) return kMXFP4X16Traits;
  if (type == GgmlType::kQ3_KX16) return kQ3_KX16Traits;
  if (type == GgmlType::kQ2_KX16) return kQ2_KX16Traits;
  return *FindTypeTraits(static_cast<uint32_t>(type));
}

const TypeTraits* FindTypeTraitsByName(const char* name) {
  for (const auto& t : kTraits) {
    if (strcasecmp(t.name, name) == 0) return &t;
  }
  return nullptr;
}

namespace quants {
void PackScaleMinK4(const int* sc, const int* m, uint8_t* q) {
  std::memset(q, 0, 12);
  for (int j = 0; j < 4; ++j) {
    q[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    q[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    q[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0x0f) | ((m[j + 4] & 0x0f) << 4));
  }
}
}  // namespace quants

}  // namespace paddock
