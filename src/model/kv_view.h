// model/kv_view.h: how the forward pass sees one sequence's KV cache.
//
// The model reads and writes keys and values through this view and knows nothing of how the
// kv layer allocates, shares or evicts the blocks behind it (the dependency points from kv to
// model, never back). Position t lives in block table[t / block_size], slot t % block_size;
// each layer stores one encoded row (kernels/kv_format.h) per slot for K and for V.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/kv_format.h"

namespace paddock {

struct KvLayerView {
  uint8_t* k = nullptr;  // (num_blocks * block_size, k_row_bytes)
  uint8_t* v = nullptr;  // (num_blocks * block_size, v_row_bytes)
  size_t k_row_bytes = 0, v_row_bytes = 0;
  KvDtype k_type = KvDtype::kF32, v_type = KvDtype::kF32;
  // A recurrent layer (no K/V rows): its state slots, state_bytes each (float32 values:
  // ModelConfig::StateFloats).
  uint8_t* state = nullptr;
  size_t state_bytes = 0;
  // A ring (> 0: positions; windowed layers, KvRing): the layer's rows are not in the blocks but
  // in the sequence's state slot, position t at t % ring: `ring` K rows, then `ring` V rows.
  int ring = 0;
};

struct KvView {
  const KvLayerView* layers = nullptr;  // n_layers
  const int32_t* table = nullptr;       // block ids covering positions [0, n_table * block_size)
  int n_table = 0;
  int block_size = 1;
  int window = 0;       // attention window (0: full causal attention)
  int state_slot = -1;  // the sequence's state slot (recurrent layers, rings), else -1
  // The rings' block table: logical block b -> b mod the ring's blocks (the same for every
  // sequence: the ring's rows are at the slot's base).
  const int32_t* ring_table = nullptr;

  int capacity() const { return n_table * block_size; }
  size_t Slot(int t) const {
    return static_cast<size_t>(table[t / block_size]) * static_cast<size_t>(block_size) +
           static_cast<size_t>(t % block_size);
  }
  uint8_t* K(int layer, int t) const {
    const KvLayerView& L = layers[layer];
    if (L.ring > 0) return KBase(layer) + static_cast<size_t>(t % L.ring) * L.k_row_bytes;
    return L.k + Slot(t) * L.k_row_bytes;
  }
  uint8_t* V(int layer, int t) const {
    const KvLayerView& L = layers[layer];
    if (L.ring > 0) return VBase(layer) + static_cast<size_t>(t % L.ring) * L.v_row_bytes;
    return L.v + Slot(t) * L.v_row_bytes;
  }
  // Where a layer's K / V rows are addressed from through Table(layer): the blocks' base, or
  // the sequence's ring.
  uint8_t* KBase(int layer) const {
    const KvLayerView& L = layers[layer];
    return L.ring > 0 ? L.state + static_cast<size_t>(state_slot) * L.state_bytes : L.k;
  }
  uint8_t* VBase(int layer) const {
    const KvLayerView& L = layers[layer];
    return L.ring > 0 ? KBase(layer) + static_cast<size_t>(L.ring) * L.k_row_bytes : L.v;
  }
  const int32_t* Table(int layer) const { return layers[layer].ring > 0 ? ring_table : table; }
  // The sequence's state in a recurrent layer, updated in place by each step.
  float* State(int layer) const {
    return reinterpret_cast<float*>(layers[layer].state +
                                    static_cast<size_t>(state_slot) * layers[layer].state_bytes);
  }
};

}  // namespace paddock
