// paddock bench: prefill / decode / batched decode throughput against this machine's measured
// bandwidth and int8 peak.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "args.h"
#include "base/cpu.h"
#include "base/strings.h"
#include "base/timer.h"
#include "commands.h"
#include "kernel_bench.h"
#include "paddock/paddock.h"
#include "paddock/service.h"
#include "progress.h"
#include "svg.h"

namespace paddock::cli {

void AddKvOptions(const Args& args, EngineOptions* eo);
void AddLoraOption(const Args& args, EngineOptions* eo);   // cmd_run.cpp
void AddSpecOptions(const Args& args, EngineOptions* eo);  // cmd_run.cpp
extern const std::vector<OptionSpec> kSpecSpecs;           // cmd_run.cpp
extern const std::vector<OptionSpec> kKvSpecs;
extern const OptionSpec kLoraSpec;  // cmd_run.cpp
void AddTuningOptions(const Args& args, EngineOptions* eo);
extern const std::vector<OptionSpec> kTuningSpecs;
void AddTraceOption(const Args& args, EngineOptions* eo);  // cmd_run.cpp
extern const OptionSpec kTraceSpec;

namespace {

std::vector<OptionSpec> BenchSpecs() {
  std::vector<OptionSpec> s = {
      {{"-m", "--model"}, true, "model file (required)"},
      {{"-z", "--tokenizer"}, true, "tokenizer file for a llama2.c checkpoint"},
      {{"-t", "--threads"}, true, "threads (default: one per physical core)"},
      {{"-p", "--n-prompt"}, true, "prefill tokens (default 512)"},
      {{"-n", "--n-gen"}, true, "decode steps (default 128)"},
      {{"-b", "--batch"}, true, "also decode this many sequences together (default 1)"},
      {{"-d", "--depth"},
       true,
       "context each decoding sequence holds before the decode steps, its own prefilled tokens "
       "(default 8): decode at a long context"},
      {{"-r", "--reps"}, true, "repetitions; medians are reported (default 3)"},
      {{"--mmproj"}, true, "a vision projector (mmproj GGUF) for the model: with --image"},
      {{"--image"},
       true,
       "measure the vision encoder instead: this image's preprocessing and encode time (every "
       "tile encoded afresh each repetition), tokens per image and per second"},
      {{"--image-bf16"},
       false,
       "with --image: the projector's F16 matrices on the BF16 dot product"},
      {{"--embed"},
       true,
       "measure embeddings instead: N:L, N passages of L tokens each (e.g. 256:128) in one "
       "request, packed into shared steps; passages/s and tokens/s (medians of -r)"},
      {{"-c", "--ctx"}, true, "context (default: prompt + steps + 16)"},
      {{"--ubatch"}, true, "tokens per forward step (default 256)"},
      kIsaSpec,
      {{"--json"}, false, "print one JSON object"},
      {{"--profile"}, false, "per-operator shares of the decode step and of a prefill"},
      {{"--sweep-batch"},
       true,
       "decode throughput and per-sequence latency at each batch size, e.g. 1,2,4,8,16,32,64 "
       "(ascending, at most 256): the knee is reported and remembered for serve's --max-running"},
      {{"--chart"}, true, "with --sweep-batch: write the sweep as an SVG chart to this file"},
      {{"--kernels"},
       false,
       "no model: one core's GEMV streaming rate per weight layout, with and without prefetch (-r "
       "rounds, default 9)"},
      {{"-h", "--help"}, false, "show this help"},
  };
  s.insert(s.end(), kKvSpecs.begin(), kKvSpecs.end());
  s.push_back(kLoraSpec);
  s.insert(s.end(), kSpecSpecs.begin(), kSpecSpecs.end());
  s.insert(s.end(), kTuningSpecs.begin(), kTuningSpecs.end());
  s.insert(s.end(), PipelineSpecs().begin(), PipelineSpecs().end());
  s.push_back(kTraceSpec);
  return s;
}

void PrintJson(const BenchReport& r) {
  std::printf(
      "{\"isa\": \"%s\", \"bf16_prefill\": %s, \"threads\": %d, \"batch\": %d, "
      "\"prompt_tokens\": %d, \"gen_tokens\": %d, \"depth\": %d, \"reps\": %d, ",
      r.isa.c_str(), r.bf16_prefill ? "true" : "false", r.threads, r.batch, r.prompt_tokens,
      r.gen_tokens, r.depth, r.reps);
  std::printf(
      "\"prefill_tokens_per_s\": %.3f, \"prefill_tokens_per_s_min\": %.3f, "
      "\"prefill_tokens_per_s_max\": %.3f, ",
      r.prefill_tps, r.prefill_tps_min, r.prefill_tps_max);
  std::printf(
      "\"decode_tokens_per_s\": %.3f, \"decode_tokens_per_s_min\": %.3f, "
      "\"decode_tokens_per_s_max\": %.3f, ",
      r.decode_tps, r.decode_tps_min, r.decode_tps_max);
  std::printf(
      "\"batch_decode_tokens_per_s\": %.3f, \"batch_decode_tokens_per_s_min\": %.3f, "
      "\"batch_decode_tokens_per_s_max\": %.3f, ",
      r.batch_decode_tps, r.batch_decode_tps_min, r.batch_decode_tps_max);
  std::printf(
      "\"device\": \"%s\", "
      "\"streamed_bytes_per_token\": %llu, \"read_bandwidth_gb_s\": %.3f, \"decode_gb_s\": %.3f, "
      "\"bandwidth_utilization\": %.4f, \"experts\": %d, \"experts_used\": %d, ",
      r.device.empty() ? "cpu" : r.device.c_str(), (unsigned long long)r.streamed_bytes,
      r.read_bandwidth_gbs, r.decode_gbs, r.bandwidth_utilization, r.n_experts, r.n_experts_used);
  std::printf("\"prefill_gops\": %.2f, \"peak_int8_gops\": %.2f, \"compute_utilization\": %.4f, ",
              r.prefill_gops, r.peak_int8_gops, r.compute_utilization);
  std::printf("\"bandwidth_utilization_paired\": %.4f, \"compute_utilization_paired\": %.4f, ",
              r.bandwidth_utilization_paired, r.compute_utilization_paired);
  std::printf("\"peak_tile_gops\": %.2f, \"tile_utilization\": %.4f, ", r.peak_tile_gops,
              r.tile_utilization);
  std::printf(
      "\"memory\": {\"weights\": %llu, \"kv_allocated\": %llu, \"kv_bytes_per_token\": %llu, "
      "\"scratch\": %llu}",
      (unsigned long long)r.memory.weight_bytes, (unsigned long long)r.memory.kv_allocated_bytes,
      (unsigned long long)r.memory.kv_bytes_per_token, (unsigned long long)r.memory.scratch_bytes);
  if (!r.profile.empty()) {
    std::printf(
        ", \"profile\": {\"measured_step_ms\": %.4f, \"profiled_step_ms\": %.4f, \"ops\": [",
        r.measured_step_ms, r.profiled_step_ms);
    for (size_t i = 0; i < r.profile.size(); ++i) {
      std::printf("%s{\"op\": \"%s\", \"ms_per_step\": %.4f, \"share\": %.4f}", i ? ", " : "",
                  r.profile[i].op.c_str(), r.profile[i].ms_per_step, r.profile[i].share);
    }
    std::printf("]}");
  }
  if (!r.prefill_profile.empty()) {
    std::printf(", \"prefill_profile\": {\"measured_ms\": %.4f, \"profiled_ms\": %.4f, \"ops\": [",
                r.prefill_measured_ms, r.prefill_profiled_ms);
    for (size_t i = 0; i < r.prefill_profile.size(); ++i) {
      std::printf("%s{\"op\": \"%s\", \"ms\": %.4f, \"share\": %.4f}", i ? ", " : "",
                  r.prefill_profile[i].op.c_str(), r.prefill_profile[i].ms_per_step,
                  r.prefill_profile[i].share);
    }
    std::printf("]}");
  }
  if (r.tune.step_tokens > 0) {
    std::printf(
        ", \"tune\": {\"step_tokens\": %d, \"matmul_block_bytes\": %llu, \"prefetch\": \"%s\", "
        "\"default_prefill_tokens_per_s\": %.3f, \"tuned_prefill_tokens_per_s\": %.3f, "
        "\"default_decode_tokens_per_s\": %.3f, \"tuned_decode_tokens_per_s\": %.3f}",
        r.tune.step_tokens, (unsigned long long)r.tune.matmul_block_bytes,
        kPrefetchNames[r.tune.prefetch], r.tune.default_tps, r.tune.tuned_tps,
        r.tune.default_decode_tps, r.tune.tuned_decode_tps);
  }
  if (!r.verify_cost.empty()) {
    std::printf(", \"verify_cost\": [");
    for (size_t k = 0; k < r.verify_cost.size(); ++k)
      std::printf("%s%.4f", k ? ", " : "", r.verify_cost[k]);
    std::printf("], \"draft_cost\": %.4f, \"speculative\": [", r.draft_cost);
    for (size_t i = 0; i < r.spec.size(); ++i) {
      const auto& x = r.spec[i];
      std::printf(
          "%s{\"workload\": \"%s\", \"plain_tokens_per_s\": %.3f, \"spec_tokens_per_s\": %.3f, "
          "\"drafted\": %d, \"acceptance\": %.4f}",
          i ? ", " : "", x.workload.c_str(), x.plain_tps, x.spec_tps, x.drafted, x.acceptance);
    }
    std::printf("]");
  }
  std::printf("}\n");
}

// bench --tune: the tuned settings against the defaults, interleaved.
void PrintTuned(const BenchReport& r) {
  std::printf(
      "tuned vs default prefill %d (interleaved, medians of %d): %.2f tok/s with %d-token "
      "steps, %llu KiB blocks and prefetch %s, %.2f with the defaults (256, 64 KiB, auto): "
      "%.3fx\n",
      r.prompt_tokens, r.reps, r.tune.tuned_tps, r.tune.step_tokens,
      (unsigned long long)(r.tune.matmul_block_bytes / 1024), kPrefetchNames[r.tune.prefetch],
      r.tune.default_tps, r.tune.default_tps > 0 ? r.tune.tuned_tps / r.tune.default_tps : 0.0);
  std::printf(
      "tuned vs default decode %d (interleaved, medians of %d): %.2f tok/s, %.2f with "
      "the defaults: %.3fx\n",
      r.gen_tokens, r.reps, r.tune.tuned_decode_tps, r.tune.default_decode_tps,
      r.tune.default_decode_tps > 0 ? r.tune.tuned_decode_tps / r.tune.default_decode_tps : 0.0);
}

// The operator profiles and the speculative decoding figures, when measured.
void PrintProfiles(const BenchReport& r) {
  if (!r.profile.empty()) {
    std::printf("decode step profile (%.3f ms measured, %.3f ms in operators):\n",
                r.measured_step_ms, r.profiled_step_ms);
    for (const auto& e : r.profile)
      std::printf("  %-34s %9.4f ms %6.1f%%\n", e.op.c_str(), e.ms_per_step, 100 * e.share);
  }
  if (!r.prefill_profile.empty()) {
    std::printf("prefill %d profile (%.1f ms measured, %.1f ms in operators):\n", r.prompt_tokens,
                r.prefill_measured_ms, r.prefill_profiled_ms);
    for (const auto& e : r.prefill_profile)
      std::printf("  %-34s %9.2f ms %6.1f%%\n", e.op.c_str(), e.ms_per_step, 100 * e.share);
  }
  if (!r.verify_cost.empty()) {
    std::printf("verification cost, a forward of 1 + k tokens relative to one:");
    for (size_t k = 0; k < r.verify_cost.size(); ++k)
      std::printf(" k=%zu %.2f", k, r.verify_cost[k]);
    std::printf("\n");
    if (r.draft_cost > 0) std::printf("drafting one token: %.2f of a decode step\n", r.draft_cost);
    for (const auto& x : r.spec) {
      std::printf(
          "speculative greedy decode, %-9s prompt: %8.2f tok/s vs %8.2f plain (%.2fx), "
          "acceptance %.0f%% of %d drafted\n",
          x.workload.c_str(), x.spec_tps, x.plain_tps,
          x.plain_tps > 0 ? x.spec_tps / x.plain_tps : 0, 100 * x.acceptance, x.drafted);
    }
  }
}

void PrintTable(const std::string& model, const BenchReport& r) {
  if (!r.device.empty()) {  // a device backend: its read bandwidth is the roofline
    std::printf("model %s, on %s\n", model.c_str(), r.device.c_str());
    std::printf("device: read bandwidth %.1f GB/s (measured now)\n", r.read_bandwidth_gbs);
  } else {
    std::printf("model %s, %d threads, %s kernels%s\n", model.c_str(), r.threads, r.isa.c_str(),
                r.bf16_prefill ? ", the prompt on bf16 tiles" : "");
    std::printf("machine: read bandwidth %.1f GB/s, int8 peak %.0f GOPS%s (measured now)\n",
                r.read_bandwidth_gbs, r.peak_int8_gops,
                r.peak_tile_gops > 0
                    ? StrFormat(" (dot products), AMX tile peak %.0f GOPS (k = 32 products)",
                                r.peak_tile_gops)
                          .c_str()
                    : "");
  }
  std::printf("%-28s %12s %12s %12s\n", "test", "tok/s", "min", "max");
  std::printf("%-28s %12.2f %12.2f %12.2f\n", StrFormat("prefill %d", r.prompt_tokens).c_str(),
              r.prefill_tps, r.prefill_tps_min, r.prefill_tps_max);
  const std::string at = r.depth != BenchOptions().depth ? StrFormat(" @ %d", r.depth) : "";
  std::printf("%-28s %12.2f %12.2f %12.2f\n",
              StrFormat("decode %d%s", r.gen_tokens, at.c_str()).c_str(), r.decode_tps,
              r.decode_tps_min, r.decode_tps_max);
  if (r.batch > 1) {
    std::printf("%-28s %12.2f %12.2f %12.2f\n",
                StrFormat("decode %d x %d sequences%s", r.gen_tokens, r.batch, at.c_str()).c_str(),
                r.batch_decode_tps, r.batch_decode_tps_min, r.batch_decode_tps_max);
  }
  std::printf(
      "decode streams %s per token%s: %.1f GB/s, %.0f%% of the measured bandwidth\n",
      FormatBytes(r.streamed_bytes).c_str(),
      r.n_experts > 0
          ? StrFormat(" (the %d of %d experts a token uses)", r.n_experts_used, r.n_experts).c_str()
          : "",
      r.decode_gbs, 100 * r.bandwidth_utilization);
  if (r.bandwidth_utilization_paired > 0)
    std::printf("  each repetition against a read pass just before and after it: %.0f%% (median)\n",
                100 * r.bandwidth_utilization_paired);
  if (r.device.empty())
    std::printf("prefill: %.0f GOPS%s, %.0f%% of the int8 peak%s\n", r.prefill_gops,
                r.n_experts > 0 ? " over the active parameters" : "", 100 * r.compute_utilization,
                r.peak_tile_gops > 0
                    ? StrFormat(", %.0f%% of the AMX tile peak", 100 * r.tile_utilization).c_str()
                    : "");
  if (r.compute_utilization_paired > 0)
    std::printf(
        "  each repetition against an int8 peak run just before and after it: %.0f%% (median)\n",
        100 * r.compute_utilization_paired);
  if (r.tune.step_tokens > 0) PrintTuned(r);
  std::printf("memory: weights %s, KV %s (%s/token), scratch %s\n",
              FormatBytes(r.memory.weight_bytes).c_str(),
              FormatBytes(r.memory.kv_allocated_bytes).c_str(),
              FormatBytes(r.memory.kv_bytes_per_token).c_str(),
              FormatBytes(r.memory.scratch_bytes).c_str());
  PrintProfiles(r);
}

// "1,2,4": ascending positive sizes, at most 256 each (the engine's sequences per step).
std::vector<int> ParseSweep(const std::string& list) {
  std::vector<int> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || v > 256)
      throw UsageError("--sweep-batch: '" + item + "' is not a batch size from 1 to 256");
    if (!out.empty() && v <= out.back())
      throw UsageError("--sweep-batch: sizes must be ascending without repeats ('" + list + "')");
    out.push_back(static_cast<int>(v));
  }
  if (out.empty()) throw UsageError("--sweep-batch needs sizes, e.g. 1,2,4,8");
  return out;
}

