// dist/stage.cpp: a stage's loop (its layers on each micro-batch, passed on or returned to the
// head) and the start-up messages' encoding.
#include "dist/stage.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "base/cpu.h"
#include "base/thread_pool.h"
#include "base/timer.h"
#include "cpu/transformer.h"
#include "kernels/kernels.h"
#include "kv/kv_manager.h"
#include "model/weights.h"

namespace paddock::dist::detail {

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

namespace {

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

// One stage: its layers' weights, KV cache and forward pass, set up from the plan.
class Stage {
 public:
  Stage(int rank, int size, std::unique_ptr<LoadedModel> model, const EngineOptions& eo,
        const Plan& plan, Heartbeats& hb)
      : rank_(rank),
        last_(rank == size - 1),
        plan_(plan),
        hb_(hb),
        model_(Relaid(std::move(model), eo, plan, rank, size)),
        pool_(eo.threads > 0 ? eo.threads : PhysicalCores()),
        tf_(*model_, GetKernels(ParseIsa(eo.isa), PrefetchMode(eo)), pool_, plan.max_batch,
            plan.forward),
        kv_(Kv()),
        items_(static_cast<size_t>(tf_.max_items())),
        views_(items_.size()) {}

  // Tells the head what this stage holds in memory.
  void Ready() {
    Writer w;
    uint64_t anon = 0, file = 0;
    ResidentBytes(&anon, &file);
    w.Int(static_cast<int64_t>(anon));
    w.Int(static_cast<int64_t>(file));
    w.Int(static_cast<int64_t>(model_->relaid_bytes));
    w.Int(static_cast<int64_t>(kv_->Memory().allocated_bytes));
    MPI_Send(w.bytes().data(), static_cast<int>(w.bytes().size()), MPI_BYTE, 0, kReady,
             MPI_COMM_WORLD);
  }

  // Every micro-batch from the rank before, until the head's stop (passed on).
  void Run() {
    for (;;) {
      const double t0 = NowSeconds();
      ReceiveBytes(rank_ - 1, kData, hb_, &msg_);
      const StepView v = ViewStep(msg_, model_->config.dim);
      const double t1 = NowSeconds();
      waited_ += t1 - t0;
      if (v.h->kind == kStop) return Stop();
      ++steps_;
      Step(v);
      computed_ += NowSeconds() - t1;
    }
  }

 private:
  static Prefetch PrefetchMode(const EngineOptions& eo) {
    return !eo.prefetch ? Prefetch::kOff : (eo.prefetch_all ? Prefetch::kAll : Prefetch::kAuto);
  }
  static std::unique_ptr<LoadedModel> Relaid(std::unique_ptr<LoadedModel> m,
                                             const EngineOptions& eo, const Plan& plan, int rank,
                                             int size) {
    const int begin = plan.begin[static_cast<size_t>(rank)];
    const int end = plan.begin[static_cast<size_t>(rank) + 1];
    if (eo.relayout_weights && plan.forward.int8_activations)
      RelayoutWeights(m.get(), eo.huge_pages, nullptr, {begin, end, rank == size - 1});
    return m;
  }
  std::unique_ptr<KvManager> Kv() {
    const int begin = plan_.begin[static_cast<size_t>(rank_)];
    const int end = plan_.begin[static_cast<size_t>(rank_) + 1];
    tf_.SetLayers(begin, end);
    tf_.SetContext(plan_.context);
    KvCacheOptions ko;
    ko.block_size = plan_.block_size;
    ko.k_type = ParseKvDtype(plan_.k_type);
    ko.v_type = ParseKvDtype(plan_.v_type);
    ko.layer_types = plan_.layer_types;
    ko.prefix_cache = false;
    ko.layer_begin = begin;
    ko.layer_end = end;
    ko.num_blocks = plan_.num_blocks;
    return std::make_unique<KvManager>(model_->config, ko, 0, &tf_);
  }

