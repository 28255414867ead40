// cpu/transformer.cpp: forward orchestration: the step's token bookkeeping, embeddings,
// the layer as named blocks, and the logits. Attention lives in attention.cpp, the matmul
// dispatch in matmul.cpp; the activation buffers are planned once in the constructor.
#include "cpu/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/strings.h"
#include "model/lora.h"
#include "model/step.h"

namespace paddock {

namespace {
// Sequences per step (rows of last-token logits kept).
constexpr int kMaxItems = 256;

// gpt-oss's clamped SwiGLU: g = min(gate, 7), u = clamp(up, -7, 7), g * sigmoid(1.702 g) (u + 1).
void SwigluOai(float* g, const float* u, int64_t n) {
  constexpr float kAlpha = 1.702f, kLimit = 7.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = std::min(g[i], kLimit);
    const float y = std::min(std::max(u[i], -kLimit), kLimit);
    g[i] = x / (1.0f + std::exp(-kAlpha * x)) * (y + 1.0f);
  }
}
}  // namespace

Transformer::Transformer(const LoadedModel& model, const KernelTable& kernels, ThreadPool& pool,
                         int max_batch, const ForwardOptions& options, int max_items)
    : model_(model),
      cfg_(model.config),
      k_(&kernels),
      pool_(pool),
      max_batch_(std::max(1, max_batch)),
      step_tokens_(max_batch_),
      max_items_(std::min(max_items > 0 ? max_items : max_batch_, std::min(max_batch_, kMaxItems))),
      ctx_(model.config.context_length),
      layer_end_(model.config.n_layers),
      ops_(model.ops),
      lora_(max_batch_, kernels, pool) {
  run_start_.assign(static_cast<size_t>(max_batch_) + 1, 0);
  max_cols_ =
      static_cast<size_t>(std::max({cfg_.dim, cfg_.max_q_dim(), cfg_.max_ffn_dim(),
                                    cfg_.ssm_value_dim(), cfg_.mtp_block ? 2 * cfg_.dim : 0}));
  output_norm_ = {cfg_.layer_norm ? NormKind::kLayer : NormKind::kRms, cfg_.norm_eps,
                  model.weights.output_norm, model.weights.output_norm_b};
  if (ops_.size() != static_cast<size_t>(cfg_.n_layers))
    Fail("the CPU backend: the model's op list has %zu layers of %d", ops_.size(), cfg_.n_layers);
  for (const auto& layer : ops_) {  // the CPU's plan: who reads each op's output
    std::vector<CpuOp>& plan = plans_.emplace_back(layer.size());
    for (size_t i = 0; i < layer.size(); ++i)
      ReadersOf(layer, i, plan[i].reads, &plan[i].token_rows);
  }
  // Mixture of experts: R gathered rows (each token's k experts), planned for the worst routing.
  const size_t moe_rows =
      static_cast<size_t>(max_batch_) * static_cast<size_t>(cfg_.n_experts_used);
  const size_t act = std::max(static_cast<size_t>(max_batch_) * max_cols_,
                              moe_rows * static_cast<size_t>(cfg_.expert_ffn_dim));
  AllocQuantized(act);
  ActivationShape shape;
  shape.tokens = static_cast<size_t>(max_batch_);
  shape.threads = static_cast<size_t>(pool_.size());
  shape.items = static_cast<size_t>(max_items_);
  shape.ctx = static_cast<size_t>(ctx_);
  shape.moe_rows = moe_rows;
  arena_bytes_ = a_.Plan(cfg_, shape) + act + (act / kQK + 1) * 8 + arena_bytes_bf_;
  if (cfg_.is_moe()) AllocMoe(moe_rows);
  AllocPlan();
  SetContext(ctx_);
  Configure(options);
}

void Transformer::Configure(const ForwardOptions& o) {
  opt_ = o;
  bf16_prefill_min_ = o.bf16_prefill ? kBf16PrefillMinPrompt : 0;
  block_bytes_ = o.matmul_block_bytes > 0 ? o.matmul_block_bytes : kMatmulBlockBytes;
}

// The matmul inputs as the integer kernels take them: int8 blocks with their scales and sums,
// the AMX tile packing and the bf16 prefill's A tiles where the kernel table has them.
void Transformer::AllocQuantized(size_t act) {
  act_qs_.reset(new int8_t[act]);
  act_d_.reset(new float[act / kQK + 1]);
  act_ds_.reset(new float[act / kQK + 1]);
  if (k_->pack_act_token != nullptr) {
    act_tiles_.reset(new int8_t[act]);
    act_tile_s_.reset(new float[act / kQK * (kActTileFloats / kActTileTokens) + 1]);
  }
  if (k_->pack_bf16_token != nullptr) {
    const size_t bf = static_cast<size_t>((max_batch_ + 15) / 16 * 16) * max_cols_;
    act_bf_raw_.reset(new uint16_t[bf + 32]);
    act_bf_ =
        act_bf_raw_.get() + (64 - reinterpret_cast<uintptr_t>(act_bf_raw_.get()) % 64) % 64 / 2;
    std::memset(act_bf_, 0, bf * sizeof(uint16_t));
    arena_bytes_bf_ = bf * sizeof(uint16_t);
  }
}