// Fails (before any work) unless `path` can be written.
void CheckWritable(const std::string& flag, const std::string& path) {
  std::ofstream f(path, std::ios::app);
  if (!f) throw UsageError(flag + ": cannot write '" + path + "'");
}

void PrintSweep(const std::string& model, const BenchReport& r) {
  std::printf("model %s, %d threads, %s kernels, %d tokens per sequence, medians of %d\n",
              model.c_str(), r.threads, r.isa.c_str(), r.gen_tokens, r.reps);
  std::printf("| batch | tokens/s (all sequences) | min | max | per sequence tok/s | step ms |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (const auto& p : r.sweep)
    std::printf("| %d%s | %.1f | %.1f | %.1f | %.2f | %.2f |\n", p.batch,
                p.batch == r.knee ? " (knee)" : "", p.tps, p.tps_min, p.tps_max, p.tps / p.batch,
                p.step_ms);
  std::printf("knee: %d sequences (the smallest batch reaching 90%% of the best throughput)\n",
              r.knee);
}

void PrintSweepJson(const BenchReport& r) {
  std::printf(
      "{\"isa\": \"%s\", \"threads\": %d, \"gen_tokens\": %d, \"reps\": %d, \"knee\": %d, "
      "\"sweep\": [",
      r.isa.c_str(), r.threads, r.gen_tokens, r.reps, r.knee);
  for (size_t i = 0; i < r.sweep.size(); ++i) {
    const auto& p = r.sweep[i];
    std::printf(
        "%s{\"batch\": %d, \"tokens_per_s\": %.3f, \"min\": %.3f, \"max\": %.3f, "
        "\"step_ms\": %.4f}",
        i ? ", " : "", p.batch, p.tps, p.tps_min, p.tps_max, p.step_ms);
  }
  std::printf("]}\n");
}

std::string SweepSvg(const std::string& model, const BenchReport& r) {
  std::vector<std::string> x;
  SvgSeries tps{"tokens/s, all sequences", {}, false}, lat{"step time, ms", {}, true};
  int mark = -1;
  for (size_t i = 0; i < r.sweep.size(); ++i) {
    x.push_back(std::to_string(r.sweep[i].batch));
    tps.values.push_back(r.sweep[i].tps);
    lat.values.push_back(r.sweep[i].step_ms);
    if (r.sweep[i].batch == r.knee) mark = static_cast<int>(i);
  }
  return SvgLineChart("Batched decode: " + FileStem(model), "sequences decoding together", x,
                      "tokens/s", "ms per step (each sequence's time per token)", {tps, lat}, mark,
                      "knee: " + std::to_string(r.knee));
}

}  // namespace

