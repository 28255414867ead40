// vulkan/shaders/dequant.glsl: 32 weights of a row in its GGML encoding, dequantized in
// registers (the type chosen at compile time: -DTYPE_F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K,
// Q6_K). The scalar reference: formats/quants_ref.cpp's to_float. The weights are read as
// 32-bit words (every 16-bit field of these encodings lies at an even byte offset), so no 8- or
// 16-bit storage feature is needed.

Words W;
uint Rd8(uint o) { return (W.v[o >> 2] >> ((o & 3u) << 3)) & 0xffu; }
uint Rd16(uint o) { return (W.v[o >> 2] >> ((o & 2u) << 3)) & 0xffffu; }
float Hf(uint o) { return unpackHalf2x16(Rd16(o)).x; }
int S8(uint o) { return int(Rd8(o) << 24) >> 24; }

// Weights [32u, 32u + 32) of the row at byte rb (past cols: 0).
void Unit(uint rb, uint u, uint cols, inout float w[32]) {
#if defined(TYPE_F32)
  for (uint i = 0; i < 32; ++i) {
    const uint e = u * 32 + i;
    w[i] = e < cols ? uintBitsToFloat(W.v[(rb >> 2) + e]) : 0.0;
  }
#elif defined(TYPE_F16)
  for (uint i = 0; i < 32; ++i) {
    const uint e = u * 32 + i;
    w[i] = e < cols ? Hf(rb + 2 * e) : 0.0;
  }
#elif defined(TYPE_BF16)
  for (uint i = 0; i < 32; ++i) {
    const uint e = u * 32 + i;
    w[i] = e < cols ? uintBitsToFloat(Rd16(rb + 2 * e) << 16) : 0.0;
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
