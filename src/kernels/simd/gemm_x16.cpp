// kernels/simd/gemm_x16.cpp: the 16-row interleaved layouts (formats/x16_layout.h): one row per
// 32-bit lane, int8 activations broadcast 4 bytes at a time. Written once over vec.h: a register
// holds kLanes rows (AVX-512: the whole group; AVX2: one of two 8-row halves, each a 32-byte half
// of every 64-byte vector); the ISA's DotU8S8 / DotOffset8 are VNNI or maddubs + the sign trick.
// Only the 2:4 sparse tile differs in method and has one header per ISA.
#include <array>
#include <utility>
#include <vector>

#include "kernels/simd/common.h"

namespace paddock {
namespace PADDOCK_ISA_NS {
namespace {

// ---- 16-row interleaved layouts (X16Kind; ggml_types.h) ----
// One row per 32-bit lane: per 32-element block and token, 8 dot-product instructions advance
// all 16 rows by 4 elements each into an int32 accumulator (exact), then one convert and one or
// two FMAs apply the scales to the 16 rows at once:
//   kQ4S, kQ8B: y += d_w * (d_x * dot + c)        c = -Z * (d_x * sum(q_x)), Z = 8 or 128
//   kQ8C:       y += d_x * dot + c, y *= d_w (per row) at the end
//   kQ4Z:       y += d_w * (d_x * dot) + m_w * (d_x * sum(q_x))
// (Z: the zero point the stored quants carry; 8-bit quants are stored offset by 128 so the
// weights are the unsigned operand.) No horizontal sums. A lane's operations and their order do
// not depend on how many tokens share the tile, so a token alone (the GEMV) gives bit-identical
// results to the same token in a batch.

inline int32_t Load32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Software prefetch of the weight stream, kWeightPrefetchBytes ahead, for the kinds where it
// was measured to help: the k-quants, whose super-block headers seem to keep the hardware
// prefetcher behind (one core streaming from memory: Q4_K 21 -> 38 GB/s, Q5_K 19 -> 34, Q6_K
// 29 -> 37); Q4_0, Q5_0, Q5_1, Q8_0 are at the hardware prefetcher's pace already and lose a
// little with it (`paddock bench --kernels`). GetKernels(isa, Prefetch::kOff | kAll)
// gives a table without it, or with it for every kind, to measure.
// The choice is made once, when the table is built (SetX16): kPf selects the instantiation.
template <X16Kind K, bool kPf>
inline void PrefetchWeights(const uint8_t* p) {
  if constexpr (kPf) {
    for (size_t l = 0; l < X16LayoutOf(K).block; l += 64)
      __builtin_prefetch(p + kWeightPrefetchBytes + l, 0, 3);
  }
}

constexpr X16Layout kSparse = X16LayoutOf(X16Kind::kS8C);
constexpr X16Layout kQ6K = X16LayoutOf(X16Kind::kQ6K);
constexpr int kHalves = kX16Rows / kLanes;  // registers per 16-row group: 1 or 2
constexpr int kRowBytes = 4 * kLanes;       // bytes of a 64-byte group vector per register

// A lookup grid stored as unsigned bytes: value + Z.
template <int Z, size_t... I>
constexpr std::array<uint8_t, 16> Stored(const int8_t* v, std::index_sequence<I...>) {
  return {static_cast<uint8_t>(v[I] + Z)...};
}
// IQ4_NL's grid as DotOffset8 takes weights: value + 128.
alignas(16) constexpr std::array<uint8_t, 16> kIq4NlStoredA =
    Stored<128>(kIq4NlValues, std::make_index_sequence<16>());
const uint8_t* const kIq4NlStored = kIq4NlStoredA.data();
// MXFP4's grid as signed bytes (the int16-sum path: |w| <= 12).
const uint8_t* const kMxfp4Signed = reinterpret_cast<const uint8_t*>(kMxfp4Values);
// With VNNI, MXFP4's grid as value + 12 (unsigned, 0..24): the zero point taken back out in
// float is then 12 x the activations' block sum, not 128 x it. That float term is rounded, and
// against the small values of this grid 128 x its rounding error was 7e-5 of the result; at
// 12 x it is 7e-6, as close as the other kinds.
constexpr int kMxfp4Zero = 12;
alignas(16) constexpr std::array<uint8_t, 16> kMxfp4Plus12A =
    Stored<kMxfp4Zero>(kMxfp4Values, std::make_index_sequence<16>());
const uint8_t* const kMxfp4Plus12 = kMxfp4Plus12A.data();
// With signed dot products and no int16 sums (NEON), MXFP4's grid as IQ4_NL's is stored:
// value + 128, DotOffset8's weight operand.
alignas(16) constexpr std::array<uint8_t, 16> kMxfp4Plus128A =
    Stored<128>(kMxfp4Values, std::make_index_sequence<16>());
const uint8_t* const kMxfp4Plus128 = kMxfp4Plus128A.data();

// Activation bytes x[0..3] broadcast to every lane.
inline VecI Bcast4(const int8_t* x) {
  return SetI(Load32(x));
}

// Nibble lookup tables (Lut16), F of them: table f maps nibble n to scale x (its `bits`-bit
// field f, at bit `bits` f). Looking a field up (vpshufb, the shuffle port) replaces shifting it
// into place on the vector shifter, the port the dot products use.
template <int F>
constexpr std::array<uint8_t, 16 * F> NibbleFields(int bits, int scale) {
  std::array<uint8_t, 16 * F> t{};
  for (int f = 0; f < F; ++f)
    for (int n = 0; n < 16; ++n)
      t[16 * f + n] = static_cast<uint8_t>(scale * ((n >> (bits * f)) & ((1 << bits) - 1)));
  return t;
}
// Q2_K / Q3_K 2-bit fields: fields 0 and 2 of a byte by a mask of its low or high nibble,
// fields 1 and 3 by this table (field 1 of the nibble): one shift per 64 bytes instead of three.
alignas(16) constexpr std::array<uint8_t, 32> kQ2FieldsA = NibbleFields<2>(2, 1);
const uint8_t* const kQ2Field1 = kQ2FieldsA.data() + 16;
// Q6_K's high bits moved to bits 4..5: table f = field f (bits 2f..2f+1) of the nibble, x 16.
alignas(16) constexpr std::array<uint8_t, 32> kQ6HighA = NibbleFields<2>(2, 16);
const uint8_t* const kQ6High = kQ6HighA.data();
// Q3_K's high bits: table m = 4 x bit m of the nibble.
alignas(16) constexpr std::array<uint8_t, 64> kQ3HighA = NibbleFields<4>(1, 4);
const uint8_t* const kQ3High = kQ3HighA.data();

// One Q6_K 32-element block of half h of a 16-row group for T tokens. The 6-bit quants are
// rebuilt unsigned (0..63: low nibbles | high 2 bits << 4, the high bits looked up from their
// nibbles: kQ6High); the first and second 16 elements have their own scales (s_lo, s_hi, times
// d). The zero point (32) comes out as 32 x the activations' 16-element sums (xs: Q6KSums,
// shared by all rows). Without VNNI a maddubs pair q a is at most 2 x 63 x 127, so two add in
// int16 before one widening (the same int32 sums: the quants were once made signed with the
// activations offset by 128 there, which took 128 x each lane's quant sum back out: twice the
// multiplies of a one-token GEMV).
template <int T>
inline void Q6KBlock(const uint8_t* p, int h, const int8_t* xb, int64_t cols, const float* xd,
                     const int32_t* xs, int64_t nb, VecF s_lo, VecF s_hi, VecF* facc) {
  const VecI m4 = Set1I8(15);
  const VecI h0 = LoadRaw(p + kQ6K.extra + kRowBytes * h),
             h1 = LoadRaw(p + kQ6K.extra + 64 + kRowBytes * h);
  const VecI f0 = Table16(kQ6High), f1 = Table16(kQ6High + 16);
  const VecI n0[2] = {AndI(h0, m4), AndI(Srl16(h0, 4), m4)};  // nibbles of the high bits
  const VecI n1[2] = {AndI(h1, m4), AndI(Srl16(h1, 4), m4)};
  VecI acc[T], acc2[T];
  for (int t = 0; t < T; ++t) acc[t] = acc2[t] = ZeroI();
  HalfBlockDots<T, 2>(
      xb, cols,
      [&](int m, VecI* wl, VecI* wh) {
        const VecI v = LoadRaw(p + 64 * m + kRowBytes * h);
        const VecI& f = (m & 1) != 0 ? f1 : f0;
        *wl = OrI(AndI(v, m4), Lut16(f, n0[m / 2]));
        *wh = OrI(AndI(Srl16(v, 4), m4), Lut16(f, n1[m / 2]));
      },
      acc, acc2);
  for (int t = 0; t < T; ++t) {
    const int32_t* st = xs + 2 * t * nb;
    const VecF f = Fma(ToFloat(SubI(acc[t], SetI(st[0]))), s_lo,
                       Mul(ToFloat(SubI(acc2[t], SetI(st[1]))), s_hi));
    facc[t] = Fma(f, Set1(xd[t * nb]), facc[t]);
  }
}

// One Q3_K 32-element block of half h of a 16-row group for T tokens: the 3-bit quants rebuilt
// unsigned from their 2-bit planes and high bits (u = low + 4 high, q = u - 4) and dotted with
// the activations. As Q2KBlock's, the halves' sums are packed into word pairs and scaled in
// integer by their signed 6-bit scales (sc: the lanes' pairs), and 4 x each half's activation
// sum (xi, Q2KSumPairs) is taken back out in integer too:
//   y += d_x d (S1 - 4 S2),  S1 = sc_lo dot_lo + sc_hi dot_hi,  S2 = sc_lo sum_lo + sc_hi sum_hi
template <int T>
inline void Q3KBlock(const uint8_t* p, int h, const int8_t* xb, int64_t cols, const float* xd,
                     const int32_t* xi, int64_t nb, VecI sc, VecF d, VecF* facc) {
  constexpr X16Layout kL = X16LayoutOf(X16Kind::kQ3K);
  const VecI k3 = Set1I8(3), m4 = Set1I8(15), field1 = Table16(kQ2Field1);
  const VecI p0 = LoadRaw(p + kRowBytes * h), p1 = LoadRaw(p + 64 + kRowBytes * h),
             hm = LoadRaw(p + kL.extra + kRowBytes * h);
  // As Q2KBlock's, the 2-bit fields from the nibbles; the high bits likewise: bit m of the low
  // (first 16) or high (second 16) nibble of hm, looked up as 4 x the bit (kQ3High).
  const VecI n0[2] = {AndI(p0, m4), AndI(Srl16(p0, 4), m4)};
  const VecI n1[2] = {AndI(p1, m4), AndI(Srl16(p1, 4), m4)};
  const VecI h0 = AndI(hm, m4), h1 = AndI(Srl16(hm, 4), m4);
  VecI acc[T], acc2[T];
  for (int t = 0; t < T; ++t) acc[t] = acc2[t] = ZeroI();
  HalfBlockDots<T, 4>(
      xb, cols,
      [&](int m, VecI* wl, VecI* wh) {
        const VecI high = Table16(kQ3High + 16 * m);
        const VecI lo = (m & 1) != 0 ? Lut16(field1, n0[m / 2]) : AndI(n0[m / 2], k3);
        const VecI hi = (m & 1) != 0 ? Lut16(field1, n1[m / 2]) : AndI(n1[m / 2], k3);
        *wl = OrI(lo, Lut16(high, h0));
        *wh = OrI(hi, Lut16(high, h1));
      },
      acc, acc2);
  const VecI two = SetI(2);
  for (int t = 0; t < T; ++t) {
    const VecI s1 = MulAddPairs16(PackLoHi16(acc[t], acc2[t]), sc);
    const VecI s2 = MulAddPairs16(sc, SetI(xi[t * nb]));
    facc[t] = Fma(ToFloat(SubI(s1, ShlV(s2, two))), Mul(d, Set1(xd[t * nb])), facc[t]);
  }
}

// The dot products of a half block (Q2_K, Q3_K, Q6_K): weights(m, &lo, &hi) gives the
// unsigned quants of elements 4m..4m+3 and 16 + 4m..; without VNNI, P maddubs pairs at a time
// add in int16 before one widening (Q2_K / Q3_K: all 4, at most 4 x 2 x 7 x 128; Q6_K: 2).
template <int T, int P, class W>
inline void HalfBlockDots(const int8_t* xb, int64_t cols, W weights, VecI* acc, VecI* acc2) {
  if constexpr (kInt16Sums) {
    static_assert(4 % P == 0, "the block's 4 steps in whole chains");
#pragma GCC unroll 4
    for (int m0 = 0; m0 < 4; m0 += P) {
      VecI s_lo[T], s_hi[T];
      for (int t = 0; t < T; ++t) s_lo[t] = s_hi[t] = ZeroI();
#pragma GCC unroll 4
      for (int m = m0; m < m0 + P; ++m) {
        VecI wl, wh;
        weights(m, &wl, &wh);
        for (int t = 0; t < T; ++t) {
          const int8_t* xt = xb + t * cols;
          s_lo[t] = Add16(s_lo[t], MulPairs16(wl, Bcast4(xt + 4 * m)));
          s_hi[t] = Add16(s_hi[t], MulPairs16(wh, Bcast4(xt + 16 + 4 * m)));
        }
      }
      for (int t = 0; t < T; ++t) {
        acc[t] = WidenPairs16(acc[t], s_lo[t]);
        acc2[t] = WidenPairs16(acc2[t], s_hi[t]);
      }
    }
  } else {
#pragma GCC unroll 4
    for (int m = 0; m < 4; ++m) {
      VecI wl, wh;
      weights(m, &wl, &wh);
      for (int t = 0; t < T; ++t) {
        const int8_t* xt = xb + t * cols;
        acc[t] = DotU8S8Bcast(acc[t], wl, xt + 4 * m);
        acc2[t] = DotU8S8Bcast(acc2[t], wh, xt + 16 + 4 * m);
      }
    }
  }
}

// One Q2_K 32-element block of half h for T tokens: the 2-bit quants (unsigned) dotted with the
// activations. The two 16-element halves' int32 sums (at most 16 x 3 x 128: words) are packed
// into one word pair per lane and scaled by their 4-bit scales in integer, one vpmaddwd; the
// minimums likewise against the activations' 16-element sums:
//   y += d_x (d S1 - dmin / 16 S2),  S1 = sc_lo dot_lo + sc_hi dot_hi,
//   S2 = 16 (m_lo sum_lo + m_hi sum_hi)
// sc / m16: the lanes' scale word pairs (sc, 16 m); xi: token t's sum pair for the block at
// xi[t nb] (Q2KSumPairs).
template <int T>
inline void Q2KBlock(const uint8_t* p, int h, const int8_t* xb, int64_t cols, const float* xd,
                     const int32_t* xi, int64_t nb, VecI sc, VecI m16, VecF d, VecF ndmin16,
                     VecF* facc) {
  const VecI k3 = Set1I8(3), m4 = Set1I8(15), field1 = Table16(kQ2Field1);
  const VecI p0 = LoadRaw(p + kRowBytes * h), p1 = LoadRaw(p + 64 + kRowBytes * h);
  const VecI n0[2] = {AndI(p0, m4), AndI(Srl16(p0, 4), m4)};  // low, high nibbles
  const VecI n1[2] = {AndI(p1, m4), AndI(Srl16(p1, 4), m4)};
  VecI acc[T], acc2[T];
  for (int t = 0; t < T; ++t) acc[t] = acc2[t] = ZeroI();
  HalfBlockDots<T, 4>(
      xb, cols,
      [&](int m, VecI* wl, VecI* wh) {  // field m: nibble m / 2, its low or high pair
        *wl = (m & 1) != 0 ? Lut16(field1, n0[m / 2]) : AndI(n0[m / 2], k3);
        *wh = (m & 1) != 0 ? Lut16(field1, n1[m / 2]) : AndI(n1[m / 2], k3);
      },
      acc, acc2);
  for (int t = 0; t < T; ++t) {
    const VecI s1 = MulAddPairs16(PackLoHi16(acc[t], acc2[t]), sc);
    const VecI s2 = MulAddPairs16(m16, SetI(xi[t * nb]));
    const VecF v = Fma(ToFloat(s1), d, Mul(ToFloat(s2), ndmin16));
    facc[t] = Fma(v, Set1(xd[t * nb]), facc[t]);
  }
}

// The activations' 16-element sums of T tokens: store(t nb + b, lo, hi) with the sums of token
// t's quants over elements 32 b .. 32 b + 15 and 32 b + 16 .. 32 b + 31.
template <class Store>
inline void HalfBlockSums(const int8_t* xq, int64_t cols, int T, Store store) {
  const int64_t nb = cols / kQK;
  for (int t = 0; t < T; ++t)
    for (int64_t b = 0; b < nb; ++b) {
      const int8_t* x = xq + t * cols + kQK * b;
      store(t * nb + b, SumI8x16(x), SumI8x16(x + 16));
    }
}
// Q2KBlock's and Q3KBlock's: xi[i] = lo | hi << 16 (a word pair).
inline void Q2KSumPairs(const int8_t* xq, int64_t cols, int T, int32_t* xi) {
  HalfBlockSums(xq, cols, T, [xi](int64_t i, int32_t lo, int32_t hi) {
    xi[i] = static_cast<int32_t>(static_cast<uint16_t>(lo) |
                                 static_cast<uint32_t>(static_cast<uint16_t>(hi)) << 16);
  });
}
// Q6KBlock's: xs[2 i], xs[2 i + 1] = 32 lo, 32 hi.
inline void Q6KSums(const int8_t* xq, int64_t cols, int T, int32_t* xs) {
  HalfBlockSums(xq, cols, T, [xs](int64_t i, int32_t lo, int32_t hi) {
    xs[2 * i] = 32 * lo;
    xs[2 * i + 1] = 32 * hi;
  });
}

// The ISA's own tiles (vec.h names the header): the 2:4 sparse tile, and where the ISA has
// block dot products of its own (kIsaBlocks) IsaTiles<K>::BlockDots, a block's sums for T
// tokens; the other ISAs leave IsaTiles undefined and never name it.
template <X16Kind K>
struct IsaTiles;
#include PADDOCK_X16_TILES_HEADER

// One 16-row group x T tokens (token t's quants at xq + t * cols, scales at xd/xds + t * nb).
// G: elements per scale group. xp: the tokens' activations as the ISA's own blocks take them
// (IsaTiles<K>::PackTokens), or null.
template <X16Kind K, int G, int T, bool kPf>
void X16Tile(const uint8_t* grp, int64_t cols, const int8_t* xq, const float* xd, const float* xds,
             float* y, int64_t ldy, const int8_t* xp = nullptr) {
  constexpr bool kSplit = T <= kX16SplitTokens;  // two int32 chains per token
  // With VNNI and two chains, 4-bit kinds dot their high nibbles in place (16 q: a dword's four
  // products stay below 2^17) and shift that chain's sum once per block, exactly, instead of
  // every 64 bytes: the shifter is the dot products' port.
  constexpr bool kHi16 = X16IsQ4(K) && !X16IsQ5(K) && kSplit && !kInt16Sums;
  constexpr int BPS = G / kQK;
  constexpr X16Layout kL = X16LayoutOf(K);
  // Lookup kinds: the grid as stored bytes (value + 128), so a nibble's lookup is DotOffset8's
  // weight operand.
  // Without VNNI, MXFP4's small values (|w| <= 12) take the sign trick with int16 sums instead;
  // with it, they are stored + 12 (kMxfp4Plus12) as DotU8S8's unsigned operand.
  constexpr bool kM4Int16 = K == X16Kind::kM4 && kInt16Sums && kOffset8Zero == 0.0f;
  constexpr bool kM4Plus12 = K == X16Kind::kM4 && kOffset8Zero != 0.0f;
  constexpr bool kM4Plus128 = K == X16Kind::kM4 && !kInt16Sums && kOffset8Zero == 0.0f;
  constexpr float kZero =
      K == X16Kind::kQ4S
          ? 8.0f
          : (K == X16Kind::kQ5S
                 ? 16.0f
                 : (X16HasMin(K) ? 0.0f : (kM4Plus12 ? float{kMxfp4Zero} : kOffset8Zero)));
  const int64_t nb = cols / kQK;
  const VecI m4 = Set1I8(15);
  VecI lut = ZeroI();
  if constexpr (X16IsLut(K))
    lut = Table16(kM4Int16     ? kMxfp4Signed
                  : kM4Plus12  ? kMxfp4Plus12
                  : kM4Plus128 ? kMxfp4Plus128
                               : kIq4NlStored);
  static_assert(K != X16Kind::kM4 || kM4Int16 || kM4Plus12 || kM4Plus128,
                "MXFP4 needs one of its three paths");
  // Q2_K, Q3_K: vpshufb picks of a scale word's bytes 0, 1 (even blocks) or 2, 3 (odd) into
  // the low bytes of the lane's two words.
  VecI q2_pick[2] = {ZeroI(), ZeroI()};
  if constexpr (K == X16Kind::kQ2K || K == X16Kind::kQ3K) {
    const VecI base = ShlV(AndI(LaneIndex(), SetI(3)), SetI(2));  // the lane's first byte
    const VecI both = OrI(base, ShlV(base, SetI(16)));
    q2_pick[0] = AddI(both, SetI(static_cast<int32_t>(0x80018000u)));
    q2_pick[1] = AddI(both, SetI(static_cast<int32_t>(0x80038002u)));
  }
  // With two halves (AVX2) the one-token GEMV (decode: streaming from memory) takes its blocks
  // in chunks, both halves of a chunk before the next. A pass over a chunk reads half of each
  // 64-byte line, so a half-outer loop fetches the whole group from memory at twice the compute
  // rate, then computes the other half from cache while the memory idles. Each half's sums wait
  // in `part` between its chunks; a lane's operations and their order are unchanged. Token
  // tiles (compute-bound, from cache) keep the half-outer loop: alternating cost them 10-35%
  // from L2 (register pressure), where the GEMV streams up to 1.4x faster (docs/architecture.md).
  const int64_t chunk =
      kHalves == 1 || T > 1 ? nb : (kX16ChunkBlocks < BPS ? BPS : kX16ChunkBlocks);
  VecF part[kHalves][T];
  for (int64_t c0 = 0; c0 < nb; c0 += chunk) {
    const int64_t c1 = c0 + chunk < nb ? c0 + chunk : nb;
    for (int h = 0; h < kHalves; ++h) {
      const uint8_t* p = grp + kL.prefix + static_cast<size_t>(c0 / BPS) * X16GroupBytes(K, BPS);
      VecF facc[T];
      for (int t = 0; t < T; ++t) facc[t] = c0 == 0 ? Zero() : part[h][t];
      for (int64_t b0 = c0; b0 < c1; b0 += BPS) {
        VecF sw = Zero(), mw = Zero();
        KHeader kh{};
        VecI l4x_lo = ZeroI(), l4x_hi = ZeroI();  // IQ4_XS: scales_l bytes, scales_h bits
        VecI q3w[4] = {ZeroI(), ZeroI(), ZeroI(), ZeroI()};  // Q3_K / Q2_K: scale words
        if constexpr (X16IsK(K)) {
          kh = LoadKHeader(p, h);
        } else if constexpr (K == X16Kind::kM4) {  // 2^(e - 128): the exponent's bits, halved
          sw = Mul(BitsToFloat(ShlV(LoadU8(p + kLanes * h), SetI(23))), Set1(0.5f));
        } else if constexpr (K == X16Kind::kQ2K) {
          kh.d = LoadF16(reinterpret_cast<const uint16_t*>(p) + kLanes * h);
          kh.ndmin = Sub(Zero(), LoadF16(reinterpret_cast<const uint16_t*>(p + 32) + kLanes * h));
          for (int v = 0; v < 4; ++v) q3w[v] = LoadRaw(p + 64 + 64 * v + kRowBytes * h);
        } else if constexpr (K == X16Kind::kQ3K) {
          kh.d = LoadF16(reinterpret_cast<const uint16_t*>(p) + kLanes * h);
          for (int v = 0; v < 3; ++v) q3w[v] = LoadRaw(p + 32 + 64 * v + kRowBytes * h);
        } else if constexpr (K == X16Kind::kL4X) {
          kh.d = LoadF16(reinterpret_cast<const uint16_t*>(p) + kLanes * h);
          l4x_lo = LoadRaw(p + 32 + kRowBytes * h);
          l4x_hi = LoadU16(p + 96 + 2 * kLanes * h);
        } else if constexpr (K == X16Kind::kQ6K) {
          kh.d = LoadF16(reinterpret_cast<const uint16_t*>(p) + kLanes * h);
        } else {
          if constexpr (K != X16Kind::kQ8C)
            sw = LoadF16(reinterpret_cast<const uint16_t*>(p) + kLanes * h);
          if constexpr (X16HasMin(K))
            mw = LoadF16(reinterpret_cast<const uint16_t*>(p + 32) + kLanes * h);
        }
        const uint8_t* hdr = p;
        p += kL.header;
        if constexpr (K == X16Kind::kQ2K || K == X16Kind::kQ3K) {
          // Unrolled, so that the scale words' picks and shifts are constants per block.
#pragma GCC unroll 8
          for (int bi = 0; bi < BPS; ++bi, p += kL.block) {
            const int64_t b = b0 + bi;
            const int8_t* xb = xq + b * kQK;
            if (h == 0) PrefetchWeights<K, kPf>(p);
            if constexpr (K == X16Kind::kQ2K) {
              // Scale bytes 2 bi, 2 bi + 1 (sc | m << 4) of each lane to word pairs (sc, 16 m).
              const VecI pair = Shuffle8(q3w[bi / 2], (bi & 1) != 0 ? q2_pick[1] : q2_pick[0]);
              Q2KBlock<T>(p, h, xb, cols, xd + b, reinterpret_cast<const int32_t*>(xds) + b, nb,
                          AndI(pair, SetI(0x000F000F)), AndI(pair, SetI(0x00F000F0)), kh.d,
                          Mul(kh.ndmin, Set1(1.0f / 16)), facc);
            }
            if constexpr (K == X16Kind::kQ3K) {
              // Sub-blocks 2 bi, 2 bi + 1: low 4 bits in bytes 2 bi % 8, + 1 (nibble bi / 4), high
              // 2 in bytes 8 + 2 bi % 4, + 1 (bits 2 (bi / 2)); to word pairs, less 32.
              const VecI pick = (bi & 1) != 0 ? q2_pick[1] : q2_pick[0];
              const VecI lo =
                  AndI(Srl16(Shuffle8(q3w[(bi % 4) / 2], pick), 4 * (bi / 4)), SetI(0x000F000F));
              const VecI hi = AndI(Srl16(Shuffle8(q3w[2], pick), 2 * (bi / 2)), SetI(0x00030003));
              const VecI sc = Add16(OrI(lo, Sll16(hi, 4)), SetI(static_cast<int32_t>(0xFFE0FFE0u)));
              Q3KBlock<T>(p, h, xb, cols, xd + b, reinterpret_cast<const int32_t*>(xds) + b, nb, sc,
                          kh.d, facc);
            }
          }
          continue;
        }
        for (int bi = 0; bi < BPS; ++bi, p += kL.block) {
          const int64_t b = b0 + bi;
          const int8_t* xb = xq + b * kQK;
          if (h == 0) PrefetchWeights<K, kPf>(p);
          if constexpr (K == X16Kind::kQ6K) {
            VecF s_lo, s_hi;
            Q6KScales(hdr, h, bi, kh.d, &s_lo, &s_hi);
            Q6KBlock<T>(p, h, xb, cols, xd + b, reinterpret_cast<const int32_t*>(xds) + 2 * b, nb,
                        s_lo, s_hi, facc);
            continue;
          }
          if constexpr (K == X16Kind::kL4X) {  // d * (ls - 32), ls = 4 low | 2 high bits
            const VecI ls = OrI(AndI(ShrV(l4x_lo, SetI(4 * bi)), SetI(15)),
                                ShlV(AndI(ShrV(l4x_hi, SetI(2 * bi)), SetI(3)), SetI(4)));
            sw = Mul(kh.d, ToFloat(SubI(ls, SetI(32))));
          }
          if constexpr (X16IsK(K)) {
            const VecI shift = SetI(8 * (bi % 4)), byte = SetI(255);
            sw = Mul(kh.d, ToFloat(AndI(ShrV(bi < 4 ? kh.sc_lo : kh.sc_hi, shift), byte)));
            mw = Mul(kh.ndmin, ToFloat(AndI(ShrV(bi < 4 ? kh.mn_lo : kh.mn_hi, shift), byte)));
          }
          VecI acc[T], acc2[T];
          for (int t = 0; t < T; ++t) acc[t] = acc2[t] = ZeroI();
          if constexpr (kM4Int16) {
            // MXFP4 without VNNI: signed grid values, |w| x sign(x, w) pairs (at most
            // 2 x 12 x 127) summed in int16 over the block, widened once per half.
            VecI s_lo[T], s_hi[T];
            for (int t = 0; t < T; ++t) s_lo[t] = s_hi[t] = ZeroI();
#pragma GCC unroll 4
            for (int m = 0; m < 4; ++m) {
              const VecI v = LoadRaw(p + 64 * m + kRowBytes * h);
              const VecI lo = Lut16(lut, AndI(v, m4)), hi = Lut16(lut, AndI(Srl16(v, 4), m4));
              const VecI alo = Abs8(lo), ahi = Abs8(hi);
              for (int t = 0; t < T; ++t) {
                const int8_t* xt = xb + t * cols;
                s_lo[t] = Add16(s_lo[t], MulPairs16(alo, Sign8(Bcast4(xt + 4 * m), lo)));
                s_hi[t] = Add16(s_hi[t], MulPairs16(ahi, Sign8(Bcast4(xt + 16 + 4 * m), hi)));
              }
            }
            for (int t = 0; t < T; ++t) {
              acc[t] = WidenPairs16(acc[t], s_lo[t]);
              acc2[t] = WidenPairs16(acc2[t], s_hi[t]);
            }
          } else if constexpr (X16IsLut(K)) {
            // Nibbles looked up in the grid: int8 weights (as value + 128), two chains per token.
#pragma GCC unroll 4
            for (int m = 0; m < 4; ++m) {
              const VecI v = LoadRaw(p + 64 * m + kRowBytes * h);
              const VecI lo = Lut16(lut, AndI(v, m4)), hi = Lut16(lut, AndI(Srl16(v, 4), m4));
              for (int t = 0; t < T; ++t) {
                const int8_t* xt = xb + t * cols;
                if constexpr (kM4Plus12) {
                  acc[t] = DotU8S8Bcast(acc[t], lo, xt + 4 * m);
                  acc2[t] = DotU8S8Bcast(acc2[t], hi, xt + 16 + 4 * m);
                } else {
                  acc[t] = DotOffset8Bcast(acc[t], lo, xt + 4 * m);
                  acc2[t] = DotOffset8Bcast(acc2[t], hi, xt + 16 + 4 * m);
                }
              }
            }
          } else if constexpr (kIsaBlocks && X16IsaBlockKind(K)) {
            IsaTiles<K>::template BlockDots<T>(p, h, xb, cols, acc, xp, b);
          } else if constexpr (X16IsQ4(K) && kInt16Sums) {
            // Without VNNI: maddubs pair sums added in int16, widened once per chain. A pair is at
            // most 2 x 15 x 127 for 4-bit quants (the block's 8 fit in int16: one chain) and
            // 2 x 31 x 127 for 5-bit ones (4 fit: the low and high halves are two chains).
            constexpr int kChains = X16IsQ5(K) ? 2 : 1;
            VecI q5 = ZeroI();
            if constexpr (X16IsQ5(K)) q5 = LoadRaw(p + kL.extra + kRowBytes * h);
            for (int c = 0; c < kChains; ++c) {
              VecI s16[T];
              for (int t = 0; t < T; ++t) s16[t] = ZeroI();
#pragma GCC unroll 4
              for (int m = 0; m < 4; ++m) {
                const VecI v = LoadRaw(p + 64 * m + kRowBytes * h);
                if constexpr (X16IsQ5(K)) {  // 5th bits m (low half) and 4 + m (high half)
                  const VecI b4 = Set1I8(16);
                  const VecI q = c == 0 ? OrI(AndI(v, m4), AndI(Sll16(q5, 4 - m), b4))
                                        : OrI(AndI(Srl16(v, 4), m4), AndI(Srl16(q5, m), b4));
                  for (int t = 0; t < T; ++t)
                    s16[t] = Add16(s16[t], MulPairs16(q, Bcast4(xb + t * cols + 16 * c + 4 * m)));
                } else {
                  const VecI lo = AndI(v, m4), hi = AndI(Srl16(v, 4), m4);
                  for (int t = 0; t < T; ++t) {
                    const int8_t* xt = xb + t * cols;
                    s16[t] = Add16(s16[t], Add16(MulPairs16(lo, Bcast4(xt + 4 * m)),
                                                 MulPairs16(hi, Bcast4(xt + 16 + 4 * m))));
                  }
                }
              }
              for (int t = 0; t < T; ++t) acc[t] = WidenPairs16(acc[t], s16[t]);
            }
          } else if constexpr (X16IsQ4(K)) {
            VecI q5 = ZeroI();
            if constexpr (X16IsQ5(K)) q5 = LoadRaw(p + kL.extra + kRowBytes * h);
#pragma GCC unroll 4
            for (int m = 0; m < 4; ++m) {
              const VecI v = LoadRaw(p + 64 * m + kRowBytes * h);
              VecI lo = AndI(v, m4);
              // kHi16: the high nibbles left in place (16 q), their chain shifted once per block
              VecI hi = kHi16 ? AndI(v, Set1I8(static_cast<int8_t>(0xF0))) : AndI(Srl16(v, 4), m4);
              if constexpr (X16IsQ5(K)) {  // 5th bits m (low half) and 4 + m (high half) to bit 4
                const VecI b4 = Set1I8(16);
                lo = OrI(lo, AndI(Sll16(q5, 4 - m), b4));
                hi = OrI(hi, AndI(Srl16(q5, m), b4));
              }
              for (int t = 0; t < T; ++t) {
                const int8_t* xt = xb + t * cols;
                acc[t] = DotU8S8Bcast(acc[t], lo, xt + 4 * m);
                VecI& a2 = kSplit ? acc2[t] : acc[t];
                a2 = DotU8S8Bcast(a2, hi, xt + 16 + 4 * m);
              }
            }
          } else {
#pragma GCC unroll 8
            for (int g = 0; g < 8; ++g) {
              const VecI v = LoadRaw(p + 64 * g + kRowBytes * h);
              for (int t = 0; t < T; ++t) {
                VecI& a = (kSplit && (g & 1)) ? acc2[t] : acc[t];
                a = DotOffset8Bcast(a, v, xb + t * cols + 4 * g);
              }
            }
          }
          for (int t = 0; t < T; ++t) {
            const VecF f =
                ToFloat(kHi16 ? AddI(acc[t], Sra32(acc2[t], 4))
                              : (kSplit || X16IsLut(K) ? AddI(acc[t], acc2[t]) : acc[t]));
            const float d = xd[t * nb + b], ds = xds[t * nb + b];
            if constexpr (X16HasMin(K)) {
              facc[t] = Fma(Mul(f, Set1(d)), sw, facc[t]);
              facc[t] = Fma(mw, Set1(ds), facc[t]);
            } else {
              const VecF tmp = Fma(f, Set1(d), Set1(-kZero * ds));
              facc[t] = K == X16Kind::kQ8C ? Add(facc[t], tmp) : Fma(tmp, sw, facc[t]);
            }
          }
        }
      }
      for (int t = 0; t < T; ++t) part[h][t] = facc[t];
    }
  }
  for (int h = 0; h < kHalves; ++h) {
    VecF row_scale = Zero();
    if constexpr (K == X16Kind::kQ8C)
      row_scale = Load(reinterpret_cast<const float*>(grp) + kLanes * h);
    for (int t = 0; t < T; ++t) {
      if constexpr (K == X16Kind::kQ8C) part[h][t] = Mul(part[h][t], row_scale);
      Store(y + t * ldy + kLanes * h, part[h][t]);
    }
  }
}

// The tile of a kind: the 2:4 sparse kind has its own.
template <X16Kind K, int G, int T, bool kPf>
inline void Tile(const uint8_t* grp, int64_t cols, const int8_t* xq, const float* xd,
                 const float* xds, float* y, int64_t ldy, const int8_t* xp) {
  if constexpr (K == X16Kind::kS8C) {
    SparseTile<T>(grp, cols, xq, xd, y, ldy);
  } else {
    X16Tile<K, G, T, kPf>(grp, cols, xq, xd, xds, y, ldy, xp);
  }
}

// Token tiles outside (a tile's activations stay in L1), 16-row groups inside.
template <X16Kind K, int G, bool kPf>
void GemmX16(const void* w, size_t rb, int64_t cols, int64_t rows, const ActQ8& x, int n_tok,
             float* y, int64_t ldy) {
  const int64_t nb = cols / kQK;
  const auto* base = static_cast<const uint8_t*>(w);
  const size_t group_bytes = kX16Rows * rb;
  constexpr int kMaxT = X16MaxTile(K);
  for (int t0 = 0; t0 < n_tok; t0 += kMaxT) {
    const int T = n_tok - t0 < kMaxT ? n_tok - t0 : kMaxT;
    const int8_t* xq = x.qs + static_cast<int64_t>(t0) * cols;
    const float* xd = x.d + static_cast<int64_t>(t0) * nb;
    const float* xds = x.ds + static_cast<int64_t>(t0) * nb;
    // 16-element activation sums, in place of xds (Q2_K, Q3_K: packed pairs; Q6_K: 32 x each)
    constexpr bool kQ6Sums = K == X16Kind::kQ6K;
    if constexpr (K == X16Kind::kQ2K || K == X16Kind::kQ3K || kQ6Sums) {
      thread_local std::vector<int32_t> sums;  // (grows once per thread to the widest matrix)
      const size_t need = static_cast<size_t>(kQ6Sums ? 2 : 1) * kMaxT * static_cast<size_t>(nb);
      if (sums.size() < need) sums.resize(need);
      if constexpr (kQ6Sums) {
        Q6KSums(xq, cols, T, sums.data());
      } else {
        Q2KSumPairs(xq, cols, T, sums.data());
      }
      xds = reinterpret_cast<const float*>(sums.data());
    }
    // The ISA's own layout of the tile's activations, once for all row groups (NEON i8mm: token
    // pairs' 8-byte groups side by side, SMMLA's operand whole)
    const int8_t* xp = nullptr;
    if constexpr (kIsaBlocks && X16IsaBlockKind(K)) {
      thread_local std::vector<int8_t> packed;  // (grows once per thread to the widest matrix)
      const size_t need = static_cast<size_t>(kMaxT) * static_cast<size_t>(cols);
      if (packed.size() < need) packed.resize(need);
      if (IsaTiles<K>::PackTokens(xq, cols, T, packed.data())) xp = packed.data();
    }
    for (int64_t g = 0; g < rows / kX16Rows; ++g) {
      const uint8_t* grp = base + static_cast<size_t>(g) * group_bytes;
      float* yg = y + static_cast<int64_t>(t0) * ldy + g * kX16Rows;
      switch (T) {
        case 8:
          if constexpr (kMaxT >= 8) Tile<K, G, 8, kPf>(grp, cols, xq, xd, xds, yg, ldy, xp);
          break;
        case 7:
          if constexpr (kMaxT >= 7) Tile<K, G, 7, kPf>(grp, cols, xq, xd, xds, yg, ldy, xp);
          break;
        case 6:
          if constexpr (kMaxT >= 6) Tile<K, G, 6, kPf>(grp, cols, xq, xd, xds, yg, ldy, xp);
          break;
        case 5:
          if constexpr (kMaxT >= 5) Tile<K, G, 5, kPf>(grp, cols, xq, xd, xds, yg, ldy, xp);
          break;
        case 4:
          Tile<K, G, 4, kPf>(grp, cols, xq, xd, xds, yg, ldy, xp);
          break;
        case 3:
          Tile<K, G, 3, kPf>(grp, cols, xq, xd, xds, yg, ldy, xp);
          break;
        case 2:
          Tile<K, G, 2, kPf>(grp, cols, xq, xd, xds, yg, ldy, xp);
          break;
        default:
          Tile<K, G, 1, kPf>(grp, cols, xq, xd, xds, yg, ldy, xp);
          break;
      }
    }
  }
}

template <X16Kind K, int G, bool kPf>
void GemvQ8X16(const void* w, size_t rb, int64_t cols, int64_t rows, const ActQ8& x, float* y) {
  GemmX16<K, G, kPf>(w, rb, cols, rows, x, 1, y, rows);
}

template <GgmlType Type, X16Kind K, int G>
void SetX16(KernelTable* t, Prefetch prefetch) {
  const bool pf =
      prefetch == Prefetch::kAll || (prefetch == Prefetch::kAuto && PrefetchesByDefault(K, t->isa));
  t->gemv_q8[static_cast<int>(Type)] = pf ? GemvQ8X16<K, G, true> : GemvQ8X16<K, G, false>;
  t->gemm_q8[static_cast<int>(Type)] = pf ? GemmX16<K, G, true> : GemmX16<K, G, false>;
}

}  // namespace

void SetX16Kernels(KernelTable* t, Prefetch prefetch) {
  SetX16<GgmlType::kQ4_0X16, X16Kind::kQ4S, 32>(t, prefetch);
  SetX16<GgmlType::kQ8_0X16, X16Kind::kQ8B, 32>(t, prefetch);
  SetX16<GgmlType::kPQ8_C, X16Kind::kQ8C, 32>(t, prefetch);
  SetX16<GgmlType::kPS8_C, X16Kind::kS8C, 32>(t, prefetch);
  SetX16<GgmlType::kPQ4_G32, X16Kind::kQ4S, 32>(t, prefetch);
  SetX16<GgmlType::kPQ4_G64, X16Kind::kQ4S, 64>(t, prefetch);
  SetX16<GgmlType::kPQ4_G128, X16Kind::kQ4S, 128>(t, prefetch);
  SetX16<GgmlType::kPQ4_G32Z, X16Kind::kQ4Z, 32>(t, prefetch);
  SetX16<GgmlType::kPQ4_G64Z, X16Kind::kQ4Z, 64>(t, prefetch);
  SetX16<GgmlType::kPQ4_G128Z, X16Kind::kQ4Z, 128>(t, prefetch);
  SetX16<GgmlType::kQ4_KX16, X16Kind::kQ4K, kQK_K>(t, prefetch);
  SetX16<GgmlType::kQ6_KX16, X16Kind::kQ6K, kQK_K>(t, prefetch);
  SetX16<GgmlType::kQ5_0X16, X16Kind::kQ5S, kQK>(t, prefetch);
  SetX16<GgmlType::kQ5_1X16, X16Kind::kQ5Z, kQK>(t, prefetch);
  SetX16<GgmlType::kQ5_KX16, X16Kind::kQ5K, kQK_K>(t, prefetch);
  SetX16<GgmlType::kIQ4_NLX16, X16Kind::kL4S, kQK>(t, prefetch);
  SetX16<GgmlType::kIQ4_XSX16, X16Kind::kL4X, kQK_K>(t, prefetch);
  SetX16<GgmlType::kMXFP4X16, X16Kind::kM4, kQK>(t, prefetch);
  SetX16<GgmlType::kQ3_KX16, X16Kind::kQ3K, kQK_K>(t, prefetch);
  SetX16<GgmlType::kQ2_KX16, X16Kind::kQ2K, kQK_K>(t, prefetch);
}

}  // namespace PADDOCK_ISA_NS
}  // namespace paddock
