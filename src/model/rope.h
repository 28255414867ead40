// model/rope.h: the rotary position embedding's angles for a model and context, as every
// backend applies them: per position, rope_dim / 2 cos and sin values (the long-context
// factors, linear or YaRN scaling and the attention factor folded in), and the local layers'
// own (Gemma 3's rope_base_local). Computed on the host; a device backend uploads the rows.
#pragma once

#include <vector>

namespace paddock {

struct ModelConfig;
struct ModelWeights;

class RopeAngles {
 public:
  // For `cfg` at context n_ctx (the factors that depend on it chosen for it).
  void Set(const ModelConfig& cfg, const ModelWeights& w, int n_ctx);
  // Position `pos`: rope_dim / 2 values each into cos, sin, and (not null) the local layers'
  // (their rotated dims / 2: rope_dim_local's when set).
  void Fill(int pos, float* cos, float* sin, float* cos_local, float* sin_local) const;

 private:
  std::vector<float> inv_freq_;        // (rope_dim / 2)
  std::vector<float> inv_freq_local_;  // (local rope dims / 2) rope_base_local's
  float pos_scale_ = 1.0f;             // linear RoPE scaling: positions are divided by the factor
  float mscale_ = 1.0f;                // cos / sin scale (YaRN, longrope's attention factor)
  std::vector<float> yarn_ramp_;       // (rope_dim / 2) YaRN's per-dimension mix, else empty
};

}  // namespace paddock
