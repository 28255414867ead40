// engine/service.cpp: the continuous-batching scheduler and its engine thread.
//
// Threads: callers (e.g. HTTP handlers) Submit() and read their RequestStream; the engine
// thread owns the Engine, the KV manager and every Request. The two meet in three places,
// each under its own mutex: the inbox of new requests, each stream's State, and the stats.
// Per step: drop cancelled and expired requests; give the token budget to running requests
// (decodes first, then prompt chunks, both in priority order), preempting the lowest-priority,
// most recent request when KV blocks run out; admit waiting requests into what is left; one
// batched forward; commit, sample, stream text; finish and free.
#include "paddock/service.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <condition_variable>
#include <atomic>
#include <mutex>
#include <thread>

#include "base/strings.h"
#include "base/timer.h"
#include "engine/engine_impl.h"
#include "engine/sampler.h"
#include "engine/text_stream.h"

namespace paddock {

// ---- Histogram ------------------------------------------------------------------------------

void Histogram::Observe(double v) {
  size_t i = 0;
  while (i < bounds.size() && v > bounds[i]) ++i;
  counts[i]++;
  sum += v;
  count++;
}

double Histogram::Quantile(double q) const {
  if (count == 0) return 0;
  const double want = q * static_cast<double>(count);
  uint64_t acc = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    acc += counts[i];
    if (static_cast<double>(acc) >= want) return i < bounds.size() ? bounds[i] : INFINITY;
  }
  return INFINITY;
}

// ---- RequestStream --------------------------------------------------------------------------

struct RequestStream::State {
  std::mutex mu;
  std::condition_variable cv;
  std::string pending;  // produced, not yet read
  bool done = false;
  GenerateResult result;
  double queue_seconds = 0;
  std::atomic<bool> cancel{false};
  std::function<void()> wake_engine;
};

RequestStream::RequestStream(uint64_t id) : id_(id), state_(std::make_unique<State>()) {}
RequestStream::~RequestStream() = default;

RequestStream::Status RequestStream::Wait(std::string* out, double timeout_seconds) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  s.cv.wait_for(lock, std::chrono::duration<double>(std::max(0.0, timeout_seconds)),
                [&] { return !s.pending.empty() || s.done; });
  if (!s.pending.empty()) {
    out->append(s.pending);
    s.pending.clear();
    return Status::kText;
  }
  if (s.done) {
    result_ = s.result;
    queue_seconds_ = s.queue_seconds;
    return Status::kDone;
  }
  return Status::kTimeout;
}

void RequestStream::Cancel() {
  state_->cancel.store(true);
  if (state_->wake_engine) state_->wake_engine();
}

bool RequestStream::done() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

// ---- Service --------------------------------------------------------------------------------

namespace {

std::vector<double> LatencyBuckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0};
}
std::vector<double> TokenBuckets() {
  return {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000};
}

struct Request {
  uint64_t id = 0;
  uint64_t arrival = 0;  // submission order
  std::shared_ptr<RequestStream> stream;
  RequestStream::State* state = nullptr;  // stream's shared state
  RequestOptions opt;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int n_prompt = 0;
  int computed = 0;             // leading tokens whose K/V are in the cache
  int generated = 0;
  int limit = 0;                // tokens (prompt + generated) the request may reach
  int cached_tokens = 0;
  KvManager::SeqId seq = -1;
  std::unique_ptr<Sampler> sampler;
  TextAssembler text;
  double t_submit = 0, t_admit = 0, t_first = 0, t_last = 0, deadline = 0;
  bool admitted_once = false;

  bool Cancelled() const { return state->cancel.load(std::memory_order_relaxed); }
};

// Higher priority first, then earlier arrival.
bool Before(const Request* a, const Request* b) {
  if (a->opt.priority != b->opt.priority) return a->opt.priority > b->opt.priority;
  return a->arrival < b->arrival;
}

}  // namespace

struct Service::Impl {
  std::unique_ptr<Engine> engine;
  Engine::Impl* e = nullptr;
  ServiceOptions opt;
  int budget = 0;
  int max_running = 0;
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
  std::vector<std::unique_ptr<Request>> running;  // admission order
  std::vector<std::unique_ptr<Request>> waiting;  // sorted by Before()
  std::vector<Transformer::BatchItem> items;
  std::vector<Request*> item_req;
  std::vector<int> item_n;
  std::vector<const float*> logits;
  std::vector<KvView> views;
  std::vector<std::unique_ptr<Sampler>> spare_samplers;
  uint64_t preemptions = 0;

