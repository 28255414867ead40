// paddock perplexity / paddock compare: evaluation over a text (for quantization work).
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "args.h"
#include "base/strings.h"
#include "commands.h"
#include "paddock/paddock.h"
#include "progress.h"

namespace paddock::cli {

void AddTuningOptions(const Args& args, EngineOptions* eo);  // cmd_run.cpp
extern const std::vector<OptionSpec> kTuningSpecs;

namespace {

const std::vector<OptionSpec> kEvalBaseSpecs = {
    {{"-m", "--model"},
     true,
     "model file (perplexity: one; compare: twice, reference first)",
     true},
    {{"-f", "--file"}, true, "the text to evaluate on (required)"},
    {{"--device"}, true, "where the models run: cpu, vulkan or vulkan:N (default cpu)"},
    {{"--gpu-layers"}, true, "with --device vulkan: the first N layers on the device"},
    {{"--ctx"},
     true,
     "window in tokens; the second half of each window is scored (default: model's context, at "
     "most 512)"},
    {{"--chunks"}, true, "evaluate at most this many windows (default: the whole text)"},
    {{"--bos-windows"},
     false,
     "windows of BOS + ctx-1 text tokens (Paddock's earlier scheme; default: llama.cpp's windows, "
     "the text cut every ctx tokens and each window's first token replaced by BOS)"},
    {{"--worst"}, true, "compare: how many worst positions to show (default 5)"},
    {{"-t", "--threads"}, true, "threads (default: one per physical core)"},
    {{"--json"}, false, "print one JSON object"},
    {{"-h", "--help"}, false, "show this help"},
};

// With the forward pass's switches (--no-bf16-prefill, --no-int8-act, ...): what a switch
// does to the scores, and --isa (built on first use: kTuningSpecs and kIsaSpec are another
// file's).
const std::vector<OptionSpec>& EvalSpecs() {
  static const std::vector<OptionSpec> specs = [] {
    std::vector<OptionSpec> s = kEvalBaseSpecs;
    s.push_back(kIsaSpec);
    s.insert(s.end(), kTuningSpecs.begin(), kTuningSpecs.end());
    return s;
  }();
  return specs;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read text file '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Json(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (c < 0x20) {
      o += StrFormat("\\u%04x", c);
      continue;
    }
    o.push_back(static_cast<char>(c));
  }
  return o + "\"";
}

std::unique_ptr<Engine> Load(const std::string& path, int threads, int ctx, const Args& args) {
  EngineOptions eo;
  eo.model_path = path;
  eo.device = args.Str("--device", "cpu");
  if (args.Has("--gpu-layers"))
    eo.gpu_layers = static_cast<int>(args.Int("--gpu-layers", -1, 1, 1 << 16));
  eo.threads = threads;
  eo.context = ctx;
  eo.isa = IsaArg(args);
  AddTuningOptions(args, &eo);
  std::shared_ptr<Progress> bar;
  ShowLoadProgress(&eo, &bar);
  return Engine::Create(eo);
}

}  // namespace

