// engine/speculative.h: speculative decoding: proposers of draft tokens, the verification rule,
// and the controller that picks how many tokens to draft.
//
// Decode streams every weight once per token; verifying k drafted tokens in the same pass costs
// little more while decode is bandwidth-bound (the integer tile reuses each weight vector for
// up to 8 tokens). The target runs [last token, d1..dk] in one forward and returns logits for
// every position; VerifyDrafts accepts a prefix of the drafts and picks the token after it, so
// that the output is exactly what non-speculative decoding gives: greedy, the same tokens
// (given batch-invariant logits, which the kernels guarantee); sampling, the same
// distribution (accept d with probability min(1, p(d) / q(d)), else draw from the residual
// max(0, p - q); q is one-hot for n-gram proposals).
//
// Not here: the KV cache (the caller reserves before and commits only accepted tokens, so no
// rejected token reaches the prefix cache) and the stop rule (the caller applies it to each
// accepted token in order).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "paddock/engine.h"

namespace paddock {

class ThreadPool;
struct LoadedModel;

enum class SpecMode { kOff, kNgram, kDraft, kMtp };
// "off", "ngram", "draft", "mtp"; Error naming anything else.
SpecMode ParseSpecMode(const std::string& s);
const char* SpecModeName(SpecMode m);
constexpr int kSpecMaxDraft = 16;  // --spec-max is clamped to [1, 16] (Error outside)
// The server speculates only while at most this many requests run (a full batch is
// compute-bound already: drafts would only add work).
constexpr int kSpecMaxBatch = 4;

// A drafted token's distribution (the draft model's, sparse): q(id). Empty: one-hot (n-gram).
struct DraftDist {
  std::vector<std::pair<int32_t, double>> probs;
  double Prob(int32_t id) const {
    if (probs.empty()) return 0;
    for (const auto& [t, p] : probs) {
      if (t == id) return p;
    }
    return 0;
  }
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // Up to k tokens that may continue history[0..n) into out[]; returns how many (0: none).
  // q (sized k) receives each draft's distribution when the proposer has one.
  virtual int Propose(const int32_t* history, int n, int k, int32_t* out, DraftDist* q) = 0;
  // Relative cost of drafting one token, against one target decode step (0: free).
  virtual double DraftCost() const { return 0; }
  // The memory the proposer holds of its own (MemoryReport::spec_bytes).
  virtual uint64_t MemoryBytes() const { return 0; }
};

// Prompt lookup: the last n tokens (n from max_n down to min_n) matched against the history
// (prompt and generated text); the tokens that followed the most recent earlier match are the
// drafts. No model, no cost.
class NgramProposer : public Proposer {
 public:
  explicit NgramProposer(int max_n = 4, int min_n = 1) : max_n_(max_n), min_n_(min_n) {}
  int Propose(const int32_t* history, int n, int k, int32_t* out, DraftDist* q) override;

