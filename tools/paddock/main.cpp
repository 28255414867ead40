// paddock: the command-line front end. Subcommands: run, info, tokenize, synth, bench, ablate,
// tune, chat, serve, perplexity, compare, quantize.
//
// Standard output carries only the product of a command (generated text, token ids, model
// facts); logs and timings go to standard error. Bad flags or files: one line on stderr
// ("paddock: error: ...") and exit code 1 (2 for usage errors).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "paddock/paddock.h"

namespace {

const char kTopUsage[] =
    "usage: paddock <command> [options]\n"
    "\n"
    "commands:\n"
    "  run        generate text from a model\n"
    "  info       describe a model file (architecture, size, tensor types, memory)\n"
    "  tokenize   show the tokens of a text\n"
    "  synth      write a synthetic (random-weight) GGUF model of a real shape\n"
    "  bench      measure prefill, decode and batched decode against the machine roofline\n"
    "  ablate     the switch experiment: every optimization off, alone, all on, each removed\n"
    "  tune       measure threads, step size and matmul blocking for a model on this machine\n"
    "  chat       talk to a model in the terminal (its chat template, streaming replies)\n"
    "  serve      OpenAI-compatible HTTP server with continuous batching\n"
    "  cache warm compute a prompt's KV blocks into a --kv-disk directory ahead of serving\n"
    "  perplexity perplexity of a model over a text (with its standard error)\n"
    "  compare    KL divergence and top-1 agreement of a model against a reference over a text\n"
    "  quantize   rewrite a GGUF model with its weight matrices in another type (q8_0, q4_0, q4_k, "
    "...)\n"
    "\n"
    "'paddock <command> --help' lists a command's options.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs("paddock: error: no command given (try 'paddock --help')\n", stderr);
    return 2;
  }
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::fputs(kTopUsage, stdout);
    return 0;
  }
  if (cmd == "--version") {
    std::puts("paddock 0.1.0");
    return 0;
  }
  try {
    if (cmd == "run") return paddock::cli::CmdRun(argc - 2, argv + 2);
    if (cmd == "info") return paddock::cli::CmdInfo(argc - 2, argv + 2);
    if (cmd == "tokenize") return paddock::cli::CmdTokenize(argc - 2, argv + 2);
    if (cmd == "synth") return paddock::cli::CmdSynth(argc - 2, argv + 2);
    if (cmd == "bench") return paddock::cli::CmdBench(argc - 2, argv + 2);
    if (cmd == "ablate") return paddock::cli::CmdAblate(argc - 2, argv + 2);
    if (cmd == "tune") return paddock::cli::CmdTune(argc - 2, argv + 2);
    if (cmd == "serve") return paddock::cli::CmdServe(argc - 2, argv + 2);
    if (cmd == "cache") return paddock::cli::CmdCache(argc - 2, argv + 2);
    if (cmd == "chat") return paddock::cli::CmdChat(argc - 2, argv + 2);
    if (cmd == "perplexity") return paddock::cli::CmdEval(false, argc - 2, argv + 2);
    if (cmd == "compare") return paddock::cli::CmdEval(true, argc - 2, argv + 2);
    if (cmd == "quantize") return paddock::cli::CmdQuantize(argc - 2, argv + 2);
    std::fprintf(stderr, "paddock: error: unknown command '%s' (try 'paddock --help')\n",
                 cmd.c_str());
    return 2;
  } catch (const paddock::cli::UsageError& e) {
    std::fprintf(stderr, "paddock: error: %s\n", e.what());
    return 2;
  } catch (const paddock::Error& e) {
    std::fprintf(stderr, "paddock: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "paddock: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "paddock: error: %s\n", e.what());
    return 1;
  }
}
