// engine/generation.cpp: Engine::GenerateTokens, one sequence's generation.
//
// The loop is: prefill in chunks, then per token sample -> decode bytes -> UTF-8 assembly ->
// stop-string check -> callback -> forward (speculating: a token and the drafts the target
// accepts). Buffers used per token (the history, the output text, sampler scratch) are reserved
// before the loop, so the steady-state loop performs no heap allocation (a test counts them).
#include <algorithm>
#include <optional>

#include "base/strings.h"
#include "base/timer.h"
#include "base/utf8.h"
#include "engine/engine_impl.h"
#include "engine/sampler.h"
#include "engine/stop_rule.h"
#include "engine/text_stream.h"
#include "kv/kv_manager.h"
#include "paddock/engine.h"

namespace paddock {

namespace {

// One Engine::GenerateTokens call: prefill, then one token per step (or, speculating, a token
// and the drafts the target accepts), each through the per-token rule. Everything it uses is
// the engine's, reserved at creation: no allocation per token.
class Generation {
 public:
  Generation(Engine::Impl& s, const std::vector<int32_t>& prompt, const GenerateOptions& o,
             const StreamCallback& on_text)
      : s_(s), tok_(*s.model->tokenizer), o_(o), on_text_(on_text), g_(s.gen), out_(s.text) {
    r_.prompt_tokens = static_cast<int>(prompt.size());
    g_.tokens.assign(prompt.begin(), prompt.end());
    g_.n_prompt = static_cast<int>(prompt.size());
    g_.generated = 0;
    g_.max_tokens = o.max_tokens;
    g_.limit = s.context;
    g_.ignore_eos = o.ignore_eos;
    out_.Reset(&o.stop, prompt.back(), static_cast<size_t>(o.max_tokens) * 32 + 256);
    SamplingParams sp = o.sampling;
    ResolveDryBreakers(tok_, &sp);
    s.sampler->Reset(sp);
    if (s.draft != nullptr) s.draft->Reset(sp);
    if (s.mtp != nullptr) {  // slot 0 is this generation's (its last sequence forgotten)
      s.mtp->Select(0);
      s.mtp->Release(0);
    }
    if (o.grammar) constraint_ = std::make_unique<Constraint>(*o.grammar);
  }
  ~Generation() {
    if (seq_ >= 0) s_.kv->Free(seq_);  // its blocks go back to the pool (and prefix cache)
  }

  GenerateResult Run() {
    t0_ = NowSeconds();
    const float* logits = Prefill();
    r_.finish = FinishReason::kLength;
    if (o_.max_tokens > 0) {
      int32_t t = SampleFirst(logits);
      // Each step: `t` (chosen, not yet run) and up to k drafts run in one forward; the drafts
      // the target agrees with are kept and the token after them is chosen (with k = 0, plain
      // decoding: one forward, one token).
      while (!Take(t)) {
        const std::optional<int32_t> next = DecodeStep(t);
        if (!next) break;
        t = *next;
      }
    }
    return Finish();
  }

 private:
  // The prompt's K/V (its cached prefix reused); the logits of its last token.
  const float* Prefill() {
    if (s_.eval_seq >= 0) {
      s_.kv->Free(s_.eval_seq);
      s_.eval_seq = -1;
    }
    seq_ = s_.kv->Create(s_.context);
    pos_ = g_.n_prompt;
    const int32_t* prompt = g_.tokens.data();
    s_.kv->SetPrefillUntil(seq_, s_.backend->AltPromptTokens(pos_));
    s_.kv->SetPromptLength(seq_, pos_);
    r_.cached_tokens = s_.kv->MatchPrefix(seq_, prompt, pos_);
    if (!s_.kv->Reserve(seq_, pos_)) {
      Fail(
          "the prompt of %d tokens does not fit in the KV cache (%d blocks of %d tokens; raise "
          "--kv-memory)",
          pos_, s_.kv->Memory().total_blocks, s_.kv->block_size());
    }
    if (o_.images != nullptr) {
      if (!s_.images) Fail("this engine takes no images");
      if (o_.images->n_prompt != pos_) Fail("the images belong to another prompt");
      rows_ = s_.images->RowsNow(*o_.images, *s_.kernels, *s_.pool);
      const int c = r_.cached_tokens;
      return s_.Step(seq_, prompt + c, pos_ - c, c, pos_, rows_.rows.data() + c,
                     rows_.attend_end.empty() ? nullptr : rows_.attend_end.data() + c);
    }
    return s_.Step(seq_, prompt + r_.cached_tokens, pos_ - r_.cached_tokens, r_.cached_tokens, pos_,
                   nullptr, nullptr, /*feed=*/true);
  }

