#include "engine/speculative.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "base/cpu.h"
#include "base/strings.h"
#include "base/thread_pool.h"
#include "cpu/transformer.h"
#include "engine/engine_impl.h"  // PrefetchOf
#include "kernels/kernels.h"
#include "kv/kv_manager.h"
#include "model/weights.h"

namespace paddock {

SpecMode ParseSpecMode(const std::string& s) {
  if (s == "off") return SpecMode::kOff;
  if (s == "ngram") return SpecMode::kNgram;
  if (s == "draft") return SpecMode::kDraft;
  if (s == "mtp") return SpecMode::kMtp;
  Fail("unknown speculation mode '%s' (ngram, draft, mtp or off)", s.c_str());
}

const char* SpecModeName(SpecMode m) {
  switch (m) {
    case SpecMode::kNgram:
      return "ngram";
    case SpecMode::kDraft:
      return "draft";
    case SpecMode::kMtp:
      return "mtp";
    case SpecMode::kOff:
      break;
  }
  return "off";
}

// ---- n-gram -----------------------------------------------------------------------------

int NgramProposer::Propose(const int32_t* h, int n, int k, int32_t* out, DraftDist* q) {
  for (int len = std::min(max_n_, n - 1); len >= min_n_; --len) {
    const int32_t* suffix = h + n - len;
    // The most recent earlier occurrence that has at least one token after it.
    for (int start = n - len - 1; start >= 0; --start) {
      if (!std::equal(suffix, suffix + len, h + start)) continue;
      const int from = start + len;
      const int m = std::min(k, n - from);
      std::copy(h + from, h + from + m, out);
      if (q != nullptr) {
        for (int i = 0; i < m; ++i) q[i].probs.clear();  // one-hot
      }
      return m;
    }
  }
  return 0;
}

// ---- draft model --------------------------------------------------------------------------

struct DraftProposer::Impl {
  std::unique_ptr<LoadedModel> model;
  std::unique_ptr<Transformer> tf;
  std::unique_ptr<KvManager> kv;
  Sampler sampler;
  struct Slot {
    KvManager::SeqId seq = -1;
    std::vector<int32_t> cached;  // tokens whose K/V the draft cache holds
    bool used = false;
  };
  Slot slots[kSlots];
  int current = 0;
  std::vector<int32_t> hist;  // context + drafts, for the draft's penalties
  int context = 0;
  explicit Impl(int n_vocab) : sampler(n_vocab) {}

