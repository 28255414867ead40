// server/model_host.h: the models a server serves, loaded on demand within one memory budget.
//
// Each served model is a ModelSpec (its file and options: `-m`, or every GGUF file of
// `--models-dir`, model_registry.h). A request leases the loaded model it names (ModelLease);
// a model not loaded is loaded by the host's loader thread while the request waits in that
// model's queue (its limit gives 429s) and other models go on serving. Before a load, the
// least recently used idle models are unloaded until weights + KV + scratch of all loaded
// models fit the budget; a model with a request in flight (a lease held, or requests running or
// waiting in its service) is never unloaded. keep_alive (Ollama's: seconds, 0 unload when idle,
// negative never) unloads idle models. Loaded models share one thread pool and take turns
// step by step (paddock::ComputeShare).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "paddock/chat.h"
#include "paddock/service.h"
#include "server/api.h"
#include "server/lora_registry.h"
#include "server/metrics.h"

namespace paddock::server {

struct ModelSpec {
  std::string id;                    // the served name
  std::vector<std::string> aliases;  // further names it answers to
  EngineOptions engine;              // model_path and the options it loads with
  std::string chat_template, chat_template_file;
  bool mmproj_given = false;  // models.json named a projector (or none): no pairing by file name
  std::vector<LoraRegistry::Entry> loras;  // adapters loaded with the model (adapter null here)
  double keep_alive = -2;                  // seconds (< 0: forever); -2: the server's default
  bool pinned = false;                     // loaded at start, never unloaded (`-m`)
  ModelInfo info;                          // InspectModel's (metadata only)
  int context = 0;                         // tokens per sequence it loads with
  MemoryReport estimate;                   // what it would hold (EstimateMemory)
};

// One loaded model: what the handlers use. Lives while a lease holds it.
struct LoadedModel {
  std::string id;
  std::unique_ptr<Service> service;
  ApiContext ctx;
  std::unique_ptr<ChatFormatter> chat;
  bool reasoning = false, harmony = false;
  LoraRegistry loras;
  uint64_t footprint = 0;  // weights + KV pool + scratch (the engine's own figures)
  double load_seconds = 0;
  std::atomic<double> last_used{0};    // monotonic seconds
  std::atomic<double> keep_alive{-1};  // seconds after last_used (< 0: forever)
};
using ModelLease = std::shared_ptr<LoadedModel>;

class ModelHost {
 public:
  struct Options {
    uint64_t budget = 0;      // bytes for all loaded models (weights + KV + scratch)
    double keep_alive = 300;  // default seconds an idle model stays (< 0: forever)
    int max_waiting = 256;    // requests waiting for one model's load, at most
  };
  // Builds a loaded model from its spec on the loader thread (throws Error).
  using Loader = std::function<std::unique_ptr<LoadedModel>(const ModelSpec&, uint64_t kv_bytes)>;
  // The answer to a waiting request: the lease, or an error (lease null).
  using Ready = std::function<void(ModelLease, const ApiError*)>;

  ModelHost(Options o, std::vector<ModelSpec> specs, Loader loader);
  ~ModelHost();  // stops the loader thread (Shutdown first)

  // The spec a name selects: an id or alias; null if none.
  const ModelSpec* Find(const std::string& name) const;
  const std::vector<ModelSpec>& specs() const { return specs_; }
  // Loaded now: its lease (last_used refreshed). Else null.
  ModelLease TryAcquire(const std::string& id);
  // Not loaded: `ready` is called later (loader thread) with the lease or an error. False when
  // the model's queue is full (nothing queued).
  bool AcquireLater(const std::string& id, Ready ready);
  // A request's keep_alive for its model (Ollama's: each request sets it).
  void SetKeepAlive(LoadedModel& m, double seconds);
  // Loads the pinned models now (on the calling thread); throws Error.
  void LoadPinned();
  // The loader thread: loads, evictions, keep_alive expiries.
  void Start();
  // Stops taking work; every loaded model's service drains for up to grace seconds.
  void Shutdown(double grace_seconds);

  // Every loaded model (leases: hold them briefly).
  std::vector<ModelLease> Loaded() const;
  enum class State { kUnloaded, kLoading, kLoaded };
  struct Status {
    std::string id;
    State state = State::kUnloaded;
    uint64_t footprint = 0;  // loaded: the engine's; else the estimate
    ModelCounters counters;
    double expires = 0;  // loaded: wall-clock seconds (0: never)
  };
  std::vector<Status> Statuses() const;
  uint64_t budget() const { return o_.budget; }
  uint64_t committed() const;  // bytes of loaded (and loading) models

 private:
  struct Slot;
  void Loop();
  // Under mu_: unload idle models (LRU first) until `need` more bytes fit; true if they do.
  bool MakeRoom(uint64_t need, const std::string& for_id, std::unique_lock<std::mutex>& lock);
  bool Idle(const Slot& s) const;
  void Unload(Slot& s, std::unique_lock<std::mutex>& lock, bool expired);
  void LoadOne(Slot& s, std::unique_lock<std::mutex>& lock);
  void Expire(std::unique_lock<std::mutex>& lock);

  Options o_;
  std::vector<ModelSpec> specs_;
  Loader loader_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Slot>> slots_;  // parallel to specs_
  std::vector<size_t> load_queue_;            // slot indices, first come first served
  bool stop_ = false;
  std::thread thread_;
};

// Ollama's keep_alive as a string: a number of seconds ("300", "-1") or a Go duration ("5m",
// "1h30m", "10s", "500ms", "-1m"); negative: forever. Throws Error naming the text.
double ParseKeepAlive(const std::string& text);
// A duration given for `what`: seconds ("300") or units ("5m", "1h30m", "30d", "500ms"), never
// negative. Throws Error naming `what` and the text, with `examples`.
double ParseDuration(const std::string& text, const char* what, const char* examples);

}  // namespace paddock::server
