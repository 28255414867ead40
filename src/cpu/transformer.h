// cpu/transformer.h: the CPU backend: the model's op list (model/layer_ops.h) on the kernel
// table over a thread pool (model/backend.h is the seam it implements).
//
// It reads only the op list for what each op computes; how ops fuse (the residual add, norm
// and quantization of the next matrices' input in one pass, Q/K/V with their epilogue, gate
// and up with the GLU) is its own plan, derived from the list once (CpuOp). Forward() takes a run
// of tokens at consecutive positions (a prompt chunk or one decode token), writes their keys/values
// into the KV view and returns the next-token logits of the last one. All activation buffers are
// planned once in the constructor from the model and the batch limit; Forward() never allocates.
// Weights are read in place. The same code runs with any KernelTable, so the scalar table gives the
// reference path for whole-model tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/thread_pool.h"
#include "base/trace.h"
#include "cpu/activations.h"
#include "kernels/kernels.h"
#include "model/backend.h"
#include "model/kv_view.h"
#include "model/layer_ops.h"
#include "model/lora.h"
#include "model/profile.h"
#include "model/rope.h"
#include "model/step.h"
#include "model/weights.h"

namespace paddock {

// Where the forward pass shows its matrix inputs to an ActivationObserver.
enum class ActSite { kAttnIn, kAttnOut, kFfnIn, kDownIn, kOutput };

// Sees every matrix multiplication's input (n rows of `cols` floats) while set: calibration
// statistics for quantization (engine/calibration.h). A Transformer without one pays one
// predictable branch per site.
class ActivationObserver {
 public:
  virtual ~ActivationObserver() = default;
  virtual void Start(const ModelConfig& cfg) {}
  // layer: -1 for kOutput (the classifier's input).
  virtual void Observe(ActSite site, int layer, const float* x, int n, int cols) = 0;
  virtual void Tokens(int n) {}  // a step ran n tokens
};

// Upper bound on the parts one attention task's positions are split into.
constexpr int kAttnMaxSplit = 256;
// Weight bytes per row block in batched int8 matmuls by default: well inside L2.
constexpr size_t kMatmulBlockBytes = 64 * 1024;
// Prompts of at least this many tokens take the bf16 tile GEMM by default (SetBf16Prefill).
constexpr int kBf16PrefillMinPrompt = 64;

class Transformer final : public Backend {
 public:
  // Buffers for max_batch tokens per step (of max_items sequences; 0: as many as the limit
  // allows), planned now; the switches as `options` says (Configure changes them later).
  Transformer(const LoadedModel& model, const KernelTable& kernels, ThreadPool& pool,
              int max_batch = 32, const ForwardOptions& options = {}, int max_items = 0);

  // Backend (model/backend.h).
  std::string name() const override { return "cpu"; }
  BackendKind kind() const override { return BackendKind::kCpu; }
  void Configure(const ForwardOptions& o) override;
  const ForwardOptions& options() const override { return opt_; }
  std::unique_ptr<KvStore> AllocKv(const KvLayout& layout) override {
    return NewHostKvStore(layout);
  }
  void Step(const StepItem* items, int n_items, StepOutput out, const float** rows) override {
    if (out == StepOutput::kHidden) {
      ForwardHidden(items, n_items, rows);
    } else if (out == StepOutput::kPooled) {
      ForwardPooled(items, n_items, rows);
    } else if (out == StepOutput::kResidual) {
      ForwardResidual(items, n_items, rows);
    } else {
      ForwardBatch(items, n_items, rows);
    }
  }
  // A later range of layers (SetLayers): the residual stream x from the range before.
  void StepFrom(const float* x, const StepItem* items, int n_items, StepOutput out,
                const float** rows) override;
  int layer_begin() const override { return layer_begin_; }
  // Each item (a whole input) one row: its tokens' hidden states pooled as item.pooling says
  // (cpu/encoder.cpp, model/step.h's PoolSum): embeddings, an encoder's rerank input.
  void ForwardPooled(const StepItem* items, int n_items, const float** rows);
  int AltPromptTokens(int prompt_len) const override { return Bf16PromptTokens(prompt_len); }
  bool ReplayState(int item, int m) override;  // (recurrent.cpp)