  // Runs tokens[0..n) at the end of the cached ones; returns the last position's logits.
  float* Run(const int32_t* tokens, int n) {
    Slot& s = slots[current];
    const int pos = static_cast<int>(s.cached.size());
    if (!kv->Reserve(s.seq, pos + n)) Fail("draft model: its KV cache is full");
    kv->BeginStep();
    const float* logits = tf->Forward(tokens, n, pos, kv->View(s.seq));
    kv->EndStep();
    kv->Commit(s.seq, tokens, n);
    s.cached.insert(s.cached.end(), tokens, tokens + n);
    return const_cast<float*>(logits);
  }
};

bool DraftProposer::Acquire(int* slot) {
  for (int i = 1; i < kSlots; ++i) {  // slot 0 is the single-sequence engine's
    if (!impl_->slots[i].used) {
      impl_->slots[i].used = true;
      *slot = i;
      return true;
    }
  }
  return false;
}

void DraftProposer::Select(int slot) {
  impl_->current = slot;
}

void DraftProposer::Release(int slot) {
  auto& s = impl_->slots[slot];
  impl_->kv->Truncate(s.seq, 0);
  s.cached.clear();
  s.used = false;
}

DraftProposer::DraftProposer(const std::string& path, const LoadedModel& target, ThreadPool& pool,
                             const EngineOptions& o, int context)
    : impl_(std::make_unique<Impl>(target.config.n_vocab)) {
  Impl& s = *impl_;
  s.model = LoadModel(path);
  const Tokenizer& dt = *s.model->tokenizer;
  const Tokenizer& tt = *target.tokenizer;
  if (s.model->config.n_vocab != target.config.n_vocab) {
    Fail(
        "draft model '%s' has %d tokens in its vocabulary, the target %d: a draft must share the "
        "target's vocabulary",
        path.c_str(), s.model->config.n_vocab, target.config.n_vocab);
  }
  for (int i = 0; i < target.config.n_vocab; ++i) {
    if (dt.Piece(i) != tt.Piece(i)) {
      Fail(
          "draft model '%s': token %d is '%.*s', the target's is '%.*s': a draft must share the "
          "target's vocabulary",
          path.c_str(), i, static_cast<int>(dt.Piece(i).size()), dt.Piece(i).data(),
          static_cast<int>(tt.Piece(i).size()), tt.Piece(i).data());
    }
  }
  if (s.model->weight_bytes >= target.weight_bytes) {
    Fail(
        "draft model '%s' (%s of weights) is not smaller than the target (%s): drafting would "
        "cost more than it saves",
        path.c_str(), FormatBytes(s.model->weight_bytes).c_str(),
        FormatBytes(target.weight_bytes).c_str());
  }
  if (o.relayout_weights && o.forward.int8_activations)
    RelayoutWeights(s.model.get(), o.huge_pages);
  s.context = std::min(context, s.model->config.context_length);
  s.tf = std::make_unique<Transformer>(*s.model, GetKernels(ParseIsa(o.isa), PrefetchOf(o)), pool,
                                       std::min(o.max_batch, 64), o.forward);
  if (s.model->config.hybrid())
    Fail(
        "the draft model %s has recurrent layers, whose drafts cannot be rolled back by "
        "truncation; a draft model of attention layers, --spec ngram or --spec mtp can",
        path.c_str());
  KvCacheOptions ko;
  ko.prefix_cache = false;  // drafts are rolled back by truncation
  ko.k_type = ko.v_type = KvDtype::kF16;
  s.kv = std::make_unique<KvManager>(s.model->config, ko, s.context * kSlots, s.tf.get());
  for (auto& slot : s.slots) slot.seq = s.kv->Create(s.context);
  s.hist.reserve(static_cast<size_t>(s.context) + kSpecMaxDraft);
}

DraftProposer::~DraftProposer() = default;

uint64_t DraftProposer::MemoryBytes() const {
  return impl_->model->weight_bytes + impl_->kv->Memory().allocated_bytes +
         impl_->tf->scratch_bytes();
}

int64_t DraftProposer::parameters() const {
  return impl_->model->n_params;
}

void DraftProposer::Reset(const SamplingParams& p) {
  impl_->sampler.Reset(p);
}

int DraftProposer::Propose(const int32_t* h, int n, int k, int32_t* out, DraftDist* q) {
  Impl& s = *impl_;
  k = std::min(k, s.context - n);
  if (k <= 0 || n < 1) return 0;
  // Keep the cached prefix the history still shares (rolling back rejected drafts), leaving at
  // least the last token to run, so its logits are fresh.
  Impl::Slot& slot = s.slots[s.current];
  size_t common = 0;
  while (common < slot.cached.size() && common < static_cast<size_t>(n) &&
         slot.cached[common] == h[common])
    ++common;
  common = std::min(common, static_cast<size_t>(n - 1));
  s.kv->Truncate(slot.seq, static_cast<int>(common));
  slot.cached.resize(common);
  float* logits = s.Run(h + common, n - static_cast<int>(common));
  s.hist.assign(h, h + n);
  for (int i = 0; i < k; ++i) {
    s.sampler.Prepare(logits, s.hist.data(), static_cast<int>(s.hist.size()));
    out[i] = s.sampler.Draw();
    if (q != nullptr) {
      q[i].probs.clear();
      if (!s.sampler.greedy()) {
        for (int c = 0; c < s.sampler.n_candidates(); ++c)
          q[i].probs.emplace_back(s.sampler.candidates()[c].id, s.sampler.weight(c));
      }
    }
    s.hist.push_back(out[i]);
    if (i + 1 < k) logits = s.Run(&out[i], 1);
  }
  return k;
}

bool LogDraftsOn() {
  static const bool on = std::getenv("PADDOCK_LOG_DRAFTS") != nullptr;
  return on;
}

void LogDrafts(size_t n_history, const int32_t* drafts, int k) {
  std::fprintf(stderr, "paddock: drafts after %zu tokens:", n_history);
  for (int i = 0; i < k; ++i) std::fprintf(stderr, " %d", drafts[i]);
  std::fprintf(stderr, "\n");
}

// ---- verification -------------------------------------------------------------------------

int VerifyDrafts(Sampler& sampler, float* const* rows, const int32_t* drafts, int k,
                 const int32_t* history, int n_history, const DraftDist* q, int32_t* next) {
  for (int i = 0; i < k; ++i) {
    sampler.Prepare(rows[i], history, n_history + i);
    const int32_t d = drafts[i];
    const bool one_hot = q == nullptr || q[i].probs.empty();
    const double p = sampler.Prob(d);
    const double qd = one_hot ? 1.0 : q[i].Prob(d);
    bool accept;
    if (sampler.greedy()) {
      accept = p > 0;  // the argmax
    } else {
      accept = qd > 0 && sampler.Uniform() < std::min(1.0, p / qd);
    }
    if (accept) continue;
    int32_t r;
    if (sampler.greedy()) {
      r = sampler.Draw();
    } else if (one_hot) {
      r = sampler.DrawResidual([d](int32_t id) { return id == d ? 1.0 : 0.0; });
    } else {
      r = sampler.DrawResidual([&](int32_t id) { return q[i].Prob(id); });
    }
    *next = r >= 0 ? r : sampler.Draw();  // (an empty residual only arises from rounding)
    return i;
  }
  sampler.Prepare(rows[k], history, n_history + k);
  *next = sampler.Draw();
  return k;
}

// ---- controller ---------------------------------------------------------------------------

SpecController::SpecController(std::vector<double> cost, int k_max, double draft_cost, bool fixed,
                               bool probe, double prior, bool rollback)
    : cost_(std::move(cost)),
      k_max_(std::min<int>(k_max, static_cast<int>(cost_.size()) - 1)),
      draft_cost_(draft_cost),
      fixed_(fixed),
      probe_(probe),
      rollback_(rollback),
      alpha_(prior) {}

int SpecController::Choose() {
  if (fixed_) return k_max_;
  int best_k = 0;
  double best = 1.0;  // plain decoding: one token per unit of time
  const double a = std::min(alpha_, 0.999);
  double ak = a;    // a^(k+1)
  double redo = 0;  // rollback: the expected recomputation, sum over a' < k of P(a') cost[a']
  for (int k = 1; k <= k_max_; ++k) {
    ak *= a;
    const double tokens = (1.0 - ak) / (1.0 - a);
    if (rollback_) redo += std::pow(a, k - 1) * (1.0 - a) * cost_[static_cast<size_t>(k - 1)];
    const double rate = tokens / (cost_[static_cast<size_t>(k)] + k * draft_cost_ + redo);
    if (rate > best * 1.02) {  // a margin: measured costs are noisy
      best = rate;
      best_k = k;
    }
  }
  const int every = rollback_ || draft_cost_ > 0 ? 4 * kProbeEvery : kProbeEvery;
  if (best_k == 0 && probe_ && k_max_ > 0 && ++idle_ >= every) {
    idle_ = 0;
    return 1;  // a probe keeps the acceptance estimate current
  }
  return best_k;
}

void SpecController::Observe(int drafted, int accepted) {
  if (drafted <= 0) return;
  // Per-token acceptance: a run of `accepted` successes then (if short) one failure.
  const double obs = static_cast<double>(accepted) / static_cast<double>(drafted);
  alpha_ = 0.8 * alpha_ + 0.2 * obs;
}

}  // namespace paddock
