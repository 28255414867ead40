// server/model_host.cpp: loading on demand, eviction under the budget, keep_alive
// (model_host.h).
#include "server/model_host.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "base/strings.h"
#include "base/timer.h"

namespace paddock::server {

struct ModelHost::Slot {
  size_t index = 0;
  State state = State::kUnloaded;
  ModelLease loaded;
  uint64_t reserved = 0;  // while loading: the bytes counted for it
  uint64_t known = 0;     // the footprint of its last load (0: never loaded)
  std::vector<Ready> waiting;
  bool queued = false;  // in load_queue_
  ModelCounters counters;
};

namespace {

ApiError HostError(int status, const char* type, std::string message) {
  ApiError e;
  e.status = status;
  e.type = type;
  e.message = std::move(message);
  return e;
}

}  // namespace

ModelHost::ModelHost(Options o, std::vector<ModelSpec> specs, Loader loader)
    : o_(std::move(o)), specs_(std::move(specs)), loader_(std::move(loader)) {
  for (size_t i = 0; i < specs_.size(); ++i) {
    slots_.push_back(std::make_unique<Slot>());
    slots_.back()->index = i;
  }
}

ModelHost::~ModelHost() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

const ModelSpec* ModelHost::Find(const std::string& name) const {
  for (const ModelSpec& s : specs_) {
    if (s.id == name) return &s;
    for (const std::string& a : s.aliases)
      if (a == name) return &s;
  }
  return nullptr;
}

ModelLease ModelHost::TryAcquire(const std::string& id) {
  const ModelSpec* spec = Find(id);
  if (spec == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  Slot& s = *slots_[static_cast<size_t>(spec - specs_.data())];
  if (s.state != State::kLoaded) return nullptr;
  s.loaded->last_used = NowSeconds();
  return s.loaded;
}

bool ModelHost::AcquireLater(const std::string& id, Ready ready) {
  const ModelSpec* spec = Find(id);
  if (spec == nullptr) return false;
  ModelLease now;
  bool stopping = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Slot& s = *slots_[static_cast<size_t>(spec - specs_.data())];
    if (stop_) {
      stopping = true;
    } else if (s.state == State::kLoaded) {
      s.loaded->last_used = NowSeconds();
      now = s.loaded;
    } else {
      if (static_cast<int>(s.waiting.size()) >= o_.max_waiting) return false;
      s.waiting.push_back(std::move(ready));
      if (!s.queued && s.state == State::kUnloaded) {
        s.queued = true;
        load_queue_.push_back(s.index);
      }
    }
  }
  // (The answer is given outside the lock: it runs the request's handler.)
  if (stopping) {
    const ApiError e = HostError(503, "service_unavailable", "the server is shutting down");
    ready(nullptr, &e);
  } else if (now) {
    ready(now, nullptr);
  } else {
    cv_.notify_all();
  }
  return true;
}

void ModelHost::SetKeepAlive(LoadedModel& m, double seconds) {
  m.keep_alive = seconds;
  m.last_used = NowSeconds();
  cv_.notify_all();
}

uint64_t ModelHost::committed() const {
  uint64_t used = 0;
  for (const auto& s : slots_)
    used += s->state == State::kLoaded    ? s->loaded->footprint
            : s->state == State::kLoading ? s->reserved
                                          : 0;
  return used;
}

// No request holds the model (the host's own reference is the only one) and its service has
// nothing running or waiting. Leases are taken under mu_, so this stays true while it is held.
bool ModelHost::Idle(const Slot& s) const {
  if (s.state != State::kLoaded || specs_[s.index].pinned || s.loaded.use_count() != 1)
    return false;
  const ServiceStats st = s.loaded->service->Stats();
  return st.running == 0 && st.waiting == 0;
}

void ModelHost::Unload(Slot& s, std::unique_lock<std::mutex>& lock, bool expired) {
  ModelLease m = std::move(s.loaded);
  s.state = State::kUnloaded;
  (expired ? s.counters.expiries : s.counters.evictions)++;
  const std::string& id = specs_[s.index].id;
  std::fprintf(stderr, "paddock: unloading '%s' (%s; %s)\n", id.c_str(),
               expired ? "keep_alive expired" : "room for another model",
               FormatBytes(m->footprint).c_str());
  lock.unlock();
  m->service->Shutdown(0);
  m.reset();  // the engine: weights unmapped, KV and scratch freed
  // Their heap given back to the system now, before the next model loads (not an idle second
  // later, when the event loop trims: the budget is kept in resident memory, not just counted).
  malloc_trim(0);
  lock.lock();
}

bool ModelHost::MakeRoom(uint64_t need, const std::string& for_id,
                         std::unique_lock<std::mutex>& lock) {
  for (;;) {
    if (committed() + need <= o_.budget) return true;
    Slot* lru = nullptr;
    for (const auto& s : slots_)
      if (Idle(*s) && specs_[s->index].id != for_id &&
          (lru == nullptr || s->loaded->last_used < lru->loaded->last_used))
        lru = s.get();
    if (lru == nullptr) return false;
    Unload(*lru, lock, false);
  }
}

void ModelHost::LoadOne(Slot& s, std::unique_lock<std::mutex>& lock) {
  const ModelSpec& spec = specs_[s.index];
  s.queued = false;
  auto deliver = [&](ModelLease m, const ApiError* e) {
    std::vector<Ready> waiting;
    waiting.swap(s.waiting);
    lock.unlock();
    for (Ready& r : waiting) r(m, e);
    lock.lock();
  };
  if (s.state == State::kLoaded) return deliver(s.loaded, nullptr);
  if (s.waiting.empty()) return;  // (every waiter left: nothing to load for)
  // What it will hold, estimated (the scratch figure is an upper bound): the same decision
  // at every load. A KV pool the budget cannot hold beside the weights and scratch is made
  // smaller, down to one full context.
  const MemoryReport& est = spec.estimate;
  const uint64_t fixed = est.weight_bytes + est.scratch_bytes;
  uint64_t need = fixed + est.kv_allocated_bytes;
  uint64_t kv_bytes = 0;  // 0: as the spec's options size it
  if (need > o_.budget) {
    const uint64_t one_context =
        est.kv_bytes_per_token * static_cast<uint64_t>(spec.context + 2 * est.kv_block_size);
    if (fixed + one_context > o_.budget) {
      const ApiError e = HostError(
          507, "insufficient_memory",
          StrFormat("model '%s' needs at least %s (weights %s, KV for one %d-token context %s, "
                    "scratch %s): %s more than the memory budget of %s (--memory-budget)",
                    spec.id.c_str(), FormatBytes(fixed + one_context).c_str(),
                    FormatBytes(est.weight_bytes).c_str(), spec.context,
                    FormatBytes(one_context).c_str(), FormatBytes(est.scratch_bytes).c_str(),
                    FormatBytes(fixed + one_context - o_.budget).c_str(),
                    FormatBytes(o_.budget).c_str()));
      s.counters.load_failures++;
      return deliver(nullptr, &e);
    }
    kv_bytes = o_.budget - fixed;
    need = o_.budget;
  }
  // Idle models make room; models with requests in flight finish them first (the waiters wait).
  while (!MakeRoom(need, spec.id, lock)) {
    if (stop_) {
      const ApiError e = HostError(503, "service_unavailable", "the server is shutting down");
      return deliver(nullptr, &e);
    }
    cv_.wait_for(lock, std::chrono::milliseconds(20));
  }
  s.state = State::kLoading;
  s.reserved = need;
  const double t0 = NowSeconds();
  std::unique_ptr<LoadedModel> made;
  std::string error;
  lock.unlock();
  try {
    made = loader_(spec, kv_bytes);
  } catch (const std::exception& ex) {
    error = ex.what();
  }
  lock.lock();
  const double seconds = NowSeconds() - t0;
  if (!made) {
    s.state = State::kUnloaded;
    s.counters.load_failures++;
    std::fprintf(stderr, "paddock: loading '%s' failed: %s\n", spec.id.c_str(), error.c_str());
    const ApiError e =
        HostError(500, "server_error",
                  StrFormat("model '%s' failed to load: %s", spec.id.c_str(), error.c_str()));
    return deliver(nullptr, &e);
  }
  made->load_seconds = seconds;
  made->last_used = NowSeconds();
  made->keep_alive = spec.keep_alive > -2 ? spec.keep_alive : o_.keep_alive;
  s.loaded = ModelLease(made.release());
  s.state = State::kLoaded;
  s.known = s.loaded->footprint;
  s.counters.loads++;
  s.counters.load_seconds_total += seconds;
  s.counters.last_load_seconds = seconds;
  std::fprintf(stderr, "paddock: loaded '%s' in %.2f s (%s; %s in use%s%s)\n", spec.id.c_str(),
               seconds, FormatBytes(s.loaded->footprint).c_str(), FormatBytes(committed()).c_str(),
               o_.budget == UINT64_MAX ? "" : " of a budget of ",
               o_.budget == UINT64_MAX ? "" : FormatBytes(o_.budget).c_str());
  // An estimate below the real figure: other idle models make up the difference.
  MakeRoom(0, spec.id, lock);
  deliver(s.loaded, nullptr);
}

void ModelHost::Expire(std::unique_lock<std::mutex>& lock) {
  const double now = NowSeconds();
  for (auto& s : slots_) {
    if (s->state != State::kLoaded) continue;
    const double keep = s->loaded->keep_alive;
    if (keep < 0 || now < s->loaded->last_used + keep || !Idle(*s)) continue;
    Unload(*s, lock, true);
  }
}

void ModelHost::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (!load_queue_.empty()) {
      const size_t i = load_queue_.front();
      load_queue_.erase(load_queue_.begin());
      LoadOne(*slots_[i], lock);
      continue;
    }
    Expire(lock);
    cv_.wait_for(lock, std::chrono::milliseconds(100));
  }
}