  // Several sequences in one step (continuous batching): item i runs tokens[0..n) at
  // positions pos..pos+n-1 of its own KV view. The total token count must not exceed
  // max_batch(). logits[i] receives item i's logits (valid until the next call): n_logits rows
  // of n_vocab floats, for its last n_logits tokens (1: the last token; speculative
  // verification asks for every drafted position). The rows of all items together must not
  // exceed max_items().
  using BatchItem = StepItem;
  void ForwardBatch(const BatchItem* items, int n_items, const float** logits);
  // The adapter of the items that name none (the engine's --lora), or null.
  void SetDefaultLora(const LoraAdapter* a) override { default_lora_ = a; }
  // The same forward, returning instead of logits the final-normalized hidden state of each row
  // asked for (dim floats each, valid until the next call): embeddings.
  void ForwardHidden(const BatchItem* items, int n_items, const float** hidden) {
    hidden_out_ = true;
    struct Reset {
      bool* f;
      ~Reset() { *f = false; }
    } reset{&hidden_out_};
    ForwardBatch(items, n_items, hidden);
  }

  // y (n x w.rows) = x (n x w.cols) w^T outside a step, on this backend's kernels and threads
  // (w.cols within the inputs planned: a prediction block's 2 x dim): its input projection.
  void Project(const WeightTensor& w, const float* x, int n, float* y);

  // Pipeline parallelism (cpu/pipeline_head.h, dist/). RunPart runs a step's items through
  // this process's layers only, embedded here (a head): the residual stream after them (*n
  // rows of dim floats, valid until the next step), the items in the order their tokens ran
  // (*order: indices into items) and the result rows they ask for (*rows).
  const float* RunPart(const BatchItem* items, int n_items, int* n, int* rows, const int** order);
  // Where a step's result rows are (what a head receives its stages' rows into).
  float* ResultRows(StepOutput out) { return out == StepOutput::kHidden ? a_.xb : a_.logits; }
  // A later stage: layers [begin, end) of the model (end = n_layers: the last, with the output
  // head). ForwardStage runs them on a micro-batch whose residual stream x (n x dim floats, the
  // items' tokens in the order given, which is kept) comes from the stage before; it returns
  // the residual stream after `end` (n rows), or for the last stage the rows asked for:
  // logits, or hidden_out the final-normalized hidden states (*rows of them).
  void SetLayers(int begin, int end) override;
  const float* ForwardStage(const BatchItem* items, int n_items, const float* x, bool hidden_out,
                            int* rows);
  int layer_end() const { return layer_end_; }
  // The residual stream after this process's layers, every token's row in item order.
  void ForwardResidual(const BatchItem* items, int n_items, const float** rows);