// Every float buffer a step uses: one slice each of one arena (64-byte aligned), shapes as
// declared in activations.h.
size_t Activations::Plan(const ModelConfig& cfg, const ActivationShape& s) {
  const size_t B = s.tokens;
  const size_t T = s.threads;
  const size_t half = static_cast<size_t>(cfg.rope_dim / 2);
  const size_t half_local = static_cast<size_t>(cfg.LocalRopeDim() / 2);
  const size_t hidden = std::max(B * cfg.max_ffn_dim(), s.moe_rows * cfg.expert_ffn_dim);
  const size_t qd = static_cast<size_t>(cfg.max_q_dim()),
               kvd = static_cast<size_t>(cfg.max_kv_dim());
  const size_t hd = static_cast<size_t>(cfg.max_head_dim());
  const size_t pl = static_cast<size_t>(cfg.n_layers) * static_cast<size_t>(cfg.per_layer_dim);
  // Recurrent layers' rows: the input projection (LFM2: b|c|x; DeltaNet: q|k|v), the convolved
  // channels (LFM2: dim; DeltaNet: q|k|v).
  bool conv = false, delta = false;
  for (int l = 0; l < cfg.n_layers; ++l) {
    conv |= cfg.Kind(l) == LayerKind::kShortConv;
    delta |= cfg.Kind(l) == LayerKind::kDeltaNet;
  }
  const size_t cd = static_cast<size_t>(cfg.ssm_conv_dim()), dim = static_cast<size_t>(cfg.dim);
  const size_t rec_in_w = std::max(conv ? 3 * dim : 0, delta ? cd : 0);
  const size_t rec_conv_w = std::max(conv ? dim : 0, delta ? cd : 0);
  const struct {
    float** at;
    size_t floats;
  } slices[] = {
      {&x, B * cfg.dim},
      {&xb, B * cfg.dim},
      {&q, B * qd},
      {&kv_k, B * kvd},
      {&kv_v, B * kvd},
      {&att, B * qd},
      {&hb, hidden},
      {&hb2, hidden},
      {&logits, s.items * static_cast<size_t>(cfg.n_vocab)},
      {&cos, B * (half + half_local)},  // the global table, then the local layers' (Gemma 3, 4)
      {&sin, B * (half + half_local)},
      {&scores, T * std::max(s.ctx, static_cast<size_t>(2 * cfg.n_heads))},
      {&qrot, T * qd},
      {&attn_scratch, T * (AttendScratchFloats(static_cast<int>(hd)) + kAttnMaxRows * hd)},
      {&attn_part, 2 * T * static_cast<size_t>(kAttnMaxRows) * (hd + 2)},
      {&moe_logits, B * cfg.n_experts},
      {&moe_x, s.moe_rows * cfg.dim},
      {&moe_out, s.moe_rows * cfg.dim},
      {&moe_shared, cfg.is_moe() ? B * cfg.dim : 0},  // (Gemma 4's dense branch too)
      {&ple, B * pl},
      {&ple_row, pl},
      {&gate, cfg.attn_gate ? B * qd : 0},
      {&rec_in, B * rec_in_w},
      {&rec_conv, B * rec_conv_w},
      {&rec_z, B * static_cast<size_t>(cfg.ssm_value_dim())},
      {&rec_ba, B * 2 * static_cast<size_t>(cfg.ssm_v_heads)},
      {&rec_y, B * std::max(static_cast<size_t>(cfg.ssm_value_dim()), rec_conv_w)},
      {&rec_scratch, delta ? T * (DeltaChunkScratch(cfg.ssm_state) + 2 * kDeltaChunk) : 0},
  };
  auto padded = [](size_t floats) { return (floats + 15) / 16 * 16; };
  size_t total = 0;
  for (const auto& sl : slices) total += padded(sl.floats);
  arena_.reset(new float[total + 16]);
  std::memset(arena_.get(), 0, (total + 16) * sizeof(float));
  float* p = arena_.get();
  p += (16 - (reinterpret_cast<uintptr_t>(p) / 4) % 16) % 16;
  for (const auto& sl : slices) {
    *sl.at = p;
    p += padded(sl.floats);
  }
  cos_local = cos + B * half;
  sin_local = sin + B * half;
  return total * sizeof(float);
}

// Mixture of experts: the gathered int8 inputs and the routing's per-step tables.
void Transformer::AllocMoe(size_t moe_rows) {
  const size_t B = static_cast<size_t>(max_batch_);
  const size_t moe_act = moe_rows * static_cast<size_t>(cfg_.dim);
  moe_qs_.reset(new int8_t[moe_act]);
  moe_d_.reset(new float[moe_act / kQK + 1]);
  moe_ds_.reset(new float[moe_act / kQK + 1]);
  arena_bytes_ += moe_act + (moe_act / kQK + 1) * 8;
  const size_t k = static_cast<size_t>(cfg_.n_experts_used);
  moe_sel_.assign(B * k, 0);
  moe_w_.assign(B * k, 0.0f);
  moe_row_.assign(B * k, 0);
  moe_count_.assign(static_cast<size_t>(cfg_.n_experts), 0);
  moe_offset_.assign(static_cast<size_t>(cfg_.n_experts), 0);
  moe_active_.assign(static_cast<size_t>(cfg_.n_experts), 0);
}

