// engine/engine.cpp: the public API over model, kernels and KV cache: one sequence at a time.
//
// The generation loop is: tokenize, prefill in chunks, then per token sample -> decode bytes
// -> UTF-8 assembly -> stop-string check -> callback -> forward. Buffers used per token (the
// history, the output text, sampler scratch) are reserved before the loop, so the steady-state
// loop performs no heap allocation (a test counts them).
#include "paddock/engine.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/cpu.h"
#include "base/strings.h"
#include "base/thread_pool.h"
#include "base/timer.h"
#include "base/utf8.h"
#include "engine/engine_impl.h"
#include "engine/sampler.h"
#include "engine/stop_rule.h"
#include "engine/text_stream.h"
#include "kernels/kernels.h"
#include "kv/kv_manager.h"
#include "model/transformer.h"
#include "model/weights.h"

namespace paddock {

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kContext:
      return "context";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kTimeout:
      return "timeout";
  }
  return "?";
}

namespace {

constexpr int kDefaultMaxContext = 4096;

ModelInfo MakeInfo(const LoadedModel& m) {
  const ModelConfig& c = m.config;
  ModelInfo i;
  i.path = m.path;
  i.format = m.format;
  i.arch = c.arch;
  i.name = c.name;
  i.n_params = m.n_params;
  i.weight_bytes = m.weight_bytes;
  i.n_active_params = m.n_active_params;
  i.active_weight_bytes = m.active_weight_bytes;
  i.n_experts = c.n_experts;
  i.n_experts_used = c.n_experts_used;
  i.expert_ffn_dim = c.expert_ffn_dim;
  i.shared_ffn_dim = c.shared_ffn_dim;
  i.n_vocab = c.n_vocab;
  i.dim = c.dim;
  i.n_layers = c.n_layers;
  i.n_heads = c.n_heads;
  i.n_kv_heads = c.n_kv_heads;
  i.head_dim = c.head_dim;
  i.ffn_dim = c.ffn_dim;
  i.trained_context = c.context_length;
  i.rope_base = c.rope_base;
  i.rope_style = c.rope_style == RopeStyle::kHalfSplit ? "half-split (NeoX)" : "adjacent pairs";
  i.rope_scaling = c.rope_scaling;
  i.sliding_window = c.sliding_window;
  i.pooling = c.pooling_type == 1   ? "mean"
              : c.pooling_type == 2 ? "cls"
              : c.pooling_type == 3 ? "last"
                                    : "";
  i.qkv_bias = c.qkv_bias;
  i.qk_norm = c.qk_norm;
  i.tied_embeddings = c.tied_embeddings;
  i.chat_template = m.chat_template;
  if (m.tokenizer) {
    const Tokenizer& t = *m.tokenizer;
    if (t.bos() >= 0 && t.bos() < t.vocab_size()) i.bos_token = std::string(t.Piece(t.bos()));
    if (t.eos() >= 0 && t.eos() < t.vocab_size()) i.eos_token = std::string(t.Piece(t.eos()));
  }
  for (const auto& t : m.type_counts) i.tensor_types.push_back({t.type, t.count, t.bytes});
  i.kv_bytes_per_1k_tokens = KvBytesPerToken(c, KvCacheOptions()) * 1000u;
  return i;
}

}  // namespace

namespace {

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
  } else {
    impl->proposer = std::make_unique<NgramProposer>();
  }
  const int k_max = std::min(o.spec_max, impl->transformer->max_items() - 1);
  impl->drafts.resize(static_cast<size_t>(k_max) + 1);
  impl->draft_q.resize(static_cast<size_t>(k_max) + 1);
  impl->rows.resize(static_cast<size_t>(k_max) + 1);
  double target_step = 0;
  std::vector<double> cost = impl->MeasureVerifyCost(k_max, 3, &target_step);
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
  const bool draft = impl->draft != nullptr;
  impl->spec_ctl = SpecController(std::move(cost), k_max, draft_cost, o.spec_fixed,
                                  /*probe=*/!draft, /*prior=*/draft ? 0.9 : 0.6);
}

}  // namespace

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
      Transformer::BatchItem item{toks.data() + base, 1 + k, base, &view, 1 + k};
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