  const ModelConfig& config() const override { return cfg_; }
  // The context the engine runs with: RoPE factors that depend on it (Phi-3 longrope: the long
  // factors past the original context) are chosen for it. The constructor assumes the trained
  // context.
  void SetContext(int n_ctx) override;
  // Per-operator timing (null: off).
  void SetProfiler(Profiler* p) override { prof_ = p; }
  // --trace: every operator as a span on the calling thread, the workers' shares on theirs.
  void SetTracer(Tracer* t) override {
    tracer_ = t;
    pool_.SetTrace(t);
  }
  // Calibration: every matrix input shown to `o` (null: off).
  void set_observer(ActivationObserver* o);
  // The switches (ForwardOptions), as this backend reads them:
  // fuse_qkv: Q, K and V projections in one parallel pass; fuse_ffn: gate and up projections
  // and SwiGLU in one parallel pass.
  // fuse_attn: attention as one tiled pass per KV head with an online softmax, the group's
  // query rows (heads x tokens) as SIMD lanes (K/V decoded once per tile for all of them),
  // instead of two passes per head.
  // fuse_norm: residual add + normalization + int8 quantization of the normalized row in one
  // pass per token (threads over tokens), the residual of a layer's FFN carried into the next
  // layer's pass.
  // bf16_dot: BF16 weights: activations rounded to bf16 for the AVX-512 BF16 dot product
  // (where the CPU has it), instead of fp32 FMAs on converted weights.
  // bf16_prefill: prompt tokens of prompts of at least kBf16PrefillMinPrompt tokens take the
  // bf16 tile GEMM (KernelTable::gemm_bf16_tiles: AMX-BF16) instead of the integer one: no
  // per-block float epilogue, 1.3-1.6x the integer tile GEMM's rate; weights and activations
  // rounded to bf16 instead of activations to int8 blocks. Short prompts stay on the integer
  // GEMM (the weights' conversion to bf16 pays over many tokens only).
  // prune_last: the last layer computes past its K/V only the rows whose logits are asked for.
  // matmul_block_bytes: cache blocking of the batched int8 matmuls, weight bytes per row block
  // (0: kMatmulBlockBytes); what `paddock tune` measures, with step tokens; changes no result.
  int bf16_prefill_min() const { return bf16_prefill_min_; }
  // Whether this table and model can take the bf16 prefill at all.
  bool HasBf16Prefill() const { return act_bf_ != nullptr && opt_.int8_activations; }
  // The leading positions of a sequence with a prompt of prompt_len tokens that take the bf16
  // prefill (0 or prompt_len): what the KV prefix cache must know (KvManager::SetPrefillUntil).
  int Bf16PromptTokens(int prompt_len) const {
    return bf16_prefill_min_ > 0 && HasBf16Prefill() && prompt_len >= bf16_prefill_min_ ? prompt_len
                                                                                        : 0;
  }
  // Tokens per step of Forward: 1..max_batch() (0: max_batch()); what `paddock tune` measures.
  void SetStepTokens(int n) { step_tokens_ = n > 0 && n < max_batch_ ? n : max_batch_; }
  size_t matmul_block_bytes() const { return block_bytes_; }
  // The kernel table: another of the same ISA (e.g. another prefetch choice) gives the same
  // results at another speed. Not while a step runs.
  void SetKernels(const KernelTable& k) {
    k_ = &k;
    lora_.SetKernels(k);
  }
  const KernelTable& kernels() const { return *k_; }
  int step_tokens() const override { return step_tokens_; }
  int max_batch() const override { return max_batch_; }
  int max_items() const override { return max_items_; }
  size_t scratch_bytes() const override { return arena_bytes_; }