// The step plan's per-token and per-item tables, and the attention task list.
void Transformer::AllocPlan() {
  const size_t B = static_cast<size_t>(max_batch_);
  const size_t T = static_cast<size_t>(pool_.size());
  // At most one task per (token, head), or 2 per thread when positions are split.
  attn_tasks_.reserve(std::max(B * static_cast<size_t>(cfg_.n_heads), 2 * T));
  plan_.pos.assign(B, 0);
  plan_.prompt_len.assign(B, 0);
  plan_.attend_end.assign(B, 0);
  plan_.bf.assign(B, 0);
  plan_.order.assign(static_cast<size_t>(max_items_), 0);
  plan_.bf_slot.assign(B, 0);
  plan_.bf_rows.assign(B, 0);
  plan_.view.assign(B, nullptr);
  plan_.lora.assign(B, nullptr);
  plan_.logit_tok.assign(static_cast<size_t>(max_items_), 0);
  item_first_.assign(static_cast<size_t>(max_items_), 0);
  replay_slot_.assign(B, -1);
  replay_first_.assign(static_cast<size_t>(max_items_), -1);
  replay_view_.assign(static_cast<size_t>(max_items_), nullptr);
  rec_ordinal_.assign(static_cast<size_t>(cfg_.n_layers), -1);
  int n_rec = 0;
  for (int l = 0; l < cfg_.n_layers; ++l)
    if (cfg_.Recurrent(l)) rec_ordinal_[static_cast<size_t>(l)] = n_rec++;
}

// The RoPE frequencies for a context of n_ctx tokens: the file's per-dimension factors (Llama 3
// rope_freqs; Phi-3 longrope: the long ones past the original context, else the short ones and
// the file's attention factor), linear scaling, or YaRN (llama.cpp's: per dimension a ramp
// between interpolated and original frequencies, and cos/sin scaled by 1 + 0.1 ln(factor)).
void Transformer::SetContext(int n_ctx) {
  rope_.Set(cfg_, model_.weights, n_ctx);
}

// Which kernels an item's tokens take: all the integer kernels, all the bf16 prefill GEMM (a
// long prompt's tokens, by position), or some of each (a chunk across the boundary).
Transformer::ItemKernels Transformer::KernelsOf(const BatchItem& it) const {
  const int until = Bf16PromptTokens(it.prompt_len);
  if (until <= it.pos) return ItemKernels::kInteger;
  return it.pos + it.n <= until ? ItemKernels::kBf16 : ItemKernels::kMixed;
}

// The step's plan (plan_): items checked; integer-only items first and bf16-only items last,
// so a step mixing decodes with prompt chunks runs its decodes as one integer GEMM over a
// prefix of its tokens (MatmulRows); each token's position, view and kernel; the logits rows.
// Returns the step's tokens; *rows: its logits rows.
int Transformer::PlanStep(const BatchItem* items, int n_items, int* rows_out) {
  StepLimits lim;
  lim.max_batch = max_batch_;
  lim.max_items = max_items_;
  lim.ctx = ctx_;
  CheckStep(cfg_, items, n_items,
            pooled_out_   ? StepOutput::kPooled
            : hidden_out_ ? StepOutput::kHidden
                          : StepOutput::kLogits,
            lim);
  int no = 0;
  for (ItemKernels k : {ItemKernels::kInteger, ItemKernels::kMixed, ItemKernels::kBf16})
    for (int i = 0; i < n_items; ++i)
      if (keep_order_ ? k == ItemKernels::kInteger : KernelsOf(items[i]) == k)
        plan_.order[static_cast<size_t>(no++)] = i;
  int n = 0, rows = 0;
  plan_.n_bf = 0;
  plan_.any_lora = false;
  plan_.any_hidden = false;
  for (int oi = 0; oi < n_items; ++oi) {
    const BatchItem& it = items[plan_.order[static_cast<size_t>(oi)]];
    const int bf_until = Bf16PromptTokens(it.prompt_len);
    plan_.any_hidden = plan_.any_hidden || it.hidden != nullptr;
    for (int j = 0; j < it.n; ++j, ++n) {
      const auto t = static_cast<size_t>(n);
      plan_.pos[t] = it.pos + j;
      plan_.prompt_len[t] = it.prompt_len;
      // A bidirectional model's token sees its whole input (CheckStep: pos 0).
      plan_.attend_end[t] = !cfg_.causal ? it.n : (it.attend_end != nullptr ? it.attend_end[j] : 0);
      plan_.view[t] = it.kv;
      plan_.lora[t] = it.lora != nullptr ? it.lora : default_lora_;
      plan_.any_lora = plan_.any_lora || plan_.lora[t] != nullptr;
      // A prompt token of a long prompt: the bf16 prefill GEMM (by position, never by step).
      const bool bf = it.pos + j < bf_until;
      plan_.bf[t] = bf ? 1 : 0;
      if (bf) {
        plan_.bf_slot[t] = plan_.n_bf;
        plan_.bf_rows[static_cast<size_t>(plan_.n_bf++)] = n;
      }
    }
    for (int r = 0; r < it.n_logits; ++r)
      plan_.logit_tok[static_cast<size_t>(rows++)] = n - it.n_logits + r;
  }
  PlanReplay(items, n_items);
  *rows_out = rows;
  return n;
}

