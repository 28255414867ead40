#version 450
// vulkan/shaders/attention.comp: paged attention, one workgroup per (query head, token): the
// positions [lo, hi) of the token's sequence (info: its block table's offset, the windowed lo,
// hi) in tiles of WG, an online softmax across tiles (scale, soft-cap), GQA by head group. The
// scalar reference: kernels/attend_impl.h.
#include "common.glsl"

layout(local_size_x = WG) in;
layout(push_constant) uniform P {
  uint64_t q, o, kc, vc, info, tables;
  uint nq, nkv, hd, kv_dim, block, windowed;
  float scale, softcap;
} p;

shared float qs[256];
shared float ps[WG];
shared uint sl[WG];

void main() {
  const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  const uint g = h / (p.nq / p.nkv);
  Floats Q = Floats(p.q);
  Words K = Words(p.kc);
  Words V = Words(p.vc);
  Ints info = Ints(p.info);
  Ints table = Ints(p.tables);
  const uint qd = p.nq * p.hd;
  for (uint d = tid; d < p.hd; d += WG) qs[d] = Q.v[t * qd + h * p.hd + d];
  barrier();
  const int toff = info.v[4 * t], lo = p.windowed != 0 ? info.v[4 * t + 1] : 0;
  const int hi = info.v[4 * t + 2];
  float m = uintBitsToFloat(0xff800000u), l = 0.0;
  float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
  for (int p0 = lo; p0 < hi; p0 += WG) {
    const int pos = p0 + int(tid);
    float s = uintBitsToFloat(0xff800000u);
    if (pos < hi) {
      const uint slot = uint(table.v[toff + pos / int(p.block)]) * p.block + uint(pos) % p.block;
      sl[tid] = slot;
      const uint kb = slot * p.kv_dim + g * p.hd;
      float dot = 0.0;
      for (uint d = 0; d < p.hd; d += 2) {
        const vec2 kv = unpackHalf2x16(K.v[(kb + d) >> 1]);
        dot += qs[d] * kv.x + qs[d + 1] * kv.y;
      }
      s = dot * p.scale;
      if (p.softcap > 0.0) s = p.softcap * tanh(s / p.softcap);
    }
    const float mn = max(m, WgMax(s));
    const float e = pos < hi ? exp(s - mn) : 0.0;
    ps[tid] = e;
    const float sum = WgSum(e);  // (its barriers also publish ps and sl)
    const float c = exp(m - mn);
    l = l * c + sum;
    const uint cnt = uint(min(WG, hi - p0));
    for (uint j = 0; j < 4; ++j) {
      const uint d = tid + j * WG;
      if (d >= p.hd) break;
      float a = acc[j] * c;
      for (uint i = 0; i < cnt; ++i) a += ps[i] * HalfAt(V, sl[i] * p.kv_dim + g * p.hd + d);
      acc[j] = a;
    }
    m = mn;
    barrier();
  }
  Floats O = Floats(p.o);
  for (uint j = 0; j < 4; ++j) {
    const uint d = tid + j * WG;
    if (d < p.hd) O.v[t * qd + h * p.hd + d] = l > 0.0 ? acc[j] / l : 0.0;
  }
}
