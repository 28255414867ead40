// kernels/simd/gemm_amx.cpp: the integer GEMM on AMX tiles (Intel Advanced Matrix Extensions:
// `tdpbsud` / `tdpbssd`, a 16 x 16 int32 tile += 16 x 64 int8 by 64 x 16 int8 per instruction,
// on a unit of its own). Compiled with the AVX-512 and AMX flags into namespace `amx`; installed
// by dispatch.cpp as the `amx` table only where the CPU has AMX-INT8 and the kernel lets this
// process use the tile state.
//
// Why: on the register tile (gemm_x16.cpp) every 32-element block costs 8 `vpdpbusd` per token
// and 16 rows, and the float epilogue the per-block scales need comes on top; prefill ran at
// about half the VNNI peak. Here one `tdpbsud` makes a block's exact int32 dots for 16 tokens x
// 16 rows, and the AVX-512 ports are left with the epilogue alone (a convert and two FMAs per
// token and block).
//
// Results are bit-identical to the register tile's and so to the GEMV: a block's int32 dot is
// exact either way, and the epilogue applies the same float operations, in the same order, to
// the same values (each kind's as in X16Tile). Whole 16-token tiles of calls of at least
// kTileGemmMinTokens run here; the tokens short of a tile, and smaller calls, run on the AVX-512
// table's GEMM.
//
// The activations come packed as A tiles (16 tokens x 32 bytes per block, PackActToken). Per
// 16-row group, one software pipeline (GroupTiles) runs over chunks of blocks, token tile after
// token tile: on the first tile a chunk's weights are unpacked into the B layout (k / 4 rows of
// 16 weight rows x 4 bytes: the interleaved layout's own vectors, nibbles widened to bytes;
// 8-bit kinds are read in place) and their scales decoded; its products are stored, and their
// epilogue runs while the next chunk's products do.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "kernels/simd/common.h"