// x = the step's tokens' embeddings (scaled; plus learned positions, GPT-2), in plan order;
// the RoPE tables of their positions.
void Transformer::EmbedTokens(const BatchItem* items, int n_items, int n) {
  {
    OpScope ps(this, ProfOp::kEmbed);
    const size_t dim = static_cast<size_t>(cfg_.dim);
    for (int oi = 0, j = 0; oi < n_items; ++oi) {
      const BatchItem& it = items[plan_.order[static_cast<size_t>(oi)]];
      for (int t = 0; t < it.n; ++t, ++j)
        EmbedRow(model_, it, t, a_.x + static_cast<size_t>(j) * dim, a_.xb);  // (xb: free yet)
    }
  }
  if (cfg_.per_layer_dim > 0) PerLayerInputs(items, n_items, n);
  RopeTables(n);
}

// Gemma 4: each token's input for every layer: its row of the per-layer table (times
// sqrt(width)) plus the projection of its embedding (over sqrt(dim), normalized per layer),
// over sqrt(2). An image's rows take token 0's row (as llama.cpp).
void Transformer::PerLayerInputs(const BatchItem* items, int n_items, int n) {
  OpScope ps(this, ProfOp::kPerLayer);
  const WeightTensor& proj = model_.weights.pl_model_proj;
  const WeightTensor& table = model_.weights.pl_tok_embd;
  const int P = cfg_.per_layer_dim;
  const size_t width = static_cast<size_t>(cfg_.n_layers) * static_cast<size_t>(P);
  const ActQ8 xq = QuantizeInput(a_.x, n, cfg_.dim, proj, false);
  Matmul(proj, a_.x, xq, n, a_.ple);
  const float proj_scale = 1.0f / std::sqrt(static_cast<float>(cfg_.dim));
  const float row_scale = std::sqrt(static_cast<float>(P));
  const float out_scale = 1.0f / std::sqrt(2.0f);
  const auto to_float = Traits(table.type).to_float;
  for (int oi = 0, j = 0; oi < n_items; ++oi) {
    const BatchItem& it = items[plan_.order[static_cast<size_t>(oi)]];
    for (int t = 0; t < it.n; ++t, ++j) {
      const bool image = it.embeds != nullptr && it.embeds[t] != nullptr;
      const size_t tok = image ? 0 : static_cast<size_t>(it.tokens[t]);
      to_float(table.data + tok * table.row_bytes, a_.ple_row, static_cast<int64_t>(width));
      float* row = a_.ple + static_cast<size_t>(j) * width;
      for (size_t i = 0; i < width; ++i) row[i] *= proj_scale;
      for (int l = 0; l < cfg_.n_layers; ++l) {
        float* r = row + static_cast<size_t>(l) * static_cast<size_t>(P);
        k_->rmsnorm(r, r, model_.weights.pl_proj_norm, P, cfg_.norm_eps);
      }
      for (size_t i = 0; i < width; ++i) row[i] = (row[i] + a_.ple_row[i] * row_scale) * out_scale;
    }
  }
}

// x += norm(gelu(x Wgate) * the tokens' inputs for this layer) Wproj) (the pending residual
// added first: this reads x).
void Transformer::PerLayerInput(const LayerOp& op, int n) {
  if (pending_residual_) AddResidual(n);
  OpScope ps(this, ProfOp::kPerLayer);
  const WeightTensor& gate = *op.mat[0];
  const WeightTensor& proj = *op.mat[1];
  const int P = static_cast<int>(gate.rows);
  const size_t width = static_cast<size_t>(cfg_.n_layers) * static_cast<size_t>(P);
  const ActQ8 xq = QuantizeInput(a_.x, n, cfg_.dim, gate, false);
  Matmul(gate, a_.x, xq, n, a_.hb);
  for (int j = 0; j < n; ++j)
    k_->gelu_mul(a_.hb + static_cast<size_t>(j) * P,
                 a_.ple + static_cast<size_t>(j) * width + static_cast<size_t>(op.layer) * P, P);
  const ActQ8 hq = QuantizeInput(a_.hb, n, P, proj, false);
  Matmul(proj, a_.hb, hq, n, a_.xb);
  PostNorm(op.norm, n);
  CarryResidual(n);
}

// x *= s (the pending residual added first).
void Transformer::ScaleResidual(float s, int n) {
  if (pending_residual_) AddResidual(n);
  OpScope ps(this, ProfOp::kPerLayer);
  const size_t m = static_cast<size_t>(n) * static_cast<size_t>(cfg_.dim);
  for (size_t i = 0; i < m; ++i) a_.x[i] *= s;
}