  void Loop();
  bool Step();
  void Finish(std::unique_ptr<Request> r, FinishReason why);
  void Publish(Request& r);
  bool Admit(Request& r, int* budget_left);
  Request* PickVictim();
  // Returns the tokens the victim had been given this step (now free for others).
  int Preempt(Request* victim);
  void UpdateGauges();
  double KvUsage() const {
    const KvMemoryStats m = e->kv->Memory();
    return m.total_blocks > 0 ? static_cast<double>(m.used_blocks) / m.total_blocks : 0;
  }
  void WakeEngine() {
    std::lock_guard<std::mutex> lock(mu);
    cv.notify_all();
  }
};

Service::Service(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Service::~Service() {
  Shutdown(0);
}

const Engine& Service::engine() const { return *impl_->engine; }
const ServiceOptions& Service::options() const { return impl_->opt; }

std::unique_ptr<Service> Service::Create(std::unique_ptr<Engine> engine, const ServiceOptions& o) {
  if (!engine) Fail("service: no engine");
  auto impl = std::make_unique<Impl>();
  impl->e = engine->impl_.get();
  const int engine_batch = impl->e->transformer->max_batch();
  if (o.max_batch_tokens < 0 || o.max_batch_tokens > engine_batch) Fail("max batch tokens %d is out of range [1, %d] (the engine's batch limit)", o.max_batch_tokens, engine_batch);
  if (o.max_running < 1 || o.max_running > 256) Fail("max running requests %d is out of range [1, 256]", o.max_running);
  if (o.max_queue < 0 || o.max_queue > 1000000) Fail("max queue %d is out of range [0, 1000000]", o.max_queue);
  if (!(o.kv_watermark > 0 && o.kv_watermark <= 1)) Fail("KV watermark %g is out of range (0, 1]", o.kv_watermark);
  impl->opt = o;
  impl->budget = o.max_batch_tokens > 0 ? o.max_batch_tokens : engine_batch;
  impl->max_running = std::min({o.max_running, impl->budget, engine_batch});
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
  s.items.reserve(static_cast<size_t>(s.max_running));
  s.item_req.reserve(static_cast<size_t>(s.max_running));
  s.item_n.reserve(static_cast<size_t>(s.max_running));
  s.logits.resize(static_cast<size_t>(s.max_running));
  s.running.reserve(static_cast<size_t>(s.max_running));
  s.UpdateGauges();
  s.thread = std::thread([p = impl.get()] { p->Loop(); });
  return std::unique_ptr<Service>(new Service(std::move(impl)));
}

SubmitStatus Service::Submit(const std::vector<int32_t>& prompt, const RequestOptions& o,
                             std::shared_ptr<RequestStream>* stream) {
  Impl& s = *impl_;
  const int ctx = s.e->context;
  const int n_vocab = s.e->model->config.n_vocab;
  if (prompt.empty()) Fail("empty prompt: nothing to condition on");
  if (static_cast<int>(prompt.size()) >= ctx) Fail("the prompt has %zu tokens; the context holds %d (prompt plus at least one generated token)", prompt.size(), ctx);
  for (int32_t t : prompt) {
    if (t < 0 || t >= n_vocab) Fail("token id %d is outside the vocabulary (0..%d)", t, n_vocab - 1);
  }
  if (o.generate.max_tokens < 0) Fail("max tokens %d must not be negative", o.generate.max_tokens);
  for (const auto& st : o.generate.stop) {
    if (st.empty()) Fail("stop strings must not be empty");
  }
  ValidateSampling(o.generate.sampling);
  if (!(o.timeout_seconds >= 0) || o.timeout_seconds > 1e7) Fail("timeout %g is out of range", o.timeout_seconds);
  // A prompt the whole pool cannot hold would wait forever. (Pool geometry is fixed at
  // creation; the KV manager itself belongs to the engine thread.)
  const int64_t need_blocks = (static_cast<int64_t>(prompt.size()) + 1 + s.kv_block_size - 1) / s.kv_block_size;
  if (s.kv_window == 0 && need_blocks > s.kv_total_blocks) {
    Fail("the prompt of %zu tokens does not fit in the KV cache (%d blocks of %d tokens)", prompt.size(), s.kv_total_blocks, s.kv_block_size);
  }

  auto r = std::make_unique<Request>();
  r->opt = o;
  r->n_prompt = static_cast<int>(prompt.size());
  r->limit = static_cast<int>(std::min<int64_t>(ctx, static_cast<int64_t>(prompt.size()) + o.generate.max_tokens));
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
    *stream = r->stream;
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
  for (;;) {
    bool cancel_all = false;
    {
      std::unique_lock<std::mutex> lock(mu);
      for (;;) {
        for (auto& r : inbox) {
          auto it = std::upper_bound(waiting.begin(), waiting.end(), r, [](const auto& a, const auto& b) { return Before(a.get(), b.get()); });
          waiting.insert(it, std::move(r));
        }
        inbox.clear();
        if (stop && NowSeconds() >= grace_deadline) cancel_all = true;
        if (!running.empty() || !waiting.empty() || cancel_all) break;
        if (stop) return;
        cv.wait(lock);
      }
    }
    if (cancel_all) {
      while (!running.empty()) {
        auto r = std::move(running.back());
        running.pop_back();
        Finish(std::move(r), FinishReason::kCancelled);
      }
      while (!waiting.empty()) {
        auto r = std::move(waiting.back());
        waiting.pop_back();
        Finish(std::move(r), FinishReason::kCancelled);
      }
      UpdateGauges();
      std::lock_guard<std::mutex> lock(mu);
      if (inbox.empty()) return;
      continue;
    }
    bool progressed = false;
    try {
      progressed = Step();
    } catch (const std::exception& ex) {
      // A failed step must not take the server down or leave callers waiting: fail every
      // request in the step (their text so far stays delivered) and go on.
      std::fprintf(stderr, "paddock: engine step failed: %s\n", ex.what());
      while (!running.empty()) {
        auto r = std::move(running.back());
        running.pop_back();
        Finish(std::move(r), FinishReason::kCancelled);
      }
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

void Service::Impl::Publish(Request& r) {
  const std::string_view piece = r.text.TakeReady();
  if (piece.empty()) return;
  RequestStream::State& st = *r.state;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    st.pending.append(piece);
  }
  st.cv.notify_all();
}

void Service::Impl::Finish(std::unique_ptr<Request> r, FinishReason why) {
  const double now = NowSeconds();
  if (r->seq >= 0) {
    e->kv->Free(r->seq);
    r->seq = -1;
  }
  if (why != FinishReason::kStop && why != FinishReason::kCancelled) r->text.Finish();
  Publish(*r);
  GenerateResult res;
  res.text = r->text.text();
  res.prompt_tokens = r->n_prompt;
  res.cached_tokens = r->cached_tokens;
  res.generated_tokens = r->generated;
  res.prompt_seconds = (r->t_first > 0 ? r->t_first : now) - r->t_submit;
  res.decode_seconds = r->t_first > 0 ? now - r->t_first : 0;
  res.finish = why;
  {
    std::lock_guard<std::mutex> lock(stats_mu);
    stats.finished[static_cast<int>(why)]++;
    if (why == FinishReason::kCancelled) stats.cancelled++;
    if (why == FinishReason::kTimeout) stats.timeouts++;
    stats.e2e.Observe(now - r->t_submit);
    if (r->admitted_once) {
      stats.prompt_len.Observe(r->n_prompt);
      stats.generation_len.Observe(r->generated);
    }
  }
  if (r->sampler) spare_samplers.push_back(std::move(r->sampler));
  RequestStream::State& st = *r->state;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    st.result = std::move(res);
    st.queue_seconds = (r->admitted_once ? r->t_admit : now) - r->t_submit;
    st.done = true;
  }
  st.cv.notify_all();
  if (!r->admitted_once) {
    std::lock_guard<std::mutex> lock(mu);
    queued--;
  }
}

void Service::Impl::UpdateGauges() {
  const MemoryReport m = engine->Memory();
  std::lock_guard<std::mutex> lock(stats_mu);
  stats.running = static_cast<int>(running.size());
  stats.waiting = static_cast<int>(waiting.size());
  stats.kv_usage = m.kv_total_blocks > 0 ? static_cast<double>(m.kv_used_blocks) / static_cast<double>(m.kv_total_blocks) : 0;
  stats.preemptions = preemptions;
  stats.memory = m;
}

Request* Service::Impl::PickVictim() {
  Request* v = nullptr;
  for (auto& r : running) {
    if (v == nullptr || Before(v, r.get())) v = r.get();  // lowest priority, latest arrival
  }
  return v;
}

int Service::Impl::Preempt(Request* victim) {
  // Recompute later: drop its blocks (full ones stay in the prefix cache, so recomputing may
  // be cheap), keep its tokens, sampler and place in line. If it was already scheduled in this
  // step, it leaves the step and gives its budget back.
  int returned = 0;
  for (size_t k = 0; k < item_req.size(); ++k) {
    if (item_req[k] == victim) {
      returned = item_n[k];
      item_req.erase(item_req.begin() + static_cast<std::ptrdiff_t>(k));
      item_n.erase(item_n.begin() + static_cast<std::ptrdiff_t>(k));
      break;
    }
  }
  e->kv->Free(victim->seq);
  victim->seq = -1;
  victim->computed = 0;
  preemptions++;
  auto it = std::find_if(running.begin(), running.end(), [&](const auto& p) { return p.get() == victim; });
  std::unique_ptr<Request> r = std::move(*it);
  running.erase(it);
  auto pos = std::upper_bound(waiting.begin(), waiting.end(), r, [](const auto& a, const auto& b) { return Before(a.get(), b.get()); });
  waiting.insert(pos, std::move(r));
  return returned;
}

// Gives `r` a sequence (reusing cached prefix blocks) and room for its first chunk.
bool Service::Impl::Admit(Request& r, int* budget_left) {
  const int total = static_cast<int>(r.tokens.size());
  r.seq = e->kv->Create(r.limit + 1);
  const int cached = e->kv->MatchPrefix(r.seq, r.tokens.data(), total);
  const int n = std::min(total - cached, *budget_left);
  if (!e->kv->Reserve(r.seq, cached + n)) {
    e->kv->Free(r.seq);
    r.seq = -1;
    return false;
  }
  r.computed = cached;
  if (!r.admitted_once) {
    r.admitted_once = true;
    r.cached_tokens = cached;
    r.t_admit = NowSeconds();
    {
      std::lock_guard<std::mutex> lock(mu);
      queued--;  // no longer counted against the queue limit
    }
    std::lock_guard<std::mutex> lock(stats_mu);
    stats.queue_time.Observe(r.t_admit - r.t_submit);
    stats.prompt_tokens += static_cast<uint64_t>(r.n_prompt);
    stats.prefix_queries += static_cast<uint64_t>(total);
    stats.prefix_hits += static_cast<uint64_t>(cached);
  }
  if (!r.sampler) {
    if (!spare_samplers.empty()) {
      r.sampler = std::move(spare_samplers.back());
      spare_samplers.pop_back();
    } else {
      r.sampler = std::make_unique<Sampler>(e->model->config.n_vocab);
    }
    r.sampler->Reset(r.opt.generate.sampling);
    r.text.Reset(&r.opt.generate.stop, r.tokens.back(), static_cast<size_t>(r.limit - r.n_prompt) * 8 + 64);
  }
  return true;
}

bool Service::Impl::Step() {
  const double now = NowSeconds();
  // 1. Cancelled and expired requests leave first (their blocks free up for this step).
  auto drop_finished = [&](std::vector<std::unique_ptr<Request>>& list) {
    for (size_t i = 0; i < list.size();) {
      Request& r = *list[i];
      const bool expired = r.deadline > 0 && now >= r.deadline;
      if (r.Cancelled() || expired) {
        auto owned = std::move(list[i]);
        list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
        Finish(std::move(owned), expired && !r.Cancelled() ? FinishReason::kTimeout : FinishReason::kCancelled);
      } else {
        ++i;
      }
    }
  };
  drop_finished(running);
  drop_finished(waiting);

  // 2. Running requests: decodes first, then prompt chunks, each group in priority order.
  items.clear();
  item_req.clear();
  item_n.clear();
  int left = budget;
  std::sort(running.begin(), running.end(), [](const auto& a, const auto& b) { return Before(a.get(), b.get()); });
  for (int pass = 0; pass < 2 && left > 0; ++pass) {
    for (size_t i = 0; i < running.size() && left > 0; ++i) {
      Request* r = running[i].get();
      const int need = static_cast<int>(r->tokens.size()) - r->computed;
      if ((pass == 0) != (need == 1)) continue;
      const int n = std::min(need, left);
      bool ok = e->kv->Reserve(r->seq, r->computed + n);
      while (!ok) {
        Request* victim = PickVictim();
        if (victim == r && running.size() == 1) break;  // alone and still out of blocks
        const bool self = victim == r;
        // Indices shift when the victim sits before i.
        const auto vpos = std::find_if(running.begin(), running.end(), [&](const auto& p) { return p.get() == victim; }) - running.begin();
        left += Preempt(victim);
        if (static_cast<size_t>(vpos) <= i) --i;
        if (self) break;
        ok = e->kv->Reserve(r->seq, r->computed + n);
      }
      if (!ok) {
        if (running.size() == 1 && running[0].get() == r) {
          // Nothing left to preempt: the pool cannot hold this request's tokens.
          auto owned = std::move(running[0]);
          running.clear();
          Finish(std::move(owned), FinishReason::kContext);
          i = 0;
          break;
        }
        continue;  // r itself was preempted
      }
      item_req.push_back(r);
      item_n.push_back(n);
      left -= n;
    }
  }

  // 3. Admission: continuous batching admits into any leftover budget while KV usage is under
  // the watermark; static batching only forms a new batch once the last one has finished.
  const bool may_admit = !opt.static_batching || running.empty();
  while (may_admit && left > 0 && !waiting.empty() && static_cast<int>(running.size()) < max_running) {
    Request& r = *waiting.front();
    bool ok = !running.empty() && KvUsage() >= opt.kv_watermark ? false : Admit(r, &left);
    if (!ok) {
      // Priority: a waiting request may displace a strictly lower-priority running one.
      Request* victim = PickVictim();
      if (victim == nullptr || victim->opt.priority >= r.opt.priority) break;
      left += Preempt(victim);
      continue;
    }
    const int n = std::min(static_cast<int>(r.tokens.size()) - r.computed, left);
    std::unique_ptr<Request> owned = std::move(waiting.front());
    waiting.erase(waiting.begin());
    item_req.push_back(owned.get());
    item_n.push_back(n);
    left -= n;
    running.push_back(std::move(owned));
  }
  if (item_req.empty()) return false;

  // 4. One batched forward over everything scheduled.
  items.clear();
  for (size_t k = 0; k < item_req.size(); ++k) {
    Request* r = item_req[k];
    items.push_back({r->tokens.data() + r->computed, item_n[k], r->computed, nullptr});
  }
  views.resize(item_req.size());
  for (size_t k = 0; k < item_req.size(); ++k) {
    views[k] = e->kv->View(item_req[k]->seq);
    items[k].kv = &views[k];
  }
  e->StepBatch(items.data(), static_cast<int>(items.size()), logits.data());
  const Tokenizer& tok = *e->model->tokenizer;
  const double t = NowSeconds();
  uint64_t step_tokens = 0, new_tokens = 0;
  for (size_t k = 0; k < item_req.size(); ++k) {
    Request& r = *item_req[k];
    const int n = item_n[k];
    e->kv->Commit(r.seq, r.tokens.data() + r.computed, n);
    r.computed += n;
    step_tokens += static_cast<uint64_t>(n);
  }
  // 5. Sample where a request's known tokens are all computed; finish or extend it.
  for (size_t k = 0; k < item_req.size(); ++k) {
    Request& r = *item_req[k];
    if (r.computed < static_cast<int>(r.tokens.size())) continue;  // prompt chunk in progress
    if (r.opt.generate.max_tokens == 0) {  // prompt only (e.g. to warm the prefix cache)
      auto it = std::find_if(running.begin(), running.end(), [&](const auto& p) { return p.get() == &r; });
      std::unique_ptr<Request> owned = std::move(*it);
      running.erase(it);
      Finish(std::move(owned), FinishReason::kLength);
      continue;
    }
    float* lg = const_cast<float*>(logits[k]);
    const int next = r.sampler->Sample(lg, r.tokens.data(), static_cast<int>(r.tokens.size()));
    FinishReason why = FinishReason::kLength;
    bool finish = false;
    if (r.t_first == 0) {
      r.t_first = t;
      std::lock_guard<std::mutex> lock(stats_mu);
      stats.ttft.Observe(t - r.t_submit);
    } else {
      std::lock_guard<std::mutex> lock(stats_mu);
      stats.itl.Observe(t - r.t_last);
    }
    r.t_last = t;
    if (!r.opt.generate.ignore_eos && (tok.IsEndOfGeneration(next) || next == tok.bos())) {
      finish = true;
      why = FinishReason::kEos;
    } else {
      r.tokens.push_back(next);
      r.generated++;
      new_tokens++;
      if (r.text.Push(tok, next)) {
        finish = true;
        why = FinishReason::kStop;
      } else if (r.generated >= r.opt.generate.max_tokens) {
        finish = true;
        why = FinishReason::kLength;
      } else if (static_cast<int>(r.tokens.size()) >= r.limit) {
        finish = true;
        why = FinishReason::kContext;
      }
      Publish(r);
    }
    if (finish) {
      auto it = std::find_if(running.begin(), running.end(), [&](const auto& p) { return p.get() == &r; });
      std::unique_ptr<Request> owned = std::move(*it);
      running.erase(it);
      Finish(std::move(owned), why);
    }
  }
  std::lock_guard<std::mutex> lock(stats_mu);
  stats.steps++;
  stats.step_tokens += step_tokens;
  stats.generation_tokens += new_tokens;
  return true;
}

}  // namespace paddock
