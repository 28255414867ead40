// model/backend.h: the seam between the engine and what runs the forward pass.
//
// A backend owns everything a step touches: the weights as its kernels read them, the KV
// cache's block memory (AllocKv) and its activations. The engine hands it a step, one StepItem
// per sequence (tokens, positions, the sequence's block table), and gets back in host memory
// only the rows it asked for: logits, or final hidden states. Tokenizing, scheduling,
// sampling, grammars and the KV cache's bookkeeping (which blocks a sequence holds, prefix
// reuse, copy-on-write) stay above it, the same for every backend.
//
// What a step computes is stated once per model by LayerOps (model/layer_ops.h); a backend only
// executes it, and the ends of a step (item checks, embeddings, soft-cap, pooling) are shared
// (model/step.h). Each backend states what it executes (BackendCaps); CheckSupport refuses a
// model it cannot run, naming the first op, type or feature missing, before anything loads:
// the one place that refuses. A backend may run a range of the layers (SetLayers): a split
// (model/split_backend.h) composes two through this seam, the residual stream between them.
// The CPU backend (cpu/transformer.h) runs the op list on the kernel table over a thread
// pool. A device backend uploads the weights once, keeps the KV
// blocks in device memory (its KvStore: the views it hands out are its own handles, read by
// nothing but its own step), records a step as one submitted stream of work and reads back
// only the rows asked for. Not here: sampling, the pipeline's stages (a head is a backend that
// runs its layers and sends the rest on: dist/), anything that knows of requests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/ggml_types.h"
#include "model/kv_view.h"
#include "model/layer_ops.h"
#include "paddock/forward_options.h"

