// cpu/encoder.cpp: what encoders add to the CPU backend's step: the post-norm op
// (OpKind::kAddNorm) and pooled rows (StepOutput::kPooled: one row per input, its tokens'
// final states averaged, or its first or last token's).
#include <cmath>
#include <cstring>

#include "base/strings.h"
#include "cpu/transformer.h"
#include "model/step.h"

namespace paddock {

// x = norm(x [+ xb]) (no weight: x as is), xb = x, quantized for the weights that read it.
ActQ8 Transformer::AddNorm(const LayerOp& op, const CpuOp& plan, int n) {
  pending_residual_ = false;
  const int dim = cfg_.dim;
  const size_t row = sizeof(float) * static_cast<size_t>(dim);
  Timed(ProfOp::kNorm, [&] {
    ForTokens(n, [&](int j) {
      float* x = a_.x + static_cast<size_t>(j) * dim;
      float* xb = a_.xb + static_cast<size_t>(j) * dim;
      if (op.residual) k_->add(x, xb, dim);
      if (op.norm.w != nullptr) {
        Norm(xb, x, op.norm);
        std::memcpy(x, xb, row);
      } else {
        std::memcpy(xb, x, row);
      }
    });
  });
  if (plan.reads[0] == nullptr) return {};
  const bool int8_too = !HasBf16Gemm(plan.reads[1]) || !HasBf16Gemm(plan.reads[2]);
  return QuantizeInput(a_.xb, n, dim, *plan.reads[0], true, int8_too);
}

const float* Transformer::FinalRow(int j, float* tmp) const {
  const float* x = a_.x + static_cast<size_t>(j) * cfg_.dim;
  if (cfg_.encoder) return x;  // post-norm: the last layer's output is normalized
  Norm(tmp, x, output_norm_);
  return tmp;
}

void Transformer::ForwardPooled(const BatchItem* items, int n_items, const float** rows) {
  pooled_out_ = true;
  struct Reset {
    bool* f;
    ~Reset() { *f = false; }
  } reset{&pooled_out_};
  int n_rows = 0;
  const int n = PlanStep(items, n_items, &n_rows);
  if (n_rows != n_items) Fail("Forward: a pooled item asks for %d rows", n_rows);
  const int carried = RunLayers(items, n_items, n, n_rows, nullptr);
  if (pending_residual_) AddResidual(carried);
  const int dim = cfg_.dim;
  OpScope ps(this, ProfOp::kLogits);
  float* tmp = a_.hb;  // free after the last FFN
  for (int oi = 0, j0 = 0; oi < n_items; ++oi) {
    const int i = plan_.order[static_cast<size_t>(oi)];
    const BatchItem& it = items[i];
    pool_sum_.Start(it.pooling, it.n, dim);
    for (int t = 0; t < it.n; ++t)
      if (pool_sum_.Takes(t)) pool_sum_.Add(t, FinalRow(j0 + t, tmp));
    float* out = a_.xb + static_cast<size_t>(oi) * dim;  // (rows below j0 + it.n: read already)
    pool_sum_.Result(out);
    rows[i] = out;
    j0 += it.n;
  }
}

}  // namespace paddock
