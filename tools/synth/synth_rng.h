// synth/synth_rng.h: the random numbers of the synthetic files (synth.cpp, synth_vision.cpp).
#pragma once

#include <cstdint>

namespace paddock::synth_detail {

// xorshift64*: fast, deterministic, good enough for weights.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  float Uniform() {  // [-1, 1)
    s_ ^= s_ >> 12;
    s_ ^= s_ << 25;
    s_ ^= s_ >> 27;
    const uint64_t r = s_ * 0x2545F4914F6CDD1Dull;
    return static_cast<float>(r >> 40) * (2.0f / 16777216.0f) - 1.0f;
  }

 private:
  uint64_t s_;
};

}  // namespace paddock::synth_detail
