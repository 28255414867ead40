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
// --json-schema FILE / --grammar-file FILE / --json (run and chat): read and checked before the
// model loads; Engine::CompileGrammar binds it to the vocabulary.
struct GrammarOption {
  bool on = false;
  GrammarKind kind = GrammarKind::kGbnf;
  std::string text;
};
GrammarOption ReadGrammarOption(const Args& args);  // cmd_run.cpp; throws UsageError

// The batch sweep's knee (bench --sweep-batch) per CPU and model file, for serve's default
// --max-running (cmd_bench.cpp). 0: none measured.
std::string KneeCachePath();
int CachedKnee(const std::string& model_path);
void StoreKnee(const std::string& model_path, int knee);
int CmdAblate(int argc, char** argv);

int CmdRun(int argc, char** argv);
int CmdInfo(int argc, char** argv);
int CmdTokenize(int argc, char** argv);
int CmdSynth(int argc, char** argv);
int CmdBench(int argc, char** argv);
int CmdServe(int argc, char** argv);
int CmdChat(int argc, char** argv);
int CmdEval(bool compare, int argc, char** argv);
int CmdQuantize(int argc, char** argv);

}  // namespace paddock::cli
