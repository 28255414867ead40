// kernels/simd/attention_amx.cpp: attention's scores on AMX BF16 tiles (`tdpbf16ps`, a 16 x 16
// float tile += 16 x 32 by 32 x 16 BF16 per instruction), behind the AVX-512 tiled attention
// kernel (attention.cpp), which keeps the masking, the online softmax and the value sums.
// Compiled with the AVX-512, AVX512-BF16 and AMX flags into namespace `amx`.
//
// Why: the scores are half of attention's multiply-adds, and at long prompts attention is most
// of prefill (58% at 8,192 tokens on the TinyLlama shape, with the scores on FMAs).
//
// S^T = K Q^T per 16-position half of a K tile: A = 16 key rows x 32 dims, B = the run's
// queries as 16 pairs of dims x 16 query rows (built once per run), C = 16 positions x 16 query
// rows in float: positions as rows and query rows as lanes, the layout the softmax reads. Every
// float operand is split into its BF16 rounding (hi) and the BF16 rounding of the rest (lo), and
// three products (hi.hi + hi.lo + lo.hi) leave about 2^-16 of relative error per element (F16
// keys split exactly), so the scores stay within the float kernel's tolerance of the reference
// instead of BF16's 2^-8. A row's scores do not depend on the other rows of its run.
#include <immintrin.h>

#include <vector>

#include "kernels/simd/amx_tiles.h"
#include "kernels/simd/common.h"

