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
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "base/strings.h"
#include "base/timer.h"
#include "engine/engine_impl.h"
#include "engine/request_stream.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/stop_rule.h"
#include "engine/text_stream.h"

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

// A request: the scheduler's Sequence plus what the service keeps for it.
struct Request : Sequence {
  uint64_t id = 0;
  bool traced = false;  // --trace: its spans were opened at Submit
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

Request& AsRequest(Sequence& s) {
  return static_cast<Request&>(s);
}

}  // namespace

struct Service::Impl {
  std::unique_ptr<Engine> engine;
  Engine::Impl* e = nullptr;
  ServiceOptions opt;
  int kv_total_blocks = 0, kv_block_size = 1, kv_window = 0;  // fixed at creation

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

  mutable std::mutex stats_mu;
  ServiceStats stats;

  // Engine thread only.
  std::unique_ptr<Scheduler> scheduler;
  std::vector<Scheduler::Finished> finished;
  std::vector<Transformer::BatchItem> items;
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
  void Propose();
  void Forward(const Scheduler::Batch& batch);
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
  void StartChoices();
  std::vector<std::unique_ptr<Request>> new_choices;
  // Work for the engine thread between steps (embeddings), under `mu`.
  // A job returns false to run again after the next step.
  std::vector<std::function<bool()>> jobs;
  void RunJobs();
  void FinishAll();  // everything in `finished`
  void Finish(Request& r, FinishReason why);
  void UpdateGauges();
  void WakeEngine() {
    std::lock_guard<std::mutex> lock(mu);
    cv.notify_all();
  }
};

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
  const int engine_batch = impl->e->transformer->max_batch();
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
  so.prefill_until = [t = impl->e->transformer.get()](int n_prompt) {
    return t->Bf16PromptTokens(n_prompt);
  };
  impl->scheduler = std::make_unique<Scheduler>(*impl->e->kv, so);
  impl->engine = std::move(engine);
  impl->kv_total_blocks = impl->e->kv->Memory().total_blocks;
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

  auto r = std::make_unique<Request>();
  r->opt = o;
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
      std::lock_guard<std::mutex> sl(s.stats_mu);
      s.stats.rejected++;
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
    if (Tracer* t = s.e->tracer.get()) {
      r->traced = true;
      t->AsyncBegin("request", "request", r->id, r->t_submit,
                    StrFormat("\"id\": %llu, \"prompt_tokens\": %d, \"max_tokens\": %d",
                              (unsigned long long)r->id, r->n_prompt, r->max_tokens));
      t->AsyncBegin("queued", "request", r->id, r->t_submit);
    }
    s.queued++;
    s.inbox.push_back(std::move(r));
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
  return impl_->stats;
}

// ---- engine thread --------------------------------------------------------------------------