void ModelHost::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void ModelHost::LoadPinned() {
  std::unique_lock<std::mutex> lock(mu_);
  for (auto& s : slots_) {
    if (!specs_[s->index].pinned) continue;
    bool failed = false;
    std::string error;
    s->waiting.push_back([&](ModelLease m, const ApiError* e) {
      failed = m == nullptr;
      if (e != nullptr) error = e->message;
    });
    LoadOne(*s, lock);
    if (failed) Fail("%s", error.c_str());
  }
}

void ModelHost::Shutdown(double grace_seconds) {
  std::vector<ModelLease> loaded;
  std::vector<Ready> waiting;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    for (auto& s : slots_) {
      if (s->loaded) loaded.push_back(s->loaded);
      for (Ready& r : s->waiting) waiting.push_back(std::move(r));
      s->waiting.clear();
    }
  }
  cv_.notify_all();
  const ApiError e = HostError(503, "service_unavailable", "the server is shutting down");
  for (Ready& r : waiting) r(nullptr, &e);
  if (thread_.joinable()) thread_.join();
  // The models drain together: the grace period is not paid once per model.
  std::vector<std::thread> drains;
  for (const ModelLease& m : loaded)
    drains.emplace_back([m, grace_seconds] { m->service->Shutdown(grace_seconds); });
  for (std::thread& t : drains) t.join();
}

