// engine/bench.cpp: Engine::Bench, the measurements behind `paddock bench`.
//
// Every figure is taken in the same run as its baseline: the machine's read bandwidth and int8
// peak are measured here, then prefill, single-sequence decode and batched decode of the
// loaded model, each repeated (median, min, max). Token ids are pseudo-random, so the prefix
// cache never helps.
#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <random>

#include "base/cpu.h"
#include "base/stats.h"
#include "base/strings.h"
#include "base/timer.h"
#include "engine/engine_impl.h"

namespace paddock {

namespace {

// One pass over p[b, e): 4 independent sums; with kPf, a software prefetch 4 KiB ahead per
// 64-byte line (as the kernels' weight stream may have).
template <bool kPf>
uint64_t SumRange(const uint64_t* p, int64_t b, int64_t e) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = b;
  for (; i + 8 <= e; i += 8) {
    if constexpr (kPf) __builtin_prefetch(p + i + 512);
    s0 += p[i] + p[i + 4];
    s1 += p[i + 1] + p[i + 5];
    s2 += p[i + 2] + p[i + 6];
    s3 += p[i + 3] + p[i + 7];
  }
  for (; i < e; ++i) s0 += p[i];
  return s0 + s1 + s2 + s3;
}

// What all threads can read from memory: passes over a 512 MiB buffer (far larger than the
// caches), each read whole once with plain loads and once with software prefetch; a pass's rate
// is the better of the two. On some machines the hardware prefetcher alone leaves a core well
// short of what a software-prefetched stream reaches, as the kernels' may be.
class ReadProbe {
 public:
  explicit ReadProbe(ThreadPool& pool)
      : pool_(pool), n_((512u << 20) / sizeof(uint64_t)), buf_(new uint64_t[n_]) {
    pool_.ParallelFor(static_cast<int64_t>(n_), [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i)
        buf_[static_cast<size_t>(i)] = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
    });
  }
  // Frees the buffer: Pass() then reads 0 (not measured).
  void Release() { buf_.reset(); }
  // GB/s of one pass.
  double Pass() {
    if (buf_ == nullptr) return 0;
    std::vector<uint64_t> sums(static_cast<size_t>(pool_.size()), 0);
    double best = 0;
    for (int pf = 0; pf < 2; ++pf) {
      const double t0 = NowSeconds();
      pool_.ParallelFor(static_cast<int64_t>(n_), [&](int64_t b, int64_t e, int t) {
        sums[static_cast<size_t>(t)] +=
            pf ? SumRange<true>(buf_.get(), b, e) : SumRange<false>(buf_.get(), b, e);
      });
      best = std::max(best, static_cast<double>(n_ * sizeof(uint64_t)) / (NowSeconds() - t0) / 1e9);
    }
    volatile uint64_t sink = 0;
    for (uint64_t v : sums) sink = sink + v;
    return best;
  }
  // The roofline: the best of 5 passes. A roofline is what the machine can do (as the int8 peak
  // below): a pass that a neighbour on a shared host slowed says nothing about that.
  double Best() {
    double best = 0;
    for (int rep = 0; rep < 5; ++rep) best = std::max(best, Pass());
    return best;
  }

 private:
  ThreadPool& pool_;
  size_t n_;
  std::unique_ptr<uint64_t[]> buf_;
};

// One run of a peak probe on every thread: GOPS.
double PeakRun(ThreadPool& pool, int64_t (*probe)(int64_t)) {
  const int64_t iters = 2000000;
  std::vector<int64_t> ops(static_cast<size_t>(pool.size()), 0);
  const double t0 = NowSeconds();
  pool.ParallelFor(pool.size(), [&](int64_t b, int64_t e, int t) {
    for (int64_t i = b; i < e; ++i) ops[static_cast<size_t>(t)] += probe(iters);
  });
  const double dt = NowSeconds() - t0;
  int64_t total = 0;
  for (int64_t o : ops) total += o;
  return static_cast<double>(total) / dt / 1e9;
}

