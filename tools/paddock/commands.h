// tools/paddock/commands.h: the subcommands of the paddock binary.
#pragma once

#include "paddock/error.h"

namespace paddock::cli {

// A command-line mistake (exit code 2) as opposed to a failure at run time (exit code 1).
class UsageError : public Error {
 public:
  using Error::Error;
};

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
