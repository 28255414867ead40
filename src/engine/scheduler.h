// engine/scheduler.h: continuous batching as pure bookkeeping.
//
// There is no prefill or decode phase: a sequence only knows how many of its tokens are
// computed (their K/V are in the cache) and how many are known (prompt + generated). Each step
// Schedule() spends one token budget: running sequences first (those with one token left to
// compute, i.e. decodes, then prompt chunks, each group by priority then arrival), preempting
// the lowest-priority, most recent sequence when KV blocks run out; then waiting sequences are
// admitted into what is left while KV usage is under the watermark. After the forward pass,
// Commit() records what was computed and Postprocess() applies the sampled tokens under the
// stop rule (stop_rule.h), returning the sequences that finished.
//
// Not here, by design: threads, timing, statistics, sampling, text (the Service does those),
// and the KV layout (KvManager). Tested without a model or threads (tests/test_scheduler.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kv/kv_manager.h"
#include "paddock/engine.h"

namespace paddock {

// One request as the scheduler sees it. The Service derives its Request from it.
struct Sequence {
  virtual ~Sequence() = default;
  uint64_t arrival = 0;         // submission order (ties in priority: earlier first)
  int priority = 0;             // higher first
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int n_prompt = 0;
  int computed = 0;  // leading tokens whose K/V are in the cache
  int generated = 0;
  int max_tokens = 0;  // tokens to generate at most (0: prompt only)
  int limit = 0;       // tokens (prompt + generated) the sequence may reach (the context)
  bool ignore_eos = false;
  // Set by the caller when the token it sampled completes the output (a grammar with nothing
  // that can follow): Postprocess ends the sequence there with kEos, the token kept.
  bool complete = false;
  KvManager::SeqId seq = -1;  // its KV sequence while running
  bool admitted_once = false;
  int cached_tokens = 0;  // prompt tokens found in the prefix cache at first admission
  // Speculative decoding (set by the caller before Schedule, for a decoding sequence): the
  // step's tokens [t, d1..dk], t = tokens.back() the one to compute, d the drafts. Schedule
  // may cut the drafts to the budget; the caller verifies and sets `accepted` (drafts kept);
  // Commit records t and the accepted drafts and appends the drafts to `tokens`; Postprocess
  // applies the stop rule to them, then to the token sampled after them.
  std::vector<int32_t> draft;
  int accepted = 0;
  int to_compute() const { return static_cast<int>(tokens.size()) - computed; }
  // The tokens a scheduled chunk of n computes (the draft buffer when speculating).
  const int32_t* step_tokens() const {
    return draft.empty() ? tokens.data() + computed : draft.data();
  }
};

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
};

class Scheduler {
 public:
  Scheduler(KvManager& kv, const SchedulerOptions& options);

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
  // next[i]: the token sampled for batch().seqs[i], or -1 where it sampled none (a prompt
  // chunk in progress). For each sampled token the stop rule runs; on_token(seq, token) is
  // called after a token is appended and returns true when a stop string completed. Finished
  // sequences leave the running set (their KV sequences freed) and are returned.
  void Postprocess(const int32_t* next, const std::function<bool(Sequence&, int32_t)>& on_token,
                   const std::function<bool(int32_t)>& is_end, std::vector<Finished>* finished);

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
};

}  // namespace paddock
