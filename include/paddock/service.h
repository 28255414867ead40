// paddock/service.h: many requests over one engine: continuous batching, admission control,
// preemption, cancellation, deadlines and serving metrics.
//
// A Service owns an Engine and one engine thread. Each step the scheduler spends a token
// budget over all running requests (a request only knows how many of its tokens are computed
// and how many are known, so prompts are prefilled in chunks alongside running decodes), runs
// them as one batched forward over the paged KV cache, samples per request, frees finished
// requests at once and admits waiting ones in the same step. New requests wait in a bounded
// queue (priority, then arrival) while KV usage is above a watermark; when blocks run out
// mid-generation the lowest-priority, most recent request is preempted (its blocks freed, its
// tokens recomputed later, its place in line kept). All methods are thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "paddock/engine.h"

namespace paddock {

class LoraAdapter;  // model/lora.h

struct ServiceOptions {
  int max_batch_tokens = 0;      // tokens per step over all requests (0: the engine's max_batch)
  int max_running = 64;          // requests decoding together at most
  int max_queue = 256;           // waiting requests at most; more are rejected (HTTP 429)
  double kv_watermark = 0.90;    // admit new requests only while KV usage is below this share
  bool static_batching = false;  // whole batch in, whole batch out (only to measure the difference)
};

struct RequestOptions {
  GenerateOptions generate;
  int priority = 0;            // higher runs first
  double timeout_seconds = 0;  // deadline from submission (0: none)
  // Samples of the same prompt (1..kMaxChoices): the prompt is computed once and the choices
  // fork its KV blocks (copy-on-write) when the first token is sampled; choice i samples with
  // seed + i. Each has its own RequestStream.
  int n = 1;
  // The prompt's log-probabilities (GenerateResult::prompt_logprobs; `generate.logprobs`
  // alternatives, at least 0), computed while the request waits: one extra pass over the
  // prompt (for scoring: OpenAI's echo).
  bool prompt_logprobs = false;
  // A LoRA adapter of the engine's model (Engine::LoadLora) for this request, or null: the
  // base model. Requests with different adapters share steps; their cached prefixes do not mix.
  std::shared_ptr<const LoraAdapter> lora;
};
constexpr int kMaxChoices = 16;

// Latency histogram with fixed bucket bounds (Prometheus style: counts[i] counts values <=
// bounds[i], the last count is +Inf).
struct Histogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;
  double sum = 0;
  uint64_t count = 0;
  explicit Histogram(std::vector<double> b = {})
      : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}
  void Observe(double v);
  double Quantile(double q) const;  // bucket upper bound holding quantile q (approximate)
};

struct ServiceStats {
  int running = 0, waiting = 0;
  double kv_usage = 0;  // used / total blocks
  uint64_t prompt_tokens = 0, generation_tokens = 0;
  uint64_t prefix_queries = 0, prefix_hits = 0;  // tokens
  uint64_t preemptions = 0, rejected = 0, cancelled = 0, timeouts = 0;
  uint64_t finished[kFinishReasons] = {};  // by FinishReason
  uint64_t steps = 0, step_tokens = 0;
  // Speculative decoding: verification steps, tokens drafted, drafts accepted.
  uint64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  // Constrained decoding: masks computed and the time spent on them.
  uint64_t grammar_masks = 0;
  double grammar_mask_seconds = 0;
  uint64_t image_tiles = 0;     // image tiles encoded (cache hits excluded)
  uint64_t image_steps = 0;     // encoder steps run between engine steps
  uint64_t forked_choices = 0;  // choices of n > 1 requests that forked their prompt's KV
  Histogram ttft, itl, e2e, queue_time, prompt_len, generation_len;
  MemoryReport memory;
};

enum class SubmitStatus { kAccepted, kQueueFull, kShuttingDown };

// One request's output as it is produced (the engine thread writes, the caller reads).
class RequestStream {
 public:
  enum class Status { kText, kDone, kTimeout };
  // Waits up to timeout_seconds for new text or the end; new text is appended to *out, and
  // with logprobs on, the new tokens' log-probabilities to *logprobs (kText may then carry
  // tokens whose text is still held back).
  Status Wait(std::string* out, double timeout_seconds,
              std::vector<TokenLogprob>* logprobs = nullptr);
  // Stops the request; its KV blocks are freed at the next step.
  void Cancel();
  // Called on the engine thread (after its locks are released) whenever new text or the end
  // becomes available, so an event loop can wait without a thread per request. Must not
  // block. Set it before reading; text produced earlier is found by the next Wait.
  void SetOnReady(std::function<void()> fn);
  bool done() const;
  // Valid once Wait returned kDone.
  const GenerateResult& result() const { return result_; }
  double queue_seconds() const { return queue_seconds_; }
  // The scheduler's record of admission order: this request was the n-th first admitted
  // (1-based), 0 if it never was (valid once Wait returned kDone).
  uint64_t admission_order() const { return admission_; }
  uint64_t id() const { return id_; }

  struct State;  // shared with the engine thread
  explicit RequestStream(uint64_t id);
  ~RequestStream();

 private:
  friend class Service;
  uint64_t id_;
  std::unique_ptr<State> state_;
  GenerateResult result_;
  double queue_seconds_ = 0;
  uint64_t admission_ = 0;
};

class Service {
 public:
  static std::unique_ptr<Service> Create(std::unique_ptr<Engine> engine,
                                         const ServiceOptions& options);
  ~Service();  // cancels what is left and joins the engine thread

  const Engine& engine() const;
  const ServiceOptions& options() const;

  // Queues a request. Throws Error for invalid input (empty or too long prompt, bad sampling
  // values, ...); returns kQueueFull / kShuttingDown without queuing when it cannot take it.
  SubmitStatus Submit(const std::vector<int32_t>& prompt, const RequestOptions& options,
                      std::shared_ptr<RequestStream>* stream);
  // The same for options.n choices: one stream per choice (choice i at index i).
  SubmitStatus Submit(const std::vector<int32_t>& prompt, const RequestOptions& options,
                      std::vector<std::shared_ptr<RequestStream>>* streams);

  // Stops taking requests, lets running and queued ones finish for up to grace_seconds, then
  // cancels the rest. Returns when the engine thread has stopped.
  void Shutdown(double grace_seconds);
  bool accepting() const;

  ServiceStats Stats() const;

  // Embeddings, computed on the engine thread between steps: the final-normalized hidden
  // states pooled over each input (mean, the last token or the first) and L2-normalized. The
  // inputs of a request share forwards (batch-invariant kernels: a vector does not depend on
  // its neighbours). Throws Error for an empty input, one longer than the context, a token
  // outside the vocabulary, or a stopping service; an input the KV cache cannot hold even when
  // no generation runs is an error given to the callback (inputs wait for room while
  // generations hold the cache).
  // An encoder (BERT, NomicBERT) runs each input whole in one step, bidirectionally, and pools
  // in the backend. kRank: a reranker's score (its classification head on the first token's
  // state), one float per input, not normalized; for models with that head only.
  enum class Pooling { kMean, kLast, kCls, kRank };
  // Called once on the engine thread: the vectors, or an error (vectors empty).
  using EmbedCallback =
      std::function<void(std::vector<std::vector<float>> vectors, const std::string& error)>;
  void EmbedAsync(std::vector<std::vector<int32_t>> inputs, Pooling pooling, EmbedCallback done);
  // The same, waiting for the result (Error on failure).
  std::vector<std::vector<float>> Embed(const std::vector<std::vector<int32_t>>& inputs,
                                        Pooling pooling);

  struct Impl;

 private:
  explicit Service(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace paddock
