// paddock bench: prefill / decode / batched decode throughput against this machine's measured
// bandwidth and int8 peak.
#include <algorithm>
#include <cstdio>
#include <string>

#include "args.h"
#include "base/strings.h"
#include "commands.h"
#include "kernel_bench.h"
#include "paddock/paddock.h"

namespace paddock::cli {

void AddKvOptions(const Args& args, EngineOptions* eo);
void AddSpecOptions(const Args& args, EngineOptions* eo);  // cmd_run.cpp
extern const std::vector<OptionSpec> kSpecSpecs;           // cmd_run.cpp
extern const std::vector<OptionSpec> kKvSpecs;
void AddTuningOptions(const Args& args, EngineOptions* eo);
extern const std::vector<OptionSpec> kTuningSpecs;

namespace {

std::vector<OptionSpec> BenchSpecs() {
  std::vector<OptionSpec> s = {
      {{"-m", "--model"}, true, "model file (required)"},
      {{"-z", "--tokenizer"}, true, "tokenizer file for a llama2.c checkpoint"},
      {{"-t", "--threads"}, true, "threads (default: one per physical core)"},
      {{"-p", "--n-prompt"}, true, "prefill tokens (default 512)"},
      {{"-n", "--n-gen"}, true, "decode steps (default 128)"},
      {{"-b", "--batch"}, true, "also decode this many sequences together (default 1)"},
      {{"-r", "--reps"}, true, "repetitions; medians are reported (default 3)"},
      {{"-c", "--ctx"}, true, "context (default: prompt + steps + 16)"},
      {{"--ubatch"}, true, "tokens per forward step (default 256)"},
      {{"--isa"}, true, "kernels: auto, scalar, avx2, avx512"},
      {{"--json"}, false, "print one JSON object"},
      {{"--profile"}, false, "per-operator shares of the decode step and of a prefill"},
      {{"--kernels"},
       false,
       "no model: one core's GEMV streaming rate per weight layout, with and without prefetch (-r "
       "rounds, default 9)"},
      {{"-h", "--help"}, false, "show this help"},
  };
  s.insert(s.end(), kKvSpecs.begin(), kKvSpecs.end());
  s.insert(s.end(), kSpecSpecs.begin(), kSpecSpecs.end());
  s.insert(s.end(), kTuningSpecs.begin(), kTuningSpecs.end());
  return s;
}

void PrintJson(const BenchReport& r) {
  std::printf(
      "{\"isa\": \"%s\", \"threads\": %d, \"batch\": %d, \"prompt_tokens\": %d, \"gen_tokens\": "
      "%d, \"reps\": %d, ",
      r.isa.c_str(), r.threads, r.batch, r.prompt_tokens, r.gen_tokens, r.reps);
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
      "\"streamed_bytes_per_token\": %llu, \"read_bandwidth_gb_s\": %.3f, \"decode_gb_s\": %.3f, "
      "\"bandwidth_utilization\": %.4f, ",
      (unsigned long long)r.streamed_bytes, r.read_bandwidth_gbs, r.decode_gbs,
      r.bandwidth_utilization);
  std::printf("\"prefill_gops\": %.2f, \"peak_int8_gops\": %.2f, \"compute_utilization\": %.4f, ",
              r.prefill_gops, r.peak_int8_gops, r.compute_utilization);
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
  if (!r.verify_cost.empty()) {
    std::printf(", \"verify_cost\": [");
    for (size_t k = 0; k < r.verify_cost.size(); ++k)
      std::printf("%s%.4f", k ? ", " : "", r.verify_cost[k]);
    std::printf("], \"speculative\": [");
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

void PrintTable(const std::string& model, const BenchReport& r) {
  std::printf("model %s, %d threads, %s kernels\n", model.c_str(), r.threads, r.isa.c_str());
  std::printf("machine: read bandwidth %.1f GB/s, int8 peak %.0f GOPS (measured now)\n",
              r.read_bandwidth_gbs, r.peak_int8_gops);
  std::printf("%-28s %12s %12s %12s\n", "test", "tok/s", "min", "max");
  std::printf("%-28s %12.2f %12.2f %12.2f\n", StrFormat("prefill %d", r.prompt_tokens).c_str(),
              r.prefill_tps, r.prefill_tps_min, r.prefill_tps_max);
  std::printf("%-28s %12.2f %12.2f %12.2f\n", StrFormat("decode %d", r.gen_tokens).c_str(),
              r.decode_tps, r.decode_tps_min, r.decode_tps_max);
  if (r.batch > 1) {
    std::printf("%-28s %12.2f %12.2f %12.2f\n",
                StrFormat("decode %d x %d sequences", r.gen_tokens, r.batch).c_str(),
                r.batch_decode_tps, r.batch_decode_tps_min, r.batch_decode_tps_max);
  }
  std::printf("decode streams %s per token: %.1f GB/s, %.0f%% of the measured bandwidth\n",
              FormatBytes(r.streamed_bytes).c_str(), r.decode_gbs, 100 * r.bandwidth_utilization);
  std::printf("prefill: %.0f GOPS, %.0f%% of the int8 peak\n", r.prefill_gops,
              100 * r.compute_utilization);
  std::printf("memory: weights %s, KV %s (%s/token), scratch %s\n",
              FormatBytes(r.memory.weight_bytes).c_str(),
              FormatBytes(r.memory.kv_allocated_bytes).c_str(),
              FormatBytes(r.memory.kv_bytes_per_token).c_str(),
              FormatBytes(r.memory.scratch_bytes).c_str());
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
    for (const auto& x : r.spec) {
      std::printf(
          "speculative greedy decode, %-9s prompt: %8.2f tok/s vs %8.2f plain (%.2fx), "
          "acceptance %.0f%% of %d drafted\n",
          x.workload.c_str(), x.spec_tps, x.plain_tps,
          x.plain_tps > 0 ? x.spec_tps / x.plain_tps : 0, 100 * x.acceptance, x.drafted);
    }
  }
}

}  // namespace

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
  if (args.Has("--kernels")) {
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
  if (!args.Has("-m")) throw UsageError("bench needs a model: -m MODEL (or --kernels)");
  EngineOptions eo;
  BenchOptions bo;
  try {
    eo.model_path = args.Str("-m");
    eo.tokenizer_path = args.Str("-z");
    eo.threads = static_cast<int>(args.Int("-t", 0, 1, 1024));
    eo.isa = args.Str("--isa", "auto");
    if (eo.isa != "auto" && eo.isa != "scalar" && eo.isa != "avx2" && eo.isa != "avx512")
      throw Error("unknown ISA '" + eo.isa + "' for --isa");
    AddTuningOptions(args, &eo);
    bo.prompt_tokens = static_cast<int>(args.Int("-p", 512, 1, 1 << 20));
    bo.gen_tokens = static_cast<int>(args.Int("-n", 128, 1, 1 << 20));
    bo.batch = static_cast<int>(args.Int("-b", 1, 1, 4096));
    bo.reps = static_cast<int>(args.Int("-r", 3, 1, 1000));
    bo.profile = args.Has("--profile");
    eo.max_batch =
        static_cast<int>(args.Int("--ubatch", std::max<int64_t>(256, bo.batch), 1, 4096));
    eo.context =
        static_cast<int>(args.Int("-c", bo.prompt_tokens + bo.gen_tokens + 16, 1, 1 << 24));
    AddKvOptions(args, &eo);
    AddSpecOptions(args, &eo);
    eo.kv_tokens = std::max(bo.prompt_tokens + 16, bo.batch * (bo.gen_tokens + 16));
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  auto engine = Engine::Create(eo);
  for (const auto& w : engine->info().warnings)
    std::fprintf(stderr, "paddock: warning: %s\n", w.c_str());
  if (eo.context > engine->info().trained_context)
    throw Error("context " + std::to_string(eo.context) + " exceeds the model's trained context");
  const BenchReport r = engine->Bench(bo);
  if (args.Has("--json"))
    PrintJson(r);
  else
    PrintTable(eo.model_path, r);
  return 0;
}

}  // namespace paddock::cli
