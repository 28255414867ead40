// paddock/engine.h: loading a model and generating text: the core of the public C++ API.
//
// An Engine owns one loaded model, its kernels, threads and KV cache, and generates text for
// one sequence at a time with a per-piece streaming callback. Many requests at once (continuous
// batching, admission, preemption) go through paddock::Service (paddock/service.h), which
// takes the engine over.
// Chat formatting (paddock/chat.h) and evaluation (paddock/eval.h) are clients of the engine.
// Errors are reported by throwing paddock::Error with a one-line message.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "paddock/error.h"
#include "paddock/forward_options.h"

namespace paddock {

class LoraAdapter;  // model/lora.h
class StageLink;    // model/stage_link.h

// Several engines on one set of cores (a server holding several models): one thread pool for
// all of them, and their steps taken in turn, one at a time, first come first served (a ticket
// per step), so no model starves another and the cores are never oversubscribed.
class ComputeShare {
 public:
  static std::shared_ptr<ComputeShare> Create(int threads);  // 0: one per physical core
  ~ComputeShare();
  int threads() const;
  struct Impl;
  Impl* impl() const { return impl_.get(); }

 private:
  explicit ComputeShare(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Images in prompts (EngineOptions::mmproj): each occurrence of this text in a prompt given
// to Engine::TokenizeImages stands for the next image.
inline constexpr std::string_view kImageMarker = "<__paddock_image__>";
struct PromptImages;  // engine/images.h: a tokenized prompt's images and where they go

// A device the forward pass can run on (`paddock info --devices`): the CPU, and each Vulkan
// device the loader finds (this build without Vulkan: the CPU only).
struct DeviceInfo {
  std::string id;    // what --device takes: "cpu", "vulkan:0"
  std::string name;  // "AMD EPYC 9R14", "NVIDIA H100 80GB HBM3", "llvmpipe (LLVM 15.0.6, 256 bits)"
  std::string
      type;  // "cpu"; a Vulkan device's: "discrete", "integrated", "virtual", "cpu", "other"
  std::string driver;        // a Vulkan device's driver and its API version
  uint64_t memory = 0;       // bytes: available RAM; a Vulkan device's largest local heap
  uint32_t subgroup = 0;     // a Vulkan device's subgroup size
  bool int_dot = false;      // the integer dot product extension
  bool coop_matrix = false;  // VK_KHR_cooperative_matrix
  bool usable = true;
  std::string missing;  // !usable: what it lacks
};
std::vector<DeviceInfo> ListDevices();

// The Vulkan device an EngineOptions::device names (-1: the CPU); an unknown name: Error.
int VulkanDeviceIndex(const std::string& device);

struct EngineOptions {
  std::string model_path;  // GGUF or llama2.c checkpoint
  // A vision projector (llama.cpp's mmproj GGUF: LLaVA, Gemma 3, SmolVLM): images in prompts.
  std::string mmproj;
  size_t image_cache_bytes = 256u << 20;  // encoded tiles kept by pixel hash (LRU)
  // The projector's F16/F32 matrices as BF16 on the BF16 dot product, where the CPU has it
  // (VisionModel::SetBf16Weights; a switch, to measure it).
  bool image_bf16 = false;
  // An embedding encoder's F16 matrices converted to BF16 at load where the kernel table has the
  // BF16 dot product (AVX-512 BF16; and forward.bf16_dot is on): its steps at that product's
  // rate, 1.2-1.5x its F16 one (Zen 4); weights rounded to 8 significant bits: embeddings within
  // cosine 0.99997 (bge-base shape) and 0.99989 (nomic-embed shape) of llama.cpp's F16 ones, so
  // off by default (--encoder-bf16). Never a reranker's (its scores would move by ~1e-2).
  bool encoder_bf16 = false;
  std::string tokenizer_path;  // optional: tokenizer.bin or vocabulary GGUF overriding the model's
  int threads = 0;             // 0: one per physical core
  std::string isa = "auto";    // kernels: auto, scalar, avx2, avx512
  // Where the forward pass runs: "cpu", or "vulkan" / "vulkan:N" (the N-th Vulkan device:
  // src/vulkan/; the weights stay in their file encodings, uploaded once).
  std::string device = "cpu";
  uint64_t device_memory = 0;  // a device's budget for the weights (0: its memory)
  // Partial offload: the first gpu_layers layers on the device, the rest and the output head
  // on the CPU kernels (-1: every layer on the device).
  int gpu_layers = -1;
  int context = 0;      // KV capacity in tokens; 0: the model's context, at most 4096
  int max_batch = 256;  // tokens per forward step (prompt chunk / batched decode)
  // The forward pass's switches (fusions, integer and bf16 paths, cache blocking).
  ForwardOptions forward;
  bool relayout_weights = true;  // re-lay Q4_0 / Q8_0 / Q4_1 matrices out for the kernels at load
  bool huge_pages = true;        // re-laid weights on transparent huge pages (madvise)
  // Software prefetch of the weight stream in the integer kernels: for the kinds where it was
  // measured to help (the k-quants and lookup kinds), or with prefetch_all for every kind.
  // Which is fastest depends on the machine; `paddock tune` measures it.
  bool prefetch = true;
  bool prefetch_all = false;
  // KV cache (paged): memory budget (0: the context plus 25%), tokens per block, element types
  // of K and V (f32, f16, bf16, int8, int4), per-layer overrides ("*=int4,first=int8,..."),
  // prefix reuse across requests, attention window (-1: the model's, 0: off, N: forced).
  uint64_t kv_memory = 0;
  int kv_tokens = 0;     // with kv_memory 0: size the pool for this many tokens (0: context)
  int kv_sequences = 1;  // with both 0: room for this many full-context sequences, at most
                         // 30% of the available memory (servers set their batch size)
  int kv_block_size = 16;
  // A hybrid recurrent model (Qwen3.5, LFM2), or Gemma 4's windowed layers held as rings
  // (kv_rings): sequences holding a state at once, each a slot of the model's state size in the
  // KV budget (0: kv_sequences + 2).
  int state_slots = 0;
  // ... and the prefix cache's snapshots of the state: every state_snapshot_every blocks of a
  // prompt its state is kept (state_snapshots of them, least recently used reused), so a
  // prompt sharing the prefix resumes at the last one instead of from the start (0: none;
  // rings: at least max_batch's blocks apart).
  int state_snapshot_every = 8;
  int state_snapshots = 8;
  std::string cache_type_k = "f16";
  std::string cache_type_v = "f16";
  std::string kv_layer_types;
  bool prefix_cache = true;
  // Gemma 4's windowed layers keep only their window's K/V, as a ring per sequence (in its
  // state slot) instead of blocks of every position; off: blocks (a switch to measure).
  bool kv_rings = true;
  int sliding_window = -1;
  // The KV cache's disk tier: full prefix blocks saved under this directory (content-addressed,
  // checksummed) and read back instead of computed again, across restarts and by other
  // processes sharing it; kv_disk_budget bytes of files at most (0: 10 GiB, at most half the
  // free space). "": none.
  std::string kv_disk;
  uint64_t kv_disk_budget = 0;
  // Generated control, unknown and unused tokens as their stored text (default: not rendered,
  // as llama.cpp does).
  bool render_special = false;
  // Lock the weights (and everything else) in memory (mlockall): no page is ever read from
  // disk again. Refused when the weights exceed the available memory.
  bool mlock = false;
  // Speculative decoding: "off", "ngram" (prompt lookup), "draft" (draft_model, a smaller
  // model with the same vocabulary) or "mtp" (the model's multi-token-prediction block: Qwen3.5's
  // nextn layer); spec_max: drafted tokens per step at most (1..16; the
  // controller picks fewer, or none, from the measured acceptance and verification cost).
  // spec_fixed: always draft spec_max tokens (no adaptive choice: with a seed, sampled output
  // is then reproducible run to run; the adaptive choice depends on measured timings).
  std::string spec = "off";
  std::string draft_model;
  // A LoRA adapter (llama.cpp's GGUF adapter layout) applied to every sequence at run time,
  // its product scaled by lora_scale (llama.cpp's --lora-scaled); "": none.
  std::string lora_path;
  float lora_scale = 1.0f;
  // Called while the weights are read and re-laid out at load (bytes done, bytes in all), on
  // the creating thread: for a progress bar. Null: nothing.
  std::function<void(double done, double total)> on_load_progress;
  // Run on this shared pool, taking turns with the other engines on it (threads is then the
  // share's); null: a pool of the engine's own.
  std::shared_ptr<ComputeShare> compute;
  // A pipeline's head (dist/pipeline.h): this process runs the embeddings and layers
  // [0, stages->head_layers()), the link's stages the rest; null: the whole model here.
  std::shared_ptr<StageLink> stages;
  // Chrome trace-event JSON written here when the engine is destroyed (Perfetto opens it):
  // operators per thread, forward steps, and with a Service its steps, scheduling decisions
  // and request spans. Opened at Create (Error if it cannot be written). Empty: off.
  std::string trace_path;
  int spec_max = 8;
  bool spec_fixed = false;
};

// llama.cpp's DRY sequence breakers: "\n", ":", "\"", "*".
std::vector<std::string> DefaultDryBreakers();

struct SamplingParams {
  float temperature = 0.8f;     // 0: greedy
  int top_k = 40;               // 0: off
  float top_p = 0.95f;          // 1: off
  float min_p = 0.05f;          // 0: off
  float repeat_penalty = 1.0f;  // 1: off (divides positive logits, multiplies negative ones)
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  int penalty_last_n = 64;  // tokens the penalties look back over
  uint64_t seed = 0x5eed;
  // Added to a token's logit before anything else (OpenAI's logit_bias: -100 bans a token in
  // practice, +100 all but forces it); ids must be in the vocabulary, biases in [-100, 100].
  std::vector<std::pair<int32_t, float>> logit_bias;
  // llama.cpp's samplers (its defaults; each off at these values):
  float typical_p = 1.0f;  // locally typical sampling (1: off)
  // XTC: with probability xtc_probability, the tokens above xtc_threshold except the least
  // likely of them are removed (0: off).
  float xtc_probability = 0.0f, xtc_threshold = 0.1f;
  // Mirostat (1: v1, 2: v2; 0: off): a target surprise tau in bits, learning rate eta. It
  // replaces top-k, top-p, min-p, typical-p and XTC.
  int mirostat = 0;
  float mirostat_tau = 5.0f, mirostat_eta = 0.1f;
  // DRY: a token that would extend a repeat of at least dry_allowed_length tokens found in
  // the last dry_penalty_last_n (-1: the whole context) is penalized by
  // multiplier * base^(length - allowed) (0: off). A repeat does not extend across a breaker
  // token: the ids whose text holds one of the breaker strings (DryBreakerTokens).
  float dry_multiplier = 0.0f, dry_base = 1.75f;
  int dry_allowed_length = 2, dry_penalty_last_n = -1;
  std::vector<std::string> dry_sequence_breakers = DefaultDryBreakers();
  std::vector<int32_t> dry_breaker_tokens;  // filled by the engine from the strings
};

// Constrained decoding: a grammar the output must match (llama.cpp's GBNF, a JSON Schema, or
// any JSON object), compiled for one engine's vocabulary by Engine::CompileGrammar.
enum class GrammarKind { kGbnf, kJsonSchema, kJsonObject };
class Grammar;
// The GBNF grammar a grammar option stands for (a JSON schema's or JSON's), parsed once to
// check it; throws Error naming what is wrong. No model needed (Engine::CompileGrammar
// compiles it for a vocabulary).
std::string GrammarGbnf(GrammarKind kind, std::string_view text);

struct GenerateOptions {
  int max_tokens = 256;     // tokens to generate
  bool ignore_eos = false;  // keep going past end-of-sequence (benchmarks)
  bool add_bos = true;
  bool parse_special = false;     // control tokens spelled in the prompt become tokens
  std::vector<std::string> stop;  // stop strings (excluded from the output)
  SamplingParams sampling;
  // Log-probabilities of each generated token (TokenLogprob): -1 off; 0..20: the chosen token's
  // and this many most likely alternatives. Speculative decoding is not used for such requests.
  int logprobs = -1;
  // Only tokens the grammar allows are sampled (the mask applies before every sampler); an
  // end-of-generation token only where the grammar is complete, and generation ends when
  // nothing can follow. Speculative decoding is not used for such requests.
  std::shared_ptr<const Grammar> grammar;
  // The prompt's images (from Engine::TokenizeImages with the same prompt), or null.
  std::shared_ptr<const PromptImages> images;
};

// A token's log-probability under the model's own distribution: the log-softmax of its logits,
// before temperature, penalties, logit bias or a grammar's mask (what `paddock perplexity`
// scores). text: the bytes the token adds to the text after the one before it.
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
  std::string text;
  struct Alt {
    int32_t token = 0;
    float logprob = 0;
    std::string text;
  };
  std::vector<Alt> top;  // the most likely tokens, best first
};

enum class FinishReason { kLength, kEos, kStop, kContext, kCancelled, kTimeout };
constexpr int kFinishReasons = 6;
const char* FinishReasonName(FinishReason r);

struct GenerateResult {
  std::string text;  // generated text (without the prompt)
  int prompt_tokens = 0;
  int cached_tokens = 0;  // prompt tokens whose KV came from the prefix cache
  int generated_tokens = 0;
  double prompt_seconds = 0;  // time to first token
  double decode_seconds = 0;  // after the first token
  FinishReason finish = FinishReason::kLength;
  std::string stop;         // finish kStop: the stop string that ended the text
  std::string error;        // the engine failed the request (finish kCancelled): why
  int draft_tokens = 0;     // speculative decoding: tokens drafted
  int accepted_tokens = 0;  // of which the target accepted
  // With GenerateOptions::logprobs: one per generated token (end-of-generation excluded). With
  // RequestOptions::prompt_logprobs: one per prompt token after the first.
  std::vector<TokenLogprob> logprobs, prompt_logprobs;
};

// Receives generated text as it becomes final (whole UTF-8 characters, stop strings held back
// until ruled out). Return false to cancel.
using StreamCallback = std::function<bool(std::string_view text)>;

// What a model gives: text (a decoder: text, and embeddings), embeddings only (an encoder) or
// rerank scores (an encoder with a classification head).
enum class ModelKind { kGeneration, kEmbedding, kRerank };
// "generation", "embedding", "rerank".
const char* ModelKindName(ModelKind k);

struct ModelInfo {
  std::string path, format, arch, name;
  int64_t n_params = 0;
  uint64_t weight_bytes = 0;
  // Mixture of experts: the parameters and bytes a token reads (its experts only), and the
  // expert counts (0 for a dense model).
  int64_t n_active_params = 0;
  uint64_t active_weight_bytes = 0;
  int n_experts = 0, n_experts_used = 0, expert_ffn_dim = 0, shared_ffn_dim = 0;
  int n_vocab = 0, dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, ffn_dim = 0;
  // Gemma 4: the local layers' head size (0: head_dim), the layers that store KV (the rest read
  // an earlier layer's; n_layers when all store), the per-layer embedding table's bytes (read a
  // row per token from the mapping: in active_weight_bytes' place only that row counts).
  int head_dim_local = 0, kv_layers = 0;
  int ffn_dim_min = 0;  // the narrowest layer's FFN (ffn_dim: the widest)
  // Hybrid recurrent models: the layers by kind ("Gated DeltaNet x6, attention x2 (3, 7)"; empty
  // for all attention) and one sequence's recurrent state across them.
  std::string layer_kinds;
  uint64_t state_bytes = 0;
  // Multi-token-prediction layers (Qwen3.5's nextn; --spec mtp drafts with the first) and their
  // tensors' bytes (not read per token unless drafting).
  int nextn_layers = 0;
  uint64_t nextn_bytes = 0;
  uint64_t per_layer_table_bytes = 0;
  int trained_context = 0;
  float rope_base = 0;
  std::string rope_style, rope_scaling;
  int sliding_window = 0;
  std::string pooling;  // embeddings' pooling from the file (mean, cls, last, rank), if it says
  // What the model gives (ModelKindName: "generation", "embedding", "rerank").
  ModelKind kind = ModelKind::kGeneration;
  bool qkv_bias = false, qk_norm = false, tied_embeddings = false;
  std::string chat_template;         // the file's tokenizer.chat_template (empty if none)
  std::string bos_token, eos_token;  // their spellings (for chat templates)
  struct TypeCount {
    std::string type;
    int tensors = 0;
    uint64_t bytes = 0;
  };
  std::vector<TypeCount> tensor_types;
  uint64_t kv_bytes_per_1k_tokens = 0;
  // Gemma 4: the windowed layers' rings per sequence (at the default 256-token steps; their
  // positions), beside the blocks kv_bytes_per_1k_tokens counts; 0: none.
  uint64_t kv_ring_bytes = 0;
  int kv_ring = 0;
  // Set by a running Engine only:
  int context = 0;
  uint64_t kv_bytes = 0, scratch_bytes = 0;
  std::string isa;
  std::string device;      // the backend's name: "cpu", "vulkan:0"
  bool on_device = false;  // the forward pass runs on a device (wholly or its first layers)
  int threads = 0;
  std::vector<std::string> warnings;  // things the user should know (e.g. weights > free memory)
};

// Where the memory goes, for observability.
struct MemoryReport {
  uint64_t weight_bytes = 0;        // model weights (memory-mapped)
  uint64_t kv_allocated_bytes = 0;  // the KV block pool
  uint64_t kv_used_bytes = 0;       // blocks held by sequences right now
  uint64_t kv_bytes_per_token = 0;
  uint64_t scratch_bytes = 0;  // activation buffers
  // Speculation's own memory (0 without one): a draft model's weights, KV and activations, or
  // the prediction block's KV and activations (--spec mtp; its weights are in weight_bytes).
  uint64_t spec_bytes = 0;
  // A device backend (--device vulkan): bytes allocated on the device (weights, KV blocks,
  // activations) and its memory; 0 on the CPU.
  uint64_t device_allocated_bytes = 0, device_total_bytes = 0;
  int kv_block_size = 0;
  int64_t kv_total_blocks = 0, kv_used_blocks = 0;
  int64_t prefix_queries = 0, prefix_hits = 0, prefix_evictions = 0;  // in blocks
  int kv_window = 0;
  // A hybrid recurrent model: one sequence's recurrent state (every recurrent layer), the
  // state slots (their bytes are in kv_allocated_bytes) and those held now.
  uint64_t kv_state_bytes = 0;
  int kv_state_slots = 0, kv_used_states = 0;
  int kv_state_snapshots = 0, kv_state_snapshot_slots = 0;  // held now; their slots
  // The KV disk tier (EngineOptions::kv_disk; all zero without one): blocks read back, lookups
  // that found none, files that failed their check, blocks and bytes written, blocks not saved
  // (queue full or writes stopped), failed writes, files removed for the budget.
  bool kv_disk = false, kv_disk_writes_stopped = false;
  uint64_t kv_disk_hits = 0, kv_disk_misses = 0, kv_disk_corrupt = 0, kv_disk_refused = 0;
  uint64_t kv_disk_blocks_written = 0, kv_disk_bytes_written = 0, kv_disk_bytes_read = 0;
  uint64_t kv_disk_dropped = 0, kv_disk_write_errors = 0, kv_disk_evicted = 0;
  uint64_t kv_disk_bytes = 0, kv_disk_budget = 0;
  double kv_disk_read_seconds = 0;
};

struct BenchOptions {
  int prompt_tokens = 512;  // prefill length
  int gen_tokens = 128;     // decode steps
  // Context each decoding sequence holds before its first step (its own random tokens,
  // prefilled): what attention reads grows with it (llama-bench's depth).
  int depth = 8;
  int batch = 1;         // > 1: also decode this many sequences together
  int reps = 3;          // repetitions (medians reported)
  bool profile = false;  // per-operator shares of the decode step and of one prefill
  // Batch sweep (instead of the tests above): decode throughput and per-sequence latency at
  // each batch size (ascending), repetitions interleaved across sizes.
  std::vector<int> sweep_batch;
  // Tokens per forward step (at most the engine's max_batch; 0: max_batch) and the batched
  // matmuls' block (0: the engine's) for this call only: what `paddock tune` varies.
  int step_tokens = 0;
  uint64_t matmul_block_bytes = 0;
  // The weight prefetch for this call only (-1: the engine's; 0 none, 1 the kinds that prefetch
  // by default, 2 every kind): what `paddock tune` varies for decode.
  int prefetch = -1;
  // A device backend's matrix-vector workgroup for this call only (0: the engine's).
  uint32_t device_matvec_wg = 0;
  bool prefill_only = false;  // the prefill figures alone (no roofline, decode or batch)
  bool decode_only = false;   // the single-sequence decode figures alone
  // Also prefill and decode with the defaults (256-token steps, 64 KiB blocks, default
  // prefetch) and with the choices above, interleaved: BenchReport::tune.
  bool compare_defaults = false;
  std::function<void(double done)> on_progress;  // the share done, for a progress bar
};

struct BenchReport {
  std::string isa;
  std::string device;         // a device backend's name ("vulkan:0"): the roofline is its bandwidth
  bool bf16_prefill = false;  // the prompt ran on the bf16 tile GEMM (EngineOptions::bf16_prefill)
  int threads = 0, batch = 1, prompt_tokens = 0, gen_tokens = 0, depth = 0, reps = 0;
  uint64_t streamed_bytes = 0;  // weight bytes read per decode step (MoE: the used experts')
  int n_experts = 0, n_experts_used = 0;  // a mixture of experts: all and per token
  double prefill_tps = 0, prefill_tps_min = 0, prefill_tps_max = 0;
  double decode_tps = 0, decode_tps_min = 0, decode_tps_max = 0;
  double batch_decode_tps = 0, batch_decode_tps_min = 0, batch_decode_tps_max = 0;  // all sequences
  double read_bandwidth_gbs = 0;     // this machine's read bandwidth, measured by the bench
  double decode_gbs = 0;             // weights streamed per second while decoding one sequence
  double bandwidth_utilization = 0;  // decode_gbs / read_bandwidth_gbs
  double prefill_gops = 0;           // matmul operations per second in prefill
  double peak_int8_gops = 0;         // measured int8 dot-product peak (all threads)
  double compute_utilization = 0;    // prefill_gops / peak_int8_gops
  // The same shares with each repetition against its own roofline: the median over repetitions
  // of its rate over the mean of a probe run just before and just after it (a read pass for
  // decode, the int8 peak probe for prefill). Steadier than the two above on a shared host
  // whose speed changes while the bench runs; 0 where not measured (the decode one is not where
  // less than 1 GiB of memory would be left beside the 512 MiB probe buffer).
  double bandwidth_utilization_paired = 0;
  double compute_utilization_paired = 0;
  // With tile GEMMs (isa amx): their products' peak at the GEMM's block size (all threads), and
  // prefill_gops over it; 0 without.
  double peak_tile_gops = 0;
  double tile_utilization = 0;
  struct ProfileEntry {
    std::string op;
    double ms_per_step = 0;
    double share = 0;
  };
  std::vector<ProfileEntry> profile;
  double profiled_step_ms = 0, measured_step_ms = 0;
  std::vector<ProfileEntry> prefill_profile;  // one whole prefill (ms_per_step: the prefill)
  double prefill_profiled_ms = 0, prefill_measured_ms = 0;
  // With speculation on: the verification cost curve (a forward of 1 + k tokens relative to
  // one, k = 0..8, medians) and greedy decode with and without speculation on two workloads:
  // "grounded" (the prompt is a span repeated, so the output can repeat it) and "random" (random
  // prompt tokens: little to match).
  std::vector<double> verify_cost;
  double draft_cost = 0;  // drafting one token against one target step (0: free, n-gram)
  struct SpecRun {
    std::string workload;
    double plain_tps = 0, spec_tps = 0, acceptance = 0;
    int drafted = 0;
  };
  std::vector<SpecRun> spec;
  // The batch sweep: per size, tokens/s over all sequences (median, min, max) and the time of
  // one step (each sequence's time per token, ms); knee: the smallest size reaching 90% of the
  // highest throughput (past it, more sequences add latency, not throughput).
  struct SweepPoint {
    int batch = 0;
    double tps = 0, tps_min = 0, tps_max = 0, step_ms = 0;
  };
  std::vector<SweepPoint> sweep;
  int knee = 0;
  // compare_defaults: prefill and decode tokens/s (medians) with the defaults and with the
  // choices (prefetch: 0 none, 1 default, 2 all).
  struct TuneComparison {
    int step_tokens = 0;
    uint64_t matmul_block_bytes = 0;
    int prefetch = 1;
    double default_tps = 0, tuned_tps = 0;
    double default_decode_tps = 0, tuned_decode_tps = 0;
  } tune;
  MemoryReport memory;
};

// Loads a model's metadata and weight views without building an engine (cheap: mmap only).
ModelInfo InspectModel(const std::string& model_path, const std::string& tokenizer_path = "");

// What Engine::Create(options) would hold, without building it (a memory map only): the
// weights, the KV pool as it would be sized, and the activation scratch (an upper bound: the
// engine's own figure after Create is exact). For admission against a memory budget.
MemoryReport EstimateMemory(const EngineOptions& options);

// An adapter argument, FILE or FILE:SCALE (a path may hold ':'; the scale is the number after
// the last one, within -1000..1000): *path and *scale (1 without one). Throws Error naming `v`.
void ParseLoraArg(const std::string& v, std::string* path, float* scale);

class Engine {
 public:
  static std::unique_ptr<Engine> Create(const EngineOptions& options);
  ~Engine();

