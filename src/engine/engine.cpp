// engine/engine.cpp: the public API over model, backend and KV cache: one sequence at a time.
// Creation (the backend, the KV cache, speculation), tokenizing, images, evaluation; the
// generation loop is generation.cpp.
#include "paddock/engine.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "base/cpu.h"
#include "base/hash64.h"
#include "base/strings.h"
#include "base/thread_pool.h"
#include "base/timer.h"
#include "base/utf8.h"
#include "cpu/pipeline_head.h"
#include "cpu/transformer.h"
#include "engine/engine_impl.h"
#include "engine/sampler.h"
#include "engine/stop_rule.h"
#include "engine/text_stream.h"
#include "kernels/kernels.h"
#include "kv/kv_disk.h"
#include "kv/kv_manager.h"
#include "model/stage_link.h"
#include "model/weights.h"
#include "vision/clip.h"
#include "vision/image.h"

namespace paddock {

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kContext:
      return "context";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kTimeout:
      return "timeout";
  }
  return "?";
}

namespace {

constexpr int kDefaultMaxContext = 4096;

ModelInfo MakeInfo(const LoadedModel& m) {
  const ModelConfig& c = m.config;
  ModelInfo i;
  i.path = m.path;
  i.format = m.format;
  i.arch = c.arch;
  i.name = c.name;
  i.n_params = m.n_params;
  i.weight_bytes = m.weight_bytes;
  i.n_active_params = m.n_active_params;
  i.active_weight_bytes = m.active_weight_bytes;
  i.n_experts = c.n_experts;
  i.n_experts_used = c.n_experts_used;
  i.expert_ffn_dim = c.expert_ffn_dim;
  i.shared_ffn_dim = c.shared_ffn_dim;
  i.n_vocab = c.n_vocab;
  i.dim = c.dim;
  i.n_layers = c.n_layers;
  i.n_heads = c.n_heads;
  i.n_kv_heads = c.n_kv_heads;
  i.head_dim = c.head_dim;
  i.head_dim_local = c.head_dim_local;
  i.kv_layers = c.kv_layers > 0 ? c.kv_layers : c.n_layers;
  if (c.hybrid()) {
    int rec = 0;
    std::string attn;
    for (int l = 0; l < c.n_layers; ++l) {
      if (c.Recurrent(l)) {
        rec++;
      } else {
        attn += StrFormat("%s%d", attn.empty() ? "" : ", ", l);
      }
    }
    i.kv_layers = c.n_layers - rec;
    i.layer_kinds =
        StrFormat("%s x%d, attention x%d (%s)",
                  c.Kind(0) == LayerKind::kShortConv || c.arch == "lfm2" ? "short convolution"
                                                                         : "Gated DeltaNet",
                  rec, c.n_layers - rec, attn.c_str());
    i.state_bytes = KvStateBytes(c);
  }
  i.nextn_layers = c.nextn_layers;
  i.nextn_bytes = m.nextn_bytes;
  i.per_layer_table_bytes =
      static_cast<uint64_t>(m.weights.pl_tok_embd.rows) * m.weights.pl_tok_embd.row_bytes;
  i.ffn_dim = c.ffn_dim;  // (the widest where layers differ)
  i.ffn_dim_min = c.ffn_dim;
  for (int f : c.layer_ffn_dim) i.ffn_dim_min = std::min(i.ffn_dim_min, f);
  i.trained_context = c.context_length;
  i.rope_base = c.rope_base;
  i.rope_style = c.rope_style == RopeStyle::kHalfSplit ? "half-split (NeoX)" : "adjacent pairs";
  i.rope_scaling = c.rope_scaling;
  i.sliding_window = c.sliding_window;
  i.pooling = c.pooling_type == 1   ? "mean"
              : c.pooling_type == 2 ? "cls"
              : c.pooling_type == 3 ? "last"
              : c.pooling_type == 4 ? "rank"
                                    : "";
  i.kind = !c.encoder                 ? ModelKind::kGeneration
           : m.weights.cls != nullptr ? ModelKind::kRerank
                                      : ModelKind::kEmbedding;
  i.qkv_bias = c.qkv_bias;
  i.qk_norm = c.qk_norm;
  i.tied_embeddings = c.tied_embeddings;
  i.chat_template = m.chat_template;
  if (m.tokenizer) {
    const Tokenizer& t = *m.tokenizer;
    if (t.bos() >= 0 && t.bos() < t.vocab_size()) i.bos_token = std::string(t.Piece(t.bos()));
    if (t.eos() >= 0 && t.eos() < t.vocab_size()) i.eos_token = std::string(t.Piece(t.eos()));
  }
  for (const auto& t : m.type_counts) i.tensor_types.push_back({t.type, t.count, t.bytes});
  KvCacheOptions rings;  // (the engine's defaults: rings on, steps of 256)
  rings.rings = true;
  i.kv_bytes_per_1k_tokens = KvBytesPerToken(c, rings) * 1000u;
  i.kv_ring_bytes = KvStateBytes(c, rings) - KvStateBytes(c);
  for (int l = 0; l < c.n_layers; ++l) i.kv_ring = std::max(i.kv_ring, KvRing(c, rings, l));
  return i;
}

}  // namespace

