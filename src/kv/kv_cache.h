// kv/kv_cache.h: KV storage for one sequence, contiguous per layer, allocated once.
//
// This is the simple cache the foundation needs: capacity fixed at creation (the context
// length, or less), float32. The paged block pool with prefix reuse, sliding-window release
// and quantized KV replaces it behind the same KvView.
#pragma once

#include <cstddef>
#include <memory>

#include "model/config.h"
#include "model/kv_view.h"

namespace paddock {

class KvCache {
 public:
  KvCache(const ModelConfig& cfg, int capacity);
  const KvView& view() const { return view_; }
  int capacity() const { return view_.capacity; }
  size_t bytes() const { return bytes_; }

  // Bytes one position costs across all layers (K and V, float32).
  static size_t BytesPerToken(const ModelConfig& cfg);

 private:
  std::unique_ptr<float[]> storage_;
  size_t bytes_ = 0;
  KvView view_;
};

}  // namespace paddock
