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

// A chunk's operands and scratch (KernelTable::delta_chunk's arguments, laid out once).
struct Chunk {
  const float *q, *k, *v, *beta;
  size_t ld_qk, ld_v;
  int n, d;
  float* G;   // (C) cumulative log decay
  float* A;   // (C, C) beta_t e^{G_t - G_s} k_t.k_s, s < t
  float* QK;  // (C, C) e^{G_t - G_s} q_t.k_s, s <= t
  float* D;   // (C, d) the deltas
  float* O;   // (C, d) e^{G_t} M_0 q_t, then the outputs
  float* MT;  // (d, d) the state transposed
  float* EG;  // (C) e^{G_t}
  const float* K(int t) const { return k + static_cast<size_t>(t) * ld_qk; }
  const float* Q(int t) const { return q + static_cast<size_t>(t) * ld_qk; }
};

// The chunk's key-key and query-key products in 4 x 4 tiles, then their decays e^{G_t - G_s}
// (at most 1 for s <= t) a vector of s at a time.
void ChunkProducts(const Chunk& c) {
  constexpr int C = kDeltaChunk;
  for (int t0 = 0; t0 < c.n; t0 += 4) {
    const int nt = std::min(4, c.n - t0);
    for (int s0 = 0; s0 <= t0; s0 += 4) {
      const int ns = std::min(4, c.n - s0);
      float kk[4][4], qk[4][4];
      const int ld = static_cast<int>(c.ld_qk);
      Dots4x4(c.K(t0), ld, nt, c.K(s0), ld, ns, c.d, kk);
      Dots4x4(c.Q(t0), ld, nt, c.K(s0), ld, ns, c.d, qk);
      for (int r = 0; r < nt; ++r)
        for (int col = 0; col < ns; ++col) {
          c.A[(t0 + r) * C + s0 + col] = kk[r][col];
          c.QK[(t0 + r) * C + s0 + col] = qk[r][col];
        }
    }
  }
  for (int t = 0; t < c.n; ++t) {
    const VecF gt = Set1(c.G[t]), bt = Set1(c.beta[t]);
    for (int s = 0; s <= t; s += kLanes) {
      const VecF e = ExpV(Sub(gt, Load(c.G + s)));
      Store(c.A + t * C + s, Mul(bt, Mul(e, Load(c.A + t * C + s))));
      Store(c.QK + t * C + s, Mul(e, Load(c.QK + t * C + s)));
    }
  }
}

// D[t] = beta_t (v_t - e^{G_t} M k_t), O[t] = e^{G_t} M q_t over the transposed state: 4 tokens
// x 2 vectors of outputs j per pass over its columns i (no horizontal sums).
void StateProducts(const Chunk& c, const float* m) {
  const int d = c.d;
  int jv = 0;
  for (; jv + 2 * kLanes <= d; jv += 2 * kLanes) {
    for (int t0 = 0; t0 < c.n; t0 += 4) {
      const int u_n = std::min(4, c.n - t0);
      VecF ak[4][2], aq[4][2];
      for (int u = 0; u < 4; ++u) ak[u][0] = ak[u][1] = aq[u][0] = aq[u][1] = Zero();
      for (int i = 0; i < d; ++i) {
        const float* col = c.MT + static_cast<size_t>(i) * d + jv;
        const VecF c0 = Load(col), c1 = Load(col + kLanes);
        for (int u = 0; u < u_n; ++u) {
          const VecF kb = Set1(c.K(t0 + u)[i]), qb = Set1(c.Q(t0 + u)[i]);
          ak[u][0] = Fma(kb, c0, ak[u][0]);
          ak[u][1] = Fma(kb, c1, ak[u][1]);
          aq[u][0] = Fma(qb, c0, aq[u][0]);
          aq[u][1] = Fma(qb, c1, aq[u][1]);
        }
      }
      for (int u = 0; u < u_n; ++u) {
        const int t = t0 + u;
        const VecF eg = Set1(c.EG[t]), bt = Set1(c.beta[t]);
        for (int h = 0; h < 2; ++h) {
          const int j = jv + h * kLanes;
          const VecF vt = Load(c.v + static_cast<size_t>(t) * c.ld_v + j);
          Store(c.D + static_cast<size_t>(t) * d + j, Mul(bt, Sub(vt, Mul(eg, ak[u][h]))));
          Store(c.O + static_cast<size_t>(t) * d + j, Mul(eg, aq[u][h]));
        }
      }
    }
  }
  for (; jv < d; ++jv) {  // (the outputs past the last pair of whole vectors)
    const float* row = m + static_cast<size_t>(jv) * d;
    for (int t = 0; t < c.n; ++t) {
      c.D[static_cast<size_t>(t) * d + jv] =
          c.beta[t] * (c.v[static_cast<size_t>(t) * c.ld_v + jv] - c.EG[t] * Dot(row, c.K(t), d));
      c.O[static_cast<size_t>(t) * d + jv] = c.EG[t] * Dot(row, c.Q(t), d);
    }
  }
}

