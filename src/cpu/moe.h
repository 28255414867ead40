// cpu/moe.h: mixture-of-experts routing as data: a router's logits for one token become the
// experts it uses and their weights (softmax or sigmoid gating, top k, normalization, scale).
// The forward pass (moe.cpp) groups a step's tokens per expert; this is its scalar reference
// and the part tests check by hand.
#pragma once

#include "model/config.h"

namespace paddock {

// The most experts a router may choose from (the size of its scratch on the stack).
constexpr int kMaxExperts = 1024;

// Routes one token: logits (cfg.n_experts) -> ids[0..k) the experts it uses, best first (ties:
// the lower id), and weights[0..k) their weights, k = cfg.n_experts_used.
void RouteToken(const float* logits, const ModelConfig& cfg, int* ids, float* weights);

}  // namespace paddock