namespace paddock {
namespace PADDOCK_ISA_NS {
namespace {

static_assert(kLanes == 16, "the AMX tiles build on the AVX-512 vectors");

constexpr int kTileTokens = 16;         // rows of A and C: tokens
constexpr int kBBytes = 512;            // one 32-element block of 16 rows in the B layout
constexpr int kABytes = kActTileBytes;  // one block of a 16-token tile's activations (A)
static_assert(kTileTokens == kActTileTokens);
constexpr int kChunk = 8;  // blocks whose products are stored before their epilogue

// The kinds with an AMX path: their blocks' dots are one unsigned (or, Q6_K, signed) int8 x
// int8 product, and their epilogues are X16Tile's.
constexpr bool AmxKind(X16Kind k) {
  return k == X16Kind::kQ4S || k == X16Kind::kQ4Z || k == X16Kind::kQ4K || k == X16Kind::kQ8B ||
         k == X16Kind::kQ8C || k == X16Kind::kQ6K;
}
// Read in place: 8-bit quants (stored + 128) are the B layout already.
constexpr bool InPlace(X16Kind k) {
  return k == X16Kind::kQ8B || k == X16Kind::kQ8C;
}

// Where a kind's second scale term sits among a packed block's (ds, -8 ds, -128 ds).
constexpr int ZeroTermAt(X16Kind k) {
  return X16HasMin(k) ? 16 : (k == X16Kind::kQ4S ? 32 : 48);
}
static_assert(kOffset8Zero == 128.0f);

void PackActToken(const ActQ8& x, int64_t cols, int token, int8_t* tiles, float* tile_s) {
  const int64_t nb = cols / kQK, tile = token / kTileTokens;
  const int t = token % kTileTokens;
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t at = tile * nb + b, i = static_cast<int64_t>(token) * nb + b;
    std::memcpy(tiles + at * kABytes + t * kQK, x.qs + i * kQK, kQK);
    // As X16Tile computes its zero-point terms: -kZero * ds.
    float* o = tile_s + at * kActTileFloats;
    o[t] = x.d[i];
    o[16 + t] = x.ds[i];
    o[32 + t] = -8.0f * x.ds[i];
    o[48 + t] = -kOffset8Zero * x.ds[i];
  }
}

// The palette-1 tile configuration (64 bytes, as ldtilecfg reads it).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles 0, 1: C (16 tokens x 16 rows, int32); 2, 3: A (16 tokens x kb activation bytes);
// 4, 5: B (kb / 4 x 64 bytes of weights). kb: the k of one product, 32 (a block) or 16 (Q6_K's
// half blocks, which have scales of their own).
void ConfigureTiles(int kb) {
  TileConfig c;
  for (int i = 0; i < 2; ++i) {
    c.rows[i] = kTileTokens;
    c.colsb[i] = 64;
    c.rows[2 + i] = kTileTokens;
    c.colsb[2 + i] = static_cast<uint16_t>(kb);
    c.rows[4 + i] = static_cast<uint8_t>(kb / 4);
    c.colsb[4 + i] = 64;
  }
  _tile_loadconfig(&c);
}

// Per thread: the group's unpacked blocks and decoded scales, the stored accumulator tiles, and
// packed activations where the caller gave none. Grown once per thread to the widest matrix.
struct Scratch {
  std::vector<uint8_t> w;     // B blocks (+ 64 bytes for alignment)
  std::vector<float> s0, s1;  // per block, 16 rows each: d_w (Q6_K: the two halves' scales)
  std::vector<int8_t> xa;     // the activations as A tiles, where the caller packed none
  std::vector<float> xs;      // their scale terms
  alignas(64) int32_t c[2 * kChunk * 512];  // two chunks of stored accumulator tiles
};
thread_local Scratch tls;

template <class T>
T* Grow(std::vector<T>* v, size_t n) {
  if (v->size() < n) v->resize(n);
  return v->data();
}

// v grown to n elements and 64 bytes more, at its first 64-byte boundary.
template <class T>
T* GrowAligned(std::vector<T>* v, size_t n) {
  T* raw = Grow(v, n + 64 / sizeof(T));
  return raw + (64 - reinterpret_cast<uintptr_t>(raw) % 64) % 64 / sizeof(T);
}

// A group's unpacking scratch for nb blocks (UnpackGroup): B blocks (null for the kinds read in
// place) and the two scale arrays.
template <X16Kind K>
struct UnpackBuffers {
  uint8_t* wb = nullptr;
  float* s0;
  float* s1;
  explicit UnpackBuffers(int64_t nb, Scratch& s) {
    if constexpr (!InPlace(K)) wb = GrowAligned(&s.w, static_cast<size_t>(nb) * kBBytes);
    s0 = Grow(&s.s0, static_cast<size_t>(nb) * 16);
    s1 = Grow(&s.s1, static_cast<size_t>(nb) * 16);
  }
};

// Unpacks blocks [from, to) of 16-row group `grp` (from: a multiple of the scale group's blocks)
// into B blocks at `wb` and their scales into s0 / s1 (16 floats per block), computed as X16Tile
// computes them.
template <X16Kind K, int G>
void UnpackGroup(const uint8_t* grp, int64_t from, int64_t to, uint8_t* wb, float* s0, float* s1) {
  constexpr int BPS = G / kQK;
  constexpr X16Layout kL = X16LayoutOf(K);
  const VecI m4 = Set1I8(15);
  const uint8_t* p = grp + kL.prefix + static_cast<size_t>(from / BPS) * X16GroupBytes(K, BPS);
  for (int64_t b0 = from; b0 < to; b0 += BPS) {
    VecF sw = Zero(), mw = Zero();
    KHeader kh{};
    if constexpr (X16IsK(K)) {
      kh = LoadKHeader(p, 0);
    } else if constexpr (K == X16Kind::kQ6K) {
      kh.d = LoadF16(reinterpret_cast<const uint16_t*>(p));
    } else if constexpr (K != X16Kind::kQ8C) {
      sw = LoadF16(reinterpret_cast<const uint16_t*>(p));
      if constexpr (X16HasMin(K)) mw = LoadF16(reinterpret_cast<const uint16_t*>(p + 32));
    }
    const uint8_t* hdr = p;
    p += kL.header;
    for (int bi = 0; bi < BPS; ++bi, p += kL.block) {
      const int64_t b = b0 + bi;
      uint8_t* out = wb + b * kBBytes;
      if constexpr (K == X16Kind::kQ6K) {
        Q6KScales(hdr, 0, bi, kh.d, &sw, &mw);
        // q - 32 as signed bytes: elements 4m.. (rows m of the first half's B) and 16 + 4m..
        const VecI top = Set1I8(0x30), k32 = Set1I8(32);
        const VecI h0 = LoadRaw(p + kL.extra), h1 = LoadRaw(p + kL.extra + 64);
        for (int m = 0; m < 4; ++m) {
          const VecI v = LoadRaw(p + 64 * m);
          const VecI hb0 = m == 3 ? Srl16(h0, 2) : Sll16(h0, 4 - 2 * m);
          const VecI hb1 = m == 3 ? Srl16(h1, 2) : Sll16(h1, 4 - 2 * m);
          StoreRaw(out + 64 * m, Sub8(OrI(AndI(v, m4), AndI(hb0, top)), k32));
          StoreRaw(out + 256 + 64 * m, Sub8(OrI(AndI(Srl16(v, 4), m4), AndI(hb1, top)), k32));
        }
      } else {
        if constexpr (X16IsK(K)) {
          const VecI shift = SetI(8 * (bi % 4)), byte = SetI(255);
          sw = Mul(kh.d, ToFloat(AndI(ShrV(bi < 4 ? kh.sc_lo : kh.sc_hi, shift), byte)));
          mw = Mul(kh.ndmin, ToFloat(AndI(ShrV(bi < 4 ? kh.mn_lo : kh.mn_hi, shift), byte)));
        }
        if constexpr (!InPlace(K)) {  // nibbles: low = elements 4m.., high = 16 + 4m..
          for (int m = 0; m < 4; ++m) {
            const VecI v = LoadRaw(p + 64 * m);
            StoreRaw(out + 64 * m, AndI(v, m4));
            StoreRaw(out + 256 + 64 * m, AndI(Srl16(v, 4), m4));
          }
        }
      }
      Store(s0 + 16 * b, sw);
      Store(s1 + 16 * b, mw);
    }
  }
}

// The B block b of a group: unpacked, or the group's own bytes for the 8-bit kinds.
template <X16Kind K>
inline const uint8_t* BlockB(const uint8_t* grp, const uint8_t* wb, int64_t b) {
  constexpr X16Layout kL = X16LayoutOf(K);
  if constexpr (InPlace(K)) {
    return grp + kL.prefix + static_cast<size_t>(b) * (kL.header + kL.block) + kL.header;
  } else {
    return wb + b * kBBytes;
  }
}

// A block's products into accumulator tile 0 (from A tile 2 and B tile 4) or 1 (3, 5). Two
// functions: the tile intrinsics take their register numbers as literals.
inline void IssueBlock0(const int8_t* xa, const uint8_t* bb) {
  _tile_loadd(2, xa, kQK);
  _tile_loadd(4, bb, 64);
  _tile_zero(0);
  _tile_dpbsud(0, 2, 4);  // signed activations x unsigned weights
}
inline void IssueBlock1(const int8_t* xa, const uint8_t* bb) {
  _tile_loadd(3, xa, kQK);
  _tile_loadd(5, bb, 64);
  _tile_zero(1);
  _tile_dpbsud(1, 3, 5);
}

// Block b's epilogue for the tile's 16 tokens from the stored accumulators `c`, as X16Tile's
// (Q6_K: Q6KBlock's, on its two half blocks' accumulators).
template <X16Kind K>
inline void Epilogue(const int32_t* c, int64_t b, const float* xs, const float* s0, const float* s1,
                     VecF* facc) {
  const VecF sw = Load(s0 + 16 * b);
  const VecF mw = Load(s1 + 16 * b);
  for (int t = 0; t < kTileTokens; ++t) {
    const VecF f = ToFloat(LoadRaw(reinterpret_cast<const uint8_t*>(c + 16 * t)));
    const float d = xs[b * kActTileFloats + t];
    if constexpr (K == X16Kind::kQ6K) {  // sw, mw: the halves' scales
      const VecF f_hi = ToFloat(LoadRaw(reinterpret_cast<const uint8_t*>(c + 256 + 16 * t)));
      facc[t] = Fma(Fma(f, sw, Mul(f_hi, mw)), Set1(d), facc[t]);
    } else if constexpr (X16HasMin(K)) {
      facc[t] = Fma(Mul(f, Set1(d)), sw, facc[t]);
      facc[t] = Fma(mw, Set1(xs[b * kActTileFloats + 16 + t]), facc[t]);
    } else {
      const VecF tmp = Fma(f, Set1(d), Set1(xs[b * kActTileFloats + ZeroTermAt(K) + t]));
      facc[t] = K == X16Kind::kQ8C ? Add(facc[t], tmp) : Fma(tmp, sw, facc[t]);
    }
  }
}

// Blocks [b0, b0 + n) of a 16-token tile: their products, stored to c (256 int32 per block;
// Q6_K: two per block, its half blocks'), two blocks in flight on the two accumulator tiles.
template <X16Kind K>
inline void Products(const uint8_t* grp, const uint8_t* wb, const int8_t* xa, int64_t b0, int n,
                     int32_t* c) {
  if constexpr (K == X16Kind::kQ6K) {
    for (int i = 0; i < n; ++i) {  // two signed half-block products
      const int8_t* xb = xa + (b0 + i) * kABytes;
      const uint8_t* bb = wb + (b0 + i) * kBBytes;
      _tile_loadd(2, xb, kQK);
      _tile_loadd(3, xb + 16, kQK);
      _tile_loadd(4, bb, 64);
      _tile_loadd(5, bb + 256, 64);
      _tile_zero(0);
      _tile_zero(1);
      _tile_dpbssd(0, 2, 4);
      _tile_dpbssd(1, 3, 5);
      _tile_stored(0, c + 512 * i, 64);
      _tile_stored(1, c + 512 * i + 256, 64);
    }
  } else {
    IssueBlock0(xa + b0 * kABytes, BlockB<K>(grp, wb, b0));
    for (int i = 0; i < n; i += 2) {
      if (i + 1 < n) IssueBlock1(xa + (b0 + i + 1) * kABytes, BlockB<K>(grp, wb, b0 + i + 1));
      _tile_stored(0, c + 256 * i, 64);
      if (i + 2 < n) IssueBlock0(xa + (b0 + i + 2) * kABytes, BlockB<K>(grp, wb, b0 + i + 2));
      if (i + 1 < n) _tile_stored(1, c + 256 * (i + 1), 64);
    }
  }
}

// One 16-row group x n_tiles 16-token tiles (their A tiles xa, their scale terms xs; tile i's
// results at y + 16 i ldy). The work is a sequence of chunks of kChunk blocks, tile after tile:
// a chunk's products are issued to the tile unit before the previous chunk's epilogue runs on
// the vector ports, so the two overlap (across tiles too), and the epilogue reads accumulators
// stored long before (a load right behind a tile store waits for it).
template <X16Kind K, int G>
void GroupTiles(const uint8_t* grp, uint8_t* wb, int64_t cols, const int8_t* xa, const float* xs,
                float* s0, float* s1, int n_tiles, float* y, int64_t ldy) {
  constexpr int kPer = K == X16Kind::kQ6K ? 512 : 256;  // stored int32 per block
  const int64_t nb = cols / kQK;
  const int64_t chunks = (nb + kChunk - 1) / kChunk;  // per tile
  const int64_t total = chunks * n_tiles;
  int32_t* const cb[2] = {tls.c, tls.c + kChunk * kPer};
  // Chunk q: tile q / chunks, blocks from (q % chunks) kChunk.
  // The first tile's chunks unpack their blocks first (so the unpacking, too, overlaps the
  // previous chunk's epilogue).
  static_assert(kChunk % (G / kQK) == 0, "chunks start on scale groups");
  auto issue = [&](int64_t q) {
    const int64_t b0 = q % chunks * kChunk;
    const int n = static_cast<int>(std::min<int64_t>(kChunk, nb - b0));
    if (q < chunks) UnpackGroup<K, G>(grp, b0, b0 + n, wb, s0, s1);
    Products<K>(grp, wb, xa + q / chunks * nb * kABytes, b0, n, cb[q & 1]);
  };
  VecF row_scale = Zero();
  if constexpr (K == X16Kind::kQ8C) row_scale = Load(reinterpret_cast<const float*>(grp));
  VecF facc[kTileTokens];
  issue(0);
  for (int64_t q = 0; q < total; ++q) {
    if (q + 1 < total) issue(q + 1);
    const int64_t tile = q / chunks, b0 = q % chunks * kChunk;
    const float* ts = xs + tile * nb * kActTileFloats;
    if (b0 == 0)
      for (int t = 0; t < kTileTokens; ++t) facc[t] = Zero();
    const int32_t* c = cb[q & 1];
    const int64_t b1 = std::min<int64_t>(b0 + kChunk, nb);
    for (int64_t b = b0; b < b1; ++b, c += kPer) Epilogue<K>(c, b, ts, s0, s1, facc);
    if (b1 == nb) {  // the tile's last chunk
      float* yt = y + tile * kTileTokens * ldy;
      for (int t = 0; t < kTileTokens; ++t) {
        if constexpr (K == X16Kind::kQ8C) facc[t] = Mul(facc[t], row_scale);
        Store(yt + t * ldy, facc[t]);
      }
    }
  }
}

// The first n_tok (a multiple of 16) tokens x all rows.
template <X16Kind K, int G>
void AmxTiles(const void* w, size_t rb, int64_t cols, int64_t rows, const ActQ8& x, int n_tok,
              float* y, int64_t ldy) {
  const int64_t nb = cols / kQK;
  Scratch& s = tls;
  const UnpackBuffers<K> u(nb, s);
  // The activations as A tiles with their scale terms: packed once per matmul input by the
  // caller (ActQ8::tiles), else here.
  const int8_t* xa = x.tiles;
  const float* xs = x.tile_s;
  if (xa == nullptr || x.tile_count * kTileTokens < n_tok) {
    const size_t tiles = static_cast<size_t>(n_tok / kTileTokens);
    int8_t* pa = Grow(&s.xa, tiles * static_cast<size_t>(nb) * kActTileBytes);
    float* ps = Grow(&s.xs, tiles * static_cast<size_t>(nb) * kActTileFloats);
    for (int token = 0; token < n_tok; ++token) PackActToken(x, cols, token, pa, ps);
    xa = pa;
    xs = ps;
  }
  ConfigureTiles(K == X16Kind::kQ6K ? 16 : kQK);
  const auto* base = static_cast<const uint8_t*>(w);
  for (int64_t g = 0; g < rows / kX16Rows; ++g) {
    const uint8_t* grp = base + static_cast<size_t>(g) * kX16Rows * rb;
    GroupTiles<K, G>(grp, u.wb, cols, xa, xs, u.s0, u.s1, n_tok / kTileTokens, y + g * kX16Rows,
                     ldy);
  }
  _tile_release();
}

// The AVX-512 table's GEMM per prefetch mode and type: the tokens short of a whole tile (and
// calls under kTileGemmMinTokens).
GemmQ8Fn g_rest[3][kGgmlTypeCount];

template <int kMode, GgmlType Type, X16Kind K, int G>
void AmxGemm(const void* w, size_t rb, int64_t cols, int64_t rows, const ActQ8& x, int n_tok,
             float* y, int64_t ldy) {
  const int full = n_tok >= kTileGemmMinTokens ? n_tok / kTileTokens * kTileTokens : 0;
  if (full > 0) AmxTiles<K, G>(w, rb, cols, rows, x, full, y, ldy);
  if (full < n_tok)
    g_rest[kMode][static_cast<int>(Type)](w, rb, cols, rows, x.Token(full, cols), n_tok - full,
                                          y + static_cast<int64_t>(full) * ldy, ldy);
}

template <int kMode, GgmlType Type, X16Kind K, int G>
void SetAmx(KernelTable* t) {
  static_assert(AmxKind(K));
  g_rest[kMode][static_cast<int>(Type)] = t->gemm_q8[static_cast<int>(Type)];
  t->gemm_q8[static_cast<int>(Type)] = AmxGemm<kMode, Type, K, G>;
}

template <int kMode>
void SetAll(KernelTable* t) {
  SetAmx<kMode, GgmlType::kQ4_0X16, X16Kind::kQ4S, 32>(t);
  SetAmx<kMode, GgmlType::kQ8_0X16, X16Kind::kQ8B, 32>(t);
  SetAmx<kMode, GgmlType::kPQ8_C, X16Kind::kQ8C, 32>(t);
  SetAmx<kMode, GgmlType::kPQ4_G32, X16Kind::kQ4S, 32>(t);
  SetAmx<kMode, GgmlType::kPQ4_G64, X16Kind::kQ4S, 64>(t);
  SetAmx<kMode, GgmlType::kPQ4_G128, X16Kind::kQ4S, 128>(t);
  SetAmx<kMode, GgmlType::kPQ4_G32Z, X16Kind::kQ4Z, 32>(t);
  SetAmx<kMode, GgmlType::kPQ4_G64Z, X16Kind::kQ4Z, 64>(t);
  SetAmx<kMode, GgmlType::kPQ4_G128Z, X16Kind::kQ4Z, 128>(t);
  SetAmx<kMode, GgmlType::kQ4_KX16, X16Kind::kQ4K, kQK_K>(t);
  SetAmx<kMode, GgmlType::kQ6_KX16, X16Kind::kQ6K, kQK_K>(t);
}

// ---- The prefill GEMM on bf16 tiles (AMX-BF16) ----
//
// The integer tile GEMM above is capped by its per-block epilogue: every 16 x 16 x 32 product
// is stored and scaled on the vector ports, and the tile unit and the vector ports do not
// overlap on the measured Xeon. Here a 16-row group's weights are dequantized once per call to
// bf16 (w = scale * q + min, as the kind's epilogue applies them, rounded to nearest even) and
// `tdpbf16ps` sums in fp32 over the whole row: the accumulators stay in their tiles from the
// first block to the last, and the only vector work is the dequantization, once per group for
// all the call's tokens. Two row groups x two token tiles per pass (four accumulators; each A
// and B tile load serves two products).

// One block of a group's bf16 weights as the B operand: 16 rows (k pairs) x 16 weight rows x
// 2 bf16.
constexpr int kBf16BlockElems = 512;

// Dequantizes blocks [0, nb) of 16-row group `grp` to bf16 B blocks at `out`.
template <X16Kind K, int G>
void DequantGroupBf16(const uint8_t* grp, int64_t nb, uint8_t* wb, float* s0, float* s1,
                      uint16_t* out) {
  UnpackGroup<K, G>(grp, 0, nb, wb, s0, s1);
  // Word 2n + i of an output row: bf16 of the pair's element i for weight row n.
  alignas(64) static const uint16_t kInterleave[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                       21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                       11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i perm = _mm512_load_si512(kInterleave);
  const __m512i byte = _mm512_set1_epi32(255);
  __m512 row_scale = _mm512_setzero_ps();
  if constexpr (K == X16Kind::kQ8C)
    row_scale = _mm512_loadu_ps(reinterpret_cast<const float*>(grp));
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* bb = BlockB<K>(grp, wb, b);
    const __m512 a0 = _mm512_loadu_ps(s0 + 16 * b), a1 = _mm512_loadu_ps(s1 + 16 * b);
    uint16_t* o = out + b * kBf16BlockElems;
    for (int kk = 0; kk < 8; ++kk) {  // the int8 B row of elements 4 kk .. 4 kk + 3
      const __m512i v = _mm512_loadu_si512(bb + 64 * kk);
      __m512 f[4];
      for (int j = 0; j < 4; ++j) {
        __m512i q;
        if constexpr (K == X16Kind::kQ6K) {  // signed bytes
          q = _mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 8 * j), 24);
        } else {
          q = _mm512_and_si512(_mm512_srli_epi32(v, 8 * j), byte);
        }
        const __m512 x = _mm512_cvtepi32_ps(q);
        if constexpr (K == X16Kind::kQ4S) {
          f[j] = _mm512_mul_ps(_mm512_sub_ps(x, _mm512_set1_ps(8.0f)), a0);
        } else if constexpr (K == X16Kind::kQ8B) {
          f[j] = _mm512_mul_ps(_mm512_sub_ps(x, _mm512_set1_ps(kOffset8Zero)), a0);
        } else if constexpr (K == X16Kind::kQ8C) {
          f[j] = _mm512_mul_ps(_mm512_sub_ps(x, _mm512_set1_ps(kOffset8Zero)), row_scale);
        } else if constexpr (K == X16Kind::kQ6K) {
          f[j] = _mm512_mul_ps(x, kk < 4 ? a0 : a1);  // the two half blocks' scales
        } else {                                      // a scale and a minimum
          f[j] = _mm512_fmadd_ps(x, a0, a1);
        }
      }
      const __m512i lo = _mm512_permutexvar_epi16(perm, (__m512i)_mm512_cvtne2ps_pbh(f[1], f[0]));
      const __m512i hi = _mm512_permutexvar_epi16(perm, (__m512i)_mm512_cvtne2ps_pbh(f[3], f[2]));
      _mm512_store_si512(o + 64 * kk, lo);
      _mm512_store_si512(o + 64 * kk + 32, hi);
    }
  }
}

