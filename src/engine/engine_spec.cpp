// engine/engine_spec.cpp: speculative decoding's set-up for an engine: the proposer (n-gram or
// a draft model) and the controller, with the verification cost measured on this machine.
#include <algorithm>
#include <vector>

#include "base/timer.h"
#include "engine/engine_impl.h"
#include "kv/kv_manager.h"
#include "model/weights.h"

namespace paddock {

namespace {

// One token drafted by the prediction block (its step and head) against one target step.
double MeasureMtpCost(Engine::Impl* impl, double target_step) {
  MtpProposer& m = *impl->mtp;
  const size_t d = static_cast<size_t>(impl->model->config.dim);
  std::vector<int32_t> h(9, 1);
  std::vector<float> hidden(8 * d, 0.0f);
  int32_t out[2];
  m.Select(0);
  m.Feed(h.data(), 8, 0, hidden.data());
  m.Propose(h.data(), 9, 1, out, nullptr);  // warm up
  const double t0 = NowSeconds();
  for (int i = 0; i < 4; ++i) m.Propose(h.data(), 9, 2, out, nullptr);
  const double step = (NowSeconds() - t0) / 4 / 2;
  m.Release(0);
  const double cost = target_step > 0 ? std::min(1.0, step / target_step) : 0.5;
  m.set_cost(cost);
  return cost;
}

// A hybrid model's state saved and put back (one verification's copies), against one step.
double StateCopyCost(Engine::Impl* impl, double target_step) {
  KvManager& kv = *impl->kv;
  const KvManager::SeqId seq = kv.Create(16);
  std::vector<uint8_t> backup(kv.state_bytes());
  std::vector<double> t;
  for (int i = 0; i < 5; ++i) {
    const double t0 = NowSeconds();
    kv.SaveState(seq, backup.data());
    kv.LoadState(seq, backup.data());
    t.push_back(NowSeconds() - t0);
  }
  kv.Free(seq);
  std::sort(t.begin(), t.end());
  return target_step > 0 ? t[t.size() / 2] / target_step : 0;
}

}  // namespace

// The proposer and the controller: the verification cost curve is measured on this machine
// for this model (and the draft's step cost against the target's), once at creation.
void SetUpSpeculation(Engine::Impl* impl, const EngineOptions& o) {
  impl->spec = ParseSpecMode(o.spec);
  if (o.spec_max < 1 || o.spec_max > kSpecMaxDraft)
    Fail("--spec-max %d is out of range [1, %d]", o.spec_max, kSpecMaxDraft);
  if (impl->spec != SpecMode::kDraft && !o.draft_model.empty())
    Fail("a draft model is given but speculation is '%s' (use --spec draft)", o.spec.c_str());
  impl->drafts.assign(1, 0);  // [t]: the token each step runs (and drafts after it)
  if (impl->spec == SpecMode::kOff) return;
  if (impl->spec == SpecMode::kDraft) {
    if (o.draft_model.empty()) Fail("--spec draft needs a draft model (--draft-model FILE)");
    auto d =
        std::make_unique<DraftProposer>(o.draft_model, *impl->model, *impl->pool, o, impl->context);
    impl->draft = d.get();
    impl->proposer = std::move(d);
  } else if (impl->spec == SpecMode::kMtp) {
    const BackendCaps& caps = impl->backend->caps();
    if (!caps.hidden)
      Fail("--spec mtp reads every token's hidden state, which the %s backend does not return; %s",
           caps.name, caps.fallback);
    auto m = std::make_unique<MtpProposer>(*impl->model, *impl->pool, o, impl->context,
                                           kSpecMaxBatch + 1);
    impl->mtp = m.get();
    impl->proposer = std::move(m);
    impl->hidden.resize(static_cast<size_t>(impl->backend->max_batch()) *
                        static_cast<size_t>(impl->model->config.dim));
  } else {
    impl->proposer = std::make_unique<NgramProposer>();
  }
  const int k_max = std::min(o.spec_max, impl->backend->max_items() - 1);
  impl->drafts.resize(static_cast<size_t>(k_max) + 1);
  impl->draft_q.resize(static_cast<size_t>(k_max) + 1);
  impl->rows.resize(static_cast<size_t>(k_max) + 1);
  double target_step = 0;
  ComputeTurn turn(impl->compute ? impl->compute->impl() : nullptr);
  std::vector<double> cost = impl->MeasureVerifyCost(k_max, 3, &target_step);
  if (impl->kv->hybrid()) {  // a verification keeps the state first and puts it back after
    const double copy = StateCopyCost(impl, target_step);
    for (size_t k = 1; k < cost.size(); ++k) cost[k] += copy;
  }
  double draft_cost = 0;
  if (impl->draft != nullptr) {
    // One drafted token: a one-token step of the draft, against one of the target.
    std::vector<int32_t> h(8, 1);
    int32_t out[2];
    SamplingParams greedy;
    greedy.temperature = 0;
    impl->draft->Reset(greedy);
    impl->draft->Propose(h.data(), 8, 1, out, nullptr);  // warm up
    const double t0 = NowSeconds();
    for (int i = 0; i < 4; ++i) impl->draft->Propose(h.data(), 8, 2, out, nullptr);
    const double draft_step = (NowSeconds() - t0) / 4 / 2;  // two one-token draft steps each
    draft_cost = target_step > 0 ? std::min(1.0, draft_step / target_step) : 0.5;
    impl->draft->set_cost(draft_cost);
  }
  if (impl->mtp != nullptr) draft_cost = MeasureMtpCost(impl, target_step);
  const bool draft = impl->draft != nullptr;
  impl->spec_ctl = SpecController(std::move(cost), k_max, draft_cost, o.spec_fixed,
                                  /*probe=*/!draft, /*prior=*/draft ? 0.9 : 0.6,
                                  /*rollback=*/impl->kv->hybrid() && !impl->backend->caps().replay);
}

std::vector<double> Engine::Impl::MeasureVerifyCost(int k_max, int reps, double* one_seconds) {
  const int base = 16;
  const KvManager::SeqId seq = kv->Create(base + k_max + 1);
  struct Guard {
    KvManager& kv;
    KvManager::SeqId id;
    ~Guard() { kv.Free(id); }
  } guard{*kv, seq};
  std::vector<int32_t> toks(static_cast<size_t>(base + k_max + 1));
  for (size_t i = 0; i < toks.size(); ++i)
    toks[i] = static_cast<int32_t>((i * 7919 + 13) % static_cast<size_t>(model->config.n_vocab));
  if (!kv->Reserve(seq, base + k_max + 1))
    Fail("speculation: the KV cache is too small to measure");
  Step(seq, toks.data(), base, 0);
  std::vector<std::vector<double>> t(static_cast<size_t>(k_max) + 1);
  const KvView view = kv->View(seq);
  for (int rep = 0; rep < reps + 1; ++rep) {
    for (int k = 0; k <= k_max; ++k) {
      StepItem item{toks.data() + base, 1 + k, base, &view, 1 + k};
      const float* logits;
      const double t0 = NowSeconds();
      StepBatch(&item, 1, &logits);
      if (rep > 0) t[static_cast<size_t>(k)].push_back(NowSeconds() - t0);  // round 0 warms up
    }
  }
  std::vector<double> cost;
  for (auto& v : t) {
    std::sort(v.begin(), v.end());
    cost.push_back(v[v.size() / 2]);
  }
  const double one = cost[0];
  if (one_seconds != nullptr) *one_seconds = one;
  for (double& c : cost) c = one > 0 ? c / one : 1.0;
  return cost;
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

std::string Engine::fault() const {
  return impl_->backend->Fault();
}

}  // namespace paddock
