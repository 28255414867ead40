// dist/pipeline.cpp: the head's link and the stages' loop over MPI (Open MPI), the split of the
// layers, the start-up agreement and the heartbeats. See pipeline.h.
#include "dist/pipeline.h"

#define OMPI_SKIP_MPICXX 1  // the C API only (no libmpi_cxx)
#include <mpi.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "base/cpu.h"
#include "base/strings.h"
#include "base/thread_pool.h"
#include "base/timer.h"
#include "kernels/kernels.h"
#include "kv/kv_manager.h"
#include "model/stage_link.h"
#include "model/transformer.h"
#include "model/weights.h"

namespace paddock::dist {

namespace {

enum Tag : int { kHello = 1, kPlan = 2, kReady = 3, kData = 4, kResult = 5, kBeat = 6 };
enum Kind : int32_t { kStep = 1, kStop = 2 };
// A step message (the head to the first stage, each stage to the next): a StepHeader, its
// block copies (from, to pairs of int32), an ItemHeader per item, the items' tokens, their
// block tables (int32 each), zeros to a 16-byte boundary, then the residual stream (tokens x
// dim floats). A kStop message is a StepHeader of zeros but its kind.
struct StepHeader {
  int32_t kind;        // kStep or kStop
  int32_t mb;          // the micro-batch's id (the head's count, checked on the way back)
  int32_t items;       // sequences
  int32_t tokens;      // their tokens together
  int32_t rows;        // result rows asked for (the items' n_logits)
  int32_t hidden_out;  // 1: final hidden states instead of logits
  int32_t copies;      // copy-on-write block copies to replay before the step
};
struct ItemHeader {
  int32_t n, pos, n_logits, prompt_len;  // as StepItem's
  int32_t n_table;                       // its block table's entries sent
  int32_t window;                        // its KV view's attention window
};
// The last stage's answer: a ResultHeader, then rows x row_floats floats.
struct ResultHeader {
  int32_t mb, rows, row_floats, unused;
};
static_assert(sizeof(StepHeader) == 7 * 4 && sizeof(ItemHeader) == 6 * 4 &&
                  sizeof(ResultHeader) == 16,
              "the messages' layout is their int32 words, no padding");
constexpr size_t kHeader = sizeof(StepHeader) / 4;    // int32 words
constexpr size_t kItemInts = sizeof(ItemHeader) / 4;  // int32 words
constexpr double kBeatSeconds = 0.2;

// ---- start-up messages: strings and integers in one byte string --------------------------

class Writer {
 public:
  void Int(int64_t v) { bytes_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void Str(const std::string& s) {
    Int(static_cast<int64_t>(s.size()));
    bytes_ += s;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

class Reader {
 public:
  explicit Reader(std::string b) : b_(std::move(b)) {}
  int64_t Int() {
    int64_t v;
    Need(sizeof v);
    std::memcpy(&v, b_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  std::string Str() {
    const int64_t n = Int();
    if (n < 0) Fail("pipeline: a start-up message is corrupt");
    Need(static_cast<size_t>(n));
    std::string s = b_.substr(at_, static_cast<size_t>(n));
    at_ += static_cast<size_t>(n);
    return s;
  }

 private:
  void Need(size_t n) const {
    if (at_ + n > b_.size()) Fail("pipeline: a start-up message is truncated");
  }
  std::string b_;
  size_t at_ = 0;
};

std::string HostName() {
  char h[256] = {0};
  gethostname(h, sizeof h - 1);
  return h;
}

// ---- MPI with a deadline: nothing here blocks without watching the peers' heartbeats -------

class Heartbeats;

// Waits for a message (source, tag) while `hb` says the peers are there; its bytes into *into
// (whose capacity is reused: no allocation per step once it has grown).
void ReceiveBytes(int source, int tag, const Heartbeats& hb, std::string* into,
                  int* from = nullptr);
std::string ReceiveBytes(int source, int tag, const Heartbeats& hb, int* from = nullptr) {
  std::string b;
  ReceiveBytes(source, tag, hb, &b, from);
  return b;
}

// Every process: a thread that sends a heartbeat every kBeatSeconds to its peers (the head to
// every stage, a stage to the head) and reads theirs; it also drives MPI's progress for the
// sends in flight while the compute thread runs (Open MPI has no progress thread of its own).
class Heartbeats {
 public:
  Heartbeats(int rank, int size, double timeout)
      : rank_(rank), seen_(static_cast<size_t>(size)), timeout_(timeout) {
    const double now = NowSeconds();
    for (auto& s : seen_) s.store(now);
    thread_ = std::thread([this] { Run(); });
  }
  ~Heartbeats() { Stop(); }
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  // The first peer (rank) silent for longer than the timeout, or -1.
  int Silent() const {
    const double now = NowSeconds();
    for (size_t r = 0; r < seen_.size(); ++r) {
      if (static_cast<int>(r) == rank_ || (rank_ != 0 && r != 0)) continue;
      if (now - seen_[r].load() > timeout_) return static_cast<int>(r);
    }
    return -1;
  }
  double SilentFor(int r) const { return NowSeconds() - seen_[static_cast<size_t>(r)].load(); }

 private:
  void Run() {
    static const int32_t beat = 0;
    std::unique_lock<std::mutex> lock(mu_);
    double next = 0;
    while (!stop_) {
      const double now = NowSeconds();
      if (now >= next) {
        for (size_t r = 0; r < seen_.size(); ++r) {
          if (static_cast<int>(r) == rank_ || (rank_ != 0 && r != 0)) continue;
          if (now - seen_[r].load() > timeout_) continue;  // lost: no more sends that never end
          MPI_Request req;
          MPI_Isend(&beat, 1, MPI_INT32_T, static_cast<int>(r), kBeat, MPI_COMM_WORLD, &req);
          MPI_Request_free(&req);
        }
        next = now + kBeatSeconds;
      }
      for (;;) {
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, kBeat, MPI_COMM_WORLD, &flag, &st);
        if (!flag) break;
        int32_t v;
        MPI_Recv(&v, 1, MPI_INT32_T, st.MPI_SOURCE, kBeat, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        seen_[static_cast<size_t>(st.MPI_SOURCE)].store(NowSeconds());
      }
      cv_.wait_for(lock, std::chrono::milliseconds(2));
    }
  }

  int rank_;
  std::vector<std::atomic<double>> seen_;
  double timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// Polls with a short sleep growing to 1 ms while nothing comes: the latency of a message is a
// few microseconds under load, and an idle process does not spin a core.
class Backoff {
 public:
  void Wait() {
    if (++spins_ < 64) {
      std::this_thread::yield();
      return;
    }
    usleep(spins_ < 2000 ? 20 : 1000);
  }

 private:
  int spins_ = 0;
};

void ReceiveBytes(int source, int tag, const Heartbeats& hb, std::string* into, int* from) {
  Backoff wait;
  for (;;) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(source, tag, MPI_COMM_WORLD, &flag, &st);
    if (flag) {
      int count = 0;
      MPI_Get_count(&st, MPI_BYTE, &count);
      into->resize(static_cast<size_t>(count));
      MPI_Recv(into->data(), count, MPI_BYTE, st.MPI_SOURCE, tag, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
      if (from != nullptr) *from = st.MPI_SOURCE;
      return;
    }
    if (const int r = hb.Silent(); r >= 0)
      Fail("pipeline: rank %d stopped answering (no heartbeat for %.1f s)", r, hb.SilentFor(r));
    wait.Wait();
  }
}

// Sends in flight, each with its buffer (kept until MPI is done with it, then reused: a step
// allocates nothing once the buffers have grown).
class Outbox {
 public:
  // A buffer of n bytes for the next Send (contents unspecified).
  std::vector<char> Buffer(size_t n) {
    Reap();
    std::vector<char> b;
    if (!free_.empty()) {
      b = std::move(free_.back());
      free_.pop_back();
    }
    b.resize(n);
    return b;
  }
  void Send(std::vector<char>&& bytes, int dest, int tag) {
    Reap();
    slots_.push_back({std::move(bytes), MPI_REQUEST_NULL});
    Slot& s = slots_.back();
    MPI_Isend(s.bytes.data(), static_cast<int>(s.bytes.size()), MPI_BYTE, dest, tag, MPI_COMM_WORLD,
              &s.req);
  }
  // Waits for every send (false: `hb` says a peer is lost first).
  bool Drain(const Heartbeats& hb) {
    Backoff wait;
    while (Reap(), !slots_.empty()) {
      if (hb.Silent() >= 0) return false;
      wait.Wait();
    }
    return true;
  }

 private:
  struct Slot {
    std::vector<char> bytes;
    MPI_Request req;
  };
  void Reap() {
    while (!slots_.empty()) {
      int done = 0;
      MPI_Test(&slots_.front().req, &done, MPI_STATUS_IGNORE);
      if (!done) break;
      if (free_.size() < 8) free_.push_back(std::move(slots_.front().bytes));
      slots_.erase(slots_.begin());
    }
  }
  std::vector<Slot> slots_;
  std::vector<std::vector<char>> free_;
};

// ---- what every rank agrees on at start ----------------------------------------------------

// A model file's shape and content summary: a stage's must equal its head's.
std::vector<std::pair<std::string, std::string>> Fingerprint(const LoadedModel& m) {
  const ModelConfig& c = m.config;
  std::vector<std::pair<std::string, std::string>> f = {
      {"architecture", c.arch},
      {"layers", std::to_string(c.n_layers)},
      {"dim", std::to_string(c.dim)},
      {"heads", std::to_string(c.n_heads)},
      {"kv heads", std::to_string(c.n_kv_heads)},
      {"head dim", std::to_string(c.head_dim)},
      {"ffn dim", std::to_string(c.ffn_dim)},
      {"vocabulary", std::to_string(c.n_vocab)},
      {"experts", std::to_string(c.n_experts)},
      {"trained context", std::to_string(c.context_length)},
      {"weight bytes", std::to_string(m.weight_bytes)},
  };
  std::string types;
  for (const TensorTypeCount& t : m.type_counts)
    types += StrFormat("%s%s x%d", types.empty() ? "" : ", ", t.type.c_str(), t.count);
  f.emplace_back("tensor types", types);
  return f;
}

struct Hello {  // a stage to its head
  std::string host, path;
  int64_t pid = 0;
  uint64_t budget = 0;
  std::vector<std::pair<std::string, std::string>> fingerprint;
  std::string error;  // the stage could not load its file
};

struct Plan {              // the head to every stage
  std::vector<int> begin;  // per rank: layers [begin[r], begin[r + 1])
  int n_layers = 0;
  int32_t num_blocks = 0;
  int block_size = 16;
  std::string k_type, v_type, layer_types;
  int context = 0, max_batch = 0;
  ForwardOptions forward;  // the head's switches, whole
  std::string error;       // non-empty: start-up failed (every rank exits with it)
};

std::string Encode(const Hello& h) {
  Writer w;
  w.Str(h.host);
  w.Str(h.path);
  w.Int(h.pid);
  w.Int(static_cast<int64_t>(h.budget));
  w.Str(h.error);
  w.Int(static_cast<int64_t>(h.fingerprint.size()));
  for (const auto& [k, v] : h.fingerprint) {
    w.Str(k);
    w.Str(v);
  }
  return w.bytes();
}

Hello DecodeHello(std::string b) {
  Reader r(std::move(b));
  Hello h;
  h.host = r.Str();
  h.path = r.Str();
  h.pid = r.Int();
  h.budget = static_cast<uint64_t>(r.Int());
  h.error = r.Str();
  const int64_t n = r.Int();
  for (int64_t i = 0; i < n && i < 64; ++i) {
    std::string k = r.Str();
    h.fingerprint.emplace_back(std::move(k), r.Str());
  }
  return h;
}

std::string Encode(const Plan& p) {
  Writer w;
  w.Str(p.error);
  w.Int(static_cast<int64_t>(p.begin.size()));
  for (int b : p.begin) w.Int(b);
  for (int64_t v : {int64_t{p.n_layers}, int64_t{p.num_blocks}, int64_t{p.block_size},
                    int64_t{p.context}, int64_t{p.max_batch}})
    w.Int(v);
  w.Str(p.k_type);
  w.Str(p.v_type);
  w.Str(p.layer_types);
  ForwardOptions f = p.forward;
  f.ForEachSwitch([&](const char*, bool on) { w.Int(on ? 1 : 0); });
  w.Int(static_cast<int64_t>(f.matmul_block_bytes));
  return w.bytes();
}

Plan DecodePlan(std::string b) {
  Reader r(std::move(b));
  Plan p;
  p.error = r.Str();
  const int64_t n = r.Int();
  for (int64_t i = 0; i < n && i < 4096; ++i) p.begin.push_back(static_cast<int>(r.Int()));
  p.n_layers = static_cast<int>(r.Int());
  p.num_blocks = static_cast<int32_t>(r.Int());
  p.block_size = static_cast<int>(r.Int());
  p.context = static_cast<int>(r.Int());
  p.max_batch = static_cast<int>(r.Int());
  p.k_type = r.Str();
  p.v_type = r.Str();
  p.layer_types = r.Str();
  p.forward.ForEachSwitch([&](const char*, bool& on) { on = r.Int() != 0; });
  p.forward.matmul_block_bytes = static_cast<uint64_t>(std::max<int64_t>(0, r.Int()));
  return p;
}

uint64_t BudgetOf(const PipelineOptions& po) {
  return po.memory_budget > 0 ? po.memory_budget : AvailableMemoryBytes() / 10 * 9;
}

// Resident memory of this process: its own (anonymous) pages and the model file's pages
// mapped in (RssAnon, RssFile), in bytes.
void ResidentBytes(uint64_t* anon, uint64_t* file) {
  *anon = *file = 0;
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return;
  char line[256];
  unsigned long kb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "RssAnon: %lu kB", &kb) == 1) *anon = kb * 1024ull;
    if (std::sscanf(line, "RssFile: %lu kB", &kb) == 1) *file = kb * 1024ull;
  }
  std::fclose(f);
}

// The split: explicit counts, or by memory in proportion to the ranks' budgets (weights of the
// layers + their KV; the head also the embeddings, the last rank the output head). Every rank
// gets at least one layer; a rank over its budget is an error saying by how much.
std::vector<int> SplitLayers(const LoadedModel& m, const std::string& spec,
                             const std::vector<uint64_t>& budgets,
                             const std::vector<std::string>& who, uint64_t kv_per_layer) {
  const int n = static_cast<int>(budgets.size());
  const int layers = m.config.n_layers;
  if (layers < n)
    Fail("pipeline: %d ranks for a model of %d layers (at most one per layer)", n, layers);
  std::vector<uint64_t> cost(static_cast<size_t>(layers));
  uint64_t total = EmbeddingBytes(m) + OutputHeadBytes(m);
  for (int l = 0; l < layers; ++l) {
    cost[static_cast<size_t>(l)] = LayerWeightBytes(m, l) + kv_per_layer;
    total += cost[static_cast<size_t>(l)];
  }
  std::vector<int> begin(static_cast<size_t>(n) + 1, 0);
  begin[static_cast<size_t>(n)] = layers;
  if (!spec.empty()) {
    std::vector<std::string> parts = paddock::Split(spec, ',');
    if (static_cast<int>(parts.size()) != n)
      Fail("--layers '%s' gives %zu counts for %d ranks", spec.c_str(), parts.size(), n);
    int at = 0;
    for (int r = 0; r < n; ++r) {
      char* end = nullptr;
      const long c = std::strtol(parts[static_cast<size_t>(r)].c_str(), &end, 10);
      if (parts[static_cast<size_t>(r)].empty() || *end != '\0' || c < 1)
        Fail("--layers '%s': '%s' is not a layer count of at least 1", spec.c_str(),
             parts[static_cast<size_t>(r)].c_str());
      begin[static_cast<size_t>(r)] = at;
      at += static_cast<int>(c);
    }
    if (at != layers)
      Fail("--layers '%s' sums to %d; the model has %d layers", spec.c_str(), at, layers);
  } else {
    uint64_t sum_budget = 0;
    for (uint64_t b : budgets) sum_budget += std::max<uint64_t>(b, 1);
    uint64_t acc = EmbeddingBytes(m), share = 0;
    int l = 0;
    for (int r = 0; r < n; ++r) {
      begin[static_cast<size_t>(r)] = l;
      share += std::max<uint64_t>(budgets[static_cast<size_t>(r)], 1);
      const double target =
          static_cast<double>(total) * static_cast<double>(share) / static_cast<double>(sum_budget);
      // At least one layer, leaving one for each rank after; then while under the target.
      do {
        acc += cost[static_cast<size_t>(l++)];
      } while (
          l < layers - (n - 1 - r) &&
          (r == n - 1 || static_cast<double>(acc + cost[static_cast<size_t>(l)] / 2) <= target));
    }
  }
  for (int r = 0; r < n; ++r) {
    uint64_t need = r == 0 ? EmbeddingBytes(m) : 0;
    if (r == n - 1)
      need += OutputHeadBytes(m) > 0 ? OutputHeadBytes(m) : (r > 0 ? EmbeddingBytes(m) : 0);
    for (int l = begin[static_cast<size_t>(r)]; l < begin[static_cast<size_t>(r) + 1]; ++l)
      need += cost[static_cast<size_t>(l)];
    const uint64_t b = budgets[static_cast<size_t>(r)];
    if (need > b)
      Fail(
          "pipeline: %s needs %s for layers %d-%d (weights and KV), %s over its budget of %s: "
          "add ranks or memory",
          who[static_cast<size_t>(r)].c_str(), FormatBytes(need).c_str(),
          begin[static_cast<size_t>(r)], begin[static_cast<size_t>(r) + 1] - 1,
          FormatBytes(need - b).c_str(), FormatBytes(b).c_str());
  }
  return begin;
}

// ---- the stages ----------------------------------------------------------------------------

// One step message: the header and items (int32) followed by the residual stream (float).
struct StepView {
  const StepHeader* h;
  const int32_t* copies;
  const ItemHeader* items;
  const int32_t* tokens;
  const int32_t* tables;
  const float* x;
  size_t ints;  // int32 words before the floats (padded to 16 bytes)
};

StepView ViewStep(const std::string& b, int dim) {
  auto fail = [] { Fail("pipeline: a step message is corrupt"); };
  if (b.size() < sizeof(StepHeader)) fail();
  StepView v{};
  v.h = reinterpret_cast<const StepHeader*>(b.data());
  const int64_t items = v.h->items, tokens = v.h->tokens, copies = v.h->copies;
  if (items < 0 || tokens < 0 || copies < 0) fail();
  v.copies = reinterpret_cast<const int32_t*>(v.h + 1);
  v.items = reinterpret_cast<const ItemHeader*>(v.copies + 2 * copies);
  v.tokens = reinterpret_cast<const int32_t*>(v.items + items);
  v.tables = v.tokens + tokens;
  size_t ints = kHeader + 2 * static_cast<size_t>(copies) + kItemInts * static_cast<size_t>(items) +
                static_cast<size_t>(tokens);
  if (ints * 4 > b.size()) fail();
  for (int64_t i = 0; i < items; ++i) ints += static_cast<size_t>(std::max(0, v.items[i].n_table));
  v.ints = (ints + 3) / 4 * 4;
  if (v.h->kind == kStep &&
      v.ints * 4 + static_cast<size_t>(tokens) * static_cast<size_t>(dim) * 4 != b.size())
    fail();
  v.x = reinterpret_cast<const float*>(b.data() + v.ints * 4);
  return v;
}

void RunStage(int rank, int size, std::unique_ptr<LoadedModel> model, const EngineOptions& eo,
              const Plan& plan, Heartbeats& hb) {
  const int begin = plan.begin[static_cast<size_t>(rank)];
  const int end = plan.begin[static_cast<size_t>(rank) + 1];
  const bool last = rank == size - 1;
  if (eo.relayout_weights && plan.forward.int8_activations)
    RelayoutWeights(model.get(), eo.huge_pages, nullptr, {begin, end, last});
  const int threads = eo.threads > 0 ? eo.threads : PhysicalCores();
  ThreadPool pool(threads);
  const Prefetch pf =
      !eo.prefetch ? Prefetch::kOff : (eo.prefetch_all ? Prefetch::kAll : Prefetch::kAuto);
  Transformer tf(*model, GetKernels(ParseIsa(eo.isa), pf), pool, plan.max_batch, plan.forward);
  tf.SetLayers(begin, end);
  tf.SetContext(plan.context);
  KvCacheOptions ko;
  ko.block_size = plan.block_size;
  ko.k_type = ParseKvDtype(plan.k_type);
  ko.v_type = ParseKvDtype(plan.v_type);
  ko.layer_types = plan.layer_types;
  ko.prefix_cache = false;
  ko.layer_begin = begin;
  ko.layer_end = end;
  ko.num_blocks = plan.num_blocks;
  KvManager kv(model->config, ko, 0, &tf);
  {
    Writer w;
    uint64_t anon = 0, file = 0;
    ResidentBytes(&anon, &file);
    w.Int(static_cast<int64_t>(anon));
    w.Int(static_cast<int64_t>(file));
    w.Int(static_cast<int64_t>(model->relaid_bytes));
    w.Int(static_cast<int64_t>(kv.Memory().allocated_bytes));
    MPI_Send(w.bytes().data(), static_cast<int>(w.bytes().size()), MPI_BYTE, 0, kReady,
             MPI_COMM_WORLD);
  }
  const int dim = model->config.dim;
  const int n_vocab = model->config.n_vocab;
  Outbox out;
  std::vector<StepItem> items(static_cast<size_t>(tf.max_items()));
  std::vector<KvView> views(items.size());
  double waited = 0, computed = 0;
  uint64_t steps = 0;
  std::string msg;
  for (;;) {
    const double t0 = NowSeconds();
    ReceiveBytes(rank - 1, kData, hb, &msg);
    const StepView v = ViewStep(msg, dim);
    const double t1 = NowSeconds();
    waited += t1 - t0;
    if (v.h->kind == kStop) {
      if (!last) {
        std::vector<char> stop = out.Buffer(msg.size());
        std::memcpy(stop.data(), msg.data(), msg.size());
        out.Send(std::move(stop), rank + 1, kData);
      }
      out.Drain(hb);
      if (steps > 0)
        std::fprintf(
            stderr,
            "paddock: pipeline stage %d: %llu micro-batches, computing %.3f s, waiting for "
            "the stage before %.3f s\n",
            rank, static_cast<unsigned long long>(steps), computed, waited);
      return;
    }
    ++steps;
    const int n_items = v.h->items, n_tokens = v.h->tokens;
    if (n_items < 1 || n_items > tf.max_items() || n_tokens > tf.max_batch())
      Fail("pipeline: a step of %d sequences and %d tokens exceeds this stage's limits", n_items,
           n_tokens);
    for (int c = 0; c < v.h->copies; ++c) {
      const int32_t from = v.copies[2 * c], to = v.copies[2 * c + 1];
      if (from < 0 || to < 0 || from >= plan.num_blocks || to >= plan.num_blocks)
        Fail("pipeline: a block copy %d -> %d is out of range", from, to);
      kv.CopyBlock(from, to);
    }
    const int32_t* tok = v.tokens;
    const int32_t* table = v.tables;
    for (int i = 0; i < n_items; ++i) {
      const ItemHeader& it = v.items[i];
      for (int t = 0; t < it.n_table; ++t)
        if (table[t] < 0 || table[t] >= plan.num_blocks)
          Fail("pipeline: a block id is out of range");
      views[static_cast<size_t>(i)] =
          KvView{kv.layer_views(), table, it.n_table, plan.block_size, it.window};
      StepItem& b = items[static_cast<size_t>(i)];
      b = StepItem{tok, it.n, it.pos, &views[static_cast<size_t>(i)], it.n_logits};
      b.prompt_len = it.prompt_len;
      tok += std::max(0, it.n);
      table += std::max(0, it.n_table);
    }
    int rows = 0;
    const float* y = tf.ForwardStage(items.data(), n_items, v.x, v.h->hidden_out != 0, &rows);
    computed += NowSeconds() - t1;
    if (!last) {
      std::vector<char> next = out.Buffer(v.ints * 4 + static_cast<size_t>(rows) * dim * 4);
      std::memcpy(next.data(), msg.data(), v.ints * 4);
      std::memcpy(next.data() + v.ints * 4, y, static_cast<size_t>(rows) * dim * 4);
      out.Send(std::move(next), rank + 1, kData);
    } else {
      const size_t row_floats =
          v.h->hidden_out != 0 ? static_cast<size_t>(dim) : static_cast<size_t>(n_vocab);
      std::vector<char> res =
          out.Buffer(sizeof(ResultHeader) + static_cast<size_t>(rows) * row_floats * 4);
      const ResultHeader head{v.h->mb, rows, static_cast<int32_t>(row_floats), 0};
      std::memcpy(res.data(), &head, sizeof head);
      std::memcpy(res.data() + sizeof head, y, static_cast<size_t>(rows) * row_floats * 4);
      out.Send(std::move(res), 0, kResult);
    }
  }
}

// ---- the head's link -----------------------------------------------------------------------

class MpiLink final : public StageLink {
 public:
  MpiLink(int size, std::vector<int> begin, std::vector<std::string> who, int micro_batches,
          int dim, std::unique_ptr<Heartbeats> hb)
      : size_(size),
        begin_(std::move(begin)),
        who_(std::move(who)),
        micro_batches_(micro_batches),
        dim_(dim),
        hb_(std::move(hb)) {}
  ~MpiLink() override {
    if (tokens_ > 0) {
      const double t = static_cast<double>(tokens_);
      std::fprintf(stderr,
                   "paddock: pipeline link: %llu micro-batches, %llu tokens; to stage 1 %.0f "
                   "bytes per token, back from the last %.0f bytes per token (%.1f messages per "
                   "token); the head waited %.3f s for the stages' results (%.0f%% of the %.3f s "
                   "from its first micro-batch to its last result)\n",
                   static_cast<unsigned long long>(micro_batches_sent_),
                   static_cast<unsigned long long>(tokens_), bytes_sent_ / t, bytes_back_ / t,
                   2.0 * static_cast<double>(micro_batches_sent_) / t, wait_seconds_,
                   100.0 * wait_seconds_ / std::max(1e-9, last_receive_ - first_send_),
                   last_receive_ - first_send_);
    }
    if (Lost().empty()) {
      std::vector<char> stop = out_.Buffer(sizeof(StepHeader));
      const StepHeader h{kStop, 0, 0, 0, 0, 0, 0};
      std::memcpy(stop.data(), &h, sizeof h);
      out_.Send(std::move(stop), 1, kData);
      out_.Drain(*hb_);
    }
    const std::string lost = Lost();
    hb_->Stop();
    if (lost.empty()) {
      MPI_Finalize();
    } else {
      // MPI cannot finalize with a rank gone: the process ends here, saying why (this runs as
      // an error unwinds from a command, before its own report would).
      std::fflush(stdout);
      std::fprintf(stderr, "paddock: error: %s\n", lost.c_str());
      std::fflush(stderr);
      _exit(1);
    }
  }
  int head_layers() const override { return begin_[1]; }
  int micro_batches() const override { return micro_batches_; }
  int lanes() const override { return size_; }

  void Send(int mb, const StepItem* items, int n_items, const float* x, int n, int rows,
            bool hidden_out) override {
    Check();
    size_t ints = kHeader + copies_.size() + kItemInts * static_cast<size_t>(n_items) +
                  static_cast<size_t>(n);
    std::vector<int>& tables = tables_;
    tables.resize(static_cast<size_t>(n_items));
    for (int i = 0; i < n_items; ++i) {
      const KvView& kv = *items[i].kv;
      tables[static_cast<size_t>(i)] =
          std::min(kv.n_table, (items[i].pos + items[i].n + kv.block_size - 1) / kv.block_size);
      ints += static_cast<size_t>(tables[static_cast<size_t>(i)]);
    }
    ints = (ints + 3) / 4 * 4;
    std::vector<char> msg = out_.Buffer(ints * 4 + static_cast<size_t>(n) * dim_ * 4);
    const StepHeader h{
        kStep, mb, n_items, n, rows, hidden_out ? 1 : 0, static_cast<int32_t>(copies_.size() / 2)};
    std::memcpy(msg.data(), &h, sizeof h);
    auto* w = reinterpret_cast<int32_t*>(msg.data() + sizeof h);
    int32_t* const floats = reinterpret_cast<int32_t*>(msg.data()) + ints;
    for (int32_t c : copies_) *w++ = c;
    copies_.clear();
    for (int i = 0; i < n_items; ++i) {
      const StepItem& it = items[i];
      const ItemHeader ih{
          it.n, it.pos, it.n_logits, it.prompt_len, tables[static_cast<size_t>(i)], it.kv->window};
      std::memcpy(w, &ih, sizeof ih);
      w += kItemInts;
    }
    for (int i = 0; i < n_items; ++i)
      for (int t = 0; t < items[i].n; ++t) *w++ = items[i].tokens[t];
    for (int i = 0; i < n_items; ++i)
      for (int t = 0; t < tables[static_cast<size_t>(i)]; ++t) *w++ = items[i].kv->table[t];
    while (w < floats) *w++ = 0;  // the padding before the floats
    std::memcpy(msg.data() + ints * 4, x, static_cast<size_t>(n) * dim_ * 4);
    if (first_send_ == 0) first_send_ = NowSeconds();
    bytes_sent_ += static_cast<double>(msg.size());
    tokens_ += static_cast<uint64_t>(n);
    ++micro_batches_sent_;
    out_.Send(std::move(msg), 1, kData);
  }

  void Receive(int mb, float* out, int rows, size_t row_floats) override {
    Check();
    std::string& b = in_;
    const double t0 = NowSeconds();
    try {
      ReceiveBytes(size_ - 1, kResult, *hb_, &b);
    } catch (const Error&) {
      Check();
      throw;
    }
    const double t1 = NowSeconds();
    wait_seconds_ += t1 - t0;
    bytes_back_ += static_cast<double>(b.size());
    last_receive_ = t1;
    ResultHeader h{};
    if (b.size() >= sizeof h) std::memcpy(&h, b.data(), sizeof h);
    if (b.size() < sizeof h || h.mb != mb || h.rows != rows ||
        static_cast<size_t>(h.row_floats) != row_floats ||
        b.size() != sizeof h + static_cast<size_t>(rows) * row_floats * 4)
      Fail("pipeline: the last stage answered micro-batch %d with a malformed result", mb);
    std::memcpy(out, b.data() + sizeof h, static_cast<size_t>(rows) * row_floats * 4);
  }

  void CopyBlock(int32_t from, int32_t to) override {
    copies_.push_back(from);
    copies_.push_back(to);
  }

  std::string Lost() const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (lost_.empty()) {
      if (const int r = hb_->Silent(); r > 0)
        lost_ = StrFormat("pipeline %s (layers %d-%d) stopped answering: no heartbeat for %.1f s",
                          who_[static_cast<size_t>(r)].c_str(), begin_[static_cast<size_t>(r)],
                          begin_[static_cast<size_t>(r) + 1] - 1, hb_->SilentFor(r));
    }
    return lost_;
  }

 private:
  void Check() const {
    if (std::string lost = Lost(); !lost.empty()) throw Error(lost);
  }
  int size_;
  std::vector<int> begin_;
  std::vector<std::string> who_;
  int micro_batches_;
  int dim_;
  std::unique_ptr<Heartbeats> hb_;
  Outbox out_;
  std::vector<int32_t> copies_;
  std::vector<int> tables_;  // Send's block-table lengths per item
  std::string in_;           // Receive's message
  // The link's figures (printed when the head ends): what crossed, and how long the head
  // waited for the stages' results (their compute and the link) within its steps.
  double bytes_sent_ = 0, bytes_back_ = 0, wait_seconds_ = 0, first_send_ = 0, last_receive_ = 0;
  uint64_t tokens_ = 0, micro_batches_sent_ = 0;
  mutable std::mutex mu_;
  mutable std::string lost_;
};

int EnvInt(const char* name, int dflt) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : dflt;
}

}  // namespace

bool UnderMpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

bool JoinPipeline(EngineOptions* eo, const PipelineOptions& po) {
  // Larger messages go out eagerly (a micro-batch's hidden states are sent while the head
  // computes the next one); the launcher's settings win.
  setenv("OMPI_MCA_btl_tcp_eager_limit", "1048576", 0);
  setenv("OMPI_MCA_btl_tcp_rndv_eager_limit", "1048576", 0);
  // The threads MPI and the heartbeats start keep SIGTERM and SIGINT blocked, so that the
  // signals reach the threads that handle them (the server's waiter; for run, the main one)
  // instead of ending the process from a thread that does not.
  sigset_t stop, old;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, &old);
  struct Restore {
    sigset_t* old;
    ~Restore() { pthread_sigmask(SIG_SETMASK, old, nullptr); }
  } restore{&old};
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_MULTIPLE)
    Fail("pipeline: the MPI library gives no MPI_THREAD_MULTIPLE (the heartbeats need it)");
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (eo->threads == 0) {  // this host's cores shared by its ranks
    const int local = std::max(1, EnvInt("OMPI_COMM_WORLD_LOCAL_SIZE", 1));
    eo->threads = std::max(1, PhysicalCores() / local);
  }
  if (size == 1) {  // one process: the whole model here, no link
    MPI_Finalize();
    return true;
  }
  auto hb = std::make_unique<Heartbeats>(rank, size, po.stage_timeout);
  // Every rank maps its own file (nothing read yet) and says who it is.
  std::unique_ptr<LoadedModel> model;
  Hello me;
  me.host = HostName();
  me.path = eo->model_path;
  me.pid = getpid();
  me.budget = BudgetOf(po);
  try {
    model = LoadModel(eo->model_path, eo->tokenizer_path, false);  // only its layers are read
    me.fingerprint = Fingerprint(*model);
  } catch (const std::exception& e) {
    me.error = e.what();
  }
  if (rank > 0) {
    // A stage ends when its head says so (or goes silent): the launcher's SIGTERM (mpirun sends
    // it to every rank) must not take the layers away from a head still draining its requests.
    std::signal(SIGTERM, SIG_IGN);
    std::signal(SIGINT, SIG_IGN);
    const std::string hello = Encode(me);
    MPI_Send(hello.data(), static_cast<int>(hello.size()), MPI_BYTE, 0, kHello, MPI_COMM_WORLD);
    const Plan plan = DecodePlan(ReceiveBytes(0, kPlan, *hb));
    if (!plan.error.empty()) {
      hb->Stop();
      MPI_Finalize();
      return false;  // the head reports it
    }
    try {
      RunStage(rank, size, std::move(model), *eo, plan, *hb);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "paddock: pipeline stage %d: %s\n", rank, e.what());
      std::fflush(stderr);
      _exit(1);  // the head sees the silence
    }
    hb->Stop();
    MPI_Finalize();
    return false;
  }
  // The head: hear every stage, check their files against its own, split, tell them.
  std::vector<Hello> ranks(static_cast<size_t>(size));
  ranks[0] = me;
  for (int i = 1; i < size; ++i) {
    int from = 0;
    Hello h = DecodeHello(ReceiveBytes(MPI_ANY_SOURCE, kHello, *hb, &from));
    ranks[static_cast<size_t>(from)] = std::move(h);
  }
  std::vector<std::string> who;
  for (int r = 0; r < size; ++r)
    who.push_back(StrFormat("stage %d (rank %d on %s, pid %lld)", r, r,
                            ranks[static_cast<size_t>(r)].host.c_str(),
                            static_cast<long long>(ranks[static_cast<size_t>(r)].pid)));
  Plan plan;
  std::vector<uint64_t> budgets;
  try {
    if (!me.error.empty()) throw Error(me.error);
    for (int r = 1; r < size; ++r) {
      const Hello& h = ranks[static_cast<size_t>(r)];
      if (!h.error.empty()) Fail("%s: %s", who[static_cast<size_t>(r)].c_str(), h.error.c_str());
      for (size_t k = 0; k < me.fingerprint.size(); ++k) {
        const auto& mine = me.fingerprint[k];
        const std::string theirs = k < h.fingerprint.size() ? h.fingerprint[k].second : "?";
        if (theirs != mine.second)
          Fail("%s has another model: %s %s there (%s), %s here (%s)",
               who[static_cast<size_t>(r)].c_str(), mine.first.c_str(), theirs.c_str(),
               h.path.c_str(), mine.second.c_str(), me.path.c_str());
      }
    }
    for (const Hello& h : ranks) budgets.push_back(h.budget);
    // The KV pool: the head's engine sizes it (its EngineOptions); the stages hold the same
    // blocks of their layers.
    const MemoryReport est = EstimateMemory(*eo);
    plan.num_blocks = est.kv_total_blocks;
    plan.block_size = est.kv_block_size;
    const uint64_t kv_per_layer =
        est.kv_allocated_bytes / static_cast<uint64_t>(std::max(1, model->config.n_layers));
    plan.begin = SplitLayers(*model, po.layers, budgets, who, kv_per_layer);
  } catch (const std::exception& e) {
    plan.error = e.what();
  }
  plan.n_layers = model ? model->config.n_layers : 0;
  plan.k_type = eo->cache_type_k;
  plan.v_type = eo->cache_type_v;
  plan.layer_types = eo->kv_layer_types;
  plan.context =
      eo->context > 0 ? eo->context : std::min(model ? model->config.context_length : 0, 4096);
  plan.max_batch = eo->max_batch;
  plan.forward = eo->forward;
  const std::string bytes = Encode(plan);
  for (int r = 1; r < size; ++r)
    MPI_Send(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, r, kPlan, MPI_COMM_WORLD);
  if (!plan.error.empty()) {
    hb->Stop();
    MPI_Finalize();
    throw Error(plan.error);
  }
  for (int i = 1; i < size; ++i) {
    int from = 0;
    Reader r(ReceiveBytes(MPI_ANY_SOURCE, kReady, *hb, &from));
    const int64_t anon = r.Int(), file = r.Int(), relaid = r.Int(), kv = r.Int();
    std::fprintf(stderr,
                 "paddock: pipeline %s: layers %d-%d%s, resident %s own + %s of the file mapped "
                 "(weights re-laid %s, KV %s)\n",
                 who[static_cast<size_t>(from)].c_str(), plan.begin[static_cast<size_t>(from)],
                 plan.begin[static_cast<size_t>(from) + 1] - 1,
                 from == size - 1 ? " and the output head" : "",
                 FormatBytes(static_cast<uint64_t>(anon)).c_str(),
                 FormatBytes(static_cast<uint64_t>(file)).c_str(),
                 FormatBytes(static_cast<uint64_t>(relaid)).c_str(),
                 FormatBytes(static_cast<uint64_t>(kv)).c_str());
  }
  std::fprintf(stderr,
               "paddock: pipeline %s: embeddings and layers 0-%d; %d micro-batches a step\n",
               who[0].c_str(), plan.begin[1] - 1, po.micro_batches > 0 ? po.micro_batches : size);
  const int mbs = po.micro_batches > 0 ? po.micro_batches : size;
  eo->stages =
      std::make_shared<MpiLink>(size, plan.begin, who, mbs, model->config.dim, std::move(hb));
  return true;
}

}  // namespace paddock::dist
