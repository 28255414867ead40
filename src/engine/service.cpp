// engine/service.cpp: the engine thread around the Scheduler (engine/scheduler.h).
//
// Threads: callers (e.g. HTTP handlers) Submit() and read their RequestStream; the engine
// thread owns the Engine, the KV manager, the Scheduler and every Request. The two meet in
// three places, each under its own mutex: the inbox of new requests, each stream's State, and
// the stats. Per step: drop cancelled and expired requests; Schedule() (the policy lives
// there); one batched forward; Commit(); sample; Postprocess() (the stop rule); stream text;
// finish. Statistics and timing are kept here, not in the scheduler.
#include "paddock/service.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <thread>

#include "base/strings.h"
#include "base/timer.h"
#include "engine/service_impl.h"
#include "engine/stop_rule.h"
#include "kernels/kernels.h"

namespace paddock {

// ---- Service --------------------------------------------------------------------------------

namespace {

std::vector<double> LatencyBuckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,  0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0};
}
std::vector<double> TokenBuckets() {
  return {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000};
}

}  // namespace

Service::Service(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Service::~Service() {
  Shutdown(0);
}

const Engine& Service::engine() const {
  return *impl_->engine;
}
const ServiceOptions& Service::options() const {
  return impl_->opt;
}

std::unique_ptr<Service> Service::Create(std::unique_ptr<Engine> engine, const ServiceOptions& o) {
  if (!engine) Fail("service: no engine");
  auto impl = std::make_unique<Impl>();
  impl->e = engine->impl_.get();
  const int engine_batch = impl->e->backend->max_batch();
  if (o.max_batch_tokens < 0 || o.max_batch_tokens > engine_batch)
    Fail("max batch tokens %d is out of range [1, %d] (the engine's batch limit)",
         o.max_batch_tokens, engine_batch);
  if (o.max_running < 1 || o.max_running > 256)
    Fail("max running requests %d is out of range [1, 256]", o.max_running);
  if (o.max_queue < 0 || o.max_queue > 1000000)
    Fail("max queue %d is out of range [0, 1000000]", o.max_queue);
  if (!(o.kv_watermark > 0 && o.kv_watermark <= 1))
    Fail("KV watermark %g is out of range (0, 1]", o.kv_watermark);
  impl->opt = o;
  SchedulerOptions so;
  so.token_budget = o.max_batch_tokens > 0 ? o.max_batch_tokens : engine_batch;
  so.max_running = std::min({o.max_running, so.token_budget, engine_batch});
  so.kv_watermark = o.kv_watermark;
  so.static_batching = o.static_batching;
  so.prefill_until = [t = impl->e->backend.get()](int n_prompt) {
    return t->AltPromptTokens(n_prompt);
  };
  // A Gated DeltaNet's chunked prefill: whole aligned chunks in one step (when a step holds one).
  const ModelConfig& mc = impl->e->model->config;
  bool delta = false;
  for (int l = 0; l < mc.n_layers; ++l) delta = delta || mc.Kind(l) == LayerKind::kDeltaNet;
  if (delta && impl->e->backend->options().chunked_delta && so.token_budget >= kDeltaChunk)
    so.align_prompt = kDeltaChunk;
  const int n_lanes = impl->e->Lanes();
  if (n_lanes > 1)  // the running limit is the service's: shared by the lanes
    so.max_running = std::max(1, (so.max_running + n_lanes - 1) / n_lanes);
  for (int l = 0; l < n_lanes; ++l)
    impl->lanes.push_back(std::make_unique<Scheduler>(*impl->e->kv, so));
  impl->in_flight.assign(static_cast<size_t>(n_lanes), 0);
  impl->scheduler = impl->lanes[0].get();
  impl->engine = std::move(engine);
  impl->kv_total_blocks = impl->e->kv->Memory().total_blocks;
  impl->kv_state_slots = impl->e->kv->Memory().state_slots;
  impl->kv_block_size = impl->e->kv->block_size();
  impl->kv_window = impl->e->kv->window();
  Impl& s = *impl;
  s.stats.ttft = Histogram(LatencyBuckets());
  s.stats.itl = Histogram(LatencyBuckets());
  s.stats.e2e = Histogram(LatencyBuckets());
  s.stats.queue_time = Histogram(LatencyBuckets());
  s.stats.prompt_len = Histogram(TokenBuckets());
  s.stats.generation_len = Histogram(TokenBuckets());
  const size_t max_running = static_cast<size_t>(so.max_running);
  s.items.reserve(max_running);
  s.views.reserve(max_running);
  s.logits.resize(max_running);
  s.sampled.resize(max_running);
  s.masks.resize(max_running);
  s.mask_seconds.resize(max_running);
  s.mask_rows.reserve(max_running);
  s.finished.reserve(max_running);
  s.UpdateGauges();
  s.thread = std::thread([p = impl.get()] { p->Loop(); });
  return std::unique_ptr<Service>(new Service(std::move(impl)));
}

SubmitStatus Service::Submit(const std::vector<int32_t>& prompt, const RequestOptions& o,
                             std::shared_ptr<RequestStream>* stream) {
  if (o.n != 1) Fail("n = %d needs the Submit that returns one stream per choice", o.n);
  std::vector<std::shared_ptr<RequestStream>> streams;
  const SubmitStatus st = Submit(prompt, o, &streams);
  if (st == SubmitStatus::kAccepted) *stream = streams[0];
  return st;
}

SubmitStatus Service::Submit(const std::vector<int32_t>& prompt, const RequestOptions& o,
                             std::vector<std::shared_ptr<RequestStream>>* streams) {
  Impl& s = *impl_;
  RequireGenerator(*s.e);
  if (o.n < 1 || o.n > kMaxChoices) Fail("n = %d is out of range [1, %d]", o.n, kMaxChoices);
  if (o.generate.logprobs < -1 || o.generate.logprobs > 20)
    Fail("logprobs %d is out of range [0, 20]", o.generate.logprobs);
  const int ctx = s.e->context;
  ValidatePrompt(prompt, ctx, s.e->model->config.n_vocab, o.generate);
  if (!(o.timeout_seconds >= 0) || o.timeout_seconds > 1e7)
    Fail("timeout %g is out of range", o.timeout_seconds);
  // A prompt the whole pool cannot hold would wait forever. (Pool geometry is fixed at
  // creation; the KV manager itself belongs to the engine thread.)
  const int64_t need_blocks =
      (static_cast<int64_t>(prompt.size()) + 1 + s.kv_block_size - 1) / s.kv_block_size;
  if (s.kv_window == 0 && need_blocks > s.kv_total_blocks) {
    Fail("the prompt of %zu tokens does not fit in the KV cache (%d blocks of %d tokens)",
         prompt.size(), s.kv_total_blocks, s.kv_block_size);
  }

  if (s.kv_state_slots > 0 && o.n > s.kv_state_slots)
    Fail("n = %d choices need %d recurrent states; the engine holds %d (--state-slots)", o.n, o.n,
         s.kv_state_slots);
  if (o.generate.images != nullptr) {
    if (!s.e->images) Fail("this model takes no images");
    if (o.generate.images->n_prompt != static_cast<int>(prompt.size()))
      Fail("the images belong to another prompt");
  }
  auto r = std::make_unique<Request>();
  r->opt = o;
  r->lora = o.lora.get();
  ResolveDryBreakers(*s.e->model->tokenizer, &r->opt.generate.sampling);
  r->priority = o.priority;
  r->max_tokens = o.generate.max_tokens;
  r->ignore_eos = o.generate.ignore_eos;
  r->n_prompt = static_cast<int>(prompt.size());
  r->limit = static_cast<int>(
      std::min<int64_t>(ctx, static_cast<int64_t>(prompt.size()) + o.generate.max_tokens));
  r->tokens.reserve(static_cast<size_t>(r->limit) + 1);
  r->tokens.assign(prompt.begin(), prompt.end());
  r->t_submit = NowSeconds();
  r->deadline = o.timeout_seconds > 0 ? r->t_submit + o.timeout_seconds : 0;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.accepting) return SubmitStatus::kShuttingDown;
    if (s.queued >= static_cast<size_t>(s.opt.max_queue)) {
      s.rejected.fetch_add(1, std::memory_order_relaxed);
      return SubmitStatus::kQueueFull;
    }
    r->id = s.next_id++;
    r->arrival = r->id;
    r->stream = std::make_shared<RequestStream>(r->id);
    Impl* ip = &s;
    r->state = r->stream->state_.get();
    r->state->wake_engine = [ip] { ip->WakeEngine(); };
    streams->assign(1, r->stream);
    for (int i = 1; i < o.n; ++i) {
      auto cs = std::make_shared<RequestStream>(s.next_id++);
      cs->state_->wake_engine = [ip] { ip->WakeEngine(); };
      r->choice_streams.push_back(cs);
      streams->push_back(cs);
    }
    r->choices_pending = o.n > 1;
    r->forks = o.n - 1;
    if (Tracer* t = s.e->tracer.get()) {
      r->traced = true;
      t->AsyncBegin("request", "request", r->id, r->t_submit,
                    StrFormat("\"id\": %llu, \"prompt_tokens\": %d, \"max_tokens\": %d",
                              (unsigned long long)r->id, r->n_prompt, r->max_tokens));
      t->AsyncBegin("queued", "request", r->id, r->t_submit);
    }
    s.queued++;
    if (r->opt.generate.images != nullptr) {
      s.jobs.push_back(s.ImageJob(std::move(r)));
    } else {
      s.inbox.push_back(std::move(r));
    }
  }
  s.cv.notify_all();
  return SubmitStatus::kAccepted;
}

