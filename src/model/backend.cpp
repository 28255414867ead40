// model/backend.cpp: the KV cache's block memory in host memory, and what every backend
// has by default (model/backend.h).
#include "model/backend.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "base/strings.h"
#include "model/weights.h"

namespace paddock {

namespace {

// A layer's K (or V) row bytes in the blocks: none for a ring (its rows are in state slots).
size_t BlockRow(const KvLayerView& L, bool v) {
  return L.ring > 0 ? 0 : v ? L.v_row_bytes : L.k_row_bytes;
}

class HostKvStore final : public KvStore {
 public:
  explicit HostKvStore(const KvLayout& layout) : layers_(layout.layers), bs_(layout.block_size) {
    const size_t slots = static_cast<size_t>(layout.num_blocks) * static_cast<size_t>(bs_);
    std::vector<size_t> offs;
    size_t offset = 0;
    const size_t states = static_cast<size_t>(layout.num_states);
    for (const KvLayerView& L : layers_) {  // (a ring's rows are in its state slots)
      offs.push_back(offset);
      offset += (slots * BlockRow(L, false) + 63) / 64 * 64;
      offs.push_back(offset);
      offset += (slots * BlockRow(L, true) + 63) / 64 * 64;
      offs.push_back(offset);
      offset += (states * L.state_bytes + 63) / 64 * 64;
    }
    bytes_ = offset;
    // On transparent huge pages where the kernel grants them: touching a pool of hundreds of
    // MiB once (outside the hot loop) then takes a fault per 2 MiB, not per 4 KiB (190 MiB:
    // 0.4 s -> a few ms), and attention's reads miss the TLB less.
    constexpr size_t kHuge = size_t{2} << 20;
    const size_t size = (bytes_ + 64 + kHuge - 1) / kHuge * kHuge;
    void* p = nullptr;
    if (posix_memalign(&p, kHuge, size) != 0) throw std::bad_alloc();
    madvise(p, size, MADV_HUGEPAGE);  // advice only: no error if the kernel declines
    storage_.reset(static_cast<uint8_t*>(p));
    std::memset(storage_.get(), 0, bytes_ + 64);  // touch once, outside the hot loop
    uint8_t* base = storage_.get();
    for (size_t l = 0; l < layers_.size(); ++l) {
      layers_[l].k = base + offs[3 * l];
      layers_[l].v = base + offs[3 * l + 1];
      layers_[l].state = layers_[l].state_bytes > 0 ? base + offs[3 * l + 2] : nullptr;
    }
  }
  const KvLayerView* layers() const override { return layers_.data(); }
  void CopyBlock(int32_t from, int32_t to) override {
    const size_t bs = static_cast<size_t>(bs_);
    for (const KvLayerView& L : layers_) {
      if (L.ring > 0) continue;
      std::memcpy(L.k + static_cast<size_t>(to) * bs * L.k_row_bytes,
                  L.k + static_cast<size_t>(from) * bs * L.k_row_bytes, bs * L.k_row_bytes);
      std::memcpy(L.v + static_cast<size_t>(to) * bs * L.v_row_bytes,
                  L.v + static_cast<size_t>(from) * bs * L.v_row_bytes, bs * L.v_row_bytes);
    }
  }
  size_t bytes() const override { return bytes_; }
  size_t block_bytes() const override {
    size_t b = 0;
    for (const KvLayerView& L : layers_)
      b += static_cast<size_t>(bs_) * (BlockRow(L, false) + BlockRow(L, true));
    return b;
  }
  void ReadBlock(int32_t block, uint8_t* dst) const override {
    const size_t bs = static_cast<size_t>(bs_), at = static_cast<size_t>(block) * bs;
    for (const KvLayerView& L : layers_) {
      if (L.ring > 0) continue;
      std::memcpy(dst, L.k + at * L.k_row_bytes, bs * L.k_row_bytes);
      dst += bs * L.k_row_bytes;
      std::memcpy(dst, L.v + at * L.v_row_bytes, bs * L.v_row_bytes);
      dst += bs * L.v_row_bytes;
    }
  }
  void WriteBlock(int32_t block, const uint8_t* src) override {
    const size_t bs = static_cast<size_t>(bs_), at = static_cast<size_t>(block) * bs;
    for (const KvLayerView& L : layers_) {
      if (L.ring > 0) continue;
      std::memcpy(L.k + at * L.k_row_bytes, src, bs * L.k_row_bytes);
      src += bs * L.k_row_bytes;
      std::memcpy(L.v + at * L.v_row_bytes, src, bs * L.v_row_bytes);
      src += bs * L.v_row_bytes;
    }
  }