int CmdEval(bool compare, int argc, char** argv) {
  const char* name = compare ? "compare" : "perplexity";
  Args args(name, EvalSpecs(), argc, argv);
  if (args.Has("-h")) {
    std::fputs(
        Usage(name,
              compare ? "-m REFERENCE -m OTHER -f TEXT [options]" : "-m MODEL -f TEXT [options]",
              EvalSpecs())
            .c_str(),
        stdout);
    return 0;
  }
  const std::vector<std::string> models = args.All("-m");
  if (models.size() != (compare ? 2u : 1u))
    throw UsageError(std::string(name) +
                     (compare ? " needs two models: -m A -m B" : " needs one model: -m MODEL"));
  if (!args.Has("-f")) throw UsageError(std::string(name) + " needs a text: -f FILE");
  if (!args.positional().empty())
    throw UsageError(std::string(name) + ": unexpected argument '" + args.positional()[0] + "'");
  EvalOptions o;
  o.ctx = static_cast<int>(args.Int("--ctx", 0, 8, 1 << 20));
  o.max_windows = static_cast<int>(args.Int("--chunks", 0, 0, 1 << 30));
  o.bos_prefix = args.Has("--bos-windows");
  o.worst = static_cast<int>(args.Int("--worst", 5, 0, 1000));
  const int threads = static_cast<int>(args.Int("-t", 0, 1, 1024));
  const std::string text = ReadText(args.Str("-f"));
  const bool json = args.Has("--json");
  std::unique_ptr<Progress> bar;
  o.on_progress = [&](int done, int total) {
    if (!bar) bar = std::make_unique<Progress>(name, total, "windows");
    bar->Update(done);
    if (done == total) bar->Finish();
  };
  // The engine's context must hold a window.
  const int ctx = o.ctx;
  auto a = Load(models[0], threads, ctx, args);
  if (!compare) {
    const PerplexityReport r = Perplexity(*a, text, o);
    if (json) {
      std::printf(
          "{\"ppl\": %.6f, \"ppl_se\": %.6f, \"mean_nll\": %.6f, \"tokens\": %lld, \"windows\": "
          "%d, \"ctx\": %d, \"seconds\": %.3f}\n",
          r.ppl, r.ppl_se, r.mean_nll, static_cast<long long>(r.scored), r.windows, r.ctx,
          r.seconds);
    } else {
      std::printf(
          "perplexity %.4f +/- %.4f over %lld tokens (%d windows of %d, second halves scored) in "
          "%.1f s\n",
          r.ppl, r.ppl_se, static_cast<long long>(r.scored), r.windows, r.ctx, r.seconds);
    }
    return 0;
  }
  auto b = Load(models[1], threads, ctx, args);
  const CompareReport r = Compare(*a, *b, text, o);
  if (json) {
    std::string worst = "[";
    for (size_t k = 0; k < r.worst.size(); ++k) {
      const auto& w = r.worst[k];
      worst += StrFormat(
          "%s{\"index\": %lld, \"kl\": %.6f, \"context\": %s, \"top_a\": %s, \"top_b\": %s}",
          k ? ", " : "", static_cast<long long>(w.index), w.kl, Json(w.context).c_str(),
          Json(w.top_a).c_str(), Json(w.top_b).c_str());
    }
    worst += "]";
    std::printf(
        "{\"kl\": %.6f, \"kl_se\": %.6f, \"kl_max\": %.6f, \"top1_agreement\": %.6f, \"ppl_a\": "
        "%.6f, \"ppl_a_se\": %.6f, \"ppl_b\": %.6f, "
        "\"ppl_b_se\": %.6f, \"tokens\": %lld, \"ctx\": %d, \"worst\": %s}\n",
        r.kl, r.kl_se, r.kl_max, r.top1_agreement, r.a.ppl, r.a.ppl_se, r.b.ppl, r.b.ppl_se,
        static_cast<long long>(r.a.scored), r.a.ctx, worst.c_str());
  } else {
    std::printf("A: %s  perplexity %.4f +/- %.4f\nB: %s  perplexity %.4f +/- %.4f\n",
                models[0].c_str(), r.a.ppl, r.a.ppl_se, models[1].c_str(), r.b.ppl, r.b.ppl_se);
    std::printf(
        "KL(A || B) per token %.6f +/- %.6f (max %.4f), top-1 agreement %.2f%% over %lld tokens\n",
        r.kl, r.kl_se, r.kl_max, 100.0 * r.top1_agreement, static_cast<long long>(r.a.scored));
    for (const auto& w : r.worst) {
      std::printf("  token %lld: KL %.4f after \"%s\" (A: \"%s\", B: \"%s\")\n",
                  static_cast<long long>(w.index), w.kl, w.context.c_str(), w.top_a.c_str(),
                  w.top_b.c_str());
    }
  }
  return 0;
}

}  // namespace paddock::cli