bool Service::accepting() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->accepting;
}

void Service::Shutdown(double grace_seconds) {
  Impl& s = *impl_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.accepting = false;
    s.stop = true;
    s.grace_deadline = NowSeconds() + std::max(0.0, grace_seconds);
  }
  s.cv.notify_all();
  if (s.thread.joinable()) s.thread.join();
}

ServiceStats Service::Stats() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mu);
  ServiceStats st = impl_->published;
  st.rejected = impl_->rejected.load(std::memory_order_relaxed);
  impl_->engine->KvDiskStatsNow(&st.memory);  // (written between steps, idle or not)
  return st;
}

// ---- engine thread --------------------------------------------------------------------------

void Service::Impl::Loop() {
  if (e->tracer) e->tracer->NameThread("engine");
  for (;;) {
    bool cancel_all = false;
    {
      std::unique_lock<std::mutex> lock(mu);
      for (;;) {
        for (auto& r : inbox) LeastBusyLane().Add(std::move(r));
        inbox.clear();
        if (stop && NowSeconds() >= grace_deadline) cancel_all = true;
        if (!Idle() || cancel_all || !jobs.empty()) break;
        if (stop) return;
        cv.wait(lock);
      }
    }
    bool progressed = false;
    {
      // Engines sharing the cores (EngineOptions::compute) take turns, one step each.
      ComputeTurn turn(e->compute ? e->compute->impl() : nullptr);
      if (cancel_all) {
        try {
          DrainLanes();
        } catch (const std::exception&) {  // (a lost stage: nothing to wait for)
        }
        for (auto& l : lanes) l->Clear(&finished);
        FinishAll();
        RunJobs();  // (no caller is left waiting)
        UpdateGauges();
        std::lock_guard<std::mutex> lock(mu);
        if (inbox.empty()) return;
        continue;
      }
      try {
        TraceScope ts(e->tracer.get(), "step", "engine");
        const uint64_t preempted = scheduler->preemptions();
        const double t_step = NowSeconds();
        image_in_step = 0;
        progressed = Step();
        // The decoding step's own time (image work excluded): what an image step may add.
        const double dt = NowSeconds() - t_step - image_in_step;
        if (progressed && dt > 0) step_ema = step_ema > 0 ? 0.8 * step_ema + 0.2 * dt : dt;
        if (Tracer* t = e->tracer.get()) {
          const double now = NowSeconds();
          if (scheduler->preemptions() > preempted)
            t->Instant("preempt", "schedule", now,
                       StrFormat("\"requests\": %llu",
                                 (unsigned long long)(scheduler->preemptions() - preempted)));
          t->Counter("running", now, static_cast<double>(scheduler->running().size()));
          t->Counter("waiting", now, static_cast<double>(scheduler->waiting().size()));
        }
      } catch (const std::exception& ex) {
        // A failed step must not take the server down or leave callers waiting: fail every
        // running request (their text so far stays delivered) and go on.
        std::fprintf(stderr, "paddock: engine step failed: %s\n", ex.what());
        scheduler->Clear(&finished, /*running_only=*/true);
        in_flight[lane] = 0;
        step_error = ex.what();
        FinishAll();
        step_error.clear();
        progressed = true;
      }
      UpdateGauges();
    }
    if (!progressed) {
      // Nothing could run (e.g. every request waits for blocks held by the prefix cache or a
      // deadline); wait briefly for a change instead of spinning.
      std::unique_lock<std::mutex> lock(mu);
      cv.wait_for(lock, std::chrono::milliseconds(5));
    }
  }
}

