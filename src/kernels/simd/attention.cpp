// kernels/simd/attention.cpp: K/V rows (dot products and axpy over any KV type) and the tiled
// attention kernel over query rows (AttendRows): query rows are the SIMD lanes. Compiled once
// per ISA.
#include "kernels/simd/common.h"

namespace paddock {
namespace PADDOCK_ISA_NS {
namespace {

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
        part =
            Fma(Sub(ToFloat(Bits(grp + 2 + j, 4, 15)), Set1(8.0f)), Load(q + s + g / 2 + j), part);
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

// ---- tiled attention over query rows (AttendRows) ----

// exp(x) for a vector, to about 2 ulp: 2^n * P(r) with x = n ln2 + r, |r| <= ln2 / 2, a
// degree-6 polynomial. Inputs below -87 give 0 (as they round to 0 in float anyway).
inline VecF ExpV(VecF x) {
  const VecF xc = Max(Min(x, Set1(88.0f)), Set1(-87.0f));
  const VecF n = RoundNearest(Mul(xc, Set1(1.44269504088896341f)));
  VecF r = Fma(n, Set1(-0.693359375f), xc);
  r = Fma(n, Set1(2.12194440e-4f), r);
  VecF p = Set1(1.9875691500e-4f);
  p = Fma(p, r, Set1(1.3981999507e-3f));
  p = Fma(p, r, Set1(8.3334519073e-3f));
  p = Fma(p, r, Set1(4.1665795894e-2f));
  p = Fma(p, r, Set1(1.6666665459e-1f));
  p = Fma(p, r, Set1(5.0000001201e-1f));
  p = Fma(Mul(p, r), r, Add(r, Set1(1.0f)));
  return Select(CmpGe(x, Set1(-87.0f)), Ldexp(p, n), Zero());
}

// Head `head` of a K/V row as hd floats.
template <KvDtype T>
void KvDecode(float* y, const uint8_t* row, int head, int nh, int hd) {
  if constexpr (T == KvDtype::kF32) {
    std::memcpy(y, reinterpret_cast<const float*>(row) + head * hd,
                sizeof(float) * static_cast<size_t>(hd));
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
  float* qt = scratch;                              // [hd][L] queries, scaled
  float* ot = qt + static_cast<size_t>(hd) * L;     // [hd][L] output accumulators
  float* kr = ot + static_cast<size_t>(hd) * L;     // [TILE][hd] decoded keys
  float* vr = kr + static_cast<size_t>(TILE) * hd;  // [TILE][hd] decoded values
  float* pt = vr + static_cast<size_t>(TILE) * hd;  // [TILE][L] scores, then probabilities
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
    AttendLanes<KT, VT>(q_rows + r0, out_rows + r0, std::min(kLanes, n_rows - r0), lo + r0, hi + r0,
                        k, v, g, n_kv, hd, scale, softcap, scratch,
                        ml != nullptr ? ml + 2 * r0 : nullptr);
  }
}

template <KvDtype KT>
AttendRowsFn AttendRowsFor(KvDtype vt) {
  switch (vt) {
    case KvDtype::kF32:
      return AttendRowsT<KT, KvDtype::kF32>;
    case KvDtype::kF16:
      return AttendRowsT<KT, KvDtype::kF16>;
    case KvDtype::kBF16:
      return AttendRowsT<KT, KvDtype::kBF16>;
    case KvDtype::kI8:
      return AttendRowsT<KT, KvDtype::kI8>;
    case KvDtype::kI4:
      return AttendRowsT<KT, KvDtype::kI4>;
  }
  return nullptr;
}

void AttendRows(const float* const* q_rows, float* const* out_rows, int n_rows, const int* lo,
                const int* hi, const KvRowsRef& k, const KvRowsRef& v, int g, int n_kv, int hd,
                float scale, float softcap, float* scratch, float* ml) {
  AttendRowsFn f = nullptr;
  switch (k.type) {
    case KvDtype::kF32:
      f = AttendRowsFor<KvDtype::kF32>(v.type);
      break;
    case KvDtype::kF16:
      f = AttendRowsFor<KvDtype::kF16>(v.type);
      break;
    case KvDtype::kBF16:
      f = AttendRowsFor<KvDtype::kBF16>(v.type);
      break;
    case KvDtype::kI8:
      f = AttendRowsFor<KvDtype::kI8>(v.type);
      break;
    case KvDtype::kI4:
      f = AttendRowsFor<KvDtype::kI4>(v.type);
      break;
  }
  f(q_rows, out_rows, n_rows, lo, hi, k, v, g, n_kv, hd, scale, softcap, scratch, ml);
}

}  // namespace

void SetAttentionKernels(KernelTable* t) {
  SetKvStoreKernels(t);
  t->kv_dot[0] = KvDot<KvDtype::kF32>;
  t->kv_dot[1] = KvDot<KvDtype::kF16>;
  t->kv_dot[2] = KvDot<KvDtype::kBF16>;
  t->kv_dot[3] = KvDot<KvDtype::kI8>;
  t->kv_dot[4] = KvDot<KvDtype::kI4>;
  t->kv_axpy[0] = KvAxpy<KvDtype::kF32>;
  t->kv_axpy[1] = KvAxpy<KvDtype::kF16>;
  t->kv_axpy[2] = KvAxpy<KvDtype::kBF16>;
  t->kv_axpy[3] = KvAxpy<KvDtype::kI8>;
  t->kv_axpy[4] = KvAxpy<KvDtype::kI4>;
  t->attend_rows = AttendRows;
}

}  // namespace PADDOCK_ISA_NS
}  // namespace paddock
