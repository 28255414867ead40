// kernels/simd/gemm_x16.cpp: the 16-row interleaved layouts (formats/x16_layout.h): one row per
// 32-bit lane, int8 activations broadcast 4 bytes at a time. The register tile itself differs
// between the ISAs (AVX-512: 16 rows per register with VNNI and a zero point for the 8-bit
// kinds; AVX2: two 8-row halves, maddubs and the sign trick), so it has one header per ISA;
// the token tiling, the prefetch choice and the table entries are written once here.
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
    for (size_t l = 0; l < X16LayoutOf(K).block; l += 64) _mm_prefetch(reinterpret_cast<const char*>(p + kWeightPrefetchBytes + l), _MM_HINT_T0);
  }
}

constexpr bool IsQ5(X16Kind k) { return X16IsQ5(k); }
constexpr bool IsQ4(X16Kind k) { return X16IsQ4(k); }
constexpr bool HasMin(X16Kind k) { return X16HasMin(k); }
constexpr bool IsK(X16Kind k) { return X16IsK(k); }


#include PADDOCK_X16_TILE_HEADER  // the ISA's tile (vec.h names it)

// The tile of a kind: the 2:4 sparse kind has its own.
template <X16Kind K, int G, int T, bool kPf>
inline void Tile(const uint8_t* grp, int64_t cols, const int8_t* xq, const float* xd, const float* xds, float* y, int64_t ldy) {
  if constexpr (K == X16Kind::kS8C) {
    SparseTile<T>(grp, cols, xq, xd, y, ldy);
  } else {
    X16Tile<K, G, T, kPf>(grp, cols, xq, xd, xds, y, ldy);
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
    for (int64_t g = 0; g < rows / kX16Rows; ++g) {
      const uint8_t* grp = base + static_cast<size_t>(g) * group_bytes;
      float* yg = y + static_cast<int64_t>(t0) * ldy + g * kX16Rows;
      switch (T) {
        case 8: if constexpr (kMaxT >= 8) Tile<K, G, 8, kPf>(grp, cols, xq, xd, xds, yg, ldy); break;
        case 7: if constexpr (kMaxT >= 7) Tile<K, G, 7, kPf>(grp, cols, xq, xd, xds, yg, ldy); break;
        case 6: if constexpr (kMaxT >= 6) Tile<K, G, 6, kPf>(grp, cols, xq, xd, xds, yg, ldy); break;
        case 5: if constexpr (kMaxT >= 5) Tile<K, G, 5, kPf>(grp, cols, xq, xd, xds, yg, ldy); break;
        case 4: Tile<K, G, 4, kPf>(grp, cols, xq, xd, xds, yg, ldy); break;
        case 3: Tile<K, G, 3, kPf>(grp, cols, xq, xd, xds, yg, ldy); break;
        case 2: Tile<K, G, 2, kPf>(grp, cols, xq, xd, xds, yg, ldy); break;
        default: Tile<K, G, 1, kPf>(grp, cols, xq, xd, xds, yg, ldy); break;
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
  const bool pf = prefetch == Prefetch::kAll || (prefetch == Prefetch::kAuto && PrefetchesByDefault(K));
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
}

}  // namespace PADDOCK_ISA_NS
}  // namespace paddock