  const ModelInfo& info() const;
  // Why the forward pass can no longer run (its device was lost), or empty.
  std::string fault() const;
  double load_seconds() const;
  MemoryReport Memory() const;
  // Waits until the KV blocks queued for the disk tier (EngineOptions::kv_disk) are written.
  void FlushKvDisk();
  // The disk tier's figures as they are now into r's kv_disk_* fields (any thread: the writer
  // moves them between steps too); nothing without a tier.
  void KvDiskStatsNow(MemoryReport* r) const;

  std::vector<int32_t> Tokenize(std::string_view text, bool add_bos,
                                bool parse_special = false) const;
  // A rendered chat: control tokens parsed, except inside `text_only` byte ranges (the messages'
  // contents: text a user typed stays text; control tokens come only from the template).
  std::vector<int32_t> TokenizeChat(std::string_view text, bool add_bos,
                                    const std::vector<std::pair<size_t, size_t>>& text_only) const;
  std::string Detokenize(const std::vector<int32_t>& tokens) const;
  bool AddsBos() const;  // the vocabulary's add-BOS default
  // A reranker's input for a query and a document (tokens without specials), as llama-server
  // forms it: BOS query EOS SEP document EOS ([CLS] q [SEP] d [SEP] when the vocabulary has no
  // EOS; XLM-R: <s> q </s></s> d </s>).
  std::vector<int32_t> RerankInput(const std::vector<int32_t>& query,
                                   const std::vector<int32_t>& doc) const;
  // Images (EngineOptions::mmproj): whether this engine takes them, and what its projector is
  // ("" without one).
  bool has_vision() const;
  std::string vision_info() const;
  // A prompt with images: `text` holds kImageMarker once per image (in order), `images` the
  // encoded files (PNG, JPEG, WebP, GIF), decoded and preprocessed here; text_only as
  // TokenizeChat's (null: control tokens parsed everywhere). *out receives the images for
  // GenerateOptions::images. Throws Error: no projector (the model reads text only), an image
  // it cannot decode or over the limits, markers and images differing in number.
  std::vector<int32_t> TokenizeImages(std::string_view text, bool add_bos,
                                      const std::vector<std::pair<size_t, size_t>>* text_only,
                                      const std::vector<std::string>& images,
                                      std::shared_ptr<const PromptImages>* out) const;
  // Encodes the prompt's images now, on the calling thread (what the service does in steps):
  // seconds spent, 0 when every tile was cached. For benchmarks and tests.
  // fresh: encode every tile even when cached (benchmarks).
  double EncodeImages(const PromptImages& images, bool fresh = false);
  // Each tile's embeddings (tokens x model dim floats) in prompt order: tests and dumps.
  std::vector<std::vector<float>> ImageEmbeddings(const PromptImages& images);