// A request's images, encoded between steps; then the request joins a lane. An image step
// runs quarter layers of one tile for at most half the time a decoding step takes (measured:
// step_ema), so streams decoding meanwhile see their inter-token time grow by half at most;
// with nothing decoding it runs up to 0.25 s. One encode runs at a time (the encoder's
// scratch); tiles already cached cost nothing.
std::function<bool()> Service::Impl::ImageJob(std::unique_ptr<Request> req) {
  auto holder = std::make_shared<std::unique_ptr<Request>>(std::move(req));
  auto done = std::make_shared<std::vector<std::shared_ptr<const std::vector<float>>>>();
  const uint64_t id = (*holder)->id;
  return [this, holder, done, id]() -> bool {
    Request& r = **holder;
    const PromptImages& p = *r.opt.generate.images;
    ImageEncoder& enc = *e->images;
    const KernelTable& k = *e->kernels;
    // Cancelled, past its deadline, or the service stopping for good: no more encoding; it
    // joins a lane, where it ends the way every such request does (before any step runs it).
    const double now = NowSeconds();
    bool stopping;
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = stop && now >= grace_deadline;
    }
    if (r.Cancelled() || (r.deadline > 0 && now >= r.deadline) || stopping) {
      if (encoder_owner == id) encoder_owner = 0;
      std::lock_guard<std::mutex> lock(mu);
      inbox.push_back(std::move(*holder));
      return true;
    }
    while (done->size() < p.spans.size()) {
      const auto& span = p.spans[done->size()];
      if (encoder_owner != id) {
        if (auto v = enc.Cached(p, span)) {
          done->push_back(std::move(v));
          continue;
        }
        if (encoder_owner != 0) return false;  // another request's tile is encoding
        encoder_owner = id;
        enc.Start(p, span, k, *e->pool);
      }
      bool decoding = false;
      for (const auto& l : lanes) decoding = decoding || !l->running().empty();
      const double budget = decoding && step_ema > 0 ? 0.5 * step_ema : 0.25;
      const double t0 = NowSeconds();
      std::shared_ptr<const std::vector<float>> v;
      do {
        v = enc.Continue(1);
      } while (v == nullptr && NowSeconds() - t0 < budget);
      image_in_step += NowSeconds() - t0;
      stats.image_steps++;
      if (v == nullptr) return false;
      encoder_owner = 0;
      stats.image_tiles++;
      done->push_back(std::move(v));
      return false;  // the next tile after the next step
    }
    r.image_rows = ImageEncoder::Rows(p, std::move(*done));
    r.attend_end = r.image_rows.attend_end.empty() ? nullptr : r.image_rows.attend_end.data();
    std::lock_guard<std::mutex> lock(mu);
    inbox.push_back(std::move(*holder));
    return true;
  };
}

