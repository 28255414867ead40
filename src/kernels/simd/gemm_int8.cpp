// kernels/simd/gemm_int8.cpp: int8 activations: their quantization, the integer peak probe, and
// the integer GEMV / GEMM of the file block layouts (Q8_0, Q4_0, Q4_K, Q6_K and the Q4_0R /
// Q8_0R row layouts; kept for --no-relayout: the interleaved layouts are gemm_x16.cpp).
// Compiled once per ISA; the AVX-512 GEMM's register tiles have no AVX2 twin (AVX2 runs a GEMV
// per token).
#include "kernels/simd/common.h"

namespace paddock {
namespace PADDOCK_ISA_NS {
namespace {

void QuantizeAct(const float* x, int64_t n, int8_t* qs, float* d, float* ds) {
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* xb = x + b * kQK;
    __m256 m = _mm256_setzero_ps();
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int i = 0; i < kQK; i += 8)
      m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + i)));
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
      const __m128i q16 =
          _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
      const __m128i q8 = _mm_packs_epi16(q16, q16);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(qs + b * kQK + i), q8);
    }
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
    s4 = _mm_hadd_epi32(s4, s4);
    s4 = _mm_hadd_epi32(s4, s4);
    d[b] = ActScale(scale);
    ds[b] = d[b] * static_cast<float>(_mm_cvtsi128_si32(s4));
  }
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
      const __m256i d0 =
          DpBusd(_mm256_setzero_si256(), _mm256_abs_epi8(w0), _mm256_sign_epi8(x0, w0));
      const __m256i d1 =
          DpBusd(_mm256_setzero_si256(), _mm256_abs_epi8(w1), _mm256_sign_epi8(x1, w1));
      acc0 =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(d0), _mm256_set1_ps(_cvtsh_ss(b[i].d) * x.d[i]), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d1),
                             _mm256_set1_ps(_cvtsh_ss(b[i + 1].d) * x.d[i + 1]), acc1);
    }
    float v = ReducePair(acc0, acc1);
    if (i < nb) {  // the odd last block, added after the reduction as the GEMM does
      const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qs));
      const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + i * kQK));
      const __m256i d0 =
          DpBusd(_mm256_setzero_si256(), _mm256_abs_epi8(w0), _mm256_sign_epi8(x0, w0));
      v += HorizontalSum(_mm256_cvtepi32_ps(d0)) * _cvtsh_ss(b[i].d) * x.d[i];
    }
    y[r] = v;
  }
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
        const __m256i raw =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[i].qs + 32 * c));
        const __m256i lo = _mm256_and_si256(raw, low4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
        const __m256i d0 =
            DpBusd(_mm256_setzero_si256(), lo,
                   _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + b0 * kQK)));
        const __m256i d1 =
            DpBusd(_mm256_setzero_si256(), hi,
                   _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + (b0 + 1) * kQK)));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d0),
                               _mm256_set1_ps(d * static_cast<float>(sc0) * x.d[b0]), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d1),
                               _mm256_set1_ps(d * static_cast<float>(sc1) * x.d[b0 + 1]), acc1);
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
          const __m256i lb = _mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(blk[i].ql + 64 * h + ((g & 1) ? 32 : 0)));
          const __m256i lo = _mm256_and_si256(g >= 2 ? _mm256_srli_epi16(lb, 4) : lb, m4);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), m2);
          const __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
          const int64_t b = i * 8 + 4 * h + g;  // activation block
          const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + b * kQK));
          const __m256i dp = _mm256_sub_epi32(DpBusd(_mm256_setzero_si256(), q, xq),
                                              DpBusd(_mm256_setzero_si256(), k32, xq));
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

constexpr int kLayoutQ8_0 = 0, kLayoutQ4_0 = 1, kLayoutQ4_0R = 2, kLayoutQ8_0R = 3;

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
        const __m256i d0 =
            DpBusd(_mm256_setzero_si256(), UnpackQ4(qs + 16 * b),
                   _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + b * kQK)));
        const __m256i d1 =
            DpBusd(_mm256_setzero_si256(), UnpackQ4(qs + 16 * (b + 1)),
                   _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + (b + 1) * kQK)));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d0), _mm256_broadcast_ss(sv + k), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d1), _mm256_broadcast_ss(sv + k + 1), acc1);
      }
    }
    auto block = [&](int64_t b) {
      return _mm256_cvtepi32_ps(
          DpBusd(_mm256_setzero_si256(), UnpackQ4(qs + 16 * b),
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
      return _mm256_cvtepi32_ps(
          DpBusd(_mm256_setzero_si256(), _mm256_abs_epi8(wq), _mm256_sign_epi8(xq, wq)));
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
    if (b < nb)
      v += HorizontalSum(block(b)) * _cvtsh_ss(sc[b]) * x.d[b];  // the odd last block, as the GEMM
    y[r] = v;
  }
}

// ---- integer GEMM: register tiles of R rows x T tokens ----

#if defined(__AVX512F__)
// Two consecutive blocks' scales as [s0 x 8 | s1 x 8].
inline __m512 PairScales(const float* s) {
  const __m128 two =
      _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s)));  // unaligned
  return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                               _mm512_castps128_ps512(two));
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
    return _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p0))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p1)), 1);
  }
}

