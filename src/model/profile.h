// model/profile.h: per-operator timing of the forward pass, for `paddock bench --profile`.
//
// Off by default: a Transformer without a profiler pays one predictable branch per operator.
// With one, each operator's wall time (on the calling thread, which waits for the workers) is
// added to its slot, so the slots add up to the step time.
#pragma once

#include <cstdint>

#include "base/timer.h"

namespace paddock {

enum class ProfOp : int {
  kEmbed,
  kNorm,
  kQuantizeAct,
  kMatmulQkv,
  kBiasNormRope,
  kKvStore,
  kAttention,
  kMatmulOut,
  kResidual,
  kMatmulGateUp,
  kMatmulDown,
  kLogits,
  kSample,
  kMoeRoute,
  kMoeGather,
  kMoeScatter,
  kPerLayer,
  kRecurrent,
  kCount
};

struct Profiler {
  double seconds[static_cast<int>(ProfOp::kCount)] = {};
  int64_t calls[static_cast<int>(ProfOp::kCount)] = {};
  void Reset() { *this = Profiler(); }
  double Total() const {
    double t = 0;
    for (double s : seconds) t += s;
    return t;
  }
  static const char* Name(ProfOp op) {
    static const char* const names[] = {"embedding",
                                        "rmsnorm",
                                        "quantize activations",
                                        "matmul q/k/v",
                                        "bias, qk-norm, rope",
                                        "kv store",
                                        "attention",
                                        "matmul attn out",
                                        "residual add",
                                        "matmul gate/up + swiglu",
                                        "matmul down",
                                        "logits (final norm + classifier)",
                                        "sampling",
                                        "moe router + top-k",
                                        "moe gather",
                                        "moe weighted scatter-add",
                                        "per-layer inputs and scale",
                                        "recurrent layers (conv, delta rule)"};
    static_assert(sizeof(names) / sizeof(names[0]) == static_cast<size_t>(ProfOp::kCount),
                  "one name per operator");
    return names[static_cast<int>(op)];
  }
};

class ProfileScope {
 public:
  ProfileScope(Profiler* p, ProfOp op) : p_(p), op_(op), t0_(p != nullptr ? NowSeconds() : 0) {}
  ~ProfileScope() {
    if (p_ != nullptr) {
      p_->seconds[static_cast<int>(op_)] += NowSeconds() - t0_;
      p_->calls[static_cast<int>(op_)]++;
    }
  }

 private:
  Profiler* p_;
  ProfOp op_;
  double t0_;
};

}  // namespace paddock
