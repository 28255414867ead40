// paddock ablate: the switch experiment in one command. A fixed workload runs with every
// optimization off, each one on alone, all on, and each one off from all on; repetitions are
// interleaved (one of every configuration per round), medians reported with their spread; each
// switch's factor alone and its share in the whole, and the product of the single factors
// against the measured total (switches that compound multiply; ones that overlap do not).
// Written as Markdown (also on standard output), JSON and an SVG chart.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "args.h"
#include "base/cpu.h"
#include "base/stats.h"
#include "base/strings.h"
#include "base/timer.h"
#include "commands.h"
#include "paddock/paddock.h"
#include "paddock/service.h"
#include "progress.h"
#include "svg.h"

namespace paddock::cli {
namespace {

// One optimization that can be switched off (EngineOptions), and whether it touches a model.
struct Switch {
  const char* name;
  const char* what;
  bool* (*field)(EngineOptions&);
  bool (*applies)(const ModelInfo&);
};

bool HasType(const ModelInfo& m, std::initializer_list<const char*> types) {
  for (const auto& t : m.tensor_types)
    for (const char* want : types)
      if (t.type == want) return true;
  return false;
}
bool Always(const ModelInfo&) {
  return true;
}
bool Integer(const ModelInfo& m) {
  return HasType(
      m, {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K", "PQ8_C", "PQ4_G32",
          "PQ4_G64", "PQ4_G128", "PQ4_G32Z", "PQ4_G64Z", "PQ4_G128Z", "PS8_C"});
}
bool Relaid(const ModelInfo& m) {
  return HasType(m, {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"});
}
bool Prefetched(const ModelInfo& m) {  // the kinds prefetched by default (kernels.h)
  return HasType(m, {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS", "MXFP4"});
}
bool Bf16(const ModelInfo& m) {
  return HasType(m, {"BF16"}) && CpuHasAvx512Bf16();
}
bool DeltaNet(const ModelInfo& m) {
  return m.arch == "qwen35" || m.arch == "qwen35moe";
}

bool Bf16Prefill(const ModelInfo& m) {  // the types with the bf16 tile GEMM (kernels.h)
  return HasType(m, {"Q8_0", "Q4_0", "Q4_K", "Q6_K", "PQ8_C", "PQ4_G32", "PQ4_G64", "PQ4_G128",
                     "PQ4_G32Z", "PQ4_G64Z", "PQ4_G128Z"}) &&
         CpuHasAmxBf16();
}

const Switch kSwitches[] = {
    {"fuse-qkv", "Q/K/V in one pass with its epilogue",
     [](EngineOptions& o) { return &o.forward.fuse_qkv; }, Always},
    {"fuse-ffn", "gate/up + SwiGLU in one pass",
     [](EngineOptions& o) { return &o.forward.fuse_ffn; }, Always},
    {"fuse-norm", "residual + norm + int8 quantization in one pass",
     [](EngineOptions& o) { return &o.forward.fuse_norm; }, Always},
    {"fuse-attn", "tiled online-softmax attention",
     [](EngineOptions& o) { return &o.forward.fuse_attn; }, Always},
    {"int8-act", "integer dot products (int8 activations)",
     [](EngineOptions& o) { return &o.forward.int8_activations; }, Integer},
    {"relayout", "weights re-laid out for the 16-row kernels at load",
     [](EngineOptions& o) { return &o.relayout_weights; }, Relaid},
    {"hugepages", "re-laid weights on 2 MiB pages", [](EngineOptions& o) { return &o.huge_pages; },
     Relaid},
    {"prefetch", "software prefetch of the weight stream",
     [](EngineOptions& o) { return &o.prefetch; }, Prefetched},
    {"bf16-dot", "bf16 products for BF16 weights (AVX-512 BF16, Arm BF16)",
     [](EngineOptions& o) { return &o.forward.bf16_dot; }, Bf16},
    {"bf16-prefill", "long prompts on the AMX-BF16 tile GEMM",
     [](EngineOptions& o) { return &o.forward.bf16_prefill; }, Bf16Prefill},
    {"prune-last", "the last layer on the logits rows only",
     [](EngineOptions& o) { return &o.forward.prune_last; }, Always},
    {"chunked-delta", "a prompt's Gated DeltaNet in chunks of 64 tokens",
     [](EngineOptions& o) { return &o.forward.chunked_delta; }, DeltaNet},
    {"prefix-cache", "KV prefix reuse across requests (serve workload)",
     [](EngineOptions& o) { return &o.prefix_cache; }, nullptr},
};

const Switch* FindSwitch(const std::string& name) {
  for (const Switch& s : kSwitches)
    if (name == s.name) return &s;
  return nullptr;
}

std::string SwitchNames() {
  std::vector<std::string> n;
  for (const Switch& s : kSwitches) n.push_back(s.name);
  n.push_back("spec");
  return Join(n, ", ");
}

struct Config {
  std::string name;
  std::vector<bool> on;  // per chosen switch
};

struct Sample {
  double ttft = 0, decode_tps = 0, e2e = 0;
};

struct Workload {
  bool serve = false;
  int prompt = 0, gen = 0, requests = 1, concurrency = 1;
};

// Random prompt tokens (fixed seed): every configuration sees the same workload.
std::vector<int32_t> Prompt(int n, int n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = 3 + static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab - 3));
  return t;
}

Sample RunSingle(Engine& engine, const Workload& w) {
  GenerateOptions go;
  go.max_tokens = w.gen;
  go.ignore_eos = true;
  go.sampling.temperature = 0;
  const GenerateResult g =
      engine.GenerateTokens(Prompt(w.prompt, engine.info().n_vocab, 7), go, {});
  Sample s;
  s.ttft = g.prompt_seconds;
  s.decode_tps = g.decode_seconds > 0 ? (g.generated_tokens - 1) / g.decode_seconds : 0;
  s.e2e = g.prompt_seconds + g.decode_seconds;
  return s;
}

// `requests` requests, `concurrency` of them running at once (the rest queued), submitted
// together: generated tokens per second over the wall time, median TTFT.
Sample RunServe(std::unique_ptr<Engine> engine, const Workload& w) {
  ServiceOptions so;
  so.max_running = w.concurrency;
  so.max_queue = w.requests;
  so.max_batch_tokens = std::min(256, engine->info().context);  // (the engine's step limit)
  auto svc = Service::Create(std::move(engine), so);
  std::vector<std::shared_ptr<RequestStream>> streams(static_cast<size_t>(w.requests));
  const double t0 = NowSeconds();
  for (int i = 0; i < w.requests; ++i) {
    RequestOptions o;
    o.generate.max_tokens = w.gen;
    o.generate.ignore_eos = true;
    o.generate.sampling.temperature = 0;
    // Prompts share a first half (a system prompt), as served traffic does.
    auto p = Prompt(w.prompt / 2, svc->engine().info().n_vocab, 11);
    auto tail = Prompt(w.prompt - w.prompt / 2, svc->engine().info().n_vocab, 100 + i);
    p.insert(p.end(), tail.begin(), tail.end());
    if (svc->Submit(p, o, &streams[static_cast<size_t>(i)]) != SubmitStatus::kAccepted)
      Fail("ablate: the service refused a request");
  }
  std::vector<double> ttft;
  int generated = 0;
  for (auto& s : streams) {
    std::string text;
    while (s->Wait(&text, 60) != RequestStream::Status::kDone) {
    }
    ttft.push_back(s->result().prompt_seconds);
    generated += s->result().generated_tokens;
  }
  Sample out;
  out.e2e = NowSeconds() - t0;
  out.decode_tps = generated / out.e2e;
  std::sort(ttft.begin(), ttft.end());
  out.ttft = ttft[ttft.size() / 2];
  svc->Shutdown(0);
  return out;
}

std::vector<OptionSpec> AblateSpecs() {
  return {
      {{"-m", "--model"}, true, "model file (required)"},
      {{"-z", "--tokenizer"}, true, "tokenizer file for a llama2.c checkpoint"},
      {{"-t", "--threads"}, true, "threads (default: one per physical core)"},
      {{"--switches"},
       true,
       "switches to measure, comma-separated (default: every one that applies to the model): " +
           SwitchNames()},
      {{"--workload"},
       true,
       "single (one request, default) or serve (requests through the batching service)"},
      {{"-p", "--prompt"},
       true,
       "prompt tokens per request (default 2000 single, 200 serve; scaled to the context)"},
      {{"-n", "--gen"},
       true,
       "generated tokens per request (default 1500 single, 80 serve; scaled to the context)"},
      {{"--requests"}, true, "serve workload: requests (default 16)"},
      {{"--concurrency"}, true, "serve workload: requests running at once (default 8)"},
      {{"-r", "--reps"}, true, "repetitions of every configuration, interleaved (default 3)"},
      {{"-o", "--output"},
       true,
       "write PREFIX.md, PREFIX.json and PREFIX.svg (default: ablate-<model>)"},
      {{"-h", "--help"}, false, "show this help"},
  };
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::trunc);
  f << text;
  if (!f) Fail("cannot write '%s'", path.c_str());
}

// What the user asked for, checked before any model is loaded, then completed from the model:
// the switches, the workload (scaled to the context), the configurations, the output prefix.
struct Plan {
  EngineOptions base;
  Workload w;
  int reps = 3;
  std::vector<const Switch*> chosen;
  bool spec_switch = false;  // speculation as one more switch (the last name)
  std::vector<std::string> names;
  std::vector<Config> configs;
  std::string prefix;
};

// Medians and spreads of one configuration's samples.
struct Row {
  Stats ttft, tps, e2e;
};

// Each switch's end-to-end factor alone (against all off) and removed (from all on), their
// product and the measured total.
struct Factors {
  std::vector<double> alone, removed;
  double product = 1, total = 1;
};

void ReadWorkload(const Args& args, Plan* p) {
  Workload& w = p->w;
  const std::string wl = args.Str("--workload", "single");
  if (wl != "single" && wl != "serve")
    throw Error("--workload must be single or serve, not '" + wl + "'");
  w.serve = wl == "serve";
  w.prompt = static_cast<int>(args.Int("-p", w.serve ? 200 : 2000, 1, 1 << 20));
  w.gen = static_cast<int>(args.Int("-n", w.serve ? 80 : 1500, 2, 1 << 20));
  w.requests = static_cast<int>(args.Int("--requests", w.serve ? 16 : 1, 1, 4096));
  w.concurrency = static_cast<int>(args.Int("--concurrency", w.serve ? 8 : 1, 1, 256));
  if (!w.serve && (args.Has("--requests") || args.Has("--concurrency")))
    throw Error("--requests and --concurrency go with --workload serve");
}

void ReadSwitches(const Args& args, Plan* p) {
  if (!args.Has("--switches")) return;
  for (const std::string& name : Split(args.Str("--switches"), ',')) {
    if (name == "spec") {
      p->spec_switch = true;
      continue;
    }
    const Switch* s = FindSwitch(name);
    if (s == nullptr) throw Error("unknown switch '" + name + "' (known: " + SwitchNames() + ")");
    if (std::find(p->chosen.begin(), p->chosen.end(), s) != p->chosen.end())
      throw Error("switch '" + name + "' given twice");
    p->chosen.push_back(s);
  }
}

// Configurations: all off, each alone, all on, each removed from all on.
std::vector<Config> Configurations(const std::vector<std::string>& names) {
  const size_t n = names.size();
  std::vector<Config> configs;
  configs.push_back({"all off", std::vector<bool>(n, false)});
  for (size_t i = 0; i < n; ++i) {
    std::vector<bool> on(n, false);
    on[i] = true;
    configs.push_back({"only " + names[i], on});
  }
  configs.push_back({"all on", std::vector<bool>(n, true)});
  if (n > 1)
    for (size_t i = 0; i < n; ++i) {
      std::vector<bool> on(n, true);
      on[i] = false;
      configs.push_back({"all but " + names[i], on});
    }
  return configs;
}

// The flags (usage errors), then the model (a bad file: exit 1), then what follows from it.
Plan MakePlan(const Args& args) {
  Plan p;
  try {
    p.base.model_path = args.Str("-m");
    p.base.tokenizer_path = args.Str("-z");
    p.base.threads = static_cast<int>(args.Int("-t", 0, 1, 1024));
    ReadWorkload(args, &p);
    p.reps = static_cast<int>(args.Int("-r", 3, 1, 100));
    ReadSwitches(args, &p);
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  const ModelInfo info = InspectModel(p.base.model_path, p.base.tokenizer_path);
  if (!args.Has("--switches")) {
    for (const Switch& s : kSwitches)
      if (s.applies != nullptr && s.applies(info)) p.chosen.push_back(&s);
    if (p.w.serve) p.chosen.push_back(FindSwitch("prefix-cache"));
  }
  if (p.chosen.empty() && !p.spec_switch) throw UsageError("ablate: no switch to measure");
  p.prefix = args.Str("-o", "ablate-" + FileStem(p.base.model_path));
  for (const char* ext : {".md", ".json", ".svg"}) {
    std::ofstream f(p.prefix + ext, std::ios::app);
    if (!f) throw UsageError("-o: cannot write '" + p.prefix + ext + "'");
  }
  // The workload scaled down to the context (at most 4096 by default), keeping its ratio.
  Workload& w = p.w;
  const int ctx = std::min(info.trained_context > 0 ? info.trained_context : 4096, 4096);
  if (w.prompt + w.gen + 1 > ctx) {
    const double f = static_cast<double>(ctx - 1) / (w.prompt + w.gen);
    std::fprintf(stderr, "paddock: workload %d + %d tokens scaled by %.3f to the context of %d\n",
                 w.prompt, w.gen, f, ctx);
    w.prompt = std::max(1, static_cast<int>(w.prompt * f));
    w.gen = std::max(2, static_cast<int>(w.gen * f));
  }
  p.base.context = w.prompt + w.gen + 1;
  p.base.kv_sequences = w.serve ? w.concurrency : 1;
  for (const Switch* s : p.chosen) p.names.push_back(s->name);
  if (p.spec_switch) p.names.push_back("spec");
  p.configs = Configurations(p.names);
  return p;
}

std::string WorkloadText(const Workload& w) {
  return StrFormat(
      "%s, %d prompt + %d generated tokens%s", w.serve ? "serve" : "one request", w.prompt, w.gen,
      w.serve ? StrFormat(", %d requests, %d at once", w.requests, w.concurrency).c_str() : "");
}

// Every configuration once per round, `reps` rounds; each configuration's medians.
std::vector<Row> Run(const Plan& p) {
  const size_t n = p.names.size();
  auto options = [&](const std::vector<bool>& on) {
    EngineOptions eo = p.base;
    for (size_t i = 0; i < p.chosen.size(); ++i) *p.chosen[i]->field(eo) = on[i];
    if (p.spec_switch) eo.spec = on[n - 1] ? "ngram" : "off";
    return eo;
  };
  std::fprintf(stderr,
               "paddock: ablate %s: %zu switches, %zu configurations x %d repetitions; "
               "workload: %s\n",
               FileStem(p.base.model_path).c_str(), n, p.configs.size(), p.reps,
               WorkloadText(p.w).c_str());
  std::vector<std::vector<Sample>> samples(p.configs.size());
  Progress bar("ablate", static_cast<double>(p.configs.size() * p.reps), "runs");
  for (int rep = 0; rep < p.reps; ++rep) {
    for (size_t c = 0; c < p.configs.size(); ++c) {
      auto engine = Engine::Create(options(p.configs[c].on));
      samples[c].push_back(p.w.serve ? RunServe(std::move(engine), p.w) : RunSingle(*engine, p.w));
      bar.Add(1);
    }
  }
  std::vector<Row> rows;
  for (const auto& s : samples) {
    std::vector<double> a, b, c;
    for (const auto& x : s) {
      a.push_back(x.ttft * 1e3);
      b.push_back(x.decode_tps);
      c.push_back(x.e2e);
    }
    rows.push_back({Summarize(a), Summarize(b), Summarize(c)});
  }
  return rows;
}

// Speed-ups: all off / configuration for times, configuration / all off for rates.
Factors FactorsOf(const std::vector<Row>& rows, size_t n) {
  const Row& off = rows[0];
  const Row& all = rows[n + 1];
  Factors f;
  for (size_t i = 0; i < n; ++i) {
    const double alone = off.e2e.median / rows[1 + i].e2e.median;
    f.alone.push_back(alone);
    f.removed.push_back(n > 1 ? rows[n + 2 + i].e2e.median / all.e2e.median : alone);
    f.product *= alone;
  }
  f.total = off.e2e.median / all.e2e.median;
  return f;
}

std::string Markdown(const Plan& p, const std::vector<Row>& rows, const Factors& f) {
  const size_t n = p.names.size();
  const Row& off = rows[0];
  const Row& all = rows[n + 1];
  const char* rate_name = p.w.serve ? "tokens/s (all requests)" : "decode tok/s";
  std::string md = StrFormat(
      "# Switch experiment: %s\n\nWorkload: %s; %d repetitions, interleaved; medians "
      "(min-max). %s, %d threads.\n\n",
      FileStem(p.base.model_path).c_str(), WorkloadText(p.w).c_str(), p.reps,
      CpuModelName().c_str(), p.base.threads > 0 ? p.base.threads : PhysicalCores());
  md += StrFormat("| configuration | TTFT ms | %s | end-to-end s | speed-up vs all off |\n",
                  rate_name);
  md += "|---|---|---|---|---|\n";
  for (size_t c = 0; c < p.configs.size(); ++c) {
    const Row& r = rows[c];
    md += StrFormat("| %s | %.1f (%.1f-%.1f) | %.2f (%.2f-%.2f) | %.3f (%.3f-%.3f) | %.3fx |\n",
                    p.configs[c].name.c_str(), r.ttft.median, r.ttft.min, r.ttft.max, r.tps.median,
                    r.tps.min, r.tps.max, r.e2e.median, r.e2e.min, r.e2e.max,
                    off.e2e.median / r.e2e.median);
  }
  md += StrFormat(
      "\n| switch | what it does | alone: end-to-end | alone: TTFT | alone: %s | removed from "
      "all on: end-to-end |\n|---|---|---|---|---|---|\n",
      rate_name);
  for (size_t i = 0; i < n; ++i) {
    const Row& r = rows[1 + i];
    const char* what = i < p.chosen.size() ? p.chosen[i]->what : "speculative decoding (n-gram)";
    md += StrFormat("| %s | %s | %.3fx | %.3fx | %.3fx | %.3fx |\n", p.names[i].c_str(), what,
                    f.alone[i], off.ttft.median / r.ttft.median, r.tps.median / off.tps.median,
                    f.removed[i]);
  }
  md += StrFormat(
      "\nAll on against all off: **%.3fx** end-to-end (TTFT %.3fx, %s %.3fx). The product of the "
      "single factors is %.3fx: %s.\n",
      f.total, off.ttft.median / all.ttft.median, rate_name, all.tps.median / off.tps.median,
      f.product,
      f.product > f.total * 1.05   ? "larger than the total (the switches overlap: they speed up "
                                     "the same time)"
      : f.product < f.total * 0.95 ? "smaller than the total (the switches compound)"
                                   : "close to the total (the switches act independently)");
  return md;
}

std::string Json(const Plan& p, const std::vector<Row>& rows, const Factors& f) {
  const Row& off = rows[0];
  std::string json = StrFormat(
      "{\"model\": \"%s\", \"workload\": \"%s\", \"prompt_tokens\": %d, \"gen_tokens\": %d, "
      "\"requests\": %d, \"concurrency\": %d, \"reps\": %d, \"configurations\": [",
      FileStem(p.base.model_path).c_str(), p.w.serve ? "serve" : "single", p.w.prompt, p.w.gen,
      p.w.requests, p.w.concurrency, p.reps);
  for (size_t c = 0; c < p.configs.size(); ++c) {
    const Row& r = rows[c];
    json += StrFormat(
        "%s{\"name\": \"%s\", \"ttft_ms\": [%.3f, %.3f, %.3f], \"tokens_per_s\": [%.3f, %.3f, "
        "%.3f], \"e2e_s\": [%.4f, %.4f, %.4f], \"speedup\": %.4f}",
        c ? ", " : "", p.configs[c].name.c_str(), r.ttft.median, r.ttft.min, r.ttft.max,
        r.tps.median, r.tps.min, r.tps.max, r.e2e.median, r.e2e.min, r.e2e.max,
        off.e2e.median / r.e2e.median);
  }
  json += "], \"switches\": [";
  for (size_t i = 0; i < p.names.size(); ++i)
    json += StrFormat("%s{\"name\": \"%s\", \"alone\": %.4f, \"removed\": %.4f}", i ? ", " : "",
                      p.names[i].c_str(), f.alone[i], f.removed[i]);
  json += StrFormat("], \"product_of_singles\": %.4f, \"total\": %.4f}\n", f.product, f.total);
  return json;
}

std::string Chart(const Plan& p, const Factors& f) {
  std::vector<std::string> labels = p.names;
  labels.push_back("product of singles");
  labels.push_back("all on (measured)");
  SvgSeries s1{"alone vs all off", f.alone, false}, s2{"removed from all on", f.removed, false};
  s1.values.push_back(f.product);
  s1.values.push_back(f.total);
  return SvgBarChart("Switch factors, end-to-end: " + FileStem(p.base.model_path), labels, {s1, s2},
                     "speed-up factor (1 = no effect)", 1.0);
}

}  // namespace

int CmdAblate(int argc, char** argv) {
  const auto specs = AblateSpecs();
  Args args = [&] {
    try {
      return Args("ablate", specs, argc, argv);
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
  }();
  if (args.Has("--help")) {
    std::fputs(
        Usage("ablate", "-m MODEL [--switches a,b] [--workload single|serve] [-r 3] [-o PREFIX]",
              specs)
            .c_str(),
        stdout);
    return 0;
  }
  if (!args.positional().empty())
    throw UsageError("unexpected argument '" + args.positional()[0] + "'");
  if (!args.Has("-m")) throw UsageError("ablate needs a model: -m MODEL");
  const Plan p = MakePlan(args);
  const std::vector<Row> rows = Run(p);
  const Factors f = FactorsOf(rows, p.names.size());
  const std::string md = Markdown(p, rows, f);
  WriteFile(p.prefix + ".md", md);
  WriteFile(p.prefix + ".json", Json(p, rows, f));
  WriteFile(p.prefix + ".svg", Chart(p, f));
  std::fputs(md.c_str(), stdout);
  std::fprintf(stderr, "paddock: written %s.md, %s.json, %s.svg\n", p.prefix.c_str(),
               p.prefix.c_str(), p.prefix.c_str());
  return 0;
}

}  // namespace paddock::cli