// The best of 5 runs: a peak is what the machine can do, and a run that a late-waking
// thread or a neighbour on a shared host slowed down says nothing about that.
double MeasurePeak(ThreadPool& pool, int64_t (*probe)(int64_t)) {
  if (probe == nullptr) return 0;
  double best = 0;
  for (int run = 0; run < 5; ++run) best = std::max(best, PeakRun(pool, probe));
  return best;
}

// Repetitions of a measurement (values pushed to `values`), each bracketed by runs of its
// roofline's probe: the median over the repetitions of value x scale / (the mean of the probe
// runs just before and just after it); 0 where the probe reads 0. On a shared host whose load
// changes from second to second, a neighbour that slows the machine slows a repetition and its
// probes alike, so this share moves far less than one taken against a roofline measured at the
// start; the best-of-5 roofline share is reported beside it.
template <class Measure, class Probe>
double PairedShare(int reps, Measure&& measure, double scale, Probe&& probe,
                   std::vector<double>* values) {
  std::vector<double> shares;
  double before = probe();
  for (int rep = 0; rep < reps; ++rep) {
    const double v = measure();
    const double after = probe();
    values->push_back(v);
    const double mean = 0.5 * (before + after);
    if (mean > 0) shares.push_back(v * scale / mean);
    before = after;
  }
  return shares.empty() ? 0 : Summarize(shares).median;
}

uint64_t MatmulBytes(const WeightTensor& w) {
  return static_cast<uint64_t>(w.rows) * w.row_bytes;
}
uint64_t MatmulParams(const WeightTensor& w) {
  return static_cast<uint64_t>(w.rows) * static_cast<uint64_t>(w.cols);
}

// The measurements of one Engine::Bench call, each a named step.
class BenchRun {
 public:
  BenchRun(Engine::Impl& s, const BenchOptions& o)
      : s_(s),
        o_(o),
        n_vocab_(s.model->config.n_vocab),
        cap_(std::max(o.prompt_tokens, o.depth + o.gen_tokens) + 1) {}

  // Bytes each decode step streams (every matrix once) and the matrices' parameters.
  void Weights(uint64_t* bytes, uint64_t* params) const {
    *bytes = *params = 0;
    const int used = s_.model->config.n_experts_used;
    for (const LayerWeights& L : s_.model->weights.layers) {
      for (const WeightTensor* w :
           {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down, &L.router}) {
        *bytes += MatmulBytes(*w);
        *params += MatmulParams(*w);
      }
      // A mixture of experts reads the k experts a token uses (all experts have one shape).
      if (!L.experts.empty()) {
        const ExpertWeights& e = L.experts[0];
        for (const WeightTensor* w : {&e.gate, &e.up, &e.down}) {
          *bytes += static_cast<uint64_t>(used) * MatmulBytes(*w);
          *params += static_cast<uint64_t>(used) * MatmulParams(*w);
        }
      }
    }
    *bytes += MatmulBytes(s_.model->weights.output);
    *params += MatmulParams(s_.model->weights.output);
  }

  // Prompt tokens per second of one prefill of fresh random tokens (profiled into `prof`).
  double Prefill(Profiler* prof, double* seconds) {
    const auto toks = RandomTokens(o_.prompt_tokens);
    const KvManager::SeqId seq = NewSequence(o_.prompt_tokens);
    s_.backend->SetProfiler(prof);
    const double t0 = NowSeconds();
    s_.Step(seq, toks.data(), o_.prompt_tokens, 0, o_.prompt_tokens);
    *seconds = NowSeconds() - t0;
    s_.backend->SetProfiler(nullptr);
    s_.kv->Free(seq);
    return o_.prompt_tokens / *seconds;
  }

