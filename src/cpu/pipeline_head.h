// cpu/pipeline_head.h: a pipeline's head as a backend: its layers here, the rest through a
// StageLink (model/stage_link.h), with steps in flight.
//
// The head runs layers [0, link->head_layers()) on the CPU backend it owns and hands each
// micro-batch's residual stream to the link; the stages after it send back the result rows
// (logits or hidden states). A step of several sequences is split into micro-batches of whole
// items, so the stages work on micro-batch i while the head works on i + 1. With lanes (vLLM's
// virtual engines) the head keeps a step per lane in flight: Launch runs the head's layers of a
// lane's step and returns; Complete(lane) waits for its rows. Not here: the transport (dist/
// implements the link over MPI) and the stages' own steps (Transformer::ForwardStage).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/backend.h"

namespace paddock {

class StageLink;
class Transformer;

class PipelineHead final : public Backend {
 public:
  PipelineHead(std::unique_ptr<Transformer> local, StageLink* link);
  ~PipelineHead() override;

  std::string name() const override;
  BackendKind kind() const override { return BackendKind::kPipeline; }
  const BackendCaps& caps() const override;
  const ModelConfig& config() const override;
  int max_batch() const override;
  int max_items() const override;
  size_t scratch_bytes() const override;
  void Configure(const ForwardOptions& o) override;
  const ForwardOptions& options() const override;
  void SetContext(int n_ctx) override;
  void SetDefaultLora(const LoraAdapter* a) override;
  std::unique_ptr<KvStore> AllocKv(const KvLayout& layout) override;
  int step_tokens() const override;
  int AltPromptTokens(int prompt_len) const override;
  void SetProfiler(Profiler* p) override;
  void SetTracer(Tracer* t) override;

  // One step at once: launched on the head's own lane, then completed.
  void Step(const StepItem* items, int n_items, StepOutput out, const float** rows) override;
  int lanes() const override { return static_cast<int>(lanes_.size()) - 1; }
  void Launch(const StepItem* items, int n_items, int lane) override;
  void Complete(int lane, const float** rows) override;

  // The CPU backend running the head's layers.
  Transformer& local() { return *local_; }

 private:
  // A step in flight: its micro-batches' result rows, where each item's rows begin, and the
  // buffer they arrive in (planned once per lane: max_items rows of n_vocab floats; empty for
  // Step's own lane, which receives into the local backend's activations).
  struct Lane {
    std::vector<int> rows, first_row, ids;  // per micro-batch sent
    std::vector<int> item_row;              // per item: its first result row
    int n_items = 0;
    bool hidden = false, in_flight = false;
    std::vector<float> out;
  };
  void LaunchLane(const StepItem* items, int n_items, Lane& lane, int mbs);
  void CompleteLane(Lane& lane, const float** rows);

  std::unique_ptr<Transformer> local_;
  StageLink* link_;
  std::vector<StepItem> mb_items_;  // (max_items) a micro-batch's items, in the order they ran
  std::vector<Lane> lanes_;         // the link's lanes, then Step's own
  int next_mb_ = 0;                 // micro-batches sent so far (their ids)
  size_t lane_bytes_ = 0;
};

}  // namespace paddock
