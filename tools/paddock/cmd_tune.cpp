// tools/paddock/cmd_tune.cpp: `paddock tune` measures the choices that change prefill speed on
// this machine for a model's shape (threads, tokens per forward step, the batched matmuls'
// cache block) and the one that changes decode speed (which weight kinds the kernels prefetch
// in software: on some machines every kind gains, on others only the k-quants), and stores the
// best in the tune cache, which run, chat, bench and serve read.
//
// The cache is a small text file (CachePath("tune.tsv")): a header line, then one line per CPU,
// ISA and model shape. An entry written by another build (kTuneStamp) is stale and ignored; a
// file that is not a tune cache, or a malformed line, gives one warning and the defaults. No
// entry changes a result, only the speed: the kernels compute the same sums whatever the choice.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "args.h"
#include "base/cpu.h"
#include "base/stats.h"
#include "base/strings.h"
#include "commands.h"
#include "paddock/paddock.h"
#include "progress.h"

namespace paddock::cli {

namespace {

constexpr char kHeader[] = "# paddock tune cache v2";
constexpr char kHeaderV1[] = "# paddock tune cache v1";  // (no prefetch: stale as a whole)
// The build whose kernels an entry was measured with: bump with any kernel or blocking change
// that could move the best choice (older entries then count as stale).
constexpr char kTuneStamp[] = "paddock-0.1.0-k3";

constexpr int kDefaultStep = 256;
constexpr uint64_t kDefaultBlockKib = 64;
constexpr int kDecodeTokens = 64;  // decode steps per prefetch measurement

// The model's shape as the kernels see it: architecture, widths, depth and the weight types
// that hold most of its bytes.
std::string ShapeKey(const ModelInfo& m) {
  std::vector<ModelInfo::TypeCount> types = m.tensor_types;
  std::sort(types.begin(), types.end(),
            [](const auto& a, const auto& b) { return a.bytes > b.bytes; });
  std::string t;
  uint64_t total = 0, seen = 0;
  for (const auto& tc : types) total += tc.bytes;
  for (const auto& tc : types) {
    if (seen >= total * 95 / 100) break;  // the types of 95% of the bytes
    t += (t.empty() ? "" : "+") + tc.type;
    seen += tc.bytes;
  }
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s d%d l%d h%d/%d f%d v%d %s", m.arch.c_str(), m.dim, m.n_layers,
                m.n_heads, m.n_kv_heads, m.ffn_dim, m.n_vocab, t.c_str());
  return buf;
}

std::string IsaOf(const std::string& isa) {
  return isa == "auto" ? IsaName(DetectIsa()) : isa;
}

struct Entry {
  std::string stamp, cpu, isa, shape;
  TuneChoice choice;
};

// Parses one cache line; false if malformed.
bool ParseEntry(const std::string& line, Entry* e) {
  const std::vector<std::string> f = Split(line, '\t');
  if (f.size() != 10) return false;
  e->stamp = f[0];
  e->cpu = f[1];
  e->isa = f[2];
  e->shape = f[3];
  TuneChoice& c = e->choice;
  unsigned long long kib = 0;
  if (std::sscanf(f[4].c_str(), "threads=%d", &c.threads) != 1 ||
      std::sscanf(f[5].c_str(), "step=%d", &c.step_tokens) != 1 ||
      std::sscanf(f[6].c_str(), "block_kib=%llu", &kib) != 1 ||
      std::sscanf(f[7].c_str(), "prefill=%lf/%lf", &c.default_tps, &c.tuned_tps) != 2 ||
      std::sscanf(f[9].c_str(), "decode=%lf/%lf", &c.default_decode_tps, &c.tuned_decode_tps) != 2)
    return false;
  c.prefetch = -1;
  for (int i = 0; i < 3; ++i)
    if (f[8] == std::string("prefetch=") + kPrefetchNames[i]) c.prefetch = i;
  c.block_kib = kib;
  return c.threads >= 1 && c.threads <= 1024 && c.step_tokens >= 1 && c.step_tokens <= 4096 &&
         c.block_kib >= 1 && c.block_kib <= (1u << 20) && c.prefetch >= 0 &&
         std::isfinite(c.default_tps) && std::isfinite(c.tuned_tps) &&
         std::isfinite(c.default_decode_tps) && std::isfinite(c.tuned_decode_tps);
}

std::string FormatEntry(const Entry& e) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "threads=%d\tstep=%d\tblock_kib=%llu\tprefill=%.2f/%.2f\tprefetch=%s\tdecode=%.2f/"
                "%.2f",
                e.choice.threads, e.choice.step_tokens,
                static_cast<unsigned long long>(e.choice.block_kib), e.choice.default_tps,
                e.choice.tuned_tps, kPrefetchNames[e.choice.prefetch], e.choice.default_decode_tps,
                e.choice.tuned_decode_tps);
  return e.stamp + "\t" + e.cpu + "\t" + e.isa + "\t" + e.shape + "\t" + buf;
}