void Service::Impl::Loop() {
  if (e->tracer) e->tracer->NameThread("engine");
  for (;;) {
    bool cancel_all = false;
    {
      std::unique_lock<std::mutex> lock(mu);
      for (;;) {
        for (auto& r : inbox) scheduler->Add(std::move(r));
        inbox.clear();
        if (stop && NowSeconds() >= grace_deadline) cancel_all = true;
        if (!scheduler->idle() || cancel_all || !jobs.empty()) break;
        if (stop) return;
        cv.wait(lock);
      }
    }
    if (cancel_all) {
      scheduler->Clear(&finished);
      FinishAll();
      RunJobs();  // (no caller is left waiting)
      UpdateGauges();
      std::lock_guard<std::mutex> lock(mu);
      if (inbox.empty()) return;
      continue;
    }
    bool progressed = false;
    try {
      TraceScope ts(e->tracer.get(), "step", "engine");
      const uint64_t preempted = scheduler->preemptions();
      progressed = Step();
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
      FinishAll();
      progressed = true;
    }
    UpdateGauges();
    if (!progressed) {
      // Nothing could run (e.g. every request waits for blocks held by the prefix cache or a
      // deadline); wait briefly for a change instead of spinning.
      std::unique_lock<std::mutex> lock(mu);
      cv.wait_for(lock, std::chrono::milliseconds(5));
    }
  }
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

namespace {

// One embeddings request on the engine thread. Inputs are packed into shared forwards (each
// token one row, as many rows as a step takes), in rounds of as many inputs as the KV cache
// holds at once; the kernels are batch invariant, so an input's vector does not depend on its
// neighbours. A round that finds no room while generations hold the cache waits for the next
// step.
struct EmbedJob {
  Engine::Impl* e;
  std::vector<std::vector<int32_t>> inputs;
  Service::Pooling pooling;
  Service::EmbedCallback done;
  std::vector<std::vector<float>> out;
  size_t next = 0;  // the first input not yet computed

  // One row of input k at position pos counts towards its vector.
  bool Takes(size_t k, int pos) const {
    const int n = static_cast<int>(inputs[k].size());
    return pooling == Service::Pooling::kMean ||
           (pooling == Service::Pooling::kLast && pos == n - 1) ||
           (pooling == Service::Pooling::kCls && pos == 0);
  }

  // Runs rounds until done (true) or the cache has no room for the next input while `busy`
  // (false: call again after a step).
  bool Run(bool busy) {
    KvManager& kv = *e->kv;
    const int dim = e->model->config.dim;
    const size_t chunk = static_cast<size_t>(e->transformer->max_items());
    std::vector<Transformer::BatchItem> items;
    std::vector<const float*> rows(chunk);
    struct Span {
      size_t r;
      int start, m;
    };
    std::vector<Span> spans;
    while (next < inputs.size()) {
      struct Round {
        KvManager& kv;
        std::vector<KvManager::SeqId> seqs;
        ~Round() {
          for (auto id : seqs) kv.Free(id);
        }
      } round{kv, {}};
      size_t first = next;
      while (next < inputs.size()) {
        const int n = static_cast<int>(inputs[next].size());
        const KvManager::SeqId seq = kv.Create(n);
        if (!kv.Reserve(seq, n)) {
          kv.Free(seq);
          break;
        }
        round.seqs.push_back(seq);
        ++next;
      }
      if (round.seqs.empty()) {
        if (busy) return false;
        Fail("no room in the KV cache for an embedding input of %zu tokens", inputs[next].size());
      }
      const size_t count = round.seqs.size();
      std::vector<int> done_tokens(count, 0);
      std::vector<std::vector<double>> acc(count, std::vector<double>(static_cast<size_t>(dim)));
      std::vector<KvView> views(count);
      for (size_t cur = 0; cur < count;) {
        items.clear();
        spans.clear();
        for (size_t r = cur; r < count && items.size() < chunk; ++r) {
          const auto& in = inputs[first + r];
          const int left = static_cast<int>(in.size()) - done_tokens[r];
          const int m = std::min<int>(left, static_cast<int>(chunk - items.size()));
          if (m <= 0) continue;
          views[r] = kv.View(round.seqs[r]);
          for (int i = 0; i < m; ++i) {
            const int pos = done_tokens[r] + i;
            items.push_back({&in[static_cast<size_t>(pos)], 1, pos, &views[r]});
          }
          spans.push_back({r, done_tokens[r], m});
        }
        {
          Engine::Impl::StepGuard g(kv);
          e->transformer->ForwardHidden(items.data(), static_cast<int>(items.size()), rows.data());
        }
        size_t row = 0;
        for (const Span& sp : spans) {
          const auto& in = inputs[first + sp.r];
          kv.Commit(round.seqs[sp.r], in.data() + sp.start, sp.m);
          for (int i = 0; i < sp.m; ++i, ++row) {
            if (!Takes(first + sp.r, sp.start + i)) continue;
            const float* h = rows[row];
            for (int d = 0; d < dim; ++d) acc[sp.r][static_cast<size_t>(d)] += h[d];
          }
          done_tokens[sp.r] += sp.m;
        }
        while (cur < count && done_tokens[cur] == static_cast<int>(inputs[first + cur].size()))
          ++cur;
      }
      for (size_t r = 0; r < count; ++r) {
        double norm = 0;
        for (double v : acc[r]) norm += v * v;
        norm = norm > 0 ? 1.0 / std::sqrt(norm) : 0;
        auto& o = out[first + r];
        o.resize(static_cast<size_t>(dim));
        for (int d = 0; d < dim; ++d)
          o[static_cast<size_t>(d)] = static_cast<float>(acc[r][static_cast<size_t>(d)] * norm);
      }
    }
    return true;
  }
};

}  // namespace

void Service::EmbedAsync(std::vector<std::vector<int32_t>> inputs, Pooling pooling,
                         EmbedCallback done) {
  Impl& s = *impl_;
  const int ctx = s.e->context;
  for (const auto& in : inputs) {
    if (in.empty()) Fail("an embedding input is empty");
    if (static_cast<int>(in.size()) > ctx)
      Fail("an embedding input of %zu tokens exceeds the context of %d", in.size(), ctx);
    for (int32_t t : in)
      if (t < 0 || t >= s.e->model->config.n_vocab)
        Fail("token id %d is outside the vocabulary (0..%d)", t, s.e->model->config.n_vocab - 1);
  }
  auto job = std::make_shared<EmbedJob>();
  job->e = s.e;
  job->out.resize(inputs.size());
  job->inputs = std::move(inputs);
  job->pooling = pooling;
  job->done = std::move(done);
  Impl* impl = &s;
  auto run = [job, impl]() -> bool {
    std::string error;
    try {
      if (!job->Run(!impl->scheduler->idle())) return false;
    } catch (const std::exception& ex) {
      error = ex.what();
    }
    job->done(error.empty() ? std::move(job->out) : std::vector<std::vector<float>>(), error);
    return true;
  };
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.accepting) Fail("the service is shutting down");
    s.jobs.push_back(std::move(run));
  }
  s.cv.notify_all();
}