  // Tokens per second of gen_tokens greedy decode steps after a prompt of `depth` tokens.
  double Decode(Profiler* prof, double* seconds) {
    const int depth = o_.depth;
    const auto prompt = RandomTokens(depth);
    const KvManager::SeqId seq = NewSequence(depth);
    const float* logits = s_.Step(seq, prompt.data(), depth, 0, depth);
    s_.backend->SetProfiler(prof);
    const double t0 = NowSeconds();
    for (int i = 0; i < o_.gen_tokens; ++i) {
      int32_t next;
      {
        ProfileScope sp(prof, ProfOp::kSample);
        next = Argmax(logits);
      }
      if (!s_.kv->Reserve(seq, depth + i + 1)) Fail("bench: the KV cache is too small");
      logits = s_.Step(seq, &next, 1, depth + i);
    }
    *seconds = NowSeconds() - t0;
    s_.backend->SetProfiler(nullptr);
    s_.kv->Free(seq);
    return o_.gen_tokens / *seconds;
  }

  // Tokens per second over `batch` sequences decoding together, one token each per step.
  double BatchedDecode() { return BatchedDecode(o_.batch); }
  double BatchedDecode(int B) {
    const size_t nb = static_cast<size_t>(B);
    std::vector<KvManager::SeqId> ids(nb);
    std::vector<KvView> views(nb);
    std::vector<StepItem> items(nb);
    std::vector<const float*> logits(nb);
    std::vector<int32_t> next(nb);
    const int depth = o_.depth;
    for (size_t k = 0; k < nb; ++k) {
      const auto prompt = RandomTokens(depth);
      ids[k] = NewSequence(depth);
      next[k] = Argmax(s_.Step(ids[k], prompt.data(), depth, 0, depth));
    }
    const double t0 = NowSeconds();
    for (int i = 0; i < o_.gen_tokens; ++i) {
      for (size_t k = 0; k < nb; ++k) {
        if (!s_.kv->Reserve(ids[k], depth + i + 1))
          Fail("bench: the KV cache cannot hold %d sequences (raise --kv-memory)", B);
        views[k] = s_.kv->View(ids[k]);
        items[k] = {&next[k], 1, depth + i, &views[k]};
      }
      s_.StepBatch(items.data(), B, logits.data());
      for (size_t k = 0; k < nb; ++k) {
        s_.kv->Commit(ids[k], &next[k], 1);
        next[k] = Argmax(logits[k]);
      }
    }
    const double tps = static_cast<double>(B) * o_.gen_tokens / (NowSeconds() - t0);
    for (auto id : ids) s_.kv->Free(id);
    return tps;
  }

 private:
  std::vector<int32_t> RandomTokens(int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<int32_t>(rng_() % static_cast<uint32_t>(n_vocab_));
    return t;
  }
  KvManager::SeqId NewSequence(int tokens) {
    const KvManager::SeqId seq = s_.kv->Create(cap_);
    if (!s_.kv->Reserve(seq, tokens))
      Fail("bench: the KV cache cannot hold %d tokens (raise --kv-memory)", tokens);
    return seq;
  }
  int32_t Argmax(const float* logits) const {
    return static_cast<int32_t>(std::max_element(logits, logits + n_vocab_) - logits);
  }

  Engine::Impl& s_;
  const BenchOptions& o_;
  int n_vocab_, cap_;
  std::mt19937 rng_{1234};
};

// The batch sweep (BenchOptions::sweep_batch).
void Sweep(Engine::Impl& s, BenchRun& run, const BenchOptions& o, BenchReport* r) {
  int prev = 0;
  for (int b : o.sweep_batch) {
    if (b <= prev) Fail("bench: sweep batch sizes must be positive and ascending");
    if (b > s.backend->max_batch() || b > s.backend->max_items())
      Fail("bench: batch %d exceeds the engine's limit of %d sequences per step", b,
           std::min(s.backend->max_batch(), s.backend->max_items()));
    prev = b;
  }
  const size_t n = o.sweep_batch.size();
  std::vector<std::vector<double>> tps(n);
  for (int rep = 0; rep < o.reps; ++rep)  // interleaved: every size once per repetition
    for (size_t i = 0; i < n; ++i) {
      tps[i].push_back(run.BatchedDecode(o.sweep_batch[i]));
      if (o.on_progress) o.on_progress(static_cast<double>(rep * n + i + 1) / (o.reps * n));
    }
  double best = 0;
  for (size_t i = 0; i < n; ++i) {
    const Stats st = Summarize(tps[i]);
    BenchReport::SweepPoint p;
    p.batch = o.sweep_batch[i];
    p.tps = st.median;
    p.tps_min = st.min;
    p.tps_max = st.max;
    p.step_ms = st.median > 0 ? 1e3 * p.batch / st.median : 0;
    best = std::max(best, p.tps);
    r->sweep.push_back(p);
  }
  for (const auto& p : r->sweep)
    if (p.tps >= 0.9 * best) {
      r->knee = p.batch;
      break;
    }
}