namespace {

// The options' ranges, before anything is loaded.
void CheckOptions(const EngineOptions& o) {
  if (o.model_path.empty()) Fail("no model given");
  if (o.threads < 0 || o.threads > 1024) Fail("thread count %d is out of range", o.threads);
  if (o.context < 0) Fail("context %d must not be negative", o.context);
  if (o.max_batch < 1 || o.max_batch > 4096)
    Fail("max batch %d is out of range [1, 4096]", o.max_batch);
  if (o.kv_tokens < 0) Fail("kv_tokens %d must not be negative", o.kv_tokens);
  if (o.forward.matmul_block_bytes > (uint64_t{1} << 30))
    Fail("matmul block of %llu bytes is out of range (at most 1 GiB)",
         static_cast<unsigned long long>(o.forward.matmul_block_bytes));
  if (o.state_slots < 0 || o.state_slots > 4096)
    Fail("state slots %d is out of range [1, 4096]", o.state_slots);
  if (o.kv_sequences < 1 || o.kv_sequences > 4096)
    Fail("kv_sequences %d is out of range [1, 4096]", o.kv_sequences);
  if (!o.trace_path.empty() && o.compute)
    Fail("a trace records one engine's threads: not with engines sharing a pool (several models)");
  if (o.gpu_layers != -1 && VulkanDeviceIndex(o.device) < 0)
    Fail("--gpu-layers is for --device vulkan");
  if (VulkanDeviceIndex(o.device) >= 0 && o.stages)
    Fail("--device %s runs no pipeline stages (--device cpu does)", o.device.c_str());
}

// Weights larger than the available memory (avail) still run from the memory map, but every
// token then reads pages back from disk: a warning (or, with --mlock, an error).
std::vector<std::string> MemoryWarnings(const LoadedModel& m, const EngineOptions& o,
                                        uint64_t avail) {
  if (avail == 0 || m.weight_bytes <= avail) return {};
  if (o.mlock) {
    Fail("--mlock: the model's %s of weights exceed the available memory (%s)",
         FormatBytes(m.weight_bytes).c_str(), FormatBytes(avail).c_str());
  }
  // A mixture of experts reads only its active experts per token: say how much.
  const std::string per_token =
      m.active_weight_bytes < m.weight_bytes
          ? StrFormat(" (each token reads %s of them: its experts and the shared weights)",
                      FormatBytes(m.active_weight_bytes).c_str())
          : "";
  return {StrFormat(
      "the model's %s of weights exceed the available memory (%s): the weights stay in their "
      "file layout in the memory map (not re-laid into memory), which reads pages from disk as "
      "tokens need them%s, so each token waits for the disk",
      FormatBytes(m.weight_bytes).c_str(), FormatBytes(avail).c_str(), per_token.c_str())};
}

// The forward pass: the CPU backend on `threads` threads with the options' kernels and
// switches, limits and context; the pipeline's stages and the default adapter attached.
void MakeBackend(Engine::Impl* impl, const EngineOptions& o, Isa isa, int threads, int ctx) {
  impl->compute = o.compute;
  impl->pool = o.compute ? o.compute->impl()->pool : std::make_shared<ThreadPool>(threads);
  impl->prefetch = PrefetchOf(o);
  impl->kernels = &GetKernels(isa, impl->prefetch);
  if (VulkanDeviceIndex(o.device) >= 0) {  // a device's backend (engine/devices.cpp)
    impl->backend = MakeDeviceBackend(*impl->model, o, *impl->kernels, *impl->pool, ctx);
    return;
  }
  auto cpu = std::make_unique<Transformer>(*impl->model, *impl->kernels, *impl->pool, o.max_batch,
                                           o.forward);
  cpu->SetContext(ctx);
  impl->cpu = cpu.get();
  if (o.stages) {  // the head's layers here, the rest through the link
    impl->stages = o.stages;
    impl->backend = std::make_unique<PipelineHead>(std::move(cpu), o.stages.get());
  } else {
    impl->backend = std::move(cpu);
  }
  CheckSupport(*impl->model, impl->backend->caps(), SupportOf(impl->model->config, o));
  if (!o.lora_path.empty()) {
    impl->lora = LoraAdapter::Load(o.lora_path, *impl->model, o.lora_scale);
    impl->backend->SetDefaultLora(impl->lora.get());
  }
}

// The paged KV cache: the options' types and budget; by default room for kv_sequences full
// contexts, within 30% of the available memory when there are several (never below one).
KvCacheOptions KvPlan(const ModelConfig& c, const EngineOptions& o, int ctx, int64_t* tokens) {
  KvCacheOptions ko;
  ko.memory_bytes = o.kv_memory;
  ko.block_size = o.kv_block_size;
  ko.k_type = ParseKvDtype(o.cache_type_k);
  ko.v_type = ParseKvDtype(o.cache_type_v);
  ko.layer_types = o.kv_layer_types;
  ko.prefix_cache = o.prefix_cache;
  ko.sliding_window = o.sliding_window;
  ko.state_slots = o.state_slots > 0 ? o.state_slots : std::min(o.kv_sequences + 2, 4096);
  ko.snapshot_every = o.state_snapshot_every;
  ko.snapshot_slots = o.state_snapshots;
  ko.rings = o.kv_rings;
  ko.ring_step = o.max_batch;
  // Rings are snapshotted (for prefix reuse) at least a step apart: a prompt's chunks end at
  // snapshots, and smaller chunks would slow the prefill (Gemma 4 E2B: 258 -> 282 tok/s).
  for (int l = 0; l < c.n_layers && !c.hybrid() && ko.snapshot_every > 0; ++l) {
    if (KvRing(c, ko, l) == 0) continue;
    ko.snapshot_every = std::max(ko.snapshot_every, o.max_batch / std::max(ko.block_size, 1));
    break;
  }
  int64_t kv_tokens = o.kv_tokens > 0 ? o.kv_tokens : static_cast<int64_t>(ctx) * o.kv_sequences;
  if (o.kv_memory == 0 && o.kv_tokens == 0 && o.kv_sequences > 1) {
    const uint64_t want = static_cast<uint64_t>(kv_tokens) * KvBytesPerToken(c, ko);
    const uint64_t cap = AvailableMemoryBytes() * 3 / 10;
    if (cap > 0 && want > cap)
      ko.memory_bytes =
          std::max<uint64_t>(cap, static_cast<uint64_t>(ctx) * KvBytesPerToken(c, ko));
  }
  if (kv_tokens > INT32_MAX) kv_tokens = INT32_MAX;
  *tokens = kv_tokens;
  return ko;
}

// What shapes the KV values besides the tokens (the block hashes hold those, the KV types and
// the block size): the model file's content, a tokenizer or adapter given apart, the context
// (RoPE factors chosen for it), the kernels and the forward pass's switches. A disk tier's
// blocks are shared only under the same identity.
uint64_t KvIdentity(const Engine::Impl& impl, const EngineOptions& o, int ctx) {
  std::string id = StrFormat("paddock-kv-1 model=%016" PRIx64 " ctx=%d isa=%s relayout=%d",
                             FileContentIdentity(o.model_path, o.kv_disk), ctx,
                             IsaName(impl.kernels->isa), o.relayout_weights ? 1 : 0);
  if (!o.tokenizer_path.empty())
    id += StrFormat(" tokenizer=%016" PRIx64, FileContentIdentity(o.tokenizer_path, o.kv_disk));
  if (!o.lora_path.empty())
    id += StrFormat(" lora=%016" PRIx64 "*%g", FileContentIdentity(o.lora_path, o.kv_disk),
                    static_cast<double>(o.lora_scale));
  // A device's keys and values round differently from the CPU's (and a partial offload's
  // differ per layer): a tier's blocks are shared only on the same device and split.
  if (OnDevice(*impl.backend))
    id += StrFormat(" device=%s gpu_layers=%d", impl.backend->name().c_str(), o.gpu_layers);
  ForwardOptions f = o.forward;
  f.ForEachSwitch([&](const char* name, bool on) { id += StrFormat(" %s=%d", name, on ? 1 : 0); });
  return HashBytes(id.data(), id.size());
}

void MakeKv(Engine::Impl* impl, const EngineOptions& o, int ctx) {
  int64_t kv_tokens = 0;
  KvCacheOptions ko = KvPlan(impl->model->config, o, ctx, &kv_tokens);
  if (o.stages) {  // the head's layers only; the stages replay its copy-on-write copies
    ko.layer_end = o.stages->head_layers();
  }
  if (!impl->backend->caps().kv_rings) ko.rings = false;
  impl->kv = std::make_unique<KvManager>(impl->model->config, ko, static_cast<int>(kv_tokens),
                                         impl->backend.get());
  if (!o.kv_disk.empty()) {
    if (o.stages)
      Fail("--kv-disk is not supported with pipeline stages (each holds only its layers)");
    KvDiskOptions d;
    d.dir = o.kv_disk;
    d.budget_bytes = o.kv_disk_budget;
    impl->kv->AttachDisk(d, KvIdentity(*impl, o, ctx));
  }
  if (o.stages) {
    StageLink* link = o.stages.get();
    impl->kv->SetCopyListener([link](int32_t from, int32_t to) { link->CopyBlock(from, to); });
  }
}

// The threads an engine runs on: its share's pool, the option, or one per physical core.
int ThreadsOf(const EngineOptions& o) {
  return o.compute ? o.compute->threads() : (o.threads > 0 ? o.threads : PhysicalCores());
}

int ContextOf(const ModelConfig& c, const EngineOptions& o) {
  const int ctx = o.context > 0 ? o.context : std::min(c.context_length, kDefaultMaxContext);
  if (ctx > c.context_length)
    Fail("context %d exceeds the model's trained context %d", ctx, c.context_length);
  return ctx;
}

}  // namespace