// Per thread: two groups' bf16 weights (+ 64 bytes for alignment) and a pass's stored sums.
struct Bf16Scratch {
  std::vector<uint16_t> panel;
  alignas(64) float c[4][256];
};
thread_local Bf16Scratch tls_bf16;

void PackBf16Token(const float* x, int64_t cols, int slot, uint16_t* tiles) {
  const int64_t nb = cols / kQK;
  uint16_t* o = tiles + (static_cast<size_t>(slot / kTileTokens) * nb) * kBf16TileElems +
                static_cast<size_t>(slot % kTileTokens) * kQK;
  for (int64_t b = 0; b < nb; ++b, o += kBf16TileElems) {
    const __m512bh v =
        _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + b * kQK + 16), _mm512_loadu_ps(x + b * kQK));
    _mm512_storeu_si512(o, (__m512i)v);
  }
}

// One pass: token tiles (ta, ta + 1 if kTwoT) x groups (P0, P1 if kTwoG) over all nb blocks.
// Accumulators: tile 0 (ta, P0), 1 (ta, P1), 2 (ta + 1, P0), 3 (ta + 1, P1); A: 4, 5; B: 6, 7.
template <bool kTwoT, bool kTwoG>
void Bf16Pass(const uint16_t* a0, const uint16_t* p0, const uint16_t* p1, int64_t nb,
              int64_t a_stride) {
  _tile_zero(0);
  if constexpr (kTwoG) _tile_zero(1);
  if constexpr (kTwoT) _tile_zero(2);
  if constexpr (kTwoT && kTwoG) _tile_zero(3);
  for (int64_t b = 0; b < nb; ++b) {
    _tile_loadd(4, a0 + b * kBf16TileElems, 64);
    _tile_loadd(6, p0 + b * kBf16BlockElems, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (kTwoG) {
      _tile_loadd(7, p1 + b * kBf16BlockElems, 64);
      _tile_dpbf16ps(1, 4, 7);
    }
    if constexpr (kTwoT) {
      _tile_loadd(5, a0 + a_stride + b * kBf16TileElems, 64);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (kTwoG) _tile_dpbf16ps(3, 5, 7);
    }
  }
  Bf16Scratch& s = tls_bf16;
  _tile_stored(0, s.c[0], 64);
  if constexpr (kTwoG) _tile_stored(1, s.c[1], 64);
  if constexpr (kTwoT) _tile_stored(2, s.c[2], 64);
  if constexpr (kTwoT && kTwoG) _tile_stored(3, s.c[3], 64);
}

// Token tile `tile`'s stored sums for group column `col` (weight rows col.. col + 15) into y.
inline void Bf16Out(const float* c, int tile, int n_tok, const int32_t* out_rows, float* y,
                    int64_t ldy, int64_t col) {
  const int n = std::min(kTileTokens, n_tok - tile * kTileTokens);
  for (int i = 0; i < n; ++i) {
    const int slot = tile * kTileTokens + i;
    const int64_t row = out_rows != nullptr ? out_rows[slot] : slot;
    _mm512_storeu_ps(y + row * ldy + col, _mm512_load_ps(c + 16 * i));
  }
}

// Weight rows dequantized per block of rows: their bf16 panels stay in L2 while every token
// tile pair streams past them, each A tile pair serving all the block's group pairs (the A
// tiles come from L3 once per block; per group pair, they capped the pass at a third of the
// tile unit's rate).
constexpr size_t kBf16PanelBytes = 768 * 1024;

template <X16Kind K, int G>
void GemmBf16Tiles(const void* w, size_t rb, int64_t cols, int64_t rows, const uint16_t* xa,
                   int n_tok, const int32_t* out_rows, float* y, int64_t ldy) {
  if (n_tok <= 0) return;
  const int64_t nb = cols / kQK;
  const int64_t group_elems = nb * kBf16BlockElems;
  const int64_t groups = rows / kX16Rows;
  const int64_t per_block = std::min<int64_t>(
      groups,
      std::max<int64_t>(2, static_cast<int64_t>(kBf16PanelBytes / 2) / group_elems / 2 * 2));
  const UnpackBuffers<K> u(nb, tls);
  uint16_t* panel = GrowAligned(&tls_bf16.panel, static_cast<size_t>(per_block * group_elems));
  static const TileConfig kConfig = [] {
    TileConfig c;
    for (int i = 0; i < 8; ++i) {
      c.rows[i] = kTileTokens;
      c.colsb[i] = 64;
    }
    return c;
  }();
  _tile_loadconfig(&kConfig);
  const int tiles = (n_tok + kTileTokens - 1) / kTileTokens;
  const int64_t a_stride = nb * static_cast<int64_t>(kBf16TileElems);
  const auto* base = static_cast<const uint8_t*>(w);
  const float(&c)[4][256] = tls_bf16.c;
  for (int64_t g0 = 0; g0 < groups; g0 += per_block) {
    const int64_t ng = std::min(per_block, groups - g0);
    for (int64_t i = 0; i < ng; ++i)
      DequantGroupBf16<K, G>(base + static_cast<size_t>(g0 + i) * kX16Rows * rb, nb, u.wb, u.s0,
                             u.s1, panel + i * group_elems);
    for (int t = 0; t < tiles; t += 2) {
      const bool two_t = t + 1 < tiles;
      const uint16_t* a = xa + t * a_stride;
      for (int64_t i = 0; i < ng; i += 2) {
        const bool two_g = i + 1 < ng;
        const uint16_t* p0 = panel + i * group_elems;
        const uint16_t* p1 = p0 + group_elems;
        if (two_t && two_g) {
          Bf16Pass<true, true>(a, p0, p1, nb, a_stride);
        } else if (two_t) {
          Bf16Pass<true, false>(a, p0, p1, nb, a_stride);
        } else if (two_g) {
          Bf16Pass<false, true>(a, p0, p1, nb, a_stride);
        } else {
          Bf16Pass<false, false>(a, p0, p1, nb, a_stride);
        }
        const int64_t col = (g0 + i) * kX16Rows;
        Bf16Out(c[0], t, n_tok, out_rows, y, ldy, col);
        if (two_g) Bf16Out(c[1], t, n_tok, out_rows, y, ldy, col + kX16Rows);
        if (two_t) Bf16Out(c[2], t + 1, n_tok, out_rows, y, ldy, col);
        if (two_t && two_g) Bf16Out(c[3], t + 1, n_tok, out_rows, y, ldy, col + kX16Rows);
      }
    }
  }
  _tile_release();
}

template <GgmlType Type, X16Kind K, int G>
void SetBf16(KernelTable* t) {
  t->gemm_bf16_tiles[static_cast<int>(Type)] = GemmBf16Tiles<K, G>;
}

void SetAllBf16(KernelTable* t) {
  t->pack_bf16_token = PackBf16Token;
  SetBf16<GgmlType::kQ4_0X16, X16Kind::kQ4S, 32>(t);
  SetBf16<GgmlType::kQ8_0X16, X16Kind::kQ8B, 32>(t);
  SetBf16<GgmlType::kPQ8_C, X16Kind::kQ8C, 32>(t);
  SetBf16<GgmlType::kPQ4_G32, X16Kind::kQ4S, 32>(t);
  SetBf16<GgmlType::kPQ4_G64, X16Kind::kQ4S, 64>(t);
  SetBf16<GgmlType::kPQ4_G128, X16Kind::kQ4S, 128>(t);
  SetBf16<GgmlType::kPQ4_G32Z, X16Kind::kQ4Z, 32>(t);
  SetBf16<GgmlType::kPQ4_G64Z, X16Kind::kQ4Z, 64>(t);
  SetBf16<GgmlType::kPQ4_G128Z, X16Kind::kQ4Z, 128>(t);
  SetBf16<GgmlType::kQ4_KX16, X16Kind::kQ4K, kQK_K>(t);
  SetBf16<GgmlType::kQ6_KX16, X16Kind::kQ6K, kQK_K>(t);
}

// tdpbsud into four accumulators in turn, k = 32 as the GEMM issues them.
int64_t TilePeakProbe(int64_t iters) {
  TileConfig c;
  for (int i = 0; i < 4; ++i) {
    c.rows[i] = kTileTokens;
    c.colsb[i] = 64;
  }
  c.rows[4] = kTileTokens;
  c.colsb[4] = kQK;
  c.rows[5] = kQK / 4;
  c.colsb[5] = 64;
  _tile_loadconfig(&c);
  alignas(64) static const int8_t a[kTileTokens * kQK] = {1, 2, 3};
  alignas(64) static const uint8_t b[kBBytes] = {4, 5, 6};
  _tile_loadd(4, a, kQK);
  _tile_loadd(5, b, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbsud(0, 4, 5);
    _tile_dpbsud(1, 4, 5);
    _tile_dpbsud(2, 4, 5);
    _tile_dpbsud(3, 4, 5);
  }
  alignas(64) int32_t out[kTileTokens * 16];
  _tile_stored(0, out, 64);  // keeps the work alive
  _tile_release();
  volatile int32_t sink = out[0];
  (void)sink;
  return iters * 4 * kTileTokens * 16 * kQK * 2;
}

}  // namespace

void SetAmxBf16Kernels(KernelTable* t) {
  SetAllBf16(t);
}

void SetAmxKernels(KernelTable* t, Prefetch prefetch) {
  t->pack_act_token = PackActToken;
  t->tile_peak_probe = TilePeakProbe;
  switch (prefetch) {
    case Prefetch::kOff:
      SetAll<0>(t);
      break;
    case Prefetch::kAuto:
      SetAll<1>(t);
      break;
    case Prefetch::kAll:
      SetAll<2>(t);
      break;
  }
}

}  // namespace PADDOCK_ISA_NS
}  // namespace paddock