// Every well-formed entry of the cache. A file that exists but is not a tune cache, or has a
// malformed line, gives one warning (the bad lines are skipped; `paddock tune` rewrites it).
std::vector<Entry> ReadCache(bool warn) {
  const std::string path = CachePath("tune.tsv");
  std::ifstream in(path);
  std::vector<Entry> out;
  if (!in) return out;
  std::string line;
  if (!std::getline(in, line) || line != kHeader) {
    if (line == kHeaderV1) {  // an older build's cache: stale, rewritten by paddock tune
      if (warn)
        std::fprintf(stderr,
                     "paddock: note: the tune cache '%s' was written by an older build; defaults "
                     "used (paddock tune measures again)\n",
                     path.c_str());
      return out;
    }
    if (warn)
      std::fprintf(stderr, "paddock: warning: '%s' is not a paddock tune cache; ignored\n",
                   path.c_str());
    return out;
  }
  int bad = 0, n = 1, first_bad = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    Entry e;
    if (ParseEntry(line, &e)) {
      out.push_back(std::move(e));
    } else if (bad++ == 0) {
      first_bad = n;
    }
  }
  if (bad > 0 && warn)
    std::fprintf(stderr,
                 "paddock: warning: the tune cache '%s' has %d malformed line(s) (first: line "
                 "%d); they are ignored\n",
                 path.c_str(), bad, first_bad);
  return out;
}

bool StoreEntry(const Entry& add) {
  const std::string path = CachePath("tune.tsv");
  std::vector<Entry> kept;
  for (Entry& e : ReadCache(false))
    if (!(e.cpu == add.cpu && e.isa == add.isa && e.shape == add.shape))
      kept.push_back(std::move(e));
  kept.push_back(add);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kHeader << "\n";
    for (const Entry& e : kept) out << FormatEntry(e) << "\n";
    if (!out) return false;
  }
  std::filesystem::rename(tmp, path, ec);  // whole or not at all
  if (ec) std::filesystem::remove(tmp, ec);
  return !ec;
}

std::vector<OptionSpec> TuneSpecs() {
  return {
      {{"-m", "--model"}, true, "model file (required)"},
      {{"-z", "--tokenizer"}, true, "tokenizer file for a llama2.c checkpoint"},
      {{"-t", "--threads"}, true, "measure only this thread count (default: each core count)"},
      {{"-p", "--n-prompt"}, true, "prefill tokens per measurement (default 512)"},
      {{"-r", "--reps"}, true, "repetitions per choice, interleaved; medians (default 3)"},
      kIsaSpec,
      {{"--device"},
       true,
       "vulkan or vulkan:N: tune the device's decode shader (its workgroup size) for the model "
       "instead of the CPU's choices"},
      {{"--dry-run"}, false, "measure and print, do not store"},
      {{"-h", "--help"}, false, "show this help"},
  };
}

struct Candidate {
  int step;
  uint64_t block_kib;
  std::vector<double> tps;
};

// Measures each candidate `reps` times, interleaved (rep outer, candidates inner), so a drift
// of the machine's speed falls on every candidate alike.
void MeasureAll(Engine& engine, int prompt, int reps, std::vector<Candidate>* cands,
                Progress* bar) {
  for (int rep = 0; rep < reps; ++rep) {
    for (Candidate& c : *cands) {
      BenchOptions bo;
      bo.prefill_only = true;
      bo.prompt_tokens = prompt;
      bo.gen_tokens = 1;  // (unused: prefill only)
      bo.reps = 1;
      bo.step_tokens = c.step;
      bo.matmul_block_bytes = c.block_kib * 1024;
      c.tps.push_back(engine.Bench(bo).prefill_tps);
      bar->Add(1);
    }
  }
}

const Candidate& Best(const std::vector<Candidate>& cands) {
  return *std::max_element(cands.begin(), cands.end(), [](const auto& a, const auto& b) {
    return Summarize(a.tps).median < Summarize(b.tps).median;
  });
}

}  // namespace

