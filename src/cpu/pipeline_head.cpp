// cpu/pipeline_head.cpp: the head's layers here, micro-batches to the link, lanes in flight.
#include "cpu/pipeline_head.h"

#include <algorithm>
#include <cstdint>

#include "base/strings.h"
#include "cpu/transformer.h"
#include "model/config.h"
#include "model/stage_link.h"
#include "model/step.h"

namespace paddock {

PipelineHead::PipelineHead(std::unique_ptr<Transformer> local, StageLink* link)
    : local_(std::move(local)), link_(link) {
  local_->SetLayers(0, link->head_layers());
  const size_t items = static_cast<size_t>(local_->max_items());
  mb_items_.resize(items);
  // The link's lanes, each with its own result rows, then Step's (which receives into the local
  // backend's activations: its logits rows, or its hidden rows, as the whole model's step).
  lanes_.resize(static_cast<size_t>(std::max(1, link->lanes())) + 1);
  for (Lane& l : lanes_) {
    l.item_row.assign(items, 0);
    if (&l == &lanes_.back()) break;
    l.out.assign(items * static_cast<size_t>(local_->config().n_vocab), 0.0f);
    lane_bytes_ += l.out.size() * sizeof(float);
  }
}

PipelineHead::~PipelineHead() = default;

std::string PipelineHead::name() const {
  return local_->name() + " (pipeline head)";
}
const ModelConfig& PipelineHead::config() const {
  return local_->config();
}
int PipelineHead::max_batch() const {
  return local_->max_batch();
}
int PipelineHead::max_items() const {
  return local_->max_items();
}
size_t PipelineHead::scratch_bytes() const {
  return local_->scratch_bytes() + lane_bytes_;
}
void PipelineHead::Configure(const ForwardOptions& o) {
  local_->Configure(o);
}
const ForwardOptions& PipelineHead::options() const {
  return local_->options();
}
void PipelineHead::SetContext(int n_ctx) {
  local_->SetContext(n_ctx);
}
// (No adapters: caps().lora is false, so the engine never sets one.)
void PipelineHead::SetDefaultLora(const LoraAdapter*) {}
const BackendCaps& PipelineHead::caps() const {
  static const BackendCaps caps = [] {
    BackendCaps c;
    c.name = "pipeline";
    c.lora = false;
    c.pooled = false;
    c.hidden = false;
    c.replay = false;
    c.kv_rings = false;
    c.fallback = "adapters are not split across stages: serve one process per adapter base";
    return c;
  }();
  return caps;
}
std::unique_ptr<KvStore> PipelineHead::AllocKv(const KvLayout& layout) {
  return local_->AllocKv(layout);
}
int PipelineHead::step_tokens() const {
  return local_->step_tokens();
}
int PipelineHead::AltPromptTokens(int prompt_len) const {
  return local_->AltPromptTokens(prompt_len);
}
void PipelineHead::SetProfiler(Profiler* p) {
  local_->SetProfiler(p);
}
void PipelineHead::SetTracer(Tracer* t) {
  local_->SetTracer(t);
}

void PipelineHead::Step(const StepItem* items, int n_items, StepOutput out, const float** rows) {
  Lane& lane = lanes_.back();
  for (const Lane& l : lanes_)
    if (l.in_flight) Fail("Forward: a pipeline step is in flight (complete it first)");
  lane.hidden = out == StepOutput::kHidden;
  LaunchLane(items, n_items, lane, link_->micro_batches());
  CompleteLane(lane, rows);
}

void PipelineHead::Launch(const StepItem* items, int n_items, int lane) {
  if (lane < 0 || lane >= lanes()) Fail("Launch: no lane %d (the pipeline has %d)", lane, lanes());
  Lane& l = lanes_[static_cast<size_t>(lane)];
  if (l.in_flight) Fail("Launch: lane %d has a step in flight", lane);
  l.hidden = false;
  LaunchLane(items, n_items, l, 1);  // the other lanes keep the stages busy: no bubble to fill
}

void PipelineHead::Complete(int lane, const float** rows) {
  if (lane < 0 || lane >= lanes() || !lanes_[static_cast<size_t>(lane)].in_flight)
    Fail("Complete: lane %d has no step in flight", lane);
  CompleteLane(lanes_[static_cast<size_t>(lane)], rows);
}

// The items split into micro-batches of about equal tokens (whole items, in order); each runs
// the head's layers and goes to the link while the next one runs here, so the stages work on
// micro-batch i while the head works on i + 1.
void PipelineHead::LaunchLane(const StepItem* items, int n_items, Lane& lane, int mbs) {
  StepLimits lim;
  lim.max_batch = INT32_MAX;  // (each micro-batch within the local backend's: RunPart checks)
  lim.max_items = max_items();
  lim.ctx = INT32_MAX;
  lim.lora = false;
  lim.pooled = false;
  lim.hidden = false;
  CheckStep(config(), items, n_items, StepOutput::kLogits, lim);
  int total = 0;
  for (int i = 0; i < n_items; ++i) total += std::max(0, items[i].n);
  mbs = std::max(1, std::min(mbs, n_items));
  lane.rows.clear();
  lane.first_row.clear();
  lane.ids.clear();
  lane.n_items = n_items;
  int next_row = 0;
  for (int i0 = 0, done = 0; i0 < n_items;) {
    // Whole items, until the tokens so far reach this micro-batch's share of the step's.
    const int64_t until =
        static_cast<int64_t>(total) * (static_cast<int>(lane.rows.size()) + 1) / mbs;
    int i1 = i0, tokens = 0;
    while (i1 < n_items && (i1 == i0 || done + tokens < until)) tokens += items[i1++].n;
    int n = 0, rows = 0;
    const int* order = nullptr;
    const float* x = local_->RunPart(items + i0, i1 - i0, &n, &rows, &order);
    for (int oi = 0, r = next_row; oi < i1 - i0; ++oi) {
      const int i = i0 + order[oi];
      mb_items_[static_cast<size_t>(oi)] = items[i];
      lane.item_row[static_cast<size_t>(i)] = r;
      r += items[i].n_logits;
    }
    link_->Send(next_mb_, mb_items_.data(), i1 - i0, x, n, rows, lane.hidden);
    lane.ids.push_back(next_mb_);
    next_mb_ = (next_mb_ + 1) & 0x3fffffff;
    lane.rows.push_back(rows);
    lane.first_row.push_back(next_row);
    next_row += rows;
    done += tokens;
    i0 = i1;
  }
  lane.in_flight = true;
}

// The lane's result rows as they come back, laid out in its buffer.
void PipelineHead::CompleteLane(Lane& lane, const float** rows) {
  lane.in_flight = false;  // (whatever happens: a lost stage fails every later step anyway)
  const size_t row_floats =
      lane.hidden ? static_cast<size_t>(config().dim) : static_cast<size_t>(config().n_vocab);
  float* out = !lane.out.empty()
                   ? lane.out.data()
                   : local_->ResultRows(lane.hidden ? StepOutput::kHidden : StepOutput::kLogits);
  for (size_t m = 0; m < lane.rows.size(); ++m)
    link_->Receive(lane.ids[m], out + static_cast<size_t>(lane.first_row[m]) * row_floats,
                   lane.rows[m], row_floats);
  for (int i = 0; i < lane.n_items; ++i)
    rows[i] = out + static_cast<size_t>(lane.item_row[static_cast<size_t>(i)]) * row_floats;
}

}  // namespace paddock