 private:
  // Buffers, planned once (the constructor).
  void AllocQuantized(size_t act);
  void AllocMoe(size_t moe_rows);
  void AllocPlan();
  // A step (transformer.cpp): ForwardBatch = PlanStep, EmbedTokens, Layer per layer, Logits.
  enum class ItemKernels { kInteger, kMixed, kBf16 };
  ItemKernels KernelsOf(const BatchItem& it) const;
  int PlanStep(const BatchItem* items, int n_items, int* rows);
  // Plan, embed (or take x), run this process's layers; returns the rows carried.
  int RunLayers(const BatchItem* items, int n_items, int n, int rows, const float* x_in);
  void EmbedTokens(const BatchItem* items, int n_items, int n);
  void Logits(const BatchItem* items, int n_items, int n, int rows, const float** logits);
  // The layer and its blocks (transformer.cpp). Each returns the rows the step carries on:
  // n, or (the last layer, past its K/V) only the rows whose logits were asked for.
  int Layer(int l, int n);
  // How the CPU runs an op beyond what the op states: the matrices that read a norm's output
  // (its fused pass quantizes the input for them) and whether those read the step's own token
  // rows (not a gathered expert's). Derived once from the op list (ReadersOf).
  struct CpuOp {
    const WeightTensor* reads[3] = {nullptr, nullptr, nullptr};
    bool token_rows = true;
  };
  void CarryResidual(int n);
  // The last layer, past its K/V (or a recurrent last layer past its mixer: its output rows
  // too): moves the logits rows' queries, residuals and per-token state to rows 0 .. rows - 1
  // (plan_.logit_tok becomes 0, 1, ...) and returns rows.
  int KeepLogitRows(const LayerOp& op);
  // The step's (or the kept rows') token count n_step_, and n_int8_lead_: n - plan_.n_bf when the
  // tokens off the bf16 prefill are exactly the first ones, else 0.
  void SetStepRows(int n);
  // prefill_ok: the input may take the bf16 prefill GEMM (not the experts': their gathered rows
  // are not the step's tokens).
  // also, also2: further weights that read this input (Q's K and V, gate's up), or null.
  // Encoders' post-norm (OpKind::kAddNorm, cpu/encoder.cpp).
  ActQ8 AddNorm(const LayerOp& op, const CpuOp& plan, int n);
  // The final hidden state of the step's token j (encoders: x as is; else output-normalized
  // into `tmp`).
  const float* FinalRow(int j, float* tmp) const;
  ActQ8 ResidualNorm(bool add_residual, const OpNorm& norm, int n, const CpuOp& plan);
  void AddResidual(int n);
  void PostNorm(const OpNorm& norm, int n);
  int RunOp(const LayerOp& op, const CpuOp& plan, int n);
  void Qkv(const LayerOp& op, int n);
  void FfnUp(const LayerOp& op, int n);
  // Gemma 4's per-layer input (kPerLayerInput) and output scale (kScale), on x.
  void PerLayerInput(const LayerOp& op, int n);
  void ScaleResidual(float s, int n);
  // The step's tokens' per-layer inputs (a_.ple), from their embeddings in x (EmbedTokens).
  void PerLayerInputs(const BatchItem* items, int n_items, int n);
  // Mixture of experts (moe.cpp): route, gather per expert, expert GEMMs, weighted scatter.
  void MoeBlock(int l, const LayerWeights& w, const ActQ8& xq, int n);
  int MoeRoute(const LayerWeights& w, const ActQ8& xq, int n);
  ActQ8 MoeGather(const ActQ8& xq, int n, bool int8_in);
  void MoeShared(const LayerWeights& w, const ActQ8& xq, int n);
  void MoeGateUp(const LayerWeights& w, const ActQ8& gq, bool int8_in, int n_active);
  void MoeDown(const LayerWeights& w, int n_active, int n);
  void MoeScatter(int n, bool shared);
  // Gemma 4's: the dense FFN on xb and the experts on their own norm of x, routed on x's
  // scaled norm; xb = post_norm_1(dense) + post_norm_2(experts).
  void MoeBranches(const LayerOp& op, int n);
  // Recurrent layers (recurrent.cpp): LFM2's short convolution and Qwen3.5's Gated DeltaNet,
  // xb in, xb out, each sequence's state (its KV view's) carried across steps; the attention
  // output gate (att *= sigmoid(gate)).
  void ShortConv(const LayerOp& op, int n);
  void DeltaNet(const LayerOp& op, int n);
  // StepItem::keep_state_inputs: per recurrent layer and kept token, the convolution's input
  // row (then for a DeltaNet the beta and alpha logits), replay_ holding kReplayTokens of them.
  static constexpr int kReplayTokens = 64;
  void PlanReplay(const BatchItem* items, int n_items);
  void KeepStateInputs(int l, const float* x, int ld_x, int ch, int n);
  float* ReplayRow(int l, int slot);
  std::vector<float> replay_;
  std::vector<int> replay_slot_;            // (max_batch) per step token: its slot, or -1
  std::vector<int> replay_first_;           // (max_items) per item: its first slot, or -1
  std::vector<const KvView*> replay_view_;  // (max_items) per item: its view
  std::vector<int> rec_ordinal_;            // (n_layers) a recurrent layer's index among them
  size_t replay_row_ = 0;                   // floats per (layer, token)
  size_t replay_stride_ = 0;                // floats per token (its layers' rows)
  bool replay_set_ = false;                 // some token of the last step keeps its inputs
  void AttnGate(const LayerOp& op, int n);
  int SequenceRuns(int n);
  int ChunkAt(int j, int j_end) const;
  void OutProj(const WeightTensor& wo, const float* y, int cols, int n);
  std::vector<int> run_start_;  // (max_batch + 1) SequenceRuns' run starts
  // The causal convolution of `ch` channels of rows x (n rows, stride ld_x) over the
  // sequences' windows in their states, into y (stride ld_y); silu after it when asked.
  void CausalConv(int l, const float* taps, const float* x, int ld_x, int ch, int n, float* y,
                  int ld_y, bool silu);
  // Attention (attention.cpp).
  void StoreKv(const LayerOp& op, int n);
  void Attention(const LayerOp& op, int n);
  void AttentionTiled(const LayerOp& op, int n);
  int PlanAttention(const LayerOp& op, int n);  // returns the parts positions are split into
  void AttendTask(const LayerOp& op, size_t idx, int thread);
  void MergeAttentionParts(const LayerOp& op, int parts);
  // Per-thread scratch of the tiled kernel; one task's partial results (rows x (hd + 2)).
  size_t AttnScratchStride() const {
    const int hd = cfg_.max_head_dim();
    return AttendScratchFloats(hd) + static_cast<size_t>(kAttnMaxRows) * hd;
  }
  size_t AttnPartStride() const {
    return static_cast<size_t>(kAttnMaxRows) * (cfg_.max_head_dim() + 2);
  }
  // Bias, QK-norm and RoPE of token j's Q/K/V heads [h0, h1) of the concatenated Q|K|V heads.
  void QkvEpilogue(const LayerOp& op, int j, int h0, int h1);
  // Matrix multiplication (matmul.cpp).
  // Quantizes n rows of `cols` floats for the integer kernels, if `w` (and every weight that
  // shares this input, which has the same type in practice) has one; else an empty ActQ8.
  // prefill_ok: x holds the step's tokens in order, so its prompt tokens may take the bf16
  // prefill GEMM (false for the logits rows and the experts' gathered rows).
  // int8_too: the prompt tokens packed as bf16 are quantized to int8 too (another weight
  // reading x has no bf16 GEMM).
  ActQ8 QuantizeInput(const float* x, int n, int cols, const WeightTensor& w,
                      bool prefill_ok = true, bool int8_too = false);
  bool TakesInt8(const WeightTensor& w, int cols) const;
  // Whether the step's prompt tokens in an input of n tokens for `w` take the bf16 GEMM.
  bool TakesBf16(const WeightTensor& w, int cols, int n, bool prefill_ok) const;
  // Token j of n (cols floats at x + j cols) into the planned int8 buffers; where the table
  // has tile GEMMs and j falls in a whole 16-token tile, also packed as they read it, while it
  // is in cache (once per matmul input, not per call).
  // bf: a prompt token of the step is packed as bf16 A tiles (TakesBf16), and quantized to
  // int8 too only when int8_too (a weight reading the input has no bf16 GEMM).
  void QuantizeToken(const float* x, int j, int n, int cols, bool bf = false, bool int8_too = true);
  // Whether w's type has the bf16 prefill GEMM (null w: nothing reads it).
  bool HasBf16Gemm(const WeightTensor* w) const {
    return w == nullptr || !*w || k_->gemm_bf16_tiles[static_cast<int>(w->type)] != nullptr;
  }
  bool PacksTiles(int n) const {
    return act_tiles_ != nullptr && k_->pack_act_token != nullptr && n >= kTileGemmMinTokens;
  }
  // The planned int8 buffers holding n tokens (with their packed tiles where QuantizeToken
  // packed them).
  ActQ8 ActBuffers(int n, bool bf = false) const;
  // y (n x w.rows) = x (n x w.cols) * w^T; uses xq (x quantized) where the type allows.
  void Matmul(const WeightTensor& w, const float* x, const ActQ8& xq, int n, float* y);
  // Rows are given to threads in multiples of this (the kernel table's row unit).
  int64_t RowUnit(const WeightTensor& w) const;
  // Rows [begin, end) of w for all n tokens (the unit of work of one thread).
  void MatmulRows(const WeightTensor& w, const float* x, const ActQ8& xq, int n, float* y,
                  int64_t begin, int64_t end);
  // Returns whether the bias / QK-norm / RoPE epilogue ran inside the fused pass.
  bool MatmulQkv(const LayerOp& op, const float* x, const ActQ8& xq, int n);
  // hb = glu(x gate^T, x up^T) (n rows of gate.rows), hb2 the up projection.
  void MatmulGateUp(const WeightTensor& gate, const WeightTensor& up, const float* x,
                    const ActQ8& xq, int n);
  void RopeTables(int n);

