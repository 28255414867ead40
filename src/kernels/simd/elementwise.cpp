// kernels/simd/elementwise.cpp: norms, softmax, gated activations, vector adds, RoPE. Compiled once
// per ISA.
#include "kernels/simd/common.h"

namespace paddock {
namespace PADDOCK_ISA_NS {
namespace {

void RmsNorm(float* out, const float* x, const float* w, int64_t n, float eps) {
  const float ss = Dot(x, x, n);
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  const VecF vi = Set1(inv);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) Store(out + i, Mul(Mul(Load(x + i), vi), Load(w + i)));
  for (; i < n; ++i) out[i] = x[i] * inv * w[i];
}

void LayerNorm(float* out, const float* x, const float* w, const float* b, int64_t n, float eps) {
  VecF acc = Zero();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) acc = Add(acc, Load(x + i));
  float sum = ReduceAdd(acc);
  for (; i < n; ++i) sum += x[i];
  const float mean = sum / static_cast<float>(n);
  const VecF vm = Set1(mean);
  acc = Zero();
  for (i = 0; i + kLanes <= n; i += kLanes) {
    const VecF d = Sub(Load(x + i), vm);
    acc = Fma(d, d, acc);
  }
  float var = ReduceAdd(acc);
  for (; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  const float inv = 1.0f / std::sqrt(var / static_cast<float>(n) + eps);
  const VecF vi = Set1(inv);
  for (i = 0; i + kLanes <= n; i += kLanes) {
    const VecF y = Mul(Mul(Sub(Load(x + i), vm), vi), Load(w + i));
    Store(out + i, b != nullptr ? Add(y, Load(b + i)) : y);
  }
  for (; i < n; ++i) out[i] = (x[i] - mean) * inv * w[i] + (b != nullptr ? b[i] : 0.0f);
}

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  float mx = x[0];
  int64_t i = 0;
  if (n >= kLanes) {
    VecF m = Load(x);
    for (i = kLanes; i + kLanes <= n; i += kLanes) m = Max(m, Load(x + i));
    mx = ReduceMax(m);
  }
  for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  float sum = 0;
  for (i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const VecF inv = Set1(1.0f / sum);
  for (i = 0; i + kLanes <= n; i += kLanes) Store(x + i, Mul(Load(x + i), inv));
  for (; i < n; ++i) x[i] *= 1.0f / sum;
}

// Runs f on whole vectors of g (and u, where given), the tail through a padded vector: every
// element is computed the same way wherever it falls (a token's result never depends on how
// many others share the call).
template <class F>
inline void ForVectors(float* g, const float* u, int64_t n, F f) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) Store(g + i, f(Load(g + i), u ? Load(u + i) : Set1(1.0f)));
  if (i < n) {
    alignas(64) float gb[kLanes] = {}, ub[kLanes] = {};
    const size_t rest = static_cast<size_t>(n - i);
    std::memcpy(gb, g + i, rest * sizeof(float));
    if (u != nullptr) std::memcpy(ub, u + i, rest * sizeof(float));
    Store(gb, f(Load(gb), u ? Load(ub) : Set1(1.0f)));
    std::memcpy(g + i, gb, rest * sizeof(float));
  }
}

// silu(g) * u = g / (1 + exp(-g)) * u, exp by the vector polynomial (ExpV).
void SiluMul(float* g, const float* u, int64_t n) {
  ForVectors(g, u, n,
             [](VecF x, VecF v) { return Mul(Div(x, Add(Set1(1.0f), ExpV(Sub(Zero(), x)))), v); });
}

// GELU (tanh form) as tanh(y) = 1 - 2 / (exp(2y) + 1), y clamped to +-15 (where tanh is 1 in
// float), in float.
void GeluMul(float* g, const float* u, int64_t n) {
  ForVectors(g, u, n, [](VecF x, VecF v) {
    const VecF x3 = Mul(Mul(x, x), x);
    const VecF y = Mul(Set1(0.7978845608f), Fma(Set1(0.044715f), x3, x));
    const VecF yc = Max(Min(y, Set1(15.0f)), Set1(-15.0f));
    const VecF t = Sub(Set1(1.0f), Div(Set1(2.0f), Add(ExpV(Add(yc, yc)), Set1(1.0f))));
    return Mul(Mul(Mul(Set1(0.5f), x), Add(Set1(1.0f), t)), v);
  });
}

// cap * tanh(x / cap) with tanh(y) = 1 - 2 / (exp(2y) + 1), y clamped to +-15 (tanh is +-1 in
// float there), exp by the vector polynomial.
void Softcap(float* x, int64_t n, float cap) {
  const VecF c = Set1(cap), two_over = Set1(2.0f / cap);
  ForVectors(x, nullptr, n, [&](VecF v, VecF) {
    const VecF y2 = Max(Min(Mul(v, two_over), Set1(30.0f)), Set1(-30.0f));
    return Mul(c, Sub(Set1(1.0f), Div(Set1(2.0f), Add(ExpV(y2), Set1(1.0f)))));
  });
}