// The logits rows: final norm, then (unless the caller wants the hidden states) the output
// matmul and softcap; logits[i]: item i's first row.
void Transformer::Logits(const BatchItem* items, int n_items, int n, int rows,
                         const float** logits) {
  const int dim = cfg_.dim;
  {
    OpScope ps(this, ProfOp::kLogits);
    for (int oi = 0, j = 0; plan_.any_hidden && oi < n_items; ++oi) {  // StepItem::hidden
      const BatchItem& it = items[plan_.order[static_cast<size_t>(oi)]];
      for (int t = 0; t < it.n; ++t, ++j) {
        if (it.hidden == nullptr) continue;
        float* dst = it.hidden + static_cast<size_t>(t) * dim;
        const float* h = FinalRow(j, dst);
        if (h != dst) std::memcpy(dst, h, sizeof(float) * static_cast<size_t>(dim));
      }
    }
    for (int r = 0; r < rows; ++r) {
      float* dst = a_.xb + static_cast<size_t>(r) * dim;
      const float* h = FinalRow(plan_.logit_tok[static_cast<size_t>(r)], dst);
      if (h != dst) std::memcpy(dst, h, sizeof(float) * static_cast<size_t>(dim));
    }
  }
  float* out = a_.xb;
  size_t row_floats = static_cast<size_t>(dim);
  if (!hidden_out_) {
    Observe(ActSite::kOutput, -1, a_.xb, rows, dim);
    if (observer_ != nullptr) observer_->Tokens(n);
    const ActQ8 oq = QuantizeInput(a_.xb, rows, dim, model_.weights.output, false);
    OpScope ps(this, ProfOp::kLogits);
    Matmul(model_.weights.output, a_.xb, oq, rows, a_.logits);
    if (cfg_.final_softcap > 0) {  // in chunks over the threads
      const int64_t V = cfg_.n_vocab, chunk = 16384, parts = (rows * V + chunk - 1) / chunk;
      pool_.ParallelFor(parts, [&](int64_t b, int64_t e, int) {
        const int64_t lo = b * chunk, hi = std::min(e * chunk, rows * V);
        FinalSoftcap(cfg_, *k_, a_.logits + lo, static_cast<size_t>(hi - lo));
      });
    }
    out = a_.logits;
    row_floats = static_cast<size_t>(cfg_.n_vocab);
  }
  for (int oi = 0, r = 0; oi < n_items; ++oi) {
    const int i = plan_.order[static_cast<size_t>(oi)];
    logits[i] = out + static_cast<size_t>(r) * row_floats;
    r += items[i].n_logits;
  }
}

void Transformer::Project(const WeightTensor& w, const float* x, int n, float* y) {
  if (n > max_batch_ || static_cast<size_t>(w.cols) > max_cols_)
    Fail("the CPU backend: a projection of %d rows of %lld exceeds its planned inputs", n,
         (long long)w.cols);
  plan_.n_bf = 0;  // (the plan's token tables read as one integer-kernel run)
  plan_.any_lora = false;
  std::fill(plan_.bf.begin(), plan_.bf.begin() + n, 0);
  SetStepRows(n);
  const ActQ8 xq = QuantizeInput(x, n, static_cast<int>(w.cols), w, false);
  Matmul(w, x, xq, n, y);
}

// One step: plan, embed, layers, logits.
void Transformer::ForwardBatch(const BatchItem* items, int n_items, const float** logits) {
  int rows = 0;
  const int n = PlanStep(items, n_items, &rows);
  const int carried = RunLayers(items, n_items, n, rows, nullptr);
  if (pending_residual_) AddResidual(carried);  // the last layer's FFN output
  Logits(items, n_items, n, rows, logits);
}

// The planned step's tokens through this process's layers: embedded (the first stage) or the
// residual stream x_in from the stage before.
int Transformer::RunLayers(const BatchItem* items, int n_items, int n, int rows,
                           const float* x_in) {
  SetStepRows(n);
  // From x_in, the tokens are embedded all the same where the per-layer inputs (computed from
  // the embeddings) need them; x is then taken.
  if (x_in == nullptr || cfg_.per_layer_dim > 0) {
    EmbedTokens(items, n_items, n);
  } else {
    RopeTables(n);
  }
  if (x_in != nullptr) std::memcpy(a_.x, x_in, sizeof(float) * static_cast<size_t>(n) * cfg_.dim);
  pending_residual_ = false;
  // The last layer's attention, FFN and residual serve only the logits rows (each item's last
  // token, for a prompt chunk); its K/V are stored for every token first. Every row's result
  // is its own (batch invariance), so the rows kept are what they would be in the full step.
  n_logit_rows_ = rows;
  prune_last_ = opt_.prune_last && rows < n && observer_ == nullptr && !plan_.any_hidden &&
                layer_end_ == cfg_.n_layers && !pooled_out_;
  int carried = n;
  for (int l = layer_begin_; l < layer_end_; ++l) carried = Layer(l, carried);
  return carried;
}

void Transformer::SetLayers(int begin, int end) {
  if (begin < 0 || end > cfg_.n_layers || begin >= end)
    Fail("layers [%d, %d) are not a range of the model's %d", begin, end, cfg_.n_layers);
  layer_begin_ = begin;
  layer_end_ = end;
  keep_order_ = begin > 0;  // a later stage runs the items in its head's order
}

// A pipeline's part of a step (cpu/pipeline_head.h): the items through this process's
// layers, embedded here; the residual stream after them.
const float* Transformer::RunPart(const BatchItem* items, int n_items, int* n, int* rows,
                                  const int** order) {
  *n = PlanStep(items, n_items, rows);
  RunLayers(items, n_items, *n, *rows, nullptr);
  if (pending_residual_) AddResidual(*n);
  *order = plan_.order.data();
  return a_.x;
}

