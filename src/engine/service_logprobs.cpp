// engine/service_logprobs.cpp: log-probabilities of each sampled token (from the logits row as
// the model gave it) and of a prompt's tokens (echo), computed on a scratch KV sequence while
// the request waits.
#include <algorithm>
#include <cmath>

#include "base/strings.h"
#include "engine/service_impl.h"

namespace paddock {

namespace {

// A log-probability entry's text: what the token decodes to, or, for a control token that
// renders as nothing (end of turn, EOS), its spelling, so that entries stay tellable apart.
std::string LogprobText(const Tokenizer& tok, int prev, int32_t token) {
  const std::string_view d = tok.Decode(prev, token);
  if (d.empty() && tok.Attr(token) == TokenAttr::kControl) return std::string(tok.Piece(token));
  return std::string(d);
}

}  // namespace

void Service::Impl::Logprob(Request& r, int32_t token, int prev) {
  const Tokenizer& tok = *e->model->tokenizer;
  LogprobOf(r.row.data(), e->model->config.n_vocab, token, r.opt.generate.logprobs, &r.last_lp);
  r.last_lp.text = LogprobText(tok, prev, token);
  for (auto& a : r.last_lp.top) a.text = LogprobText(tok, prev, a.token);
}

// The prompt's log-probabilities, on a scratch KV sequence (one batch item per token: each
// position gets its logits), in chunks of the engine's items per step. Without room in the KV
// pool the request goes on without them (its result then has none).
void Service::Impl::PromptLogprobs(Request& r) {
  r.prompt_logprobs_done = true;
  const int n = r.n_prompt;
  if (n < 2) return;
  KvManager& kv = *e->kv;
  const KvManager::SeqId seq = kv.Create(n);
  if (!kv.Reserve(seq, n - 1)) {
    kv.Free(seq);
    return;
  }
  const Tokenizer& tok = *e->model->tokenizer;
  const int chunk = e->backend->max_items();
  const int k = std::max(0, r.opt.generate.logprobs);
  std::vector<StepItem> items;
  std::vector<const float*> rows(static_cast<size_t>(chunk));
  r.prompt_logprobs.resize(static_cast<size_t>(n - 1));
  for (int start = 0; start < n - 1; start += chunk) {
    const int m = std::min(chunk, n - 1 - start);
    const KvView view = kv.View(seq);
    items.clear();
    for (int i = 0; i < m; ++i) {
      items.push_back({&r.tokens[static_cast<size_t>(start + i)], 1, start + i, &view});
      items.back().lora = r.lora;
    }
    e->StepBatch(items.data(), m, rows.data());
    kv.Commit(seq, r.tokens.data() + start, m);
    for (int i = 0; i < m; ++i) {
      const int pos = start + i + 1;  // the token scored
      TokenLogprob& lp = r.prompt_logprobs[static_cast<size_t>(pos - 1)];
      LogprobOf(rows[static_cast<size_t>(i)], e->model->config.n_vocab,
                r.tokens[static_cast<size_t>(pos)], k, &lp);
      const int prev = r.tokens[static_cast<size_t>(pos - 1)];
      lp.text = LogprobText(tok, prev, lp.token);
      for (auto& a : lp.top) a.text = LogprobText(tok, prev, a.token);
    }
  }
  kv.Free(seq);
  // Streamed too, ahead of any generated token (a streaming echo sends them first).
  for (const TokenLogprob& lp : r.prompt_logprobs) r.state->Append("", &lp);
}

// The further choices of `parent`, at the moment it samples its first token from `row`: each a
// request of its own (its stream, seed + i, the grammar's state copied) that samples its first

}  // namespace paddock
