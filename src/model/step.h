// model/step.h: the ends of a step, the same for every backend: the items checked against the
// model and the backend's limits, a token's input row (its embedding), the final soft-cap, the
// pooling of an input's hidden states and a reranker's score.
//
// A backend calls these instead of writing its own, so every backend gives the same errors
// word for word and the same rows bit for bit; what runs between the ends is the op list
// (model/layer_ops.h). Not here: anything a backend executes per layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/backend.h"

namespace paddock {

struct LoadedModel;
struct ModelConfig;
struct ModelWeights;
struct KernelTable;

// What a step of this backend may hold.
struct StepLimits {
  int max_batch = 1;   // tokens
  int max_items = 1;   // sequences, and rows asked for
  int ctx = 0;         // the context the backend runs with (positions below it)
  bool lora = true;    // items may name an adapter
  bool pooled = true;  // StepOutput::kPooled
  bool hidden = true;  // StepItem::hidden
};

// Throws Error naming the first thing wrong with the step's items: none or too many items, an
// empty item, rows asked past its tokens or the limit, positions past the KV view or the
// context, tokens past the batch limit, an adapter or pooling the backend does not run, a
// whole-input item (an encoder's, a pooled one) not at position 0, an unknown pooling, a token id
// outside the vocabulary.
void CheckStep(const ModelConfig& c, const StepItem* items, int n_items, StepOutput out,
               const StepLimits& lim);

// Token j of `it`: its input row (dim floats): an image's embedding as is; else the token's
// embedding row, scaled, plus token type 0's row (encoders) and its learned position (GPT-2).
// tmp: dim floats of scratch.
void EmbedRow(const LoadedModel& m, const StepItem& it, int j, float* out, float* tmp);

// Logits rows (n floats) through the model's final soft-cap (Gemma 2-4's), if it has one, on
// the kernel table's softcap (a backend may hand it any part of its rows: each value alone).
void FinalSoftcap(const ModelConfig& c, const KernelTable& k, float* logits, size_t n);

// One input's pooled row, from its tokens' final hidden states fed in any number of steps:
// the mean (summed in double), the first token's or the last token's.
class PoolSum {
 public:
  void Start(Pooling how, int n_tokens, int dim);
  // Whether token pos counts towards the row.
  bool Takes(int pos) const;
  void Add(int pos, const float* h);
  // The row (dim floats).
  void Result(float* out) const;
  // The unscaled sum (the mean's direction: enough where the row is normalized after).
  const double* sum() const { return sum_.data(); }

 private:
  Pooling how_ = Pooling::kMean;
  int n_ = 0;
  std::vector<double> sum_;
};

// A reranker's score of an input from its first token's final state h (dim floats):
// ModelWeights::cls's head. The model must have the head.
float RankScore(const ModelWeights& w, int dim, const float* h);

}  // namespace paddock
