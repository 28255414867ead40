// dist/pipeline.cpp: a pipeline's start (MPI, the start-up agreement, the split of the layers)
// and the head's link over MPI (Open MPI). The stages' loop is stage.cpp, the transport
// transport.cpp. See pipeline.h.
#include "dist/pipeline.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "base/cpu.h"
#include "base/strings.h"
#include "base/timer.h"
#include "dist/stage.h"
#include "dist/transport.h"
#include "model/stage_link.h"
#include "model/weights.h"

namespace paddock::dist {

using namespace detail;  // NOLINT: this folder's internals

namespace {

uint64_t BudgetOf(const PipelineOptions& po) {
  return po.memory_budget > 0 ? po.memory_budget : AvailableMemoryBytes() / 10 * 9;
}

// The split: explicit counts, or by memory in proportion to the ranks' budgets (weights of the
// layers + their KV; the head also the embeddings, the last rank the output head). Every rank
// gets at least one layer; a rank over its budget is an error saying by how much.
std::vector<int> SplitLayers(const LoadedModel& m, const std::string& spec,
                             const std::vector<uint64_t>& budgets,
                             const std::vector<std::string>& who, uint64_t kv_per_layer) {
  const int n = static_cast<int>(budgets.size());
  const int layers = m.config.n_layers;
  // (A stage would need each sequence's state slot of its layers; the head's state slots are
  // its own KV manager's.)
  if (m.config.hybrid())
    Fail(
        "pipeline: the %s model's recurrent layers are not supported across ranks (one "
        "process runs it)",
        m.config.arch.c_str());
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
  for (int r = 0; r < n; ++r) {  // a layer reading another's KV (Gemma 4) needs it on its rank
    for (int l = begin[static_cast<size_t>(r)]; l < begin[static_cast<size_t>(r) + 1]; ++l) {
      const int src = m.config.KvSource(l);
      if (src < begin[static_cast<size_t>(r)])
        Fail(
            "pipeline: layer %d reads layer %d's KV cache, which another rank holds: give one rank "
            "layers %d-%d (--layers)",
            l, src, src, l);
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

}  // namespace

bool UnderMpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

namespace {

// MPI started with every thread it starts blocking SIGTERM and SIGINT (so that the signals
// reach the threads that handle them: the server's waiter; for run, the main one), larger
// messages sent eagerly (a micro-batch's hidden states go out while the head computes the next
// one; the launcher's settings win); this host's cores shared by its ranks when threads is 0.
void StartMpi(EngineOptions* eo, int* rank, int* size) {
  setenv("OMPI_MCA_btl_tcp_eager_limit", "1048576", 0);
  setenv("OMPI_MCA_btl_tcp_rndv_eager_limit", "1048576", 0);
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
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
  if (eo->threads == 0) {
    const int local = std::max(1, EnvInt("OMPI_COMM_WORLD_LOCAL_SIZE", 1));
    eo->threads = std::max(1, PhysicalCores() / local);
  }
}

// A stage's life: its hello to the head, the plan back, its layers until the head ends.
void RunAsStage(int rank, int size, const Hello& me, std::unique_ptr<LoadedModel> model,
                const EngineOptions& eo, Heartbeats& hb) {
  // A stage ends when its head says so (or goes silent): the launcher's SIGTERM (mpirun sends
  // it to every rank) must not take the layers away from a head still draining its requests.
  std::signal(SIGTERM, SIG_IGN);
  std::signal(SIGINT, SIG_IGN);
  const std::string hello = Encode(me);
  MPI_Send(hello.data(), static_cast<int>(hello.size()), MPI_BYTE, 0, kHello, MPI_COMM_WORLD);
  const Plan plan = DecodePlan(ReceiveBytes(0, kPlan, hb));
  if (plan.error.empty()) {  // (else the head reports it)
    try {
      RunStage(rank, size, std::move(model), eo, plan, hb);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "paddock: pipeline stage %d: %s\n", rank, e.what());
      std::fflush(stderr);
      _exit(1);  // the head sees the silence
    }
  }
  hb.Stop();
  MPI_Finalize();
}

// The head's plan: every stage's file checked against its own, the layers split by the
// budgets, the KV pool the head's engine sizes (the stages hold the same blocks of their
// layers); a failure in plan.error, for every rank to exit with.
Plan HeadPlan(const std::vector<Hello>& ranks, const std::vector<std::string>& who,
              const LoadedModel* model, const EngineOptions& eo, const PipelineOptions& po) {
  Plan plan;
  const Hello& me = ranks[0];
  try {
    if (!me.error.empty()) throw Error(me.error);
    for (size_t r = 1; r < ranks.size(); ++r) {
      const Hello& h = ranks[r];
      if (!h.error.empty()) Fail("%s: %s", who[r].c_str(), h.error.c_str());
      for (size_t k = 0; k < me.fingerprint.size(); ++k) {
        const auto& mine = me.fingerprint[k];
        const std::string theirs = k < h.fingerprint.size() ? h.fingerprint[k].second : "?";
        if (theirs != mine.second)
          Fail("%s has another model: %s %s there (%s), %s here (%s)", who[r].c_str(),
               mine.first.c_str(), theirs.c_str(), h.path.c_str(), mine.second.c_str(),
               me.path.c_str());
      }
    }
    std::vector<uint64_t> budgets;
    for (const Hello& h : ranks) budgets.push_back(h.budget);
    const MemoryReport est = EstimateMemory(eo);
    plan.num_blocks = est.kv_total_blocks;
    plan.block_size = est.kv_block_size;
    const uint64_t kv_per_layer =
        est.kv_allocated_bytes / static_cast<uint64_t>(std::max(1, model->config.n_layers));
    plan.begin = SplitLayers(*model, po.layers, budgets, who, kv_per_layer);
  } catch (const std::exception& e) {
    plan.error = e.what();
  }
  plan.n_layers = model ? model->config.n_layers : 0;
  plan.k_type = eo.cache_type_k;
  plan.v_type = eo.cache_type_v;
  plan.layer_types = eo.kv_layer_types;
  plan.context =
      eo.context > 0 ? eo.context : std::min(model ? model->config.context_length : 0, 4096);
  plan.max_batch = eo.max_batch;
  plan.forward = eo.forward;
  return plan;
}

// Each stage's ready message: its layers and memory, printed.
void ReportStages(int size, const Plan& plan, const std::vector<std::string>& who, Heartbeats& hb) {
  for (int i = 1; i < size; ++i) {
    int from = 0;
    Reader r(ReceiveBytes(MPI_ANY_SOURCE, kReady, hb, &from));
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
}

}  // namespace

bool JoinPipeline(EngineOptions* eo, const PipelineOptions& po) {
  int rank = 0, size = 1;
  StartMpi(eo, &rank, &size);
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
    RunAsStage(rank, size, me, std::move(model), *eo, *hb);
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
  const Plan plan = HeadPlan(ranks, who, model.get(), *eo, po);
  const std::string bytes = Encode(plan);
  for (int r = 1; r < size; ++r)
    MPI_Send(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, r, kPlan, MPI_COMM_WORLD);
  if (!plan.error.empty()) {
    hb->Stop();
    MPI_Finalize();
    throw Error(plan.error);
  }
  ReportStages(size, plan, who, *hb);
  const int mbs = po.micro_batches > 0 ? po.micro_batches : size;
  std::fprintf(stderr,
               "paddock: pipeline %s: embeddings and layers 0-%d; %d micro-batches a step\n",
               who[0].c_str(), plan.begin[1] - 1, mbs);
  eo->stages =
      std::make_shared<MpiLink>(size, plan.begin, who, mbs, model->config.dim, std::move(hb));
  return true;
}

}  // namespace paddock::dist