  const LoadedModel& model_;
  const ModelConfig& cfg_;
  const KernelTable* k_;
  ThreadPool& pool_;
  int max_batch_;
  int step_tokens_;  // Forward's tokens per step (<= max_batch_)
  size_t block_bytes_ = kMatmulBlockBytes;
  int max_items_;            // sequences per step
  bool hidden_out_ = false;  // ForwardHidden: the rows' hidden states, no logits
  bool pooled_out_ = false;  // ForwardPooled: every token's state kept to the end
  int n_logit_rows_ = 0;     // the step's logits rows: the last layer computes those alone
  bool prune_last_ = false;  // (when fewer than the step's tokens and nothing observes them)
  int ctx_;
  int layer_begin_ = 0, layer_end_ = 0;  // this process's layers (SetLayers)
  bool keep_order_ = false;              // a stage: items run in the order given
  Profiler* prof_ = nullptr;
  ActivationObserver* observer_ = nullptr;
  void Observe(ActSite site, int l, const float* x, int n, int cols) {
    if (observer_ != nullptr) observer_->Observe(site, l, x, n, cols);
  }
  // Runs fn, its wall time counted under `op` when profiling.
  template <class F>
  void Timed(ProfOp op, F&& fn) {
    OpScope scope(this, op);
    fn();
  }
  // The enclosing block counted under `op` when profiling; when tracing, a span on this thread
  // and the workers' shares labelled with it (back to "other" after it).
  struct OpScope {
    OpScope(Transformer* t, ProfOp op)
        : ps(t->prof_, op),
          ts(t->tracer_, Profiler::Name(op), "op"),
          pool(t->tracer_ != nullptr ? &t->pool_ : nullptr) {
      if (pool != nullptr) pool->SetTraceLabel(Profiler::Name(op));
    }
    ~OpScope() {
      if (pool != nullptr) pool->SetTraceLabel("other");
    }
    ProfileScope ps;
    TraceScope ts;
    ThreadPool* pool;
  };
  Tracer* tracer_ = nullptr;
  ForwardOptions opt_;                     // the switches (Configure)
  bool pending_residual_ = false;          // a_.xb holds the last FFN output, not yet added to a_.x
  const LayerOpList& ops_;                 // (n_layers) each layer's ops (the model's)
  std::vector<std::vector<CpuOp>> plans_;  // (n_layers) per op, how the CPU runs it
  ActQ8 xq_;                               // the last kNorm's output as the integer kernels read it
  // Runs fn(j) for every token j, over the threads when there are enough tokens.
  template <class F>
  void ForTokens(int n, F&& fn) {
    if (n < 2 * pool_.size()) {
      for (int j = 0; j < n; ++j) fn(j);
      return;
    }
    pool_.ParallelFor(n, [&](int64_t b, int64_t e, int) {
      for (int64_t j = b; j < e; ++j) fn(static_cast<int>(j));
    });
  }
  // The GLU of an activation: act(g) * u in place of g.
  using GluFn = void (*)(float* g, const float* u, int64_t n);
  GluFn Glu(Activation a) const;
  GluFn glu_ = nullptr;
  PoolSum pool_sum_;                // ForwardPooled's sums (sized once)
  std::vector<size_t> item_first_;  // (max_items) ForwardResidual's item offsets  // the running
                                    // op's (kFfnUp, kMoe: set as it starts)
  // y[j] += b for each of n rows of `width` (no-op when b is null: most models have no biases).
  void AddBias(float* y, const float* b, int n, int64_t width) const {
    if (b == nullptr) return;
    for (int j = 0; j < n; ++j) k_->add(y + j * width, b, width);
  }
  // An op's normalization of a row of dim: RMSNorm, or LayerNorm with bias (GPT-2).
  void Norm(float* out, const float* x, const OpNorm& nm) const {
    if (nm.kind == NormKind::kLayer) {
      k_->layernorm(out, x, nm.w, nm.b, cfg_.dim, nm.eps);
    } else {
      k_->rmsnorm(out, x, nm.w, cfg_.dim, nm.eps);
    }
  }
  // The model's output norm (the step's end).
  OpNorm output_norm_;
  size_t max_cols_;
  std::unique_ptr<int8_t[]> act_qs_;  // (B, max_cols) int8 activations
  std::unique_ptr<float[]> act_d_;    // (B, max_cols / 32) block scales
  std::unique_ptr<float[]> act_ds_;   // (B, max_cols / 32) scaled block sums
  // The same packed as the table's tile GEMMs read them (KernelTable::pack_act_token; null
  // where the table has none).
  std::unique_ptr<int8_t[]> act_tiles_;
  std::unique_ptr<float[]> act_tile_s_;
  // The bf16 prefill (SetBf16Prefill): the step's prompt tokens' activations as bf16 A tiles
  // (B rounded up to 16 x max_cols; null where the table has no bf16 tile GEMM), and per token
  // of the step whether it is one and its slot (plan_).
  int bf16_prefill_min_ = kBf16PrefillMinPrompt;
  std::unique_ptr<uint16_t[]> act_bf_raw_;
  uint16_t* act_bf_ = nullptr;
  int n_step_ = 0;       // tokens in the current step (or the rows the last layer keeps)
  int n_int8_lead_ = 0;  // the tokens off the bf16 GEMM, when they are exactly the first ones

