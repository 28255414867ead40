// paddock bench --kernels (kernel_bench.cpp).
#pragma once

#include "base/cpu.h"

namespace paddock::cli {
// Prints, per interleaved weight layout, one core's GEMV streaming rate with and without the
// software prefetch (medians of `rounds` alternating runs); JSON with `json`.
int RunKernelStreamBench(Isa isa, int rounds, bool json);
}  // namespace paddock::cli