  void Stop() {
    if (!last_) {
      std::vector<char> stop = out_.Buffer(msg_.size());
      std::memcpy(stop.data(), msg_.data(), msg_.size());
      out_.Send(std::move(stop), rank_ + 1, kData);
    }
    out_.Drain(hb_);
    if (steps_ > 0)
      std::fprintf(stderr,
                   "paddock: pipeline stage %d: %llu micro-batches, computing %.3f s, waiting "
                   "for the stage before %.3f s\n",
                   rank_, static_cast<unsigned long long>(steps_), computed_, waited_);
  }

  // The head's copy-on-write copies replayed, the items' views, this stage's layers, and the
  // result to the next stage (or the head).
  void Step(const StepView& v) {
    const int n_items = v.h->items, n_tokens = v.h->tokens;
    if (n_items < 1 || n_items > tf_.max_items() || n_tokens > tf_.max_batch())
      Fail("pipeline: a step of %d sequences and %d tokens exceeds this stage's limits", n_items,
           n_tokens);
    for (int c = 0; c < v.h->copies; ++c) {
      const int32_t from = v.copies[2 * c], to = v.copies[2 * c + 1];
      if (from < 0 || to < 0 || from >= plan_.num_blocks || to >= plan_.num_blocks)
        Fail("pipeline: a block copy %d -> %d is out of range", from, to);
      kv_->CopyBlock(from, to);
    }
    const int32_t* tok = v.tokens;
    const int32_t* table = v.tables;
    for (int i = 0; i < n_items; ++i) {
      const ItemHeader& it = v.items[i];
      for (int t = 0; t < it.n_table; ++t)
        if (table[t] < 0 || table[t] >= plan_.num_blocks)
          Fail("pipeline: a block id is out of range");
      views_[static_cast<size_t>(i)] =
          KvView{kv_->layer_views(), table, it.n_table, plan_.block_size, it.window};
      StepItem& b = items_[static_cast<size_t>(i)];
      b = StepItem{tok, it.n, it.pos, &views_[static_cast<size_t>(i)], it.n_logits};
      b.prompt_len = it.prompt_len;
      tok += std::max(0, it.n);
      table += std::max(0, it.n_table);
    }
    int rows = 0;
    const float* y = tf_.ForwardStage(items_.data(), n_items, v.x, v.h->hidden_out != 0, &rows);
    Pass(v, y, rows);
  }

  // A later stage gets the message's header and items with this stage's residual stream; the
  // head gets the last stage's result rows.
  void Pass(const StepView& v, const float* y, int rows) {
    const size_t dim = static_cast<size_t>(model_->config.dim);
    if (!last_) {
      std::vector<char> next = out_.Buffer(v.ints * 4 + static_cast<size_t>(rows) * dim * 4);
      std::memcpy(next.data(), msg_.data(), v.ints * 4);
      std::memcpy(next.data() + v.ints * 4, y, static_cast<size_t>(rows) * dim * 4);
      out_.Send(std::move(next), rank_ + 1, kData);
      return;
    }
    const size_t row_floats =
        v.h->hidden_out != 0 ? dim : static_cast<size_t>(model_->config.n_vocab);
    std::vector<char> res =
        out_.Buffer(sizeof(ResultHeader) + static_cast<size_t>(rows) * row_floats * 4);
    const ResultHeader head{v.h->mb, rows, static_cast<int32_t>(row_floats), 0};
    std::memcpy(res.data(), &head, sizeof head);
    std::memcpy(res.data() + sizeof head, y, static_cast<size_t>(rows) * row_floats * 4);
    out_.Send(std::move(res), 0, kResult);
  }

  const int rank_;
  const bool last_;
  const Plan& plan_;
  Heartbeats& hb_;
  std::unique_ptr<LoadedModel> model_;
  ThreadPool pool_;
  Transformer tf_;
  std::unique_ptr<KvManager> kv_;
  Outbox out_;
  std::vector<StepItem> items_;
  std::vector<KvView> views_;
  std::string msg_;
  double waited_ = 0, computed_ = 0;
  uint64_t steps_ = 0;
};

}  // namespace

void RunStage(int rank, int size, std::unique_ptr<LoadedModel> model, const EngineOptions& eo,
              const Plan& plan, Heartbeats& hb) {
  Stage stage(rank, size, std::move(model), eo, plan, hb);
  stage.Ready();
  stage.Run();
}

}  // namespace paddock::dist::detail
