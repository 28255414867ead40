// engine/engine_impl.h: the state behind paddock::Engine (private to the engine layer).
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "base/strings.h"
#include "base/thread_pool.h"
#include "base/trace.h"
#include "cpu/transformer.h"
#include "engine/constrained.h"
#include "engine/images.h"
#include "engine/sampler.h"
#include "engine/sequence.h"
#include "engine/speculative.h"
#include "engine/text_stream.h"
#include "kv/kv_manager.h"
#include "model/lora.h"
#include "model/stage_link.h"
#include "model/weights.h"
#include "paddock/engine.h"

namespace paddock {

// EngineOptions' prefetch switches as the kernel tables' mode.
inline Prefetch PrefetchOf(const EngineOptions& o) {
  return !o.prefetch ? Prefetch::kOff : (o.prefetch_all ? Prefetch::kAll : Prefetch::kAuto);
}

// ComputeShare's state: the shared pool and the turn (a ticket lock: FIFO, so fair).
struct ComputeShare::Impl {
  std::shared_ptr<ThreadPool> pool;
  std::mutex mu;
  std::condition_variable cv;
  uint64_t next = 0, serving = 0;
  void Acquire() {
    std::unique_lock<std::mutex> lock(mu);
    const uint64_t ticket = next++;
    cv.wait(lock, [&] { return serving == ticket; });
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu);
      ++serving;
    }
    cv.notify_all();
  }
};

// Holds the shared pool for one engine step (nothing without a share).
class ComputeTurn {
 public:
  explicit ComputeTurn(ComputeShare::Impl* share) : share_(share) {
    if (share_ != nullptr) share_->Acquire();
  }
  ~ComputeTurn() {
    if (share_ != nullptr) share_->Release();
  }
  ComputeTurn(const ComputeTurn&) = delete;
  ComputeTurn& operator=(const ComputeTurn&) = delete;

 private:
  ComputeShare::Impl* share_;
};

struct Engine::Impl {
  // --trace: first, so that it is destroyed (and written) after the threads that record.
  std::unique_ptr<Tracer> tracer;
  std::unique_ptr<LoadedModel> model;
  std::unique_ptr<ImageEncoder> images;  // EngineOptions::mmproj, else null
  std::shared_ptr<ThreadPool> pool;
  std::shared_ptr<ComputeShare> compute;  // EngineOptions::compute (the pool is its pool)
  std::shared_ptr<StageLink> stages;      // EngineOptions::stages (the transformer uses it)
  std::unique_ptr<LoraAdapter> lora;      // EngineOptions::lora_path (before the transformer: it
                                          // points to it)
  // The forward pass (model/backend.h): the CPU's (cpu points to it: the kernel table, tuning,
  // calibration) or a device's.
  std::unique_ptr<Backend> backend;
  Transformer* cpu = nullptr;
  const KernelTable* kernels = nullptr;  // the host's kernels (image encoding)
  std::unique_ptr<KvManager> kv;
  std::unique_ptr<Sampler> sampler;
  ModelInfo info;
  double load_seconds = 0;
  int context = 0;
  Prefetch prefetch = Prefetch::kAuto;  // the kernel table's (PrefetchOf)
  Sequence gen;  // the sequence GenerateTokens runs (tokens: prompt + generated)
  TextAssembler text;
  KvManager::SeqId eval_seq = -1;
  // Speculative decoding (null proposer: off).
  SpecMode spec = SpecMode::kOff;
  std::unique_ptr<Proposer> proposer;
  DraftProposer* draft = nullptr;  // the proposer, when it is a draft model
  MtpProposer* mtp = nullptr;      // the proposer, when it is the model's prediction block
  std::vector<float> hidden;       // (mtp) a step's hidden states: max_batch rows of dim
  SpecController spec_ctl;
  std::vector<int32_t> drafts;
  std::vector<DraftDist> draft_q;
  std::vector<float*> rows;
  std::unique_ptr<GrammarCache> grammars;

  // Time of a forward of 1 + k tokens (k = 0..k_max) relative to one token, medians of `reps`
  // interleaved rounds, on a scratch sequence (nothing committed); *one_seconds: one token's.
  std::vector<double> MeasureVerifyCost(int k_max, int reps, double* one_seconds = nullptr);

