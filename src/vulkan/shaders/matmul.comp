#version 450
// vulkan/shaders/matmul.comp: Y = X W^T (+ bias) for many tokens (prefill, batches): a
// workgroup computes a tile of TR rows x TN tokens, stepping through the columns 32 at a time:
// half its invocations dequantize the TR rows' next 32 weights into shared memory, the other
// half load the TN tokens' next 32 activations; then each invocation accumulates a 4 x 4
// register tile. Each weight is read once per TN tokens.
#include "common.glsl"

layout(local_size_x = WG) in;
layout(push_constant) uniform P {
  uint64_t w, x, y, bias;
  uint rows, cols, n, row_bytes, x_stride, y_stride;
} p;

#define TR 32
#define TN 32
shared float ws[TR][33];
shared float xs[TN][33];

#include "dequant.glsl"

void main() {
  W = WeightWords(p.w);
  Floats X = Floats(p.x);
  Floats Y = Floats(p.y);
  const uint tid = gl_LocalInvocationID.x;
  const uint row0 = gl_WorkGroupID.x * TR, tok0 = gl_WorkGroupID.y * TN;
  const uint ri = (tid % 8) * 4, ti = (tid / 8) * 4;  // this invocation's 4 x 4 tile
  const uint units = (p.cols + 31) / 32;
  float acc[4][4];
  for (uint i = 0; i < 4; ++i)
    for (uint j = 0; j < 4; ++j) acc[i][j] = 0.0;
  for (uint u = 0; u < units; ++u) {
    const uint e0 = u * 32, m = min(32u, p.cols - e0);
    if (tid < TR) {
      const uint r = row0 + tid;
      float w[32];
      if (r < p.rows) {
        Unit(r * p.row_bytes, u, p.cols, w);
      } else {
        for (uint k = 0; k < 32; ++k) w[k] = 0.0;
      }
      for (uint k = 0; k < 32; ++k) ws[tid][k] = w[k];
    } else {
      const uint t = tok0 + tid - TR;
      for (uint k = 0; k < 32; ++k)
        xs[tid - TR][k] = t < p.n && k < m ? X.v[t * p.x_stride + e0 + k] : 0.0;
    }
    barrier();
    for (uint k = 0; k < 32; ++k) {
      float a[4], b[4];
      for (uint i = 0; i < 4; ++i) a[i] = ws[ri + i][k];
      for (uint j = 0; j < 4; ++j) b[j] = xs[ti + j][k];
      for (uint i = 0; i < 4; ++i)
        for (uint j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    barrier();
  }
  for (uint i = 0; i < 4; ++i) {
    const uint r = row0 + ri + i;
    if (r >= p.rows) continue;
    const float b = p.bias != 0 ? Floats(p.bias).v[r] : 0.0;
    for (uint j = 0; j < 4; ++j) {
      const uint t = tok0 + ti + j;
      if (t < p.n) Y.v[t * p.y_stride + r] = acc[i][j] + b;
    }
  }
}
