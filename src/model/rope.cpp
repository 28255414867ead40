// model/rope.cpp: the rotary embedding's angles (model/rope.h).
#include "model/rope.h"

#include <algorithm>
#include <cmath>

#include "model/config.h"
#include "model/weights.h"

namespace paddock {

void RopeAngles::Set(const ModelConfig& cfg, const ModelWeights& w, int n_ctx) {
  const size_t half = static_cast<size_t>(cfg.rope_dim / 2);
  pos_scale_ = cfg.rope_scaling == "linear" ? 1.0f / cfg.rope_scaling_factor : 1.0f;
  mscale_ = 1.0f;
  inv_freq_.assign(half, 0.0f);
  const int local_dims = cfg.LocalRopeDim();
  inv_freq_local_.assign(static_cast<size_t>(local_dims / 2), 0.0f);
  yarn_ramp_.clear();
  const std::vector<float>* factors = &w.rope_freq_factors;
  if (!w.rope_factors_long.empty()) {
    factors = n_ctx > cfg.rope_orig_ctx ? &w.rope_factors_long : &w.rope_factors_short;
    mscale_ = cfg.rope_attn_factor;
  }
  for (size_t i = 0; i < half; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(cfg.rope_dim);
    float f = 1.0f / std::pow(cfg.rope_base, e);
    if (!factors->empty()) f /= (*factors)[i];
    inv_freq_[i] = f;
  }
  for (size_t i = 0; i < inv_freq_local_.size() && cfg.rope_base_local > 0; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(local_dims);
    inv_freq_local_[i] = 1.0f / std::pow(cfg.rope_base_local, e);
  }
  if (cfg.rope_scaling == "yarn" && cfg.rope_scaling_factor != 1.0f) {
    constexpr float kBetaFast = 32.0f, kBetaSlow = 1.0f;  // llama.cpp's defaults
    const float n_dims = static_cast<float>(cfg.rope_dim);
    auto corr_dim = [&](float rotations) {
      return n_dims *
             std::log(static_cast<float>(cfg.rope_orig_ctx) / (rotations * 2.0f * 3.14159265f)) /
             (2.0f * std::log(cfg.rope_base));
    };
    const float low = std::max(0.0f, std::floor(corr_dim(kBetaFast)));
    const float high = std::min(n_dims - 1, std::ceil(corr_dim(kBetaSlow)));
    yarn_ramp_.resize(half);
    for (size_t i = 0; i < half; ++i) {
      const float y = (static_cast<float>(i) - low) / std::max(0.001f, high - low);
      yarn_ramp_[i] = 1.0f - std::min(1.0f, std::max(0.0f, y));  // times ext_factor 1
    }
    pos_scale_ = 1.0f / cfg.rope_scaling_factor;
    mscale_ *= 1.0f + 0.1f * std::log(cfg.rope_scaling_factor);
  }
}

void RopeAngles::Fill(int position, float* cos, float* sin, float* cos_local,
                      float* sin_local) const {
  const size_t half = inv_freq_.size();
  const float pos = static_cast<float>(position);
  const float p = pos * pos_scale_;
  for (size_t i = 0; i < half; ++i) {
    float a = p * inv_freq_[i];
    if (!yarn_ramp_.empty()) {  // YaRN: interpolated and original angle, mixed by the ramp
      const float r = yarn_ramp_[i];
      a = a * (1.0f - r) + pos * inv_freq_[i] * r;
    }
    cos[i] = std::cos(a) * mscale_;
    sin[i] = std::sin(a) * mscale_;
  }
  if (cos_local == nullptr) return;
  // Local layers: their own base and rotated dims, positions unscaled.
  for (size_t i = 0; i < inv_freq_local_.size(); ++i) {
    const float a = pos * inv_freq_local_[i];
    cos_local[i] = std::cos(a);
    sin_local[i] = std::sin(a);
  }
}

}  // namespace paddock