// The residual stream after this process's layers, in item order (the step's own order may
// differ: PlanStep runs integer-only items first); a_.xb holds the reordered rows.
void Transformer::ForwardResidual(const BatchItem* items, int n_items, const float** rows) {
  int n = 0, n_rows = 0;
  const int* order = nullptr;
  const float* x = RunPart(items, n_items, &n, &n_rows, &order);
  const size_t dim = static_cast<size_t>(cfg_.dim);
  std::vector<size_t>& first = item_first_;  // each item's first token in item order
  for (int i = 0, at = 0; i < n_items; ++i) {
    first[static_cast<size_t>(i)] = static_cast<size_t>(at);
    at += items[i].n;
  }
  for (int oi = 0, j = 0; oi < n_items; ++oi) {
    const int i = order[oi];
    const size_t m = static_cast<size_t>(items[i].n);
    std::memcpy(a_.xb + first[static_cast<size_t>(i)] * dim, x + static_cast<size_t>(j) * dim,
                sizeof(float) * m * dim);
    j += items[i].n;
  }
  for (int i = 0; i < n_items; ++i) rows[i] = a_.xb + first[static_cast<size_t>(i)] * dim;
}

// A later range of layers (a split's second part): its layers on the residual stream of the
// range before, the items in the order given.
void Transformer::StepFrom(const float* x, const StepItem* items, int n_items, StepOutput out,
                           const float** rows) {
  if (layer_begin_ == 0) Fail("the CPU backend: a step from a residual stream runs layer 0");
  if (out == StepOutput::kPooled) Fail("the CPU backend: no pooled rows from a residual stream");
  int n_rows = 0;
  const float* r = ForwardStage(items, n_items, x, out == StepOutput::kHidden, &n_rows);
  const bool residual = layer_end_ < cfg_.n_layers;
  if (residual != (out == StepOutput::kResidual))
    Fail("the CPU backend: layers [%d, %d) cannot return that step's rows", layer_begin_,
         layer_end_);
  const size_t width = static_cast<size_t>(residual                     ? cfg_.dim
                                           : out == StepOutput::kHidden ? cfg_.dim
                                                                        : cfg_.n_vocab);
  for (int i = 0, at = 0; i < n_items; ++i) {
    rows[i] = r + static_cast<size_t>(at) * width;
    at += residual ? items[i].n : items[i].n_logits;
  }
}

// A later stage of a pipeline: its layers on a micro-batch from the stage before.
const float* Transformer::ForwardStage(const BatchItem* items, int n_items, const float* x,
                                       bool hidden_out, int* rows_out) {
  int rows = 0;
  const int n = PlanStep(items, n_items, &rows);
  const int carried = RunLayers(items, n_items, n, rows, x);
  if (pending_residual_) AddResidual(carried);
  if (layer_end_ < cfg_.n_layers) {
    *rows_out = n;
    return a_.x;
  }
  hidden_out_ = hidden_out;
  const float* first[kMaxItems];
  Logits(items, n_items, n, rows, first);
  hidden_out_ = false;
  *rows_out = rows;
  return hidden_out ? a_.xb : a_.logits;
}

void Transformer::RopeTables(int n) {
  const int half = cfg_.rope_dim / 2;
  const int hl = cfg_.LocalRopeDim() / 2;
  const bool local = cfg_.rope_base_local > 0;
  for (int j = 0; j < n; ++j)
    rope_.Fill(plan_.pos[static_cast<size_t>(j)], a_.cos + j * half, a_.sin + j * half,
               local ? a_.cos_local + j * hl : nullptr, local ? a_.sin_local + j * hl : nullptr);
}

void Transformer::set_observer(ActivationObserver* o) {
  observer_ = o;
  if (o != nullptr) o->Start(cfg_);
}

// One layer over the step's n tokens: its ops (model/layer_ops.h) in order. a_.x: (n, dim) the
// residual stream; a_.xb: (n, dim) a block's input, then its output. Whether an op runs fused
// is decided inside it (its CpuOp), never here.
int Transformer::Layer(int l, int n) {
  const auto& ops = ops_[static_cast<size_t>(l)];
  const auto& plans = plans_[static_cast<size_t>(l)];
  for (size_t i = 0; i < ops.size(); ++i) n = RunOp(ops[i], plans[i], n);
  return n;
}

