// kernels/attend_impl.h: the fused attention loop, written once over the row kernels it is
// given (the reference table passes the reference dot/axpy, the SIMD tables their own).
// Internal to the kernels layer.
#pragma once

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/kernels.h"

namespace paddock {

template <class Dot, class Axpy, class Scale>
inline void AttendImpl(Dot dot, Axpy axpy, Scale scale_row, const float* q, int n_q,
                       const KvRowsRef& k, const KvRowsRef& v, int start, int end, int g, int n_kv,
                       int hd, float scale, float softcap, float* out, float* scratch,
                       bool normalize = true) {
  float* m = scratch;        // running max per head
  float* l = scratch + n_q;  // running sum of exp(s - m) per head
  for (int h = 0; h < n_q; ++h) {
    m[h] = -std::numeric_limits<float>::infinity();
    l[h] = 0;
  }
  std::memset(out, 0, sizeof(float) * static_cast<size_t>(n_q) * static_cast<size_t>(hd));
  for (int t = start; t < end; ++t) {
    const uint8_t* kr = k.Row(t);
    const uint8_t* vr = v.Row(t);
    for (int h = 0; h < n_q; ++h) {
      float s = dot(q + h * hd, kr, g, n_kv, hd) * scale;
      if (softcap > 0) s = softcap * std::tanh(s / softcap);  // logit soft-capping (Gemma 2)
      if (s > m[h]) {  // new maximum: rescale what was accumulated under the old one
        const float c = std::exp(m[h] - s);
        l[h] *= c;
        scale_row(out + h * hd, c, hd);
        m[h] = s;
      }
      const float p = std::exp(s - m[h]);
      l[h] += p;
      axpy(out + h * hd, p, vr, g, n_kv, hd);
    }
  }
  if (!normalize) return;  // the caller merges: m and l stay in scratch
  for (int h = 0; h < n_q; ++h) {
    if (l[h] > 0) scale_row(out + h * hd, 1.0f / l[h], hd);
  }
}

}  // namespace paddock
