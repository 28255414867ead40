// dist/stage.h: what a pipeline's processes say to each other (internal to dist/): the start-up
// agreement (Hello, Plan), the step and result messages' layout, and a stage's loop.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dist/transport.h"
#include "paddock/engine.h"

namespace paddock {
struct LoadedModel;
}

namespace paddock::dist::detail {

enum Kind : int32_t { kStep = 1, kStop = 2 };
// A step message (the head to the first stage, each stage to the next): a StepHeader, its
// block copies (from, to pairs of int32), an ItemHeader per item, the items' tokens, their
// block tables (int32 each), zeros to a 16-byte boundary, then the residual stream (tokens x
// dim floats). A kStop message is a StepHeader of zeros but its kind.
struct StepHeader {
  int32_t kind;        // kStep or kStop
  int32_t mb;          // the micro-batch's id (the head's count, checked on the way back)
  int32_t items;       // sequences
  int32_t tokens;      // their tokens together
  int32_t rows;        // result rows asked for (the items' n_logits)
  int32_t hidden_out;  // 1: final hidden states instead of logits
  int32_t copies;      // copy-on-write block copies to replay before the step
};
struct ItemHeader {
  int32_t n, pos, n_logits, prompt_len;  // as StepItem's
  int32_t n_table;                       // its block table's entries sent
  int32_t window;                        // its KV view's attention window
};
// The last stage's answer: a ResultHeader, then rows x row_floats floats.
struct ResultHeader {
  int32_t mb, rows, row_floats, unused;
};
static_assert(sizeof(StepHeader) == 7 * 4 && sizeof(ItemHeader) == 6 * 4 &&
                  sizeof(ResultHeader) == 16,
              "the messages' layout is their int32 words, no padding");
constexpr size_t kHeader = sizeof(StepHeader) / 4;    // int32 words
constexpr size_t kItemInts = sizeof(ItemHeader) / 4;  // int32 words

// ---- what every rank agrees on at start ----------------------------------------------------

// A model file's shape and content summary: a stage's must equal its head's.
std::vector<std::pair<std::string, std::string>> Fingerprint(const LoadedModel& m);

struct Hello {  // a stage to its head
  std::string host, path;
  int64_t pid = 0;
  uint64_t budget = 0;
  std::vector<std::pair<std::string, std::string>> fingerprint;
  std::string error;  // the stage could not load its file
};

struct Plan {              // the head to every stage
  std::vector<int> begin;  // per rank: layers [begin[r], begin[r + 1])
  int n_layers = 0;
  int32_t num_blocks = 0;
  int block_size = 16;
  std::string k_type, v_type, layer_types;
  int context = 0, max_batch = 0;
  ForwardOptions forward;  // the head's switches, whole
  std::string error;       // non-empty: start-up failed (every rank exits with it)
};

std::string Encode(const Hello& h);
Hello DecodeHello(std::string b);
std::string Encode(const Plan& p);
Plan DecodePlan(std::string b);

// A stage (rank > 0): its layers of the plan, run on every micro-batch from the rank before
// until the head says stop (or goes silent: an Error).
void RunStage(int rank, int size, std::unique_ptr<LoadedModel> model, const EngineOptions& eo,
              const Plan& plan, Heartbeats& hb);

}  // namespace paddock::dist::detail
