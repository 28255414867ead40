// cpu/moe.cpp: the mixture-of-experts FFN of a step. The router picks each token's experts;
// the step's tokens are grouped per expert (gather), each used expert's gate/up/down weights are
// read once for all of its tokens (the batched integer GEMM, rows split over the threads so any
// routing keeps them equally busy, also in decode), and the outputs are summed back per token
// with their weights in the token's own order (scatter), so a token's result does not depend on
// its batch-mates. A shared expert (Qwen2 MoE) runs as a dense FFN beside them.
#include "cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/transformer.h"

namespace paddock {

void RouteToken(const float* logits, const ModelConfig& cfg, int* ids, float* weights) {
  const int n = cfg.n_experts, k = cfg.n_experts_used;
  float score[kMaxExperts];
  if (cfg.expert_gating == ExpertGating::kSoftmax) {
    float mx = logits[0];
    for (int e = 1; e < n; ++e) mx = std::max(mx, logits[e]);
    float sum = 0;
    for (int e = 0; e < n; ++e) sum += score[e] = std::exp(logits[e] - mx);
    for (int e = 0; e < n; ++e) score[e] /= sum;
  } else if (cfg.expert_gating == ExpertGating::kSigmoid) {
    for (int e = 0; e < n; ++e) score[e] = 1.0f / (1.0f + std::exp(-logits[e]));
  } else {
    for (int e = 0; e < n; ++e) score[e] = logits[e];
  }
  // Top k by selection (k is small): the best remaining each time, the lower id on ties.
  bool taken[kMaxExperts];
  std::fill(taken, taken + n, false);
  for (int s = 0; s < k; ++s) {
    int best = -1;
    for (int e = 0; e < n; ++e) {
      if (!taken[e] && (best < 0 || score[e] > score[best])) best = e;
    }
    taken[best] = true;
    ids[s] = best;
    weights[s] = score[best];
  }
  if (cfg.expert_gating == ExpertGating::kSoftmaxTopK) {  // softmax over the k chosen logits
    const float mx = weights[0];
    float sum = 0;
    for (int s = 0; s < k; ++s) sum += weights[s] = std::exp(weights[s] - mx);
    for (int s = 0; s < k; ++s) weights[s] /= sum;
  }
  if (cfg.expert_norm) {
    float sum = 0;
    for (int s = 0; s < k; ++s) sum += weights[s];
    if (sum > 0) {
      for (int s = 0; s < k; ++s) weights[s] /= sum;
    }
  }
  if (cfg.expert_scale != 1.0f) {
    for (int s = 0; s < k; ++s) weights[s] *= cfg.expert_scale;
  }
}

// xb (n, dim) -> xb = sum over each token's experts of weight * expert(xb) (+ the shared expert).
// Router logits, each token's experts, and the grouping: expert e's tokens take rows
// [offset[e], offset[e] + count[e]) of the gathered buffers, in token order. Returns how many
// experts are used (moe_active_).
int Transformer::MoeRoute(const LayerWeights& w, const ActQ8& xq, int n) {
  OpScope ps(this, ProfOp::kMoeRoute);
  const int E = cfg_.n_experts, K = cfg_.n_experts_used;
  int* sel = moe_sel_.data();
  int* count = moe_count_.data();
  int* offset = moe_offset_.data();
  Matmul(w.router, a_.xb, xq, n, a_.moe_logits);
  AddBias(a_.moe_logits, w.router_b, n, E);
  for (int j = 0; j < n; ++j)
    RouteToken(a_.moe_logits + j * E, cfg_, sel + j * K, moe_w_.data() + j * K);
  std::fill(count, count + E, 0);
  for (int i = 0; i < n * K; ++i) count[sel[i]]++;
  int n_active = 0;
  for (int e = 0, o = 0; e < E; ++e) {
    offset[e] = o;
    o += count[e];
    if (count[e] > 0) moe_active_[static_cast<size_t>(n_active++)] = e;
  }
  std::fill(count, count + E, 0);
  for (int i = 0; i < n * K; ++i)
    moe_row_[static_cast<size_t>(i)] = offset[sel[i]] + count[sel[i]]++;
  return n_active;
}

// Gather: each (token, expert) pair's input row into its expert's run of rows, as the int8
// blocks the integer kernels take (int8_in; returned) or floats (a_.moe_x).
ActQ8 Transformer::MoeGather(const ActQ8& xq, int n, bool int8_in) {
  OpScope ps(this, ProfOp::kMoeGather);
  const int K = cfg_.n_experts_used, dim = cfg_.dim;
  const size_t nb = static_cast<size_t>(dim) / kQK;
  ForTokens(n, [&](int j) {
    for (int s = 0; s < K; ++s) {
      const size_t r = static_cast<size_t>(moe_row_[static_cast<size_t>(j * K + s)]);
      const size_t src = static_cast<size_t>(j);
      if (!int8_in) {
        std::memcpy(a_.moe_x + r * dim, a_.xb + src * dim, sizeof(float) * dim);
      } else {
        std::memcpy(moe_qs_.get() + r * dim, xq.qs + src * dim, static_cast<size_t>(dim));
        std::memcpy(moe_d_.get() + r * nb, xq.d + src * nb, sizeof(float) * nb);
        std::memcpy(moe_ds_.get() + r * nb, xq.ds + src * nb, sizeof(float) * nb);
      }
    }
  });
  ActQ8 gq;
  if (int8_in) {
    gq.qs = moe_qs_.get();
    gq.d = moe_d_.get();
    gq.ds = moe_ds_.get();
  }
  return gq;
}

// The shared expert: a dense FFN over all n tokens (its output aside in a_.moe_shared), scaled
// per token by sigmoid(shared_gate . x) where the model gates it.
void Transformer::MoeShared(const LayerWeights& w, const ActQ8& xq, int n) {
  const int dim = cfg_.dim;
  Timed(ProfOp::kMatmulGateUp, [&] {
    const ActQ8 sq = xq.qs != nullptr || !TakesInt8(w.w_gate, dim)
                         ? xq
                         : QuantizeInput(a_.xb, n, dim, w.w_gate, false);
    MatmulGateUp(w.w_gate, w.w_up, a_.xb, sq, n);
  });
  const ActQ8 hq = QuantizeInput(a_.hb, n, cfg_.shared_ffn_dim, w.w_down, false);
  Timed(ProfOp::kMatmulDown, [&] {
    Matmul(w.w_down, a_.hb, hq, n, a_.moe_shared);
    if (w.shared_gate == nullptr) return;
    for (int j = 0; j < n; ++j) {
      const float g = k_->dot(w.shared_gate, a_.xb + static_cast<size_t>(j) * dim, dim);
      const float s = 1.0f / (1.0f + std::exp(-g));
      float* y = a_.moe_shared + static_cast<size_t>(j) * dim;
      for (int d = 0; d < dim; ++d) y[d] *= s;
    }
  });
}

// Gate/up + GLU of every used expert on its rows: each thread takes the same row slice of all
// of them, so any routing keeps the threads equally busy.
void Transformer::MoeGateUp(const LayerWeights& w, const ActQ8& gq, bool int8_in, int n_active) {
  const int dim = cfg_.dim;
  const int64_t F = cfg_.expert_ffn_dim;
  const ExpertWeights& ex0 = w.experts[0];
  Timed(ProfOp::kMatmulGateUp, [&] {
    const int64_t u = std::max(RowUnit(ex0.gate), RowUnit(ex0.up));
    pool_.ParallelFor(F / u, [&](int64_t b, int64_t e, int) {
      b *= u;
      e *= u;
      for (int a = 0; a < n_active; ++a) {
        const int x = moe_active_[static_cast<size_t>(a)];
        const ExpertWeights& ew = w.experts[static_cast<size_t>(x)];
        const int o = moe_offset_[static_cast<size_t>(x)], c = moe_count_[static_cast<size_t>(x)];
        const ActQ8 in = int8_in ? gq.Token(o, dim) : ActQ8{};
        const float* xf = a_.moe_x + static_cast<size_t>(o) * dim;
        float* g = a_.hb + static_cast<size_t>(o) * F;
        float* up = a_.hb2 + static_cast<size_t>(o) * F;
        MatmulRows(ew.gate, xf, in, c, g, b, e);
        MatmulRows(ew.up, xf, in, c, up, b, e);
        for (int r = 0; r < c; ++r) {
          if (ew.b_gate != nullptr) {  // biases (gpt-oss)
            k_->add(g + r * F + b, ew.b_gate + b, e - b);
            k_->add(up + r * F + b, ew.b_up + b, e - b);
          }
          glu_(g + r * F + b, up + r * F + b, e - b);
        }
      }
    });
  });
}

// Down projection of every used expert's rows, threads over output rows.
void Transformer::MoeDown(const LayerWeights& w, int n_active, int n) {
  const int dim = cfg_.dim;
  const int64_t F = cfg_.expert_ffn_dim;
  const ExpertWeights& ex0 = w.experts[0];
  const ActQ8 hq =
      QuantizeInput(a_.hb, n * cfg_.n_experts_used, static_cast<int>(F), ex0.down, false);
  Timed(ProfOp::kMatmulDown, [&] {
    const int64_t u = RowUnit(ex0.down);
    pool_.ParallelFor(dim / u, [&](int64_t b, int64_t e, int) {
      b *= u;
      e *= u;
      for (int a = 0; a < n_active; ++a) {
        const int x = moe_active_[static_cast<size_t>(a)];
        const int o = moe_offset_[static_cast<size_t>(x)], c = moe_count_[static_cast<size_t>(x)];
        const ActQ8 in = hq.qs != nullptr ? hq.Token(o, F) : ActQ8{};
        const ExpertWeights& ew = w.experts[static_cast<size_t>(x)];
        float* out = a_.moe_out + static_cast<size_t>(o) * dim;
        MatmulRows(ew.down, a_.hb + static_cast<size_t>(o) * F, in, c, out, b, e);
        if (ew.b_down != nullptr) {
          for (int r = 0; r < c; ++r) k_->add(out + r * dim + b, ew.b_down + b, e - b);
        }
      }
    });
  });
}

// Scatter: xb = each token's experts' outputs, weighted, summed in the token's own order (after
// the shared expert's, where there is one).
void Transformer::MoeScatter(int n, bool shared) {
  const int K = cfg_.n_experts_used, dim = cfg_.dim;
  Timed(ProfOp::kMoeScatter, [&] {
    ForTokens(n, [&](int j) {
      float* y = a_.xb + static_cast<size_t>(j) * dim;
      if (shared) {
        std::memcpy(y, a_.moe_shared + static_cast<size_t>(j) * dim, sizeof(float) * dim);
      } else {
        std::fill(y, y + dim, 0.0f);
      }
      for (int s = 0; s < K; ++s) {
        const size_t pair = static_cast<size_t>(j * K + s);
        k_->axpy(y, moe_w_[pair], a_.moe_out + static_cast<size_t>(moe_row_[pair]) * dim, dim);
      }
    });
  });
}

// xb = MoE(xb): route, gather, the shared expert, every used expert's gate/up and down, scatter.
void Transformer::MoeBlock(int l, const LayerWeights& w, const ActQ8& xq, int n) {
  (void)l;
  const int n_active = MoeRoute(w, xq, n);
  const ExpertWeights& ex0 = w.experts[0];
  // The FFN norm quantized the input for the experts' integer kernels where they take it.
  const bool int8_in =
      xq.qs != nullptr && TakesInt8(ex0.gate, cfg_.dim) && TakesInt8(ex0.up, cfg_.dim);
  const ActQ8 gq = MoeGather(xq, n, int8_in);
  const bool shared = static_cast<bool>(w.w_up);
  if (shared) MoeShared(w, xq, n);
  MoeGateUp(w, gq, int8_in, n_active);
  MoeDown(w, n_active, n);
  MoeScatter(n, shared);
}

// Gemma 4's two branches (llama.cpp's gemma4 graph): xb holds ffn_norm(x) for the dense FFN;
// the router reads rmsnorm(x) / sqrt(dim) * router_scale, the experts pre_norm_2(x); each
// expert's output is scaled by its own factor (folded into its weight: the FFN is linear in it).
void Transformer::MoeBranches(const LayerOp& op, int n) {
  const LayerWeights& w = *op.experts;
  const int dim = cfg_.dim, K = cfg_.n_experts_used;
  float* dense = a_.moe_shared;  // the dense branch's output
  {
    const ActQ8 xq = QuantizeInput(a_.xb, n, dim, w.w_gate, false);
    Timed(ProfOp::kMatmulGateUp, [&] { MatmulGateUp(w.w_gate, w.w_up, a_.xb, xq, n); });
    const ActQ8 hq = QuantizeInput(a_.hb, n, static_cast<int>(w.w_down.cols), w.w_down, false);
    Timed(ProfOp::kMatmulDown, [&] { Matmul(w.w_down, a_.hb, hq, n, dense); });
    for (int j = 0; j < n; ++j) {
      float* y = dense + static_cast<size_t>(j) * dim;
      k_->rmsnorm(y, y, w.post_norm_1, dim, op.norm.eps);
    }
  }
  // The router's input, then the experts' input, in xb.
  const float inv = 1.0f / std::sqrt(static_cast<float>(dim));
  for (int j = 0; j < n; ++j) {
    float* y = a_.xb + static_cast<size_t>(j) * dim;
    k_->rmsnorm(y, a_.x + static_cast<size_t>(j) * dim, w.router_scale, dim, op.norm.eps);
    for (int d = 0; d < dim; ++d) y[d] *= inv;
  }
  const int n_active = MoeRoute(w, QuantizeInput(a_.xb, n, dim, w.router, false), n);
  if (w.expert_scale != nullptr)
    for (int i = 0; i < n * K; ++i)
      moe_w_[static_cast<size_t>(i)] *= w.expert_scale[moe_sel_[static_cast<size_t>(i)]];
  for (int j = 0; j < n; ++j)
    k_->rmsnorm(a_.xb + static_cast<size_t>(j) * dim, a_.x + static_cast<size_t>(j) * dim,
                w.pre_norm_2, dim, op.norm.eps);
  const ExpertWeights& ex0 = w.experts[0];
  const ActQ8 xq = QuantizeInput(a_.xb, n, dim, ex0.gate, false);
  const bool int8_in = xq.qs != nullptr && TakesInt8(ex0.gate, dim) && TakesInt8(ex0.up, dim);
  const ActQ8 gq = MoeGather(xq, n, int8_in);
  MoeGateUp(w, gq, int8_in, n_active);
  MoeDown(w, n_active, n);
  MoeScatter(n, false);
  for (int j = 0; j < n; ++j) {
    float* y = a_.xb + static_cast<size_t>(j) * dim;
    k_->rmsnorm(y, y, w.post_norm_2, dim, op.norm.eps);
    k_->add(y, dense + static_cast<size_t>(j) * dim, dim);
  }
}

}  // namespace paddock