// Operator shares of a profile over `seconds` of `steps` steps (skipping `skip`).
std::vector<BenchReport::ProfileEntry> Shares(const Profiler& prof, double seconds, int steps,
                                              ProfOp skip) {
  std::vector<BenchReport::ProfileEntry> out;
  for (int op = 0; op < static_cast<int>(ProfOp::kCount); ++op) {
    if (static_cast<ProfOp>(op) == skip) continue;
    out.push_back({Profiler::Name(static_cast<ProfOp>(op)), prof.seconds[op] / steps * 1e3,
                   prof.seconds[op] / seconds});
  }
  return out;
}

// The options against the engine's context and batch limits.
void CheckBench(const Engine::Impl& s, const BenchOptions& o) {
  if (o.prompt_tokens < 1 || o.gen_tokens < 1 || o.reps < 1 || o.batch < 1 || o.depth < 1)
    Fail("bench: counts must be positive");
  if (o.prompt_tokens + o.gen_tokens + 1 > s.context)
    Fail("bench: %d + %d tokens exceed the context of %d (raise -c)", o.prompt_tokens, o.gen_tokens,
         s.context);
  if (o.depth + o.gen_tokens + 1 > s.context)
    Fail("bench: depth %d + %d tokens exceed the context of %d (raise -c)", o.depth, o.gen_tokens,
         s.context);
  const int max_batch = s.backend->max_batch();
  if (o.batch > max_batch)
    Fail("bench: batch %d exceeds the engine's batch limit %d", o.batch, max_batch);
  if (o.step_tokens < 0 || o.step_tokens > max_batch)
    Fail("bench: %d tokens per step is out of range [1, %d]", o.step_tokens, max_batch);
  if (o.prefill_only && o.decode_only) Fail("bench: prefill_only and decode_only: give one");
  if (o.prefetch < -1 || o.prefetch > 2)
    Fail("bench: prefetch %d is out of range (-1 the engine's, 0 none, 1 default, 2 all)",
         o.prefetch);
}

// The step, matmul block and kernel table of this call (or the defaults, to compare), the
// engine's restored on the way out. A device backend has none of these: the choice is then the
// backend's own and changes nothing.
class KernelChoice {
 public:
  KernelChoice(const Engine::Impl& s, const BenchOptions& o)
      : tf_(s.cpu),
        prefetch_(o.prefetch < 0 ? s.prefetch : static_cast<Prefetch>(o.prefetch)),
        dflt_k_(GetKernels(ParseIsa(s.info.isa), Prefetch::kAuto)),
        call_k_(GetKernels(ParseIsa(s.info.isa), prefetch_)) {
    if (tf_ == nullptr) {
      if (o.step_tokens > 0 || o.matmul_block_bytes > 0 || o.prefetch >= 0)
        Fail("bench: step, block and prefetch choices are the CPU backend's (not %s)",
             s.backend->name().c_str());
      step_ = s.backend->step_tokens();
      return;
    }
    saved_step_ = tf_->step_tokens();
    saved_block_ = tf_->options().matmul_block_bytes;
    saved_kernels_ = &tf_->kernels();
    step_ = o.step_tokens > 0 ? o.step_tokens : tf_->step_tokens();
    block_ = o.matmul_block_bytes > 0 ? o.matmul_block_bytes : tf_->matmul_block_bytes();
    Use(false);
  }
  ~KernelChoice() {
    if (tf_ == nullptr) return;
    tf_->SetStepTokens(saved_step_);
    SetBlock(saved_block_);
    tf_->SetKernels(*saved_kernels_);
  }
  void Use(bool defaults) {
    if (tf_ == nullptr) return;
    tf_->SetStepTokens(defaults ? std::min(256, tf_->max_batch()) : step_);
    SetBlock(defaults ? 0 : block_);
    tf_->SetKernels(defaults ? dflt_k_ : call_k_);
  }
  int step() const { return step_; }
  size_t block() const { return block_; }
  Prefetch prefetch() const { return prefetch_; }