inline float ReduceZ(__m512 v) {
  return _mm512_reduce_add_ps(v);
}

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
        const __m512i xs =
            kQ4 ? xv[t] : _mm512_mask_sub_epi8(xv[t], neg, _mm512_setzero_si512(), xv[t]);
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
      case 4:
        GemmTile<kL, R, 4>(w, rb, cols, dw, xt, out);
        break;
      case 3:
        GemmTile<kL, R, 3>(w, rb, cols, dw, xt, out);
        break;
      case 2:
        GemmTile<kL, R, 2>(w, rb, cols, dw, xt, out);
        break;
      default:
        GemmTile<kL, R, 1>(w, rb, cols, dw, xt, out);
        break;
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
            dp = DpBusd(_mm256_setzero_si256(),
                        UnpackQ4(reinterpret_cast<const BlockQ4_0*>(row)[b].qs), xb);
          } else if constexpr (kL == kLayoutQ8_0R) {
            const __m256i wb =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * nb + kQK * b));
            dp = DpBusd(_mm256_setzero_si256(), _mm256_abs_epi8(wb), _mm256_sign_epi8(xb, wb));
          } else {
            const __m256i wb = _mm256_loadu_si256(
                reinterpret_cast<const __m256i*>(reinterpret_cast<const BlockQ8_0*>(row)[b].qs));
            dp = DpBusd(_mm256_setzero_si256(), _mm256_abs_epi8(wb), _mm256_sign_epi8(xb, wb));
          }
          v += HorizontalSum(_mm256_cvtepi32_ps(dp)) * dw[r * nb + b] * xd[b];
        }
        if constexpr (kL == kLayoutQ4_0 || kL == kLayoutQ4_0R)
          v -= 8.0f * Dot(dw + r * nb, xds, nb);  // the -8 zero point
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
          _mm512_storeu_ps(
              dw + r * nb + b,
              _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * b))));
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
      case 4:
        GemmRows<kL, 4>(wr, rb, cols, dw, x, n_tok, yr, ldy);
        break;
      case 3:
        GemmRows<kL, 3>(wr, rb, cols, dw, x, n_tok, yr, ldy);
        break;
      case 2:
        GemmRows<kL, 2>(wr, rb, cols, dw, x, n_tok, yr, ldy);
        break;
      default:
        GemmRows<kL, 1>(wr, rb, cols, dw, x, n_tok, yr, ldy);
        break;
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
    if constexpr (kL == kLayoutQ4_0R)
      GemvQ8Q4_0R(w, rb, cols, rows, xt, y + t * ldy);
    else if constexpr (kL == kLayoutQ8_0R)
      GemvQ8Q8_0R(w, rb, cols, rows, xt, y + t * ldy);
    else if constexpr (kL == kLayoutQ4_0)
      GemvQ8Q4_0(w, rb, cols, rows, xt, y + t * ldy);
    else
      GemvQ8Q8_0(w, rb, cols, rows, xt, y + t * ldy);
  }
}
#endif

}  // namespace

void SetInt8Kernels(KernelTable* t) {
  t->gemv_q8[static_cast<int>(GgmlType::kQ8_0)] = GemvQ8Q8_0;
  t->gemv_q8[static_cast<int>(GgmlType::kQ4_0)] = GemvQ8Q4_0;
  t->gemm_q8[static_cast<int>(GgmlType::kQ8_0)] = GemmQ8<kLayoutQ8_0>;
  t->gemm_q8[static_cast<int>(GgmlType::kQ4_0)] = GemmQ8<kLayoutQ4_0>;
  t->gemm_q8[static_cast<int>(GgmlType::kQ4_0R)] = GemmQ8<kLayoutQ4_0R>;
  t->gemv_q8[static_cast<int>(GgmlType::kQ4_0R)] = GemvQ8Q4_0R;
  t->gemv_q8[static_cast<int>(GgmlType::kQ4_K)] = GemvQ8Q4_K;
  t->gemv_q8[static_cast<int>(GgmlType::kQ6_K)] = GemvQ8Q6_K;
  t->gemm_q8[static_cast<int>(GgmlType::kQ8_0R)] = GemmQ8<kLayoutQ8_0R>;
  t->gemv_q8[static_cast<int>(GgmlType::kQ8_0R)] = GemvQ8Q8_0R;
  t->quantize_act = QuantizeAct;
  t->int8_peak_probe = DotProductPeak;
}

}  // namespace PADDOCK_ISA_NS
}  // namespace paddock
