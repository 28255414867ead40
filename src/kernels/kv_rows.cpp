// KV row encoders (quantize on write) and the scalar reference decoders.
#include "kernels/kv_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/half.h"
#include "kernels/attend_impl.h"
#include "kernels/tables.h"

namespace paddock {

namespace {

void StoreF32(uint8_t* row, const float* src, int nh, int hd) {
  std::memcpy(row, src, sizeof(float) * static_cast<size_t>(nh) * hd);
}
void StoreF16(uint8_t* row, const float* src, int nh, int hd) {
  auto* d = reinterpret_cast<uint16_t*>(row);
  for (int i = 0; i < nh * hd; ++i) d[i] = Fp32ToFp16(src[i]);
}
void StoreBF16(uint8_t* row, const float* src, int nh, int hd) {
  auto* d = reinterpret_cast<uint16_t*>(row);
  for (int i = 0; i < nh * hd; ++i) d[i] = Fp32ToBf16(src[i]);
}
// Per (token, head): the scale that minimizes the squared rounding error among candidates
// at and just below amax / 127 (clipping the extreme value slightly can lower the error of all
// the others; with short heads this matters).
void StoreI8(uint8_t* row, const float* src, int nh, int hd) {
  auto* scales = reinterpret_cast<float*>(row);
  auto* q = reinterpret_cast<int8_t*>(row + 4 * nh);
  for (int h = 0; h < nh; ++h) {
    const float* x = src + h * hd;
    float amax = 0;
    for (int i = 0; i < hd; ++i) amax = std::max(amax, std::fabs(x[i]));
    float best_d = amax / 127.0f, best_err = -1;
    for (int c = 0; c < 16 && amax > 0; ++c) {
      const float d = amax / (127.0f + 0.5f * static_cast<float>(c));
      float err = 0;
      for (int i = 0; i < hd; ++i) {
        const float r = std::clamp(std::nearbyint(x[i] / d), -127.0f, 127.0f);
        err += (x[i] - r * d) * (x[i] - r * d);
      }
      if (best_err < 0 || err < best_err) {
        best_err = err;
        best_d = d;
      }
    }
    scales[h] = best_d;
    const float id = best_d > 0 ? 1.0f / best_d : 0.0f;
    for (int i = 0; i < hd; ++i) {
      q[h * hd + i] = static_cast<int8_t>(std::clamp(std::nearbyint(x[i] * id), -127.0f, 127.0f));
    }
  }
}
void StoreI4(uint8_t* row, const float* src, int nh, int hd) {
  const int g = KvI4Group(hd);
  const int n = nh * hd;
  for (int s = 0; s < n; s += g, row += 2 + g / 2) {
    const float* x = src + s;
    float amax = 0, max = 0;
    for (int i = 0; i < g; ++i) {
      if (std::fabs(x[i]) > amax) {
        amax = std::fabs(x[i]);
        max = x[i];
      }
    }
    const float d = max / -8.0f;  // the extreme value maps to q = 0 (-8), the full range
    const uint16_t dh = Fp32ToFp16(d);
    std::memcpy(row, &dh, 2);
    const float dq = Fp16ToFp32(dh);
    const float id = dq != 0 ? 1.0f / dq : 0.0f;
    for (int i = 0; i < g / 2; ++i) {
      const int q0 = std::clamp(static_cast<int>(std::nearbyint(x[i] * id)) + 8, 0, 15);
      const int q1 = std::clamp(static_cast<int>(std::nearbyint(x[i + g / 2] * id)) + 8, 0, 15);
      row[2 + i] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

float RefKvDot(KvDtype t, const float* q, const uint8_t* row, int head, int nh, int hd) {
  float buf[1024];
  double s = 0;
  for (int c = 0; c < hd; c += 1024) {
    const int n = std::min(1024, hd - c);
    KvDecodeHead(t, row, head, nh, hd, c, n, buf);
    for (int i = 0; i < n; ++i) s += static_cast<double>(q[c + i]) * buf[i];
  }
  return static_cast<float>(s);
}

void RefKvAxpy(KvDtype t, float* y, float a, const uint8_t* row, int head, int nh, int hd) {
  float buf[1024];
  for (int c = 0; c < hd; c += 1024) {
    const int n = std::min(1024, hd - c);
    KvDecodeHead(t, row, head, nh, hd, c, n, buf);
    for (int i = 0; i < n; ++i) y[c + i] += a * buf[i];
  }
}

template <KvDtype T>
float RefDotT(const float* q, const uint8_t* row, int head, int nh, int hd) {
  return RefKvDot(T, q, row, head, nh, hd);
}
template <KvDtype T>
void RefAxpyT(float* y, float a, const uint8_t* row, int head, int nh, int hd) {
  RefKvAxpy(T, y, a, row, head, nh, hd);
}

}  // namespace

void KvDecodeHead(KvDtype t, const uint8_t* row, int head, int nh, int hd, int begin, int n,
                  float* out) {
  const int off = head * hd + begin;
  switch (t) {
    case KvDtype::kF32:
      std::memcpy(out, reinterpret_cast<const float*>(row) + off, sizeof(float) * n);
      return;
    case KvDtype::kF16:
      for (int i = 0; i < n; ++i)
        out[i] = Fp16ToFp32(reinterpret_cast<const uint16_t*>(row)[off + i]);
      return;
    case KvDtype::kBF16:
      for (int i = 0; i < n; ++i)
        out[i] = Bf16ToFp32(reinterpret_cast<const uint16_t*>(row)[off + i]);
      return;
    case KvDtype::kI8: {
      float d;
      std::memcpy(&d, row + 4 * head, 4);
      const auto* q = reinterpret_cast<const int8_t*>(row + 4 * nh);
      for (int i = 0; i < n; ++i) out[i] = d * static_cast<float>(q[off + i]);
      return;
    }
    case KvDtype::kI4: {
      const int g = KvI4Group(hd);
      for (int i = 0; i < n; ++i) {
        const int e = off + i;
        const uint8_t* grp = row + static_cast<size_t>(e / g) * (2 + g / 2);
        uint16_t dh;
        std::memcpy(&dh, grp, 2);
        const int k = e % g;
        const int q = k >= g / 2 ? (grp[2 + k - g / 2] >> 4) : (grp[2 + k] & 15);
        out[i] = static_cast<float>(q - 8) * Fp16ToFp32(dh);
      }
      return;
    }
  }
}

// Integer encodings rotate each head first when the head size allows (kv_format.h).
template <void (*Store)(uint8_t*, const float*, int, int), KvDtype T>
void StoreRotated(uint8_t* row, const float* src, int nh, int hd) {
  if (!KvRotated(T, hd)) {
    Store(row, src, nh, hd);
    return;
  }
  float buf[kKvMaxRowElements];  // the model config guarantees kv_dim fits
  std::memcpy(buf, src, sizeof(float) * static_cast<size_t>(nh) * hd);
  for (int h = 0; h < nh; ++h) Hadamard(buf + h * hd, hd);
  Store(row, buf, nh, hd);
}

void SetKvStoreKernels(KernelTable* t) {
  t->kv_store[static_cast<int>(KvDtype::kF32)] = StoreF32;
  t->kv_store[static_cast<int>(KvDtype::kF16)] = StoreF16;
  t->kv_store[static_cast<int>(KvDtype::kBF16)] = StoreBF16;
  t->kv_store[static_cast<int>(KvDtype::kI8)] = StoreRotated<StoreI8, KvDtype::kI8>;
  t->kv_store[static_cast<int>(KvDtype::kI4)] = StoreRotated<StoreI4, KvDtype::kI4>;
}

void RefAttendImpl(const float* q, int n_q, const KvRowsRef& k, const KvRowsRef& v, int start,
                   int end, int g, int n_kv, int hd, float scale, float softcap, float* out,
                   float* scratch, bool normalize) {
  auto dot = [&](const float* qh, const uint8_t* row, int gg, int nk, int d) {
    return RefKvDot(k.type, qh, row, gg, nk, d);
  };
  auto axpy = [&](float* y, float a, const uint8_t* row, int gg, int nk, int d) {
    RefKvAxpy(v.type, y, a, row, gg, nk, d);
  };
  auto scale_row = [](float* y, float c, int n) {
    for (int i = 0; i < n; ++i) y[i] *= c;
  };
  AttendImpl(dot, axpy, scale_row, q, n_q, k, v, start, end, g, n_kv, hd, scale, softcap, out,
             scratch, normalize);
}

// One row at a time through the reference single-pass loop.
void RefAttendRows(const float* const* q_rows, float* const* out_rows, int n_rows, const int* lo,
                   const int* hi, const KvRowsRef& k, const KvRowsRef& v, int g, int n_kv, int hd,
                   float scale, float softcap, float* scratch, float* ml) {
  for (int r = 0; r < n_rows; ++r) {
    if (lo[r] >= hi[r]) {
      for (int d = 0; d < hd; ++d) out_rows[r][d] = 0;
      if (ml != nullptr) {
        ml[2 * r] = -1e30f;
        ml[2 * r + 1] = 0;
      }
      continue;
    }
    RefAttendImpl(q_rows[r], 1, k, v, lo[r], hi[r], g, n_kv, hd, scale, softcap, out_rows[r],
                  scratch, ml == nullptr);
    if (ml != nullptr) {
      ml[2 * r] = scratch[0];
      ml[2 * r + 1] = scratch[1];
    }
  }
}

void SetReferenceKvKernels(KernelTable* t) {
  t->attend_rows = RefAttendRows;
  SetKvStoreKernels(t);
  t->kv_dot[0] = RefDotT<KvDtype::kF32>;
  t->kv_dot[1] = RefDotT<KvDtype::kF16>;
  t->kv_dot[2] = RefDotT<KvDtype::kBF16>;
  t->kv_dot[3] = RefDotT<KvDtype::kI8>;
  t->kv_dot[4] = RefDotT<KvDtype::kI4>;
  t->kv_axpy[0] = RefAxpyT<KvDtype::kF32>;
  t->kv_axpy[1] = RefAxpyT<KvDtype::kF16>;
  t->kv_axpy[2] = RefAxpyT<KvDtype::kBF16>;
  t->kv_axpy[3] = RefAxpyT<KvDtype::kI8>;
  t->kv_axpy[4] = RefAxpyT<KvDtype::kI4>;
}

}  // namespace paddock