 private:
  void SetBlock(size_t bytes) {
    ForwardOptions f = tf_->options();
    f.matmul_block_bytes = bytes;
    tf_->Configure(f);
  }
  Transformer* tf_;
  int saved_step_ = 0;
  size_t saved_block_ = 0;
  const KernelTable* saved_kernels_ = nullptr;
  int step_ = 0;
  size_t block_ = 0;
  Prefetch prefetch_;
  const KernelTable& dflt_k_;
  const KernelTable& call_k_;
};

// tune's check: the defaults against this call's choices, alternating, medians.
void CompareDefaults(BenchRun& run, KernelChoice& kc, int reps, BenchReport* r) {
  std::vector<double> dflt, tuned, dflt_dec, tuned_dec;
  double seconds = 0;
  for (int rep = 0; rep < reps; ++rep) {
    for (bool defaults : {true, false}) {
      kc.Use(defaults);
      (defaults ? dflt : tuned).push_back(run.Prefill(nullptr, &seconds));
      (defaults ? dflt_dec : tuned_dec).push_back(run.Decode(nullptr, &seconds));
    }
  }
  kc.Use(false);
  r->tune = {kc.step(),
             kc.block(),
             static_cast<int>(kc.prefetch()),
             Summarize(dflt).median,
             Summarize(tuned).median,
             Summarize(dflt_dec).median,
             Summarize(tuned_dec).median};
}

// One figure alone: `reps` runs of prefill or decode, medians.
void OneFigure(BenchRun& run, const BenchOptions& o, uint64_t params, BenchReport* r) {
  std::vector<double> tps;
  double seconds = 0;
  for (int rep = 0; rep < o.reps; ++rep)
    tps.push_back(o.prefill_only ? run.Prefill(nullptr, &seconds) : run.Decode(nullptr, &seconds));
  const Stats st = Summarize(tps);
  if (o.prefill_only) {
    r->prefill_tps = st.median;
    r->prefill_tps_min = st.min;
    r->prefill_tps_max = st.max;
    r->prefill_gops = 2.0 * static_cast<double>(params) * r->prefill_tps / 1e9;
  } else {
    r->decode_tps = st.median;
    r->decode_tps_min = st.min;
    r->decode_tps_max = st.max;
    r->decode_gbs = static_cast<double>(r->streamed_bytes) * r->decode_tps / 1e9;
  }
}

// Prefill, each repetition between two runs of the int8 peak probe (and one more, profiled,
// not counted).
void BenchPrefill(Engine::Impl& s, BenchRun& run, const BenchOptions& o, const KernelTable& kt,
                  uint64_t params, BenchReport* r) {
  std::vector<double> prefill;
  double seconds = 0;
  const double gops_per_tps = 2.0 * static_cast<double>(params) / 1e9;
  r->compute_utilization_paired = PairedShare(
      o.reps, [&] { return run.Prefill(nullptr, &seconds); }, gops_per_tps,
      [&] {  // (a device backend: no compute peak probed, so no share)
        return kt.int8_peak_probe && r->device.empty() ? PeakRun(*s.pool, kt.int8_peak_probe) : 0.0;
      },
      &prefill);
  if (o.profile) {
    Profiler pprof;
    run.Prefill(&pprof, &seconds);
    r->prefill_measured_ms = seconds * 1e3;
    r->prefill_profiled_ms = pprof.Total() * 1e3;
    r->prefill_profile = Shares(pprof, seconds, 1, ProfOp::kSample);  // prefill samples nothing
  }
  const Stats ps = Summarize(prefill);
  r->prefill_tps = ps.median;
  r->prefill_tps_min = ps.min;
  r->prefill_tps_max = ps.max;
  r->prefill_gops = 2.0 * static_cast<double>(params) * r->prefill_tps / 1e9;
  r->compute_utilization = r->peak_int8_gops > 0 ? r->prefill_gops / r->peak_int8_gops : 0;
  r->tile_utilization = r->peak_tile_gops > 0 ? r->prefill_gops / r->peak_tile_gops : 0;
}

