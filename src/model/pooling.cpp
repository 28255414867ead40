// model/pooling.cpp: what encoders add to the CPU backend's step: the post-norm op
// (OpKind::kAddNorm) and pooled rows (StepOutput::kPooled: one row per input, its tokens'
// final states averaged, or its first or last token's).
#include <cmath>
#include <cstring>

#include "base/strings.h"
#include "model/transformer.h"

namespace paddock {

// x = norm(x [+ xb]) (no weight: x as is), xb = x, quantized for the weights that read it.
ActQ8 Transformer::AddNorm(const LayerOp& op, int n) {
  pending_residual_ = false;
  const int dim = cfg_.dim;
  const size_t row = sizeof(float) * static_cast<size_t>(dim);
  Timed(ProfOp::kNorm, [&] {
    ForTokens(n, [&](int j) {
      float* x = a_.x + static_cast<size_t>(j) * dim;
      float* xb = a_.xb + static_cast<size_t>(j) * dim;
      if (op.residual) k_->add(x, xb, dim);
      if (op.w != nullptr) {
        Norm(xb, x, op.w, op.b);
        std::memcpy(x, xb, row);
      } else {
        std::memcpy(xb, x, row);
      }
    });
  });
  if (op.next == nullptr) return {};
  const bool int8_too = !HasBf16Gemm(op.also) || !HasBf16Gemm(op.also2);
  return QuantizeInput(a_.xb, n, dim, *op.next, true, int8_too);
}

const float* Transformer::FinalRow(int j, float* tmp) const {
  const float* x = a_.x + static_cast<size_t>(j) * cfg_.dim;
  if (cfg_.encoder) return x;  // post-norm: the last layer's output is normalized
  Norm(tmp, x, model_.weights.output_norm, model_.weights.output_norm_b);
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
    float* out = a_.xb + static_cast<size_t>(oi) * dim;
    if (it.pooling == 1) {  // mean
      std::memset(out, 0, sizeof(float) * static_cast<size_t>(dim));
      for (int t = 0; t < it.n; ++t) k_->add(out, FinalRow(j0 + t, tmp), dim);
      const float inv = 1.0f / static_cast<float>(it.n);
      for (int d = 0; d < dim; ++d) out[d] *= inv;
    } else {
      const float* h = FinalRow(it.pooling == 2 ? j0 : j0 + it.n - 1, tmp);
      std::memmove(out, h, sizeof(float) * static_cast<size_t>(dim));
    }
    rows[i] = out;
    j0 += it.n;
  }
}

float RankScore(const ModelWeights& w, int dim, const float* h) {
  const size_t d = static_cast<size_t>(dim);
  double score = 0;
  for (size_t r = 0; r < d; ++r) {
    double y = w.cls_b[r];
    const float* row = w.cls + r * d;
    for (size_t c = 0; c < d; ++c) y += static_cast<double>(row[c]) * h[c];
    y = std::tanh(y);
    if (w.cls_out == nullptr) return static_cast<float>(y);  // no output layer: the first value
    score += static_cast<double>(w.cls_out[r]) * y;
  }
  return static_cast<float>(score + w.cls_out_b[0]);
}

}  // namespace paddock