void Service::Impl::RunJobs() {
  std::vector<std::function<bool()>> todo;
  {
    std::lock_guard<std::mutex> lock(mu);
    todo.swap(jobs);
  }
  std::vector<std::function<bool()>> again;
  for (auto& j : todo)
    if (!j()) again.push_back(std::move(j));
  if (again.empty()) return;
  std::lock_guard<std::mutex> lock(mu);
  for (auto& j : again) jobs.push_back(std::move(j));
}

// The current lane's cancelled and expired requests leave (their blocks free up for the step).
void Service::Impl::RemoveEnded() {
  const double now = NowSeconds();
  auto expired = [now](const Sequence& s) {
    const auto& r = static_cast<const Request&>(s);
    return r.deadline > 0 && now >= r.deadline;
  };
  scheduler->RemoveIf(
      [&](const Sequence& s) { return static_cast<const Request&>(s).Cancelled() || expired(s); },
      [&](const Sequence& s) {
        const bool timeout = expired(s) && !static_cast<const Request&>(s).Cancelled();
        return timeout ? FinishReason::kTimeout : FinishReason::kCancelled;
      },
      &finished);
}

bool Service::Impl::Idle() const {
  for (const auto& l : lanes)
    if (!l->idle()) return false;
  return !AnyInFlight();
}

bool Service::Impl::AnyInFlight() const {
  for (uint8_t f : in_flight)
    if (f) return true;
  return false;
}