std::string CachePath(const std::string& file) {
  std::string dir;
  if (const char* d = std::getenv("PADDOCK_CACHE_DIR"); d && *d) {
    dir = d;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    dir = std::string(x) + "/paddock";
  } else {
    const char* home = std::getenv("HOME");
    dir = std::string(home && *home ? home : "/tmp") + "/.cache/paddock";
  }
  return dir + "/" + file;
}

bool LookupTune(const EngineOptions& eo, TuneChoice* out) {
  ModelInfo m;
  try {
    m = InspectModel(eo.model_path, eo.tokenizer_path);
  } catch (const Error&) {
    return false;  // the engine reports the file's problem itself
  }
  const std::string cpu = CpuModelName(), isa = IsaOf(eo.isa), shape = ShapeKey(m);
  bool stale = false;
  for (const Entry& e : ReadCache(true)) {
    if (e.cpu != cpu || e.isa != isa || e.shape != shape) continue;
    if (e.stamp != kTuneStamp) {
      stale = true;
      continue;
    }
    *out = e.choice;
    return true;
  }
  if (stale)
    std::fprintf(stderr,
                 "paddock: note: the tune cache's entry for this model was measured by another "
                 "build; defaults used (paddock tune -m %s measures again)\n",
                 eo.model_path.c_str());
  return false;
}

void ApplyDeviceTune(EngineOptions* eo);

void ApplyTuneCache(const Args& args, const std::string& batch_flag, EngineOptions* eo,
                    TuneChoice* applied) {
  if (args.Has("--no-tune")) return;
  ApplyDeviceTune(eo);
  TuneChoice c;
  if (!LookupTune(*eo, &c)) return;
  if (!args.Has("-t")) eo->threads = c.threads;
  if (batch_flag.empty() || !args.Has(batch_flag)) eo->max_batch = c.step_tokens;
  eo->forward.matmul_block_bytes = c.block_kib * 1024;
  if (!args.Has("--prefetch") && !args.Has("--no-prefetch")) {
    eo->prefetch = c.prefetch != 0;
    eo->prefetch_all = c.prefetch == 2;
  }
  std::fprintf(stderr,
               "paddock: tuned for this machine: %d threads, %d tokens per step, %llu KiB matmul "
               "blocks, prefetch %s (prefill %.1f -> %.1f tok/s, decode %.1f -> %.1f when "
               "measured; --no-tune: defaults)\n",
               args.Has("-t") ? eo->threads : c.threads, eo->max_batch,
               static_cast<unsigned long long>(c.block_kib), PrefetchName(*eo), c.default_tps,
               c.tuned_tps, c.default_decode_tps, c.tuned_decode_tps);
  if (applied != nullptr) *applied = c;
}

