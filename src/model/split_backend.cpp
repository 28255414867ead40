// model/split_backend.cpp: two backends over consecutive layer ranges (model/split_backend.h).
#include "model/split_backend.h"

#include <algorithm>
#include <vector>

#include "base/strings.h"
#include "model/config.h"

namespace paddock {
namespace {

// The KV blocks of both parts: one view per layer (the first part's layers, then the
// second's), each block's bytes the first part's rows then the second's.
class SplitKvStore final : public KvStore {
 public:
  SplitKvStore(std::unique_ptr<KvStore> a, std::unique_ptr<KvStore> b, size_t a_layers,
               size_t b_layers)
      : a_(std::move(a)), b_(std::move(b)) {
    views_.assign(a_->layers(), a_->layers() + a_layers);
    views_.insert(views_.end(), b_->layers(), b_->layers() + b_layers);
  }
  const KvLayerView* layers() const override { return views_.data(); }
  void CopyBlock(int32_t from, int32_t to) override {
    a_->CopyBlock(from, to);
    b_->CopyBlock(from, to);
  }
  size_t bytes() const override { return a_->bytes() + b_->bytes(); }
  size_t block_bytes() const override { return a_->block_bytes() + b_->block_bytes(); }
  void ReadBlock(int32_t block, uint8_t* dst) const override {
    a_->ReadBlock(block, dst);
    b_->ReadBlock(block, dst + a_->block_bytes());
  }
  void WriteBlock(int32_t block, const uint8_t* src) override {
    a_->WriteBlock(block, src);
    b_->WriteBlock(block, src + a_->block_bytes());
  }

 private:
  std::unique_ptr<KvStore> a_, b_;
  std::vector<KvLayerView> views_;
};

class SplitBackend final : public Backend {
 public:
  SplitBackend(std::unique_ptr<Backend> first, std::unique_ptr<Backend> second)
      : a_(std::move(first)), b_(std::move(second)), k_(b_->layer_begin()) {
    if (a_->layer_begin() != 0 || k_ <= 0 || k_ >= a_->config().n_layers)
      Fail("a split backend: the parts' layers are not [0, k) and [k, %d)", a_->config().n_layers);
    for (int l = k_; l < a_->config().n_layers; ++l) {  // Gemma 4's shared KV stays in one part
      const int src = a_->config().KvSource(l);
      if (src < k_)
        Fail("a split backend: layer %d reads layer %d's KV cache, which the first part holds", l,
             src);
    }
  }

  std::string name() const override { return a_->name(); }
  BackendKind kind() const override { return BackendKind::kSplit; }
  const BackendCaps& caps() const override { return a_->caps(); }
  const ModelConfig& config() const override { return a_->config(); }
  int max_batch() const override { return std::min(a_->max_batch(), b_->max_batch()); }
  int max_items() const override { return std::min(a_->max_items(), b_->max_items()); }
  size_t scratch_bytes() const override { return a_->scratch_bytes() + b_->scratch_bytes(); }
  void Configure(const ForwardOptions& o) override {
    a_->Configure(o);
    ForwardOptions f = o;
    f.bf16_prefill = false;  // (which tokens take another path is the first part's choice)
    b_->Configure(f);
  }
  const ForwardOptions& options() const override { return a_->options(); }
  void SetContext(int n_ctx) override {
    a_->SetContext(n_ctx);
    b_->SetContext(n_ctx);
  }
  void SetDefaultLora(const LoraAdapter* a) override {
    a_->SetDefaultLora(a);
    b_->SetDefaultLora(a);
  }
  std::unique_ptr<KvStore> AllocKv(const KvLayout& layout) override {
    const auto k = static_cast<std::ptrdiff_t>(k_);
    KvLayout la = layout, lb = layout;
    la.layers.assign(layout.layers.begin(), layout.layers.begin() + k);
    la.layer_end = k_;
    lb.layers.assign(layout.layers.begin() + k, layout.layers.end());
    lb.layer_begin = k_;
    const size_t nb = lb.layers.size();
    return std::make_unique<SplitKvStore>(a_->AllocKv(la), b_->AllocKv(lb), static_cast<size_t>(k_),
                                          nb);
  }
  void Step(const StepItem* items, int n_items, StepOutput out, const float** rows) override {
    if (out == StepOutput::kPooled) Fail("a split backend pools no rows");
    a_->Step(items, n_items, StepOutput::kResidual, rows);
    b_->StepFrom(rows[0], items, n_items, out, rows);
  }
  int step_tokens() const override { return std::min(a_->step_tokens(), b_->step_tokens()); }
  int AltPromptTokens(int prompt_len) const override { return a_->AltPromptTokens(prompt_len); }
  uint64_t device_allocated() const override {
    return a_->device_allocated() + b_->device_allocated();
  }
  uint64_t device_total() const override {
    return a_->device_total() > 0 ? a_->device_total() : b_->device_total();
  }
  double ReadBandwidthGbs(int passes) override { return a_->ReadBandwidthGbs(passes); }
  std::string Fault() const override {
    const std::string f = a_->Fault();
    return f.empty() ? b_->Fault() : f;
  }
  void SetProfiler(Profiler* p) override {
    a_->SetProfiler(p);
    b_->SetProfiler(p);
  }
  void SetTracer(Tracer* t) override {
    a_->SetTracer(t);
    b_->SetTracer(t);
  }

 private:
  std::unique_ptr<Backend> a_, b_;
  int k_;
};

}  // namespace

std::unique_ptr<Backend> NewSplitBackend(std::unique_ptr<Backend> first,
                                         std::unique_ptr<Backend> second) {
  return std::make_unique<SplitBackend>(std::move(first), std::move(second));
}

}  // namespace paddock
