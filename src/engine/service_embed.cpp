// engine/service_embed.cpp: embeddings on the engine thread, between steps (Service::Embed,
// Service::EmbedAsync).
#include <algorithm>
#include <future>

#include "base/strings.h"
#include "engine/service_impl.h"
#include "model/step.h"

namespace paddock {

namespace {

// The KV sequences of one round of inputs, freed when the round ends.
struct Round {
  KvManager& kv;
  std::vector<KvManager::SeqId> seqs;
  ~Round() {
    for (auto id : seqs) kv.Free(id);
  }
};

template <typename T>
void Normalize(const T* v, int dim, std::vector<float>* o) {
  double norm = 0;
  for (int d = 0; d < dim; ++d) norm += static_cast<double>(v[d]) * v[d];
  norm = norm > 0 ? 1.0 / std::sqrt(norm) : 0;
  o->resize(static_cast<size_t>(dim));
  for (int d = 0; d < dim; ++d) (*o)[static_cast<size_t>(d)] = static_cast<float>(v[d] * norm);
}

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

  // How the backend pools (a rerank score reads the first token's row).
  Pooling How() const {
    return pooling == Service::Pooling::kMean   ? Pooling::kMean
           : pooling == Service::Pooling::kLast ? Pooling::kLast
                                                : Pooling::kFirst;
  }

  // An encoder: each input whole in one item (its tokens see each other), as many inputs per
  // step as its token and row limits take, pooled by the backend; a rerank score through the
  // classification head.
  bool RunPooled(bool busy) {
    KvManager& kv = *e->kv;
    const int dim = e->model->config.dim;
    const int max_tokens = e->backend->max_batch(), max_items = e->backend->max_items();
    const Pooling how = How();
    std::vector<StepItem> items;
    std::vector<KvView> views(static_cast<size_t>(max_items));
    std::vector<const float*> rows(static_cast<size_t>(max_items));
    while (next < inputs.size()) {
      Round round{kv, {}};
      const size_t first = next;
      int tokens = 0;
      while (next < inputs.size() && static_cast<int>(round.seqs.size()) < max_items) {
        const int n = static_cast<int>(inputs[next].size());
        if (n > max_tokens) Fail("an input of %d tokens exceeds the step of %d", n, max_tokens);
        if (tokens + n > max_tokens) break;
        const KvManager::SeqId seq = kv.Create(n);
        if (!kv.Reserve(seq, n)) {
          kv.Free(seq);
          break;
        }
        round.seqs.push_back(seq);
        tokens += n;
        ++next;
      }
      if (round.seqs.empty()) {
        if (busy) return false;
        Fail("no room in the KV cache for an input of %zu tokens", inputs[next].size());
      }
      items.clear();
      for (size_t r = 0; r < round.seqs.size(); ++r) {
        const auto& in = inputs[first + r];
        views[r] = kv.View(round.seqs[r]);
        StepItem it{in.data(), static_cast<int>(in.size()), 0, &views[r]};
        it.prompt_len = it.n;
        it.pooling = how;
        items.push_back(it);
      }
      {
        Engine::Impl::StepGuard g(kv);
        e->backend->Step(items.data(), static_cast<int>(items.size()), StepOutput::kPooled,
                         rows.data());
      }
      for (size_t r = 0; r < items.size(); ++r) {
        if (pooling == Service::Pooling::kRank) {
          out[first + r].assign(1, RankScore(e->model->weights, dim, rows[r]));
        } else {
          Normalize(rows[r], dim, &out[first + r]);
        }
      }
    }
    return true;
  }

  // Runs rounds until done (true) or the cache has no room for the next input while `busy`
  // (false: call again after a step).
  bool Run(bool busy) {
    if (e->model->config.encoder) return RunPooled(busy);
    KvManager& kv = *e->kv;
    const int dim = e->model->config.dim;
    const size_t chunk = static_cast<size_t>(e->backend->max_items());
    std::vector<StepItem> items;
    std::vector<const float*> rows(chunk);
    struct Span {
      size_t r;
      int start, m;
    };
    std::vector<Span> spans;
    while (next < inputs.size()) {
      Round round{kv, {}};
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
      std::vector<PoolSum> acc(count);
      for (size_t r = 0; r < count; ++r)
        acc[r].Start(How(), static_cast<int>(inputs[first + r].size()), dim);
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
          e->backend->Step(items.data(), static_cast<int>(items.size()), StepOutput::kHidden,
                           rows.data());
        }
        size_t row = 0;
        for (const Span& sp : spans) {
          const auto& in = inputs[first + sp.r];
          kv.Commit(round.seqs[sp.r], in.data() + sp.start, sp.m);
          for (int i = 0; i < sp.m; ++i, ++row) acc[sp.r].Add(sp.start + i, rows[row]);
          done_tokens[sp.r] += sp.m;
        }
        while (cur < count && done_tokens[cur] == static_cast<int>(inputs[first + cur].size()))
          ++cur;
      }
      for (size_t r = 0; r < count; ++r) Normalize(acc[r].sum(), dim, &out[first + r]);
    }
    return true;
  }
};

}  // namespace

void Service::EmbedAsync(std::vector<std::vector<int32_t>> inputs, Pooling pooling,
                         EmbedCallback done) {
  Impl& s = *impl_;
  const int ctx = s.e->context;
  const ModelConfig& c = s.e->model->config;
  if (pooling == Pooling::kRank && c.encoder && s.e->model->weights.cls == nullptr)
    Fail("'%s' has no classification head: it gives embeddings, not rerank scores",
         s.e->info.name.c_str());
  if (pooling != Pooling::kRank && s.e->info.kind == ModelKind::kRerank)
    Fail("'%s' is a reranker: it gives rerank scores, not embeddings", s.e->info.name.c_str());
  if (pooling == Pooling::kRank && !c.encoder)
    Fail("'%s' is not a reranker (rerank scores come from an encoder with a classification head)",
         s.e->info.name.c_str());
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
      if (!job->Run(!impl->Idle())) return false;
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

}  // namespace paddock
