#version 450
// vulkan/shaders/kv_store.comp: each token's K and V rows into the paged cache as halves, at
// the slot its block table gives (slots[t] = table[pos / block] * block + pos % block).
#include "common.glsl"

layout(local_size_x = WG) in;
layout(push_constant) uniform P {
  uint64_t k, v, kc, vc, slots;
  uint n, kv_dim;
} p;

void main() {
  const uint pairs = p.kv_dim / 2, gid = gl_GlobalInvocationID.x;
  if (gid >= p.n * pairs) return;
  const uint t = gid / pairs, i = gid % pairs;
  const uint slot = uint(Ints(p.slots).v[t]);
  Floats K = Floats(p.k);
  Floats V = Floats(p.v);
  const uint src = t * p.kv_dim + 2 * i, dst = slot * pairs + i;
  Words(p.kc).v[dst] = packHalf2x16(vec2(K.v[src], K.v[src + 1]));
  Words(p.vc).v[dst] = packHalf2x16(vec2(V.v[src], V.v[src + 1]));
}