// The measured knee per CPU and model file, remembered for serve (knee.tsv in the cache dir:
// $PADDOCK_CACHE_DIR, else $XDG_CACHE_HOME/paddock, else ~/.cache/paddock). A line: CPU \t
// model \t knee. A missing or unreadable cache is no knee; a malformed line is skipped.
namespace {

std::string KneeKey(const std::string& model_path) {
  struct stat st {};
  const long long size =
      stat(model_path.c_str(), &st) == 0 ? static_cast<long long>(st.st_size) : 0;
  return CpuModelName() + "\t" + FileStem(model_path) + ":" + std::to_string(size);
}

}  // namespace

int CachedKnee(const std::string& model_path) {
  std::ifstream in(CachePath("knee.tsv"));
  const std::string prefix = KneeKey(model_path) + "\t";
  std::string line;
  int knee = 0;
  while (std::getline(in, line)) {
    if (!StartsWith(line, prefix)) continue;
    const int v = std::atoi(line.c_str() + prefix.size());
    if (v >= 1 && v <= 256) knee = v;
  }
  return knee;
}

void StoreKnee(const std::string& model_path, int knee) {
  const std::string path = CachePath("knee.tsv");
  std::error_code ec;  // (a directory that cannot be made shows as the write failing below)
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  std::ifstream in(path);
  const std::string prefix = KneeKey(model_path) + "\t";
  std::string kept, line;
  while (std::getline(in, line))
    if (!StartsWith(line, prefix)) kept += line + "\n";
  std::ofstream out(path, std::ios::trunc);
  if (!out) {
    std::fprintf(stderr, "paddock: warning: cannot write the knee cache '%s'\n", path.c_str());
    return;
  }
  out << kept << prefix << knee << "\n";
}

