#version 450
// vulkan/shaders/matvec_shared.comp: y[t][r] = sum_c W[r][c] x[t][c] (+ bias[r]) for a few tokens
// (decode), on devices without subgroup arithmetic: a workgroup per row and up to TT tokens,
// each invocation 32 weights at a time applied to every token, a shared-memory reduction.
#include "common.glsl"

layout(local_size_x = WG) in;
layout(push_constant) uniform P {
  uint64_t w, x, y, bias;
  uint rows, cols, n, row_bytes, x_stride, y_stride;
} p;

#define TT 8
shared float acc_red[TT][WG];

#include "dequant.glsl"

void main() {
  W = WeightWords(p.w);
  Floats X = Floats(p.x);
  Floats Y = Floats(p.y);
  const uint tid = gl_LocalInvocationID.x;
  const uint t0 = gl_WorkGroupID.y * TT;
  const uint nt = min(uint(TT), p.n - t0);
  const uint units = (p.cols + 31) / 32;
  for (uint r = gl_WorkGroupID.x; r < p.rows; r += gl_NumWorkGroups.x) {
    const uint rb = r * p.row_bytes;
    float acc[TT];
    for (uint t = 0; t < TT; ++t) acc[t] = 0.0;
    for (uint u = tid; u < units; u += WG) {
      float w[32];
      Unit(rb, u, p.cols, w);
      const uint e0 = u * 32, m = min(32u, p.cols - e0);
      for (uint t = 0; t < nt; ++t) {
        const uint xb = (t0 + t) * p.x_stride + e0;
        float s = 0.0;
        for (uint i = 0; i < m; ++i) s += w[i] * X.v[xb + i];
        acc[t] += s;
      }
    }
    for (uint t = 0; t < TT; ++t) acc_red[t][tid] = acc[t];
    barrier();
    for (uint s = WG / 2; s > 0; s >>= 1) {
      if (tid < s)
        for (uint t = 0; t < TT; ++t) acc_red[t][tid] += acc_red[t][tid + s];
      barrier();
    }
    if (tid < nt) {
      float v = acc_red[tid][0];
      if (p.bias != 0) v += Floats(p.bias).v[r];
      Y.v[(t0 + tid) * p.y_stride + r] = v;
    }
    barrier();
  }
}
