// Feeding tokens through a Transformer in tests (test_model.cpp, test_lora.cpp).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cpu/transformer.h"
#include "kv/kv_manager.h"

namespace paddock::test {

// Runs `toks` from position 0 of `seq` (fresh), all in one step (batched) or a token per step;
// the logits after the last one (valid until the next forward).
inline const float* FeedTokens(Transformer& tf, KvManager& kv, KvManager::SeqId seq,
                               const std::vector<int32_t>& toks, bool batched) {
  const float* l = nullptr;
  const int n = static_cast<int>(toks.size());
  for (int i = 0; i < n;) {
    const int step = batched ? n : 1;
    EXPECT_TRUE(kv.Reserve(seq, i + step));
    l = tf.Forward(&toks[static_cast<size_t>(i)], step, i, kv.View(seq));
    kv.Commit(seq, &toks[static_cast<size_t>(i)], step);
    i += step;
  }
  return l;
}

// One or more of tf's switches changed (ForwardOptions), the rest kept.
template <class F>
void Reconfigure(Transformer& tf, F&& change) {
  ForwardOptions o = tf.options();
  change(o);
  tf.Configure(o);
}

}  // namespace paddock::test
