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
float Softplus(float x) {
  return x > 20.0f ? x : std::log1p(std::exp(x));
}  // (as ggml)

// x / max(|x|, eps) (ggml_l2_norm)
void L2Norm(const KernelTable& k, float* x, int n, float eps) {
  const float inv = 1.0f / std::fmax(std::sqrt(k.dot(x, x, n)), eps);
  for (int i = 0; i < n; ++i) x[i] *= inv;
}

constexpr int kConvBlock = 1024;  // channels per convolution task

// Token t of a run (its inputs x's rows, ld_x apart; before them the W = K - 1 of the window
// win, oldest first) over channels [c0, c0 + kConvBlock): y's row.
void ConvToken(const KernelTable& k, int K, const float* win, const float* x, size_t ld_x, int ch,
               int t, int c0, const float* taps, float* y, bool silu) {
  const int W = K - 1;
  const float* in[64];  // (conv_kernel <= 64: ModelConfig's check)
  for (int i = 0; i < K; ++i) {
    const int src = t - W + i;  // the input i places back from the token, in its run
    in[i] =
        (src < 0 ? win + static_cast<size_t>(W + src) * ch : x + static_cast<size_t>(src) * ld_x) +
        c0;
  }
  k.conv_token(y + c0, in, taps + c0, ch, K, std::min(kConvBlock, ch - c0), silu);
}

// The window after a run of len inputs: its last W (later rows move forward).
void ShiftWindow(float* win, const float* x, size_t ld_x, int ch, int W, int len) {
  for (int w = 0; w < W; ++w) {
    const int src = w + len;  // in the run's inputs after the window's W
    float* dst = win + static_cast<size_t>(w) * ch;
    if (src < W) {
      std::memmove(dst, win + static_cast<size_t>(src) * ch, sizeof(float) * ch);
    } else {
      std::memcpy(dst, x + static_cast<size_t>(src - W) * ld_x, sizeof(float) * ch);
    }
  }
}

}  // namespace