  // The grammar's mask for the next token (null without one).
  const uint64_t* Mask() {
    if (!constraint_) return nullptr;
    return constraint_->Mask(nullptr, std::min(o_.max_tokens - g_.generated,
                                               s_.context - static_cast<int>(g_.tokens.size())));
  }

  int32_t SampleFirst(const float* logits) {
    s_.sampler->Prepare(const_cast<float*>(logits), g_.tokens.data(),
                        static_cast<int>(g_.tokens.size()), Mask());
    const int32_t t = s_.sampler->Draw();
    t_first_ = NowSeconds();
    return t;
  }

  // How many drafts to run with the next token (0: plain decoding), drafted into
  // s_.drafts[1..k].
  int Drafts() {
    if (s_.proposer == nullptr || constraint_ || o_.sampling.mirostat != 0) return 0;
    int k = std::min({s_.spec_ctl.Choose(), o_.max_tokens - g_.generated - 1, s_.context - pos_ - 1,
                      static_cast<int>(s_.drafts.size()) - 1});
    if (k <= 0) return 0;
    k = s_.proposer->Propose(g_.tokens.data(), static_cast<int>(g_.tokens.size()), k,
                             s_.drafts.data() + 1, s_.draft_q.data());
    if (k > 0 && !s_.kv->Reserve(seq_, pos_ + 1 + k)) k = 0;  // no room for drafts: none
    if (k > 0 && LogDraftsOn()) LogDrafts(g_.tokens.size(), s_.drafts.data() + 1, k);
    return k;
  }

  // Runs t (and drafts); returns the token after them, or nothing when generation ended (the
  // KV cache full, or an accepted draft ended it).
  std::optional<int32_t> DecodeStep(int32_t t) {
    const int k = Drafts();
    if (!s_.kv->Reserve(seq_, pos_ + 1)) {
      r_.finish = FinishReason::kContext;  // KV memory exhausted
      return std::nullopt;
    }
    s_.drafts[0] = t;
    const KvView view = s_.kv->View(seq_);
    StepItem item{s_.drafts.data(), 1 + k, pos_, &view, 1 + k};
    if (s_.mtp != nullptr) item.hidden = s_.hidden.data();
    const float* rows0;
    const bool keep = k > 0 && s_.kv->hybrid();  // (a recurrent state is put back, not cut)
    item.keep_state_inputs = keep;
    if (keep) {
      backup_.resize(s_.kv->state_bytes());
      s_.kv->SaveState(seq_, backup_.data());
    }
    s_.StepBatch(&item, 1, &rows0);
    float* base = const_cast<float*>(rows0);
    if (k == 0) {
      s_.sampler->Prepare(base, g_.tokens.data(), static_cast<int>(g_.tokens.size()), Mask());
      if (s_.mtp != nullptr) s_.mtp->Feed(&t, 1, pos_, s_.hidden.data());
      s_.kv->Commit(seq_, &t, 1);
      ++pos_;
      return s_.sampler->Draw();
    }
    int32_t next = 0;
    const int a = Verify(base, k, &next);
    if (s_.mtp != nullptr) s_.mtp->Feed(s_.drafts.data(), 1 + a, pos_, s_.hidden.data());
    if (keep && a < k) {  // the state as before, then t and the accepted drafts alone
      s_.kv->LoadState(seq_, backup_.data());
      if (!s_.backend->ReplayState(0, 1 + a)) {  // (a backend without replay: run them again)
        StepItem again{s_.drafts.data(), 1 + a, pos_, &view, 1};
        s_.StepBatch(&again, 1, &rows0);
      }
    }
    // Only t and the accepted drafts enter the cache (no rejected token is ever committed, so
    // none reaches the prefix cache); blocks reserved for the rest go back.
    s_.kv->Commit(seq_, s_.drafts.data(), 1 + a);
    pos_ += 1 + a;
    s_.kv->Truncate(seq_, pos_);
    for (int i = 1; i <= a; ++i)
      if (Take(s_.drafts[static_cast<size_t>(i)])) return std::nullopt;
    return next;
  }

