// engine/bench.cpp: Engine::Bench, the measurements behind `paddock bench`.
//
// Every figure is taken in the same run as its baseline: the machine's read bandwidth and int8
// peak are measured here, then prefill, single-sequence decode and batched decode of the
// loaded model, each repeated (median, min, max). Token ids are pseudo-random, so the prefix
// cache never helps.
#include <algorithm>
#include <cstring>
#include <memory>
#include <random>

#include "base/strings.h"
#include "base/timer.h"
#include "engine/engine_impl.h"

namespace paddock {

namespace {

struct Stats {
  double median = 0, min = 0, max = 0;
};
Stats Summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

// Median of 5 full passes over a 512 MiB buffer (far larger than the caches), all threads reading.
double MeasureReadBandwidth(ThreadPool& pool) {
  const size_t n = (512u << 20) / sizeof(uint64_t);
  std::unique_ptr<uint64_t[]> buf(new uint64_t[n]);
  pool.ParallelFor(static_cast<int64_t>(n), [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) buf[static_cast<size_t>(i)] = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
  });
  std::vector<uint64_t> sums(static_cast<size_t>(pool.size()), 0);
  std::vector<double> rates;
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = NowSeconds();
    pool.ParallelFor(static_cast<int64_t>(n), [&](int64_t b, int64_t e, int t) {
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      const uint64_t* p = buf.get();
      int64_t i = b;
      for (; i + 4 <= e; i += 4) {
        s0 += p[i];
        s1 += p[i + 1];
        s2 += p[i + 2];
        s3 += p[i + 3];
      }
      for (; i < e; ++i) s0 += p[i];
      sums[static_cast<size_t>(t)] += s0 + s1 + s2 + s3;
    });
    rates.push_back(static_cast<double>(n * sizeof(uint64_t)) / (NowSeconds() - t0) / 1e9);
  }
  volatile uint64_t sink = 0;
  for (uint64_t v : sums) sink = sink + v;
  return Summarize(rates).median;
}

double MeasureInt8Peak(ThreadPool& pool, const KernelTable& k) {
  if (k.int8_peak_probe == nullptr) return 0;
  const int64_t iters = 2000000;
  std::vector<int64_t> ops(static_cast<size_t>(pool.size()), 0);
  const double t0 = NowSeconds();
  pool.ParallelFor(pool.size(), [&](int64_t b, int64_t e, int t) {
    for (int64_t i = b; i < e; ++i) ops[static_cast<size_t>(t)] += k.int8_peak_probe(iters);
  });
  const double dt = NowSeconds() - t0;
  int64_t total = 0;
  for (int64_t o : ops) total += o;
  return static_cast<double>(total) / dt / 1e9;
}

uint64_t MatmulBytes(const WeightTensor& w) { return static_cast<uint64_t>(w.rows) * w.row_bytes; }
uint64_t MatmulParams(const WeightTensor& w) { return static_cast<uint64_t>(w.rows) * static_cast<uint64_t>(w.cols); }

}  // namespace

