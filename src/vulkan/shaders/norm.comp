#version 450
// vulkan/shaders/norm.comp: per row, [x += res;] y = norm(x) * w (+ b): RMSNorm, or LayerNorm
// (layer 1). A workgroup per output row; idx (optional) gathers the input rows (the final norm
// of the logits rows only). In place when y == x (QK-norm per head, post-norms).
#include "common.glsl"

layout(local_size_x = WG) in;
layout(push_constant) uniform P {
  uint64_t x, y, w, b, res, idx;
  uint cols, x_stride, y_stride, layer;
  float eps;
} p;

void main() {
  const uint row = gl_WorkGroupID.x, tid = gl_LocalInvocationID.x;
  const uint src = p.idx != 0 ? uint(Ints(p.idx).v[row]) : row;
  Floats X = Floats(p.x);
  Floats Y = Floats(p.y);
  Floats Wt = Floats(p.w);
  const uint xo = src * p.x_stride, yo = row * p.y_stride;
  if (p.res != 0) {
    Floats R = Floats(p.res);
    for (uint i = tid; i < p.cols; i += WG) X.v[xo + i] += R.v[xo + i];
  }
  float mean = 0.0;
  if (p.layer != 0) {
    float s = 0.0;
    for (uint i = tid; i < p.cols; i += WG) s += X.v[xo + i];
    mean = WgSum(s) / float(p.cols);
  }
  float ss = 0.0;
  for (uint i = tid; i < p.cols; i += WG) {
    const float d = X.v[xo + i] - mean;
    ss += d * d;
  }
  const float inv = 1.0 / sqrt(WgSum(ss) / float(p.cols) + p.eps);
  for (uint i = tid; i < p.cols; i += WG) {
    float v = (X.v[xo + i] - mean) * inv * Wt.v[i];
    if (p.b != 0) v += Floats(p.b).v[i];
    Y.v[yo + i] = v;
  }
}