void AddVec(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) Store(y + i, Add(Load(y + i), Load(x + i)));
  for (; i < n; ++i) y[i] += x[i];
}

void Rope(float* x, int n_heads, int head_dim, int rope_dim, const float* cos, const float* sin,
          bool half_split) {
  const int half = rope_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    if (half_split) {
      int i = 0;
      for (; i + kLanes <= half; i += kLanes) {
        const VecF v0 = Load(v + i), v1 = Load(v + half + i);
        const VecF c = Load(cos + i), s = Load(sin + i);
        Store(v + i, Sub(Mul(v0, c), Mul(v1, s)));
        Store(v + half + i, Fma(v0, s, Mul(v1, c)));
      }
      for (; i < half; ++i) {
        const float v0 = v[i], v1 = v[i + half];
        v[i] = v0 * cos[i] - v1 * sin[i];
        v[i + half] = v0 * sin[i] + v1 * cos[i];
      }
    } else {
      for (int i = 0; i < half; ++i) {
        const float v0 = v[2 * i], v1 = v[2 * i + 1];
        v[2 * i] = v0 * cos[i] - v1 * sin[i];
        v[2 * i + 1] = v0 * sin[i] + v1 * cos[i];
      }
    }
  }
}

// LoRA's rank vectors: four rows of x against each row of a at once (a's row is loaded once
// per four dot products).
void LoraDown(const float* a, int rank, int64_t in, float s, const float* x, int n, float* t,
              int t_stride) {
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    const float* x0 = x + static_cast<int64_t>(j) * in;
    for (int r = 0; r < rank; ++r) {
      const float* ar = a + r * in;
      VecF c0 = Zero(), c1 = Zero(), c2 = Zero(), c3 = Zero();
      int64_t i = 0;
      for (; i + kLanes <= in; i += kLanes) {
        const VecF av = Load(ar + i);
        c0 = Fma(av, Load(x0 + i), c0);
        c1 = Fma(av, Load(x0 + in + i), c1);
        c2 = Fma(av, Load(x0 + 2 * in + i), c2);
        c3 = Fma(av, Load(x0 + 3 * in + i), c3);
      }
      float d[4] = {ReduceAdd(c0), ReduceAdd(c1), ReduceAdd(c2), ReduceAdd(c3)};
      for (; i < in; ++i)
        for (int k = 0; k < 4; ++k) d[k] += ar[i] * x0[k * in + i];
      for (int k = 0; k < 4; ++k) t[(j + k) * t_stride + r] = d[k] * s;
    }
  }
  for (; j < n; ++j)
    for (int r = 0; r < rank; ++r)
      t[j * t_stride + r] = Dot(a + r * in, x + static_cast<int64_t>(j) * in, in) * s;
}

// LoRA's products added to one row's outputs: four vectors of outputs held over the whole rank.
void LoraUp(const float* bt, int rank, int64_t out, const float* t, float* y, int64_t o0,
            int64_t o1) {
  int64_t o = o0;
  for (; o + 4 * kLanes <= o1; o += 4 * kLanes) {
    VecF c0 = Load(y + o), c1 = Load(y + o + kLanes), c2 = Load(y + o + 2 * kLanes),
         c3 = Load(y + o + 3 * kLanes);
    for (int r = 0; r < rank; ++r) {
      const VecF tr = Set1(t[r]);
      const float* row = bt + r * out + o;
      c0 = Fma(tr, Load(row), c0);
      c1 = Fma(tr, Load(row + kLanes), c1);
      c2 = Fma(tr, Load(row + 2 * kLanes), c2);
      c3 = Fma(tr, Load(row + 3 * kLanes), c3);
    }
    Store(y + o, c0);
    Store(y + o + kLanes, c1);
    Store(y + o + 2 * kLanes, c2);
    Store(y + o + 3 * kLanes, c3);
  }
  for (; o + kLanes <= o1; o += kLanes) {
    VecF c = Load(y + o);
    for (int r = 0; r < rank; ++r) c = Fma(Set1(t[r]), Load(bt + r * out + o), c);
    Store(y + o, c);
  }
  for (; o < o1; ++o) {
    float acc = y[o];
    for (int r = 0; r < rank; ++r) acc += t[r] * bt[r * out + o];
    y[o] = acc;
  }
}

}  // namespace

void SetElementwiseKernels(KernelTable* t) {
  t->lora_down = LoraDown;
  t->lora_up = LoraUp;
  t->dot = Dot;
  t->rmsnorm = RmsNorm;
  t->softmax = Softmax;
  t->silu_mul = SiluMul;
  t->gelu_mul = GeluMul;
  t->softcap = Softcap;
  t->layernorm = LayerNorm;
  t->add = AddVec;
  t->axpy = Axpy;
  t->rope = Rope;
}

}  // namespace PADDOCK_ISA_NS
}  // namespace paddock
