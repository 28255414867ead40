#version 450
// vulkan/shaders/matmul.comp: y[t][r] = sum_c W[r][c] x[t][c] (+ bias[r]) with W in its GGML
// encoding (compiled once per type: -DTYPE_F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K). A
// workgroup takes a row and up to TT tokens: each invocation dequantizes 32 weights at a time
// into registers and applies them to every token (the weights are read once per TT tokens).
// The scalar reference: formats/quants_ref.cpp's to_float and a float dot product.
#include "common.glsl"

layout(local_size_x = WG) in;
layout(push_constant) uniform P {
  uint64_t w, x, y, bias;
  uint rows, cols, n, row_bytes, x_stride, y_stride;
} p;

#define TT 8
shared float acc_red[TT][WG];

Words W;
uint Rd8(uint o) { return (W.v[o >> 2] >> ((o & 3u) << 3)) & 0xffu; }
uint Rd16(uint o) { return (W.v[o >> 2] >> ((o & 2u) << 3)) & 0xffffu; }
float Hf(uint o) { return unpackHalf2x16(Rd16(o)).x; }
int S8(uint o) { return int(Rd8(o) << 24) >> 24; }

// Weights [32u, 32u + 32) of the row at byte rb (past cols: 0).
void Unit(uint rb, uint u, inout float w[32]) {
#if defined(TYPE_F32)
  for (uint i = 0; i < 32; ++i) {
    const uint e = u * 32 + i;
    w[i] = e < p.cols ? uintBitsToFloat(W.v[(rb >> 2) + e]) : 0.0;
  }
#elif defined(TYPE_F16)
  for (uint i = 0; i < 32; ++i) {
    const uint e = u * 32 + i;
    w[i] = e < p.cols ? Hf(rb + 2 * e) : 0.0;
  }
#elif defined(TYPE_BF16)
  for (uint i = 0; i < 32; ++i) {
    const uint e = u * 32 + i;
    w[i] = e < p.cols ? uintBitsToFloat(Rd16(rb + 2 * e) << 16) : 0.0;
  }
#elif defined(TYPE_Q8_0)
  const uint o = rb + u * 34;
  const float d = Hf(o);
  for (uint i = 0; i < 32; ++i) w[i] = d * float(S8(o + 2 + i));
#elif defined(TYPE_Q4_0)
  const uint o = rb + u * 18;
  const float d = Hf(o);
  for (uint j = 0; j < 16; ++j) {
    const uint q = Rd8(o + 2 + j);
    w[j] = d * float(int(q & 15u) - 8);
    w[j + 16] = d * float(int(q >> 4) - 8);
  }
#elif defined(TYPE_Q4_K) || defined(TYPE_Q5_K)
#if defined(TYPE_Q4_K)
  const uint o = rb + (u / 8) * 144, qs = o + 16;
#else
  const uint o = rb + (u / 8) * 176, qh = o + 16, qs = o + 48;
#endif
  const uint s = u % 8;
  const float d = Hf(o), dmin = Hf(o + 2);
  const uint sc0 = o + 4;
  uint sc, m;
  if (s < 4) {
    sc = Rd8(sc0 + s) & 63u;
    m = Rd8(sc0 + s + 4) & 63u;
  } else {
    sc = (Rd8(sc0 + s + 4) & 15u) | ((Rd8(sc0 + s - 4) >> 6) << 4);
    m = (Rd8(sc0 + s + 4) >> 4) | ((Rd8(sc0 + s) >> 6) << 4);
  }
  const float ds = d * float(sc), dm = dmin * float(m);
  const uint q0 = qs + 32 * (s / 2), shift = (s & 1u) * 4;
  for (uint l = 0; l < 32; ++l) {
    uint q = (Rd8(q0 + l) >> shift) & 15u;
#if defined(TYPE_Q5_K)
    q += ((Rd8(qh + l) >> s) & 1u) << 4;
#endif
    w[l] = ds * float(q) - dm;
  }
#elif defined(TYPE_Q6_K)
  const uint o = rb + (u / 8) * 210;
  const uint s = u % 8, h = s / 4, k = s % 4;
  const float d = Hf(o + 208);
  const uint ql = o + 64 * h + (k & 1u) * 32, qh = o + 128 + 32 * h, sc = o + 192 + 8 * h + 2 * k;
  const uint nib = (k >> 1) * 4;
  for (uint l = 0; l < 32; ++l) {
    const uint q = ((Rd8(ql + l) >> nib) & 15u) | (((Rd8(qh + l) >> (2 * k)) & 3u) << 4);
    w[l] = d * float(S8(sc + l / 16)) * float(int(q) - 32);
  }
#else
#error "matmul.comp: no TYPE_ defined"
#endif
}

void main() {
  W = Words(p.w);
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
      Unit(rb, u, w);
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