Scheduler& Service::Impl::LeastBusyLane() {
  Scheduler* best = lanes[0].get();
  auto load = [](const Scheduler& s) { return s.running().size() + s.waiting().size(); };
  for (auto& l : lanes)
    if (load(*l) < load(*best)) best = l.get();
  return *best;
}

// Completes lane l's step in flight: its logits, then sampling and the per-token rule.
void Service::Impl::CompleteLane(size_t l) {
  lane = l;
  scheduler = lanes[l].get();
  in_flight[l] = 0;
  e->CompleteBatch(static_cast<int>(l), logits.data());
  Finalize(scheduler->batch());
}

void Service::Impl::DrainLanes() {
  if (!AnyInFlight()) return;
  // In the order they were launched: the lanes after the current one, then it.
  for (size_t k = 1; k <= lanes.size(); ++k) {
    const size_t l = (lane + k) % lanes.size();
    if (in_flight[l]) CompleteLane(l);
  }
}

// One lane of a pipelined head: the step it launched a round ago completes (the stages had the
// other lanes' launches to work on meanwhile), then its next step launches.
bool Service::Impl::StepLane() {
  bool progressed = false;
  lane = (lane + 1) % lanes.size();
  if (in_flight[lane]) {
    CompleteLane(lane);
    progressed = true;
  }
  scheduler = lanes[lane].get();
  RemoveEnded();
  Propose();
  const Scheduler::Batch& batch =
      scheduler->Schedule(&finished, [this](Sequence& s) { OnAdmit(AsRequest(s)); });
  FinishAll();
  if (!batch.empty()) {
    Launch(batch);
    in_flight[lane] = 1;
    progressed = true;
  }
  return progressed || AnyInFlight();
}

// Waiting requests of `l` that asked for their prompt's log-probabilities and have not had them
// (a synchronous forward of their prompt, before admission): run them if `run`; whether any.
bool Service::Impl::PromptLogprobsOf(Scheduler& l, bool run) {
  bool any = false;
  for (const auto& w : l.waiting()) {
    Request& r = AsRequest(*w);
    if (!r.opt.prompt_logprobs || r.prompt_logprobs_done) continue;
    any = true;
    if (run) PromptLogprobs(r);
  }
  return any;
}

bool Service::Impl::Step() {
  if (lanes.size() > 1) {
    // A synchronous forward (a job: embeddings; prompt log-probabilities) needs no step in
    // flight: the lanes drain first.
    bool sync = !jobs.empty();
    for (const auto& l : lanes) sync = sync || PromptLogprobsOf(*l, false);
    if (sync) {
      DrainLanes();
      for (const auto& l : lanes) PromptLogprobsOf(*l, true);
      RunJobs();
    }
    return StepLane() || sync;
  }
  RunJobs();
  // 1. Cancelled and expired requests leave first (their blocks free up for this step).
  RemoveEnded();
  // 2. Drafts for decoding requests (speculation), then the policy: who runs this step, with
  // how many tokens.
  Propose();
  PromptLogprobsOf(*scheduler, true);
  const Scheduler::Batch& batch =
      scheduler->Schedule(&finished, [this](Sequence& s) { OnAdmit(AsRequest(s)); });
  FinishAll();
  if (batch.empty()) return false;
  // 3. One batched forward; 4. sample; 5. the stop rule.
  Forward(batch);
  Finalize(batch);
  return true;
}

void Service::Impl::Finalize(const Scheduler::Batch& batch) {
  Sample(batch);  // (verification first: Commit records only the accepted drafts)
  FeedMtp(batch);
  RecomputeAccepted(batch);
  scheduler->Commit();
  StartChoices();
  scheduler->Postprocess(
      sampled.data(), [this](Sequence& s, int32_t t) { return Apply(AsRequest(s), t); }, &finished);
  FinishAll();
}

void Service::Impl::Forward(const Scheduler::Batch& batch) {
  const int n = Items(batch);
  if (e->kv->hybrid()) {  // drafts about to run through the recurrent state: keep it first
    for (Sequence* s : batch.seqs)
      if (!s->draft.empty()) e->kv->SaveState(s->seq, AsRequest(*s).state_backup.data());
  }
  e->StepBatch(items.data(), n, logits.data());
}