std::unique_ptr<Engine> Engine::Create(const EngineOptions& o) {
  const double t0 = NowSeconds();
  if (o.model_path.empty()) Fail("no model given");
  // The trace file is opened first: an unwritable path fails before any work.
  std::unique_ptr<Tracer> tracer;
  if (!o.trace_path.empty()) {
    tracer = std::make_unique<Tracer>(o.trace_path);
    tracer->NameThread("main");
  }
  if (o.threads < 0 || o.threads > 1024) Fail("thread count %d is out of range", o.threads);
  if (o.context < 0) Fail("context %d must not be negative", o.context);
  if (o.max_batch < 1 || o.max_batch > 4096)
    Fail("max batch %d is out of range [1, 4096]", o.max_batch);
  const Isa isa = ParseIsa(o.isa);
  auto impl = std::make_unique<Impl>();
  impl->model = LoadModel(o.model_path, o.tokenizer_path);  // (a memory map: nothing read yet)
  // Weights larger than the available memory still run from the memory map, but every token
  // then reads pages back from disk: say so before any work (or refuse, with --mlock).
  std::vector<std::string> warnings;
  const uint64_t avail = AvailableMemoryBytes();
  if (avail > 0 && impl->model->weight_bytes > avail) {
    if (o.mlock) {
      Fail("--mlock: the model's %s of weights exceed the available memory (%s)",
           FormatBytes(impl->model->weight_bytes).c_str(), FormatBytes(avail).c_str());
    }
    // A mixture of experts reads only its active experts per token: say how much.
    const LoadedModel& m = *impl->model;
    const std::string per_token =
        m.active_weight_bytes < m.weight_bytes
            ? StrFormat(" (each token reads %s of them: its experts and the shared weights)",
                        FormatBytes(m.active_weight_bytes).c_str())
            : "";
    warnings.push_back(StrFormat(
        "the model's %s of weights exceed the available memory (%s): the weights stay in their "
        "file layout in the memory map (not re-laid into memory), which reads pages from disk as "
        "tokens need them%s, so each token waits for the disk",
        FormatBytes(m.weight_bytes).c_str(), FormatBytes(avail).c_str(), per_token.c_str()));
  }
  impl->model->tokenizer->RenderSpecial(o.render_special);
  // Re-laying out copies the weights into memory: only when they fit.
  const bool fits = avail == 0 || impl->model->weight_bytes <= avail;
  if (o.relayout_weights && o.int8_activations && fits)
    RelayoutWeights(impl->model.get(), o.huge_pages, o.on_load_progress);
  const ModelConfig& c = impl->model->config;
  const int ctx = o.context > 0 ? o.context : std::min(c.context_length, kDefaultMaxContext);
  if (ctx > c.context_length)
    Fail("context %d exceeds the model's trained context %d", ctx, c.context_length);
  const int threads = o.threads > 0 ? o.threads : PhysicalCores();
  impl->pool = std::make_unique<ThreadPool>(threads);
  impl->prefetch = PrefetchOf(o);
  impl->transformer = std::make_unique<Transformer>(*impl->model, GetKernels(isa, impl->prefetch),
                                                    *impl->pool, o.max_batch, o.int8_activations);
  impl->transformer->SetBf16Dot(o.bf16_dot);
  impl->transformer->SetBf16Prefill(o.bf16_prefill ? kBf16PrefillMinPrompt : 0);
  impl->transformer->SetContext(ctx);
  if (tracer) {
    tracer->Span("load", "engine", t0, NowSeconds(), "");
    impl->transformer->set_tracer(tracer.get());
    impl->tracer = std::move(tracer);
  }
  KvCacheOptions ko;
  ko.memory_bytes = o.kv_memory;
  ko.block_size = o.kv_block_size;
  ko.k_type = ParseKvDtype(o.cache_type_k);
  ko.v_type = ParseKvDtype(o.cache_type_v);
  ko.layer_types = o.kv_layer_types;
  ko.prefix_cache = o.prefix_cache;
  ko.sliding_window = o.sliding_window;
  if (o.kv_tokens < 0) Fail("kv_tokens %d must not be negative", o.kv_tokens);
  impl->transformer->SetFusion(o.fuse_qkv, o.fuse_ffn, o.fuse_attn, o.fuse_norm);
  impl->transformer->SetPruneLast(o.prune_last);
  if (o.matmul_block_bytes > (uint64_t{1} << 30))
    Fail("matmul block of %llu bytes is out of range (at most 1 GiB)",
         static_cast<unsigned long long>(o.matmul_block_bytes));
  impl->transformer->SetMatmulBlockBytes(o.matmul_block_bytes);
  if (o.kv_sequences < 1 || o.kv_sequences > 4096)
    Fail("kv_sequences %d is out of range [1, 4096]", o.kv_sequences);
  int64_t kv_tokens = o.kv_tokens > 0 ? o.kv_tokens : static_cast<int64_t>(ctx) * o.kv_sequences;
  if (o.kv_memory == 0 && o.kv_tokens == 0 && o.kv_sequences > 1) {
    // Many sequences: as many full contexts as asked, within 30% of the available memory
    // (never below one context).
    const uint64_t want = static_cast<uint64_t>(kv_tokens) * KvBytesPerToken(c, ko);
    const uint64_t cap = AvailableMemoryBytes() * 3 / 10;
    if (cap > 0 && want > cap)
      ko.memory_bytes =
          std::max<uint64_t>(cap, static_cast<uint64_t>(ctx) * KvBytesPerToken(c, ko));
  }
  if (kv_tokens > INT32_MAX) kv_tokens = INT32_MAX;
  impl->kv = std::make_unique<KvManager>(c, ko, static_cast<int>(kv_tokens));
  impl->context = ctx;
  impl->sampler = std::make_unique<Sampler>(c.n_vocab);
  impl->grammars = std::make_unique<GrammarCache>(impl->model->tokenizer.get(), 64);
  impl->gen.tokens.reserve(static_cast<size_t>(ctx) + 1);
  impl->info = MakeInfo(*impl->model);
  impl->info.context = ctx;
  impl->info.kv_bytes = impl->kv->Memory().allocated_bytes;
  impl->info.kv_bytes_per_1k_tokens = impl->kv->Memory().bytes_per_token * 1000u;
  impl->info.scratch_bytes = impl->transformer->scratch_bytes();
  impl->info.isa = IsaName(isa);
  impl->info.threads = threads;
  SetUpSpeculation(impl.get(), o);
  if (o.mlock && mlockall(MCL_CURRENT) != 0) {
    Fail("--mlock: cannot lock the weights in memory (%s; raise `ulimit -l` or run as root)",
         std::strerror(errno));
  }
  impl->info.warnings = std::move(warnings);
  impl->load_seconds = NowSeconds() - t0;
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

const ModelInfo& Engine::info() const {
  return impl_->info;
}
double Engine::load_seconds() const {
  return impl_->load_seconds;
}

std::vector<int32_t> Engine::Tokenize(std::string_view text, bool add_bos,
                                      bool parse_special) const {
  return impl_->model->tokenizer->Encode(text, add_bos, parse_special);
}

std::vector<int32_t> Engine::TokenizeChat(
    std::string_view text, bool add_bos,
    const std::vector<std::pair<size_t, size_t>>& text_only) const {
  return impl_->model->tokenizer->Encode(text, add_bos, true, &text_only);
}

std::string Engine::Detokenize(const std::vector<int32_t>& tokens) const {
  const Tokenizer& tok = *impl_->model->tokenizer;
  std::string out;
  Utf8Stream utf8;
  int prev = -1;
  for (int32_t t : tokens) {
    utf8.Feed(tok.Decode(prev, t), &out);
    prev = t;
  }
  utf8.Flush(&out);
  return out;
}

bool Engine::AddsBos() const {
  return impl_->model->tokenizer->add_bos_default();
}

MemoryReport Engine::Memory() const {
  const KvMemoryStats m = impl_->kv->Memory();
  const PrefixCacheStats& p = impl_->kv->pool().stats();
  MemoryReport r;
  r.weight_bytes = impl_->model->weight_bytes;
  r.kv_allocated_bytes = m.allocated_bytes;
  r.kv_used_bytes = m.used_bytes;
  r.kv_bytes_per_token = m.bytes_per_token;
  r.scratch_bytes = impl_->transformer->scratch_bytes();
  r.kv_block_size = impl_->kv->block_size();
  r.kv_total_blocks = m.total_blocks;
  r.kv_used_blocks = m.used_blocks;
  r.prefix_queries = p.queries;
  r.prefix_hits = p.hits;
  r.prefix_evictions = p.evictions;
  r.kv_window = impl_->kv->window();
  return r;
}

const float* Engine::Evaluate(const std::vector<int32_t>& tokens, int pos) {
  Impl& s = *impl_;
  if (tokens.empty()) Fail("Evaluate: no tokens");
  if (pos == 0 || s.eval_seq < 0) {
    if (s.eval_seq >= 0) s.kv->Free(s.eval_seq);
    s.eval_seq = s.kv->Create(s.context);
  }
  if (pos != s.kv->Length(s.eval_seq))
    Fail("Evaluate: position %d does not continue the sequence (length %d)", pos,
         s.kv->Length(s.eval_seq));
  const int n = static_cast<int>(tokens.size());
  if (pos + n > s.context || !s.kv->Reserve(s.eval_seq, pos + n))
    Fail("Evaluate: %d tokens do not fit the KV cache", pos + n);
  return s.Step(s.eval_seq, tokens.data(), n, pos);
}

int Engine::max_eval_tokens() const {
  return impl_->transformer->max_items();
}

const float* Engine::EvaluateAll(const std::vector<int32_t>& tokens, int pos) {
  Impl& s = *impl_;
  const int n = static_cast<int>(tokens.size());
  if (n == 0) Fail("EvaluateAll: no tokens");
  if (n > max_eval_tokens())
    Fail("EvaluateAll: %d tokens exceed the %d per call", n, max_eval_tokens());
  if (pos == 0 || s.eval_seq < 0) {
    if (s.eval_seq >= 0) s.kv->Free(s.eval_seq);
    s.eval_seq = s.kv->Create(s.context);
  }
  if (pos != s.kv->Length(s.eval_seq))
    Fail("EvaluateAll: position %d does not continue the sequence (length %d)", pos,
         s.kv->Length(s.eval_seq));
  if (pos + n > s.context || !s.kv->Reserve(s.eval_seq, pos + n))
    Fail("EvaluateAll: %d tokens do not fit the KV cache", pos + n);
  // One batch item per token of the same sequence: every position gets its logits (the step
  // stores all keys and values before any token attends, so each sees the ones before it).
  const KvView view = s.kv->View(s.eval_seq);
  std::vector<Transformer::BatchItem> items(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    items[static_cast<size_t>(i)] = {&tokens[static_cast<size_t>(i)], 1, pos + i, &view};
  std::vector<const float*> logits(static_cast<size_t>(n));
  s.StepBatch(items.data(), n, logits.data());
  s.kv->Commit(s.eval_seq, tokens.data(), n);
  return logits[0];  // the rows are consecutive
}

std::shared_ptr<const Grammar> Engine::CompileGrammar(GrammarKind kind,
                                                      std::string_view text) const {
  return impl_->grammars->Compile(kind, text);
}

GenerateResult Engine::Generate(std::string_view prompt, const GenerateOptions& o,
                                const StreamCallback& on_text) {
  return GenerateTokens(Tokenize(prompt, o.add_bos, o.parse_special), o, on_text);
}

GenerateResult Engine::GenerateTokens(const std::vector<int32_t>& prompt, const GenerateOptions& o,
                                      const StreamCallback& on_text) {
  Impl& s = *impl_;
  const Tokenizer& tok = *s.model->tokenizer;
  const int ctx = s.context;
  ValidatePrompt(prompt, ctx, s.model->config.n_vocab, o);
  s.sampler->Reset(o.sampling);

  GenerateResult r;
  r.prompt_tokens = static_cast<int>(prompt.size());
  Sequence& g = s.gen;
  g.tokens.assign(prompt.begin(), prompt.end());
  g.n_prompt = static_cast<int>(prompt.size());
  g.generated = 0;
  g.max_tokens = o.max_tokens;
  g.limit = ctx;
  g.ignore_eos = o.ignore_eos;
  TextAssembler& out = s.text;
  out.Reset(&o.stop, prompt.back(), static_cast<size_t>(o.max_tokens) * 32 + 256);
  bool cancelled = false;
  auto emit = [&] {
    const std::string_view piece = out.TakeReady();
    if (!piece.empty() && on_text && !cancelled && !on_text(piece)) cancelled = true;
  };

  const double t0 = NowSeconds();
  if (s.eval_seq >= 0) {
    s.kv->Free(s.eval_seq);
    s.eval_seq = -1;
  }
  const KvManager::SeqId seq = s.kv->Create(ctx);
  struct SeqGuard {  // the sequence's blocks go back to the pool (and prefix cache) at the end
    KvManager& kv;
    KvManager::SeqId id;
    ~SeqGuard() { kv.Free(id); }
  } seq_guard{*s.kv, seq};
  int pos = static_cast<int>(prompt.size());
  s.kv->SetPrefillUntil(seq, s.transformer->Bf16PromptTokens(pos));
  r.cached_tokens = s.kv->MatchPrefix(seq, prompt.data(), pos);
  if (!s.kv->Reserve(seq, pos)) {
    Fail(
        "the prompt of %d tokens does not fit in the KV cache (%d blocks of %d tokens; raise "
        "--kv-memory)",
        pos, s.kv->Memory().total_blocks, s.kv->block_size());
  }
  const float* logits =
      s.Step(seq, prompt.data() + r.cached_tokens, pos - r.cached_tokens, r.cached_tokens, pos);
  double t_first = 0;
  r.finish = FinishReason::kLength;
  if (s.draft != nullptr) s.draft->Reset(o.sampling);
  std::unique_ptr<Constraint> constraint;
  if (o.grammar) constraint = std::make_unique<Constraint>(*o.grammar);
  const uint64_t* mask = nullptr;  // the grammar's mask for the token being sampled
  // The per-token rule (engine/stop_rule.h), as the service applies it. True when generation
  // ends.
  auto take = [&](int32_t next) {
    const std::optional<FinishReason> why =
        ApplyToken(g, next, IsEndToken(tok, next), constraint ? &constraint->matcher : nullptr,
                   [&](int32_t t) {
                     const bool stop_string = out.Push(tok, t);
                     emit();
                     return stop_string;
                   });
    r.generated_tokens = g.generated;
    if (why) {
      r.finish = *why;
      return true;
    }
    if (cancelled) {
      r.finish = FinishReason::kCancelled;
      return true;
    }
    return false;
  };
  if (o.max_tokens == 0) goto done;
  {
    // The first token, from the prompt's logits.
    if (constraint) mask = constraint->Mask(nullptr, std::min(o.max_tokens, ctx - pos));
    s.sampler->Prepare(const_cast<float*>(logits), g.tokens.data(),
                       static_cast<int>(g.tokens.size()), mask);
    int32_t t = s.sampler->Draw();
    t_first = NowSeconds();
    // Each step: `t` (chosen, not yet run) and up to k drafts run in one forward; the drafts
    // the target agrees with are kept and the token after them is chosen (with k = 0, plain
    // decoding: one forward, one token).
    while (!take(t)) {
      const int generated = r.generated_tokens;
      int k = 0;
      if (s.proposer != nullptr && !constraint) {
        k = std::min({s.spec_ctl.Choose(), o.max_tokens - generated - 1, ctx - pos - 1,
                      static_cast<int>(s.drafts.size()) - 1});
        if (k > 0) {
          k = s.proposer->Propose(g.tokens.data(), static_cast<int>(g.tokens.size()), k,
                                  s.drafts.data() + 1, s.draft_q.data());
        }
      }
      if (k > 0 && !s.kv->Reserve(seq, pos + 1 + k)) k = 0;  // no room for drafts: none
      if (!s.kv->Reserve(seq, pos + 1)) {
        r.finish = FinishReason::kContext;  // KV memory exhausted
        break;
      }
      s.drafts[0] = t;
      const KvView view = s.kv->View(seq);
      Transformer::BatchItem item{s.drafts.data(), 1 + k, pos, &view, 1 + k};
      const float* rows0;
      s.StepBatch(&item, 1, &rows0);
      const size_t V = static_cast<size_t>(s.model->config.n_vocab);
      float* base = const_cast<float*>(rows0);
      if (k == 0) {
        if (constraint) {
          mask = constraint->Mask(nullptr, std::min(o.max_tokens - r.generated_tokens,
                                                    ctx - static_cast<int>(g.tokens.size())));
        }
        s.sampler->Prepare(base, g.tokens.data(), static_cast<int>(g.tokens.size()), mask);
        s.kv->Commit(seq, &t, 1);
        ++pos;
        t = s.sampler->Draw();
        continue;
      }
      for (int i = 0; i <= k; ++i)
        s.rows[static_cast<size_t>(i)] = base + static_cast<size_t>(i) * V;
      // Penalties see the drafts as history: append them while verifying.
      const size_t n_hist = g.tokens.size();
      g.tokens.insert(g.tokens.end(), s.drafts.begin() + 1, s.drafts.begin() + 1 + k);
      int32_t next = 0;
      const int a = VerifyDrafts(*s.sampler, s.rows.data(), s.drafts.data() + 1, k, g.tokens.data(),
                                 static_cast<int>(n_hist), s.draft_q.data(), &next);
      g.tokens.resize(n_hist);
      r.draft_tokens += k;
      r.accepted_tokens += a;
      s.spec_ctl.Observe(k, a);
      // Only t and the accepted drafts enter the cache (no rejected token is ever committed,
      // so none reaches the prefix cache); blocks reserved for the rest go back.
      s.kv->Commit(seq, s.drafts.data(), 1 + a);
      pos += 1 + a;
      s.kv->Truncate(seq, pos);
      bool ended = false;
      for (int i = 1; i <= a && !ended; ++i) ended = take(s.drafts[static_cast<size_t>(i)]);
      if (ended) break;
      t = next;
    }
  }
done:
  if (r.finish != FinishReason::kStop && r.finish != FinishReason::kCancelled) {
    out.Finish();
    emit();
  }
  r.text = out.text();
  const double t_end = NowSeconds();
  r.prompt_seconds = (t_first > 0 ? t_first : t_end) - t0;
  r.decode_seconds = t_first > 0 ? t_end - t_first : 0;
  return r;
}

ModelInfo InspectModel(const std::string& model_path, const std::string& tokenizer_path) {
  auto m = LoadModel(model_path, tokenizer_path);
  return MakeInfo(*m);
}

struct Vocabulary::Impl {
  std::unique_ptr<Tokenizer> tok;
};
Vocabulary::Vocabulary(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Vocabulary::~Vocabulary() = default;

std::unique_ptr<Vocabulary> Vocabulary::Load(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->tok = LoadTokenizer(path);
  return std::unique_ptr<Vocabulary>(new Vocabulary(std::move(impl)));
}
int Vocabulary::size() const {
  return impl_->tok->vocab_size();
}
std::vector<int32_t> Vocabulary::Tokenize(std::string_view text, bool add_bos,
                                          bool parse_special) const {
  return impl_->tok->Encode(text, add_bos, parse_special);
}
std::string_view Vocabulary::Piece(int id) const {
  return impl_->tok->Piece(id);
}

}  // namespace paddock