// The new state, row j: e^{G_n} m[j] + sum_s w_s[j] k_s (D's rows already weighted by
// e^{G_n - G_s}), two rows of four vectors in registers at a time (eight chains).
void StateUpdate(const Chunk& c, float* m, float last) {
  const int d = c.d;
  const VecF vl = Set1(last);
  auto scalar = [&](float* row, int j, int i) {
    float acc = row[i] * last;
    for (int s = 0; s < c.n; ++s) acc += c.D[static_cast<size_t>(s) * d + j] * c.K(s)[i];
    row[i] = acc;
  };
  int j = 0;
  for (; j + 2 <= d; j += 2) {
    float* ra = m + static_cast<size_t>(j) * d;
    float* rb = ra + d;
    int i = 0;
    for (; i + 4 * kLanes <= d; i += 4 * kLanes) {
      VecF a[4], b[4];
      for (int u = 0; u < 4; ++u) {
        a[u] = Mul(Load(ra + i + u * kLanes), vl);
        b[u] = Mul(Load(rb + i + u * kLanes), vl);
      }
      for (int s = 0; s < c.n; ++s) {
        const VecF ca = Set1(c.D[static_cast<size_t>(s) * d + j]);
        const VecF cb = Set1(c.D[static_cast<size_t>(s) * d + j + 1]);
        const float* ks = c.K(s) + i;
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
      scalar(ra, j, i);
      scalar(rb, j + 1, i);
    }
  }
  for (; j < d; ++j)
    for (int i = 0; i < d; ++i) scalar(m + static_cast<size_t>(j) * d, j, i);
}

// The chunked form (KernelTable::delta_chunk, the reference's math): the chunk's products, the
// state's with its keys and queries, the triangular solve for the deltas and the outputs as
// row updates (Combine: no horizontal sums), the new state.
void DeltaChunk(float* m, const float* q, const float* k, int ld_qk, const float* v, int ld_v,
                const float* g, const float* beta, float scale, float* out, int ld_o, int n, int d,
                float* scratch) {
  constexpr int C = kDeltaChunk;
  const size_t cd = C * static_cast<size_t>(d);
  Chunk c{q, k, v, beta, static_cast<size_t>(ld_qk), static_cast<size_t>(ld_v), n, d};
  c.G = scratch;
  c.A = c.G + C;
  c.QK = c.A + C * C;
  c.D = c.QK + C * C;
  c.O = c.D + cd;
  c.MT = c.O + cd;
  c.EG = c.MT + static_cast<size_t>(d) * d;
  for (int t = 0; t < C; ++t) c.G[t] = t < n ? (t > 0 ? c.G[t - 1] : 0.0f) + g[t] : c.G[n - 1];
  ChunkProducts(c);
  for (int t = 0; t < n; ++t) c.EG[t] = std::exp(c.G[t]);
  Transpose(c.MT, static_cast<size_t>(d), m, static_cast<size_t>(d), d, d);
  StateProducts(c, m);
  for (int t = 1; t < n; ++t) {  // delta_t -= sum_{s<t} A[t][s] delta_s
    for (int s = 0; s < t; ++s) c.A[t * C + s] = -c.A[t * C + s];
    Combine(c.D + static_cast<size_t>(t) * d, c.A + t * C, t, c.D, static_cast<size_t>(d), d);
  }
  for (int t = 0; t < n; ++t) {
    float* ot = c.O + static_cast<size_t>(t) * d;
    Combine(ot, c.QK + t * C, t + 1, c.D, static_cast<size_t>(d), d);
    float* dst = out + static_cast<size_t>(t) * ld_o;
    for (int j = 0; j < d; ++j) dst[j] = ot[j] * scale;
  }
  for (int s = 0; s < n; ++s) {  // D's rows weighted for the update: e^{G_n - G_s}
    const float w = std::exp(c.G[n - 1] - c.G[s]);
    for (int j = 0; j < d; ++j) c.D[static_cast<size_t>(s) * d + j] *= w;
  }
  StateUpdate(c, m, std::exp(c.G[n - 1]));
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