namespace {

// What tune measures: the flags, checked before the model is inspected.
struct TunePlan {
  EngineOptions eo;
  int prompt = 512, reps = 3;
  std::vector<int> thread_counts;
  std::vector<uint64_t> blocks = {16, 32, 64, 128, 256, 1024};  // KiB
  std::vector<int> steps;
};

TunePlan ReadTuneFlags(const Args& args) {
  TunePlan p;
  try {
    p.eo.model_path = args.Str("-m");
    p.eo.tokenizer_path = args.Str("-z");
    p.eo.isa = IsaArg(args);
    ParseIsa(p.eo.isa);
    p.prompt = static_cast<int>(args.Int("-p", 512, 16, 1 << 16));
    p.reps = static_cast<int>(args.Int("-r", 3, 1, 100));
    if (args.Has("-t")) {
      p.thread_counts.push_back(static_cast<int>(args.Int("-t", 0, 1, 1024)));
    } else {
      p.thread_counts.push_back(PhysicalCores());
      if (HardwareThreads() != PhysicalCores()) p.thread_counts.push_back(HardwareThreads());
    }
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  for (int s : {64, 128, 256, 512})
    if (s <= p.prompt) p.steps.push_back(s);
  if (std::find(p.steps.begin(), p.steps.end(), p.prompt) == p.steps.end() && p.prompt < 512)
    p.steps.push_back(p.prompt);  // one step for the whole prompt
  return p;
}

// Decode with each prefetch choice (off, auto, all), interleaved: the medians.
std::array<double, 3> MeasurePrefetch(Engine& engine, int reps, Progress* bar) {
  std::vector<double> dec[3];
  for (int rep = 0; rep < reps; ++rep) {
    for (int pf = 0; pf < 3; ++pf) {
      BenchOptions bo;
      bo.decode_only = true;
      bo.prompt_tokens = 8;
      bo.gen_tokens = kDecodeTokens;
      bo.reps = 1;
      bo.prefetch = pf;
      dec[pf].push_back(engine.Bench(bo).decode_tps);
      bar->Add(1);
    }
  }
  return {Summarize(dec[0]).median, Summarize(dec[1]).median, Summarize(dec[2]).median};
}

// One thread count: 1. the matmul block at the default step; 2. the step with the best block;
// 3. the defaults against the choice, interleaved once more (the figures stored); 4. the
// prefetch. *line: what was measured, for the report.
TuneChoice TuneThreads(const TunePlan& p, int threads, Progress* bar, std::string* line) {
  EngineOptions o = p.eo;
  o.threads = threads;
  o.max_batch = std::max(p.steps.back(), kDefaultStep);
  o.context = std::max(p.prompt, kDecodeTokens) + 16;
  o.kv_tokens = o.context;
  auto engine = Engine::Create(o);
  std::vector<Candidate> bc;
  for (uint64_t b : p.blocks) bc.push_back({std::min(kDefaultStep, p.prompt), b, {}});
  MeasureAll(*engine, p.prompt, p.reps, &bc, bar);
  const uint64_t block = Best(bc).block_kib;
  std::vector<Candidate> sc;
  for (int s : p.steps) sc.push_back({s, block, {}});
  MeasureAll(*engine, p.prompt, p.reps, &sc, bar);
  const int step = Best(sc).step;
  std::vector<Candidate> fin = {{std::min(kDefaultStep, p.prompt), kDefaultBlockKib, {}},
                                {step, block, {}}};
  MeasureAll(*engine, p.prompt, p.reps, &fin, bar);
  std::string l = StrFormat("  %2d threads: block (KiB):", threads);
  for (const Candidate& c : bc)
    l += StrFormat(" %llu=%.1f", static_cast<unsigned long long>(c.block_kib),
                   Summarize(c.tps).median);
  l += "\n              step (tokens):";
  for (const Candidate& c : sc) l += StrFormat(" %d=%.1f", c.step, Summarize(c.tps).median);
  const double dflt = Summarize(fin[0].tps).median, chosen = Summarize(fin[1].tps).median;
  l += StrFormat(
      "\n              default (256 tokens, 64 KiB) %.1f tok/s, chosen (%d, %llu KiB) %.1f tok/s: "
      "%.3fx",
      dflt, step, static_cast<unsigned long long>(block), chosen, chosen / dflt);
  const std::array<double, 3> dec = MeasurePrefetch(*engine, p.reps, bar);
  int prefetch = 1;
  for (int pf = 0; pf < 3; ++pf)
    if (dec[pf] > dec[prefetch]) prefetch = pf;
  // A choice must beat the defaults to be kept (else the defaults are stored: noise is no
  // reason to change anything).
  if (dec[prefetch] < dec[1] * 1.02) prefetch = 1;
  l += StrFormat(
      "\n              decode (%d tokens), prefetch: off=%.1f auto=%.1f all=%.1f; chosen: %s",
      kDecodeTokens, dec[0], dec[1], dec[2], kPrefetchNames[prefetch]);
  *line = l;
  TuneChoice c{threads, step, block, dflt, chosen, prefetch, dec[1], dec[prefetch]};
  if (c.tuned_tps < c.default_tps * 1.01) {
    c.step_tokens = kDefaultStep;
    c.block_kib = kDefaultBlockKib;
    c.tuned_tps = c.default_tps;
  }
  return c;
}

}  // namespace

namespace {

// The device tune cache (CachePath("tune-device.tsv")): a header line, then one line per device
// (its name and driver), model shape and build: the matrix-vector workgroup chosen and the
// decode rates measured for the default (64) and for it.
constexpr char kDeviceHeader[] = "# paddock device tune cache v1";
constexpr char kDeviceStamp[] = "paddock-0.1.0-vk1";

struct DeviceEntry {
  std::string stamp, device, shape;
  uint32_t wg = 64;
  double default_tps = 0, tuned_tps = 0;
};

std::string DeviceKey(const std::string& device) {
  const std::string id = StrFormat("vulkan:%d", VulkanDeviceIndex(device));
  for (const DeviceInfo& d : ListDevices())
    if (d.id == id) return d.name + " | " + d.driver;
  return "";
}

std::vector<DeviceEntry> ReadDeviceCache() {
  std::vector<DeviceEntry> out;
  std::ifstream in(CachePath("tune-device.tsv"));
  std::string line;
  if (!std::getline(in, line) || line != kDeviceHeader) return out;
  while (std::getline(in, line)) {
    const std::vector<std::string> f = Split(line, '\t');
    if (f.size() != 6) continue;
    DeviceEntry e{f[0], f[1], f[2]};
    e.wg = static_cast<uint32_t>(std::strtoul(f[3].c_str(), nullptr, 10));
    e.default_tps = std::strtod(f[4].c_str(), nullptr);
    e.tuned_tps = std::strtod(f[5].c_str(), nullptr);
    if (e.wg >= 32 && e.wg <= 1024) out.push_back(e);
  }
  return out;
}

bool StoreDeviceEntry(const DeviceEntry& add) {
  const std::string path = CachePath("tune-device.tsv");
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kDeviceHeader << "\n";
    for (const DeviceEntry& e : ReadDeviceCache())
      if (!(e.device == add.device && e.shape == add.shape))
        out << StrFormat("%s\t%s\t%s\t%u\t%.3f\t%.3f\n", e.stamp.c_str(), e.device.c_str(),
                         e.shape.c_str(), e.wg, e.default_tps, e.tuned_tps);
    out << StrFormat("%s\t%s\t%s\t%u\t%.3f\t%.3f\n", add.stamp.c_str(), add.device.c_str(),
                     add.shape.c_str(), add.wg, add.default_tps, add.tuned_tps);
    if (!out) return false;
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
  return !ec;
}

// tune --device: decode with each matrix-vector workgroup (multiples of the subgroup, 32 to
// 256), interleaved, medians; a size is kept only if it beats the default's median.
int TuneDevice(const Args& args, const TunePlan& p, const ModelInfo& mi) {
  EngineOptions eo = p.eo;
  eo.device = args.Str("--device");
  const std::string key = DeviceKey(eo.device);
  uint32_t sub = 32;
  for (const DeviceInfo& d : ListDevices())
    if (d.id == StrFormat("vulkan:%d", VulkanDeviceIndex(eo.device)))
      sub = std::max(1u, d.subgroup);
  std::vector<uint32_t> sizes;
  for (uint32_t wg : {32u, 64u, 128u, 256u})
    if (wg % sub == 0) sizes.push_back(wg);
  std::fprintf(stderr, "paddock: tuning %s (%s) on %s: workgroups of", eo.model_path.c_str(),
               ShapeKey(mi).c_str(), key.c_str());
  for (uint32_t wg : sizes) std::fprintf(stderr, " %u", wg);
  std::fprintf(stderr, ", %d interleaved repetitions\n", p.reps);
  auto engine = Engine::Create(eo);
  Progress bar("tune", static_cast<double>(p.reps * sizes.size()), "runs");
  std::vector<std::vector<double>> tps(sizes.size());
  for (int rep = 0; rep < p.reps; ++rep) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      BenchOptions bo;
      bo.decode_only = true;
      bo.prompt_tokens = 8;
      bo.gen_tokens = kDecodeTokens;
      bo.reps = 1;
      bo.device_matvec_wg = sizes[i];
      tps[i].push_back(engine->Bench(bo).decode_tps);
      bar.Add(1);
    }
  }
  bar.Finish();
  DeviceEntry e{kDeviceStamp, key, ShapeKey(mi)};
  std::printf("decode tokens/s, medians of %d interleaved runs:\n", p.reps);
  for (size_t i = 0; i < sizes.size(); ++i) {
    const double m = Summarize(tps[i]).median;
    std::printf("  workgroup %4u: %.2f\n", sizes[i], m);
    if (sizes[i] == 64) e.default_tps = m;
    if (m > e.tuned_tps) {
      e.tuned_tps = m;
      e.wg = sizes[i];
    }
  }
  if (e.tuned_tps <= e.default_tps) {  // (the default: noise is no reason to change anything)
    e.wg = 64;
    e.tuned_tps = e.default_tps;
  }
  std::printf("chosen: workgroup %u (decode %.2f tok/s; the default 64: %.2f)\n", e.wg, e.tuned_tps,
              e.default_tps);
  if (args.Has("--dry-run")) return 0;
  if (!StoreDeviceEntry(e)) {
    std::fprintf(stderr, "paddock: warning: cannot write '%s'; nothing stored\n",
                 CachePath("tune-device.tsv").c_str());
    return 0;
  }
  std::fprintf(stderr,
               "paddock: stored in %s (run, chat, bench and serve on this device read it)\n",
               CachePath("tune-device.tsv").c_str());
  return 0;
}

}  // namespace

