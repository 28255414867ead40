// model/lora.h: LoRA adapters in llama.cpp's GGUF adapter layout, applied at run time.
//
// An adapter file has general.type = "adapter", adapter.type = "lora", adapter.lora.alpha, and
// for each adapted matrix W (a base tensor such as "blk.3.attn_q.weight") the pair
// "<name>.lora_a" (ne = [in, rank]: rank rows of `in`) and "<name>.lora_b" (ne = [rank, out]:
// `out` rows of rank). A token row x then gets y = W x + s * B (A x), with s = scale * alpha /
// rank (alpha 0: scale), as llama.cpp computes it. Adapters are small (a few MB): their
// matrices are held as floats. The dense attention and FFN projections (q, k, v, o, gate, up,
// down) can be adapted; a pair for any other tensor, or one whose shape does not fit its base
// tensor, is refused naming the tensor.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/weights.h"

namespace paddock {

struct KernelTable;
class ThreadPool;

// The largest rank read (LoRA ranks are 4..256 in practice); the forward pass plans its
// scratch for it.
constexpr int kMaxLoraRank = 1024;

struct LoraPair {
  std::vector<float> a;   // (rank, in) row-major
  std::vector<float> b;   // (out, rank)
  std::vector<float> bt;  // (rank, out): B transposed, for the kernels (lora_up)
  int rank = 0, in = 0, out = 0;
  float s = 1;  // scale * alpha / rank (alpha 0: scale)
};

class LoraAdapter {
 public:
  // Reads `path` for the model `base`; scale: the user's factor (llama.cpp's --lora-scaled).
  // Throws Error naming the file and what does not fit.
  static std::unique_ptr<LoraAdapter> Load(const std::string& path, const LoadedModel& base,
                                           float scale);
  // The pair adapting a base matrix, or null.
  const LoraPair* For(const WeightTensor* w) const {
    const auto it = pairs_.find(w);
    return it == pairs_.end() ? nullptr : &it->second;
  }
  float scale() const { return scale_; }  // the user's factor
  // Unique per load (never 0): the prefix cache's namespace for its sequences.
  uint64_t id() const { return id_; }
  size_t bytes() const;
  int n_pairs() const { return static_cast<int>(pairs_.size()); }

  // y[j] += s * B (A x[j]) for n rows (x: n x in, y: n x out), for the pair of w (no-op
  // without one); tmp holds rank floats. dot: the kernel table's float dot product, or null
  // for the scalar reference.
  using Dot = float (*)(const float*, const float*, int64_t);
  void Apply(const WeightTensor* w, const float* x, int n, float* y, float* tmp,
             Dot dot = nullptr) const;
  // (The forward pass runs the product in two halves, the kernel table's lora_down over a and
  // lora_up over bt, so threads can split either.)

 private:
  std::unordered_map<const WeightTensor*, LoraPair> pairs_;
  float scale_ = 1;
  uint64_t id_ = 0;
};

// The adapters' share of a step (the CPU backend calls it around each matmul): per token row its
// adapter's pair for the matrix, the rank vectors A x (Down, before the base GEMM), and the
// products s B (A x) added to the outputs each thread just computed (Up). Scratch planned once
// for max_batch rows and up to kSlots matrices sharing one input; nothing allocates per step.
class LoraStep {
 public:
  static constexpr int kSlots = 3;  // Q, K, V (or gate, up) share their input
  LoraStep(int max_batch, const KernelTable& k, ThreadPool& pool);
  void SetKernels(const KernelTable& k) { k_ = &k; }
  size_t bytes() const { return tmp_.size() * sizeof(float) + pair_.size() * sizeof(void*); }
  // The rank vectors of m matrices ws[0..m) reading x (n rows of ws[0]->cols floats), row j
  // with adapter row_adapter[j] (null: none), in slots 0..m-1. False: no row has a pair.
  bool Down(const LoraAdapter* const* row_adapter, const WeightTensor* const* ws, int m,
            const float* x, int n);
  // Slot k's products added to outputs [o0, o1) of y (n rows of w.rows floats).
  void Up(int k, const WeightTensor& w, int n, float* y, int64_t o0, int64_t o1) const;

 private:
  size_t B_;
  const KernelTable* k_;
  ThreadPool& pool_;
  std::vector<float> tmp_;             // (slots, B, kMaxLoraRank) each row's rank vector
  std::vector<const LoraPair*> pair_;  // (slots, B) each row's pair per matrix
};

}  // namespace paddock