// Decode, one sequence (profiled when asked), each repetition between read passes.
void BenchDecode(BenchRun& run, const BenchOptions& o, const std::function<double()>& read_pass,
                 BenchReport* r) {
  std::vector<double> decode;
  Profiler prof;
  double decode_time = 0, seconds = 0;
  const double gb_per_token = static_cast<double>(r->streamed_bytes) / 1e9;
  r->bandwidth_utilization_paired = PairedShare(
      o.reps,
      [&] {
        const double tps = run.Decode(o.profile ? &prof : nullptr, &seconds);
        decode_time += seconds;
        return tps;
      },
      gb_per_token,
      [&] {
        double best = 0;
        for (int i = 0; i < 3; ++i) best = std::max(best, read_pass());
        return best;
      },
      &decode);
  const Stats ds = Summarize(decode);
  r->decode_tps = ds.median;
  r->decode_tps_min = ds.min;
  r->decode_tps_max = ds.max;
  r->decode_gbs = static_cast<double>(r->streamed_bytes) * r->decode_tps / 1e9;
  r->bandwidth_utilization = r->read_bandwidth_gbs > 0 ? r->decode_gbs / r->read_bandwidth_gbs : 0;
  if (o.profile) {
    const int steps = o.reps * o.gen_tokens;
    r->measured_step_ms = decode_time / steps * 1e3;
    r->profiled_step_ms = prof.Total() / steps * 1e3;
    r->profile = Shares(prof, decode_time, steps, ProfOp::kCount);
  }
}

}  // namespace

BenchReport Engine::Bench(const BenchOptions& o) {
  Impl& s = *impl_;
  CheckBench(s, o);
  if (s.eval_seq >= 0) {
    s.kv->Free(s.eval_seq);
    s.eval_seq = -1;
  }
  BenchReport r;
  r.isa = s.info.isa;
  r.bf16_prefill = s.backend->AltPromptTokens(o.prompt_tokens) > 0;
  r.threads = s.pool->size();
  r.batch = o.batch;
  r.prompt_tokens = o.prompt_tokens;
  r.gen_tokens = o.gen_tokens;
  r.depth = o.depth;
  r.reps = o.reps;
  BenchRun run(s, o);
  uint64_t params = 0;
  run.Weights(&r.streamed_bytes, &params);
  r.n_experts = s.model->config.n_experts;
  r.n_experts_used = s.model->config.n_experts_used;
  KernelChoice kc(s, o);
  // A device's matrix-vector workgroup for this call (tune's candidates), the engine's after.
  struct DeviceChoice {
    Backend* b;
    ForwardOptions saved;
    DeviceChoice(Backend* backend, uint32_t wg) : b(wg > 0 ? backend : nullptr) {
      if (b == nullptr) return;
      saved = b->options();
      ForwardOptions f = saved;
      f.device_matvec_wg = wg;
      b->Configure(f);
    }
    ~DeviceChoice() {
      if (b != nullptr) b->Configure(saved);
    }
  } device_choice(s.backend.get(), o.device_matvec_wg);
  if (o.device_matvec_wg > 0 && s.backend->device_total() == 0)
    Fail("bench: a matrix-vector workgroup is a device backend's choice (not %s)",
         s.backend->name().c_str());
  if (o.compare_defaults) CompareDefaults(run, kc, o.reps, &r);
  if (o.prefill_only || o.decode_only) {
    OneFigure(run, o, params, &r);
    return r;
  }
  if (!o.sweep_batch.empty()) {
    Sweep(s, run, o, &r);
    r.memory = Memory();
    return r;
  }
  // 1. The machine's roofline, in the same run: on a device backend, the device's read
  // bandwidth (its compute peak is not probed: prefill's share of it is not reported).
  const KernelTable& kt = GetKernels(ParseIsa(s.info.isa));
  std::unique_ptr<ReadProbe> read_probe;
  std::function<double()> read_pass;
  r.device = s.backend->device_total() > 0 ? s.backend->name() : "";
  if (!r.device.empty()) {
    read_pass = [&] { return s.backend->ReadBandwidthGbs(1); };
    r.read_bandwidth_gbs = s.backend->ReadBandwidthGbs(5);
  } else {
    read_probe = std::make_unique<ReadProbe>(*s.pool);
    read_pass = [&] { return read_probe->Pass(); };
    r.read_bandwidth_gbs = read_probe->Best();
    // The buffer stays for the read passes around the decode repetitions only where that
    // leaves memory to spare: held back from the page cache, it could push the model's mapped
    // weights out and make decode read them from disk.
    const uint64_t avail = AvailableMemoryBytes();
    if (avail != 0 && avail < (uint64_t{1} << 30)) read_probe->Release();
    r.peak_int8_gops = MeasurePeak(*s.pool, kt.int8_peak_probe);
    r.peak_tile_gops = MeasurePeak(*s.pool, kt.tile_peak_probe);
  }
  // 2. Prefill; 3. decode, one sequence; 4. batched decode; 5. speculation, when on.
  BenchPrefill(s, run, o, kt, params, &r);
  BenchDecode(run, o, read_pass, &r);
  if (o.batch > 1) {
    std::vector<double> batched;
    for (int rep = 0; rep < o.reps; ++rep) batched.push_back(run.BatchedDecode());
    const Stats bs = Summarize(batched);
    r.batch_decode_tps = bs.median;
    r.batch_decode_tps_min = bs.min;
    r.batch_decode_tps_max = bs.max;
  }
  if (s.proposer != nullptr) BenchSpeculation(o, &r);
  r.memory = Memory();
  return r;
}

