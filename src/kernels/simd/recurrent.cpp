// kernels/simd/recurrent.cpp: the recurrent layers' inner loops (the gated delta rule of
// Qwen3.5's Gated DeltaNet). Compiled once per ISA.
#include "kernels/simd/common.h"

namespace paddock {
namespace PADDOCK_ISA_NS {
namespace {

// One token of the gated delta rule on one head (KernelTable::delta_step): each row of the
// state is read and written once, decayed, its dot with k taken, updated, then dotted with q.
void DeltaStep(float* m, const float* q, const float* k, const float* v, float decay, float beta,
               float scale, float* out, int d) {
  const VecF vd = Set1(decay);
  for (int j = 0; j < d; ++j) {
    float* row = m + static_cast<size_t>(j) * d;
    int i = 0;
    VecF acc = Zero();
    for (; i + kLanes <= d; i += kLanes) {
      const VecF r = Mul(Load(row + i), vd);
      Store(row + i, r);
      acc = Fma(r, Load(k + i), acc);
    }
    float s = ReduceAdd(acc);
    for (; i < d; ++i) {
      row[i] *= decay;
      s += row[i] * k[i];
    }
    const float delta = (v[j] - s) * beta;
    const VecF vdelta = Set1(delta);
    acc = Zero();
    for (i = 0; i + kLanes <= d; i += kLanes) {
      const VecF r = Fma(vdelta, Load(k + i), Load(row + i));
      Store(row + i, r);
      acc = Fma(r, Load(q + i), acc);
    }
    float o = ReduceAdd(acc);
    for (; i < d; ++i) {
      row[i] += delta * k[i];
      o += row[i] * q[i];
    }
    out[j] = o * scale;
  }
}

}  // namespace

void SetRecurrentKernels(KernelTable* t) {
  t->delta_step = DeltaStep;
}

}  // namespace PADDOCK_ISA_NS
}  // namespace paddock
