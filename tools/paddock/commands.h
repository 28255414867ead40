// tools/paddock/commands.h: the subcommands of the paddock binary.
#pragma once

#include <string>

#include "paddock/engine.h"
#include "paddock/error.h"

namespace paddock::cli {

// A command-line mistake (exit code 2) as opposed to a failure at run time (exit code 1).
class UsageError : public Error {
 public:
  using Error::Error;
};

class Args;
struct OptionSpec;
// --json-schema FILE / --grammar-file FILE / --json (run and chat): read and checked before the
// model loads; Engine::CompileGrammar binds it to the vocabulary.
struct GrammarOption {
  bool on = false;
  GrammarKind kind = GrammarKind::kGbnf;
  std::string text;
};
GrammarOption ReadGrammarOption(const Args& args);  // cmd_run.cpp; throws UsageError

// A file in Paddock's cache directory: $PADDOCK_CACHE_DIR, else $XDG_CACHE_HOME/paddock, else
// ~/.cache/paddock (cmd_tune.cpp).
std::string CachePath(const std::string& file);

// The batch sweep's knee (bench --sweep-batch) per CPU and model file, for serve's default
// --max-running (cmd_bench.cpp). 0: none measured.
int CachedKnee(const std::string& model_path);
void StoreKnee(const std::string& model_path, int knee);
int CmdAblate(int argc, char** argv);

// `paddock tune`'s choices for this CPU, ISA and model shape (cmd_tune.cpp), with the prefill
// and decode rates measured for the defaults and for them. prefetch: 0 none, 1 the kinds that
// prefetch by default, 2 all (EngineOptions::prefetch / prefetch_all).
struct TuneChoice {
  int threads = 0, step_tokens = 0;
  uint64_t block_kib = 0;
  double default_tps = 0, tuned_tps = 0;
  int prefetch = 1;
  double default_decode_tps = 0, tuned_decode_tps = 0;
};
// The cache's entry for eo's model (false: none, or a stale one; a corrupt or foreign cache
// file gives one warning).
bool LookupTune(const EngineOptions& eo, TuneChoice* out);
// Unless --no-tune: the entry's threads (unless -t), tokens per step (unless batch_flag was
// given; empty: always), matmul block and prefetch (unless --prefetch or --no-prefetch) into
// eo, with one line on stderr saying so.
// `applied` (optional) receives the entry.
void ApplyTuneCache(const Args& args, const std::string& batch_flag, EngineOptions* eo,
                    TuneChoice* applied = nullptr);
// --prefetch's names (auto, all, off) into EngineOptions::prefetch / prefetch_all; unknown:
// UsageError.
void SetPrefetch(const std::string& name, EngineOptions* eo);
const char* PrefetchName(const EngineOptions& eo);
// The prefetch choices by number (TuneChoice, BenchReport::tune): 0 off, 1 auto, 2 all.
inline constexpr const char* kPrefetchNames[] = {"off", "auto", "all"};
struct OptionSpec;
extern const OptionSpec kNoTuneSpec;
extern const OptionSpec kPrefetchSpec;  // --prefetch auto|all|off (run, chat, bench, serve)
extern const OptionSpec kIsaSpec;       // --isa auto|scalar|avx2|avx512|amx|neon|dotprod|i8mm
// --isa's value (default auto); a name that is not one of kIsaSpec's: UsageError. Whether this
// CPU can run it is the engine's check (ParseIsa).
std::string IsaArg(const Args& args);
void AddPrefetchOption(const Args& args, EngineOptions* eo);
int CmdTune(int argc, char** argv);

int CmdRun(int argc, char** argv);
// A file's bytes (a prompt, an image); throws Error "cannot open WHAT 'PATH'".
std::string ReadWholeFile(const std::string& path, const char* what);  // cmd_run.cpp

// Pipeline parallelism under mpirun (pipeline_cli.cpp): the flags, and the call that makes this
// process the head (true: go on, eo->stages set) or a stage (false: it ran; return from main).
const std::vector<OptionSpec>& PipelineSpecs();
bool JoinPipelineIfLaunched(const Args& args, EngineOptions* eo, uint64_t memory_budget);
bool JoinPipelineLaunched();  // started by an MPI launcher
int CmdInfo(int argc, char** argv);
int CmdTokenize(int argc, char** argv);
int CmdSynth(int argc, char** argv);
int CmdBench(int argc, char** argv);
int CmdServe(int argc, char** argv);
int CmdCache(int argc, char** argv);  // cache warm: a prompt's KV blocks into --kv-disk
int CmdChat(int argc, char** argv);
int CmdEval(bool compare, int argc, char** argv);
int CmdQuantize(int argc, char** argv);

}  // namespace paddock::cli
