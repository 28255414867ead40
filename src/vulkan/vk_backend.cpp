// vulkan/vk_backend.cpp: the Vulkan backend (vulkan/backend.h): weights uploaded once in their
// file encodings, the KV blocks in device memory, one planned activation arena, a step
// recorded once per shape (tokens, rows, output) and replayed with one host wait.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>

#include "base/strings.h"
#include "model/backend.h"
#include "model/layer_ops.h"
#include "model/rope.h"
#include "model/transformer.h"
#include "model/weights.h"
#include "vulkan/device.h"
#include "vulkan/kv_store.h"

namespace paddock {
namespace {

using vk::Buffer;
using vk::Device;
using vk::Shader;
using namespace vk;  // the shaders' push constants

constexpr int kMaxItems = 256;    // sequences (and logits rows) per step, as the CPU's
constexpr int kMaxHeadDim = 256;  // attention.comp's query row
// A prompt of more tokens than one matrix-vector pass takes (matvec.comp's 8) runs its tokens
// on the tiled product; every other token (decode, short prompts, scoring, verification) on
// the matrix-vector one. Chosen per token by its sequence's prompt, never by the step, so a
// token's result is the same whatever it is batched with (AltPromptTokens).
constexpr int kTiledMinPrompt = static_cast<int>(vk::kMatvecTokens) + 1;

// A weight type's index among the matrix shaders' (device.h: kWeightTypes), or -1: none.
int MatType(GgmlType t) {
  const GgmlType types[kWeightTypes] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16,
                                        GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K,
                                        GgmlType::kQ5_K, GgmlType::kQ6_K};
  for (int i = 0; i < kWeightTypes; ++i)
    if (types[i] == t) return i;
  return -1;
}

// A weight matrix in device memory, in its file encoding.
struct DevMat {
  Buffer buf;
  int type = -1;  // MatType
  uint32_t rows = 0, cols = 0, row_bytes = 0;
};

uint32_t Groups(uint64_t n, uint32_t per) {
  return static_cast<uint32_t>((n + per - 1) / per);
}

class VulkanBackend final : public Backend {
 public:
  VulkanBackend(const LoadedModel& model, const VulkanOptions& o);
  ~VulkanBackend() override;

  std::string name() const override { return StrFormat("vulkan:%d", dev_.info().index); }
  const ModelConfig& config() const override { return cfg_; }
  int max_batch() const override { return max_batch_; }
  int max_items() const override { return kMaxItems; }
  size_t scratch_bytes() const override {
    return arena_.size + in_.size + out_.size + (tail_ ? tail_->scratch_bytes() : 0);
  }
  void Configure(const ForwardOptions& o) override {
    opt_ = o;
    const uint32_t wg = o.device_matvec_wg > 0 ? o.device_matvec_wg : 64;
    if (wg != dev_.matvec_workgroup()) {
      dev_.SetMatvecWorkgroup(wg);
      for (auto& [key, cb] : recorded_) dev_.FreeCommands(cb);  // (they bound the old pipelines)
      recorded_.clear();
    }
    if (tail_) {
      ForwardOptions f = o;
      f.bf16_prefill = false;
      tail_->Configure(f);
    }
  }
  const ForwardOptions& options() const override { return opt_; }
  void SetContext(int n_ctx) override {
    ctx_ = n_ctx;
    rope_.Set(cfg_, model_.weights, n_ctx);
    if (tail_) tail_->SetContext(n_ctx);
  }
  void SetDefaultLora(const LoraAdapter* a) override {
    if (a != nullptr) Fail("the vulkan backend runs no LoRA adapters (--device cpu does)");
  }
  std::unique_ptr<KvStore> AllocKv(const KvLayout& layout) override;
  int AltPromptTokens(int prompt_len) const override {
    return prompt_len >= kTiledMinPrompt ? prompt_len : 0;
  }
  std::string Fault() const override { return dev_.fault(); }
  uint64_t device_allocated() const override { return dev_.allocated(); }
  uint64_t device_total() const override { return dev_.info().memory; }
  double ReadBandwidthGbs(int passes) override {
    const uint64_t mem = dev_.info().memory;
    return dev_.ReadBandwidth(mem > 0 ? std::min<uint64_t>(256u << 20, mem / 8) : 64u << 20,
                              passes);
  }
  void SetProfiler(Profiler* p) override {
    if (tail_) tail_->SetProfiler(p);
  }
  void SetTracer(Tracer* t) override {
    if (tail_) tail_->SetTracer(t);
  }
  void Step(const StepItem* items, int n_items, StepOutput out, const float** rows) override;