// The batch as the forward pass's items (items, views); counts the step.
int Service::Impl::Items(const Scheduler::Batch& batch) {
  const size_t n = batch.seqs.size();
  items.clear();
  views.resize(n);
  uint64_t step_tokens = 0;
  for (size_t k = 0; k < n; ++k) {
    const Sequence& s = *batch.seqs[k];
    views[k] = e->kv->View(s.seq);
    // A decode with drafts asks for the logits of every position (verification).
    items.push_back({s.step_tokens(), batch.n[k], s.computed, &views[k],
                     s.draft.empty() ? 1 : batch.n[k], s.n_prompt});
    items.back().lora = s.lora;
    items.back().keep_state_inputs = !s.draft.empty() && e->kv->hybrid();
    const Request& r = static_cast<const Request&>(s);
    if (r.draft_slot >= 0 && e->mtp != nullptr)  // the prediction block follows its tokens
      items.back().hidden =
          e->hidden.data() + step_tokens * static_cast<size_t>(e->model->config.dim);
    if (!r.image_rows.rows.empty() && s.draft.empty() && s.computed + batch.n[k] <= s.n_prompt) {
      items.back().embeds = r.image_rows.rows.data() + s.computed;
      if (!r.image_rows.attend_end.empty())
        items.back().attend_end = r.image_rows.attend_end.data() + s.computed;
    }
    step_tokens += static_cast<uint64_t>(batch.n[k]);
  }
  stats.steps++;
  stats.step_tokens += step_tokens;
  return static_cast<int>(n);
}

// A pipelined head: the batch's items to the head's layers and on to the stages (the logits
// come with CompleteLane).
void Service::Impl::Launch(const Scheduler::Batch& batch) {
  const int n = Items(batch);
  e->LaunchBatch(items.data(), n, static_cast<int>(lane));
}

// The masks of the constrained requests that sample in this step: each request's own matcher,
// so they run in parallel on the engine's threads (the grammar's mask cache is shared and
// locked). A mask depends only on the matcher's state and the tokens left, both fixed before
// sampling.
void Service::Impl::Masks(const Scheduler::Batch& batch) {
  mask_rows.clear();
  for (size_t k = 0; k < batch.seqs.size(); ++k) {
    masks[k] = nullptr;
    const Request& r = AsRequest(*batch.seqs[k]);
    if (r.constraint && r.max_tokens != 0 && r.draft.empty() && batch.n[k] >= r.to_compute())
      mask_rows.push_back(k);
  }
  auto one = [&](size_t k) {
    Request& r = AsRequest(*batch.seqs[k]);
    mask_seconds[k] = 0;
    masks[k] = r.constraint->Mask(
        &mask_seconds[k],
        std::min(r.max_tokens - r.generated, r.limit - static_cast<int>(r.tokens.size())));
  };
  if (mask_rows.size() < 2) {
    for (size_t k : mask_rows) one(k);
  } else {
    e->pool->ParallelFor(static_cast<int64_t>(mask_rows.size()), [&](int64_t b, int64_t end, int) {
      for (int64_t i = b; i < end; ++i) one(mask_rows[static_cast<size_t>(i)]);
    });
  }
  if (mask_rows.empty()) return;
  for (size_t k : mask_rows) {
    stats.grammar_masks++;
    stats.grammar_mask_seconds += mask_seconds[k];
  }
}

