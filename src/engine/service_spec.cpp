// engine/service_spec.cpp: the service's speculative decoding: drafts for the decoding requests,
// and a hybrid model's recurrent state put back after a rejected draft.
#include <algorithm>

#include "engine/service_impl.h"
#include "engine/speculative.h"

namespace paddock {

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
        r.opt.generate.logprobs >= 0 || r.opt.generate.sampling.mirostat != 0)
      continue;
    int k = std::min({r.spec.Choose(), r.max_tokens - r.generated - 1,
                      r.limit - static_cast<int>(r.tokens.size()) - 1, kSpecMaxDraft});
    if (k <= 0) continue;
    if (e->draft != nullptr) {
      if (r.draft_slot < 0 && !e->draft->Acquire(&r.draft_slot)) continue;
      e->draft->Select(r.draft_slot);
    } else if (e->mtp != nullptr) {
      if (r.draft_slot < 0) continue;  // (no slot at admission: the block did not follow it)
      e->mtp->Select(r.draft_slot);
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
    if (LogDraftsOn()) LogDrafts(r.tokens.size(), r.draft.data() + 1, k);
  }
}

// (service_impl.h: the prediction block after the step.)
void Service::Impl::FeedMtp(const Scheduler::Batch& batch) {
  if (e->mtp == nullptr) return;
  for (size_t k = 0; k < batch.seqs.size(); ++k) {
    const Request& r = AsRequest(*batch.seqs[k]);
    const StepItem& it = items[k];
    if (it.hidden == nullptr) continue;
    e->mtp->Select(r.draft_slot);
    e->mtp->Feed(it.tokens, r.draft.empty() ? it.n : 1 + r.accepted, it.pos, it.hidden);
  }
}

// (service_impl.h: a hybrid model after verification.)
void Service::Impl::RecomputeAccepted(const Scheduler::Batch& batch) {
  if (!e->kv->hybrid()) return;
  items.clear();
  for (size_t k = 0; k < batch.seqs.size(); ++k) {
    Request& r = AsRequest(*batch.seqs[k]);
    if (r.draft.empty() || r.accepted == batch.n[k] - 1) continue;  // none, or all kept
    e->kv->LoadState(r.seq, r.state_backup.data());
    if (e->backend->ReplayState(static_cast<int>(k), 1 + r.accepted)) continue;
    items.push_back({r.draft.data(), 1 + r.accepted, r.computed, &views[k], 1, r.n_prompt});
    items.back().lora = r.lora;
  }
  // (The rows: the verification sampled already.)
  if (!items.empty()) e->StepBatch(items.data(), static_cast<int>(items.size()), logits.data());
}

}  // namespace paddock