namespace {

// The engine and the measurement from the flags (usage errors), sized for the workload.
void ReadBenchFlags(const Args& args, EngineOptions* eo, BenchOptions* bo) {
  try {
    eo->model_path = args.Str("-m");
    eo->tokenizer_path = args.Str("-z");
    eo->threads = static_cast<int>(args.Int("-t", 0, 1, 1024));
    eo->isa = IsaArg(args);
    AddTuningOptions(args, eo);
    AddTraceOption(args, eo);
    bo->prompt_tokens = static_cast<int>(args.Int("-p", 512, 1, 1 << 20));
    bo->gen_tokens = static_cast<int>(args.Int("-n", 128, 1, 1 << 20));
    bo->batch = static_cast<int>(args.Int("-b", 1, 1, 4096));
    bo->depth = static_cast<int>(args.Int("-d", bo->depth, 1, 1 << 20));
    bo->reps = static_cast<int>(args.Int("-r", 3, 1, 1000));
    bo->profile = args.Has("--profile");
    if (args.Has("--sweep-batch")) {
      bo->sweep_batch = ParseSweep(args.Str("--sweep-batch"));
      bo->batch = bo->sweep_batch.back();
      if (!args.Has("-n")) bo->gen_tokens = 64;
    } else if (args.Has("--chart")) {
      throw UsageError("--chart goes with --sweep-batch");
    }
    if (args.Has("--chart")) CheckWritable("--chart", args.Str("--chart"));
    eo->max_batch =
        static_cast<int>(args.Int("--ubatch", std::max<int64_t>(256, bo->batch), 1, 4096));
    eo->context = static_cast<int>(
        args.Int("-c", std::max(bo->prompt_tokens, bo->depth) + bo->gen_tokens + 16, 1, 1 << 24));
    AddKvOptions(args, eo);
    AddLoraOption(args, eo);
    AddSpecOptions(args, eo);
    eo->kv_tokens = std::max(bo->prompt_tokens + 16, bo->batch * (bo->depth + bo->gen_tokens + 16));
    if (eo->state_slots == 0) eo->state_slots = bo->batch + 2;  // (hybrid models: a state each)
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

// A batch sweep's report: the table (or JSON), the chart, the knee remembered for serve.
void ReportSweep(const Args& args, const std::string& model, const BenchReport& r) {
  if (args.Has("--json"))
    PrintSweepJson(r);
  else
    PrintSweep(model, r);
  if (args.Has("--chart")) {
    std::ofstream f(args.Str("--chart"), std::ios::trunc);
    f << SweepSvg(model, r);
    if (!f) throw Error("cannot write the chart '" + args.Str("--chart") + "'");
    std::fprintf(stderr, "paddock: chart written to %s\n", args.Str("--chart").c_str());
  }
  StoreKnee(model, r.knee);
  std::fprintf(stderr, "paddock: knee %d remembered for serve (%s)\n", r.knee,
               CachePath("knee.tsv").c_str());
}

int KernelBench(const Args& args) {
  int rounds = 9;
  Isa isa = DetectIsa();
  try {
    rounds = static_cast<int>(args.Int("-r", 9, 1, 1000));
    isa = ParseIsa(args.Str("--isa", "auto"));
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  return RunKernelStreamBench(isa, rounds, args.Has("--json"));
}

}  // namespace

// bench --image: the vision encoder alone, repetitions of one image's encode (medians).
int ImageBench(const Args& args, EngineOptions eo, int reps) {
  eo.mmproj = args.Str("--mmproj");
  eo.image_bf16 = args.Has("--image-bf16");
  auto engine = Engine::Create(eo);
  const std::string bytes = ReadWholeFile(args.Str("--image"), "image");
  std::shared_ptr<const PromptImages> images;
  const double t0 = NowSeconds();
  const std::vector<int32_t> ids =
      engine->TokenizeImages(kImageMarker, false, nullptr, {bytes}, &images);
  const double prep = NowSeconds() - t0;
  std::vector<double> secs;
  for (int r = 0; r < reps; ++r) secs.push_back(engine->EncodeImages(*images, true));
  std::sort(secs.begin(), secs.end());
  const double med = secs[secs.size() / 2];
  size_t tiles = 0, image_tokens = 0;
  for (const auto& t : engine->ImageEmbeddings(*images)) {
    ++tiles;
    image_tokens += t.size() / static_cast<size_t>(engine->info().dim);
  }
  std::printf("paddock bench --image: %s\n", engine->vision_info().c_str());
  std::printf(
      "image %s: decode + preprocess %.3f s; %zu tiles, %zu image tokens (%zu with "
      "the markers)\n",
      args.Str("--image").c_str(), prep, tiles, image_tokens, ids.size());
  std::printf(
      "encode: median %.3f s (min %.3f, max %.3f, %d reps, %d threads), %.1f image "
      "tokens/s\n",
      med, secs.front(), secs.back(), reps, engine->info().threads,
      med > 0 ? static_cast<double>(image_tokens) / med : 0.0);
  return 0;
}

// bench --embed N:L: N passages of L random tokens embedded as one request (the server's path:
// Service::Embed, packed into shared steps), repetitions' medians.
int EmbedBench(const Args& args, EngineOptions eo, int reps) {
  const std::string spec = args.Str("--embed");
  int n = 0, len = 0;
  char tail = 0;
  if (std::sscanf(spec.c_str(), "%d:%d%c", &n, &len, &tail) != 2 || n < 1 || n > 100000 ||
      len < 1 || len > (1 << 20))
    throw UsageError("--embed takes N:L, N passages of L tokens (e.g. 256:128), not '" + spec +
                     "'");
  const ModelInfo mi = InspectModel(eo.model_path, eo.tokenizer_path);
  const bool encoder = mi.kind != ModelKind::kGeneration;
  if (encoder && len > mi.trained_context)
    throw UsageError("--embed: passages of " + std::to_string(len) + " tokens exceed the " +
                     mi.arch + " encoder's context of " + std::to_string(mi.trained_context));
  if (encoder) {
    eo.context = 0;  // the encoder's own (each passage is one input of its context)
  } else if (eo.context < len) {
    eo.context = len;
  }
  // (An encoder's cache holds one step, the engine's own plan.)
  if (!encoder) eo.kv_tokens = std::max(eo.kv_tokens, len * std::min(n, 64) + 16);
  auto engine = Engine::Create(eo);
  const int vocab = engine->info().n_vocab;
  std::vector<std::vector<int32_t>> passages(static_cast<size_t>(n));
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (auto& p : passages) {
    p.resize(static_cast<size_t>(len));
    for (int32_t& t : p) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      t = static_cast<int32_t>(3 + x % static_cast<uint64_t>(std::max(1, vocab - 3)));
    }
  }
  ServiceOptions so;
  so.max_batch_tokens = eo.max_batch;
  auto service = Service::Create(std::move(engine), so);
  std::vector<double> secs;
  for (int r = 0; r < reps; ++r) {
    const double t0 = NowSeconds();
    const auto v =
        service->Embed(passages, mi.kind == ModelKind::kRerank ? Service::Pooling::kRank
                                                               : Service::Pooling::kMean);
    secs.push_back(NowSeconds() - t0);
    if (v.size() != passages.size()) throw Error("bench --embed: a vector is missing");
  }
  std::sort(secs.begin(), secs.end());
  const double med = secs[secs.size() / 2];
  std::printf(
      "embed %d passages of %d tokens: median %.3f s (min %.3f, max %.3f, %d reps): %.1f "
      "passages/s, %.0f tokens/s\n",
      n, len, med, secs.front(), secs.back(), reps, n / med, static_cast<double>(n) * len / med);
  return 0;
}

int CmdBench(int argc, char** argv) {
  const auto specs = BenchSpecs();
  Args args = [&] {
    try {
      return Args("bench", specs, argc, argv);
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
  }();
  if (args.Has("--help")) {
    std::fputs(
        Usage("bench",
              "-m MODEL [-t THREADS] [-p 512] [-n 128] [-b BATCH] [--json] [--profile] | --kernels",
              specs)
            .c_str(),
        stdout);
    return 0;
  }
  if (!args.positional().empty())
    throw UsageError("unexpected argument '" + args.positional()[0] + "'");
  if (args.Has("--kernels")) return KernelBench(args);
  if (!args.Has("-m")) throw UsageError("bench needs a model: -m MODEL (or --kernels)");
  EngineOptions eo;
  BenchOptions bo;
  ReadBenchFlags(args, &eo, &bo);
  // The tune cache's choices, measured against the defaults in the same run.
  TuneChoice tuned;
  ApplyTuneCache(args, "--ubatch", &eo, &tuned);
  if (tuned.threads > 0 && bo.sweep_batch.empty()) {
    bo.step_tokens = eo.max_batch;
    eo.max_batch = std::max({eo.max_batch, 256, bo.batch});
    bo.compare_defaults = true;
  }
  if (args.Has("--image") != args.Has("--mmproj"))
    throw UsageError("bench --image and --mmproj go together");
  if (args.Has("--image")) return ImageBench(args, eo, bo.reps);
  if (args.Has("--embed")) return EmbedBench(args, eo, bo.reps);
  if (!JoinPipelineIfLaunched(args, &eo, 0)) return 0;  // a stage under mpirun: done
  std::shared_ptr<Progress> load_bar;
  ShowLoadProgress(&eo, &load_bar);
  auto engine = Engine::Create(eo);
  for (const auto& w : engine->info().warnings)
    std::fprintf(stderr, "paddock: warning: %s\n", w.c_str());
  if (eo.context > engine->info().trained_context)
    throw Error("context " + std::to_string(eo.context) + " exceeds the model's trained context");
  std::unique_ptr<Progress> progress;
  if (!bo.sweep_batch.empty()) {
    const double runs = static_cast<double>(bo.reps * bo.sweep_batch.size());
    progress = std::make_unique<Progress>("sweep", runs, "runs");
    bo.on_progress = [&, runs](double f) { progress->Update(f * runs); };
  }
  const BenchReport r = engine->Bench(bo);
  if (progress) progress->Finish();
  if (!r.sweep.empty()) {
    ReportSweep(args, eo.model_path, r);
  } else if (args.Has("--json")) {
    PrintJson(r);
  } else {
    PrintTable(eo.model_path, r);
  }
  return 0;
}

}  // namespace paddock::cli
