// engine/scheduler.h: continuous batching as pure bookkeeping.
//
// There is no prefill or decode phase: a sequence only knows how many of its tokens are
// computed (their K/V are in the cache) and how many are known (prompt + generated). Each step
// Schedule() spends one token budget: running sequences first (those with one token left to
// compute, i.e. decodes, then prompt chunks, each group by priority then arrival), preempting
// the lowest-priority, most recent sequence when KV blocks run out; then waiting sequences are
// admitted into what is left while KV usage is under the watermark. After the forward pass,
// Commit() records what was computed and Postprocess() applies the sampled tokens under the
// per-token rule (stop_rule.h), returning the sequences that finished.
//
// Not here, by design: threads, timing, statistics, sampling, text (the Service does those),
// and the KV layout (KvManager). Tested without a model or threads (tests/test_scheduler.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "engine/sequence.h"
#include "kv/kv_manager.h"
#include "paddock/engine.h"

namespace paddock {

// Higher priority first, then earlier arrival.
bool RunsBefore(const Sequence& a, const Sequence& b);

struct SchedulerOptions {
  int token_budget = 32;         // tokens per step over all sequences
  int max_running = 64;          // sequences per step at most
  double kv_watermark = 0.90;    // admit only while KV usage is below this share
  bool static_batching = false;  // admit only when nothing runs (to measure the difference)
  // The leading positions of a sequence with a prompt of n_prompt tokens that the model computes
  // on its bf16 prefill (Transformer::Bf16PromptTokens; null: none): the KV prefix cache is
  // told at admission.
  std::function<int(int n_prompt)> prefill_until;
  // > 0: prompt chunks end on multiples of this (or the prompt's end), so the tokens that form
  // whole aligned chunks run in one step: a hybrid model's chunked delta rule (kDeltaChunk).
  int align_prompt = 0;
};

class Scheduler {
 public:
  Scheduler(KvManager& kv, const SchedulerOptions& options);
  // A prompt chunk of n tokens from s.computed as it may run: cut at the KV manager's state
  // snapshot boundary, and ended on align_prompt unless it reaches the prompt's end (0: not
  // this step).
  int PromptCut(const Sequence& s, int n) const;

  // The step's batch: seqs[i] computes tokens [computed, computed + n[i]).
  struct Batch {
    std::vector<Sequence*> seqs;
    std::vector<int> n;
    bool empty() const { return seqs.empty(); }
  };
  struct Finished {
    std::unique_ptr<Sequence> seq;
    FinishReason why;
  };

  // Into the waiting line, by priority then arrival.
  void Add(std::unique_ptr<Sequence> s);
  // A sequence already holding a KV sequence with its tokens computed but the last (a forked
  // choice of an n > 1 request): into the running set, or when that is full back to waiting
  // (its blocks freed: it recomputes later, mostly from the prefix cache).
  void AddRunning(std::unique_ptr<Sequence> s);
  // Spends the token budget (see the file comment). Sequences that can never fit (alone and
  // still out of blocks) are moved to *finished with kContext. Newly admitted sequences are
  // reported through on_admit (first admission only).
  const Batch& Schedule(std::vector<Finished>* finished,
                        const std::function<void(Sequence&)>& on_admit = {});
  // Records that the batch's tokens were computed (the KV manager registers them).
  void Commit();
  // The caller's per-token rule: ApplyToken (engine/stop_rule.h) with the sequence's end
  // tokens, grammar and text.
  using ApplyFn = std::function<std::optional<FinishReason>(Sequence&, int32_t)>;
  // next[i]: the token sampled for batch().seqs[i], or -1 where it sampled none (a prompt
  // chunk in progress). The accepted drafts (committed by Commit), then the sampled token, go
  // through apply in order; a draft that ends the sequence drops the ones after it. Finished
  // sequences leave the running set (their KV sequences freed) and are returned.
  void Postprocess(const int32_t* next, const ApplyFn& apply, std::vector<Finished>* finished);

  // Removes every sequence (running or waiting) for which pred is true, with reason why(seq).
  void RemoveIf(const std::function<bool(const Sequence&)>& pred,
                const std::function<FinishReason(const Sequence&)>& why,
                std::vector<Finished>* finished);
  // Removes all sequences (shutdown), or only the running ones (a failed step), each with
  // kCancelled.
  void Clear(std::vector<Finished>* finished, bool running_only = false);

  const Batch& batch() const { return batch_; }
  const std::vector<std::unique_ptr<Sequence>>& running() const { return running_; }
  const std::vector<std::unique_ptr<Sequence>>& waiting() const { return waiting_; }
  bool idle() const { return running_.empty() && waiting_.empty(); }
  uint64_t preemptions() const { return preemptions_; }

 private:
  bool Admit(Sequence& s, int* budget_left);
  Sequence* PickVictim() const;
  int Preempt(Sequence* victim);  // returns the tokens it had been given this step
  std::unique_ptr<Sequence> Take(std::vector<std::unique_ptr<Sequence>>& list, const Sequence* s);
  void Release(Sequence& s);  // frees its KV sequence
  void Wait(std::unique_ptr<Sequence> s);
  void ScheduleRunning(int* left, std::vector<Finished>* finished);
  void AdmitWaiting(int* left, const std::function<void(Sequence&)>& on_admit);

  KvManager& kv_;
  SchedulerOptions opt_;
  std::vector<std::unique_ptr<Sequence>> running_;  // admission order
  std::vector<std::unique_ptr<Sequence>> waiting_;  // sorted by RunsBefore
  Batch batch_;
  uint64_t preemptions_ = 0;
  uint64_t admissions_ = 0;  // first admissions so far (Sequence::admission)
};

}  // namespace paddock
