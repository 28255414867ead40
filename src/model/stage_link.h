// model/stage_link.h: the later stages of a pipeline, as the head's forward pass sees them.
//
// A model split across processes runs layers [0, head_layers()) in the head (the serving
// process: embeddings, scheduler, sampling) and the rest in stages after it, each a contiguous
// range; the last one holds the output head. The head (cpu/pipeline_head.h) splits a step into
// micro-batches, runs its layers on each and hands the residual stream to the link; the link
// brings back each micro-batch's logits rows (or final hidden states). dist/pipeline.h
// implements it over MPI; the model layer knows only this interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "model/backend.h"

namespace paddock {

class StageLink {
 public:
  virtual ~StageLink() = default;
  // The layers the head runs: [0, head_layers()).
  virtual int head_layers() const = 0;
  // Micro-batches a step of several sequences is split into (1: none).
  virtual int micro_batches() const = 0;
  // Steps a scheduler may keep in flight at once to keep every stage busy (Backend::Launch):
  // one per process in the pipeline.
  virtual int lanes() const = 0;
  // Micro-batch `mb` of the step: its items in the order their tokens run, x (n x dim floats)
  // the residual stream after the head's layers, `rows` result rows asked for (the items'
  // n_logits); hidden_out: the final-normalized hidden states instead of logits.
  virtual void Send(int mb, const StepItem* items, int n_items, const float* x, int n, int rows,
                    bool hidden_out) = 0;
  // Micro-batch mb's result rows (rows x row_floats) into out; results come back in the order
  // sent (mb: the sender's count of micro-batches, checked). Throws Error naming the stage when
  // one is lost (died or stopped answering).
  virtual void Receive(int mb, float* out, int rows, size_t row_floats) = 0;
  // The head's KV manager copied block `from` to `to` (copy-on-write): every stage does the
  // same in its layers before the next micro-batch.
  virtual void CopyBlock(int32_t from, int32_t to) = 0;
  // Empty while every stage answers; else which stage was lost and how (for /health).
  virtual std::string Lost() const = 0;
};

}  // namespace paddock