// An encoder runs each input whole in one step: the step holds the context; it generates
// nothing, so nothing a generation adds applies.
void EncoderOptions(const ModelConfig& c, int ctx, EngineOptions* o) {
  if (!c.encoder) return;
  if (o->stages) Fail("an encoder (%s) does not run in pipeline stages", c.arch.c_str());
  if (!o->mmproj.empty()) Fail("an encoder (%s) takes no image projector", c.arch.c_str());
  if (!o->lora_path.empty()) Fail("an encoder (%s) takes no LoRA adapter", c.arch.c_str());
  if (!o->draft_model.empty()) Fail("an encoder (%s) takes no draft model", c.arch.c_str());
  o->spec = "off";
  o->max_batch = std::min(4096, std::max(o->max_batch, ctx));
  // The KV cache holds one step's inputs (their keys and values live for that step only).
  if (o->kv_memory == 0 && o->kv_tokens == 0) o->kv_tokens = 2 * o->max_batch;
}

const char* ModelKindName(ModelKind k) {
  return k == ModelKind::kGeneration ? "generation"
         : k == ModelKind::kRerank   ? "rerank"
                                     : "embedding";
}

std::unique_ptr<Engine> Engine::Create(const EngineOptions& options) {
  const double t0 = NowSeconds();
  CheckOptions(options);
  EngineOptions o = options;
  // The trace file is opened first: an unwritable path fails before any work.
  std::unique_ptr<Tracer> tracer;
  if (!o.trace_path.empty()) {
    tracer = std::make_unique<Tracer>(o.trace_path);
    tracer->NameThread("main");
  }
  const Isa isa = ParseIsa(o.isa);
  auto impl = std::make_unique<Impl>();
  // (A memory map; a pipeline's head touches only its layers' pages.)
  impl->model = LoadModel(o.model_path, o.tokenizer_path, !o.stages);
  EncoderOptions(impl->model->config, ContextOf(impl->model->config, o), &o);
  // (Never a reranker's: its scores are thresholded as they are; bf16 moves them by ~1e-2.)
  // A device backend uploads the weights in their file encodings (no re-layout, no bf16 copy).
  const bool on_cpu = VulkanDeviceIndex(o.device) < 0;
  if (on_cpu && impl->model->config.encoder && impl->model->weights.cls == nullptr &&
      o.encoder_bf16 && o.forward.bf16_dot && GetKernels(isa).gemm_bf16_dot != nullptr)
    F16WeightsToBf16(impl->model.get());
  const uint64_t avail = AvailableMemoryBytes();
  std::vector<std::string> warnings = MemoryWarnings(*impl->model, o, avail);
  impl->model->tokenizer->RenderSpecial(o.render_special);
  if (!o.mmproj.empty()) {
    if (o.stages) Fail("images (--mmproj) are not supported with pipeline stages");
    auto vm = VisionModel::Load(o.mmproj);
    const VisionConfig& vc = vm->config();
    if (vc.text_dim != impl->model->config.dim)
      Fail(
          "the projector %s gives %d-wide embeddings, the model %s takes %d: a projector for "
          "another model",
          o.mmproj.c_str(), vc.text_dim, o.model_path.c_str(), impl->model->config.dim);
    if (vc.TokensPerTile() > o.max_batch)
      Fail("an image's %d tokens exceed the batch limit %d (raise --batch)", vc.TokensPerTile(),
           o.max_batch);
    if (o.relayout_weights) vm->RelayoutQuantized();
    if (o.image_bf16 && GetKernels(isa).gemm_bf16_dot != nullptr) vm->SetBf16Weights();
    impl->images =
        std::make_unique<ImageEncoder>(std::move(vm), *impl->model->tokenizer, o.image_cache_bytes);
  }
  // Re-laying out copies the weights into memory: only when they fit.
  const bool fits = avail == 0 || impl->model->weight_bytes <= avail;
  WeightRange range;  // a pipeline's head: its layers, not the output head
  if (o.stages) range = {0, o.stages->head_layers(), false};
  if (on_cpu && o.relayout_weights && o.forward.int8_activations && fits)
    RelayoutWeights(impl->model.get(), o.huge_pages, o.on_load_progress, range);
  const ModelConfig& c = impl->model->config;
  const int ctx = ContextOf(c, o);
  const int threads = ThreadsOf(o);
  MakeBackend(impl.get(), o, isa, threads, ctx);
  if (tracer) {
    tracer->Span("load", "engine", t0, NowSeconds(), "");
    impl->backend->SetTracer(tracer.get());
    impl->tracer = std::move(tracer);
  }
  MakeKv(impl.get(), o, ctx);
  impl->context = ctx;
  impl->sampler = std::make_unique<Sampler>(c.n_vocab);
  impl->grammars = std::make_unique<GrammarCache>(impl->model->tokenizer.get(), 64);
  impl->gen.tokens.reserve(static_cast<size_t>(ctx) + 1);
  impl->info = MakeInfo(*impl->model);
  impl->info.context = ctx;
  impl->info.kv_bytes = impl->kv->Memory().allocated_bytes;
  impl->info.kv_bytes_per_1k_tokens = impl->kv->Memory().bytes_per_token * 1000u;
  impl->info.scratch_bytes = impl->backend->scratch_bytes();
  impl->info.isa = IsaName(isa);
  impl->info.device = impl->backend->name();
  impl->info.on_device = OnDevice(*impl->backend);
  impl->info.threads = threads;
  SetUpSpeculation(impl.get(), o);
  if (o.mlock && mlockall(MCL_CURRENT) != 0) {
    Fail("--mlock: cannot lock the weights in memory (%s; raise `ulimit -l` or run as root)",
         std::strerror(errno));
  }
  impl->info.warnings = std::move(warnings);
  impl->load_seconds = NowSeconds() - t0;
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

const ModelInfo& Engine::info() const {
  return impl_->info;
}
double Engine::load_seconds() const {
  return impl_->load_seconds;
}

std::vector<int32_t> Engine::Tokenize(std::string_view text, bool add_bos,
                                      bool parse_special) const {
  return impl_->model->tokenizer->Encode(text, add_bos, parse_special);
}

std::vector<int32_t> Engine::TokenizeChat(
    std::string_view text, bool add_bos,
    const std::vector<std::pair<size_t, size_t>>& text_only) const {
  return impl_->model->tokenizer->Encode(text, add_bos, true, &text_only);
}

bool Engine::has_vision() const {
  return impl_->images != nullptr;
}

std::string Engine::vision_info() const {
  if (!impl_->images) return "";
  const VisionModel& m = impl_->images->model();
  const VisionConfig& c = m.config();
  return StrFormat(
      "%s projector (%s): ViT %d layers, dim %d, %dx%d input, patch %d, %d tokens a tile",
      ProjectorName(c.projector), FileStem(m.path()).c_str(), c.n_layers, c.dim, c.image_size,
      c.image_size, c.patch_size, c.TokensPerTile());
}

std::vector<int32_t> Engine::TokenizeImages(std::string_view text, bool add_bos,
                                            const std::vector<std::pair<size_t, size_t>>* text_only,
                                            const std::vector<std::string>& images,
                                            std::shared_ptr<const PromptImages>* out) const {
  if (!impl_->images)
    Fail(
        "the model %s reads text only: it takes no images (start it with --mmproj FILE, a "
        "vision projector for it)",
        FileStem(info().path).c_str());
  std::vector<std::shared_ptr<const PixelTiles>> px;
  for (const std::string& bytes : images)
    px.push_back(
        std::make_shared<const PixelTiles>(impl_->images->model().Preprocess(DecodeImage(bytes))));
  return impl_->images->Tokenize(*impl_->model->tokenizer, text, add_bos, text_only, std::move(px),
                                 out);
}

double Engine::EncodeImages(const PromptImages& images, bool fresh) {
  if (!impl_->images) Fail("no vision projector");
  const double t0 = NowSeconds();
  bool any = false;
  for (const auto& s : images.spans) {
    if (!fresh && impl_->images->Cached(images, s)) continue;
    impl_->images->EncodeNow(images, s, *impl_->kernels, *impl_->pool);
    any = true;
  }
  return any ? NowSeconds() - t0 : 0;
}

std::vector<std::vector<float>> Engine::ImageEmbeddings(const PromptImages& images) {
  if (!impl_->images) Fail("no vision projector");
  std::vector<std::vector<float>> out;
  for (const auto& s : images.spans) {
    auto v = impl_->images->Cached(images, s);
    if (!v) v = impl_->images->EncodeNow(images, s, *impl_->kernels, *impl_->pool);
    out.push_back(*v);
  }
  return out;
}

std::string Engine::Detokenize(const std::vector<int32_t>& tokens) const {
  const Tokenizer& tok = *impl_->model->tokenizer;
  std::string out;
  Utf8Stream utf8;
  int prev = -1;
  for (int32_t t : tokens) {
    utf8.Feed(tok.Decode(prev, t), &out);
    prev = t;
  }
  utf8.Flush(&out);
  return out;
}

bool Engine::AddsBos() const {
  return impl_->model->tokenizer->add_bos_default();
}
std::vector<int32_t> Engine::RerankInput(const std::vector<int32_t>& query,
                                         const std::vector<int32_t>& doc) const {
  // [BOS] query [EOS] [SEP] document [EOS], each special by the vocabulary's flag (llama.cpp's
  // rule; EOS is [SEP] where the vocabulary has none).
  const Tokenizer& t = *impl_->model->tokenizer;
  const int32_t eos = t.eos() >= 0 ? t.eos() : t.sep();
  std::vector<int32_t> in;
  in.reserve(query.size() + doc.size() + 4);
  if (t.add_bos_default() && t.bos() >= 0) in.push_back(t.bos());
  in.insert(in.end(), query.begin(), query.end());
  if (t.add_eos_default() && eos >= 0) in.push_back(eos);
  if (t.add_sep_default() && t.sep() >= 0) in.push_back(t.sep());
  in.insert(in.end(), doc.begin(), doc.end());
  if (t.add_eos_default() && eos >= 0) in.push_back(eos);
  return in;
}

void Engine::KvDiskStatsNow(MemoryReport* r) const {
  const KvDiskTier* d = impl_->kv->disk();
  if (d == nullptr) return;
  const KvDiskStats k = d->stats();  // (the tier's own lock: any thread)
  r->kv_disk = true;
  r->kv_disk_writes_stopped = k.writes_stopped;
  r->kv_disk_hits = k.hits;
  r->kv_disk_misses = k.misses;
  r->kv_disk_corrupt = k.corrupt;
  r->kv_disk_refused = k.refused;
  r->kv_disk_blocks_written = k.blocks_written;
  r->kv_disk_bytes_written = k.bytes_written;
  r->kv_disk_bytes_read = k.bytes_read;
  r->kv_disk_dropped = k.dropped_writes;
  r->kv_disk_write_errors = k.write_errors;
  r->kv_disk_evicted = k.evicted;
  r->kv_disk_bytes = k.bytes_on_disk;
  r->kv_disk_budget = k.budget_bytes;
  r->kv_disk_read_seconds = k.read_seconds;
}

void Engine::FlushKvDisk() {
  impl_->kv->FlushDisk();
}

MemoryReport Engine::Memory() const {
  const KvMemoryStats m = impl_->kv->Memory();
  const PrefixCacheStats& p = impl_->kv->pool().stats();
  MemoryReport r;
  r.weight_bytes = impl_->model->weight_bytes;
  if (impl_->stages) {  // a pipeline's head: the embeddings and its layers
    r.weight_bytes = EmbeddingBytes(*impl_->model);
    for (int l = 0; l < impl_->stages->head_layers(); ++l)
      r.weight_bytes += LayerWeightBytes(*impl_->model, l);
  }
  r.kv_allocated_bytes = m.allocated_bytes;
  r.kv_used_bytes = m.used_bytes;
  r.kv_bytes_per_token = m.bytes_per_token;
  r.scratch_bytes = impl_->backend->scratch_bytes();
  r.spec_bytes = impl_->proposer != nullptr ? impl_->proposer->MemoryBytes() : 0;
  r.device_allocated_bytes = impl_->backend->device_allocated();
  r.device_total_bytes = impl_->backend->device_total();
  r.kv_block_size = impl_->kv->block_size();
  r.kv_total_blocks = m.total_blocks;
  r.kv_used_blocks = m.used_blocks;
  r.prefix_queries = p.queries;
  r.prefix_hits = p.hits;
  r.prefix_evictions = p.evictions;
  r.kv_window = impl_->kv->window();
  r.kv_state_bytes = m.state_bytes;
  r.kv_state_slots = m.state_slots;
  r.kv_used_states = m.used_states;
  r.kv_state_snapshots = impl_->kv->snapshots();
  r.kv_state_snapshot_slots = m.snapshot_slots;
  KvDiskStatsNow(&r);
  return r;
}

const float* Engine::Evaluate(const std::vector<int32_t>& tokens, int pos) {
  Impl& s = *impl_;
  if (tokens.empty()) Fail("Evaluate: no tokens");
  if (pos == 0 || s.eval_seq < 0) {
    if (s.eval_seq >= 0) s.kv->Free(s.eval_seq);
    s.eval_seq = s.kv->Create(s.context);
  }
  if (pos != s.kv->Length(s.eval_seq))
    Fail("Evaluate: position %d does not continue the sequence (length %d)", pos,
         s.kv->Length(s.eval_seq));
  const int n = static_cast<int>(tokens.size());
  if (pos + n > s.context || !s.kv->Reserve(s.eval_seq, pos + n))
    Fail("Evaluate: %d tokens do not fit the KV cache", pos + n);
  return s.Step(s.eval_seq, tokens.data(), n, pos);
}

int Engine::max_eval_tokens() const {
  return impl_->backend->max_items();
}

const float* Engine::EvaluateAll(const std::vector<int32_t>& tokens, int pos) {
  Impl& s = *impl_;
  const int n = static_cast<int>(tokens.size());
  if (n == 0) Fail("EvaluateAll: no tokens");
  if (n > max_eval_tokens())
    Fail("EvaluateAll: %d tokens exceed the %d per call", n, max_eval_tokens());
  if (pos == 0 || s.eval_seq < 0) {
    if (s.eval_seq >= 0) s.kv->Free(s.eval_seq);
    s.eval_seq = s.kv->Create(s.context);
  }
  if (pos != s.kv->Length(s.eval_seq))
    Fail("EvaluateAll: position %d does not continue the sequence (length %d)", pos,
         s.kv->Length(s.eval_seq));
  if (pos + n > s.context || !s.kv->Reserve(s.eval_seq, pos + n))
    Fail("EvaluateAll: %d tokens do not fit the KV cache", pos + n);
  // One batch item per token of the same sequence: every position gets its logits (the step
  // stores all keys and values before any token attends, so each sees the ones before it).
  const KvView view = s.kv->View(s.eval_seq);
  std::vector<StepItem> items(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    items[static_cast<size_t>(i)] = {&tokens[static_cast<size_t>(i)], 1, pos + i, &view};
  std::vector<const float*> logits(static_cast<size_t>(n));
  s.StepBatch(items.data(), n, logits.data());
  s.kv->Commit(s.eval_seq, tokens.data(), n);
  return logits[0];  // the rows are consecutive
}

void ParseLoraArg(const std::string& v, std::string* path, float* scale) {
  *path = v;
  *scale = 1;
  if (const size_t c = v.rfind(':'); c != std::string::npos && c + 1 < v.size()) {
    char* end = nullptr;
    const double sc = std::strtod(v.c_str() + c + 1, &end);
    if (*end == '\0') {
      if (!(std::fabs(sc) <= 1000)) Fail("'%s': the scale must be within -1000..1000", v.c_str());
      *path = v.substr(0, c);
      *scale = static_cast<float>(sc);
    }
  }
  if (path->empty()) Fail("'%s': an adapter is FILE or FILE:SCALE", v.c_str());
}

std::shared_ptr<const LoraAdapter> Engine::LoadLora(const std::string& path, float scale) const {
  SupportQuery q;
  q.lora = true;
  CheckSupport(*impl_->model, impl_->backend->caps(), q);
  return LoraAdapter::Load(path, *impl_->model, scale);
}

std::shared_ptr<const Grammar> Engine::CompileGrammar(GrammarKind kind,
                                                      std::string_view text) const {
  return impl_->grammars->Compile(kind, text);
}

GenerateResult Engine::Generate(std::string_view prompt, const GenerateOptions& o,
                                const StreamCallback& on_text) {
  return GenerateTokens(Tokenize(prompt, o.add_bos, o.parse_special), o, on_text);
}

ModelInfo InspectModel(const std::string& model_path, const std::string& tokenizer_path) {
  auto m = LoadModel(model_path, tokenizer_path);
  return MakeInfo(*m);
}

MemoryReport EstimateMemory(const EngineOptions& options) {
  CheckOptions(options);
  EngineOptions o = options;
  auto m = LoadModel(o.model_path, o.tokenizer_path);
  const ModelConfig& c = m->config;
  const int ctx = ContextOf(c, o);
  EncoderOptions(c, ctx, &o);
  int64_t kv_tokens = 0;
  const KvCacheOptions ko = KvPlan(c, o, ctx, &kv_tokens);
  MemoryReport r;
  r.weight_bytes = m->weight_bytes;
  if (!o.mmproj.empty()) {  // the projector's weights (a memory map) and its tile cache
    std::error_code ec;
    const auto size = std::filesystem::file_size(o.mmproj, ec);
    if (ec) Fail("projector %s: %s", o.mmproj.c_str(), ec.message().c_str());
    r.weight_bytes += static_cast<uint64_t>(size) + o.image_cache_bytes;
  }
  r.kv_bytes_per_token = KvBytesPerToken(c, ko);
  r.kv_block_size = ko.block_size;
  r.kv_total_blocks = KvPoolBlocks(c, ko, static_cast<int>(kv_tokens));
  r.kv_allocated_bytes = static_cast<uint64_t>(r.kv_total_blocks) * r.kv_bytes_per_token *
                         static_cast<uint64_t>(ko.block_size);
  if (KvStateBytes(c, ko) > 0) {  // the states' slots (recurrent, rings), sequences', snapshots'
    r.kv_state_bytes = KvStateBytes(c, ko);
    r.kv_state_slots = ko.state_slots;
    r.kv_state_snapshot_slots = ko.prefix_cache && ko.snapshot_every > 0 ? ko.snapshot_slots : 0;
    r.kv_allocated_bytes +=
        r.kv_state_bytes * static_cast<uint64_t>(r.kv_state_slots + r.kv_state_snapshot_slots);
  }
  if (o.stages) {  // a pipeline's head: the embeddings and its layers, its layers' KV
    const int head = o.stages->head_layers();
    r.weight_bytes = EmbeddingBytes(*m);
    for (int l = 0; l < head; ++l) r.weight_bytes += LayerWeightBytes(*m, l);
    r.kv_allocated_bytes =
        r.kv_allocated_bytes * static_cast<uint64_t>(head) / static_cast<uint64_t>(c.n_layers);
  }
  // The activation arena as Activations::Plan lays it out, and the matmul inputs' int8, bf16
  // and tile copies (Transformer::AllocQuantized), for max_batch tokens: each at its largest.
  const uint64_t B = static_cast<uint64_t>(std::max(1, o.max_batch));
  const uint64_t T = static_cast<uint64_t>(ThreadsOf(o));
  const uint64_t hd = static_cast<uint64_t>(c.max_head_dim());
  const uint64_t q = static_cast<uint64_t>(c.max_q_dim());
  const uint64_t cols = static_cast<uint64_t>(std::max({c.dim, c.max_q_dim(), c.max_ffn_dim()}));
  const uint64_t pl = static_cast<uint64_t>(c.n_layers) * static_cast<uint64_t>(c.per_layer_dim);
  const uint64_t moe_rows = B * static_cast<uint64_t>(c.n_experts_used);
  const uint64_t hidden = std::max(B * static_cast<uint64_t>(c.max_ffn_dim()),
                                   moe_rows * static_cast<uint64_t>(c.expert_ffn_dim));
  const uint64_t items = std::min<uint64_t>(B, 256);
  const uint64_t rows = static_cast<uint64_t>(kAttnMaxRows);
  const uint64_t floats =
      B * (2 * static_cast<uint64_t>(c.dim) + 2 * q + 2 * static_cast<uint64_t>(c.max_kv_dim())) +
      2 * hidden + items * static_cast<uint64_t>(c.n_vocab) +
      2 * B * static_cast<uint64_t>(c.rope_dim / 2 + c.LocalRopeDim() / 2) +
      T * (std::max<uint64_t>(static_cast<uint64_t>(ctx), 2 * static_cast<uint64_t>(c.n_heads)) +
           q + AttendScratchFloats(static_cast<int>(hd)) + rows * hd + 2 * rows * (hd + 2)) +
      (B + 1) * pl + B * static_cast<uint64_t>(c.n_experts) +
      2 * moe_rows * static_cast<uint64_t>(c.dim) +
      (c.is_moe() ? B * static_cast<uint64_t>(c.dim) : 0) + 32 * 16;
  const uint64_t act = std::max(B * cols, moe_rows * static_cast<uint64_t>(c.expert_ffn_dim));
  // int8 inputs with their scales and sums, the tile packing, the bf16 copy.
  r.scratch_bytes = 4 * floats + act + act / 4 + act + act / 4 + 2 * (B + 16) * cols +
                    (c.is_moe() ? moe_rows * static_cast<uint64_t>(c.dim) * 5 / 4 : 0);
  return r;
}

ComputeShare::ComputeShare(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ComputeShare::~ComputeShare() = default;
std::shared_ptr<ComputeShare> ComputeShare::Create(int threads) {
  auto impl = std::make_unique<Impl>();
  impl->pool = std::make_shared<ThreadPool>(threads > 0 ? threads : PhysicalCores());
  return std::shared_ptr<ComputeShare>(new ComputeShare(std::move(impl)));
}
int ComputeShare::threads() const {
  return impl_->pool->size();
}

struct Vocabulary::Impl {
  std::unique_ptr<Tokenizer> tok;
};
Vocabulary::Vocabulary(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Vocabulary::~Vocabulary() = default;

std::unique_ptr<Vocabulary> Vocabulary::Load(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->tok = LoadTokenizer(path);
  return std::unique_ptr<Vocabulary>(new Vocabulary(std::move(impl)));
}
int Vocabulary::size() const {
  return impl_->tok->vocab_size();
}
std::vector<int32_t> Vocabulary::Tokenize(std::string_view text, bool add_bos,
                                          bool parse_special) const {
  return impl_->tok->Encode(text, add_bos, parse_special);
}
std::string_view Vocabulary::Piece(int id) const {
  return impl_->tok->Piece(id);
}

}  // namespace paddock