 private:
  struct LayerDev {
    DevMat wq, wk, wv, wo, gate, up, down;
  };
  void CheckModel() const;
  void CheckMemory(const VulkanOptions& o) const;
  DevMat Upload(const WeightTensor& w, const char* what, int layer);
  void Vec(const float* v, size_t n);
  uint64_t Addr(const float* v) const;
  void PlanArena();
  int Plan(const StepItem* items, int n_items, int* rows_out);
  VkCommandBuffer Record(int n_mv, int n, int rows, bool hidden);
  // Y = X W^T for the step's n tokens: the first n_mv_ on the matrix-vector shader, the rest on
  // the tiled one (n_mv: that split for this call).
  void Matmul(VkCommandBuffer cb, const DevMat& w, uint64_t x, uint64_t y, uint64_t bias, int n,
              uint32_t x_stride, uint32_t y_stride, int n_mv = -1);
  void Norm(VkCommandBuffer cb, uint64_t x, uint64_t y, uint64_t w, uint64_t b, uint64_t res,
            uint64_t idx, uint32_t rows, uint32_t cols, uint32_t x_stride, uint32_t y_stride,
            bool layer_norm);
  void RecordLayer(VkCommandBuffer cb, int l, int n);
  void RecordQkv(VkCommandBuffer cb, int l, int n);