// A token for every request whose known tokens are all computed by this step (-1 for the
// others); for a request with drafts, their verification. Runs before Commit.
void Service::Impl::Sample(const Scheduler::Batch& batch) {
  const double t = NowSeconds();
  Masks(batch);
  for (size_t k = 0; k < batch.seqs.size(); ++k) {
    Request& r = AsRequest(*batch.seqs[k]);
    sampled[k] = -1;
    if (r.max_tokens == 0) continue;
    float* lg = const_cast<float*>(logits[k]);
    if (!r.draft.empty()) {
      // Verification: rows for t and each draft; the accepted drafts and the token after them.
      const int k_drafts = static_cast<int>(r.draft.size()) - 1;
      const size_t V = static_cast<size_t>(e->model->config.n_vocab);
      float* rows[kSpecMaxDraft + 1];
      for (int i = 0; i <= k_drafts; ++i) rows[i] = lg + static_cast<size_t>(i) * V;
      r.hist.assign(r.tokens.begin(), r.tokens.end());
      r.hist.insert(r.hist.end(), r.draft.begin() + 1, r.draft.end());
      int32_t next = 0;
      r.accepted = VerifyDrafts(*r.sampler, rows, r.draft.data() + 1, k_drafts, r.hist.data(),
                                static_cast<int>(r.tokens.size()), r.q.data(), &next);
      r.spec.Observe(k_drafts, r.accepted);
      sampled[k] = next;
      stats.spec_drafts++;
      stats.spec_draft_tokens += static_cast<uint64_t>(k_drafts);
      stats.spec_accepted_tokens += static_cast<uint64_t>(r.accepted);
    } else {
      if (batch.n[k] < r.to_compute()) continue;  // a prompt chunk in progress
      const size_t V = static_cast<size_t>(e->model->config.n_vocab);
      if (r.opt.generate.logprobs >= 0 || r.choices_pending) r.row.assign(lg, lg + V);
      if (r.choices_pending) SpawnChoices(r, r.row.data());  // (before r's grammar advances)
      const uint64_t* mask = masks[k];
      sampled[k] = r.sampler->Sample(lg, r.tokens.data(), static_cast<int>(r.tokens.size()), mask);
      if (r.opt.generate.logprobs >= 0) Logprob(r, sampled[k], r.tokens.back());
    }
    if (r.t_first == 0) {
      stats.ttft.Observe(t - r.t_submit);
    } else {
      stats.itl.Observe(t - r.t_last);
    }
    if (r.t_first == 0 && r.traced) {
      e->tracer->AsyncEnd("prefill", "request", r.id, t);
      e->tracer->AsyncBegin("decode", "request", r.id, t);
    }
    if (r.t_first == 0) r.t_first = t;
    r.t_last = t;
  }
}

// First admission: the queue slot is given back; sampler and text start.
void Service::Impl::OnAdmit(Request& r) {
  r.t_admit = NowSeconds();
  r.last_lp.token = -1;  // no token sampled yet
  if (r.traced) {
    Tracer* t = e->tracer.get();
    t->AsyncEnd("queued", "request", r.id, r.t_admit);
    t->AsyncBegin("prefill", "request", r.id, r.t_admit);
    t->Instant("admit", "schedule", r.t_admit, StrFormat("\"id\": %llu", (unsigned long long)r.id));
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    queued--;  // no longer counted against the queue limit
  }
  stats.queue_time.Observe(r.t_admit - r.t_submit);
  stats.prompt_tokens += static_cast<uint64_t>(r.n_prompt);
  stats.prefix_queries += static_cast<uint64_t>(r.tokens.size());
  stats.prefix_hits += static_cast<uint64_t>(r.cached_tokens);
  if (!spare_samplers.empty()) {
    r.sampler = std::move(spare_samplers.back());
    spare_samplers.pop_back();
  } else {
    r.sampler = std::make_unique<Sampler>(e->model->config.n_vocab);
  }
  r.sampler->Reset(r.opt.generate.sampling);
  if (r.opt.generate.grammar) r.constraint = std::make_unique<Constraint>(*r.opt.generate.grammar);
  r.text.Reset(&r.opt.generate.stop, r.tokens.back(),
               static_cast<size_t>(r.limit - r.n_prompt) * 8 + 64);
  if (e->proposer != nullptr) {
    r.spec = e->spec_ctl;  // the measured cost curve; the acceptance estimate is the request's
    r.hist.reserve(static_cast<size_t>(r.limit) + kSpecMaxDraft + 1);
    r.draft.reserve(kSpecMaxDraft + 1);
    r.q.reserve(kSpecMaxDraft);
    r.state_backup.resize(e->kv->state_bytes());
    if (e->mtp != nullptr && r.draft_slot < 0) e->mtp->Acquire(&r.draft_slot);
  }
}

// A token was appended: its text (returns whether a stop string completed), streamed.
std::optional<FinishReason> Service::Impl::Apply(Request& r, int32_t token) {
  return ApplyToken(r, token, IsEndToken(*e->model->tokenizer, token),
                    r.constraint ? &r.constraint->matcher : nullptr,
                    [&](int32_t t) { return OnToken(r, t); });
}

bool Service::Impl::OnToken(Request& r, int32_t token) {
  const bool stop_string = r.text.Push(*e->model->tokenizer, token);
  if (r.opt.generate.logprobs >= 0 && r.last_lp.token == token) {
    r.logprobs.push_back(r.last_lp);
    r.state->Append(r.text.TakeReady(), &r.last_lp);
  } else {
    r.state->Append(r.text.TakeReady());
  }
  stats.generation_tokens++;
  return stop_string;
}