// Each channel c: y[t] = sum_k in[t - W + k][c] * taps[k][c] over the K = W + 1 inputs up to
// token t: the W before a run's first token are the sequence's window (its state, oldest
// first). The outputs depend on inputs only, so every (token, channel block) is a task; then
// each run's window takes its last W inputs.
void Transformer::CausalConv(int l, const float* taps, const float* x, int ld_x, int ch, int n,
                             float* y, int ld_y, bool silu) {
  const int K = cfg_.conv_kernel;
  const int runs = SequenceRuns(n);
  const int blocks = (ch + kConvBlock - 1) / kConvBlock;
  pool_.ParallelFor(static_cast<int64_t>(n) * blocks, [&](int64_t b, int64_t e, int) {
    for (int64_t task = b; task < e; ++task) {
      const int j = static_cast<int>(task / blocks);
      int r = 0;
      while (run_start_[static_cast<size_t>(r) + 1] <= j) ++r;
      const int j0 = run_start_[static_cast<size_t>(r)];
      ConvToken(*k_, K, plan_.view[static_cast<size_t>(j0)]->State(l),
                x + static_cast<size_t>(j0) * ld_x, ld_x, ch, j - j0,
                static_cast<int>(task % blocks) * kConvBlock, taps,
                y + static_cast<size_t>(j) * ld_y, silu);
    }
  });
  for (int r = 0; r < runs; ++r) {
    const int j0 = run_start_[static_cast<size_t>(r)];
    ShiftWindow(plan_.view[static_cast<size_t>(j0)]->State(l), x + static_cast<size_t>(j0) * ld_x,
                ld_x, ch, K - 1, run_start_[static_cast<size_t>(r) + 1] - j0);
  }
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

// The tokens from step token j (of a run ending at j_end) that form a whole aligned chunk of
// the prompt (kDeltaChunk tokens from a multiple of it, all prompt tokens, all in this step),
// or 0: the chunked form applies to those alone, so the form a token takes follows from its
// position and its prompt's length, whatever the step (batch invariance).
int Transformer::ChunkAt(int j, int j_end) const {
  const int pos = plan_.pos[static_cast<size_t>(j)];
  if (!opt_.chunked_delta || pos % kDeltaChunk != 0 || j + kDeltaChunk > j_end ||
      pos + kDeltaChunk > plan_.prompt_len[static_cast<size_t>(j)])
    return 0;
  return kDeltaChunk;
}

// Which step tokens keep their state inputs: the items asking, while kReplayTokens last (the
// buffer is made at the first such step: only speculation on a hybrid model asks).
void Transformer::PlanReplay(const BatchItem* items, int n_items) {
  bool any = false;
  for (int i = 0; i < n_items; ++i) any = any || items[i].keep_state_inputs;
  if (!any && !replay_set_) return;  // (nothing to clear)
  std::fill(replay_slot_.begin(), replay_slot_.end(), -1);
  std::fill(replay_first_.begin(), replay_first_.end(), -1);
  replay_set_ = any && cfg_.hybrid();
  if (!replay_set_) return;
  if (replay_.empty()) {
    const size_t cd = static_cast<size_t>(cfg_.ssm_conv_dim()),
                 hv = static_cast<size_t>(cfg_.ssm_v_heads);
    replay_row_ = std::max(static_cast<size_t>(cfg_.dim), cd + 2 * hv);
    int n_rec = 0;
    for (int r : rec_ordinal_) n_rec = std::max(n_rec, r + 1);
    replay_stride_ = static_cast<size_t>(n_rec) * replay_row_;
    replay_.assign(static_cast<size_t>(kReplayTokens) * replay_stride_, 0.0f);
  }
  int slots = 0;
  for (int oi = 0, j = 0; oi < n_items; ++oi) {
    const int i = plan_.order[static_cast<size_t>(oi)];
    const BatchItem& it = items[i];
    if (it.keep_state_inputs && slots + it.n <= kReplayTokens) {
      replay_first_[static_cast<size_t>(i)] = slots;
      replay_view_[static_cast<size_t>(i)] = it.kv;
      for (int t = 0; t < it.n; ++t) replay_slot_[static_cast<size_t>(j + t)] = slots++;
    }
    j += it.n;
  }
}

float* Transformer::ReplayRow(int l, int slot) {
  return replay_.data() + static_cast<size_t>(slot) * replay_stride_ +
         static_cast<size_t>(rec_ordinal_[l]) * replay_row_;
}

// The kept tokens' convolution inputs (ch of x's rows), then for a DeltaNet its beta and alpha
// logits (rec_ba).
void Transformer::KeepStateInputs(int l, const float* x, int ld_x, int ch, int n) {
  if (replay_.empty()) return;
  const size_t hv = static_cast<size_t>(cfg_.ssm_v_heads);
  const bool delta = cfg_.Kind(l) == LayerKind::kDeltaNet;
  for (int j = 0; j < n; ++j) {
    const int slot = replay_slot_[static_cast<size_t>(j)];
    if (slot < 0) continue;
    float* row = ReplayRow(l, slot);
    std::memcpy(row, x + static_cast<size_t>(j) * ld_x, sizeof(float) * static_cast<size_t>(ch));
    if (!delta) continue;
    std::memcpy(row + ch, a_.rec_ba + static_cast<size_t>(j) * hv, sizeof(float) * hv);
    std::memcpy(row + ch + hv, a_.rec_ba + (static_cast<size_t>(n) + j) * hv, sizeof(float) * hv);
  }
}

// The state of item's sequence (put back to before the step) over its first m kept tokens:
// per recurrent layer the same kernels on the same inputs as the step (the convolution by
// blocks of channels, the L2 norms, the delta rule token by token; verification tokens never
// take the chunked form), then the window's last inputs. A layer's kept rows of consecutive
// slots are replay_stride_ apart: the convolution reads them as a run's inputs.
bool Transformer::ReplayState(int item, int m) {
  if (item < 0 || item >= max_items_ || replay_.empty() || m < 0) return false;
  const int s0 = replay_first_[static_cast<size_t>(item)];
  if (s0 < 0) return false;
  const KvView* view = replay_view_[static_cast<size_t>(item)];
  const int K = cfg_.conv_kernel;
  for (int l = 0; l < cfg_.n_layers; ++l) {
    if (!cfg_.Recurrent(l)) continue;
    const bool delta = cfg_.Kind(l) == LayerKind::kDeltaNet;
    const int ch = delta ? cfg_.ssm_conv_dim() : cfg_.dim;
    float* win = view->State(l);
    const float* kept = ReplayRow(l, s0);
    if (delta) {
      const LayerOp* op = nullptr;
      for (const LayerOp& o : ops_[static_cast<size_t>(l)])
        if (o.rec != nullptr) op = &o;
      if (op == nullptr) return false;
      const LayerWeights& w = *op->rec;
      const int kd = cfg_.ssm_key_dim(), hk = cfg_.ssm_k_heads, hv = cfg_.ssm_v_heads,
                d = cfg_.ssm_state;
      const float eps = op->norm.eps, scale = 1.0f / std::sqrt(static_cast<float>(d));
      for (int t = 0; t < m; ++t) {
        float* y = a_.rec_conv + static_cast<size_t>(t) * ch;
        for (int c0 = 0; c0 < ch; c0 += kConvBlock)
          ConvToken(*k_, K, win, kept, replay_stride_, ch, t, c0, w.conv, y, true);
        for (int h = 0; h < 2 * hk; ++h) L2Norm(*k_, y + h * d, d, eps);
      }
      const size_t window = static_cast<size_t>(K - 1) * ch;
      pool_.ParallelFor(hv, [&](int64_t b, int64_t e, int) {
        for (int64_t hh = b; hh < e; ++hh) {
          const int h = static_cast<int>(hh);
          float* st = win + window + static_cast<size_t>(h) * d * d;
          for (int t = 0; t < m; ++t) {
            const float* row = a_.rec_conv + static_cast<size_t>(t) * ch;
            const float* ba = ReplayRow(l, s0 + t) + ch;
            const float beta = Sigmoid(ba[h]);
            const float g = Softplus(ba[hv + h] + w.ssm_dt[h]) * w.ssm_a[h];
            k_->delta_step(st, row + (h % hk) * d, row + kd + (h % hk) * d, row + 2 * kd + h * d,
                           std::exp(g), beta, scale,
                           a_.rec_y + static_cast<size_t>(t) * cfg_.ssm_value_dim() + h * d, d);
          }
        }
      });
    }
    ShiftWindow(win, kept, replay_stride_, ch, K - 1, m);
  }
  return true;
}

// LFM2: [b | c | x] = xb Win; y = c * conv(b * x); xb = y Wout.
void Transformer::ShortConv(const LayerOp& op, int n) {
  const int dim = cfg_.dim;
  Timed(ProfOp::kMatmulQkv, [&] { Matmul(*op.mat[0], a_.xb, xq_, n, a_.rec_in); });
  Timed(ProfOp::kRecurrent, [&] {
    for (int j = 0; j < n; ++j) {
      const float* bcx = a_.rec_in + static_cast<size_t>(j) * 3 * dim;
      float* bx = a_.rec_conv + static_cast<size_t>(j) * dim;
      for (int d = 0; d < dim; ++d) bx[d] = bcx[d] * bcx[2 * dim + d];
    }
    KeepStateInputs(op.layer, a_.rec_conv, dim, dim, n);
    CausalConv(op.layer, op.rec->conv, a_.rec_conv, dim, dim, n, a_.rec_y, dim, false);
    for (int j = 0; j < n; ++j) {
      const float* c = a_.rec_in + static_cast<size_t>(j) * 3 * dim + dim;
      float* y = a_.rec_y + static_cast<size_t>(j) * dim;
      for (int d = 0; d < dim; ++d) y[d] *= c[d];
    }
  });
  OutProj(*op.mat[2], a_.rec_y, dim, n);
}

// xb = y Wout, the mixer's output projection (y: n rows of cols).
void Transformer::OutProj(const WeightTensor& wo, const float* y, int cols, int n) {
  const ActQ8 yq = QuantizeInput(y, n, cols, wo);
  Timed(ProfOp::kMatmulOut, [&] { Matmul(wo, y, yq, n, a_.xb); });
}

// Qwen3.5's Gated DeltaNet: q|k|v = silu(conv(xb Wqkv)); q, k L2-normalized per head; beta =
// sigmoid(xb Wbeta), decay = exp(softplus(xb Walpha + dt) * A) per value head; the delta rule
// per value head (reading key head h % key heads); o = rmsnorm(o) * silu(z), z = xb Wgate;
// xb = o Wout.
void Transformer::DeltaNet(const LayerOp& op, int n) {
  const LayerWeights& w = *op.rec;
  const int cd = cfg_.ssm_conv_dim(), kd = cfg_.ssm_key_dim(), vd = cfg_.ssm_value_dim();
  const int hk = cfg_.ssm_k_heads, hv = cfg_.ssm_v_heads, d = cfg_.ssm_state;
  Timed(ProfOp::kMatmulQkv, [&] {
    Matmul(*op.mat[0], a_.xb, xq_, n, a_.rec_in);
    Matmul(*op.mat[1], a_.xb, xq_, n, a_.rec_z);
    Matmul(w.rec_beta, a_.xb, xq_, n, a_.rec_ba);
    Matmul(w.rec_alpha, a_.xb, xq_, n, a_.rec_ba + static_cast<size_t>(n) * hv);
  });
  Timed(ProfOp::kRecurrent, [&] {
    KeepStateInputs(op.layer, a_.rec_in, cd, cd, n);
    CausalConv(op.layer, w.conv, a_.rec_in, cd, cd, n, a_.rec_conv, cd, true);
    const float eps = op.norm.eps, scale = 1.0f / std::sqrt(static_cast<float>(d));
    const size_t window = static_cast<size_t>(cfg_.conv_kernel - 1) * cd;
    ForTokens(n, [&](int j) {
      float* row = a_.rec_conv + static_cast<size_t>(j) * cd;
      for (int h = 0; h < 2 * hk; ++h) L2Norm(*k_, row + h * d, d, eps);  // q and k heads
    });
    // (run, value head) tasks over the threads; a run: one sequence's tokens, in order.
    const int runs = SequenceRuns(n);
    const size_t scratch_stride = DeltaChunkScratch(d) + 2 * kDeltaChunk;
    pool_.ParallelFor(static_cast<int64_t>(runs) * hv, [&](int64_t b, int64_t e, int thread) {
      for (int64_t task = b; task < e; ++task) {
        const int r = static_cast<int>(task / hv), h = static_cast<int>(task % hv);
        const int j0 = run_start_[static_cast<size_t>(r)],
                  j1 = run_start_[static_cast<size_t>(r) + 1];
        float* m = plan_.view[static_cast<size_t>(j0)]->State(op.layer) + window +
                   static_cast<size_t>(h) * d * d;
        float* g = a_.rec_scratch + static_cast<size_t>(thread) * scratch_stride;
        float* betas = g + kDeltaChunk;
        for (int j = j0; j < j1;) {
          const float* row = a_.rec_conv + static_cast<size_t>(j) * cd;
          const float* q = row + (h % hk) * d;
          const float* k = row + kd + (h % hk) * d;
          const float* v = row + 2 * kd + h * d;
          float* o = a_.rec_y + static_cast<size_t>(j) * vd + h * d;
          const int c = ChunkAt(j, j1);
          for (int t = 0; t < std::max(c, 1); ++t) {
            const size_t jt = static_cast<size_t>(j + t);
            betas[t] = Sigmoid(a_.rec_ba[jt * hv + h]);
            g[t] = Softplus(a_.rec_ba[(static_cast<size_t>(n) + jt) * hv + h] + w.ssm_dt[h]) *
                   w.ssm_a[h];
          }
          if (c > 0) {  // a whole aligned chunk of the prompt: the parallel form
            k_->delta_chunk(m, q, k, cd, v, cd, g, betas, scale, o, vd, c, d, betas + kDeltaChunk);
            j += c;
          } else {
            k_->delta_step(m, q, k, v, std::exp(g[0]), betas[0], scale, o, d);
            ++j;
          }
        }
      }
    });
    ForTokens(n, [&](int j) {  // z = silu(z) * rmsnorm(o): the output projection's input
      for (int h = 0; h < hv; ++h) {
        float* o = a_.rec_y + static_cast<size_t>(j) * vd + h * d;
        k_->rmsnorm(o, o, w.ssm_norm, d, eps);
        k_->silu_mul(a_.rec_z + static_cast<size_t>(j) * vd + h * d, o, d);
      }
    });
  });
  OutProj(*op.mat[2], a_.rec_z, vd, n);
}

// att *= sigmoid(gate), the gate projected from the layer's normed input (Qkv).
void Transformer::AttnGate(const LayerOp& op, int n) {
  const size_t m = static_cast<size_t>(n) * op.q_dim();
  for (size_t i = 0; i < m; ++i) a_.att[i] *= Sigmoid(a_.gate[i]);
}

}  // namespace paddock
