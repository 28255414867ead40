#version 450
// vulkan/shaders/rope.comp: rotary position embedding of each token's query and key heads, by
// the host's cos / sin tables (the CPU's, so both paths rotate by the same angles): adjacent
// pairs (2i, 2i+1) or the NeoX halves (i, i + rope_dim / 2). An invocation per pair.
#include "common.glsl"

layout(local_size_x = WG) in;
layout(push_constant) uniform P {
  uint64_t q, k, cos_t, sin_t;
  uint n, nq, nkv, hd, half_dim, neox, q_stride, k_stride;
} p;

void main() {
  const uint heads = p.nq + p.nkv;
  const uint gid = gl_GlobalInvocationID.x;
  if (gid >= p.n * heads * p.half_dim) return;
  const uint i = gid % p.half_dim, h = (gid / p.half_dim) % heads, t = gid / (p.half_dim * heads);
  Floats X = Floats(h < p.nq ? p.q : p.k);
  const uint base = h < p.nq ? t * p.q_stride + h * p.hd : t * p.k_stride + (h - p.nq) * p.hd;
  const uint a = base + (p.neox != 0 ? i : 2 * i);
  const uint b = base + (p.neox != 0 ? i + p.half_dim : 2 * i + 1);
  const float c = Floats(p.cos_t).v[t * p.half_dim + i], s = Floats(p.sin_t).v[t * p.half_dim + i];
  const float v0 = X.v[a], v1 = X.v[b];
  X.v[a] = v0 * c - v1 * s;
  X.v[b] = v0 * s + v1 * c;
}
