// formats/quants_internal.h: what the three quantization files share (private to formats/):
// the block-max helpers every round-to-nearest encoder starts from, the k-quant scale packing,
// and the fitted quantizers the reference and interleaved encoders call.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace paddock::quants {

// The value of largest magnitude, with its sign (symmetric blocks: it maps to the most
// negative level, as in GGML's Q4_0 / Q5_0).
inline float SignedAbsMax(const float* x, int n) {
  float amax = 0, max = 0;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}
// The minimum and maximum of n >= 1 values (affine blocks).
inline void MinMax(const float* x, int n, float* mn, float* mx) {
  *mn = *mx = x[0];
  for (int j = 1; j < n; ++j) {
    *mn = std::min(*mn, x[j]);
    *mx = std::max(*mx, x[j]);
  }
}
// Round to the nearest quant level in [lo, hi].
inline int Level(float v, int lo, int hi) {
  return std::min(hi, std::max(lo, static_cast<int>(std::lround(v))));
}

// Round-to-nearest of a symmetric block of 32 to `bits` bits (Q4_0, Q5_0): d = max / -2^(bits-1),
// q = min(2^bits - 1, trunc(x / d + 2^(bits-1) + 0.5)). Returns d.
inline float QuantBlockSym(const float* x, int bits, int* q) {
  const float half = static_cast<float>(1 << (bits - 1));
  const float d = SignedAbsMax(x, 32) / -half;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  for (int j = 0; j < 32; ++j)
    q[j] = std::min((1 << bits) - 1, static_cast<int>(x[j] * id + (half + 0.5f)));
  return d;
}
// Round-to-nearest of an affine block of 32 to `bits` bits (Q4_1, Q5_1): d = (max - min) /
// (2^bits - 1), m = min, q = min(2^bits - 1, trunc((x - m) / d + 0.5)).
inline void QuantBlockAffine(const float* x, int bits, int* q, float* d, float* m) {
  float mn, mx;
  MinMax(x, 32, &mn, &mx);
  *d = (mx - mn) / static_cast<float>((1 << bits) - 1);
  *m = mn;
  const float id = *d != 0 ? 1.0f / *d : 0.0f;
  for (int j = 0; j < 32; ++j)
    q[j] = std::min((1 << bits) - 1, static_cast<int>((x[j] - mn) * id + 0.5f));
}

// The 8 6-bit scales and mins of a Q4_K / Q5_K super-block into its 12 bytes.
void PackScaleMinK4(const int* sc, const int* m, uint8_t* q);
// One row of Q4_K (five_bit false) or Q5_K: scales and mins fitted by weighted least squares
// (weights: the importance, else x^2) when `search`, else min/max round to nearest.
void QuantKRow(bool five_bit, const float* x, void* dst, int64_t n, const float* importance,
               bool search);
// Symmetric 4-bit group: value (q - 8) * d. Returns d (importance: searched, else Q4_0's).
float QuantGroupQ4S(const float* x, int n, const float* imp, int* q);
// 4-bit group with a minimum: value q * d + m.
void QuantGroupQ4Z(const float* x, int n, const float* imp, int* q, float* d_out, float* m_out);

}  // namespace paddock::quants
