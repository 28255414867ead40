// cpu/recurrent.cpp: the recurrent layers of hybrid models on the CPU: LFM2's gated short
// convolution and Qwen3.5's Gated DeltaNet (as llama.cpp computes them), and Qwen3.5's
// attention output gate. A sequence's state lives in its KV view (KvView::State): the
// convolution's window of the last conv_kernel - 1 inputs, then the DeltaNet's per-head
// delta-rule states; a step reads it, runs the sequence's tokens in order and leaves it after
// its last token. The tokens of one sequence are consecutive in a step (StepPlan).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/transformer.h"

namespace paddock {

namespace {

float Sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}
float Silu(float x) {
  return x / (1.0f + std::exp(-x));
}
float Softplus(float x) {
  return x > 20.0f ? x : std::log1p(std::exp(x));
}  // (as ggml)

// x / max(|x|, eps) (ggml_l2_norm)
void L2Norm(float* x, int n, float eps) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = 1.0f / std::fmax(static_cast<float>(std::sqrt(ss)), eps);
  for (int i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace

// Each channel c: y[t] = sum_k win[t + k] * taps[c][k] over the window (the state's K - 1
// past inputs, oldest first) followed by this step's inputs; the state keeps the last K - 1.
// Channels are independent: threads take ranges of them, each running its sequences' tokens
// in order.
void Transformer::CausalConv(int l, const float* taps, const float* x, int ld_x, int ch, int n,
                             float* y, int ld_y, bool silu) {
  const int K = cfg_.conv_kernel, W = K - 1;
  const int runs = SequenceRuns(n);
  pool_.ParallelFor((ch + 15) / 16, [&](int64_t cb, int64_t ce, int) {
    const int c0 = static_cast<int>(cb) * 16, c1 = std::min(ch, static_cast<int>(ce) * 16);
    for (int r = 0; r < runs; ++r) {
      const int j0 = run_start_[static_cast<size_t>(r)],
                j1 = run_start_[static_cast<size_t>(r) + 1];
      float* win = plan_.view[static_cast<size_t>(j0)]->State(l);  // (W, ch): oldest row first
      for (int c = c0; c < c1; ++c) {
        const float* w = taps + static_cast<size_t>(c) * K;
        for (int j = j0; j < j1; ++j) {
          const float in = x[static_cast<size_t>(j) * ld_x + c];
          float acc = in * w[W];
          for (int k = 0; k < W; ++k) acc += win[static_cast<size_t>(k) * ch + c] * w[k];
          for (int k = 0; k + 1 < W; ++k)
            win[static_cast<size_t>(k) * ch + c] = win[static_cast<size_t>(k + 1) * ch + c];
          if (W > 0) win[static_cast<size_t>(W - 1) * ch + c] = in;
          y[static_cast<size_t>(j) * ld_y + c] = silu ? Silu(acc) : acc;
        }
      }
    }
  });
}

// The step's runs of tokens of one sequence: run r is tokens [run_start_[r], run_start_[r+1]).
int Transformer::SequenceRuns(int n) {
  int runs = 0;
  for (int j = 0; j < n; ++j)
    if (j == 0 || plan_.view[static_cast<size_t>(j)] != plan_.view[static_cast<size_t>(j - 1)])
      run_start_[static_cast<size_t>(runs++)] = j;
  run_start_[static_cast<size_t>(runs)] = n;
  return runs;
}

// LFM2: [b | c | x] = xb Win; y = c * conv(b * x); xb = y Wout.
void Transformer::ShortConv(const LayerOp& op, int n) {
  const int dim = cfg_.dim;
  Matmul(*op.mat[0], a_.xb, xq_, n, a_.rec_in);
  for (int j = 0; j < n; ++j) {
    const float* bcx = a_.rec_in + static_cast<size_t>(j) * 3 * dim;
    float* bx = a_.rec_conv + static_cast<size_t>(j) * dim;
    for (int d = 0; d < dim; ++d) bx[d] = bcx[d] * bcx[2 * dim + d];
  }
  CausalConv(op.layer, op.rec->conv, a_.rec_conv, dim, dim, n, a_.rec_y, dim, false);
  for (int j = 0; j < n; ++j) {
    const float* c = a_.rec_in + static_cast<size_t>(j) * 3 * dim + dim;
    float* y = a_.rec_y + static_cast<size_t>(j) * dim;
    for (int d = 0; d < dim; ++d) y[d] *= c[d];
  }
  const WeightTensor& wo = *op.mat[2];
  const ActQ8 yq = QuantizeInput(a_.rec_y, n, dim, wo);
  Matmul(wo, a_.rec_y, yq, n, a_.xb);
}

// Qwen3.5's Gated DeltaNet: q|k|v = silu(conv(xb Wqkv)); q, k L2-normalized per head; beta =
// sigmoid(xb Wbeta), decay = exp(softplus(xb Walpha + dt) * A) per value head; the delta rule
// per value head (reading key head h % key heads); o = rmsnorm(o) * silu(z), z = xb Wgate;
// xb = o Wout.
void Transformer::DeltaNet(const LayerOp& op, int n) {
  const LayerWeights& w = *op.rec;
  const int cd = cfg_.ssm_conv_dim(), kd = cfg_.ssm_key_dim(), vd = cfg_.ssm_value_dim();
  const int hk = cfg_.ssm_k_heads, hv = cfg_.ssm_v_heads, d = cfg_.ssm_state;
  Matmul(*op.mat[0], a_.xb, xq_, n, a_.rec_in);
  Matmul(*op.mat[1], a_.xb, xq_, n, a_.rec_z);
  Matmul(w.rec_beta, a_.xb, xq_, n, a_.rec_ba);
  Matmul(w.rec_alpha, a_.xb, xq_, n, a_.rec_ba + static_cast<size_t>(n) * hv);
  CausalConv(op.layer, w.conv, a_.rec_in, cd, cd, n, a_.rec_conv, cd, true);
  const float eps = op.norm.eps, scale = 1.0f / std::sqrt(static_cast<float>(d));
  const size_t window = static_cast<size_t>(cfg_.conv_kernel - 1) * cd;
  ForTokens(n, [&](int j) {
    float* row = a_.rec_conv + static_cast<size_t>(j) * cd;
    for (int h = 0; h < 2 * hk; ++h) L2Norm(row + h * d, d, eps);  // q and k heads
  });
  // (run, value head) tasks over the threads; a run: one sequence's tokens, in order.
  const int runs = SequenceRuns(n);
  pool_.ParallelFor(static_cast<int64_t>(runs) * hv, [&](int64_t b, int64_t e, int) {
    for (int64_t task = b; task < e; ++task) {
      const int r = static_cast<int>(task / hv), h = static_cast<int>(task % hv);
      const int j0 = run_start_[static_cast<size_t>(r)],
                j1 = run_start_[static_cast<size_t>(r) + 1];
      float* m = plan_.view[static_cast<size_t>(j0)]->State(op.layer) + window +
                 static_cast<size_t>(h) * d * d;
      for (int j = j0; j < j1; ++j) {
        const float* row = a_.rec_conv + static_cast<size_t>(j) * cd;
        const float* q = row + (h % hk) * d;
        const float* k = row + kd + (h % hk) * d;
        const float* v = row + 2 * kd + h * d;
        const float beta = Sigmoid(a_.rec_ba[static_cast<size_t>(j) * hv + h]);
        const float a = a_.rec_ba[static_cast<size_t>(n + j) * hv + h];
        const float decay = std::exp(Softplus(a + w.ssm_dt[h]) * w.ssm_a[h]);
        float* o = a_.rec_y + static_cast<size_t>(j) * vd + h * d;
        k_->delta_step(m, q, k, v, decay, beta, scale, o, d);
      }
    }
  });
  ForTokens(n, [&](int j) {
    for (int h = 0; h < hv; ++h) {
      float* o = a_.rec_y + static_cast<size_t>(j) * vd + h * d;
      k_->rmsnorm(o, o, w.ssm_norm, d, eps);
      const float* z = a_.rec_z + static_cast<size_t>(j) * vd + h * d;
      for (int i = 0; i < d; ++i) o[i] *= Silu(z[i]);
    }
  });
  const WeightTensor& wo = *op.mat[2];
  const ActQ8 yq = QuantizeInput(a_.rec_y, n, vd, wo);
  Matmul(wo, a_.rec_y, yq, n, a_.xb);
}

// att *= sigmoid(gate), the gate projected from the layer's normed input (Qkv).
void Transformer::AttnGate(const LayerOp& op, int n) {
  const size_t m = static_cast<size_t>(n) * op.q_dim();
  for (size_t i = 0; i < m; ++i) a_.att[i] *= Sigmoid(a_.gate[i]);
}

}  // namespace paddock
