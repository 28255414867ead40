// engine/service_impl.h: the Service's insides, shared by its files (internal to engine/).
//
// service.cpp: the engine thread, submission, the step (schedule, forward, sample, postprocess)
// and finishing; service_choices.cpp: n > 1 forks; service_embed.cpp: embeddings;
// service_logprobs.cpp: log-probabilities of sampled and prompt tokens.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "engine/engine_impl.h"
#include "engine/request_stream.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/speculative.h"
#include "engine/text_stream.h"
#include "paddock/service.h"

namespace paddock {
namespace service_detail {

// A request: the scheduler's Sequence plus what the service keeps for it.
struct Request : Sequence {
  uint64_t id = 0;
  ImageRows image_rows;  // the prompt's images, once encoded (Sequence::attend_end points in)
  bool traced = false;   // --trace: its spans were opened at Submit
  std::shared_ptr<RequestStream> stream;
  RequestStream::State* state = nullptr;  // stream's shared state
  RequestOptions opt;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<Constraint> constraint;  // a grammar's matcher (constrained decoding)
  TextAssembler text;
  double t_submit = 0, t_admit = 0, t_first = 0, t_last = 0, deadline = 0;
  // Speculative decoding: the request's controller (its own acceptance estimate), the drafts'
  // distributions, the history with the drafts appended (penalties), its draft-model slot.
  SpecController spec;
  std::vector<DraftDist> q;
  std::vector<int32_t> hist;
  int draft_slot = -1;
  // A hybrid model's recurrent state before a verification (KvManager::SaveState).
  std::vector<uint8_t> state_backup;
  // Log-probabilities: the logits row as the model gave it (the sampler changes it in place),
  // the sampled token's entry, every entry (for the result); the prompt's (echo) once computed.
  std::vector<float> row;
  TokenLogprob last_lp;
  std::vector<TokenLogprob> logprobs, prompt_logprobs;
  bool prompt_logprobs_done = false;
  // n > 1: the further choices' streams (choice i at i - 1), forked when the first token is
  // sampled; `choices_pending` until then.
  std::vector<std::shared_ptr<RequestStream>> choice_streams;
  bool choices_pending = false;
  int32_t last_sampled = -1;        // a new choice's first token (until it starts)
  KvManager::SeqId fork_from = -1;  // ... and the parent's KV sequence it forks

  bool Cancelled() const { return state->cancel.load(std::memory_order_relaxed); }
};

inline Request& AsRequest(Sequence& s) {
  return static_cast<Request&>(s);
}

}  // namespace service_detail

using service_detail::AsRequest;
using service_detail::Request;

struct Service::Impl {
  std::unique_ptr<Engine> engine;
  Engine::Impl* e = nullptr;
  ServiceOptions opt;
  int kv_total_blocks = 0, kv_block_size = 1, kv_window = 0;  // fixed at creation
  int kv_state_slots = 0;  // a hybrid model's recurrent state slots (0: none)

  // Shared with callers.
  mutable std::mutex mu;
  std::condition_variable cv;
  std::vector<std::unique_ptr<Request>> inbox;
  size_t queued = 0;  // inbox + waiting (admission control counts both)
  bool accepting = true;
  bool stop = false;
  double grace_deadline = 0;  // > 0: cancel whatever is left at this time
  uint64_t next_id = 1;
  std::thread thread;

  // Statistics: `stats` is the engine thread's own (no lock per token); UpdateGauges publishes
  // it once per step into `published`, which Stats() reads. Rejections happen on callers'
  // threads and are counted apart.
  mutable std::mutex stats_mu;
  ServiceStats published;
  std::atomic<uint64_t> rejected{0};
  ServiceStats stats;  // engine thread only

  // Engine thread only.
  // A scheduler per lane: one, or for a pipeline's head one per process, each lane's step in
  // flight through the stages while the head runs the next lane's (vLLM's virtual engines).
  // Requests join the lane with the fewest; `scheduler` is the lane being stepped.
  std::vector<std::unique_ptr<Scheduler>> lanes;
  std::vector<uint8_t> in_flight;  // per lane: its step launched, not yet completed
  size_t lane = 0;
  Scheduler* scheduler = nullptr;
  bool Idle() const;
  Scheduler& LeastBusyLane();
  bool AnyInFlight() const;
  std::vector<Scheduler::Finished> finished;
  std::string step_error;  // a failed step: what the requests it ends are told
  std::vector<StepItem> items;
  std::vector<const float*> logits;
  std::vector<int32_t> sampled;
  // Grammar masks of a step, computed before sampling, in parallel across requests.
  std::vector<const uint64_t*> masks;
  std::vector<double> mask_seconds;
  std::vector<size_t> mask_rows;
  void Masks(const Scheduler::Batch& batch);
  std::vector<KvView> views;
  std::vector<std::unique_ptr<Sampler>> spare_samplers;

  void Loop();
  bool Step();
  bool StepLane();    // one lane of a pipelined head: complete its step, launch the next
  void DrainLanes();  // completes every step in flight (before a synchronous forward)
  void CompleteLane(size_t l);
  void Propose();
  void Forward(const Scheduler::Batch& batch);
  void Launch(const Scheduler::Batch& batch);
  int Items(const Scheduler::Batch& batch);
  void RemoveEnded();
  bool PromptLogprobsOf(Scheduler& l, bool run);
  void Finalize(const Scheduler::Batch& batch);  // sample, commit, the per-token rule
  // A hybrid model after verification: the sequences that rejected drafts get their state
  // back and recompute the token and the accepted drafts alone (their K/V rows again, the same).
  void RecomputeAccepted(const Scheduler::Batch& batch);
  // --spec mtp: each request's kept tokens of the step (a prompt chunk; the token and the
  // accepted drafts) and their hidden states to its slot of the prediction block.
  void FeedMtp(const Scheduler::Batch& batch);
  void Sample(const Scheduler::Batch& batch);
  void OnAdmit(Request& r);
  bool OnToken(Request& r, int32_t token);
  // The per-token rule (engine/stop_rule.h) for r: its end tokens, grammar and text.
  std::optional<FinishReason> Apply(Request& r, int32_t token);
  // The sampled token's log-probability entry (from r.row), texts filled in.
  void Logprob(Request& r, int32_t token, int prev);
  void PromptLogprobs(Request& r);
  // n > 1: the choices after the first, each with its first token from the same logits row;
  // forked (KV blocks shared) and started after Commit.
  void SpawnChoices(Request& parent, const float* row);
  static std::unique_ptr<Request> ForkFrom(const Request& parent, size_t i);
  void StartChoices();
  std::vector<std::unique_ptr<Request>> new_choices;
  // Work for the engine thread between steps (embeddings), under `mu`.
  // A job returns false to run again after the next step.
  std::vector<std::function<bool()>> jobs;
  void RunJobs();
  std::function<bool()> ImageJob(std::unique_ptr<Request> r);
  uint64_t encoder_owner = 0;  // the request whose tile the encoder holds (0: none)
  double step_ema = 0;         // seconds of a step's forward (image steps excluded), averaged
  double image_in_step = 0;    // seconds of image work in the current step
  void FinishAll();            // everything in `finished`
  void Finish(Request& r, FinishReason why);
  void UpdateGauges();  // and Publish
  void Publish() {
    std::lock_guard<std::mutex> lock(stats_mu);
    published = stats;
  }
  void WakeEngine() {
    std::lock_guard<std::mutex> lock(mu);
    cv.notify_all();
  }
};

}  // namespace paddock