  // The k drafts against the target's rows (VerifyDrafts): how many are accepted; *next.
  int Verify(float* base, int k, int32_t* next) {
    const size_t V = static_cast<size_t>(s_.model->config.n_vocab);
    for (int i = 0; i <= k; ++i)
      s_.rows[static_cast<size_t>(i)] = base + static_cast<size_t>(i) * V;
    // Penalties see the drafts as history: append them while verifying.
    const size_t n_hist = g_.tokens.size();
    g_.tokens.insert(g_.tokens.end(), s_.drafts.begin() + 1, s_.drafts.begin() + 1 + k);
    const int a = VerifyDrafts(*s_.sampler, s_.rows.data(), s_.drafts.data() + 1, k,
                               g_.tokens.data(), static_cast<int>(n_hist), s_.draft_q.data(), next);
    g_.tokens.resize(n_hist);
    r_.draft_tokens += k;
    r_.accepted_tokens += a;
    s_.spec_ctl.Observe(k, a);
    return a;
  }

  // The per-token rule (engine/stop_rule.h), as the service applies it. True when generation
  // ends.
  bool Take(int32_t t) {
    const std::optional<FinishReason> why =
        ApplyToken(g_, t, IsEndToken(tok_, t), constraint_ ? &constraint_->matcher : nullptr,
                   [this](int32_t x) {
                     const bool stop_string = out_.Push(tok_, x);
                     Emit();
                     return stop_string;
                   });
    r_.generated_tokens = g_.generated;
    if (why) {
      r_.finish = *why;
      return true;
    }
    if (cancelled_) {
      r_.finish = FinishReason::kCancelled;
      return true;
    }
    return false;
  }

  void Emit() {
    const std::string_view piece = out_.TakeReady();
    if (!piece.empty() && on_text_ && !cancelled_ && !on_text_(piece)) cancelled_ = true;
  }

  GenerateResult Finish() {
    if (r_.finish != FinishReason::kStop && r_.finish != FinishReason::kCancelled) {
      out_.Finish();
      Emit();
    }
    r_.text = out_.text();
    if (r_.finish == FinishReason::kStop && out_.matched_stop() != nullptr)
      r_.stop = *out_.matched_stop();
    const double t_end = NowSeconds();
    r_.prompt_seconds = (t_first_ > 0 ? t_first_ : t_end) - t0_;
    r_.decode_seconds = t_first_ > 0 ? t_end - t_first_ : 0;
    return std::move(r_);
  }

  Engine::Impl& s_;
  const Tokenizer& tok_;
  const GenerateOptions& o_;
  const StreamCallback& on_text_;
  Sequence& g_;  // tokens: prompt + generated
  TextAssembler& out_;
  std::unique_ptr<Constraint> constraint_;
  GenerateResult r_;
  ImageRows rows_;  // the prompt's images, encoded (kept for the prefill)
  KvManager::SeqId seq_ = -1;
  int pos_ = 0;                  // tokens whose K/V are in the cache
  std::vector<uint8_t> backup_;  // a hybrid model's recurrent state before a verification
  bool cancelled_ = false;
  double t0_ = 0, t_first_ = 0;
};

}  // namespace

void RequireGenerator(const Engine::Impl& e) {
  if (e.info.kind == ModelKind::kGeneration) return;
  const std::string& who = e.info.name.empty() ? e.info.path : e.info.name;
  if (e.info.kind == ModelKind::kRerank)
    Fail(
        "'%s' is a reranker (%s): it scores documents against a query (/v1/rerank), it does "
        "not generate text",
        who.c_str(), e.info.arch.c_str());
  Fail(
      "'%s' is an embedding model (%s): it gives embeddings (/v1/embeddings), it does not "
      "generate text",
      who.c_str(), e.info.arch.c_str());
}

GenerateResult Engine::GenerateTokens(const std::vector<int32_t>& prompt, const GenerateOptions& o,
                                      const StreamCallback& on_text) {
  RequireGenerator(*impl_);
  ValidatePrompt(prompt, impl_->context, impl_->model->config.n_vocab, o);
  return Generation(*impl_, prompt, o, on_text).Run();
}

}  // namespace paddock
