#include "engine/scheduler.h"

#include <algorithm>

#include "base/strings.h"
#include "engine/stop_rule.h"
#include "model/lora.h"

namespace paddock {

bool RunsBefore(const Sequence& a, const Sequence& b) {
  if (a.priority != b.priority) return a.priority > b.priority;
  return a.arrival < b.arrival;
}

Scheduler::Scheduler(KvManager& kv, const SchedulerOptions& options) : kv_(kv), opt_(options) {
  running_.reserve(static_cast<size_t>(opt_.max_running));
  batch_.seqs.reserve(static_cast<size_t>(opt_.max_running));
  batch_.n.reserve(static_cast<size_t>(opt_.max_running));
}

namespace {
auto ByPriority() {
  return [](const auto& a, const auto& b) { return RunsBefore(*a, *b); };
}
}  // namespace

void Scheduler::Wait(std::unique_ptr<Sequence> s) {
  auto it = std::upper_bound(waiting_.begin(), waiting_.end(), s, ByPriority());
  waiting_.insert(it, std::move(s));
}

void Scheduler::Add(std::unique_ptr<Sequence> s) {
  Wait(std::move(s));
}

void Scheduler::AddRunning(std::unique_ptr<Sequence> s) {
  if (static_cast<int>(running_.size()) < opt_.max_running) {
    running_.push_back(std::move(s));
    return;
  }
  Release(*s);
  s->computed = 0;
  Wait(std::move(s));
}

std::unique_ptr<Sequence> Scheduler::Take(std::vector<std::unique_ptr<Sequence>>& list,
                                          const Sequence* s) {
  auto it = std::find_if(list.begin(), list.end(), [&](const auto& p) { return p.get() == s; });
  std::unique_ptr<Sequence> owned = std::move(*it);
  list.erase(it);
  return owned;
}

void Scheduler::Release(Sequence& s) {
  if (s.seq < 0) return;
  kv_.Free(s.seq);
  s.seq = -1;
}

Sequence* Scheduler::PickVictim() const {
  Sequence* v = nullptr;
  for (const auto& r : running_) {
    if (v == nullptr || RunsBefore(*v, *r)) v = r.get();  // lowest priority, latest arrival
  }
  return v;
}

int Scheduler::Preempt(Sequence* victim) {
  // Recompute later: drop its blocks (full ones stay in the prefix cache, so recomputing may
  // be cheap), keep its tokens and place in line. If it was already scheduled in this step, it
  // leaves the step and gives its budget back.
  int returned = 0;
  for (size_t k = 0; k < batch_.seqs.size(); ++k) {
    if (batch_.seqs[k] == victim) {
      returned = batch_.n[k];
      batch_.seqs.erase(batch_.seqs.begin() + static_cast<std::ptrdiff_t>(k));
      batch_.n.erase(batch_.n.begin() + static_cast<std::ptrdiff_t>(k));
      break;
    }
  }
  Release(*victim);
  victim->computed = 0;
  victim->draft.clear();
  preemptions_++;
  Wait(Take(running_, victim));
  return returned;
}

int Scheduler::PromptCut(const Sequence& s, int n) const {
  n = kv_.SnapshotCut(s.computed, n);
  const int a = opt_.align_prompt, end = s.computed + n;
  if (a > 0 && end < s.n_prompt && end % a != 0) n = std::max(end / a * a - s.computed, 0);
  return n;
}

// Gives `s` a KV sequence (reusing cached prefix blocks) and room for its first chunk.
bool Scheduler::Admit(Sequence& s, int* budget_left) {
  const int total = static_cast<int>(s.tokens.size());
  // A hybrid model's recurrent states: its own and its forks' slots now, or it waits.
  if (kv_.stateful() && kv_.FreeStates() < 1 + s.forks) return false;
  s.seq = kv_.Create(s.limit + 1);
  kv_.ReserveForks(s.seq, s.forks);
  if (opt_.prefill_until) kv_.SetPrefillUntil(s.seq, opt_.prefill_until(s.n_prompt));
  kv_.SetPromptLength(s.seq, s.n_prompt);
  if (s.lora != nullptr) kv_.SetPrefixNamespace(s.seq, s.lora->id());
  const int cached = kv_.MatchPrefix(s.seq, s.tokens.data(), total);
  s.computed = cached;
  const int n =
      kv_.SnapshotCut(cached, s.WholeSpans(std::min(total - cached, *budget_left), *budget_left));
  if (!kv_.Reserve(s.seq, cached + n)) {
    Release(s);
    return false;
  }
  s.computed = cached;
  return true;
}

// Running sequences: decodes first (pass 0), then prompt chunks (pass 1), each in priority
// order. A sequence that cannot get blocks preempts the lowest-priority one (maybe itself).
void Scheduler::ScheduleRunning(int* left, std::vector<Finished>* finished) {
  std::sort(running_.begin(), running_.end(), ByPriority());
  for (int pass = 0; pass < 2 && *left > 0; ++pass) {
    for (size_t i = 0; i < running_.size() && *left > 0; ++i) {
      Sequence* s = running_[i].get();
      const int need = s->to_compute();
      if ((pass == 0) != (need == 1)) continue;
      // A decode with drafts computes them too, as far as the budget goes.
      int n = std::min(s->draft.empty() ? need : static_cast<int>(s->draft.size()), *left);
      if (s->draft.empty() && need > 1) n = PromptCut(*s, s->WholeSpans(n, *left));
      if (n == 0) continue;
      if (!s->draft.empty()) s->draft.resize(n > 1 ? static_cast<size_t>(n) : 0);
      bool ok = kv_.Reserve(s->seq, s->computed + n);
      while (!ok) {
        Sequence* victim = PickVictim();
        if (victim == s && running_.size() == 1) break;  // alone and still out of blocks
        const bool self = victim == s;
        // Indices shift when the victim sits before i.
        const auto vpos = std::find_if(running_.begin(), running_.end(),
                                       [&](const auto& p) { return p.get() == victim; }) -
                          running_.begin();
        *left += Preempt(victim);
        if (static_cast<size_t>(vpos) <= i) --i;
        if (self) break;
        ok = kv_.Reserve(s->seq, s->computed + n);
      }
      if (!ok) {
        if (running_.size() == 1 && running_[0].get() == s) {
          // Nothing left to preempt: the pool cannot hold this sequence's tokens.
          Release(*s);
          finished->push_back({std::move(running_[0]), FinishReason::kContext});
          running_.clear();
          break;
        }
        continue;  // s itself was preempted
      }
      batch_.seqs.push_back(s);
      batch_.n.push_back(n);
      *left -= n;
    }
  }
}

// Continuous batching admits into any leftover budget while KV usage is under the watermark;
// static batching only forms a new batch once the last one has finished.
void Scheduler::AdmitWaiting(int* left, const std::function<void(Sequence&)>& on_admit) {
  const bool may_admit = !opt_.static_batching || running_.empty();
  while (may_admit && *left > 0 && !waiting_.empty() &&
         static_cast<int>(running_.size()) < opt_.max_running) {
    Sequence& s = *waiting_.front();
    const KvMemoryStats m = kv_.Memory();
    const double usage =
        m.total_blocks > 0 ? static_cast<double>(m.used_blocks) / m.total_blocks : 0;
    const bool ok = (running_.empty() || usage < opt_.kv_watermark) && Admit(s, left);
    if (!ok) {
      // Priority: a waiting sequence may displace a strictly lower-priority running one.
      Sequence* victim = PickVictim();
      if (victim == nullptr || victim->priority >= s.priority) break;
      *left += Preempt(victim);
      continue;
    }
    if (!s.admitted_once()) {
      s.admission = ++admissions_;
      s.cached_tokens = s.computed;
      if (on_admit) on_admit(s);
    }
    const int n = PromptCut(s, s.WholeSpans(std::min(s.to_compute(), *left), *left));
    if (n > 0) {
      batch_.seqs.push_back(&s);
      batch_.n.push_back(n);
      *left -= n;
    }
    running_.push_back(std::move(waiting_.front()));
    waiting_.erase(waiting_.begin());
  }
}

const Scheduler::Batch& Scheduler::Schedule(std::vector<Finished>* finished,
                                            const std::function<void(Sequence&)>& on_admit) {
  batch_.seqs.clear();
  batch_.n.clear();
  int left = opt_.token_budget;
  ScheduleRunning(&left, finished);
  AdmitWaiting(&left, on_admit);
  return batch_;
}

void Scheduler::Commit() {
  for (size_t k = 0; k < batch_.seqs.size(); ++k) {
    Sequence& s = *batch_.seqs[k];
    if (s.draft.empty()) {
      kv_.Commit(s.seq, s.tokens.data() + s.computed, batch_.n[k]);
      s.computed += batch_.n[k];
      continue;
    }
    // Speculative: t and the accepted drafts only (no rejected token is ever committed, so
    // none reaches the prefix cache); the blocks reserved for the rest go back. The accepted
    // drafts join s.tokens in Postprocess, through the per-token rule.
    const int n = 1 + s.accepted;
    kv_.Commit(s.seq, s.draft.data(), n);
    s.computed += n;
    kv_.Truncate(s.seq, s.computed);
  }
}

void Scheduler::Postprocess(const int32_t* next, const ApplyFn& apply,
                            std::vector<Finished>* finished) {
  for (size_t k = 0; k < batch_.seqs.size(); ++k) {
    Sequence& s = *batch_.seqs[k];
    std::optional<FinishReason> why;
    // The accepted drafts (committed, not yet in s.tokens) first, in order.
    for (int i = 1; i <= s.accepted && !why; ++i) why = apply(s, s.draft[static_cast<size_t>(i)]);
    s.accepted = 0;
    s.draft.clear();
    if (why) {
      // finished on an accepted draft
    } else if (s.max_tokens == 0 && s.to_compute() == 0) {
      why = FinishReason::kLength;  // prompt only (e.g. to warm the prefix cache)
    } else if (next[k] < 0) {
      continue;  // prompt chunk in progress
    } else {
      why = apply(s, next[k]);
    }
    if (!why) continue;
    Release(s);
    finished->push_back({Take(running_, &s), *why});
  }
}

void Scheduler::RemoveIf(const std::function<bool(const Sequence&)>& pred,
                         const std::function<FinishReason(const Sequence&)>& why,
                         std::vector<Finished>* finished) {
  for (auto* list : {&running_, &waiting_}) {
    for (size_t i = 0; i < list->size();) {
      Sequence& s = *(*list)[i];
      if (!pred(s)) {
        ++i;
        continue;
      }
      Release(s);
      const FinishReason w = why(s);
      finished->push_back({std::move((*list)[i]), w});
      list->erase(list->begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
}

void Scheduler::Clear(std::vector<Finished>* finished, bool running_only) {
  // Running sequences hold a KV sequence; waiting ones do not.
  RemoveIf([running_only](const Sequence& s) { return !running_only || s.seq >= 0; },
           [](const Sequence&) { return FinishReason::kCancelled; }, finished);
}

}  // namespace paddock