std::vector<ModelLease> ModelHost::Loaded() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ModelLease> out;
  for (const auto& s : slots_)
    if (s->state == State::kLoaded) out.push_back(s->loaded);
  return out;
}

std::vector<ModelHost::Status> ModelHost::Statuses() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Status> out;
  const double now = NowSeconds(), wall = EpochSeconds();
  for (const auto& s : slots_) {
    const ModelSpec& spec = specs_[s->index];
    Status st;
    st.id = spec.id;
    st.state = s->state;
    st.footprint = s->state == State::kLoaded    ? s->loaded->footprint
                   : s->state == State::kLoading ? s->reserved
                   : s->known > 0                ? s->known
                                  : spec.estimate.weight_bytes + spec.estimate.kv_allocated_bytes +
                                        spec.estimate.scratch_bytes;
    st.counters = s->counters;
    if (s->state == State::kLoaded && s->loaded->keep_alive >= 0)
      st.expires = wall + (s->loaded->last_used + s->loaded->keep_alive - now);
    out.push_back(st);
  }
  return out;
}

// ---- keep_alive ---------------------------------------------------------------------------

namespace {
double Duration(const std::string& text, const char* what, const char* examples, bool signed_ok) {
  auto bad = [&] {
    Fail("%s '%s' is not a duration (seconds, or e.g. %s)", what, text.c_str(), examples);
  };
  if (text.empty() || text.size() > 64) bad();
  size_t i = 0;
  bool negative = false;
  if (text[0] == '-' || text[0] == '+') {
    if (!signed_ok && text[0] == '-')
      Fail("%s '%s' must not be negative (e.g. %s)", what, text.c_str(), examples);
    negative = text[0] == '-';
    i = 1;
  }
  // A plain number: seconds.
  char* end = nullptr;
  const double plain = std::strtod(text.c_str() + i, &end);
  if (end == text.c_str() + text.size() && i < text.size() && std::isfinite(plain))
    return negative ? -plain : plain;
  double total = 0;
  while (i < text.size()) {
    const char* start = text.c_str() + i;
    const double v = std::strtod(start, &end);
    if (end == start || !std::isfinite(v) || v < 0) bad();
    i = static_cast<size_t>(end - text.c_str());
    const std::string_view rest(text.c_str() + i);
    double unit = 0;
    size_t len = 0;
    for (const auto& [name, seconds] : {std::pair<const char*, double>{"ns", 1e-9},
                                        {"d", 86400},
                                        {"us", 1e-6},
                                        {"ms", 1e-3},
                                        {"h", 3600},
                                        {"m", 60},
                                        {"s", 1}}) {
      if (rest.rfind(name, 0) == 0) {
        unit = seconds;
        len = std::string_view(name).size();
        break;
      }
    }
    if (unit == 0) bad();
    total += v * unit;
    i += len;
  }
  return negative ? -total : total;
}
}  // namespace

double ParseKeepAlive(const std::string& text) {
  return Duration(text, "keep_alive", "\"5m\", \"1h30m\", \"-1\"", true);
}

double ParseDuration(const std::string& text, const char* what, const char* examples) {
  return Duration(text, what, examples, false);
}

}  // namespace paddock::server