  size_t arena_bytes_ = 0;     // the activations' and the quantized buffers' bytes
  size_t arena_bytes_bf_ = 0;  // the bf16 A tiles' share
  Activations a_;              // the step's float activations (activations.h)
  // Tiled attention tasks of the current layer: a run of tokens of one sequence (from token j0),
  // KV head g, rows [first, first + count) of its (token, head) pairs. Capacity planned once.
  // parts > 1: positions split in `parts` ranges (long-context decode with fewer tasks than
  // threads), partial results in a_.attn_part merged after the pass.
  struct AttnTask {
    int j0, g, first, count;
    int part = 0, parts = 1;
  };
  std::vector<AttnTask> attn_tasks_;
  RopeAngles rope_;  // the positions' cos / sin
  // What a step is, worked out once from its items (PlanStep) and read by every layer: the
  // order its items' tokens run in, each token's position, KV view and kernel (the integer
  // kernels, or the bf16 prefill GEMM), and the rows whose logits it needs. Shapes: B tokens,
  // max_items items or logits rows.
  struct StepPlan {
    std::vector<int> order;                // (max_items) the items in the order their tokens run
    std::vector<int> pos;                  // (B) each token's position
    std::vector<int> prompt_len;           // (B) its sequence's prompt length
    std::vector<int> attend_end;           // (B) past its position: attends below this
    std::vector<const KvView*> view;       // (B) its sequence's KV cache
    std::vector<uint8_t> bf;               // (B) 1: on the bf16 prefill GEMM
    std::vector<int32_t> bf_slot;          // (B) its row among the bf16 tokens
    std::vector<int32_t> bf_rows;          // (B) per bf16 row, its token
    int n_bf = 0;                          // tokens on the bf16 GEMM
    std::vector<int> logit_tok;            // (max_items) the token of each logits row
    std::vector<const LoraAdapter*> lora;  // (B) its sequence's adapter, or null
    bool any_lora = false;                 // some token has one
    bool any_hidden = false;               // some item asks for its tokens' hidden states
  } plan_;
  const LoraAdapter* default_lora_ = nullptr;
  LoraStep lora_;  // the adapters' share of each matmul (model/lora.h)
  // Mixture of experts, planned for the worst routing (R = max_batch * n_experts_used rows).
  std::unique_ptr<int8_t[]> moe_qs_;  // (R, dim) gathered int8 inputs
  std::unique_ptr<float[]> moe_d_;    // (R, dim / 32)
  std::unique_ptr<float[]> moe_ds_;   // (R, dim / 32)
  std::vector<int> moe_sel_;          // (B, k) each token's experts
  std::vector<float> moe_w_;          // (B, k) their weights
  std::vector<int> moe_row_;          // (B, k) the gathered row of each (token, expert) pair
  std::vector<int> moe_count_;        // (n_experts) tokens per expert this step
  std::vector<int> moe_offset_;       // (n_experts) first gathered row of each expert
  std::vector<int> moe_active_;       // the experts with tokens this step, ascending
};

}  // namespace paddock