void Service::Impl::FinishAll() {
  for (auto& f : finished) Finish(AsRequest(*f.seq), f.why);
  finished.clear();
}

void Service::Impl::Finish(Request& r, FinishReason why) {
  const double now = NowSeconds();
  if (r.traced) {
    Tracer* t = e->tracer.get();
    t->AsyncEnd(r.t_first > 0   ? "decode"
                : r.t_admit > 0 ? "prefill"
                                : "queued",
                "request", r.id, now);
    t->AsyncEnd("request", "request", r.id, now);
    t->Instant("finish", "schedule", now,
               StrFormat("\"id\": %llu, \"reason\": \"%s\", \"generated\": %d",
                         (unsigned long long)r.id, FinishReasonName(why), r.generated));
    r.traced = false;
  }
  if (why != FinishReason::kStop && why != FinishReason::kCancelled) r.text.Finish();
  const Tokenizer& tok = *e->model->tokenizer;
  if (why == FinishReason::kEos && r.opt.generate.logprobs >= 0 && r.last_lp.token >= 0 &&
      IsEndToken(tok, r.last_lp.token)) {
    // The end-of-generation token closes the entries (as OpenAI's legacy completions list
    // <|endoftext|>): its probability is what classification and calibration read. It adds no
    // text; its entry's text is the token as spelled.
    r.state->Append(r.text.TakeReady());
    r.logprobs.push_back(r.last_lp);
    r.state->Append("", &r.last_lp);
    r.last_lp.token = -1;
  }
  r.state->Append(r.text.TakeReady());
  GenerateResult res;
  res.text = r.text.text();
  res.prompt_tokens = r.n_prompt;
  res.cached_tokens = r.cached_tokens;
  res.generated_tokens = r.generated;
  res.prompt_seconds = (r.t_first > 0 ? r.t_first : now) - r.t_submit;
  res.decode_seconds = r.t_first > 0 ? now - r.t_first : 0;
  res.finish = why;
  res.error = step_error;
  if (why == FinishReason::kStop && r.text.matched_stop() != nullptr)
    res.stop = *r.text.matched_stop();
  res.logprobs = std::move(r.logprobs);
  res.prompt_logprobs = std::move(r.prompt_logprobs);
  if (r.choices_pending) {  // ended before its first token: the other choices end with it
    for (auto& cs : r.choice_streams) {
      GenerateResult c;
      c.prompt_tokens = res.prompt_tokens;
      c.finish = why;
      c.error = step_error;
      cs->state_->Complete(std::move(c), 0);
    }
    r.choices_pending = false;
  }
  stats.finished[static_cast<int>(why)]++;
  if (why == FinishReason::kCancelled) stats.cancelled++;
  if (why == FinishReason::kTimeout) stats.timeouts++;
  stats.e2e.Observe(now - r.t_submit);
  if (r.admitted_once()) {
    stats.prompt_len.Observe(r.n_prompt);
    stats.generation_len.Observe(r.generated);
  }
  Publish();  // a caller that sees its request end sees it counted
  if (r.sampler) spare_samplers.push_back(std::move(r.sampler));
  if (r.draft_slot >= 0 && e->mtp != nullptr) e->mtp->Release(r.draft_slot);
  if (r.draft_slot >= 0 && e->draft != nullptr) e->draft->Release(r.draft_slot);
  r.state->Complete(std::move(res), (r.admitted_once() ? r.t_admit : now) - r.t_submit,
                    r.admission);
  if (!r.admitted_once()) {
    std::lock_guard<std::mutex> lock(mu);
    queued--;
  }
}

void Service::Impl::UpdateGauges() {
  const MemoryReport m = engine->Memory();
  stats.running = 0;
  stats.waiting = 0;
  stats.preemptions = 0;
  for (const auto& l : lanes) {
    stats.running += static_cast<int>(l->running().size());
    stats.waiting += static_cast<int>(l->waiting().size());
    stats.preemptions += l->preemptions();
  }
  stats.kv_usage = m.kv_total_blocks > 0 ? static_cast<double>(m.kv_used_blocks) /
                                               static_cast<double>(m.kv_total_blocks)
                                         : 0;
  stats.memory = m;
  Publish();
}

}  // namespace paddock