  const LoadedModel& model_;
  const ModelConfig& cfg_;
  Device dev_;
  ForwardOptions opt_;
  int max_batch_;
  int layers_on_ = 0;                  // layers [0, layers_on_) run here
  std::unique_ptr<Transformer> tail_;  // the others and the output head (partial offload)
  int ctx_ = 0;
  int block_ = 16;
  RopeAngles rope_;
  std::vector<std::vector<LayerOp>> ops_;
  std::vector<LayerDev> layers_;
  DevMat output_;
  std::vector<float> small_;  // the norms' and biases' floats, uploaded once into vecs_
  std::map<const float*, size_t> vec_at_;  // their offsets in vecs_
  Buffer vecs_;
  std::vector<Buffer> mats_;
  std::vector<uint64_t> kv_k_, kv_v_;  // per layer, the KV store's buffers
  // The arena (device): x, xb, q, k, v, att, hb, hb2. The step's inputs (host-visible): x_in,
  // cos / sin (and local), slots, info, tables, logits row index; its outputs: hid, logits.
  Buffer arena_, in_, out_;
  uint64_t x_ = 0, xb_ = 0, q_ = 0, k_ = 0, v_ = 0, att_ = 0, hb_ = 0, hb2_ = 0;
  size_t in_x_ = 0, in_cos_ = 0, in_sin_ = 0, in_cosl_ = 0, in_sinl_ = 0, in_slots_ = 0,
         in_info_ = 0, in_idx_ = 0, in_tables_ = 0, tables_cap_ = 0;
  size_t out_hid_ = 0, out_logits_ = 0, out_x_ = 0;
  std::map<uint64_t, VkCommandBuffer> recorded_;
  std::vector<float> emb_row_;
  // The shapes the dispatches take: dim, q_dim, kv_dim, head_dim, heads, KV heads.
  struct Dims {
    uint32_t dim, qd, kvd, hd, nq, nkv;
  } dims_;
  int n_mv_ = 0;               // the step's tokens on the matrix-vector shader (they come first)
  std::vector<int32_t> row_;   // per token in item order, its row in the step (planned once)
  std::vector<float> tail_x_;  // a partial offload's residual rows back in item order
};

VulkanBackend::VulkanBackend(const LoadedModel& model, const VulkanOptions& o)
    : model_(model),
      cfg_(model.config),
      dev_(o.device),
      opt_(o.forward),
      max_batch_(std::max(1, o.max_batch)),
      dims_{static_cast<uint32_t>(cfg_.dim),      static_cast<uint32_t>(cfg_.q_dim()),
            static_cast<uint32_t>(cfg_.kv_dim()), static_cast<uint32_t>(cfg_.head_dim),
            static_cast<uint32_t>(cfg_.n_heads),  static_cast<uint32_t>(cfg_.n_kv_heads)} {
  CheckModel();
  if (const char* lose = std::getenv("PADDOCK_VULKAN_LOSE_AFTER")) dev_.LoseAfter(std::atoi(lose));
  ops_ = LayerOps(cfg_, model.weights);
  for (const auto& layer : ops_)
    for (const LayerOp& op : layer)
      if (op.kind == OpKind::kMoe || op.kind == OpKind::kAddNorm)
        Fail("the vulkan backend has no %s (the model %s runs with --device cpu)", OpName(op.kind),
             cfg_.arch.c_str());
  layers_on_ = o.layers < 0 ? cfg_.n_layers : o.layers;
  if (layers_on_ < 1 || layers_on_ > cfg_.n_layers)
    Fail("--gpu-layers %d: the model has %d layers (1 to %d run on the device; 0: --device cpu)",
         o.layers, cfg_.n_layers, cfg_.n_layers);
  CheckMemory(o);
  if (layers_on_ < cfg_.n_layers) {  // the rest on the CPU kernels, from the device's residual
    if (o.kernels == nullptr || o.pool == nullptr)
      Fail("the vulkan backend: a partial offload needs the CPU's kernels");
    ForwardOptions f = o.forward;
    f.bf16_prefill = false;  // (which tokens take another path is this backend's choice)
    tail_ = std::make_unique<Transformer>(model, *o.kernels, *o.pool, max_batch_, f);
    tail_->SetLayers(layers_on_, cfg_.n_layers);
  }
  const ModelWeights& w = model.weights;
  for (int l = 0; l < layers_on_; ++l) {
    const LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    LayerDev d;
    d.wq = Upload(lw.wq, "attn_q", l);
    d.wk = Upload(lw.wk, "attn_k", l);
    d.wv = Upload(lw.wv, "attn_v", l);
    d.wo = Upload(lw.wo, "attn_output", l);
    d.gate = Upload(lw.w_gate, "ffn_gate", l);
    d.up = Upload(lw.w_up, "ffn_up", l);
    d.down = Upload(lw.w_down, "ffn_down", l);
    const size_t dim = static_cast<size_t>(cfg_.dim), hd = static_cast<size_t>(cfg_.head_dim);
    const size_t kvd = static_cast<size_t>(cfg_.kv_dim());
    for (const float* v : {lw.attn_norm, lw.attn_norm_b, lw.ffn_norm, lw.ffn_norm_b,
                           lw.post_attn_norm, lw.post_ffn_norm, lw.bo, lw.b_down})
      Vec(v, dim);
    Vec(lw.bq, static_cast<size_t>(cfg_.q_dim()));
    Vec(lw.bk, kvd);
    Vec(lw.bv, kvd);
    Vec(lw.b_up, static_cast<size_t>(lw.w_up.rows));
    Vec(lw.q_norm, hd);
    Vec(lw.k_norm, hd);
    layers_.push_back(d);
  }
  if (!tail_) output_ = Upload(w.output, "output", -1);
  Vec(w.output_norm, static_cast<size_t>(cfg_.dim));
  Vec(w.output_norm_b, static_cast<size_t>(cfg_.dim));
  // Every vector in one buffer, uploaded once; the ops find theirs by the host pointer.
  vecs_ = dev_.Alloc(small_.size() * sizeof(float), false, "the norms and biases");
  dev_.Upload(vecs_, 0, small_.data(), small_.size() * sizeof(float));
  small_.clear();
  PlanArena();
  Configure(o.forward);
  SetContext(cfg_.context_length);
  emb_row_.resize(static_cast<size_t>(cfg_.dim));
  row_.resize(static_cast<size_t>(max_batch_));
  if (tail_) tail_x_.resize(static_cast<size_t>(max_batch_) * static_cast<size_t>(cfg_.dim));
}

VulkanBackend::~VulkanBackend() {
  for (auto& [key, cb] : recorded_) dev_.FreeCommands(cb);
  for (Buffer& b : mats_) dev_.Free(&b);
  for (Buffer* b : {&vecs_, &arena_, &in_, &out_}) dev_.Free(b);
}

// What the shaders cannot run, refused by name before anything is uploaded.
void VulkanBackend::CheckModel() const {
  const ModelConfig& c = cfg_;
  const char* what = nullptr;
  if (c.encoder)
    what = "encoders (embedding and reranking models)";
  else if (c.is_moe())
    what = "mixtures of experts";
  else if (!c.ffn_gated)
    what = "ungated FFNs (GPT-2)";
  else if (c.ffn_act == FfnAct::kSwigluOai)
    what = "gpt-oss's clamped SwiGLU";
  else if (c.attn_sinks)
    what = "attention sinks";
  else if (c.qk_norm_full)
    what = "QK-norm over whole rows";
  else if (c.head_dim > kMaxHeadDim || c.head_dim % 2 != 0)
    what = "this head size";
  if (what != nullptr)
    Fail(
        "the vulkan backend has no shader for %s (the model's architecture %s runs with --device "
        "cpu)",
        what, c.arch.c_str());
}

// The weights this device runs against its memory (or the --device-memory budget), before any
// upload; too large: how many layers fit (--gpu-layers), the output head staying on the CPU.
void VulkanBackend::CheckMemory(const VulkanOptions& o) const {
  const uint64_t have = o.memory > 0 ? o.memory : dev_.info().memory;
  if (have == 0) return;
  const uint64_t head =
      OutputHeadBytes(model_) > 0 ? OutputHeadBytes(model_) : EmbeddingBytes(model_);
  uint64_t need = layers_on_ == cfg_.n_layers ? head : 0;
  for (int l = 0; l < layers_on_; ++l) need += LayerWeightBytes(model_, l);
  if (need <= have) return;
  int fit = 0;
  uint64_t fit_bytes = 0;
  while (fit < cfg_.n_layers && fit_bytes + LayerWeightBytes(model_, fit) <= have)
    fit_bytes += LayerWeightBytes(model_, fit++);
  const std::string budget =
      StrFormat("the Vulkan device's %s (%s%s)", FormatBytes(have).c_str(),
                dev_.info().name.c_str(), o.memory > 0 ? ", the --device-memory budget" : "");
  if (fit == 0)
    Fail(
        "the model's %s of weights (%d layers) exceed %s, and so does its first layer "
        "(%s): run it with --device cpu",
        FormatBytes(need).c_str(), layers_on_, budget.c_str(),
        FormatBytes(LayerWeightBytes(model_, 0)).c_str());
  Fail(
      "the model's %s of weights (%d layers) exceed %s: --gpu-layers %d fits (%s on the "
      "device, the other layers and the output head on the CPU), or run with --device cpu",
      FormatBytes(need).c_str(), layers_on_, budget.c_str(), fit, FormatBytes(fit_bytes).c_str());
}

DevMat VulkanBackend::Upload(const WeightTensor& w, const char* what, int layer) {
  DevMat m;
  if (!w) return m;
  m.type = MatType(w.type);
  const std::string where = layer >= 0 ? StrFormat("layer %d's %s", layer, what) : what;
  if (m.type < 0)
    Fail(
        "the vulkan backend has no shader for %s weights (%s); it runs F32, F16, BF16, Q8_0, "
        "Q4_0, Q4_K, Q5_K and Q6_K (--device cpu runs every type)",
        TypeName(w.type), where.c_str());
  const uint64_t bytes = static_cast<uint64_t>(w.rows) * w.row_bytes;
  if (bytes >= (uint64_t{1} << 32))
    Fail("%s is %s: the vulkan backend's matrices are under 4 GiB each", where.c_str(),
         FormatBytes(bytes).c_str());
  m.rows = static_cast<uint32_t>(w.rows);
  m.cols = static_cast<uint32_t>(w.cols);
  m.row_bytes = static_cast<uint32_t>(w.row_bytes);
  m.buf = dev_.Alloc(bytes + 16, false, where.c_str());  // (dequant.glsl reads a word past)
  dev_.Upload(m.buf, 0, w.data, bytes);
  mats_.push_back(m.buf);
  return m;
}

// A vector into small_ (16-byte aligned), its offset kept by its host pointer.
void VulkanBackend::Vec(const float* v, size_t n) {
  if (v == nullptr || vec_at_.count(v) != 0) return;
  while (small_.size() % 4 != 0) small_.push_back(0.0f);
  vec_at_[v] = small_.size() * sizeof(float);
  small_.insert(small_.end(), v, v + n);
}

// The device address of a norm's or bias's vector (0: null).
uint64_t VulkanBackend::Addr(const float* v) const {
  if (v == nullptr) return 0;
  const auto it = vec_at_.find(v);
  if (it == vec_at_.end()) Fail("the vulkan backend: a vector was not uploaded");
  return vecs_.addr + it->second;
}

// The activations, planned once for max_batch tokens and kMaxItems rows.
void VulkanBackend::PlanArena() {
  const size_t B = static_cast<size_t>(max_batch_), dim = static_cast<size_t>(cfg_.dim);
  const size_t qd = static_cast<size_t>(cfg_.q_dim()), kvd = static_cast<size_t>(cfg_.kv_dim());
  const size_t ffn = static_cast<size_t>(cfg_.ffn_dim), f = sizeof(float);
  size_t off = 0;
  auto take = [&](size_t floats) {
    const size_t at = off;
    off += (floats * f + 255) / 256 * 256;
    return at;
  };
  const size_t ox = take(B * dim), oxb = take(B * dim), oq = take(B * qd), ok = take(B * kvd),
               ov = take(B * kvd), oatt = take(B * qd), ohb = take(B * ffn), ohb2 = take(B * ffn);
  arena_ = dev_.Alloc(off, false, "the activations");
  x_ = arena_.addr + ox;
  xb_ = arena_.addr + oxb;
  q_ = arena_.addr + oq;
  k_ = arena_.addr + ok;
  v_ = arena_.addr + ov;
  att_ = arena_.addr + oatt;
  hb_ = arena_.addr + ohb;
  hb2_ = arena_.addr + ohb2;
  const size_t half = static_cast<size_t>(cfg_.rope_dim / 2);
  off = 0;
  in_x_ = take(B * dim);
  in_cos_ = take(B * half);
  in_sin_ = take(B * half);
  in_cosl_ = take(B * half);
  in_sinl_ = take(B * half);
  in_slots_ = take(B);
  in_info_ = take(4 * B);
  in_idx_ = take(kMaxItems);
  in_tables_ = off;
  tables_cap_ = 0;  // (the tables' room: Plan, once the block size and context are known)
  off = 0;
  out_hid_ = take(kMaxItems * dim);
  out_logits_ = take(static_cast<size_t>(kMaxItems) * static_cast<size_t>(cfg_.n_vocab));
  out_x_ = tail_ ? take(B * dim) : off;  // a partial offload's residual stream, read back
  out_ = dev_.Alloc(off, true, "the step's outputs");
}

std::unique_ptr<KvStore> VulkanBackend::AllocKv(const KvLayout& layout) {
  std::unique_ptr<KvStore> store = NewDeviceKvStore(&dev_, layout, static_cast<size_t>(layers_on_));
  block_ = layout.block_size;
  kv_k_.clear();
  kv_v_.clear();
  for (size_t l = 0; l < static_cast<size_t>(layers_on_); ++l) {
    kv_k_.push_back(reinterpret_cast<uint64_t>(store->layers()[l].k));
    kv_v_.push_back(reinterpret_cast<uint64_t>(store->layers()[l].v));
  }
  for (auto& [key, cb] : recorded_) dev_.FreeCommands(cb);  // they named the old buffers
  recorded_.clear();
  return store;
}

// The step's inputs into the host-visible buffer: each token's embedding row (the host reads
// the embedding table: a row per token), RoPE rows, KV slot, attention range and its
// sequence's block table; the logits rows. Returns the step's tokens.
int VulkanBackend::Plan(const StepItem* items, int n_items, int* rows_out) {
  if (n_items < 1 || n_items > kMaxItems)
    Fail("Forward: %d sequences in one step (1 to %d allowed)", n_items, kMaxItems);
  const size_t need_tables =
      static_cast<size_t>(kMaxItems) * static_cast<size_t>(ctx_ / block_ + 2);
  if (in_.buf == VK_NULL_HANDLE || need_tables > tables_cap_) {  // once per context and block
    dev_.Free(&in_);
    tables_cap_ = need_tables;
    in_ = dev_.Alloc(in_tables_ + tables_cap_ * sizeof(int32_t), true, "the step's inputs");
    for (auto& [key, cb] : recorded_) dev_.FreeCommands(cb);
    recorded_.clear();
  }
  const int dim = cfg_.dim, half = cfg_.rope_dim / 2;
  const bool local = cfg_.rope_base_local > 0;
  auto f32 = [&](size_t off) { return reinterpret_cast<float*>(in_.map + off); };
  auto i32 = [&](size_t off) { return reinterpret_cast<int32_t*>(in_.map + off); };
  float* x = f32(in_x_);
  int32_t* slots = i32(in_slots_);
  int32_t* info = i32(in_info_);
  int32_t* idx = i32(in_idx_);
  int32_t* tables = i32(in_tables_);
  const ModelWeights& w = model_.weights;
  const DequantizeFn to_float = Traits(w.tok_embd.type).to_float;
  // The tokens on the matrix-vector shader come first, those of long prompts after them.
  int n_tiled = 0, n_all = 0;
  for (int i = 0; i < n_items; ++i) {
    const int until = AltPromptTokens(items[i].prompt_len);
    n_tiled += std::clamp(until - items[i].pos, 0, std::max(0, items[i].n));
    n_all += std::max(0, items[i].n);
  }
  int n = 0, rows = 0, mv = 0, tl = 0;
  size_t tpos = 0;
  for (int i = 0; i < n_items; ++i) {
    const StepItem& it = items[i];
    if (it.n <= 0 || it.kv == nullptr) Fail("Forward: empty batch item");
    if (it.n_logits < 1 || it.n_logits > it.n)
      Fail("Forward: %d logits rows asked of an item of %d tokens", it.n_logits, it.n);
    if (rows + it.n_logits > kMaxItems)
      Fail("Forward: %d logits rows in one step (at most %d)", rows + it.n_logits, kMaxItems);
    if (it.pos < 0 || it.pos + it.n > it.kv->capacity() || it.pos + it.n > ctx_)
      Fail("context full: positions up to %d requested, the KV cache holds %d", it.pos + it.n,
           std::min(it.kv->capacity(), ctx_));
    if (n + it.n > max_batch_)
      Fail("Forward: %d tokens in one batch exceed the batch limit %d", n + it.n, max_batch_);
    if (it.lora != nullptr) Fail("the vulkan backend runs no LoRA adapters (--device cpu does)");
    const KvView& kv = *it.kv;
    if (kv.block_size != block_) Fail("Forward: a KV view of another cache");
    const int blocks = (it.pos + it.n + block_ - 1) / block_;
    std::memcpy(tables + tpos, kv.table, sizeof(int32_t) * static_cast<size_t>(blocks));
    const int until = AltPromptTokens(it.prompt_len);
    for (int j = 0; j < it.n; ++j) {
      const int pos = it.pos + j, tok = it.tokens[j];
      const int t = pos < until ? n_all - n_tiled + tl++ : mv++;  // its row in the step
      row_[static_cast<size_t>(n + j)] = t;
      if (tok < 0 || tok >= cfg_.n_vocab)
        Fail("token id %d is outside the vocabulary (0..%d)", tok, cfg_.n_vocab - 1);
      float* xr = x + static_cast<size_t>(t) * dim;
      if (it.embeds != nullptr && it.embeds[j] != nullptr) {  // an image's embedding
        std::memcpy(xr, it.embeds[j], sizeof(float) * static_cast<size_t>(dim));
      } else {
        to_float(w.tok_embd.data + static_cast<size_t>(tok) * w.tok_embd.row_bytes, xr, dim);
        if (cfg_.embed_scale != 1.0f)
          for (int d = 0; d < dim; ++d) xr[d] *= cfg_.embed_scale;
        if (w.pos_embd) {  // learned absolute positions (GPT-2)
          Traits(w.pos_embd.type)
              .to_float(w.pos_embd.data + static_cast<size_t>(pos) * w.pos_embd.row_bytes,
                        emb_row_.data(), dim);
          for (int d = 0; d < dim; ++d) xr[d] += emb_row_[static_cast<size_t>(d)];
        }
      }
      if (half > 0)
        rope_.Fill(pos, f32(in_cos_) + t * half, f32(in_sin_) + t * half,
                   local ? f32(in_cosl_) + t * half : nullptr,
                   local ? f32(in_sinl_) + t * half : nullptr);
      slots[t] = static_cast<int32_t>(kv.Slot(pos));
      info[4 * t] = static_cast<int32_t>(tpos);
      info[4 * t + 1] = kv.window > 0 ? std::max(0, pos - kv.window + 1) : 0;
      info[4 * t + 2] = std::max(pos + 1, it.attend_end != nullptr ? it.attend_end[j] : 0);
      info[4 * t + 3] = 0;
    }
    tpos += static_cast<size_t>(blocks);
    for (int r = 0; r < it.n_logits; ++r)
      idx[rows++] = row_[static_cast<size_t>(n + it.n - it.n_logits + r)];
    n += it.n;
  }
  n_mv_ = n - n_tiled;
  *rows_out = rows;
  return n;
}

void VulkanBackend::Matmul(VkCommandBuffer cb, const DevMat& w, uint64_t x, uint64_t y,
                           uint64_t bias, int n, uint32_t x_stride, uint32_t y_stride, int n_mv) {
  const uint32_t mv = static_cast<uint32_t>(n_mv < 0 ? std::min(n_mv_, n) : n_mv);
  const uint32_t un = static_cast<uint32_t>(n);
  if (mv > 0) {  // a subgroup per row (or the shared-memory fallback)
    MatmulPush p{w.buf.addr, x, y, bias, w.rows, w.cols, mv, w.row_bytes, x_stride, y_stride};
    if (dev_.subgroup_arith()) {
      const uint32_t per = std::max<uint32_t>(
          1, dev_.matvec_workgroup() / std::max<uint32_t>(1, dev_.info().subgroup));
      dev_.Dispatch(cb, MatShader(MatKind::kMatvec, w.type), &p, sizeof(p),
                    std::min<uint32_t>(Groups(w.rows, per), 65535), Groups(mv, kMatvecTokens));
    } else {
      dev_.Dispatch(cb, MatShader(MatKind::kMatvecShared, w.type), &p, sizeof(p),
                    std::min<uint32_t>(w.rows, 65535), Groups(mv, kMatvecTokens));
    }
  }
  if (un > mv) {  // the long prompts' tokens: the tiled product
    MatmulPush p{w.buf.addr,
                 x + uint64_t{mv} * x_stride * sizeof(float),
                 y + uint64_t{mv} * y_stride * sizeof(float),
                 bias,
                 w.rows,
                 w.cols,
                 un - mv,
                 w.row_bytes,
                 x_stride,
                 y_stride};
    dev_.Dispatch(cb, MatShader(MatKind::kTiled, w.type), &p, sizeof(p), Groups(w.rows, kTileRows),
                  Groups(un - mv, kTileTokens));
  }
}

void VulkanBackend::Norm(VkCommandBuffer cb, uint64_t x, uint64_t y, uint64_t w, uint64_t b,
                         uint64_t res, uint64_t idx, uint32_t rows, uint32_t cols,
                         uint32_t x_stride, uint32_t y_stride, bool layer_norm) {
  NormPush p{x, y, w, b, res, idx, cols, x_stride, y_stride, layer_norm ? 1u : 0u, cfg_.norm_eps};
  dev_.Dispatch(cb, Shader::kNorm, &p, sizeof(p), rows);
}

// Q, K, V of the step's tokens (their biases in the products), QK-norm per head, RoPE.
void VulkanBackend::RecordQkv(VkCommandBuffer cb, int l, int n) {
  const LayerDev& d = layers_[static_cast<size_t>(l)];
  const LayerWeights& lw = model_.weights.layers[static_cast<size_t>(l)];
  const auto [dim, qd, kvd, hd, nq, nkv] = dims_;
  const uint32_t un = static_cast<uint32_t>(n);
  Matmul(cb, d.wq, xb_, q_, Addr(lw.bq), n, dim, qd);
  Matmul(cb, d.wk, xb_, k_, Addr(lw.bk), n, dim, kvd);
  Matmul(cb, d.wv, xb_, v_, Addr(lw.bv), n, dim, kvd);
  if (lw.q_norm != nullptr || lw.k_norm != nullptr) {
    dev_.Barrier(cb);
    if (lw.q_norm != nullptr)
      Norm(cb, q_, q_, Addr(lw.q_norm), 0, 0, 0, un * nq, hd, hd, hd, false);
    if (lw.k_norm != nullptr)
      Norm(cb, k_, k_, Addr(lw.k_norm), 0, 0, 0, un * nkv, hd, hd, hd, false);
  }
  if (cfg_.rope_dim > 0) {
    dev_.Barrier(cb);
    const bool local = cfg_.rope_base_local > 0 && cfg_.LayerIsLocal(l);
    RopePush p{q_,
               k_,
               in_.addr + (local ? in_cosl_ : in_cos_),
               in_.addr + (local ? in_sinl_ : in_sin_),
               un,
               nq,
               nkv,
               hd,
               static_cast<uint32_t>(cfg_.rope_dim / 2),
               cfg_.rope_style == RopeStyle::kHalfSplit ? 1u : 0u,
               qd,
               kvd};
    dev_.Dispatch(cb, Shader::kRope, &p, sizeof(p),
                  Groups(static_cast<uint64_t>(un) * (nq + nkv) * p.half, 64));
  }
}

// Layer l's ops (model/layer_ops.h) as dispatches over the step's n tokens, a barrier after
// each op (the dispatches within one op are independent).
void VulkanBackend::RecordLayer(VkCommandBuffer cb, int l, int n) {
  const LayerDev& d = layers_[static_cast<size_t>(l)];
  const LayerWeights& lw = model_.weights.layers[static_cast<size_t>(l)];
  const auto [dim, qd, kvd, hd, nq, nkv] = dims_;
  const uint32_t un = static_cast<uint32_t>(n);
  for (const LayerOp& op : ops_[static_cast<size_t>(l)]) {
    switch (op.kind) {
      case OpKind::kNorm:
        Norm(cb, x_, xb_, Addr(op.w), Addr(op.b), op.residual ? xb_ : 0, 0, un, dim, dim, dim,
             cfg_.layer_norm);
        break;
      case OpKind::kQkv:
        RecordQkv(cb, l, n);
        break;
      case OpKind::kStoreKv: {
        KvStorePush p{k_,
                      v_,
                      kv_k_[static_cast<size_t>(l)],
                      kv_v_[static_cast<size_t>(l)],
                      in_.addr + in_slots_,
                      un,
                      kvd};
        dev_.Dispatch(cb, Shader::kKvStore, &p, sizeof(p), Groups(uint64_t{un} * kvd / 2, 64));
        break;
      }
      case OpKind::kAttention: {
        const bool windowed = cfg_.swa_pattern == 0 || cfg_.LayerIsLocal(l);
        AttentionPush p{q_,
                        att_,
                        kv_k_[static_cast<size_t>(l)],
                        kv_v_[static_cast<size_t>(l)],
                        in_.addr + in_info_,
                        in_.addr + in_tables_,
                        nq,
                        nkv,
                        hd,
                        kvd,
                        static_cast<uint32_t>(block_),
                        windowed ? 1u : 0u,
                        cfg_.AttentionScale(),
                        cfg_.attn_softcap};
        dev_.Dispatch(cb, Shader::kAttention, &p, sizeof(p), nq, un);
        break;
      }
      case OpKind::kOutProj:
        Matmul(cb, d.wo, att_, xb_, Addr(lw.bo), n, qd, dim);
        break;
      case OpKind::kPostNorm:
        Norm(cb, xb_, xb_, Addr(op.w), 0, 0, 0, un, dim, dim, dim, false);
        break;
      case OpKind::kFfnUp: {
        Matmul(cb, d.gate, xb_, hb_, 0, n, dim, d.gate.rows);
        Matmul(cb, d.up, xb_, hb2_, Addr(lw.b_up), n, dim, d.up.rows);
        dev_.Barrier(cb);
        GluPush p{hb_, hb2_, hb_, un * d.up.rows, cfg_.ffn_act == FfnAct::kGeluTanh ? 1u : 0u};
        dev_.Dispatch(cb, Shader::kGlu, &p, sizeof(p), Groups(p.count, 64));
        break;
      }
      case OpKind::kFfnDown:
        Matmul(cb, d.down, hb_, xb_, Addr(lw.b_down), n, d.down.cols, dim);
        break;
      case OpKind::kResidual: {
        AddPush p{x_, xb_, un * dim};
        dev_.Dispatch(cb, Shader::kAdd, &p, sizeof(p), Groups(p.count, 64));
        break;
      }
      case OpKind::kMoe:
      case OpKind::kAddNorm:
        Fail("the vulkan backend has no %s", OpName(op.kind));  // (refused at load)
    }
    dev_.Barrier(cb);
  }
}

// A step of n tokens and `rows` output rows, recorded once: the embeddings copied in, every
// layer, the final norm of the rows asked for, the output head (unless hidden states).
VkCommandBuffer VulkanBackend::Record(int n_mv, int n, int rows, bool hidden) {
  n_mv_ = n_mv;
  VkCommandBuffer cb = dev_.NewCommands();
  const uint32_t dim = static_cast<uint32_t>(cfg_.dim);
  VkBufferCopy c{in_x_, 0, static_cast<size_t>(n) * dim * sizeof(float)};
  vkCmdCopyBuffer(cb, in_.buf, arena_.buf, 1, &c);  // (x_ is the arena's first range)
  dev_.Barrier(cb);
  for (int l = 0; l < layers_on_; ++l) RecordLayer(cb, l, n);
  if (tail_) {  // the residual stream to the host, for the CPU's layers
    VkBufferCopy back{0, out_x_, static_cast<size_t>(n) * dim * sizeof(float)};
    vkCmdCopyBuffer(cb, arena_.buf, out_.buf, 1, &back);
    dev_.Barrier(cb);
    dev_.End(cb);
    return cb;
  }
  const uint64_t hid = out_.addr + out_hid_;
  const ModelWeights& w = model_.weights;
  Norm(cb, x_, hid, Addr(w.output_norm), Addr(w.output_norm_b), 0, in_.addr + in_idx_,
       static_cast<uint32_t>(rows), dim, dim, dim, cfg_.layer_norm);
  dev_.Barrier(cb);
  if (!hidden) {
    // (Every logits row on the matrix-vector shader: a row's logits whatever the step.)
    Matmul(cb, output_, hid, out_.addr + out_logits_, 0, rows, dim, output_.rows, rows);
    dev_.Barrier(cb);
  }
  dev_.End(cb);
  return cb;
}

void VulkanBackend::Step(const StepItem* items, int n_items, StepOutput out, const float** rows) {
  if (out == StepOutput::kPooled)
    Fail("the vulkan backend pools no rows (embedding models run with --device cpu)");
  if (kv_k_.empty()) Fail("the vulkan backend: a step before its KV cache");
  int n_rows = 0;
  const int n = Plan(items, n_items, &n_rows);
  const bool hidden = out == StepOutput::kHidden;
  const uint64_t key = (static_cast<uint64_t>(n) << 40) | (static_cast<uint64_t>(n_mv_) << 20) |
                       (static_cast<uint64_t>(n_rows) << 1) | (hidden ? 1u : 0u);
  auto found = recorded_.find(key);
  if (found == recorded_.end()) {
    if (recorded_.size() >= 128) {  // shapes seen: keep the recording bounded
      for (auto& [k, cb] : recorded_) dev_.FreeCommands(cb);
      recorded_.clear();
    }
    found = recorded_.emplace(key, Record(n_mv_, n, n_rows, hidden)).first;
  }
  dev_.SubmitWait(found->second);
  if (tail_) {  // the CPU's layers and output head on the residual stream (items in order)
    int tail_rows = 0;
    const float* r = tail_->ForwardStage(
        items, n_items, reinterpret_cast<const float*>(out_.map + out_x_), hidden, &tail_rows);
    const size_t width = static_cast<size_t>(hidden ? cfg_.dim : cfg_.n_vocab);
    for (int i = 0, at = 0; i < n_items; ++i) {
      rows[i] = r + static_cast<size_t>(at) * width;
      at += items[i].n_logits;
    }
    return;
  }
  float* base = reinterpret_cast<float*>(out_.map + (hidden ? out_hid_ : out_logits_));
  const size_t row_floats = static_cast<size_t>(hidden ? cfg_.dim : cfg_.n_vocab);
  if (!hidden && cfg_.final_softcap > 0) {
    const float c = cfg_.final_softcap;
    const size_t total = static_cast<size_t>(n_rows) * row_floats;
    for (size_t i = 0; i < total; ++i) base[i] = c * std::tanh(base[i] / c);
  }
  for (int i = 0, r = 0; i < n_items; ++i) {
    rows[i] = base + static_cast<size_t>(r) * row_floats;
    r += items[i].n_logits;
  }
}

}  // namespace

std::unique_ptr<Backend> NewVulkanBackend(const LoadedModel& model, const VulkanOptions& o) {
  return std::make_unique<VulkanBackend>(model, o);
}

}  // namespace paddock