BenchReport Engine::Bench(const BenchOptions& o) {
  Impl& s = *impl_;
  const ModelConfig& c = s.model->config;
  if (o.prompt_tokens < 1 || o.gen_tokens < 1 || o.reps < 1 || o.batch < 1) Fail("bench: counts must be positive");
  if (o.prompt_tokens + o.gen_tokens + 1 > s.context) Fail("bench: %d + %d tokens exceed the context of %d (raise -c)", o.prompt_tokens, o.gen_tokens, s.context);
  if (o.batch > s.transformer->max_batch()) Fail("bench: batch %d exceeds the engine's batch limit %d", o.batch, s.transformer->max_batch());
  if (s.eval_seq >= 0) {
    s.kv->Free(s.eval_seq);
    s.eval_seq = -1;
  }
  BenchReport r;
  r.isa = s.info.isa;
  r.threads = s.pool->size();
  r.batch = o.batch;
  r.prompt_tokens = o.prompt_tokens;
  r.gen_tokens = o.gen_tokens;
  r.reps = o.reps;
  uint64_t params = 0;
  for (const LayerWeights& L : s.model->weights.layers) {
    for (const WeightTensor* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) {
      r.streamed_bytes += MatmulBytes(*w);
      params += MatmulParams(*w);
    }
  }
  r.streamed_bytes += MatmulBytes(s.model->weights.output);
  params += MatmulParams(s.model->weights.output);

  r.read_bandwidth_gbs = MeasureReadBandwidth(*s.pool);
  r.peak_int8_gops = MeasureInt8Peak(*s.pool, GetKernels(ParseIsa(s.info.isa)));

  std::mt19937 rng(1234);
  auto random_tokens = [&](int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(c.n_vocab));
    return t;
  };
  const int cap = o.prompt_tokens + o.gen_tokens + 1;

  // Prefill.
  std::vector<double> prefill;
  for (int rep = 0; rep < o.reps; ++rep) {
    const auto toks = random_tokens(o.prompt_tokens);
    const KvManager::SeqId seq = s.kv->Create(cap);
    if (!s.kv->Reserve(seq, o.prompt_tokens)) Fail("bench: the KV cache cannot hold %d tokens (raise --kv-memory)", o.prompt_tokens);
    const double t0 = NowSeconds();
    s.Step(seq, toks.data(), o.prompt_tokens, 0);
    prefill.push_back(o.prompt_tokens / (NowSeconds() - t0));
    s.kv->Free(seq);
  }
  if (o.profile) {  // one more prefill, profiled (not counted in the figures above)
    Profiler pprof;
    const auto toks = random_tokens(o.prompt_tokens);
    const KvManager::SeqId seq = s.kv->Create(cap);
    if (!s.kv->Reserve(seq, o.prompt_tokens)) Fail("bench: the KV cache cannot hold %d tokens (raise --kv-memory)", o.prompt_tokens);
    s.transformer->set_profiler(&pprof);
    const double t0 = NowSeconds();
    s.Step(seq, toks.data(), o.prompt_tokens, 0);
    const double dt = NowSeconds() - t0;
    s.transformer->set_profiler(nullptr);
    s.kv->Free(seq);
    r.prefill_measured_ms = dt * 1e3;
    r.prefill_profiled_ms = pprof.Total() * 1e3;
    for (int op = 0; op < static_cast<int>(ProfOp::kCount); ++op) {
      if (static_cast<ProfOp>(op) == ProfOp::kSample) continue;  // prefill samples nothing
      r.prefill_profile.push_back({Profiler::Name(static_cast<ProfOp>(op)), pprof.seconds[op] * 1e3, pprof.seconds[op] / dt});
    }
  }
  const Stats ps = Summarize(prefill);
  r.prefill_tps = ps.median;
  r.prefill_tps_min = ps.min;
  r.prefill_tps_max = ps.max;

  // Decode, one sequence (optionally profiled).
  Profiler prof;
  std::vector<double> decode;
  double decode_time = 0;
  int decode_steps = 0;
  for (int rep = 0; rep < o.reps; ++rep) {
    const auto prompt = random_tokens(8);
    const KvManager::SeqId seq = s.kv->Create(cap);
    if (!s.kv->Reserve(seq, 8)) Fail("bench: the KV cache is too small");
    const float* logits = s.Step(seq, prompt.data(), 8, 0);
    if (o.profile) s.transformer->set_profiler(&prof);
    const double t0 = NowSeconds();
    for (int i = 0; i < o.gen_tokens; ++i) {
      int32_t next;
      {
        ProfileScope sp(o.profile ? &prof : nullptr, ProfOp::kSample);
        next = static_cast<int32_t>(std::max_element(logits, logits + c.n_vocab) - logits);
      }
      if (!s.kv->Reserve(seq, 8 + i + 1)) Fail("bench: the KV cache is too small");
      logits = s.Step(seq, &next, 1, 8 + i);
    }
    const double dt = NowSeconds() - t0;
    s.transformer->set_profiler(nullptr);
    decode.push_back(o.gen_tokens / dt);
    decode_time += dt;
    decode_steps += o.gen_tokens;
    s.kv->Free(seq);
  }
  const Stats ds = Summarize(decode);
  r.decode_tps = ds.median;
  r.decode_tps_min = ds.min;
  r.decode_tps_max = ds.max;
  r.decode_gbs = static_cast<double>(r.streamed_bytes) * r.decode_tps / 1e9;
  r.bandwidth_utilization = r.read_bandwidth_gbs > 0 ? r.decode_gbs / r.read_bandwidth_gbs : 0;
  r.prefill_gops = 2.0 * static_cast<double>(params) * r.prefill_tps / 1e9;
  r.compute_utilization = r.peak_int8_gops > 0 ? r.prefill_gops / r.peak_int8_gops : 0;
  if (o.profile) {
    r.measured_step_ms = decode_time / decode_steps * 1e3;
    r.profiled_step_ms = prof.Total() / decode_steps * 1e3;
    for (int op = 0; op < static_cast<int>(ProfOp::kCount); ++op) {
      BenchReport::ProfileEntry e;
      e.op = Profiler::Name(static_cast<ProfOp>(op));
      e.ms_per_step = prof.seconds[op] / decode_steps * 1e3;
      e.share = prof.seconds[op] / decode_time;
      r.profile.push_back(e);
    }
  }

  // Batched decode: `batch` sequences, one token each per step.
  if (o.batch > 1) {
    std::vector<double> batched;
    const int B = o.batch;
    for (int rep = 0; rep < o.reps; ++rep) {
      std::vector<KvManager::SeqId> ids(static_cast<size_t>(B));
      std::vector<KvView> views(static_cast<size_t>(B));
      std::vector<Transformer::BatchItem> items(static_cast<size_t>(B));
      std::vector<const float*> logits(static_cast<size_t>(B));
      std::vector<int32_t> next(static_cast<size_t>(B));
      for (int b = 0; b < B; ++b) {
        const auto prompt = random_tokens(8);
        ids[static_cast<size_t>(b)] = s.kv->Create(cap);
        if (!s.kv->Reserve(ids[static_cast<size_t>(b)], 8)) Fail("bench: the KV cache cannot hold %d sequences (raise --kv-memory)", B);
        logits[static_cast<size_t>(b)] = nullptr;
        const float* l = s.Step(ids[static_cast<size_t>(b)], prompt.data(), 8, 0);
        next[static_cast<size_t>(b)] = static_cast<int32_t>(std::max_element(l, l + c.n_vocab) - l);
      }
      const double t0 = NowSeconds();
      for (int i = 0; i < o.gen_tokens; ++i) {
        for (int b = 0; b < B; ++b) {
          const size_t k = static_cast<size_t>(b);
          if (!s.kv->Reserve(ids[k], 8 + i + 1)) Fail("bench: the KV cache cannot hold %d sequences (raise --kv-memory)", B);
          views[k] = s.kv->View(ids[k]);
          items[k] = {&next[k], 1, 8 + i, &views[k]};
        }
        s.StepBatch(items.data(), B, logits.data());
        for (int b = 0; b < B; ++b) {
          const size_t k = static_cast<size_t>(b);
          s.kv->Commit(ids[k], &next[k], 1);
          next[k] = static_cast<int32_t>(std::max_element(logits[k], logits[k] + c.n_vocab) - logits[k]);
        }
      }
      batched.push_back(static_cast<double>(B) * o.gen_tokens / (NowSeconds() - t0));
      for (auto id : ids) s.kv->Free(id);
    }
    const Stats bs = Summarize(batched);
    r.batch_decode_tps = bs.median;
    r.batch_decode_tps_min = bs.min;
    r.batch_decode_tps_max = bs.max;
  }
  r.memory = Memory();
  return r;
}

}  // namespace paddock
