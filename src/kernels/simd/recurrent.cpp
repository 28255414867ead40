// kernels/simd/recurrent.cpp: the recurrent layers' inner loops (the gated delta rule of
// Qwen3.5's Gated DeltaNet). Compiled once per ISA.
#include "kernels/simd/common.h"

namespace paddock {
namespace PADDOCK_ISA_NS {
namespace {

// One token of the gated delta rule on one head (KernelTable::delta_step): each row of the
// state is read and written once, decayed, its dot with k taken, updated, then dotted with q;
// four rows at a time, so four dependency chains run side by side.
void DeltaStep(float* m, const float* q, const float* k, const float* v, float decay, float beta,
               float scale, float* out, int d) {
  const VecF vd = Set1(decay);
  int j = 0;
  for (; j + 4 <= d; j += 4) {
    float* r[4];
    for (int u = 0; u < 4; ++u) r[u] = m + static_cast<size_t>(j + u) * d;
    VecF acc[4] = {Zero(), Zero(), Zero(), Zero()};
    int i = 0;
    for (; i + kLanes <= d; i += kLanes) {
      const VecF kv = Load(k + i);
      for (int u = 0; u < 4; ++u) {
        const VecF x = Mul(Load(r[u] + i), vd);
        Store(r[u] + i, x);
        acc[u] = Fma(x, kv, acc[u]);
      }
    }
    float s[4], delta[4];
    for (int u = 0; u < 4; ++u) s[u] = ReduceAdd(acc[u]);
    for (int t = i; t < d; ++t)
      for (int u = 0; u < 4; ++u) {
        r[u][t] *= decay;
        s[u] += r[u][t] * k[t];
      }
    VecF vdel[4];
    for (int u = 0; u < 4; ++u) {
      delta[u] = (v[j + u] - s[u]) * beta;
      vdel[u] = Set1(delta[u]);
      acc[u] = Zero();
    }
    for (i = 0; i + kLanes <= d; i += kLanes) {
      const VecF kv = Load(k + i), qv = Load(q + i);
      for (int u = 0; u < 4; ++u) {
        const VecF x = Fma(vdel[u], kv, Load(r[u] + i));
        Store(r[u] + i, x);
        acc[u] = Fma(x, qv, acc[u]);
      }
    }
    float o[4];
    for (int u = 0; u < 4; ++u) o[u] = ReduceAdd(acc[u]);
    for (int t = i; t < d; ++t)
      for (int u = 0; u < 4; ++u) {
        r[u][t] += delta[u] * k[t];
        o[u] += r[u][t] * q[t];
      }
    for (int u = 0; u < 4; ++u) out[j + u] = o[u] * scale;
  }
  for (; j < d; ++j) {  // the rows past the last four
    float* row = m + static_cast<size_t>(j) * d;
    float s = 0;
    for (int i = 0; i < d; ++i) {
      row[i] *= decay;
      s += row[i] * k[i];
    }
    const float delta = (v[j] - s) * beta;
    float o = 0;
    for (int i = 0; i < d; ++i) {
      row[i] += delta * k[i];
      o += row[i] * q[i];
    }
    out[j] = o * scale;
  }
}

// y += a * x over d floats.
inline void AxpyRow(float* y, float a, const float* x, int d) {
  const VecF va = Set1(a);
  int i = 0;
  for (; i + kLanes <= d; i += kLanes) Store(y + i, Fma(va, Load(x + i), Load(y + i)));
  for (; i < d; ++i) y[i] += a * x[i];
}

// dst += sum_s c[s] * rows_s over d floats (rows ld apart): dst kept in registers, eight
// vectors (independent chains) at a time.
void Combine(float* dst, const float* c, int count, const float* rows, size_t ld, int d) {
  int i = 0;
  for (; i + 8 * kLanes <= d; i += 8 * kLanes) {
    VecF r[8];
    for (int u = 0; u < 8; ++u) r[u] = Load(dst + i + u * kLanes);
    for (int s = 0; s < count; ++s) {
      const VecF cs = Set1(c[s]);
      const float* row = rows + s * ld + i;
      for (int u = 0; u < 8; ++u) r[u] = Fma(cs, Load(row + u * kLanes), r[u]);
    }
    for (int u = 0; u < 8; ++u) Store(dst + i + u * kLanes, r[u]);
  }
  for (; i + kLanes <= d; i += kLanes) {
    VecF r = Load(dst + i);
    for (int s = 0; s < count; ++s) r = Fma(Set1(c[s]), Load(rows + s * ld + i), r);
    Store(dst + i, r);
  }
  for (; i < d; ++i) {
    float r = dst[i];
    for (int s = 0; s < count; ++s) r += c[s] * rows[s * ld + i];
    dst[i] = r;
  }
}

// dst (cols x rows, ld_dst) = src (rows x cols, ld_src) transposed, in 16 x 16 blocks.
void Transpose(float* dst, size_t ld_dst, const float* src, size_t ld_src, int rows, int cols) {
  for (int r0 = 0; r0 < rows; r0 += 16)
    for (int c0 = 0; c0 < cols; c0 += 16)
      for (int r = r0; r < std::min(rows, r0 + 16); ++r)
        for (int c = c0; c < std::min(cols, c0 + 16); ++c)
          dst[c * ld_dst + r] = src[r * ld_src + c];
}

// dot(a_r, b_c) for 4 rows a (lda apart) by 4 rows b (ldb apart) of d floats: out[r][c].
inline void Dots4x4(const float* a, int lda, int na, const float* b, int ldb, int nb, int d,
                    float out[4][4]) {
  VecF acc[4][4];
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) acc[r][c] = Zero();
  int i = 0;
  for (; i + kLanes <= d; i += kLanes) {
    VecF bv[4];
    for (int c = 0; c < nb; ++c) bv[c] = Load(b + static_cast<size_t>(c) * ldb + i);
    for (int r = 0; r < na; ++r) {
      const VecF av = Load(a + static_cast<size_t>(r) * lda + i);
      for (int c = 0; c < nb; ++c) acc[r][c] = Fma(av, bv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < na; ++r)
    for (int c = 0; c < nb; ++c) {
      float sum = ReduceAdd(acc[r][c]);
      for (int t = i; t < d; ++t)
        sum += a[static_cast<size_t>(r) * lda + t] * b[static_cast<size_t>(c) * ldb + t];
      out[r][c] = sum;
    }
}

// The chunked form (KernelTable::delta_chunk, the reference's math): the chunk's key-key and
// query-key products in 4 x 4 tiles; the state's products with the keys and queries on the
// state transposed into scratch (4 tokens x 2 vectors of outputs per pass over its columns:
// no horizontal sums); the triangular solve and the outputs as row updates; the new state a
// row at a time in registers.
void DeltaChunk(float* m, const float* q, const float* k, int ld_qk, const float* v, int ld_v,
                const float* g, const float* beta, float scale, float* out, int ld_o, int n, int d,
                float* scratch) {
  constexpr int C = kDeltaChunk;
  float* G = scratch;                          // (C) cumulative log decay
  float* A = G + C;                            // (C, C) beta_t e^{G_t - G_s} k_t.k_s, s < t
  float* QK = A + C * C;                       // (C, C) e^{G_t - G_s} q_t.k_s, s <= t
  float* D = QK + C * C;                       // (C, d) the deltas
  float* O = D + C * static_cast<size_t>(d);   // (C, d) e^{G_t} M_0 q_t, then the outputs
  float* MT = O + C * static_cast<size_t>(d);  // (d, d) the state transposed
  for (int t = 0; t < C; ++t) G[t] = t < n ? (t > 0 ? G[t - 1] : 0.0f) + g[t] : G[n - 1];
  for (int t0 = 0; t0 < n; t0 += 4) {
    const int nt = std::min(4, n - t0);
    for (int s0 = 0; s0 <= t0; s0 += 4) {
      const int ns = std::min(4, n - s0);
      float kk[4][4], qk[4][4];
      const float* ks = k + static_cast<size_t>(s0) * ld_qk;
      Dots4x4(k + static_cast<size_t>(t0) * ld_qk, ld_qk, nt, ks, ld_qk, ns, d, kk);
      Dots4x4(q + static_cast<size_t>(t0) * ld_qk, ld_qk, nt, ks, ld_qk, ns, d, qk);
      for (int r = 0; r < nt; ++r)
        for (int c = 0; c < ns; ++c) {
          A[(t0 + r) * C + s0 + c] = kk[r][c];
          QK[(t0 + r) * C + s0 + c] = qk[r][c];
        }
    }
  }
  // The decays e^{G_t - G_s} (at most 1 for s <= t), a vector of s at a time.
  for (int t = 0; t < n; ++t) {
    const VecF gt = Set1(G[t]), bt = Set1(beta[t]);
    for (int s = 0; s <= t; s += kLanes) {
      const VecF e = ExpV(Sub(gt, Load(G + s)));
      Store(A + t * C + s, Mul(bt, Mul(e, Load(A + t * C + s))));
      Store(QK + t * C + s, Mul(e, Load(QK + t * C + s)));
    }
  }
  float* EG = MT + static_cast<size_t>(d) * d;  // (C) e^{G_t}
  for (int t = 0; t < n; ++t) EG[t] = std::exp(G[t]);
  Transpose(MT, static_cast<size_t>(d), m, static_cast<size_t>(d), d, d);
  int jv = 0;
  for (; jv + 2 * kLanes <= d; jv += 2 * kLanes) {
    for (int t0 = 0; t0 < n; t0 += 4) {
      const int u_n = std::min(4, n - t0);
      VecF ak[4][2], aq[4][2];
      for (int u = 0; u < 4; ++u) ak[u][0] = ak[u][1] = aq[u][0] = aq[u][1] = Zero();
      for (int i = 0; i < d; ++i) {
        const float* col = MT + static_cast<size_t>(i) * d + jv;
        const VecF c0 = Load(col), c1 = Load(col + kLanes);
        for (int u = 0; u < u_n; ++u) {
          const size_t r = static_cast<size_t>(t0 + u) * ld_qk + i;
          const VecF kb = Set1(k[r]), qb = Set1(q[r]);
          ak[u][0] = Fma(kb, c0, ak[u][0]);
          ak[u][1] = Fma(kb, c1, ak[u][1]);
          aq[u][0] = Fma(qb, c0, aq[u][0]);
          aq[u][1] = Fma(qb, c1, aq[u][1]);
        }
      }
      for (int u = 0; u < u_n; ++u) {
        const int t = t0 + u;
        const VecF eg = Set1(EG[t]), bt = Set1(beta[t]);
        for (int h = 0; h < 2; ++h) {
          const int j = jv + h * kLanes;
          const VecF vt = Load(v + static_cast<size_t>(t) * ld_v + j);
          Store(D + static_cast<size_t>(t) * d + j, Mul(bt, Sub(vt, Mul(eg, ak[u][h]))));
          Store(O + static_cast<size_t>(t) * d + j, Mul(eg, aq[u][h]));
        }
      }
    }
  }
  for (; jv < d; ++jv) {  // (the outputs past the last pair of whole vectors)
    const float* row = m + static_cast<size_t>(jv) * d;
    for (int t = 0; t < n; ++t) {
      const float eg = std::exp(G[t]);
      D[static_cast<size_t>(t) * d + jv] =
          beta[t] * (v[static_cast<size_t>(t) * ld_v + jv] -
                     eg * Dot(row, k + static_cast<size_t>(t) * ld_qk, d));
      O[static_cast<size_t>(t) * d + jv] = eg * Dot(row, q + static_cast<size_t>(t) * ld_qk, d);
    }
  }
  for (int t = 1; t < n; ++t) {  // delta_t -= sum_{s<t} A[t][s] delta_s
    for (int s = 0; s < t; ++s) A[t * C + s] = -A[t * C + s];
    Combine(D + static_cast<size_t>(t) * d, A + t * C, t, D, static_cast<size_t>(d), d);
  }
  for (int t = 0; t < n; ++t) {
    float* ot = O + static_cast<size_t>(t) * d;
    Combine(ot, QK + t * C, t + 1, D, static_cast<size_t>(d), d);
    float* dst = out + static_cast<size_t>(t) * ld_o;
    for (int j = 0; j < d; ++j) dst[j] = ot[j] * scale;
  }
  // The new state, row j: e^{G_n} m[j] + sum_s (e^{G_n - G_s} D[s][j]) k_s, in registers.
  const float last = std::exp(G[n - 1]);
  for (int s = 0; s < n; ++s) G[s] = std::exp(G[n - 1] - G[s]);  // (G now the weights)
  for (int s = 0; s < n; ++s)  // (D's rows now the update's coefficients)
    for (int j = 0; j < d; ++j) D[static_cast<size_t>(s) * d + j] *= G[s];
  const VecF vl = Set1(last);
  int j = 0;
  for (; j + 2 <= d; j += 2) {  // two rows, four vectors each: eight chains
    float* ra = m + static_cast<size_t>(j) * d;
    float* rb = ra + d;
    int i = 0;
    for (; i + 4 * kLanes <= d; i += 4 * kLanes) {
      VecF a[4], b[4];
      for (int u = 0; u < 4; ++u) {
        a[u] = Mul(Load(ra + i + u * kLanes), vl);
        b[u] = Mul(Load(rb + i + u * kLanes), vl);
      }
      for (int s = 0; s < n; ++s) {
        const VecF ca = Set1(D[static_cast<size_t>(s) * d + j]);
        const VecF cb = Set1(D[static_cast<size_t>(s) * d + j + 1]);
        const float* ks = k + static_cast<size_t>(s) * ld_qk + i;
        for (int u = 0; u < 4; ++u) {
          const VecF kv = Load(ks + u * kLanes);
          a[u] = Fma(ca, kv, a[u]);
          b[u] = Fma(cb, kv, b[u]);
        }
      }
      for (int u = 0; u < 4; ++u) {
        Store(ra + i + u * kLanes, a[u]);
        Store(rb + i + u * kLanes, b[u]);
      }
    }
    for (; i < d; ++i) {
      for (float* row : {ra, rb}) {
        const int jj = row == ra ? j : j + 1;
        float acc = row[i] * last;
        for (int s = 0; s < n; ++s)
          acc += D[static_cast<size_t>(s) * d + jj] * k[static_cast<size_t>(s) * ld_qk + i];
        row[i] = acc;
      }
    }
  }
  for (; j < d; ++j) {
    float* row = m + static_cast<size_t>(j) * d;
    for (int i = 0; i < d; ++i) {
      float acc = row[i] * last;
      for (int s = 0; s < n; ++s)
        acc += D[static_cast<size_t>(s) * d + j] * k[static_cast<size_t>(s) * ld_qk + i];
      row[i] = acc;
    }
  }
}

// One token of a causal convolution, a vector of channels at a time.
void ConvToken(float* y, const float* const* in, const float* taps, int64_t ld_taps, int K,
               int64_t ch, bool silu) {
  int64_t c = 0;
  for (; c + kLanes <= ch; c += kLanes) {
    VecF acc = Zero();
    for (int k = 0; k < K; ++k) acc = Fma(Load(in[k] + c), Load(taps + k * ld_taps + c), acc);
    if (silu) acc = Div(acc, Add(Set1(1.0f), ExpV(Sub(Zero(), acc))));
    Store(y + c, acc);
  }
  for (; c < ch; ++c) {
    float acc = 0;
    for (int k = 0; k < K; ++k) acc += in[k][c] * taps[k * ld_taps + c];
    y[c] = silu ? acc / (1.0f + std::exp(-acc)) : acc;
  }
}

}  // namespace

void SetRecurrentKernels(KernelTable* t) {
  t->conv_token = ConvToken;
  t->delta_step = DeltaStep;
  t->delta_chunk = DeltaChunk;
}

}  // namespace PADDOCK_ISA_NS
}  // namespace paddock