void Engine::BenchSpeculation(const BenchOptions& o, BenchReport* r) {
  Impl& s = *impl_;
  r->verify_cost = s.MeasureVerifyCost(std::min(8, s.backend->max_items() - 1), o.reps + 2);
  r->draft_cost = s.proposer != nullptr ? s.proposer->DraftCost() : 0;
  std::mt19937 rng(4321);
  const int V = s.model->config.n_vocab;
  auto random = [&](int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(V));
    return t;
  };
  std::vector<int32_t> grounded;
  const std::vector<int32_t> span = random(12);
  for (int i = 0; i < 8; ++i) grounded.insert(grounded.end(), span.begin(), span.end());
  const std::vector<int32_t> noise = random(96);
  GenerateOptions go;
  go.max_tokens = std::min(o.gen_tokens, s.context - 97);
  go.ignore_eos = true;
  go.sampling.temperature = 0;
  for (const auto& [name, prompt] : {std::pair{"grounded", grounded}, std::pair{"random", noise}}) {
    std::vector<double> plain, spec;
    int drafted = 0, accepted = 0;
    for (int rep = 0; rep < o.reps; ++rep) {  // interleaved: with, without
      GenerateResult g = GenerateTokens(prompt, go, {});
      spec.push_back(g.decode_seconds > 0 ? (g.generated_tokens - 1) / g.decode_seconds : 0);
      drafted += g.draft_tokens;
      accepted += g.accepted_tokens;
      std::unique_ptr<Proposer> saved = std::move(s.proposer);
      g = GenerateTokens(prompt, go, {});
      s.proposer = std::move(saved);
      plain.push_back(g.decode_seconds > 0 ? (g.generated_tokens - 1) / g.decode_seconds : 0);
    }
    BenchReport::SpecRun run;
    run.workload = name;
    run.plain_tps = Summarize(plain).median;
    run.spec_tps = Summarize(spec).median;
    run.drafted = drafted;
    run.acceptance = drafted > 0 ? static_cast<double>(accepted) / drafted : 0;
    r->spec.push_back(run);
  }
}

}  // namespace paddock