std::vector<std::vector<float>> Service::Embed(const std::vector<std::vector<int32_t>>& inputs,
                                               Pooling pooling) {
  std::promise<std::pair<std::vector<std::vector<float>>, std::string>> done;
  auto result = done.get_future();
  EmbedAsync(inputs, pooling, [&done](std::vector<std::vector<float>> v, const std::string& err) {
    done.set_value({std::move(v), err});
  });
  auto [vectors, error] = result.get();
  if (!error.empty()) Fail("%s", error.c_str());
  return vectors;
}

bool Service::Impl::Step() {
  RunJobs();
  // 1. Cancelled and expired requests leave first (their blocks free up for this step).
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
  // 2. Drafts for decoding requests (speculation), then the policy: who runs this step, with
  // how many tokens.
  Propose();
  for (const auto& w : scheduler->waiting()) {
    Request& r = AsRequest(*w);
    if (r.opt.prompt_logprobs && !r.prompt_logprobs_done) PromptLogprobs(r);
  }
  const Scheduler::Batch& batch =
      scheduler->Schedule(&finished, [this](Sequence& s) { OnAdmit(AsRequest(s)); });
  FinishAll();
  if (batch.empty()) return false;
  // 3. One batched forward; 4. sample; 5. the stop rule.
  Forward(batch);
  Sample(batch);  // (verification first: Commit records only the accepted drafts)
  scheduler->Commit();
  StartChoices();
  scheduler->Postprocess(
      sampled.data(), [this](Sequence& s, int32_t t) { return Apply(AsRequest(s), t); }, &finished);
  FinishAll();
  return true;
}

void Service::Impl::Forward(const Scheduler::Batch& batch) {
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
    step_tokens += static_cast<uint64_t>(batch.n[k]);
  }
  e->StepBatch(items.data(), static_cast<int>(n), logits.data());
  std::lock_guard<std::mutex> lock(stats_mu);
  stats.steps++;
  stats.step_tokens += step_tokens;
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
  std::lock_guard<std::mutex> lock(stats_mu);
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
      std::lock_guard<std::mutex> lock(stats_mu);
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
    {
      std::lock_guard<std::mutex> lock(stats_mu);
      if (r.t_first == 0) {
        stats.ttft.Observe(t - r.t_submit);
      } else {
        stats.itl.Observe(t - r.t_last);
      }
    }
    if (r.t_first == 0 && r.traced) {
      e->tracer->AsyncEnd("prefill", "request", r.id, t);
      e->tracer->AsyncBegin("decode", "request", r.id, t);
    }
    if (r.t_first == 0) r.t_first = t;
    r.t_last = t;
  }
}

