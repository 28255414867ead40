#version 450
// vulkan/shaders/matvec.comp: y[t][r] = sum_c W[r][c] x[t][c] (+ bias[r]) for up to TT tokens
// (decode, small batches): each subgroup takes a row, its invocations 32 weights at a time
// (dequantized in registers, applied to every token), summed by subgroupAdd: no shared memory,
// no barrier. A workgroup holds gl_NumSubgroups rows; rows past the grid loop. Any token count
// runs (TT per workgroup row of the grid); the backend sends it those below its tiled cutoff.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

// The workgroup's size: a specialization constant, chosen per device (paddock tune).
layout(local_size_x_id = 0) in;
layout(push_constant) uniform P {
  uint64_t w, x, y, bias;
  uint rows, cols, n, row_bytes, x_stride, y_stride;
} p;

#define TT 8

#include "dequant.glsl"

void main() {
  W = WeightWords(p.w);
  Floats X = Floats(p.x);
  Floats Y = Floats(p.y);
  const uint lane = gl_SubgroupInvocationID, lanes = gl_SubgroupSize;
  const uint t0 = gl_WorkGroupID.y * TT;
  const uint nt = min(uint(TT), p.n - t0);
  const uint units = (p.cols + 31) / 32;
  for (uint r = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID; r < p.rows;
       r += gl_NumWorkGroups.x * gl_NumSubgroups) {
    const uint rb = r * p.row_bytes;
    float acc[TT];
    for (uint t = 0; t < TT; ++t) acc[t] = 0.0;
    for (uint u = lane; u < units; u += lanes) {
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
    for (uint t = 0; t < nt; ++t) {
      float v = subgroupAdd(acc[t]);
      if (lane == 0) {
        if (p.bias != 0) v += Floats(p.bias).v[r];
        Y.v[(t0 + t) * p.y_stride + r] = v;
      }
    }
  }
}