// One op; returns the rows the step carries on: n, or past the last layer's K/V (prune_last)
// only the rows whose logits were asked for.
int Transformer::RunOp(const LayerOp& op, const CpuOp& plan, int n) {
  const int l = op.layer;
  switch (op.kind) {
    case OpKind::kNorm:
      xq_ = ResidualNorm(op.residual || pending_residual_, op.norm, n, plan);
      break;
    case OpKind::kQkv:
      Qkv(op, n);
      break;
    case OpKind::kStoreKv:
      Timed(ProfOp::kKvStore, [&] { StoreKv(op, n); });
      if (prune_last_ && l == cfg_.n_layers - 1) n = KeepLogitRows(op);
      break;
    case OpKind::kAttention:
      // The last layer, reading another's KV (nothing of its own to store): pruned here.
      if (prune_last_ && l == cfg_.n_layers - 1 && op.kv_layer != l) n = KeepLogitRows(op);
      Timed(ProfOp::kAttention, [&] { Attention(op, n); });
      Observe(ActSite::kAttnOut, l, a_.att, n, op.q_dim());
      break;
    case OpKind::kOutProj: {
      if (op.Has(OpFeature::kAttnGate)) AttnGate(op, n);
      const WeightTensor& wo = *op.mat[0];
      const ActQ8 aq = QuantizeInput(a_.att, n, static_cast<int>(wo.cols), wo);
      Timed(ProfOp::kMatmulOut, [&] {
        Matmul(wo, a_.att, aq, n, a_.xb);
        AddBias(a_.xb, op.bias[0], n, cfg_.dim);
      });
      break;
    }
    case OpKind::kPostNorm:
      PostNorm(op.norm, n);
      break;
    case OpKind::kFfnUp:
      FfnUp(op, n);
      break;
    case OpKind::kFfnDown: {
      const WeightTensor& down = *op.mat[0];
      Observe(ActSite::kDownIn, l, a_.hb, n, static_cast<int>(down.cols));
      const ActQ8 hq = QuantizeInput(a_.hb, n, static_cast<int>(down.cols), down);
      Timed(ProfOp::kMatmulDown, [&] {
        Matmul(down, a_.hb, hq, n, a_.xb);
        AddBias(a_.xb, op.bias[0], n, cfg_.dim);
      });
      break;
    }
    case OpKind::kMoe:
      Observe(ActSite::kFfnIn, l, a_.xb, n, cfg_.dim);
      glu_ = Glu(op.act);
      if (op.Has(OpFeature::kMoeBranches)) {
        MoeBranches(op, n);
      } else {
        MoeBlock(l, *op.experts, xq_, n);
      }
      break;
    case OpKind::kResidual:
      CarryResidual(n);
      break;
    case OpKind::kAddNorm:
      xq_ = AddNorm(op, plan, n);
      break;
    case OpKind::kPerLayerInput:
      PerLayerInput(op, n);
      break;
    case OpKind::kScale:
      ScaleResidual(op.scale_by, n);
      break;
    case OpKind::kShortConv:
    case OpKind::kDeltaNet:
      if (op.kind == OpKind::kShortConv) {
        ShortConv(op, n);
      } else {
        DeltaNet(op, n);
      }
      // The last layer, recurrent: its state has every token; the FFN serves the logits rows.
      if (prune_last_ && l == cfg_.n_layers - 1) n = KeepLogitRows(op);
      break;
    case OpKind::kCount:
      break;
  }
  return n;
}

// x += xb, a block's output: at once or, fused, carried into the next norm pass (or added
// before the logits). The one place that decides.
void Transformer::CarryResidual(int n) {
  if (opt_.fuse_norm) {
    pending_residual_ = true;
  } else {
    AddResidual(n);
  }
}

int Transformer::KeepLogitRows(const LayerOp& op) {
  const bool mixer = op.kind == OpKind::kShortConv || op.kind == OpKind::kDeltaNet;
  const int dim = cfg_.dim, qd = mixer ? 0 : op.q_dim(), rows = n_logit_rows_;
  const size_t pl = static_cast<size_t>(cfg_.n_layers) * static_cast<size_t>(cfg_.per_layer_dim);
  plan_.n_bf = 0;
  for (int r = 0; r < rows; ++r) {  // ascending, so in place
    const size_t j = static_cast<size_t>(plan_.logit_tok[static_cast<size_t>(r)]);
    const size_t rr = static_cast<size_t>(r);
    if (j != rr) {
      std::memcpy(a_.q + rr * qd, a_.q + j * qd, sizeof(float) * static_cast<size_t>(qd));
      if (op.gate != nullptr || cfg_.attn_gate)
        std::memcpy(a_.gate + rr * qd, a_.gate + j * qd, sizeof(float) * static_cast<size_t>(qd));
      std::memcpy(a_.x + rr * dim, a_.x + j * dim, sizeof(float) * static_cast<size_t>(dim));
      if (mixer)  // (a recurrent layer's mixer has run: its output rows are the block's)
        std::memcpy(a_.xb + rr * dim, a_.xb + j * dim, sizeof(float) * static_cast<size_t>(dim));
      if (pl > 0) std::memcpy(a_.ple + rr * pl, a_.ple + j * pl, sizeof(float) * pl);
      plan_.pos[rr] = plan_.pos[j];
      plan_.prompt_len[rr] = plan_.prompt_len[j];
      plan_.attend_end[rr] = plan_.attend_end[j];
      plan_.view[rr] = plan_.view[j];
      plan_.lora[rr] = plan_.lora[j];
      plan_.bf[rr] = plan_.bf[j];
    }
    plan_.logit_tok[rr] = r;
    if (plan_.bf[rr] != 0) {
      plan_.bf_slot[rr] = plan_.n_bf;
      plan_.bf_rows[static_cast<size_t>(plan_.n_bf++)] = r;
    }
  }
  SetStepRows(rows);
  return rows;
}

