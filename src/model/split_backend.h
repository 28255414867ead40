// model/split_backend.h: two backends over consecutive ranges of a model's layers, composed
// through the seam (model/backend.h): partial offload (the first layers on a device, the rest
// and the output head on the CPU).
//
// The first part runs layers [0, k) and returns the residual stream (StepOutput::kResidual);
// the second runs [k, n_layers) from it (StepFrom) and the output head. Each part owns its
// layers' KV blocks (a split KV store hands the KV manager one view over both) and its own
// weights. The composition knows neither part's kind: any two backends that take layer ranges
// compose. Not here: choosing k (the engine, from the device's memory).
#pragma once

#include <memory>

#include "model/backend.h"

namespace paddock {

// `first` runs layers [0, k), `second` [k, n_layers): both already set (SetLayers).
std::unique_ptr<Backend> NewSplitBackend(std::unique_ptr<Backend> first,
                                         std::unique_ptr<Backend> second);

}  // namespace paddock
