// vulkan/shaders/dequant.glsl: 32 weights of a row in its GGML encoding, dequantized in
// registers (the type chosen at compile time: -DTYPE_F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K,
// Q6_K). The scalar reference: formats/quants_ref.cpp's to_float.
//
// The weights are read as 32-bit words, each needed word once: every field of these encodings
// lies at an even byte offset, so a run of bytes is its words, or (at 2 mod 4) its words
// funnel-shifted by 16 bits (LoadWords); the bytes are then taken from registers at constant
// positions (loops of constant trip count, unrolled). No 8- or 16-bit storage feature is needed.
// A misaligned run reads one word past its end: the weight buffers carry 16 bytes of padding.

layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer WeightWords {
  uint v[];
};
WeightWords W;

uint Rd8(uint o) { return (W.v[o >> 2] >> ((o & 3u) << 3)) & 0xffu; }
uint Rd16(uint o) { return (W.v[o >> 2] >> ((o & 2u) << 3)) & 0xffffu; }
float Hf(uint o) { return unpackHalf2x16(Rd16(o)).x; }

// Byte k of a word array (k constant after unrolling).
#define BYTE(ws, k) ((ws[(k) >> 2] >> (((k) & 3u) << 3)) & 0xffu)
#define SBYTE(ws, k) (int(BYTE(ws, k) << 24) >> 24)

// N words of the bytes at o (o even) into ws.
#define LOAD_WORDS(ws, o, N)                                  \
  {                                                           \
    const uint b_ = (o) >> 2;                                 \
    if (((o) & 2u) == 0u) {                                   \
      for (uint i_ = 0; i_ < (N); ++i_) ws[i_] = W.v[b_ + i_]; \
    } else {                                                  \
      uint prev_ = W.v[b_];                                   \
      for (uint i_ = 0; i_ < (N); ++i_) {                     \
        const uint next_ = W.v[b_ + i_ + 1];                  \
        ws[i_] = (prev_ >> 16) | (next_ << 16);               \
        prev_ = next_;                                        \
      }                                                       \
    }                                                         \
  }

// Weights [32u, 32u + 32) of the row at byte rb (past cols: 0).
void Unit(uint rb, uint u, uint cols, inout float w[32]) {
#if defined(TYPE_F32)
  if (u * 32 + 32 <= cols) {
    const uint b = (rb >> 2) + u * 32;
    for (uint i = 0; i < 32; ++i) w[i] = uintBitsToFloat(W.v[b + i]);
  } else {
    for (uint i = 0; i < 32; ++i) {
      const uint e = u * 32 + i;
      w[i] = e < cols ? uintBitsToFloat(W.v[(rb >> 2) + e]) : 0.0;
    }
  }
#elif defined(TYPE_F16) || defined(TYPE_BF16)
  if (u * 32 + 32 <= cols) {
    uint ws[16];
    LOAD_WORDS(ws, rb + 64 * u, 16);
    for (uint i = 0; i < 16; ++i) {
#if defined(TYPE_F16)
      const vec2 h = unpackHalf2x16(ws[i]);
      w[2 * i] = h.x;
      w[2 * i + 1] = h.y;
#else
      w[2 * i] = uintBitsToFloat(ws[i] << 16);
      w[2 * i + 1] = uintBitsToFloat(ws[i] & 0xffff0000u);
#endif
    }
  } else {
    for (uint i = 0; i < 32; ++i) {
      const uint e = u * 32 + i;
#if defined(TYPE_F16)
      w[i] = e < cols ? Hf(rb + 2 * e) : 0.0;
#else
      w[i] = e < cols ? uintBitsToFloat(Rd16(rb + 2 * e) << 16) : 0.0;
#endif
    }
  }
#elif defined(TYPE_Q8_0)
  uint ws[9];  // 34 bytes: d, then 32 int8
  LOAD_WORDS(ws, rb + u * 34, 9);
  const float d = unpackHalf2x16(ws[0]).x;
  for (uint i = 0; i < 32; ++i) w[i] = d * float(SBYTE(ws, i + 2));
#elif defined(TYPE_Q4_0)
  uint ws[5];  // 18 bytes: d, then 16 bytes of nibbles
  LOAD_WORDS(ws, rb + u * 18, 5);
  const float d = unpackHalf2x16(ws[0]).x;
  for (uint j = 0; j < 16; ++j) {
    const uint q = BYTE(ws, j + 2);
    w[j] = d * float(int(q & 15u) - 8);
    w[j + 16] = d * float(int(q >> 4) - 8);
  }
#elif defined(TYPE_Q4_K) || defined(TYPE_Q5_K)
#if defined(TYPE_Q4_K)
  const uint o = rb + (u / 8) * 144, qs = o + 16;  // (blocks of 144 and 176: word aligned)
#else
  const uint o = rb + (u / 8) * 176, qh = o + 16, qs = o + 48;
#endif
  const uint s = u % 8;
  uint hd[4];  // d, dmin, the 12 scale bytes
  for (uint i = 0; i < 4; ++i) hd[i] = W.v[(o >> 2) + i];
  const vec2 dm2 = unpackHalf2x16(hd[0]);
  uint sc, m;
  // (scale byte j at hd word 1 + j / 4)
  if (s < 4) {
    sc = (hd[1 + s / 4] >> ((s % 4) * 8)) & 63u;
    m = (hd[2] >> ((s % 4) * 8)) & 63u;
  } else {
    const uint b4 = (hd[3] >> ((s % 4) * 8)) & 0xffu;  // scales[s + 4]
    sc = (b4 & 15u) | (((hd[1] >> ((s % 4) * 8)) >> 6 & 3u) << 4);
    m = (b4 >> 4) | (((hd[2] >> ((s % 4) * 8)) >> 6 & 3u) << 4);
  }
  const float ds = dm2.x * float(sc), dmn = dm2.y * float(m);
  uint q[8];
  const uint qw = (qs + 32 * (s / 2)) >> 2, shift = (s & 1u) * 4;
  for (uint i = 0; i < 8; ++i) q[i] = W.v[qw + i];
#if defined(TYPE_Q5_K)
  uint h[8];
  for (uint i = 0; i < 8; ++i) h[i] = W.v[(qh >> 2) + i];
#endif
  for (uint l = 0; l < 32; ++l) {
    uint v = (BYTE(q, l) >> shift) & 15u;
#if defined(TYPE_Q5_K)
    v += ((BYTE(h, l) >> s) & 1u) << 4;
#endif
    w[l] = ds * float(v) - dmn;
  }
#elif defined(TYPE_Q6_K)
  const uint o = rb + (u / 8) * 210;
  const uint s = u % 8, hf = s / 4, k = s % 4;
  const float d = Hf(o + 208);
  const uint sc = o + 192 + 8 * hf + 2 * k;  // this sub-block's two int8 scales
  const float d0 = d * float(int(Rd8(sc) << 24) >> 24);
  const float d1 = d * float(int(Rd8(sc + 1) << 24) >> 24);
  uint ql[8], qh[8];
  LOAD_WORDS(ql, o + 64 * hf + (k & 1u) * 32, 8);
  LOAD_WORDS(qh, o + 128 + 32 * hf, 8);
  const uint nib = (k >> 1) * 4;
  for (uint l = 0; l < 32; ++l) {
    const uint v = ((BYTE(ql, l) >> nib) & 15u) | (((BYTE(qh, l) >> (2 * k)) & 3u) << 4);
    w[l] = (l < 16 ? d0 : d1) * float(int(v) - 32);
  }
#else
#error "dequant.glsl: no TYPE_ defined"
#endif
}
