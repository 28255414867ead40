// engine/service_choices.cpp: n > 1. When a request samples its first token, each further
// choice is forked from it (ForkFrom): a request of its own sharing the prompt's KV blocks
// (copy-on-write), with seed + i and a copy of the grammar's state; it samples its first token
// from the same logits row and runs after Commit.
#include "engine/service_impl.h"
#include "engine/stop_rule.h"

namespace paddock {

// Choice i + 1 of `parent` (its stream parent.choice_streams[i]) at the parent's first sample:
// the parent's sequence (prompt, limits, priority, arrival, admission) and options, with a stream
// of its own, seed + i + 1, no prompt log-probabilities, the parent's times and deadline and a
// copy of its grammar's state. Not running yet: no KV sequence (it forks parent.seq), no drafts.
std::unique_ptr<Request> Service::Impl::ForkFrom(const Request& parent, size_t i) {
  auto c = std::make_unique<Request>();
  static_cast<Sequence&>(*c) = static_cast<const Sequence&>(parent);
  c->tokens.reserve(static_cast<size_t>(c->limit) + 1);
  c->seq = -1;
  c->draft.clear();
  c->accepted = 0;
  c->opt = parent.opt;
  c->opt.n = 1;
  c->opt.prompt_logprobs = false;
  c->opt.generate.sampling.seed += i + 1;
  c->stream = parent.choice_streams[i];
  c->id = c->stream->id();
  c->state = c->stream->state_.get();
  c->t_submit = parent.t_submit;
  c->t_admit = parent.t_admit;
  c->deadline = parent.deadline;
  if (parent.constraint) c->constraint = std::make_unique<Constraint>(*parent.constraint);
  c->fork_from = parent.seq;
  // Its own copy of the prompt's image rows (a preempted fork recomputes its prompt after the
  // parent may be gone): the rows point into embeddings the copy keeps alive.
  c->image_rows = parent.image_rows;
  c->attend_end = c->image_rows.attend_end.empty() ? nullptr : c->image_rows.attend_end.data();
  return c;
}

// The further choices of `parent`, at the moment it samples its first token from `row`: each
// forked, then samples its own first token from the same row (before the parent's grammar
// advances: the per-token rule advances it in Postprocess).
void Service::Impl::SpawnChoices(Request& parent, const float* row) {
  parent.choices_pending = false;
  parent.forks = 0;  // (their state slots stay set aside until they fork: KvManager::Fork)
  const size_t V = static_cast<size_t>(e->model->config.n_vocab);
  std::vector<float> lg(V);
  for (size_t i = 0; i < parent.choice_streams.size(); ++i) {
    std::unique_ptr<Request> c = ForkFrom(parent, i);
    c->sampler = std::make_unique<Sampler>(static_cast<int>(V));
    c->sampler->Reset(c->opt.generate.sampling);
    c->text.Reset(&c->opt.generate.stop, c->tokens.back(),
                  static_cast<size_t>(c->limit - c->n_prompt) * 8 + 64);
    c->row.assign(row, row + V);
    lg.assign(row, row + V);
    const uint64_t* mask = nullptr;
    if (c->constraint) {
      mask = c->constraint->Mask(nullptr, std::min(c->max_tokens - c->generated,
                                                   c->limit - static_cast<int>(c->tokens.size())));
    }
    const int32_t t =
        c->sampler->Sample(lg.data(), c->tokens.data(), static_cast<int>(c->tokens.size()), mask);
    if (c->opt.generate.logprobs >= 0) Logprob(*c, t, c->tokens.back());
    c->last_sampled = t;
    new_choices.push_back(std::move(c));
  }
  stats.forked_choices += parent.choice_streams.size();
}

// After Commit: each new choice forks the parent's KV sequence (the prompt now committed), takes
// its first token through the stop rule, and runs.
void Service::Impl::StartChoices() {
  if (new_choices.empty()) return;
  for (auto& c : new_choices) {
    // (The parent sampled in this step: it is still running, its prompt just committed.)
    const double now = NowSeconds();
    c->t_first = c->t_last = now;
    if (c->Cancelled()) {
      Finish(*c, FinishReason::kCancelled);
      continue;
    }
    c->seq = e->kv->Fork(c->fork_from);
    c->computed = c->n_prompt;
    const std::optional<FinishReason> why = Apply(*c, c->last_sampled);
    if (why) {
      e->kv->Free(c->seq);
      c->seq = -1;
      Finish(*c, *why);
      continue;
    }
    scheduler->AddRunning(std::move(c));
  }
  new_choices.clear();
}

}  // namespace paddock
