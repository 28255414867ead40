// tools/paddock/awq.h: activation-aware per-channel scaling (AWQ-style) for `paddock quantize`.
//
// For each group of matrices that read the same input (Q/K/V; gate/up; down; the classifier),
// a per-input-channel scale s = rms(x_c)^alpha (normalized) is searched over alpha in [0, 1]:
// the matrices are quantized as W diag(s) and the input is divided by s, which is folded into
// the operation that produces it (the RMSNorm / LayerNorm weight and bias; for FFN-down, the
// rows of FFN-up, since SwiGLU / GeGLU is linear in up). The search minimizes the expected
// output error sum_c E[x_c^2] (w_rc - q(w s)_rc / s_c)^2 with the target type's rounding
// simulated. alpha = 0 (no scaling) is a candidate, so the proxy error never gets worse.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "formats/ggml_types.h"

namespace paddock::cli {

// Per-tensor transforms to apply when writing: matrix columns multiplied by `col`, matrix rows
// divided by `row_div`, vectors (norm weights, biases) divided by `vec_div`.
struct AwqPlan {
  std::map<std::string, std::vector<float>> col, row_div, vec_div;
  std::vector<std::string> log;  // one line per input group: the chosen alpha and the error
};

// Reads a tensor as floats (rows x cols); false if the file has no such tensor.
using TensorReader = std::function<bool(const std::string& name, std::vector<float>* data,
                                        int64_t* rows, int64_t* cols)>;
// The type each matrix will be written in (for the simulated rounding).
using TypeOf = std::function<GgmlType(const std::string& name, int64_t rows, int64_t cols)>;

// `stats`: mean squares of each matrix's input channels by tensor name (ActivationStats).
AwqPlan PlanAwq(int n_layers, const std::map<std::string, std::vector<float>>& stats,
                const TensorReader& read, const TypeOf& type_of, bool tied_output, bool gated_ffn);

}  // namespace paddock::cli
