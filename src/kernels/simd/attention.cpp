// kernels/simd/attention.cpp: K/V rows (dot products and axpy over any KV type) and the tiled
// attention kernel over query rows (AttendRows): query rows are the SIMD lanes. Compiled once
// per ISA.
#include "kernels/simd/common.h"

namespace paddock {
namespace PADDOCK_ISA_NS {
namespace {

// ---- KV rows ----

// kv_store for the 16-bit types: the reference's rounding (Fp32ToFp16, Fp32ToBf16), kLanes
// elements per conversion.
template <bool kBf16>
void Store16(uint8_t* row, const float* src, int nh, int hd) {
  auto* d = reinterpret_cast<uint16_t*>(row);
  const int n = nh * hd;
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    if constexpr (kBf16) {
      StoreBf16(d + i, Load(src + i));
    } else {
      StoreF16(d + i, Load(src + i));
    }
  }
  for (; i < n; ++i) d[i] = kBf16 ? Fp32ToBf16(src[i]) : Fp32ToFp16(src[i]);
}

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

// Head `head` of a K/V row as hd floats.
template <KvDtype T>
void KvDecode(float* y, const uint8_t* row, int head, int nh, int hd) {
  if constexpr (T == KvDtype::kF32) {
    std::memcpy(y, reinterpret_cast<const float*>(row) + head * hd,
                sizeof(float) * static_cast<size_t>(hd));
  } else if constexpr (T == KvDtype::kI4) {
    KvDecodeHead(T, row, head, nh, hd, 0, hd, y);
  } else if constexpr (T == KvDtype::kF16 || T == KvDtype::kBF16) {  // a conversion per element
    const auto* w = reinterpret_cast<const uint16_t*>(row) + head * hd;
    int i = 0;
    for (; i + kLanes <= hd; i += kLanes)
      Store(y + i, T == KvDtype::kF16 ? LoadF16(w + i) : LoadBf16(w + i));
    for (; i < hd; ++i) y[i] = T == KvDtype::kF16 ? Fp16ToFp32(w[i]) : Bf16ToFp32(w[i]);
  } else {
    std::memset(y, 0, sizeof(float) * static_cast<size_t>(hd));
    KvAxpy<T>(y, 1.0f, row, head, nh, hd);  // 0 + 1 * x: exact
  }
}

// Asks for head `head` of a K/V row of type T (the bytes KvDecode reads) ahead of its use: the
// rows of a tile are 128-256 byte slices of rows holding every KV head, scattered over the
// sequence's blocks, which the hardware prefetchers do not follow.
template <KvDtype T>
inline void PrefetchKvHead(const uint8_t* row, int head, int nh, int hd) {
  size_t off, len;
  if constexpr (T == KvDtype::kF32) {
    off = static_cast<size_t>(head) * hd * 4;
    len = static_cast<size_t>(hd) * 4;
  } else if constexpr (T == KvDtype::kF16 || T == KvDtype::kBF16) {
    off = static_cast<size_t>(head) * hd * 2;
    len = static_cast<size_t>(hd) * 2;
  } else if constexpr (T == KvDtype::kI8) {
    off = 4 * static_cast<size_t>(nh) + static_cast<size_t>(head) * hd;
    len = static_cast<size_t>(hd);
  } else {
    const int g = KvI4Group(hd);
    off = static_cast<size_t>(head * hd / g) * (2 + g / 2);
    len = static_cast<size_t>(hd / g) * (2 + g / 2);
  }
  for (size_t b = 0; b < len; b += 64) __builtin_prefetch(row + off + b, 0, 3);
}

// The K and V head slices of the tile after the one starting at t0 (positions before t_end).
template <KvDtype KT, KvDtype VT>
inline void PrefetchNextTile(const KvRowsRef& k, const KvRowsRef& v, int t0, int t_end, int g,
                             int n_kv, int hd) {
  for (int i = t0 + kAttnTile; i < std::min(t0 + 2 * kAttnTile, t_end); ++i) {
    PrefetchKvHead<KT>(k.Row(i), g, n_kv, hd);
    PrefetchKvHead<VT>(v.Row(i), g, n_kv, hd);
  }
}

// Lanes are query rows: scores, the running max / sum and the output accumulators are vectors
// over up to kLanes rows, so the softmax and the rescaling are vector operations and each
// decoded K/V element is one broadcast for all rows. A block is G lane groups (G x kLanes rows:
// up to 4 x 16 on AVX-512, 2 x 8 on AVX2, as many as the registers hold) that share each
// broadcast; the rows come in `blocks` such blocks, and every decoded K/V tile serves all of them
// before the next is read, so long ranges are read once per kAttnMaxRows rows, not per block.
// Masked (invisible) positions get probability 0, never a NaN.
template <KvDtype KT, KvDtype VT, int G>
void AttendLanes(const float* const* q_rows, float* const* out_rows, int n_rows, const int* lo,
                 const int* hi, const KvRowsRef& k, const KvRowsRef& v, int g, int n_kv, int hd,
                 float scale, float softcap, float* scratch, float* ml) {
  constexpr int L = kLanes, TILE = kAttnTile, R = G * L;
  constexpr int kMaxBlocks = kAttnMaxRows / R;
  static_assert(kMaxBlocks >= 1, "the scratch holds kAttnMaxRows rows");
  const int blocks = (n_rows + R - 1) / R;
  const size_t ghd = static_cast<size_t>(hd) * L;   // floats of one group's [hd][L] block
  const size_t bhd = G * ghd;                       // floats of one block's
  float* qt = scratch;                              // [blocks][G][hd][L] queries, scaled
  float* ot = qt + blocks * bhd;                    // [blocks][G][hd][L] output sums
  float* kr = ot + blocks * bhd;                    // [TILE][hd] decoded keys
  float* vr = kr + static_cast<size_t>(TILE) * hd;  // [TILE][hd] decoded values
  float* pt = vr + static_cast<size_t>(TILE) * hd;  // [TILE][G][L] scores, probabilities
  alignas(64) float lo_f[kAttnMaxRows], hi_f[kAttnMaxRows];
  alignas(64) float m_rows[kAttnMaxRows], l_rows[kAttnMaxRows];  // running max and sum
  int b_lo[kMaxBlocks], b_hi[kMaxBlocks];  // each block's positions, [b_lo, b_hi)
  int t_begin = 1 << 30, t_end = 0;
  for (int b = 0; b < blocks; ++b) {
    b_lo[b] = 1 << 30;
    b_hi[b] = 0;
    for (int r = b * R; r < (b + 1) * R; ++r) {
      const bool real = r < n_rows && lo[r] < hi[r];
      lo_f[r] = real ? static_cast<float>(lo[r]) : 0.0f;
      hi_f[r] = real ? static_cast<float>(hi[r]) : 0.0f;
      m_rows[r] = -1e30f;
      l_rows[r] = 0.0f;
      if (real) {
        b_lo[b] = std::min(b_lo[b], lo[r]);
        b_hi[b] = std::max(b_hi[b], hi[r]);
      }
    }
    t_begin = std::min(t_begin, b_lo[b]);
    t_end = std::max(t_end, b_hi[b]);
  }
  // Tiles start at multiples of TILE, whatever the rows' ranges: a row's tiles, and so its
  // result, are the same alone or among others (positions outside its range change nothing,
  // and a block skips the tiles none of its rows sees).
  t_begin = t_begin / TILE * TILE;
  for (int r = 0; r < blocks * R; ++r) {
    float* q = qt + static_cast<size_t>(r / L) * ghd + r % L;
    for (int d = 0; d < hd; ++d) q[d * L] = r < n_rows ? q_rows[r][d] * scale : 0.0f;
  }
  std::memset(ot, 0, sizeof(float) * blocks * bhd);
  const VecF kNeg = Set1(-1e30f);
  for (int t0 = t_begin; t0 < t_end; t0 += TILE) {
    const int nt = std::min(TILE, t_end - t0);
    PrefetchNextTile<KT, VT>(k, v, t0, t_end, g, n_kv, hd);
    for (int i = 0; i < nt; ++i) {
      KvDecode<KT>(kr + i * hd, k.Row(t0 + i), g, n_kv, hd);
      KvDecode<VT>(vr + i * hd, v.Row(t0 + i), g, n_kv, hd);
    }
    if (nt < TILE)  // a last, partial tile: the score pass reads whole groups of P keys
      std::memset(kr + static_cast<size_t>(nt) * hd, 0, sizeof(float) * (TILE - nt) * hd);
    for (int b = 0; b < blocks; ++b) {
      if (t0 >= b_hi[b] || t0 + nt <= b_lo[b]) continue;  // no row of the block sees the tile
      const float* qb = qt + b * bhd;
      float* ob = ot + b * bhd;
      VecF vlo[G], vhi[G], m[G], l[G];
      for (int gi = 0; gi < G; ++gi) {
        const int r = b * R + gi * L;
        vlo[gi] = Load(lo_f + r);
        vhi[gi] = Load(hi_f + r);
        m[gi] = Load(m_rows + r);
        l[gi] = Load(l_rows + r);
      }
      // Scores of P positions at a time (each key element broadcast once for every group; G x P
      // independent sums, enough to cover the FMA latency).
      constexpr int P = G == 1 ? 8 : 4;
      VecF mx[G];
      for (int gi = 0; gi < G; ++gi) mx[gi] = kNeg;
      for (int i = 0; i < nt; i += P) {
        const int ni = std::min(P, nt - i);
        VecF s[G][P];
        for (int gi = 0; gi < G; ++gi)
          for (int j = 0; j < P; ++j) s[gi][j] = Zero();
        const float* k0 = kr + i * hd;
        for (int d = 0; d < hd; ++d) {
          VecF kb[P];
          for (int j = 0; j < P; ++j) kb[j] = Set1(k0[j * hd + d]);  // rows past nt: zeros
          for (int gi = 0; gi < G; ++gi) {
            const VecF qd = Load(qb + gi * ghd + d * L);
            for (int j = 0; j < P; ++j) s[gi][j] = Fma(qd, kb[j], s[gi][j]);
          }
        }
        for (int j = 0; j < ni; ++j) {
          const VecF pos = Set1(static_cast<float>(t0 + i + j));
          for (int gi = 0; gi < G; ++gi) {
            VecF sc = s[gi][j];
            if (softcap > 0) {  // softcap * tanh(s / softcap), tanh(y) = 1 - 2 / (exp(2y) + 1)
              const VecF e = ExpV(Mul(sc, Set1(2.0f / softcap)));
              sc = Mul(Set1(softcap), Sub(Set1(1.0f), Div(Set1(2.0f), Add(e, Set1(1.0f)))));
            }
            sc = Select(And(CmpGe(pos, vlo[gi]), CmpLt(pos, vhi[gi])), sc, kNeg);
            Store(pt + ((i + j) * G + gi) * L, sc);
            mx[gi] = Max(mx[gi], sc);
          }
        }
      }
      for (int gi = 0; gi < G; ++gi) {
        const VecF m_new = Max(m[gi], mx[gi]);
        const VecF c = ExpV(Sub(m[gi], m_new));
        l[gi] = Mul(l[gi], c);
        float* o = ob + gi * ghd;
        for (int d = 0; d < hd; ++d) Store(o + d * L, Mul(Load(o + d * L), c));
        m[gi] = m_new;
      }
      for (int i = 0; i < nt; ++i) {
        const VecF pos = Set1(static_cast<float>(t0 + i));
        for (int gi = 0; gi < G; ++gi) {
          float* pp = pt + (i * G + gi) * L;
          const VecF p = Select(And(CmpGe(pos, vlo[gi]), CmpLt(pos, vhi[gi])),
                                ExpV(Sub(Load(pp), m[gi])), Zero());
          l[gi] = Add(l[gi], p);
          Store(pp, p);
        }
      }
      for (int gi = 0; gi < G; ++gi) {
        Store(m_rows + b * R + gi * L, m[gi]);
        Store(l_rows + b * R + gi * L, l[gi]);
      }
      // out[d] += sum_i p_i * v_i[d], U output columns per group in registers at a time (each
      // value element broadcast once for every group).
      constexpr int U = G == 1 ? 8 : 4;
      int d = 0;
      for (; d + U <= hd; d += U) {
        VecF o[G][U];
        for (int gi = 0; gi < G; ++gi)
          for (int u = 0; u < U; ++u) o[gi][u] = Load(ob + gi * ghd + (d + u) * L);
        for (int i = 0; i < nt; ++i) {
          const float* vi = vr + i * hd + d;
          VecF vb[U];
          for (int u = 0; u < U; ++u) vb[u] = Set1(vi[u]);
          for (int gi = 0; gi < G; ++gi) {
            const VecF p = Load(pt + (i * G + gi) * L);
            for (int u = 0; u < U; ++u) o[gi][u] = Fma(p, vb[u], o[gi][u]);
          }
        }
        for (int gi = 0; gi < G; ++gi)
          for (int u = 0; u < U; ++u) Store(ob + gi * ghd + (d + u) * L, o[gi][u]);
      }
      for (; d < hd; ++d) {
        for (int gi = 0; gi < G; ++gi) {
          VecF o = Load(ob + gi * ghd + d * L);
          for (int i = 0; i < nt; ++i)
            o = Fma(Load(pt + (i * G + gi) * L), Set1(vr[i * hd + d]), o);
          Store(ob + gi * ghd + d * L, o);
        }
      }
    }
  }
  for (int r = 0; r < n_rows; ++r) {
    const bool real = lo[r] < hi[r];
    if (ml != nullptr) {  // partial: unnormalized, with the row's max and sum
      ml[2 * r] = real ? m_rows[r] : -1e30f;
      ml[2 * r + 1] = real ? l_rows[r] : 0.0f;
    }
    const float inv = ml != nullptr ? 1.0f : (l_rows[r] > 0 ? 1.0f / l_rows[r] : 0.0f);
    const float* o = ot + static_cast<size_t>(r / L) * ghd + r % L;
    for (int d = 0; d < hd; ++d) out_rows[r][d] = real ? o[d * L] * inv : 0.0f;
  }
}

// Few query rows (a decode token's GQA group, or the one head of a model without GQA), where
// the rows as lanes would leave most lanes idle: the positions are the lanes of the scores (the
// tile's keys transposed once, TransposeBlock) and the head dimension those of the output sums.
// Each row's operations are AttendLanes' in the same order (its score summed over d with one FMA
// each, the tile's max, exp, the running sum over the positions in order, the output sums over
// the positions in order), so its result is bit-identical to what it gets among many rows.
// A row skips the tiles it does not see (an exact no-op in AttendLanes). hd % kLanes == 0.
constexpr int kFewRows = kLanes / 2;
constexpr int kFewRowBlock = kLanes == 16 ? 4 : 2;  // score rows in registers at a time

// Scores of rows rows[0..RB) against the transposed tile kt ([hd][kAttnTile]): s[r][v] over
// positions v * kLanes + lane, each summed over d in order.
template <int RB>
void FewScores(const float* qs, const int* rows, const float* kt, int hd, float* pt) {
  constexpr int NV = kAttnTile / kLanes;
  VecF s[RB][NV];
  for (int r = 0; r < RB; ++r)
    for (int v = 0; v < NV; ++v) s[r][v] = Zero();
  const float* q[RB];
  for (int r = 0; r < RB; ++r) q[r] = qs + static_cast<size_t>(rows[r]) * hd;
  for (int d = 0; d < hd; ++d) {
    VecF kv[NV];
    for (int v = 0; v < NV; ++v) kv[v] = Load(kt + d * kAttnTile + v * kLanes);
    for (int r = 0; r < RB; ++r) {
      const VecF qd = Set1(q[r][d]);
      for (int v = 0; v < NV; ++v) s[r][v] = Fma(qd, kv[v], s[r][v]);
    }
  }
  for (int r = 0; r < RB; ++r)
    for (int v = 0; v < NV; ++v) Store(pt + rows[r] * kAttnTile + v * kLanes, s[r][v]);
}

// os[row] += sum_{i < nt} p[row][i] * vr[i] for rows rows[0..RB), over the positions in order.
template <int RB>
void FewValues(const int* rows, const float* pt, const float* vr, int nt, int hd, float* os) {
  constexpr int DV = kLanes == 16 ? 16 / RB : 8 / RB;  // output vectors per row in registers
  for (int d0 = 0; d0 < hd; d0 += DV * kLanes) {
    const int nv = std::min(DV, (hd - d0) / kLanes);
    VecF o[RB][DV];
    for (int r = 0; r < RB; ++r)
      for (int u = 0; u < DV; ++u)
        o[r][u] = u < nv ? Load(os + static_cast<size_t>(rows[r]) * hd + d0 + u * kLanes) : Zero();
    for (int i = 0; i < nt; ++i) {
      const float* vi = vr + static_cast<size_t>(i) * hd + d0;
      for (int r = 0; r < RB; ++r) {
        const VecF p = Set1(pt[rows[r] * kAttnTile + i]);
        for (int u = 0; u < DV; ++u)
          if (u < nv) o[r][u] = Fma(p, Load(vi + u * kLanes), o[r][u]);
      }
    }
    for (int r = 0; r < RB; ++r)
      for (int u = 0; u < DV; ++u)
        if (u < nv) Store(os + static_cast<size_t>(rows[r]) * hd + d0 + u * kLanes, o[r][u]);
  }
}

template <KvDtype KT, KvDtype VT>
void AttendFew(const float* const* q_rows, float* const* out_rows, int n_rows, const int* lo,
               const int* hi, const KvRowsRef& k, const KvRowsRef& v, int g, int n_kv, int hd,
               float scale, float softcap, float* scratch, float* ml) {
  constexpr int L = kLanes, TILE = kAttnTile, NV = TILE / L;
  const size_t h = static_cast<size_t>(hd);
  float* qs = scratch;            // [kFewRows][hd] queries, scaled
  float* os = qs + kFewRows * h;  // [kFewRows][hd] output sums
  float* kr = os + kFewRows * h;  // [TILE][hd] decoded keys
  float* kt = kr + TILE * h;      // [hd][TILE] the same, transposed
  float* vr = kt + TILE * h;      // [TILE][hd] decoded values
  float* pt = vr + TILE * h;      // [kFewRows][TILE] scores, probabilities
  alignas(64) float lane[kLanes];
  float m_rows[kFewRows], l_rows[kFewRows];
  int t_begin = 1 << 30, t_end = 0;
  for (int r = 0; r < n_rows; ++r) {
    m_rows[r] = -1e30f;
    l_rows[r] = 0.0f;
    if (lo[r] < hi[r]) {
      t_begin = std::min(t_begin, lo[r]);
      t_end = std::max(t_end, hi[r]);
    }
    for (int d = 0; d < hd; ++d) qs[r * h + d] = q_rows[r][d] * scale;
  }
  std::memset(os, 0, sizeof(float) * n_rows * h);
  t_begin = t_begin / TILE * TILE;
  const VecF kNeg = Set1(-1e30f);
  VecF lane_pos[NV];
  for (int u = 0; u < NV; ++u) {
    for (int i = 0; i < L; ++i) lane[i] = static_cast<float>(u * L + i);
    lane_pos[u] = Load(lane);
  }
  for (int t0 = t_begin; t0 < t_end; t0 += TILE) {
    const int nt = std::min(TILE, t_end - t0);
    int act[kFewRows], n_act = 0;  // the rows that see the tile
    for (int r = 0; r < n_rows; ++r)
      if (lo[r] < hi[r] && t0 < hi[r] && t0 + nt > lo[r]) act[n_act++] = r;
    if (n_act == 0) continue;
    PrefetchNextTile<KT, VT>(k, v, t0, t_end, g, n_kv, hd);
    for (int i = 0; i < nt; ++i) {
      KvDecode<KT>(kr + i * h, k.Row(t0 + i), g, n_kv, hd);
      KvDecode<VT>(vr + i * h, v.Row(t0 + i), g, n_kv, hd);
    }
    if (nt < TILE) std::memset(kr + nt * h, 0, sizeof(float) * (TILE - nt) * h);
    for (int tb = 0; tb < TILE; tb += L)
      for (int d = 0; d < hd; d += L) TransposeBlock(kr + tb * h + d, hd, kt + d * TILE + tb, TILE);
    int a = 0;
    for (; a + kFewRowBlock <= n_act; a += kFewRowBlock)
      FewScores<kFewRowBlock>(qs, act + a, kt, hd, pt);
    for (; a < n_act; ++a) FewScores<1>(qs, act + a, kt, hd, pt);
    const VecF base = Set1(static_cast<float>(t0));
    for (int ai = 0; ai < n_act; ++ai) {
      const int r = act[ai];
      const VecF vlo = Set1(static_cast<float>(lo[r])), vhi = Set1(static_cast<float>(hi[r]));
      float* pr = pt + r * TILE;
      VecF mx = kNeg;
      VecM seen[NV];
      for (int u = 0; u < NV; ++u) {
        const VecF pos = Add(base, lane_pos[u]);
        seen[u] = And(CmpGe(pos, vlo), CmpLt(pos, vhi));
        VecF sc = Load(pr + u * L);
        if (softcap > 0) {  // as AttendLanes
          const VecF e = ExpV(Mul(sc, Set1(2.0f / softcap)));
          sc = Mul(Set1(softcap), Sub(Set1(1.0f), Div(Set1(2.0f), Add(e, Set1(1.0f)))));
        }
        sc = Select(seen[u], sc, kNeg);
        Store(pr + u * L, sc);
        mx = Max(mx, sc);
      }
      const float m_tile = ReduceMax(mx);
      const float m_new = m_rows[r] > m_tile ? m_rows[r] : m_tile;  // Max(m, mx), as maxps
      Store(lane, ExpV(Set1(m_rows[r] - m_new)));
      const float c = lane[0];
      l_rows[r] *= c;
      const VecF vc = Set1(c);
      float* o = os + r * h;
      for (int d = 0; d < hd; d += L) Store(o + d, Mul(Load(o + d), vc));
      m_rows[r] = m_new;
      const VecF vm = Set1(m_new);
      for (int u = 0; u < NV; ++u)
        Store(pr + u * L, Select(seen[u], ExpV(Sub(Load(pr + u * L), vm)), Zero()));
      float l = l_rows[r];
      for (int i = 0; i < nt; ++i) l += pr[i];  // in position order
      l_rows[r] = l;
    }
    a = 0;
    for (; a + kFewRowBlock <= n_act; a += kFewRowBlock)
      FewValues<kFewRowBlock>(act + a, pt, vr, nt, hd, os);
    for (; a < n_act; ++a) FewValues<1>(act + a, pt, vr, nt, hd, os);
  }
  for (int r = 0; r < n_rows; ++r) {
    const bool real = lo[r] < hi[r];
    if (ml != nullptr) {
      ml[2 * r] = real ? m_rows[r] : -1e30f;
      ml[2 * r + 1] = real ? l_rows[r] : 0.0f;
    }
    const float inv = ml != nullptr ? 1.0f : (l_rows[r] > 0 ? 1.0f / l_rows[r] : 0.0f);
    for (int d = 0; d < hd; ++d) out_rows[r][d] = real ? os[r * h + d] * inv : 0.0f;
  }
}

// One call for every run of rows: the one-group kernel for kLanes rows or fewer, two groups for
// up to 2 x kLanes, else blocks of four (AVX-512; AVX2 stays at blocks of two 8-lane groups). A
// row's result does not depend on its run-mates: every row's sums run in the same order
// whatever the grouping.
template <KvDtype KT, KvDtype VT>
void AttendRowsT(const float* const* q_rows, float* const* out_rows, int n_rows, const int* lo,
                 const int* hi, const KvRowsRef& k, const KvRowsRef& v, int g, int n_kv, int hd,
                 float scale, float softcap, float* scratch, float* ml) {
  constexpr int kMaxGroups = kLanes == 16 ? 4 : 2;
  static_assert(kAttnMaxRows % (kMaxGroups * kLanes) == 0);
  for (int r0 = 0; r0 < n_rows;) {
    const int n = std::min(kAttnMaxRows, n_rows - r0);
    float* part_ml = ml != nullptr ? ml + 2 * r0 : nullptr;
    if (n <= kFewRows && hd % kLanes == 0) {
      AttendFew<KT, VT>(q_rows + r0, out_rows + r0, n, lo + r0, hi + r0, k, v, g, n_kv, hd, scale,
                        softcap, scratch, part_ml);
    } else if (n <= kLanes) {
      AttendLanes<KT, VT, 1>(q_rows + r0, out_rows + r0, n, lo + r0, hi + r0, k, v, g, n_kv, hd,
                             scale, softcap, scratch, part_ml);
    } else if (n <= 2 * kLanes || kMaxGroups == 2) {
      AttendLanes<KT, VT, 2>(q_rows + r0, out_rows + r0, n, lo + r0, hi + r0, k, v, g, n_kv, hd,
                             scale, softcap, scratch, part_ml);
    } else {
      AttendLanes<KT, VT, kMaxGroups>(q_rows + r0, out_rows + r0, n, lo + r0, hi + r0, k, v, g,
                                      n_kv, hd, scale, softcap, scratch, part_ml);
    }
    r0 += n;
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
  t->kv_store[static_cast<int>(KvDtype::kF16)] = Store16<false>;
  t->kv_store[static_cast<int>(KvDtype::kBF16)] = Store16<true>;
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