  // Marks an engine step: KV block ownership cannot change until it ends.
  struct StepGuard {
    KvManager& m;
    explicit StepGuard(KvManager& k) : m(k) { m.BeginStep(); }
    ~StepGuard() { m.EndStep(); }
  };

  // Several sequences in one step; the caller reserves before and commits after.
  void StepBatch(const StepItem* items, int n, const float** logits) {
    TraceScope ts(
        tracer.get(), "forward", "engine",
        tracer ? StrFormat("\"sequences\": %d, \"tokens\": %d", n, Tokens(items, n)) : "");
    StepGuard g(*kv);
    backend->Step(items, n, StepOutput::kLogits, logits);
  }

  // A pipeline's head (EngineOptions::stages): steps it may keep in flight, one per lane (1
  // without a pipeline); a lane's step launched (the head's layers) and later completed.
  int Lanes() const { return stages ? std::max(1, stages->lanes()) : 1; }
  void LaunchBatch(const StepItem* items, int n, int lane) {
    TraceScope ts(tracer.get(), "launch", "engine",
                  tracer ? StrFormat("\"sequences\": %d, \"tokens\": %d, \"lane\": %d", n,
                                     Tokens(items, n), lane)
                         : "");
    StepGuard g(*kv);
    backend->Launch(items, n, lane);
  }
  void CompleteBatch(int lane, const float** logits) {
    TraceScope ts(tracer.get(), "complete", "engine", "");
    backend->Complete(lane, logits);
  }

  // Runs tokens at positions [pos, pos + n) of `seq` inside one engine step.
  static int Tokens(const StepItem* items, int n) {
    int t = 0;
    for (int i = 0; i < n; ++i) t += items[i].n;
    return t;
  }
  // prompt_len: StepItem::prompt_len (0 when scoring). feed: the tokens go to the prediction
  // block's current slot too (--spec mtp), with their hidden states.
  const float* Step(KvManager::SeqId seq, const int32_t* tokens, int n, int pos, int prompt_len = 0,
                    const float* const* embeds = nullptr, const int32_t* attend_end = nullptr,
                    bool feed = false) {
    feed = feed && mtp != nullptr && embeds == nullptr;
    TraceScope ts(tracer.get(), "forward", "engine",
                  tracer ? StrFormat("\"sequences\": 1, \"tokens\": %d, \"pos\": %d", n, pos) : "");
    const float* logits = nullptr;
    for (int done = 0; done < n;) {  // (a hybrid model's pieces end at its state snapshots)
      int m = embeds != nullptr ? n - done : kv->SnapshotCut(pos + done, n - done);
      if (feed) m = std::min(m, backend->step_tokens());  // (the hidden rows of one step)
      {
        StepGuard g(*kv);
        logits = backend->Forward(tokens + done, m, pos + done, kv->View(seq), prompt_len,
                                  embeds != nullptr ? embeds + done : nullptr,
                                  attend_end != nullptr ? attend_end + done : nullptr,
                                  feed ? hidden.data() : nullptr);
      }
      if (feed) mtp->Feed(tokens + done, m, pos + done, hidden.data());
      kv->Commit(seq, tokens + done, m);
      done += m;
    }
    return logits;
  }
};

// The proposer and the controller of --spec (engine/engine_spec.cpp).
void SetUpSpeculation(Engine::Impl* impl, const EngineOptions& o);

// Throws Error naming the model and what it does when it does not generate text (an encoder:
// embeddings or rerank scores).
void RequireGenerator(const Engine::Impl& e);

// What the options ask a backend to run of the model (CheckSupport's query): the KV cache's
// types per layer, an adapter.
SupportQuery SupportOf(const ModelConfig& c, const EngineOptions& o);

// The backend of a device EngineOptions::device names (engine/devices.cpp): the Vulkan one,
// over the model's weights in their file encodings, checked against its caps first; a partial
// offload splits the layers (model/split_backend.h), the rest on a CPU backend over these
// kernels and pool. Throws Error (no such device; a build without Vulkan; what it lacks).
std::unique_ptr<Backend> MakeDeviceBackend(const LoadedModel& model, const EngineOptions& o,
                                           const KernelTable& kernels, ThreadPool& pool, int ctx);

}  // namespace paddock