// Drafts for the decoding requests while the batch is small (a full batch is compute-bound
// already): each request's controller picks how many from its acceptance and the measured
// verification cost; the budget the scheduler spends counts them.
void Service::Impl::Propose() {
  if (e->proposer == nullptr) return;
  const auto& running = scheduler->running();
  const bool small = static_cast<int>(running.size()) <= kSpecMaxBatch;
  for (const auto& seq : running) {
    Request& r = AsRequest(*seq);
    r.draft.clear();
    if (!small || r.to_compute() != 1 || r.max_tokens == 0 || !r.sampler || r.constraint ||
        r.opt.generate.logprobs >= 0)
      continue;
    int k = std::min({r.spec.Choose(), r.max_tokens - r.generated - 1,
                      r.limit - static_cast<int>(r.tokens.size()) - 1, kSpecMaxDraft});
    if (k <= 0) continue;
    if (e->draft != nullptr) {
      if (r.draft_slot < 0 && !e->draft->Acquire(&r.draft_slot)) continue;
      e->draft->Select(r.draft_slot);
    }
    r.draft.resize(static_cast<size_t>(k) + 1);
    r.q.resize(static_cast<size_t>(k));
    k = e->proposer->Propose(r.tokens.data(), static_cast<int>(r.tokens.size()), k,
                             r.draft.data() + 1, r.q.data());
    if (k <= 0) {
      r.draft.clear();
      continue;
    }
    r.draft.resize(static_cast<size_t>(k) + 1);
    r.draft[0] = r.tokens.back();
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
  {
    std::lock_guard<std::mutex> lock(stats_mu);
    stats.queue_time.Observe(r.t_admit - r.t_submit);
    stats.prompt_tokens += static_cast<uint64_t>(r.n_prompt);
    stats.prefix_queries += static_cast<uint64_t>(r.tokens.size());
    stats.prefix_hits += static_cast<uint64_t>(r.cached_tokens);
  }
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
  std::lock_guard<std::mutex> lock(stats_mu);
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
  res.logprobs = std::move(r.logprobs);
  res.prompt_logprobs = std::move(r.prompt_logprobs);
  if (r.choices_pending) {  // ended before its first token: the other choices end with it
    for (auto& cs : r.choice_streams) {
      GenerateResult c;
      c.prompt_tokens = res.prompt_tokens;
      c.finish = why;
      cs->state_->Complete(std::move(c), 0);
    }
    r.choices_pending = false;
  }
  {
    std::lock_guard<std::mutex> lock(stats_mu);
    stats.finished[static_cast<int>(why)]++;
    if (why == FinishReason::kCancelled) stats.cancelled++;
    if (why == FinishReason::kTimeout) stats.timeouts++;
    stats.e2e.Observe(now - r.t_submit);
    if (r.admitted_once) {
      stats.prompt_len.Observe(r.n_prompt);
      stats.generation_len.Observe(r.generated);
    }
  }
  if (r.sampler) spare_samplers.push_back(std::move(r.sampler));
  if (r.draft_slot >= 0) e->draft->Release(r.draft_slot);
  r.state->Complete(std::move(res), (r.admitted_once ? r.t_admit : now) - r.t_submit);
  if (!r.admitted_once) {
    std::lock_guard<std::mutex> lock(mu);
    queued--;
  }
}

namespace {

// A log-probability entry's text: what the token decodes to, or, for a control token that
// renders as nothing (end of turn, EOS), its spelling, so that entries stay tellable apart.
std::string LogprobText(const Tokenizer& tok, int prev, int32_t token) {
  const std::string_view d = tok.Decode(prev, token);
  if (d.empty() && tok.Attr(token) == TokenAttr::kControl) return std::string(tok.Piece(token));
  return std::string(d);
}

}  // namespace

void Service::Impl::Logprob(Request& r, int32_t token, int prev) {
  const Tokenizer& tok = *e->model->tokenizer;
  LogprobOf(r.row.data(), e->model->config.n_vocab, token, r.opt.generate.logprobs, &r.last_lp);
  r.last_lp.text = LogprobText(tok, prev, token);
  for (auto& a : r.last_lp.top) a.text = LogprobText(tok, prev, a.token);
}

// The prompt's log-probabilities, on a scratch KV sequence (one batch item per token: each
// position gets its logits), in chunks of the engine's items per step. Without room in the KV
// pool the request goes on without them (its result then has none).
void Service::Impl::PromptLogprobs(Request& r) {
  r.prompt_logprobs_done = true;
  const int n = r.n_prompt;
  if (n < 2) return;
  KvManager& kv = *e->kv;
  const KvManager::SeqId seq = kv.Create(n);
  if (!kv.Reserve(seq, n - 1)) {
    kv.Free(seq);
    return;
  }
  const Tokenizer& tok = *e->model->tokenizer;
  const int chunk = e->transformer->max_items();
  const int k = std::max(0, r.opt.generate.logprobs);
  std::vector<Transformer::BatchItem> items;
  std::vector<const float*> rows(static_cast<size_t>(chunk));
  r.prompt_logprobs.resize(static_cast<size_t>(n - 1));
  for (int start = 0; start < n - 1; start += chunk) {
    const int m = std::min(chunk, n - 1 - start);
    const KvView view = kv.View(seq);
    items.clear();
    for (int i = 0; i < m; ++i)
      items.push_back({&r.tokens[static_cast<size_t>(start + i)], 1, start + i, &view});
    e->StepBatch(items.data(), m, rows.data());
    kv.Commit(seq, r.tokens.data() + start, m);
    for (int i = 0; i < m; ++i) {
      const int pos = start + i + 1;  // the token scored
      TokenLogprob& lp = r.prompt_logprobs[static_cast<size_t>(pos - 1)];
      LogprobOf(rows[static_cast<size_t>(i)], e->model->config.n_vocab,
                r.tokens[static_cast<size_t>(pos)], k, &lp);
      const int prev = r.tokens[static_cast<size_t>(pos - 1)];
      lp.text = LogprobText(tok, prev, lp.token);
      for (auto& a : lp.top) a.text = LogprobText(tok, prev, a.token);
    }
  }
  kv.Free(seq);
  // Streamed too, ahead of any generated token (a streaming echo sends them first).
  for (const TokenLogprob& lp : r.prompt_logprobs) r.state->Append("", &lp);
}

// The further choices of `parent`, at the moment it samples its first token from `row`: each a
// request of its own (its stream, seed + i, the grammar's state copied) that samples its first
// token from the same row now and starts running after Commit, sharing the prompt's blocks.
void Service::Impl::SpawnChoices(Request& parent, const float* row) {
  parent.choices_pending = false;
  const size_t V = static_cast<size_t>(e->model->config.n_vocab);
  std::vector<float> lg(V);
  for (size_t i = 0; i < parent.choice_streams.size(); ++i) {
    auto c = std::make_unique<Request>();
    c->opt = parent.opt;
    c->opt.n = 1;
    c->opt.prompt_logprobs = false;
    c->opt.generate.sampling.seed = parent.opt.generate.sampling.seed + i + 1;
    c->priority = parent.priority;
    c->max_tokens = parent.max_tokens;
    c->ignore_eos = parent.ignore_eos;
    c->n_prompt = parent.n_prompt;
    c->limit = parent.limit;
    c->tokens.reserve(static_cast<size_t>(c->limit) + 1);
    c->tokens = parent.tokens;
    c->arrival = parent.arrival;
    c->admitted_once = true;
    c->cached_tokens = parent.cached_tokens;
    c->stream = parent.choice_streams[i];
    c->id = c->stream->id();
    c->state = c->stream->state_.get();
    c->t_submit = parent.t_submit;
    c->t_admit = parent.t_admit;
    c->deadline = parent.deadline;
    c->sampler = std::make_unique<Sampler>(static_cast<int>(V));
    c->sampler->Reset(c->opt.generate.sampling);
    if (parent.constraint) c->constraint = std::make_unique<Constraint>(*parent.constraint);
    c->text.Reset(&c->opt.generate.stop, c->tokens.back(),
                  static_cast<size_t>(c->limit - c->n_prompt) * 8 + 64);
    c->row.assign(row, row + V);
    lg.assign(row, row + V);
    const uint64_t* mask = nullptr;
    if (c->constraint) {
      mask = c->constraint->Mask(nullptr, std::min(c->max_tokens - c->generated,
                                                   c->limit - static_cast<int>(c->tokens.size())));
    }
    const int32_t t =
        c->sampler->Sample(lg.data(), c->tokens.data(), static_cast<int>(c->tokens.size()), mask);
    if (c->opt.generate.logprobs >= 0) Logprob(*c, t, c->tokens.back());
    c->draft.clear();
    c->accepted = 0;
    c->last_sampled = t;
    c->fork_from = parent.seq;
    new_choices.push_back(std::move(c));
  }
  std::lock_guard<std::mutex> lock(stats_mu);
  stats.forked_choices += parent.choice_streams.size();
}

// After Commit: each new choice forks the parent's KV sequence (the prompt now committed), takes
// its first token through the stop rule, and runs.
void Service::Impl::StartChoices() {
  if (new_choices.empty()) return;
  for (auto& c : new_choices) {
    // (The parent sampled in this step: it is still running, its prompt just committed.)
    const double now = NowSeconds();
    c->t_first = c->t_last = now;
    if (c->Cancelled()) {
      Finish(*c, FinishReason::kCancelled);
      continue;
    }
    c->seq = e->kv->Fork(c->fork_from);
    c->computed = c->n_prompt;
    const std::optional<FinishReason> why = Apply(*c, c->last_sampled);
    if (why) {
      e->kv->Free(c->seq);
      c->seq = -1;
      Finish(*c, *why);
      continue;
    }
    scheduler->AddRunning(std::move(c));
  }
  new_choices.clear();
}

void Service::Impl::UpdateGauges() {
  const MemoryReport m = engine->Memory();
  std::lock_guard<std::mutex> lock(stats_mu);
  stats.running = static_cast<int>(scheduler->running().size());
  stats.waiting = static_cast<int>(scheduler->waiting().size());
  stats.kv_usage = m.kv_total_blocks > 0 ? static_cast<double>(m.kv_used_blocks) /
                                               static_cast<double>(m.kv_total_blocks)
                                         : 0;
  stats.preemptions = scheduler->preemptions();
  stats.memory = m;
}

}  // namespace paddock
