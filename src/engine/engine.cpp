// engine/engine.cpp: the public API over model, kernels and KV cache: one sequence at a time.
//
// The generation loop is: tokenize, prefill in chunks, then per token sample -> decode bytes
// -> UTF-8 assembly -> stop-string check -> callback -> forward. Buffers used per token (the
// history, the output text, sampler scratch) are reserved before the loop, so the steady-state
// loop performs no heap allocation (a test counts them).
#include "paddock/engine.h"

#include <algorithm>

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

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

std::unique_ptr<Engine> Engine::Create(const EngineOptions& o) {
  const double t0 = NowSeconds();
  if (o.model_path.empty()) Fail("no model given");
  if (o.threads < 0 || o.threads > 1024) Fail("thread count %d is out of range", o.threads);
  if (o.context < 0) Fail("context %d must not be negative", o.context);
  if (o.max_batch < 1 || o.max_batch > 4096)
    Fail("max batch %d is out of range [1, 4096]", o.max_batch);
  const Isa isa = ParseIsa(o.isa);
  auto impl = std::make_unique<Impl>();
  impl->model = LoadModel(o.model_path, o.tokenizer_path);
  if (o.relayout_weights && o.int8_activations) RelayoutWeights(impl->model.get(), o.huge_pages);
  const ModelConfig& c = impl->model->config;
  const int ctx = o.context > 0 ? o.context : std::min(c.context_length, kDefaultMaxContext);
  if (ctx > c.context_length)
    Fail("context %d exceeds the model's trained context %d", ctx, c.context_length);
  const int threads = o.threads > 0 ? o.threads : PhysicalCores();
  impl->pool = std::make_unique<ThreadPool>(threads);
  impl->transformer = std::make_unique<Transformer>(
      *impl->model, GetKernels(isa, o.prefetch ? Prefetch::kAuto : Prefetch::kOff), *impl->pool,
      o.max_batch, o.int8_activations);
  impl->transformer->SetBf16Dot(o.bf16_dot);
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
  impl->history.reserve(static_cast<size_t>(ctx) + 1);
  impl->info = MakeInfo(*impl->model);
  impl->info.context = ctx;
  impl->info.kv_bytes = impl->kv->Memory().allocated_bytes;
  impl->info.kv_bytes_per_1k_tokens = impl->kv->Memory().bytes_per_token * 1000u;
  impl->info.scratch_bytes = impl->transformer->scratch_bytes();
  impl->info.isa = IsaName(isa);
  impl->info.threads = threads;
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
  s.history.assign(prompt.begin(), prompt.end());
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
  r.cached_tokens = s.kv->MatchPrefix(seq, prompt.data(), pos);
  if (!s.kv->Reserve(seq, pos)) {
    Fail(
        "the prompt of %d tokens does not fit in the KV cache (%d blocks of %d tokens; raise "
        "--kv-memory)",
        pos, s.kv->Memory().total_blocks, s.kv->block_size());
  }
  const float* logits =
      s.Step(seq, prompt.data() + r.cached_tokens, pos - r.cached_tokens, r.cached_tokens);
  float* mlogits = const_cast<float*>(logits);
  double t_first = 0;
  r.finish = FinishReason::kLength;
  // The stop rule (engine/stop_rule.h), as the scheduler applies it.
  for (int i = 0; i < o.max_tokens; ++i) {
    const int next =
        s.sampler->Sample(mlogits, s.history.data(), static_cast<int>(s.history.size()));
    if (i == 0) t_first = NowSeconds();
    if (EndsAtToken(tok.IsEndOfGeneration(next) || next == tok.bos(), o.ignore_eos)) {
      r.finish = FinishReason::kEos;
      break;
    }
    s.history.push_back(next);
    r.generated_tokens++;
    const bool stop_string = out.Push(tok, next);
    emit();
    const std::optional<FinishReason> why = StopAfterAppend(
        stop_string, r.generated_tokens, o.max_tokens, static_cast<int>(s.history.size()), ctx);
    if (why) {
      r.finish = *why;
      break;
    }
    if (cancelled) {
      r.finish = FinishReason::kCancelled;
      break;
    }
    if (!s.kv->Reserve(seq, pos + 1)) {
      r.finish = FinishReason::kContext;  // KV memory exhausted
      break;
    }
    const int32_t tok_in = next;
    mlogits = const_cast<float*>(s.Step(seq, &tok_in, 1, pos));
    ++pos;
  }
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