  // Compiles a grammar for this engine's vocabulary (kJsonObject ignores `text`). Cached by
  // kind and text, so a schema sent with every request is compiled once; thread-safe. Throws
  // Error naming what is invalid, unsupported or unsatisfiable.
  std::shared_ptr<const Grammar> CompileGrammar(GrammarKind kind, std::string_view text) const;
  // A LoRA adapter for this engine's model (llama.cpp's GGUF adapter layout), its product
  // scaled by `scale`; for RequestOptions::lora. Throws Error naming what does not fit.
  std::shared_ptr<const LoraAdapter> LoadLora(const std::string& path, float scale) const;

  GenerateResult Generate(std::string_view prompt, const GenerateOptions& options,
                          const StreamCallback& on_text = nullptr);
  GenerateResult GenerateTokens(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                                const StreamCallback& on_text = nullptr);

  // Runs `tokens` at positions pos.. of an evaluation sequence (pos 0 starts a new one) and
  // returns the logits after the last one (n_vocab floats, valid until the next call). For
  // tests and evaluation tools.
  const float* Evaluate(const std::vector<int32_t>& tokens, int pos);

  // Like Evaluate, but returns the logits after every one of `tokens` (n x n_vocab floats, valid
  // until the next call); at most max_eval_tokens() tokens per call.
  const float* EvaluateAll(const std::vector<int32_t>& tokens, int pos);
  int max_eval_tokens() const;

  // Prefill, decode and batched-decode throughput with roofline figures (paddock bench).
  BenchReport Bench(const BenchOptions& options);

  struct Impl;

 private:
  void BenchSpeculation(const BenchOptions& options, BenchReport* report);
  friend class Service;  // the batching service drives the engine's internals
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A vocabulary on its own (e.g. a vocabulary-only GGUF), for tokenization tools.
class Vocabulary {
 public:
  static std::unique_ptr<Vocabulary> Load(const std::string& path);
  ~Vocabulary();
  int size() const;
  std::vector<int32_t> Tokenize(std::string_view text, bool add_bos,
                                bool parse_special = false) const;
  std::string_view Piece(int id) const;

  struct Impl;

 private:
  explicit Vocabulary(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace paddock
