// vulkan/vk_backend.cpp: the Vulkan backend (vulkan/backend.h): weights uploaded once in their
// file encodings, the KV blocks in device memory, one planned activation arena, a step
// recorded once per shape (tokens, rows, output) and replayed with one host wait.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>

#include "base/cpu.h"
#include "base/strings.h"
#include "kernels/kernels.h"
#include "model/backend.h"
#include "model/layer_ops.h"
#include "model/rope.h"
#include "model/step.h"
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

// The weight types the matrix shaders read (device.h: kWeightTypes), in their order.
const GgmlType kMatTypes[kWeightTypes] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16,
                                          GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K,
                                          GgmlType::kQ5_K, GgmlType::kQ6_K};

// A weight type's index among the matrix shaders', or -1: none.
int MatType(GgmlType t) {
  for (int i = 0; i < kWeightTypes; ++i)
    if (kMatTypes[i] == t) return i;
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
  BackendKind kind() const override { return BackendKind::kVulkan; }
  const BackendCaps& caps() const override { return VulkanCaps(); }
  const ModelConfig& config() const override { return cfg_; }
  int max_batch() const override { return max_batch_; }
  int max_items() const override { return kMaxItems; }
  size_t scratch_bytes() const override { return arena_.size + in_.size + out_.size; }
  void Configure(const ForwardOptions& o) override {
    opt_ = o;
    const uint32_t wg = o.device_matvec_wg > 0 ? o.device_matvec_wg : 64;
    if (wg != dev_.matvec_workgroup()) {
      dev_.SetMatvecWorkgroup(wg);
      for (auto& [key, cb] : recorded_) dev_.FreeCommands(cb);  // (they bound the old pipelines)
      recorded_.clear();
    }
  }
  const ForwardOptions& options() const override { return opt_; }
  void SetContext(int n_ctx) override {
    ctx_ = n_ctx;
    rope_.Set(cfg_, model_.weights, n_ctx);
  }
  // (No adapters: caps().lora is false, so the engine never sets one.)
  void SetDefaultLora(const LoraAdapter* a) override {}
  void SetLayers(int begin, int end) override {
    if (begin != 0 || end != layers_on_)
      Fail("the vulkan backend: layers [%d, %d) are not the ones it loaded [0, %d)", begin, end,
           layers_on_);
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
  void Step(const StepItem* items, int n_items, StepOutput out, const float** rows) override;

 private:
  void CheckMemory(const VulkanOptions& o) const;
  DevMat Upload(const WeightTensor& w, const char* what);
  // An op's matrix i on the device (uploaded at creation).
  const DevMat& Mat(const LayerOp& op, int i) const;
  void Vec(const float* v, size_t n);
  uint64_t Addr(const float* v) const;
  void PlanArena();
  int Plan(const StepItem* items, int n_items, StepOutput out, int* rows_out);
  VkCommandBuffer Record(int n_mv, int n, int rows, bool hidden);
  // Y = X W^T for the step's n tokens: the first n_mv_ on the matrix-vector shader, the rest on
  // the tiled one (n_mv: that split for this call).
  void Matmul(VkCommandBuffer cb, const DevMat& w, uint64_t x, uint64_t y, uint64_t bias, int n,
              uint32_t x_stride, uint32_t y_stride, int n_mv = -1);
  void Norm(VkCommandBuffer cb, uint64_t x, uint64_t y, uint64_t w, uint64_t b, uint64_t res,
            uint64_t idx, uint32_t rows, uint32_t cols, uint32_t x_stride, uint32_t y_stride,
            bool layer_norm, float eps);
  void RecordLayer(VkCommandBuffer cb, int l, int n);
  void RecordQkv(VkCommandBuffer cb, const LayerOp& op, int n);
  // The residual stream's rows back in item order (a split's first part).
  void ResidualRows(const StepItem* items, int n_items, int n, const float** rows);

  const LoadedModel& model_;
  const ModelConfig& cfg_;
  Device dev_;
  ForwardOptions opt_;
  int max_batch_;
  int layers_on_ = 0;      // layers [0, layers_on_) run here
  bool residual_ = false;  // fewer than all: the step returns the residual stream
  int ctx_ = 0;
  int block_ = 16;
  RopeAngles rope_;
  const LayerOpList& ops_;                        // the model's
  std::map<const WeightTensor*, DevMat> mat_of_;  // each op matrix's upload
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
  std::vector<float> emb_row_;  // EmbedRow's scratch
  // The shapes the dispatches take: dim, q_dim, kv_dim, head_dim, heads, KV heads.
  struct Dims {
    uint32_t dim, qd, kvd, hd, nq, nkv;
  } dims_;
  int n_mv_ = 0;              // the step's tokens on the matrix-vector shader (they come first)
  std::vector<int32_t> row_;  // per token in item order, its row in the step (planned once)
  std::vector<float> res_x_;  // a split's residual rows back in item order
};

VulkanBackend::VulkanBackend(const LoadedModel& model, const VulkanOptions& o)
    : model_(model),
      cfg_(model.config),
      dev_(o.device),
      opt_(o.forward),
      max_batch_(std::max(1, o.max_batch)),
      ops_(model.ops),
      dims_{static_cast<uint32_t>(cfg_.dim),      static_cast<uint32_t>(cfg_.q_dim()),
            static_cast<uint32_t>(cfg_.kv_dim()), static_cast<uint32_t>(cfg_.head_dim),
            static_cast<uint32_t>(cfg_.n_heads),  static_cast<uint32_t>(cfg_.n_kv_heads)} {
  if (const char* lose = std::getenv("PADDOCK_VULKAN_LOSE_AFTER")) dev_.LoseAfter(std::atoi(lose));
  layers_on_ = o.layers < 0 ? cfg_.n_layers : o.layers;
  if (layers_on_ < 1 || layers_on_ > cfg_.n_layers)
    Fail("--gpu-layers %d: the model has %d layers (1 to %d run on the device; 0: --device cpu)",
         o.layers, cfg_.n_layers, cfg_.n_layers);
  residual_ = layers_on_ < cfg_.n_layers;
  CheckMemory(o);
  // Every matrix and vector the ops read, once (a matrix read by two ops is uploaded once).
  for (int l = 0; l < layers_on_; ++l) {
    for (const LayerOp& op : ops_[static_cast<size_t>(l)]) {
      for (int i = 0; i < 3; ++i) {
        const WeightTensor* m = op.mat[i];
        if (m != nullptr && *m && mat_of_.count(m) == 0) {
          const std::string where = StrFormat("layer %d's %s", l, OpName(op.kind));
          mat_of_[m] = Upload(*m, where.c_str());
        }
        if (op.bias[i] != nullptr) Vec(op.bias[i], static_cast<size_t>(op.mat[i]->rows));
      }
      Vec(op.norm.w, static_cast<size_t>(cfg_.dim));
      Vec(op.norm.b, static_cast<size_t>(cfg_.dim));
      Vec(op.q_norm, static_cast<size_t>(op.head_dim));
      Vec(op.k_norm, static_cast<size_t>(op.head_dim));
    }
  }
  const ModelWeights& w = model.weights;
  if (!residual_) output_ = Upload(w.output, "output");
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
  if (residual_) res_x_.resize(static_cast<size_t>(max_batch_) * static_cast<size_t>(cfg_.dim));
}

VulkanBackend::~VulkanBackend() {
  for (auto& [key, cb] : recorded_) dev_.FreeCommands(cb);
  for (Buffer& b : mats_) dev_.Free(&b);
  for (Buffer* b : {&vecs_, &arena_, &in_, &out_}) dev_.Free(b);
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

// (CheckSupport refused any type without a shader and any matrix over 4 GiB before this.)
DevMat VulkanBackend::Upload(const WeightTensor& w, const char* where) {
  DevMat m;
  if (!w) return m;
  m.type = MatType(w.type);
  const uint64_t bytes = static_cast<uint64_t>(w.rows) * w.row_bytes;
  m.rows = static_cast<uint32_t>(w.rows);
  m.cols = static_cast<uint32_t>(w.cols);
  m.row_bytes = static_cast<uint32_t>(w.row_bytes);
  m.buf = dev_.Alloc(bytes + 16, false, where);  // (dequant.glsl reads a word past)
  dev_.Upload(m.buf, 0, w.data, bytes);
  mats_.push_back(m.buf);
  return m;
}

const DevMat& VulkanBackend::Mat(const LayerOp& op, int i) const {
  static const DevMat kNone;
  const auto it = mat_of_.find(op.mat[i]);
  return it == mat_of_.end() ? kNone : it->second;
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
  out_x_ = residual_ ? take(B * dim) : off;  // a split's residual stream, read back
  out_ = dev_.Alloc(off, true, "the step's outputs");
}

std::unique_ptr<KvStore> VulkanBackend::AllocKv(const KvLayout& layout) {
  if (layout.layers.size() != static_cast<size_t>(layers_on_))
    Fail("the vulkan backend: a KV cache of %zu layers for its %d", layout.layers.size(),
         layers_on_);
  std::unique_ptr<KvStore> store = NewDeviceKvStore(&dev_, layout);
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
int VulkanBackend::Plan(const StepItem* items, int n_items, StepOutput out, int* rows_out) {
  StepLimits lim;
  lim.max_batch = max_batch_;
  lim.max_items = kMaxItems;
  lim.ctx = ctx_;
  lim.lora = false;
  lim.pooled = false;
  lim.hidden = false;
  CheckStep(cfg_, items, n_items, out, lim);
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
  // The tokens on the matrix-vector shader come first, those of long prompts after them.
  int n_tiled = 0, n_all = 0;
  for (int i = 0; i < n_items; ++i) {
    const int until = AltPromptTokens(items[i].prompt_len);
    n_tiled += std::clamp(until - items[i].pos, 0, items[i].n);
    n_all += items[i].n;
  }
  int n = 0, rows = 0, mv = 0, tl = 0;
  size_t tpos = 0;
  for (int i = 0; i < n_items; ++i) {
    const StepItem& it = items[i];
    const KvView& kv = *it.kv;
    if (kv.block_size != block_) Fail("Forward: a KV view of another cache");
    const int blocks = (it.pos + it.n + block_ - 1) / block_;
    std::memcpy(tables + tpos, kv.table, sizeof(int32_t) * static_cast<size_t>(blocks));
    const int until = AltPromptTokens(it.prompt_len);
    for (int j = 0; j < it.n; ++j) {
      const int pos = it.pos + j;
      const int t = pos < until ? n_all - n_tiled + tl++ : mv++;  // its row in the step
      row_[static_cast<size_t>(n + j)] = t;
      EmbedRow(model_, it, j, x + static_cast<size_t>(t) * dim, emb_row_.data());
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
                         uint32_t x_stride, uint32_t y_stride, bool layer_norm, float eps) {
  NormPush p{x, y, w, b, res, idx, cols, x_stride, y_stride, layer_norm ? 1u : 0u, eps};
  dev_.Dispatch(cb, Shader::kNorm, &p, sizeof(p), rows);
}

// Q, K, V of the step's tokens (their biases in the products), QK-norm per head, RoPE.
void VulkanBackend::RecordQkv(VkCommandBuffer cb, const LayerOp& op, int n) {
  const auto [dim, qd, kvd, hd, nq, nkv] = dims_;
  const uint32_t un = static_cast<uint32_t>(n);
  Matmul(cb, Mat(op, 0), xb_, q_, Addr(op.bias[0]), n, dim, qd);
  Matmul(cb, Mat(op, 1), xb_, k_, Addr(op.bias[1]), n, dim, kvd);
  Matmul(cb, Mat(op, 2), xb_, v_, Addr(op.bias[2]), n, dim, kvd);
  if (op.q_norm != nullptr || op.k_norm != nullptr) {
    dev_.Barrier(cb);
    const float eps = op.norm.eps;
    if (op.q_norm != nullptr)
      Norm(cb, q_, q_, Addr(op.q_norm), 0, 0, 0, un * nq, hd, hd, hd, false, eps);
    if (op.k_norm != nullptr)
      Norm(cb, k_, k_, Addr(op.k_norm), 0, 0, 0, un * nkv, hd, hd, hd, false, eps);
  }
  if (op.rope.dims > 0) {
    dev_.Barrier(cb);
    const bool local = op.rope.local;
    RopePush p{q_,
               k_,
               in_.addr + (local ? in_cosl_ : in_cos_),
               in_.addr + (local ? in_sinl_ : in_sin_),
               un,
               nq,
               nkv,
               hd,
               static_cast<uint32_t>(op.rope.dims / 2),
               op.rope.style == RopeStyle::kHalfSplit ? 1u : 0u,
               qd,
               kvd};
    dev_.Dispatch(cb, Shader::kRope, &p, sizeof(p),
                  Groups(static_cast<uint64_t>(un) * (nq + nkv) * p.half, 64));
  }
}

// Layer l's ops (model/layer_ops.h) as dispatches over the step's n tokens, a barrier after
// each op (the dispatches within one op are independent). Every op here passed CheckSupport
// against VulkanCaps() at load.
void VulkanBackend::RecordLayer(VkCommandBuffer cb, int l, int n) {
  const auto [dim, qd, kvd, hd, nq, nkv] = dims_;
  const uint32_t un = static_cast<uint32_t>(n);
  const size_t lz = static_cast<size_t>(l);
  for (const LayerOp& op : ops_[lz]) {
    const bool ln = op.norm.kind == NormKind::kLayer;
    switch (op.kind) {
      case OpKind::kNorm:
        Norm(cb, x_, xb_, Addr(op.norm.w), Addr(op.norm.b), op.residual ? xb_ : 0, 0, un, dim, dim,
             dim, ln, op.norm.eps);
        break;
      case OpKind::kQkv:
        RecordQkv(cb, op, n);
        break;
      case OpKind::kStoreKv: {
        KvStorePush p{k_, v_, kv_k_[lz], kv_v_[lz], in_.addr + in_slots_, un, kvd};
        dev_.Dispatch(cb, Shader::kKvStore, &p, sizeof(p), Groups(uint64_t{un} * kvd / 2, 64));
        break;
      }
      case OpKind::kAttention: {
        AttentionPush p{q_,
                        att_,
                        kv_k_[lz],
                        kv_v_[lz],
                        in_.addr + in_info_,
                        in_.addr + in_tables_,
                        nq,
                        nkv,
                        hd,
                        kvd,
                        static_cast<uint32_t>(block_),
                        op.windowed ? 1u : 0u,
                        op.scale,
                        op.softcap};
        dev_.Dispatch(cb, Shader::kAttention, &p, sizeof(p), nq, un);
        break;
      }
      case OpKind::kOutProj:
        Matmul(cb, Mat(op, 0), att_, xb_, Addr(op.bias[0]), n, qd, dim);
        break;
      case OpKind::kPostNorm:
        Norm(cb, xb_, xb_, Addr(op.norm.w), 0, 0, 0, un, dim, dim, dim, false, op.norm.eps);
        break;
      case OpKind::kFfnUp: {
        const DevMat& gate = Mat(op, 0);
        const DevMat& up = Mat(op, 1);
        Matmul(cb, gate, xb_, hb_, 0, n, dim, gate.rows);
        Matmul(cb, up, xb_, hb2_, Addr(op.bias[1]), n, dim, up.rows);
        dev_.Barrier(cb);
        GluPush p{hb_, hb2_, hb_, un * up.rows, op.act == Activation::kGeluTanh ? 1u : 0u};
        dev_.Dispatch(cb, Shader::kGlu, &p, sizeof(p), Groups(p.count, 64));
        break;
      }
      case OpKind::kFfnDown: {
        const DevMat& down = Mat(op, 0);
        Matmul(cb, down, hb_, xb_, Addr(op.bias[0]), n, down.cols, dim);
        break;
      }
      case OpKind::kResidual: {
        AddPush p{x_, xb_, un * dim};
        dev_.Dispatch(cb, Shader::kAdd, &p, sizeof(p), Groups(p.count, 64));
        break;
      }
      case OpKind::kMoe:
      case OpKind::kAddNorm:
      case OpKind::kCount:
        break;  // (not in VulkanCaps: refused at load)
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
  if (residual_) {  // the residual stream to the host, for the next part's layers
    VkBufferCopy back{0, out_x_, static_cast<size_t>(n) * dim * sizeof(float)};
    vkCmdCopyBuffer(cb, arena_.buf, out_.buf, 1, &back);
    dev_.Barrier(cb);
    dev_.End(cb);
    return cb;
  }
  const uint64_t hid = out_.addr + out_hid_;
  const ModelWeights& w = model_.weights;
  Norm(cb, x_, hid, Addr(w.output_norm), Addr(w.output_norm_b), 0, in_.addr + in_idx_,
       static_cast<uint32_t>(rows), dim, dim, dim, cfg_.layer_norm, cfg_.norm_eps);
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
  if (kv_k_.empty()) Fail("the vulkan backend: a step before its KV cache");
  if (residual_ != (out == StepOutput::kResidual))
    Fail("the vulkan backend: layers [0, %d) of %d cannot return that step's rows", layers_on_,
         cfg_.n_layers);
  int n_rows = 0;
  const int n = Plan(items, n_items, out, &n_rows);
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
  if (residual_) {
    ResidualRows(items, n_items, n, rows);
    return;
  }
  float* base = reinterpret_cast<float*>(out_.map + (hidden ? out_hid_ : out_logits_));
  const size_t row_floats = static_cast<size_t>(hidden ? cfg_.dim : cfg_.n_vocab);
  if (!hidden)  // (on the host: this CPU's kernels, as its own backend's)
    FinalSoftcap(cfg_, GetKernels(DetectIsa()), base, static_cast<size_t>(n_rows) * row_floats);
  for (int i = 0, r = 0; i < n_items; ++i) {
    rows[i] = base + static_cast<size_t>(r) * row_floats;
    r += items[i].n_logits;
  }
}

// The step's rows are the matrix-vector tokens first, the tiled ones after (row_): back in
// item order for the next part.
void VulkanBackend::ResidualRows(const StepItem* items, int n_items, int n, const float** rows) {
  const size_t dim = static_cast<size_t>(cfg_.dim);
  const auto* x = reinterpret_cast<const float*>(out_.map + out_x_);
  for (int j = 0; j < n; ++j)
    std::memcpy(res_x_.data() + static_cast<size_t>(j) * dim,
                x + static_cast<size_t>(row_[static_cast<size_t>(j)]) * dim, sizeof(float) * dim);
  for (int i = 0, at = 0; i < n_items; ++i) {
    rows[i] = res_x_.data() + static_cast<size_t>(at) * dim;
    at += items[i].n;
  }
}

}  // namespace

const BackendCaps& VulkanCaps() {
  static const BackendCaps caps = [] {
    BackendCaps c;
    c.name = "vulkan";
    c.ops = 0;
    for (OpKind k :
         {OpKind::kNorm, OpKind::kQkv, OpKind::kStoreKv, OpKind::kAttention, OpKind::kOutProj,
          OpKind::kPostNorm, OpKind::kFfnUp, OpKind::kFfnDown, OpKind::kResidual})
      c.ops |= 1u << static_cast<int>(k);
    c.features = 0;  // none of OpFeature's
    c.weight_types.assign(kMatTypes, kMatTypes + kWeightTypes);
    c.kv_types = 1u << static_cast<int>(KvDtype::kF16);
    c.max_head_dim = kMaxHeadDim;
    c.even_head_dim = true;
    c.max_matrix_bytes = (uint64_t{1} << 32) - 1;
    c.lora = false;
    c.pooled = false;
    c.hidden = false;
    c.replay = false;
    c.kv_rings = false;
    c.fallback = "--device cpu runs it";
    return c;
  }();
  return caps;
}

std::unique_ptr<Backend> NewVulkanBackend(const LoadedModel& model, const VulkanOptions& o) {
  return std::make_unique<VulkanBackend>(model, o);
}

}  // namespace paddock
