// paddock/eval.h: evaluation of engines over a text (perplexity, and the distance between two
// models' next-token distributions). A client of the engine (src/eval/).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "paddock/engine.h"

namespace paddock {

// Evaluation over a text: perplexity of one model, and how far a second model's next-token
// distributions are from the first's (for quantization). The text is tokenized with BOS and cut
// into windows of `ctx` tokens; in each window the first half is context and the second half
// is scored, exactly as llama.cpp's perplexity tool does (see EvalOptions::bos_prefix).
struct EvalOptions {
  int ctx = 0;          // window in tokens (0: the model's context, at most 512)
  int max_windows = 0;  // 0: the whole text
  int worst = 5;        // compare: how many worst positions to report
  // false (default): llama.cpp's windows (the text tokenized once and cut every ctx tokens,
  // each window's first token replaced by BOS, positions ctx/2 .. ctx-2 scored), so figures
  // sit beside llama.cpp's; true: BOS then ctx - 1 text tokens per window, positions
  // ctx/2 - 1 .. ctx-2 scored (Paddock's earlier scheme).
  bool bos_prefix = false;
  // Called after each window (windows done, windows in all): for a progress bar.
  std::function<void(int done, int total)> on_progress;
};

struct PerplexityReport {
  double ppl = 0, ppl_se = 0;  // exp(mean NLL) and its standard error (delta method)
  double mean_nll = 0;
  int64_t scored = 0;  // tokens scored
  int windows = 0, ctx = 0;
  double seconds = 0;
};

struct CompareReport {
  PerplexityReport a, b;
  double kl = 0, kl_se = 0, kl_max = 0;  // KL(P_a || P_b) per scored token: mean, its SE, max
  double top1_agreement = 0;             // share of positions where the argmax tokens agree
  struct Position {
    int64_t index = 0;  // scored-token index in the text
    double kl = 0;
    std::string context;       // the text just before
    std::string top_a, top_b;  // each model's most likely next token
  };
  std::vector<Position> worst;
};

// Throws Error if the text is too short for one window, or (Compare) the vocabularies differ.
PerplexityReport Perplexity(Engine& engine, std::string_view text, const EvalOptions& options);
CompareReport Compare(Engine& a, Engine& b, std::string_view text, const EvalOptions& options);

}  // namespace paddock
