// model/kv_view.h: how the forward pass sees one sequence's KV cache.
//
// The model reads and writes keys and values through this view and knows nothing of how the
// kv layer allocates, shares or evicts the storage behind it (the dependency points from kv to
// model, never back). Layout per layer: `capacity` rows of kv_dim floats, row = position.
#pragma once

#include <vector>

namespace paddock {

struct KvLayerView {
  float* k = nullptr;  // (capacity, kv_dim)
  float* v = nullptr;  // (capacity, kv_dim)
};

struct KvView {
  std::vector<KvLayerView> layers;
  int capacity = 0;  // positions
};

}  // namespace paddock