// The device tune cache's choice for this device and model, into eo (nothing when none).
void ApplyDeviceTune(EngineOptions* eo) {
  if (VulkanDeviceIndex(eo->device) < 0) return;
  ModelInfo m;
  try {
    m = InspectModel(eo->model_path, eo->tokenizer_path);
  } catch (const Error&) {
    return;
  }
  const std::string key = DeviceKey(eo->device), shape = ShapeKey(m);
  for (const DeviceEntry& e : ReadDeviceCache()) {
    if (e.device != key || e.shape != shape || e.stamp != kDeviceStamp) continue;
    eo->forward.device_matvec_wg = e.wg;
    std::fprintf(stderr,
                 "paddock: tuned for this device: matrix-vector workgroup %u (decode %.1f -> "
                 "%.1f tok/s when measured; --no-tune: defaults)\n",
                 e.wg, e.default_tps, e.tuned_tps);
    return;
  }
}

int CmdTune(int argc, char** argv) {
  const auto specs = TuneSpecs();
  Args args = [&] {
    try {
      return Args("tune", specs, argc, argv);
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
  }();
  if (args.Has("--help")) {
    std::fputs(Usage("tune", "-m MODEL [-p 512] [-r 3] [-t THREADS] [--dry-run]", specs).c_str(),
               stdout);
    return 0;
  }
  if (!args.positional().empty())
    throw UsageError("unexpected argument '" + args.positional()[0] + "'");
  if (!args.Has("-m")) throw UsageError("tune needs a model: -m MODEL");
  const TunePlan p = ReadTuneFlags(args);
  const ModelInfo mi = InspectModel(p.eo.model_path, p.eo.tokenizer_path);
  if (args.Has("--device")) {
    try {
      if (VulkanDeviceIndex(args.Str("--device")) < 0)
        throw UsageError("tune --device is for a Vulkan device (the CPU is tuned without it)");
    } catch (const UsageError&) {
      throw;
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
    return TuneDevice(args, p, mi);
  }
  if (p.prompt + 16 > mi.trained_context)
    throw UsageError("-p " + std::to_string(p.prompt) + " exceeds the model's context of " +
                     std::to_string(mi.trained_context));
  const double runs = static_cast<double>(p.thread_counts.size() * p.reps *
                                          (p.blocks.size() + p.steps.size() + 2 + 3));
  std::fprintf(stderr,
               "paddock: tuning %s (%s) on %s: %zu thread count(s), %d-token prefills, %d "
               "interleaved repetitions\n",
               p.eo.model_path.c_str(), ShapeKey(mi).c_str(), CpuModelName().c_str(),
               p.thread_counts.size(), p.prompt, p.reps);
  Progress bar("tune", runs, "runs");
  Entry best;
  best.choice.tuned_tps = -1;
  std::vector<std::string> lines(p.thread_counts.size());
  for (size_t i = 0; i < p.thread_counts.size(); ++i) {
    const TuneChoice c = TuneThreads(p, p.thread_counts[i], &bar, &lines[i]);
    if (c.tuned_tps > best.choice.tuned_tps) best.choice = c;
  }
  bar.Finish();
  std::printf("tokens/s, medians of %d interleaved runs (prefill: %d tokens):\n", p.reps, p.prompt);
  for (const std::string& l : lines) std::printf("%s\n", l.c_str());
  best.stamp = kTuneStamp;
  best.cpu = CpuModelName();
  best.isa = IsaOf(p.eo.isa);
  best.shape = ShapeKey(mi);
  std::printf(
      "chosen: %d threads, %d tokens per step, %llu KiB matmul blocks (prefill %.1f tok/s), "
      "prefetch %s (decode %.1f tok/s)\n",
      best.choice.threads, best.choice.step_tokens,
      static_cast<unsigned long long>(best.choice.block_kib), best.choice.tuned_tps,
      kPrefetchNames[best.choice.prefetch], best.choice.tuned_decode_tps);
  if (args.Has("--dry-run")) return 0;
  if (StoreEntry(best)) {
    std::fprintf(stderr, "paddock: stored in %s (run, chat, bench and serve read it)\n",
                 CachePath("tune.tsv").c_str());
  } else {
    std::fprintf(stderr, "paddock: warning: cannot write the tune cache '%s'; nothing stored\n",
                 CachePath("tune.tsv").c_str());
  }
  return 0;
}

}  // namespace paddock::cli