namespace paddock {
namespace PADDOCK_ISA_NS {
namespace {

constexpr int kRows = 16;      // query rows per lane group: C's columns
constexpr int kDims = 32;      // dims per product: a tile row of 32 BF16
constexpr int kTileBf16 = 512;  // one 16 x 32 BF16 tile
constexpr int kMaxHeadDim = 512;

// Per thread: the run's queries as B tiles ([group][hd / 32][hi, lo] tiles of 16 dim pairs x 16
// rows x 2) and one K tile's rows split ([hi, lo][kAttnTile][hd]).
struct AttnTiles {
  std::vector<uint16_t> q;
  std::vector<uint16_t> k;
};
thread_local AttnTiles tls_attn;

inline uint16_t Bf16Round(float x) {  // round to nearest even (finite inputs)
  uint32_t b;
  std::memcpy(&b, &x, 4);
  b += 0x7FFFu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}
inline float Bf16Value(uint16_t h) {
  const uint32_t b = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

bool Begin(const float* qt, int groups, int hd) {
  if (hd % kDims != 0 || hd > kMaxHeadDim) return false;
  const int nc = hd / kDims;
  AttnTiles& s = tls_attn;
  const size_t q_size = static_cast<size_t>(groups) * nc * 2 * kTileBf16;
  if (s.q.size() < q_size) s.q.resize(q_size);
  const size_t k_size = static_cast<size_t>(2) * kAttnTile * hd;
  if (s.k.size() < k_size) s.k.resize(k_size);
  // B[i][2r + e] = q[row r][32 c + 2 i + e]; qt is [group][dim][16 rows].
  for (int gi = 0; gi < groups; ++gi) {
    const float* qg = qt + static_cast<size_t>(gi) * hd * kRows;
    for (int c = 0; c < nc; ++c) {
      uint16_t* hi = s.q.data() + (static_cast<size_t>(gi) * nc + c) * 2 * kTileBf16;
      uint16_t* lo = hi + kTileBf16;
      for (int i = 0; i < kDims / 2; ++i) {
        for (int r = 0; r < kRows; ++r) {
          for (int e = 0; e < 2; ++e) {
            const float x = qg[(c * kDims + 2 * i + e) * kRows + r];
            const uint16_t h = Bf16Round(x);
            hi[i * 2 * kRows + 2 * r + e] = h;
            lo[i * 2 * kRows + 2 * r + e] = Bf16Round(x - Bf16Value(h));
          }
        }
      }
    }
  }
  // Eight 16 x 64-byte tiles. Static: GCC dropped the stores to a local configuration here as
  // dead (it does not see ldtilecfg read them), leaving the tiles unconfigured.
  static const AmxTileConfig cfg = [] {
    AmxTileConfig c;
    for (int t = 0; t < 8; ++t) {
      c.rows[t] = 16;
      c.colsb[t] = 64;
    }
    return c;
  }();
  _tile_loadconfig(&cfg);
  return true;
}

// Tiles: 0-3 the groups' C, 4 / 5 the keys' hi / lo (A), 6 / 7 the queries' hi / lo (B). The
// tile intrinsics take their register numbers as literal tokens, hence the cases.
inline void GroupProducts(int gi, const uint16_t* qb) {
  _tile_loadd(6, qb, 64);
  _tile_loadd(7, qb + kTileBf16, 64);
  switch (gi) {
    case 0:
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(0, 4, 7);
      _tile_dpbf16ps(0, 5, 6);
      break;
    case 1:
      _tile_dpbf16ps(1, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(1, 5, 6);
      break;
    case 2:
      _tile_dpbf16ps(2, 4, 6);
      _tile_dpbf16ps(2, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      break;
    default:
      _tile_dpbf16ps(3, 4, 6);
      _tile_dpbf16ps(3, 4, 7);
      _tile_dpbf16ps(3, 5, 6);
      break;
  }
}

void Scores(const float* kr, int nt, int hd, int groups, float* pt) {
  AttnTiles& s = tls_attn;
  const int nc = hd / kDims, halves = (nt + 15) / 16;
  uint16_t* kh = s.k.data();
  uint16_t* kl = kh + static_cast<size_t>(kAttnTile) * hd;
  // The keys split, rows past nt zero (their scores are never read).
  for (int i = 0; i < nt; ++i) {
    for (int d = 0; d < hd; d += 16) {
      const __m512 x = _mm512_loadu_ps(kr + static_cast<size_t>(i) * hd + d);
      const __m256bh h = _mm512_cvtneps_pbh(x);
      const __m512 hf = _mm512_castsi512_ps(
          _mm512_slli_epi32(_mm512_cvtepu16_epi32(reinterpret_cast<const __m256i&>(h)), 16));
      const __m256bh l = _mm512_cvtneps_pbh(_mm512_sub_ps(x, hf));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(kh + static_cast<size_t>(i) * hd + d),
                          reinterpret_cast<const __m256i&>(h));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(kl + static_cast<size_t>(i) * hd + d),
                          reinterpret_cast<const __m256i&>(l));
    }
  }
  for (int i = nt; i < halves * 16; ++i) {
    std::memset(kh + static_cast<size_t>(i) * hd, 0, sizeof(uint16_t) * hd);
    std::memset(kl + static_cast<size_t>(i) * hd, 0, sizeof(uint16_t) * hd);
  }
  const size_t stride = static_cast<size_t>(hd) * sizeof(uint16_t);
  const size_t c_stride = static_cast<size_t>(groups) * kRows * sizeof(float);
  for (int h = 0; h < halves; ++h) {
    _tile_zero(0);
    if (groups > 1) _tile_zero(1);
    if (groups > 2) {
      _tile_zero(2);
      _tile_zero(3);
    }
    for (int c = 0; c < nc; ++c) {
      const size_t at = static_cast<size_t>(h) * 16 * hd + static_cast<size_t>(c) * kDims;
      _tile_loadd(4, kh + at, stride);
      _tile_loadd(5, kl + at, stride);
      const uint16_t* qb = s.q.data() + static_cast<size_t>(c) * 2 * kTileBf16;
      const size_t per_group = static_cast<size_t>(nc) * 2 * kTileBf16;
      for (int gi = 0; gi < groups; ++gi) GroupProducts(gi, qb + gi * per_group);
    }
    float* out = pt + static_cast<size_t>(h) * 16 * groups * kRows;
    _tile_stored(0, out, c_stride);
    if (groups > 1) _tile_stored(1, out + kRows, c_stride);
    if (groups > 2) {
      _tile_stored(2, out + 2 * kRows, c_stride);
      _tile_stored(3, out + 3 * kRows, c_stride);
    }
  }
}

void End() { _tile_release(); }

const AttnScoreTiles kTiles = {Begin, Scores, End};

void AttendRowsAmx(const float* const* q_rows, float* const* out_rows, int n_rows, const int* lo,
                   const int* hi, const KvRowsRef& k, const KvRowsRef& v, int g, int n_kv, int hd,
                   float scale, float softcap, float* scratch, float* ml) {
  avx512::AttendRowsWithTiles(&kTiles, q_rows, out_rows, n_rows, lo, hi, k, v, g, n_kv, hd, scale,
                              softcap, scratch, ml);
}

}  // namespace

void SetAmxAttention(KernelTable* t) { t->attend_rows = AttendRowsAmx; }

}  // namespace PADDOCK_ISA_NS
}  // namespace paddock