void Transformer::SetStepRows(int n) {
  n_step_ = n;
  n_int8_lead_ = n - plan_.n_bf;
  for (int j = 0; j < n - plan_.n_bf; ++j) {
    if (plan_.bf[static_cast<size_t>(j)] != 0) {
      n_int8_lead_ = 0;
      break;
    }
  }
}

// x += xb (when add_residual), xb = Norm(x), and xb quantized for the matrices that read it
// where they take int8. Fused: one pass per token row, threads over tokens.
ActQ8 Transformer::ResidualNorm(bool add_residual, const OpNorm& nm, int n, const CpuOp& plan) {
  pending_residual_ = false;
  const WeightTensor& next = *plan.reads[0];
  const bool prefill_ok = plan.token_rows;
  const bool int8_too = !HasBf16Gemm(plan.reads[1]) || !HasBf16Gemm(plan.reads[2]);
  if (!opt_.fuse_norm) {
    if (add_residual) AddResidual(n);
    Timed(ProfOp::kNorm, [&] {
      for (int j = 0; j < n; ++j) Norm(a_.xb + j * cfg_.dim, a_.x + j * cfg_.dim, nm);
    });
    return QuantizeInput(a_.xb, n, cfg_.dim, next, prefill_ok, int8_too);
  }
  const int dim = cfg_.dim;
  const bool quant = TakesInt8(next, dim);
  const bool bf = quant && TakesBf16(next, dim, n, prefill_ok);
  Timed(ProfOp::kNorm, [&] {
    ForTokens(n, [&](int j) {
      const size_t r = static_cast<size_t>(j) * static_cast<size_t>(dim);
      if (add_residual) k_->add(a_.x + r, a_.xb + r, dim);
      Norm(a_.xb + r, a_.x + r, nm);
      if (quant) QuantizeToken(a_.xb, j, n, dim, bf, int8_too);
    });
  });
  return quant ? ActBuffers(n, bf) : ActQ8{};
}

void Transformer::AddResidual(int n) {
  const int dim = cfg_.dim;
  Timed(ProfOp::kResidual, [&] {
    ForTokens(n, [&](int j) {
      k_->add(a_.x + static_cast<size_t>(j) * dim, a_.xb + static_cast<size_t>(j) * dim, dim);
    });
  });
  pending_residual_ = false;
}

// In place: xb = RMSNorm(xb) (Gemma 2's post-norms).
void Transformer::PostNorm(const OpNorm& nm, int n) {
  const int dim = cfg_.dim;
  Timed(ProfOp::kNorm, [&] {
    for (int j = 0; j < n; ++j) k_->rmsnorm(a_.xb + j * dim, a_.xb + j * dim, nm.w, dim, nm.eps);
  });
}

// xb (n, dim) -> q (n, q_dim), k, v (n, kv_dim) with bias, QK-norm and RoPE.
void Transformer::Qkv(const LayerOp& op, int n) {
  Observe(ActSite::kAttnIn, op.layer, a_.xb, n, cfg_.dim);
  bool epilogue_done = false;
  Timed(ProfOp::kMatmulQkv, [&] {
    epilogue_done = MatmulQkv(op, a_.xb, xq_, n);
    if (op.gate != nullptr) Matmul(*op.gate, a_.xb, xq_, n, a_.gate);  // (Qwen3.5's output gate)
  });
  if (epilogue_done) return;
  Timed(ProfOp::kBiasNormRope, [&] {
    for (int j = 0; j < n; ++j) {
      if (op.Has(OpFeature::kQkNormRows)) {  // OLMoE: RMSNorm over whole Q and K rows, then RoPE
        float* q = a_.q + static_cast<size_t>(j) * op.q_dim();
        float* k = a_.kv_k + static_cast<size_t>(j) * op.kv_dim();
        k_->rmsnorm(q, q, op.q_norm, op.q_dim(), op.norm.eps);
        k_->rmsnorm(k, k, op.k_norm, op.kv_dim(), op.norm.eps);
      }
      QkvEpilogue(op, j, 0, op.n_heads + 2 * op.n_kv_heads);
    }
  });
}

Transformer::GluFn Transformer::Glu(Activation a) const {
  return a == Activation::kGeluTanh    ? k_->gelu_mul
         : a == Activation::kSwigluOai ? SwigluOai
                                       : k_->silu_mul;
}

// xb (n, dim) -> hb (n, ffn_dim) = glu(xb Wgate, xb Wup) (GPT-2: gelu(xb Wup + b)).
void Transformer::FfnUp(const LayerOp& op, int n) {
  glu_ = Glu(op.act);
  Observe(ActSite::kFfnIn, op.layer, a_.xb, n, cfg_.dim);
  const WeightTensor& up = *op.mat[1];
  Timed(ProfOp::kMatmulGateUp, [&] {
    if (op.mat[0] != nullptr) {
      MatmulGateUp(*op.mat[0], up, a_.xb, xq_, n);
    } else {
      Matmul(up, a_.xb, xq_, n, a_.hb);
      AddBias(a_.hb, op.bias[1], n, up.rows);
      k_->gelu_mul(a_.hb, nullptr, n * up.rows);
    }
  });
}

}  // namespace paddock
