#include <cstdio>
#include <string>

#include "args.h"
#include "commands.h"
#include "paddock/paddock.h"

namespace paddock::cli {

namespace {

const std::vector<OptionSpec> kSpecs = {
    {{"-m", "--model"}, true, "model file: GGUF or llama2.c checkpoint (required)"},
    {{"-z", "--tokenizer"}, true, "tokenizer file (llama2.c tokenizer.bin or vocabulary GGUF)"},
    {{"-p", "--prompt"}, true, "prompt text (default: empty, generation starts from BOS)"},
    {{"-f", "--file"}, true, "read the prompt from a file"},
    {{"-n", "--n-predict"}, true, "tokens to generate (default 256)"},
    {{"--temp"}, true, "temperature, 0 = greedy (default 0.8)"},
    {{"--top-k"}, true, "top-k, 0 = off (default 40)"},
    {{"--top-p"}, true, "top-p, 1 = off (default 0.95)"},
    {{"--min-p"}, true, "min-p, 0 = off (default 0.05)"},
    {{"--repeat-penalty"}, true, "repetition penalty, 1 = off (default 1)"},
    {{"--repeat-last-n"}, true, "tokens the penalties look back over (default 64)"},
    {{"--frequency-penalty"}, true, "frequency penalty (default 0)"},
    {{"--presence-penalty"}, true, "presence penalty (default 0)"},
    {{"--seed"}, true, "random seed (default 24301)"},
    {{"--stop"}, true, "stop string (repeatable)", true},
    {{"--ignore-eos"}, false, "keep generating past end-of-sequence"},
    {{"--no-bos"}, false, "do not prepend BOS to the prompt"},
    {{"--special"}, false, "parse control tokens written in the prompt"},
    {{"-t", "--threads"}, true, "threads (default: all cores)"},
    {{"-c", "--ctx"}, true, "context (KV capacity) in tokens (default: model's, at most 4096)"},
    {{"--isa"}, true, "kernels: auto, scalar, avx2, avx512 (default auto)"},
    {{"-h", "--help"}, false, "show this help"},
};

}  // namespace

int CmdRun(int argc, char** argv) {
  Args args = [&] {
    try {
      return Args("run", kSpecs, argc, argv);
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
  }();
  if (args.Has("--help")) {
    std::fputs(Usage("run", "-m MODEL [-z TOKENIZER] [-p PROMPT] [-n N] [options]", kSpecs).c_str(), stdout);
    return 0;
  }
  if (!args.positional().empty()) throw UsageError("unexpected argument '" + args.positional()[0] + "'");
  if (!args.Has("-m")) throw UsageError("run needs a model: -m MODEL");
  if (args.Has("-p") && args.Has("-f")) throw UsageError("give the prompt with -p or -f, not both");

  EngineOptions eo;
  GenerateOptions go;
  std::string prompt;
  try {
    eo.model_path = args.Str("-m");
    eo.tokenizer_path = args.Str("-z");
    eo.threads = static_cast<int>(args.Int("-t", 0, 1, 1024));
    eo.context = static_cast<int>(args.Int("-c", 0, 1, 1 << 24));
    eo.isa = args.Str("--isa", "auto");
    if (eo.isa != "auto" && eo.isa != "scalar" && eo.isa != "avx2" && eo.isa != "avx512") {
      throw Error("unknown ISA '" + eo.isa + "' for --isa (expected auto, scalar, avx2 or avx512)");
    }
    go.max_tokens = static_cast<int>(args.Int("-n", 256, 0, 1 << 24));
    go.sampling.temperature = static_cast<float>(args.Float("--temp", 0.8, 0, 100));
    go.sampling.top_k = static_cast<int>(args.Int("--top-k", 40, 0, 1 << 24));
    go.sampling.top_p = static_cast<float>(args.Float("--top-p", 0.95, 1e-6, 1));
    go.sampling.min_p = static_cast<float>(args.Float("--min-p", 0.05, 0, 1));
    go.sampling.repeat_penalty = static_cast<float>(args.Float("--repeat-penalty", 1.0, 1e-3, 100));
    go.sampling.penalty_last_n = static_cast<int>(args.Int("--repeat-last-n", 64, 0, 1 << 24));
    go.sampling.frequency_penalty = static_cast<float>(args.Float("--frequency-penalty", 0, -2, 2));
    go.sampling.presence_penalty = static_cast<float>(args.Float("--presence-penalty", 0, -2, 2));
    go.sampling.seed = args.U64("--seed", go.sampling.seed);
    go.stop = args.All("--stop");
    for (const auto& s : go.stop) {
      if (s.empty()) throw Error("--stop needs a non-empty string");
    }
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  go.ignore_eos = args.Has("--ignore-eos");
  go.add_bos = !args.Has("--no-bos");
  go.parse_special = args.Has("--special");
  if (args.Has("-f")) {
    FILE* f = std::fopen(args.Str("-f").c_str(), "rb");
    if (f == nullptr) throw Error("cannot open prompt file '" + args.Str("-f") + "'");
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) prompt.append(buf, n);
    std::fclose(f);
  } else {
    prompt = args.Str("-p");
  }

  auto engine = Engine::Create(eo);
  const ModelInfo& info = engine->info();
  std::fprintf(stderr, "paddock: loaded %s (%s, %s, %.1fM params) in %.3f s; %d threads, %s kernels, context %d\n",
               info.path.c_str(), info.arch.c_str(), info.format.c_str(), info.n_params / 1e6,
               engine->load_seconds(), info.threads, info.isa.c_str(), info.context);

  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);
  GenerateResult r = engine->Generate(prompt, go, [](std::string_view text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return true;
  });
  std::fputc('\n', stdout);
  std::fflush(stdout);
  const double gen_tps = r.decode_seconds > 0 && r.generated_tokens > 1 ? (r.generated_tokens - 1) / r.decode_seconds : 0;
  std::fprintf(stderr,
               "paddock: prompt %d tokens in %.3f s (%.1f tok/s); generated %d tokens, %.1f tok/s; "
               "finish: %s\n",
               r.prompt_tokens, r.prompt_seconds, r.prompt_seconds > 0 ? r.prompt_tokens / r.prompt_seconds : 0,
               r.generated_tokens, gen_tps, FinishReasonName(r.finish));
  return 0;
}

}  // namespace paddock::cli
