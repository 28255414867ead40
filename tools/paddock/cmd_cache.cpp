// paddock cache warm: a prompt's KV blocks computed ahead of deployment into a --kv-disk
// directory (kv/kv_disk.h), so the first request that starts with it reads them back.
#include <cstdio>
#include <string>

#include "args.h"
#include "base/strings.h"
#include "commands.h"
#include "paddock/paddock.h"

namespace paddock::cli {

extern const std::vector<OptionSpec> kKvSpecs;
void AddKvOptions(const Args& args, EngineOptions* eo);
std::string ReadWholeFile(const std::string& path, const char* what);

namespace {

std::vector<OptionSpec> CacheSpecs() {
  std::vector<OptionSpec> s = {
      {{"-m", "--model"}, true, "model file: GGUF or llama2.c checkpoint (required)"},
      {{"--prompt-file"},
       true,
       "a prompt as the server will see it (a completions prompt's text; repeatable)",
       true},
      {{"-z", "--tokenizer"}, true, "tokenizer file overriding the model's (as serve's -z)"},
      {{"--no-bos"}, false, "do not prepend BOS (as a request that asks for none)"},
      {{"--special"},
       false,
       "control tokens spelled in the prompt become tokens (as serve's --special-in-prompts)"},
      {{"-t", "--threads"}, true, "threads (default: one per physical core)"},
      {{"-c", "--ctx"},
       true,
       "context in tokens: the server's (blocks are shared only under the same context)"},
      kIsaSpec,
      {{"-h", "--help"}, false, "show this help"},
  };
  s.insert(s.end(), kKvSpecs.begin(), kKvSpecs.end());
  return s;
}

}  // namespace

int CmdCache(int argc, char** argv) {
  const std::vector<OptionSpec> specs = CacheSpecs();
  const char* synopsis = "warm -m MODEL --kv-disk DIR --prompt-file FILE [options]";
  if (argc >= 1 && (std::string(argv[0]) == "--help" || std::string(argv[0]) == "-h")) {
    std::fputs(Usage("cache", synopsis, specs).c_str(), stdout);
    return 0;
  }
  if (argc < 1 || std::string(argv[0]) != "warm")
    throw UsageError(std::string("cache: unknown action '") + (argc >= 1 ? argv[0] : "") +
                     "' (expected: paddock cache warm ...)");
  Args args("cache warm", specs, argc - 1, argv + 1);
  if (args.Has("-h")) {
    std::fputs(Usage("cache", synopsis, specs).c_str(), stdout);
    return 0;
  }
  EngineOptions eo;
  eo.model_path = args.Str("-m");
  if (eo.model_path.empty()) throw UsageError("cache warm: no model given (-m MODEL)");
  const std::vector<std::string> files = args.All("--prompt-file");
  if (files.empty()) throw UsageError("cache warm: no prompt given (--prompt-file FILE)");
  eo.tokenizer_path = args.Str("-z");
  eo.threads = static_cast<int>(args.Int("-t", 0, 0, 1024));
  eo.context = static_cast<int>(args.Int("-c", 0, 0, 1 << 24));
  eo.isa = IsaArg(args);
  AddKvOptions(args, &eo);
  if (eo.kv_disk.empty()) throw UsageError("cache warm: no directory given (--kv-disk DIR)");
  auto engine = Engine::Create(eo);
  GenerateOptions go;
  go.max_tokens = 1;  // the prompt's blocks are what is kept; one token ends the request
  go.add_bos = !args.Has("--no-bos");
  go.parse_special = args.Has("--special");
  for (const std::string& f : files) {
    const std::string text = ReadWholeFile(f, "prompt file");
    const GenerateResult r = engine->Generate(text, go);
    engine->FlushKvDisk();
    const MemoryReport m = engine->Memory();
    const int blocks = (r.prompt_tokens - 1) / m.kv_block_size;
    std::fprintf(stderr,
                 "paddock: cache warm: %s: %d tokens, %d full blocks (%d were on disk or in "
                 "memory already); computed in %.2f s\n",
                 f.c_str(), r.prompt_tokens, blocks, r.cached_tokens / m.kv_block_size,
                 r.prompt_seconds);
  }
  const MemoryReport m = engine->Memory();
  std::fprintf(stderr,
               "paddock: cache warm: %s: %llu blocks written (%s), %s of block files; %llu not "
               "saved%s\n",
               eo.kv_disk.c_str(), static_cast<unsigned long long>(m.kv_disk_blocks_written),
               FormatBytes(m.kv_disk_bytes_written).c_str(), FormatBytes(m.kv_disk_bytes).c_str(),
               static_cast<unsigned long long>(m.kv_disk_dropped),
               m.kv_disk_writes_stopped ? " (writes stopped: see above)" : "");
  return m.kv_disk_writes_stopped || m.kv_disk_dropped > 0 ? 1 : 0;
}

}  // namespace paddock::cli
