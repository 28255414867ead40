#include "kv/kv_cache.h"

#include <cstring>

#include "base/strings.h"

namespace paddock {

size_t KvCache::BytesPerToken(const ModelConfig& cfg) {
  return 2u * static_cast<size_t>(cfg.n_layers) * static_cast<size_t>(cfg.kv_dim()) * sizeof(float);
}

KvCache::KvCache(const ModelConfig& cfg, int capacity) {
  if (capacity <= 0) Fail("KV cache capacity must be positive (got %d)", capacity);
  const size_t per_layer = static_cast<size_t>(capacity) * static_cast<size_t>(cfg.kv_dim());
  const size_t n = 2 * per_layer * static_cast<size_t>(cfg.n_layers);
  storage_.reset(new float[n]);
  std::memset(storage_.get(), 0, n * sizeof(float));  // touch once, outside the hot loop
  bytes_ = n * sizeof(float);
  view_.capacity = capacity;
  view_.layers.resize(static_cast<size_t>(cfg.n_layers));
  for (int l = 0; l < cfg.n_layers; ++l) {
    view_.layers[static_cast<size_t>(l)].k = storage_.get() + (2 * static_cast<size_t>(l)) * per_layer;
    view_.layers[static_cast<size_t>(l)].v = storage_.get() + (2 * static_cast<size_t>(l) + 1) * per_layer;
  }
}

}  // namespace paddock