 private:
  struct FreeDeleter {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::vector<KvLayerView> layers_;
  int bs_;
  std::unique_ptr<uint8_t, FreeDeleter> storage_;  // 2 MiB aligned, on huge pages (advice)
  size_t bytes_ = 0;
};

}  // namespace

std::unique_ptr<KvStore> NewHostKvStore(const KvLayout& layout) {
  return std::make_unique<HostKvStore>(layout);
}

const float* Backend::Forward(const int32_t* tokens, int n, int pos, const KvView& kv,
                              int prompt_len, const float* const* embeds, const int32_t* attend_end,
                              float* hidden) {
  if (n <= 0) Fail("Forward: no tokens");
  const float* logits = nullptr;
  for (int done = 0; done < n;) {
    int m = std::min(step_tokens(), n - done);
    if (attend_end != nullptr && done + m < n) {  // keep a bidirectional span whole
      const int end = attend_end[done + m - 1] - pos;
      if (end > done + m) {
        int st = done + m - 1;
        while (st > done && attend_end[st - 1] == attend_end[done + m - 1]) --st;
        m = st > done ? st - done : end - done;
        if (m > max_batch())
          Fail("an image span of %d tokens exceeds the batch limit %d", m, max_batch());
      }
    }
    StepItem item{tokens + done, m, pos + done, &kv};
    item.prompt_len = prompt_len;
    if (embeds != nullptr) item.embeds = embeds + done;
    if (attend_end != nullptr) item.attend_end = attend_end + done;
    if (hidden != nullptr) item.hidden = hidden + static_cast<size_t>(done) * config().dim;
    Step(&item, 1, StepOutput::kLogits, &logits);
    done += m;
  }
  return logits;
}

const BackendCaps& Backend::caps() const {
  static const BackendCaps all;
  return all;
}

void Backend::SetLayers(int begin, int end) {
  if (begin != 0 || end != config().n_layers)
    Fail("the %s backend runs a model's layers whole, not layers [%d, %d)", caps().name, begin,
         end);
}

void Backend::StepFrom(const float*, const StepItem*, int, StepOutput, const float**) {
  Fail("the %s backend runs a model's layers whole (no step from a residual stream)", caps().name);
}

namespace {

// "layer 3's attn_q" for the errors: the op's matrix i by its role.
std::string MatrixName(const LayerOp& op, int i) {
  static const char* const kQkv[] = {"attn_q", "attn_k", "attn_v"};
  static const char* const kMoe[] = {"ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"};
  const char* what = op.kind == OpKind::kQkv       ? kQkv[i]
                     : op.kind == OpKind::kOutProj ? "attn_output"
                     : op.kind == OpKind::kFfnUp   ? (i == 0 ? "ffn_gate" : "ffn_up")
                     : op.kind == OpKind::kFfnDown ? "ffn_down"
                     : op.kind == OpKind::kMoe     ? kMoe[i]
                                                   : OpName(op.kind);
  return StrFormat("layer %d's %s", op.layer, what);
}

bool RunsType(const BackendCaps& caps, GgmlType t) {
  if (caps.weight_types.empty()) return true;
  return std::find(caps.weight_types.begin(), caps.weight_types.end(), t) !=
         caps.weight_types.end();
}

std::string TypeList(const BackendCaps& caps) {
  std::string s;
  for (size_t i = 0; i < caps.weight_types.size(); ++i)
    s += StrFormat("%s%s",
                   i == 0                              ? ""
                   : i + 1 == caps.weight_types.size() ? " and "
                                                       : ", ",
                   TypeName(caps.weight_types[i]));
  return s;
}

[[noreturn]] void Refuse(const BackendCaps& caps, const std::string& what) {
  Fail("the %s backend has no %s%s%s", caps.name, what.c_str(), *caps.fallback ? "; " : "",
       caps.fallback);
}

void CheckOp(const BackendCaps& caps, const LayerOp& op) {
  if (!caps.Runs(op.kind)) Refuse(caps, StrFormat("%s (layer %d)", OpName(op.kind), op.layer));
  for (int f = 0; f < static_cast<int>(OpFeature::kCount); ++f)
    if (op.Has(static_cast<OpFeature>(f)) && !((caps.features >> f) & 1u))
      Refuse(caps, StrFormat("%s (layer %d's %s)", OpFeatureName(static_cast<OpFeature>(f)),
                             op.layer, OpName(op.kind)));
  for (int i = 0; i < 3; ++i) {
    const WeightTensor* w = op.mat[i];
    if (w == nullptr || !*w) continue;
    if (!RunsType(caps, w->type))
      Refuse(caps, StrFormat("shader for %s weights (%s); it runs %s", TypeName(w->type),
                             MatrixName(op, i).c_str(), TypeList(caps).c_str()));
    const uint64_t bytes = static_cast<uint64_t>(w->rows) * w->row_bytes;
    if (caps.max_matrix_bytes > 0 && bytes > caps.max_matrix_bytes)
      Refuse(caps,
             StrFormat("room for %s of %s in one matrix (at most %s)", MatrixName(op, i).c_str(),
                       FormatBytes(bytes).c_str(), FormatBytes(caps.max_matrix_bytes).c_str()));
  }
  const int hd = op.head_dim;
  if (op.kind == OpKind::kAttention &&
      ((caps.max_head_dim > 0 && hd > caps.max_head_dim) || (caps.even_head_dim && hd % 2 != 0)))
    Refuse(caps, StrFormat("attention over heads of %d (layer %d; at most %d, even)", hd, op.layer,
                           caps.max_head_dim));
}

}  // namespace

void CheckSupport(const LoadedModel& m, const BackendCaps& caps, const SupportQuery& q) {
  const int end = q.layer_end < 0 ? m.config.n_layers : q.layer_end;
  for (int l = q.layer_begin; l < end && l < static_cast<int>(m.ops.size()); ++l)
    for (const LayerOp& op : m.ops[static_cast<size_t>(l)]) CheckOp(caps, op);
  if (end == m.config.n_layers && m.weights.output && !RunsType(caps, m.weights.output.type))
    Refuse(caps, StrFormat("shader for %s weights (output); it runs %s",
                           TypeName(m.weights.output.type), TypeList(caps).c_str()));
  if (m.config.encoder && !caps.pooled)
    Refuse(caps, "pooled rows (embedding and reranking models)");
  for (const std::vector<KvDtype>* types : {&q.k_types, &q.v_types})
    for (size_t l = 0; l < types->size(); ++l) {
      const KvDtype t = (*types)[l];
      if (static_cast<int>(l) >= q.layer_begin && static_cast<int>(l) < end &&
          !((caps.kv_types >> static_cast<int>(t)) & 1u))
        Refuse(caps, StrFormat("KV cache of %s (layer %zu; --cache-type-k/-v, --kv-layer-types)",
                               KvDtypeName(t), l));
    }
  if (q.lora && !caps.lora) Refuse(caps, "LoRA adapters");
}

void Backend::Launch(const StepItem*, int, int lane) {
  Fail("%s: no steps in flight (lane %d)", name().c_str(), lane);
}
void Backend::Complete(int lane, const float**) {
  Fail("%s: no steps in flight (lane %d)", name().c_str(), lane);
}

}  // namespace paddock