 private:
  int max_n_, min_n_;
};

// A smaller model with the same vocabulary drafts greedily (or by sampling with the request's
// settings, recording its distributions); its own KV cache follows the target's accepted
// tokens (rolled back by truncation).
class DraftProposer : public Proposer {
 public:
  // Loads `path`; Error if its vocabulary differs from `target`'s or its weights are not
  // smaller (in bytes: a draft may be the same model at a lower precision).
  DraftProposer(const std::string& path, const LoadedModel& target, ThreadPool& pool,
                const EngineOptions& engine_options, int context);
  ~DraftProposer() override;
  // The sampling settings drafts are drawn with (the request's; greedy drafts if temperature 0).
  void Reset(const SamplingParams& p);
  // Several sequences (the server's requests) each keep their own draft KV sequence: kSlots
  // of them. Acquire() takes a free slot (false: none; that request does not speculate),
  // Select() makes one current for Propose(), Release() gives it back. Slot 0 is the default.
  static constexpr int kSlots = 4;
  bool Acquire(int* slot);
  void Select(int slot);
  void Release(int slot);
  int Propose(const int32_t* history, int n, int k, int32_t* out, DraftDist* q) override;
  double DraftCost() const override { return cost_; }
  void set_cost(double c) { cost_ = c; }
  uint64_t MemoryBytes() const override;
  int64_t parameters() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  double cost_ = 0.1;
};

// The model's own multi-token-prediction block drafts (--spec mtp; Qwen3.5's nextn layer, as
// llama.cpp's draft-mtp runs it): at position p the block reads [enorm(embedding of token p) ;
// hnorm(the target's final hidden state at p - 1)] through eh_proj, one attention layer with
// its own KV cache, the head's norm and the head, and predicts the token after p's successor.
// Each drafted token chains the block's own hidden state into the next. The block's KV follows
// the target: Feed gives it every token the target ran and kept, with the target's hidden
// states (StepItem::hidden), so Propose runs only the drafts themselves. Drafts are greedy
// (one-hot: verification keeps sampling's distribution exact, as for n-gram proposals).
class MtpProposer : public Proposer {
 public:
  // Error when the target has no prediction block.
  MtpProposer(const LoadedModel& target, ThreadPool& pool, const EngineOptions& engine_options,
              int context, int slots);
  ~MtpProposer() override;
  // Each sequence its own slot of the block's KV (as DraftProposer's; slot 0 is the
  // single-sequence engine's). A request holds one from admission (the block must see its
  // prompt) until it ends.
  bool Acquire(int* slot);
  void Select(int slot);
  void Release(int slot);
  // The target ran tokens[0..n) at positions pos..pos+n-1 of the current slot's sequence and
  // kept them, with final hidden states hidden (n rows of dim): the block runs over them. A
  // position it has not followed (a cached prefix, a preempted sequence's recompute) starts
  // its KV over from there.
  void Feed(const int32_t* tokens, int n, int pos, const float* hidden);
  // history[n - 1] is the token the target runs next; drafts need the block to have followed
  // every position before it (else 0 drafts).
  int Propose(const int32_t* history, int n, int k, int32_t* out, DraftDist* q) override;
  double DraftCost() const override { return cost_; }
  void set_cost(double c) { cost_ = c; }
  uint64_t MemoryBytes() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  double cost_ = 0.2;
};

// PADDOCK_LOG_DRAFTS set: one stderr line per drafting step ("paddock: drafts after N tokens:
// d1 d2 ..."), what scripts/peer-mtp compares with llama.cpp's log.
bool LogDraftsOn();
void LogDrafts(size_t n_history, const int32_t* drafts, int k);

// Verifies drafts[0..k) against the target: rows[i] (n_vocab logits, modified) is the
// distribution after the context and drafts[0..i), i = 0..k; `history` holds the context
// followed by the drafts (n_history + k tokens), for the penalties. q[i]: the draft's
// distribution of drafts[i] (empty: one-hot). Returns the number of accepted drafts a and sets
// *next to the token after them (the correction, or a draw from rows[k] when all were
// accepted).
int VerifyDrafts(Sampler& sampler, float* const* rows, const int32_t* drafts, int k,
                 const int32_t* history, int n_history, const DraftDist* q, int32_t* next);

// Picks the draft length: with an acceptance rate a (per token, a running estimate), k drafts
// yield (1 - a^(k+1)) / (1 - a) tokens per verification, which costs cost(k) (the measured time
// of a forward of 1 + k tokens relative to 1) plus k draft steps. The k with the best tokens per
// unit of time wins; when none beats plain decoding, k = 0 (speculation never slows decoding
// down), except for one probe of k = 1 every kProbeEvery steps to keep the estimate current
// (n-gram proposals only). rollback: a rejection costs a recomputation of the token and the
// drafts accepted (a hybrid model's recurrent state is put back and run again: the forward of
// 1 + a tokens when a of k are accepted), counted in each k's expected cost; such probes, and
// probes of drafts that cost a step (a prediction block), come 4x less often.
class SpecController {
 public:
  static constexpr int kProbeEvery = 16;
  SpecController() = default;
  // fixed: always k_max (no adaptive choice). probe: when drafting does not pay, still draft
  // one token every kProbeEvery steps to keep the estimate current (n-gram proposals cost
  // nothing to make; a draft model would first have to catch up on every token it skipped, a
  // prefill of them, so it does not probe and starts from an optimistic prior instead).
  SpecController(std::vector<double> cost, int k_max, double draft_cost, bool fixed = false,
                 bool probe = true, double prior = 0.6, bool rollback = false);
  int Choose();
  void Observe(int drafted, int accepted);
  double acceptance() const { return alpha_; }
  const std::vector<double>& cost() const { return cost_; }

 private:
  std::vector<double> cost_;  // cost_[k]: forward of 1 + k tokens / forward of 1
  int k_max_ = 0;
  double draft_cost_ = 0;
  bool fixed_ = false;
  bool probe_ = true;
  bool rollback_ = false;
  double alpha_ = 0.6;  // prior before any observation
  int idle_ = 0;
};

}  // namespace paddock