namespace paddock {

class LoraAdapter;
struct LoadedModel;
struct Profiler;
class Tracer;
struct ModelConfig;

// How an item's one pooled row (StepOutput::kPooled) pools its tokens' final hidden states.
enum class Pooling : uint8_t { kNone, kMean, kFirst, kLast };

// Which backend a Backend is (its name() adds the device's index).
enum class BackendKind : uint8_t { kCpu, kVulkan, kPipeline, kSplit };

// One sequence's share of a step: tokens[0..n) at positions pos..pos+n-1 of its own KV view.
struct StepItem {
  const int32_t* tokens;
  int n;
  int pos;
  const KvView* kv;
  // Rows wanted back: the last n_logits tokens' (1: the last token; speculative verification
  // asks for every drafted position).
  int n_logits = 1;
  // The length of the sequence's prompt: its tokens at positions below it are prompt tokens.
  // A backend may run those of a long prompt on another path (the CPU's bf16 prefill GEMM:
  // Backend::AltPromptTokens), decided per token by its position, never by the step: a
  // token's result does not depend on the chunk or the batch-mates it runs with. 0: no prompt
  // tokens (scoring, verification, decode).
  int prompt_len = 0;
  // A LoRA adapter for this sequence's tokens (model/lora.h), or null: the backend's default.
  // Items with different adapters (and none) share a step.
  const LoraAdapter* lora = nullptr;
  // Images in the prompt (vision/clip.h): per token (n entries), its input embedding row (dim
  // floats, used as is: no embedding scale) or null for a token; null: all tokens. The token id
  // at such a position only keys the prefix cache.
  const float* const* embeds = nullptr;
  // Per token (n entries): attend to positions below this one instead of up to itself, 0 for
  // causal; null: all causal. Gemma 3's image tokens see their whole image (its tokens must
  // then run in one step, after the tokens before them).
  const int32_t* attend_end = nullptr;
  // StepOutput::kPooled: how the item's one row pools its tokens' hidden states. The item is a
  // whole input (pos 0).
  Pooling pooling = Pooling::kNone;
  // Where every token's final-normalized hidden state goes (n rows of dim floats), besides
  // the rows asked for; null: nowhere. Multi-token prediction reads them (BackendCaps::hidden).
  float* hidden = nullptr;
  // A hybrid model's verification (speculative decoding): the backend keeps what the item's
  // tokens fed the recurrent states, so that ReplayState can advance the state (put back by the
  // caller) over the tokens accepted without another forward pass.
  bool keep_state_inputs = false;
};

// What a step returns per row asked for.
enum class StepOutput {
  kLogits,  // n_vocab floats
  kHidden,  // the final-normalized hidden state, dim floats (embeddings)
  kPooled,  // per item one row (n_logits 1): its tokens' hidden states pooled (StepItem::pooling)
  // The residual stream after the backend's layers (SetLayers), every token's row (dim floats)
  // in item order: rows[i] is item i's first token's row; what the next range's StepFrom takes.
  kResidual,
};

// What a backend executes. CheckSupport checks a model's op list, weight types and the KV
// cache's types against it once, at load.
struct BackendCaps {
  const char* name = "cpu";            // in errors: "the vulkan backend has no moe"
  uint32_t ops = ~0u;                  // bit per OpKind (model/layer_ops.h)
  uint32_t features = ~0u;             // bit per OpFeature
  std::vector<GgmlType> weight_types;  // empty: every type
  uint32_t kv_types = ~0u;             // bit per KvDtype
  int max_head_dim = 0;                // 0: any
  bool even_head_dim = false;          // head sizes must be even
  uint64_t max_matrix_bytes = 0;       // one weight matrix's bytes (0: any)
  bool lora = true;                    // LoRA adapters
  bool pooled = true;                  // StepOutput::kPooled
  bool hidden = true;                  // StepItem::hidden
  bool replay = true;                  // Backend::ReplayState
  bool kv_rings = true;                // windowed layers' K/V as rings (KvLayerView::ring)
  const char* fallback = "";           // what to run instead, for the errors
  bool Runs(OpKind k) const { return (ops >> static_cast<int>(k)) & 1u; }
};

// What a backend is asked to run of a model: its layers [layer_begin, layer_end) (-1: to the
// last, with the output head), the KV cache's types per layer (empty: f16), an adapter.
struct SupportQuery {
  std::vector<KvDtype> k_types, v_types;
  bool lora = false;
  int layer_begin = 0, layer_end = -1;
};

// Throws Error when `caps` cannot run `m` as `q` asks: names the first op kind, feature,
// weight type (and where), head size or KV type missing. The one place a backend's limits
// become a refusal.
void CheckSupport(const LoadedModel& m, const BackendCaps& caps, const SupportQuery& q);

// The KV cache's memory as the KV manager lays it out: per layer (of [layer_begin, layer_end))
// the row bytes and element types of K and V; num_blocks blocks of block_size positions each.
struct KvLayout {
  std::vector<KvLayerView> layers;  // (n_layers) row bytes and types; pointers unset
  int32_t num_blocks = 0;
  int block_size = 16;
  int layer_begin = 0, layer_end = 0;
  // Recurrent state slots (KvLayerView::state_bytes each per layer), in host memory: a
  // backend that runs recurrent layers reads them there (the KV manager copies them).
  int32_t num_states = 0;
};

// A backend's KV block memory. The KV manager decides which blocks a sequence holds; the
// store holds their bytes, where the backend's step reads them.
class KvStore {
 public:
  virtual ~KvStore() = default;
  // Per layer, the views a step of this backend reads (KvView::layers).
  virtual const KvLayerView* layers() const = 0;
  // Copy-on-write: block `from`'s rows of every layer into block `to`.
  virtual void CopyBlock(int32_t from, int32_t to) = 0;
  virtual size_t bytes() const = 0;
  // One block's rows of every layer held (K then V per layer, in layer order) as a byte string
  // of block_bytes(): the KV disk tier (kv/kv_disk.h) saves and restores blocks through it.
  // ReadBlock may run on another thread than the steps, for a block no step writes (a full
  // block the KV manager holds a reference to).
  virtual size_t block_bytes() const = 0;
  virtual void ReadBlock(int32_t block, uint8_t* dst) const = 0;
  virtual void WriteBlock(int32_t block, const uint8_t* src) = 0;
};

// The KV store in host memory: one allocation, 2 MiB aligned on huge pages (advice), zeroed
// once (outside the hot loop).
std::unique_ptr<KvStore> NewHostKvStore(const KvLayout& layout);

class Backend {
 public:
  virtual ~Backend() = default;
  // "cpu", "vulkan:0", ...: for people; kind() for code.
  virtual std::string name() const = 0;
  virtual BackendKind kind() const = 0;
  // What it executes (checked once at load: CheckSupport).
  virtual const BackendCaps& caps() const;
  virtual const ModelConfig& config() const = 0;
  // Limits planned at creation: tokens per step, sequences (and logits rows) per step.
  virtual int max_batch() const = 0;
  virtual int max_items() const = 0;
  // The activations' planned bytes (the backend's own memory).
  virtual size_t scratch_bytes() const = 0;

