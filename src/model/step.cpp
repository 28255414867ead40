// model/step.cpp: the ends of a step every backend shares (model/step.h).
#include "model/step.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/strings.h"
#include "kernels/kernels.h"
#include "model/weights.h"

namespace paddock {

void CheckStep(const ModelConfig& c, const StepItem* items, int n_items, StepOutput out,
               const StepLimits& lim) {
  if (n_items < 1 || n_items > lim.max_items)
    Fail("Forward: %d sequences in one step (1 to %d allowed)", n_items, lim.max_items);
  if (out == StepOutput::kPooled && !lim.pooled)
    Fail("this backend pools no rows (--device cpu does)");
  const bool whole = !c.causal || out == StepOutput::kPooled;
  int n = 0, rows = 0;
  for (int i = 0; i < n_items; ++i) {
    const StepItem& it = items[i];
    if (it.n <= 0 || it.kv == nullptr) Fail("Forward: empty batch item");
    if (it.n_logits < 1 || it.n_logits > it.n)
      Fail("Forward: %d logits rows asked of an item of %d tokens", it.n_logits, it.n);
    if (rows + it.n_logits > lim.max_items)
      Fail("Forward: %d logits rows in one step (at most %d)", rows + it.n_logits, lim.max_items);
    if (it.pos < 0 || it.pos + it.n > it.kv->capacity() || it.pos + it.n > lim.ctx) {
      Fail("context full: positions up to %d requested, the KV cache holds %d", it.pos + it.n,
           std::min(it.kv->capacity(), lim.ctx));
    }
    if (n + it.n > lim.max_batch)
      Fail("Forward: %d tokens in one batch exceed the batch limit %d", n + it.n, lim.max_batch);
    if (it.lora != nullptr && !lim.lora)
      Fail("this backend runs no LoRA adapters (--device cpu does)");
    if (it.hidden != nullptr && !lim.hidden)
      Fail("this backend returns no hidden states beside the logits (--device cpu does)");
    if (whole && it.pos != 0)
      Fail("Forward: an encoder's or a pooled input runs whole in one step (position %d)", it.pos);
    if (out == StepOutput::kPooled && it.pooling == Pooling::kNone)
      Fail("Forward: a pooled step's item names no pooling");
    for (int j = 0; j < it.n; ++j) {
      if (it.tokens[j] < 0 || it.tokens[j] >= c.n_vocab)
        Fail("token id %d is outside the vocabulary (0..%d)", it.tokens[j], c.n_vocab - 1);
    }
    n += it.n;
    rows += it.n_logits;
  }
}

void EmbedRow(const LoadedModel& m, const StepItem& it, int j, float* out, float* tmp) {
  const ModelConfig& c = m.config;
  const ModelWeights& w = m.weights;
  const size_t dim = static_cast<size_t>(c.dim);
  if (it.embeds != nullptr && it.embeds[j] != nullptr) {  // an image's embedding
    std::memcpy(out, it.embeds[j], sizeof(float) * dim);
    return;
  }
  const WeightTensor& emb = w.tok_embd;
  Traits(emb.type).to_float(emb.data + static_cast<size_t>(it.tokens[j]) * emb.row_bytes, out,
                            c.dim);
  if (c.embed_scale != 1.0f)
    for (size_t d = 0; d < dim; ++d) out[d] *= c.embed_scale;
  if (w.type0 != nullptr)  // encoders: token type 0
    for (size_t d = 0; d < dim; ++d) out[d] += w.type0[d];
  if (w.pos_embd) {  // learned absolute positions (GPT-2)
    const WeightTensor& pe = w.pos_embd;
    Traits(pe.type).to_float(pe.data + static_cast<size_t>(it.pos + j) * pe.row_bytes, tmp, c.dim);
    for (size_t d = 0; d < dim; ++d) out[d] += tmp[d];
  }
}

void FinalSoftcap(const ModelConfig& c, const KernelTable& k, float* logits, size_t n) {
  if (c.final_softcap > 0) k.softcap(logits, static_cast<int64_t>(n), c.final_softcap);
}

void PoolSum::Start(Pooling how, int n_tokens, int dim) {
  how_ = how;
  n_ = n_tokens;
  sum_.assign(static_cast<size_t>(dim), 0.0);
}

bool PoolSum::Takes(int pos) const {
  return how_ == Pooling::kMean || (how_ == Pooling::kLast && pos == n_ - 1) ||
         (how_ == Pooling::kFirst && pos == 0);
}

void PoolSum::Add(int pos, const float* h) {
  if (!Takes(pos)) return;
  for (size_t d = 0; d < sum_.size(); ++d) sum_[d] += h[d];
}

void PoolSum::Result(float* out) const {
  const double scale = how_ == Pooling::kMean && n_ > 0 ? 1.0 / n_ : 1.0;
  for (size_t d = 0; d < sum_.size(); ++d) out[d] = static_cast<float>(sum_[d] * scale);
}

float RankScore(const ModelWeights& w, int dim, const float* h) {
  const size_t d = static_cast<size_t>(dim);
  double score = 0;
  for (size_t r = 0; r < d; ++r) {
    double y = w.cls_b[r];
    const float* row = w.cls + r * d;
    for (size_t c = 0; c < d; ++c) y += static_cast<double>(row[c]) * h[c];
    y = std::tanh(y);
    if (w.cls_out == nullptr) return static_cast<float>(y);  // no output layer: the first value
    score += static_cast<double>(w.cls_out[r]) * y;
  }
  return static_cast<float>(score + w.cls_out_b[0]);
}

}  // namespace paddock