  // The switches (copied whole; not while a step runs).
  virtual void Configure(const ForwardOptions& o) = 0;
  virtual const ForwardOptions& options() const = 0;
  // The context the engine runs with: RoPE factors that depend on it are chosen for it.
  virtual void SetContext(int n_ctx) = 0;
  // The adapter of items that name none (the engine's --lora), or null.
  virtual void SetDefaultLora(const LoraAdapter* a) = 0;

  // The KV cache's block memory, owned by the backend (in its memory).
  virtual std::unique_ptr<KvStore> AllocKv(const KvLayout& layout) = 0;

  // One step over several sequences (continuous batching); the items' tokens together at most
  // max_batch(), their rows at most max_items(). rows[i] receives item i's n_logits rows
  // (host memory, valid until the next step).
  virtual void Step(const StepItem* items, int n_items, StepOutput out, const float** rows) = 0;
  // A range of the model's layers: this backend runs layers [begin, end) only (a split's
  // parts). The first range embeds the tokens; a later one takes its residual stream in
  // StepFrom; a range short of the last layer returns StepOutput::kResidual. Before AllocKv.
  virtual void SetLayers(int begin, int end);
  virtual int layer_begin() const { return 0; }
  // A step of a later range: x is the residual stream (every token's row, items in order)
  // from the range before.
  virtual void StepFrom(const float* x, const StepItem* items, int n_items, StepOutput out,
                        const float** rows);
  // One sequence's tokens[0..n) at positions pos..pos+n-1, cut into steps of step_tokens()
  // (an image's bidirectional span never split): the logits after the last one (n_vocab
  // floats, valid until the next step). Throws Error on an invalid token id or a position past
  // the view's capacity. prompt_len, embeds, attend_end: as StepItem's.
  // hidden: every token's final-normalized hidden state (n rows; StepItem::hidden), or null.
  const float* Forward(const int32_t* tokens, int n, int pos, const KvView& kv, int prompt_len = 0,
                       const float* const* embeds = nullptr, const int32_t* attend_end = nullptr,
                       float* hidden = nullptr);
  // Tokens per step of Forward (at most max_batch()).
  virtual int step_tokens() const { return max_batch(); }
  // Steps in flight (a pipeline's head: one per lane); 0: Step only.
  virtual int lanes() const { return 0; }
  // Launch starts a step of `lane` and returns; Complete(lane) waits for its rows (logits),
  // valid until the lane's next Launch. Lanes complete in the order they were launched.
  virtual void Launch(const StepItem* items, int n_items, int lane);
  virtual void Complete(int lane, const float** rows);

  // The leading positions of a prompt of prompt_len tokens that take another path than the
  // rest (0 or prompt_len): the KV prefix cache keys blocks by it
  // (KvManager::SetPrefillUntil).
  virtual int AltPromptTokens(int prompt_len) const { return 0; }
  // After a step whose item `item` kept its state inputs (StepItem::keep_state_inputs), with
  // that sequence's recurrent state put back to before the step (KvManager::LoadState): the
  // state advanced over the item's first m tokens, bit for bit as the step advanced it. False
  // when this backend cannot (the caller then runs those tokens again).
  virtual bool ReplayState(int item, int m) { return false; }

  // A device backend's memory: bytes it allocated (weights, KV blocks, activations) and the
  // device's total (0, 0: the CPU's, whose memory is the host's).
  virtual uint64_t device_allocated() const { return 0; }
  virtual uint64_t device_total() const { return 0; }
  // A device backend's read bandwidth measured now (GB/s, the best of `passes`; bench's
  // roofline on the device), or 0: the CPU's (bench measures the host's).
  virtual double ReadBandwidthGbs(int passes) { return 0; }

  // Why the backend can no longer step (a device lost), or empty: it can. Steps then throw;
  // the server's /health answers 503 with this.
  virtual std::string Fault() const { return {}; }

  // Per-operator timing and tracing (null: off; nothing when off).
  virtual void SetProfiler(Profiler* p) {}
  virtual void SetTracer(Tracer* t) {}
};

// Whether a step runs on a device (wholly, or its first layers: a split), not the host's CPU.
inline bool OnDevice(const Backend& b) {
  return b.kind() == BackendKind::kVulkan || b.kind() == BackendKind::kSplit;
}

}  // namespace paddock
