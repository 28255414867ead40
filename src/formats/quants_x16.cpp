// formats/quants_x16.cpp: the re-laid layouts: Q4_0R / Q8_0R rows, and the 16-row interleaved
// layouts (formats/x16_layout.h): repacking file blocks into them at load, reading one element
// back, and writing the Paddock types (QuantizeX16) from floats.
#include <strings.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "base/half.h"
#include "base/strings.h"
#include "formats/ggml_types.h"
#include "formats/quants_internal.h"
#include "formats/x16_layout.h"

namespace paddock {
using namespace quants;

void RepackQ8_0Rows(const void* src, void* dst, int64_t rows, int64_t cols) {
  const int64_t nb = cols / kQK;
  const size_t rb = static_cast<size_t>(nb) * sizeof(BlockQ8_0);
  for (int64_t r = 0; r < rows; ++r) {
    const auto* in = reinterpret_cast<const BlockQ8_0*>(static_cast<const uint8_t*>(src) +
                                                        static_cast<size_t>(r) * rb);
    auto* out = static_cast<uint8_t*>(dst) + static_cast<size_t>(r) * rb;
    for (int64_t b = 0; b < nb; ++b) {
      std::memcpy(out + 2 * b, &in[b].d, 2);
      std::memcpy(out + 2 * nb + kQK * b, in[b].qs, kQK);
    }
  }
}

void RepackQ4_0Rows(const void* src, void* dst, int64_t rows, int64_t cols) {
  const int64_t nb = cols / kQK;
  const size_t rb = static_cast<size_t>(nb) * sizeof(BlockQ4_0);
  for (int64_t r = 0; r < rows; ++r) {
    const auto* in = reinterpret_cast<const BlockQ4_0*>(static_cast<const uint8_t*>(src) +
                                                        static_cast<size_t>(r) * rb);
    auto* out = static_cast<uint8_t*>(dst) + static_cast<size_t>(r) * rb;
    for (int64_t b = 0; b < nb; ++b) {
      std::memcpy(out + 2 * b, &in[b].d, 2);
      std::memcpy(out + 2 * nb + 16 * b, in[b].qs, 16);
    }
  }
}

namespace {

// Walks 16-row groups block by block; put(out, lane, block) writes one row's block into the
// interleaved block at `out`, which is `block_bytes` long.
// kElems: elements per source block (32, or 256 for the k-quants).
template <class Block, int kElems, class Put>
void RepackX16(const void* src, void* dst, int64_t rows, int64_t cols, size_t block_bytes,
               Put put) {
  const int64_t nb = cols / kElems;
  const size_t rb = static_cast<size_t>(nb) * sizeof(Block);
  auto* out = static_cast<uint8_t*>(dst);
  std::memset(out, 0, rb * static_cast<size_t>(rows));  // puts may OR bits into place
  for (int64_t g = 0; g < rows / kX16Rows; ++g) {
    for (int64_t b = 0; b < nb; ++b, out += block_bytes) {
      for (int i = 0; i < kX16Rows; ++i) {
        put(out, i,
            reinterpret_cast<const Block*>(static_cast<const uint8_t*>(src) +
                                           static_cast<size_t>(g * kX16Rows + i) * rb)[b]);
      }
    }
  }
}

}  // namespace

namespace {
// Blocks of an fp16 scale and 16 nibble bytes (Q4_0, IQ4_NL): 16 scales, then the nibbles as
// Q4 quant vectors.
template <class Block>
void RepackScaledNibblesX16(const void* src, void* dst, int64_t rows, int64_t cols) {
  RepackX16<Block, kQK>(src, dst, rows, cols, 32 + 4 * 64,
                        [](uint8_t* out, int i, const Block& in) {
                          std::memcpy(out + 2 * i, &in.d, 2);
                          for (int m = 0; m < 4; ++m)
                            std::memcpy(out + 32 + 64 * m + 4 * i, in.qs + 4 * m, 4);
                        });
}
}  // namespace

void RepackQ4_0X16(const void* src, void* dst, int64_t rows, int64_t cols) {
  RepackScaledNibblesX16<BlockQ4_0>(src, dst, rows, cols);
}

void RepackQ8_0X16(const void* src, void* dst, int64_t rows, int64_t cols) {
  RepackX16<BlockQ8_0, kQK>(
      src, dst, rows, cols, 32 + 8 * 64, [](uint8_t* out, int i, const BlockQ8_0& in) {
        std::memcpy(out + 2 * i, &in.d, 2);
        for (int k = 0; k < kQK; ++k)
          out[32 + 64 * (k / 4) + 4 * i + k % 4] = static_cast<uint8_t>(in.qs[k] + 128);
      });
}

void RepackQ4_1X16(const void* src, void* dst, int64_t rows, int64_t cols) {
  RepackX16<BlockQ4_1, kQK>(src, dst, rows, cols, 64 + 4 * 64,
                            [](uint8_t* out, int i, const BlockQ4_1& in) {
                              std::memcpy(out + 2 * i, &in.d, 2);
                              std::memcpy(out + 32 + 2 * i, &in.m, 2);
                              for (int m = 0; m < 4; ++m)
                                std::memcpy(out + 64 + 64 * m + 4 * i, in.qs + 4 * m, 4);
                            });
}

namespace {
// Position of element k (0..31) of lane i in a Q4 quant block (low nibbles: k < 16).
inline size_t Q4Byte(int i, int k) {
  return 64 * static_cast<size_t>((k % 16) / 4) + 4 * static_cast<size_t>(i) + k % 4;
}
// Q6_KX16's high 2 bits of element k (0..31) of lane i: byte and shift in the 128-byte part.
inline size_t Q6HighByte(int i, int k) {
  return 64 * static_cast<size_t>(k / 16) + 4 * static_cast<size_t>(i) + k % 4;
}
inline int Q6HighShift(int k) {
  return 2 * ((k % 16) / 4);
}
// The 5th bit of element k (0..31) of lane i in a 5-bit type's 64-byte high-bit vector.
inline size_t Q5HighByte(int i, int k) {
  return 4 * static_cast<size_t>(i) + k % 4;
}
inline int Q5HighBit(int k) {
  return (k % 16) / 4 + (k >= 16 ? 4 : 0);
}
// Writes 5-bit quant q of element k of lane i into a block of nibbles followed by the 5th bits.
inline void PutQ5(uint8_t* blk, int i, int k, int q) {
  blk[Q4Byte(i, k)] |= static_cast<uint8_t>(k < 16 ? (q & 15) : (q & 15) << 4);
  blk[X16LayoutOf(X16Kind::kQ5S).extra + Q5HighByte(i, k)] |=
      static_cast<uint8_t>((q >> 4) << Q5HighBit(k));
}
// A Q5_0 / Q5_1 block's 32 quants (nibbles qs, 5th bits qh) into lane i of an X16 block.
inline void PutQ5Legacy(uint8_t* blk, int i, const uint8_t* qs, const uint8_t* qh_bytes) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int k = 0; k < kQK; ++k) {
    const int nib = k < 16 ? (qs[k] & 15) : (qs[k - 16] >> 4);
    PutQ5(blk, i, k, nib | static_cast<int>(((qh >> k) & 1) << 4));
  }
}
inline int GetQ5(const uint8_t* blk, int i, int k) {
  const uint8_t byte = blk[Q4Byte(i, k)];
  return (k < 16 ? (byte & 15) : (byte >> 4)) |
         (((blk[X16LayoutOf(X16Kind::kQ5S).extra + Q5HighByte(i, k)] >> Q5HighBit(k)) & 1) << 4);
}
}  // namespace

void RepackQ5_0X16(const void* src, void* dst, int64_t rows, int64_t cols) {
  RepackX16<BlockQ5_0, kQK>(src, dst, rows, cols, X16GroupBytes(X16Kind::kQ5S, 1),
                            [](uint8_t* out, int i, const BlockQ5_0& in) {
                              std::memcpy(out + 2 * i, &in.d, 2);
                              PutQ5Legacy(out + 32, i, in.qs, in.qh);
                            });
}

void RepackQ5_1X16(const void* src, void* dst, int64_t rows, int64_t cols) {
  RepackX16<BlockQ5_1, kQK>(src, dst, rows, cols, X16GroupBytes(X16Kind::kQ5Z, 1),
                            [](uint8_t* out, int i, const BlockQ5_1& in) {
                              std::memcpy(out + 2 * i, &in.d, 2);
                              std::memcpy(out + 32 + 2 * i, &in.m, 2);
                              PutQ5Legacy(out + 64, i, in.qs, in.qh);
                            });
}

void RepackQ5_KX16(const void* src, void* dst, int64_t rows, int64_t cols) {
  RepackX16<BlockQ5_K, kQK_K>(
      src, dst, rows, cols, X16GroupBytes(X16Kind::kQ5K, 8),
      [](uint8_t* out, int i, const BlockQ5_K& in) {
        std::memcpy(out + 2 * i, &in.d, 2);
        std::memcpy(out + 32 + 2 * i, &in.dmin, 2);
        for (int v = 0; v < 3; ++v) std::memcpy(out + 64 + 64 * v + 4 * i, in.scales + 4 * v, 4);
        for (int e = 0; e < kQK_K;
             ++e) {  // sub-block j = e / 32: nibbles of chunk j / 2, 5th bit j of qh
          const int j = e / kQK, l = e % kQK;
          const uint8_t byte = in.qs[32 * (j / 2) + l];
          const int q = ((j % 2) == 0 ? (byte & 15) : (byte >> 4)) | (((in.qh[l] >> j) & 1) << 4);
          PutQ5(out + X16GroupBytes(X16Kind::kQ5K, j), i, l, q);
        }
      });
}

void RepackQ4_KX16(const void* src, void* dst, int64_t rows, int64_t cols) {
  RepackX16<BlockQ4_K, kQK_K>(src, dst, rows, cols, X16GroupBytes(X16Kind::kQ4K, 8),
                              [](uint8_t* out, int i, const BlockQ4_K& in) {
                                std::memcpy(out + 2 * i, &in.d, 2);
                                std::memcpy(out + 32 + 2 * i, &in.dmin, 2);
                                for (int v = 0; v < 3; ++v)
                                  std::memcpy(out + 64 + 64 * v + 4 * i, in.scales + 4 * v, 4);
                                for (int e = 0; e < kQK_K;
                                     ++e) {  // file: per 64 elements, 32 bytes (low nibbles first)
                                  const uint8_t byte = in.qs[32 * (e / 64) + e % 32];
                                  const int q = (e % 64) < 32 ? (byte & 15) : (byte >> 4);
                                  const int k = e % kQK;
                                  out[X16GroupBytes(X16Kind::kQ4K, e / kQK) + Q4Byte(i, k)] |=
                                      static_cast<uint8_t>(k < 16 ? q : q << 4);
                                }
                              });
}

void RepackQ6_KX16(const void* src, void* dst, int64_t rows, int64_t cols) {
  RepackX16<BlockQ6_K, kQK_K>(src, dst, rows, cols, X16GroupBytes(X16Kind::kQ6K, 8),
                              [](uint8_t* out, int i, const BlockQ6_K& in) {
                                std::memcpy(out + 2 * i, &in.d, 2);
                                for (int v = 0; v < 4; ++v)
                                  std::memcpy(out + 32 + 64 * v + 4 * i, in.scales + 4 * v, 4);
                                for (int e = 0; e < kQK_K; ++e) {
                                  const int h = e / 128, r = e % 128, g = r / 32, l = r % 32;
                                  const uint8_t lbyte = in.ql[64 * h + l + ((g & 1) ? 32 : 0)];
                                  const int lo = g >= 2 ? (lbyte >> 4) : (lbyte & 15);
                                  const int hi = (in.qh[32 * h + l] >> (2 * g)) & 3;
                                  const int k = e % kQK;
                                  uint8_t* blk = out + X16GroupBytes(X16Kind::kQ6K, e / kQK);
                                  blk[Q4Byte(i, k)] |= static_cast<uint8_t>(k < 16 ? lo : lo << 4);
                                  blk[X16LayoutOf(X16Kind::kQ6K).extra + Q6HighByte(i, k)] |=
                                      static_cast<uint8_t>(hi << Q6HighShift(k));
                                }
                              });
}

void RepackIQ4_NLX16(const void* src, void* dst, int64_t rows, int64_t cols) {
  RepackScaledNibblesX16<BlockIQ4_NL>(src, dst, rows, cols);  // Q4_0X16's layout, grid indices
}

void RepackMXFP4X16(const void* src, void* dst, int64_t rows, int64_t cols) {
  RepackX16<BlockMXFP4, kQK>(src, dst, rows, cols, X16GroupBytes(X16Kind::kM4, 1),
                             [](uint8_t* out, int i, const BlockMXFP4& in) {
                               out[i] = in.e;
                               for (int m = 0; m < 4; ++m)
                                 std::memcpy(out + 16 + 64 * m + 4 * i, in.qs + 4 * m, 4);
                             });
}

void RepackIQ4_XSX16(const void* src, void* dst, int64_t rows, int64_t cols) {
  constexpr size_t kHeader = X16LayoutOf(X16Kind::kL4X).header;
  RepackX16<BlockIQ4_XS, kQK_K>(src, dst, rows, cols, X16GroupBytes(X16Kind::kL4X, 8),
                                [](uint8_t* out, int i, const BlockIQ4_XS& in) {
                                  std::memcpy(out + 2 * i, &in.d, 2);
                                  std::memcpy(out + 32 + 4 * i, in.scales_l, 4);
                                  std::memcpy(out + 96 + 2 * i, &in.scales_h, 2);
                                  for (int ib = 0; ib < 8; ++ib) {
                                    for (int m = 0; m < 4; ++m)
                                      std::memcpy(out + kHeader + 256 * ib + 64 * m + 4 * i,
                                                  in.qs + 16 * ib + 4 * m, 4);
                                  }
                                });
}

void RepackQ3_KX16(const void* src, void* dst, int64_t rows, int64_t cols) {
  RepackX16<BlockQ3_K, kQK_K>(
      src, dst, rows, cols, X16GroupBytes(X16Kind::kQ3K, 8),
      [](uint8_t* out, int i, const BlockQ3_K& in) {
        std::memcpy(out + 2 * i, &in.d, 2);
        for (int v = 0; v < 3; ++v) std::memcpy(out + 32 + 64 * v + 4 * i, in.scales + 4 * v, 4);
        for (int e = 0; e < kQK_K; ++e) {  // file: element 128h + 32j + l at qs[32h + l] bits 2j
          const int h = e / 128, jj = (e % 128) / 32, l = e % 32;
          const int low = (in.qs[32 * h + l] >> (2 * jj)) & 3;
          const int high = (in.hmask[l] >> (4 * h + jj)) & 1;
          const int k = e % kQK, c = k / 16, m = (k % 16) / 4, j = k % 4;
          constexpr X16Layout kL = X16LayoutOf(X16Kind::kQ3K);
          uint8_t* blk = out + kL.header + static_cast<size_t>(e / kQK) * kL.block;
          blk[64 * c + 4 * i + j] |= static_cast<uint8_t>(low << (2 * m));
          blk[kL.extra + 4 * i + j] |= static_cast<uint8_t>(high << (m + 4 * c));
        }
      });
}

void RepackQ2_KX16(const void* src, void* dst, int64_t rows, int64_t cols) {
  RepackX16<BlockQ2_K, kQK_K>(
      src, dst, rows, cols, X16GroupBytes(X16Kind::kQ2K, 8),
      [](uint8_t* out, int i, const BlockQ2_K& in) {
        std::memcpy(out + 2 * i, &in.d, 2);
        std::memcpy(out + 32 + 2 * i, &in.dmin, 2);
        for (int v = 0; v < 4; ++v) std::memcpy(out + 64 + 64 * v + 4 * i, in.scales + 4 * v, 4);
        for (int e = 0; e < kQK_K; ++e) {
          const int low = (in.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
          const int k = e % kQK, c = k / 16, m = (k % 16) / 4, j = k % 4;
          constexpr X16Layout kL = X16LayoutOf(X16Kind::kQ2K);
          out[kL.header + static_cast<size_t>(e / kQK) * kL.block + 64 * c + 4 * i + j] |=
              static_cast<uint8_t>(low << (2 * m));
        }
      });
}

bool X16RelayoutOf(GgmlType from, GgmlType* to, X16RepackFn* repack) {
  switch (from) {
    case GgmlType::kQ4_0:
      *to = GgmlType::kQ4_0X16;
      *repack = RepackQ4_0X16;
      return true;
    case GgmlType::kQ8_0:
      *to = GgmlType::kQ8_0X16;
      *repack = RepackQ8_0X16;
      return true;
    case GgmlType::kQ4_1:
      *to = GgmlType::kPQ4_G32Z;
      *repack = RepackQ4_1X16;
      return true;  // same values
    case GgmlType::kQ5_0:
      *to = GgmlType::kQ5_0X16;
      *repack = RepackQ5_0X16;
      return true;
    case GgmlType::kQ5_1:
      *to = GgmlType::kQ5_1X16;
      *repack = RepackQ5_1X16;
      return true;
    case GgmlType::kQ4_K:
      *to = GgmlType::kQ4_KX16;
      *repack = RepackQ4_KX16;
      return true;
    case GgmlType::kQ5_K:
      *to = GgmlType::kQ5_KX16;
      *repack = RepackQ5_KX16;
      return true;
    case GgmlType::kQ6_K:
      *to = GgmlType::kQ6_KX16;
      *repack = RepackQ6_KX16;
      return true;
    case GgmlType::kIQ4_NL:
      *to = GgmlType::kIQ4_NLX16;
      *repack = RepackIQ4_NLX16;
      return true;
    case GgmlType::kIQ4_XS:
      *to = GgmlType::kIQ4_XSX16;
      *repack = RepackIQ4_XSX16;
      return true;
    case GgmlType::kMXFP4:
      *to = GgmlType::kMXFP4X16;
      *repack = RepackMXFP4X16;
      return true;
    case GgmlType::kQ3_K:
      *to = GgmlType::kQ3_KX16;
      *repack = RepackQ3_KX16;
      return true;
    case GgmlType::kQ2_K:
      *to = GgmlType::kQ2_KX16;
      *repack = RepackQ2_KX16;
      return true;
    default:
      return false;
  }
}

bool X16FormatOf(GgmlType t, X16Format* f) {
  switch (t) {
    case GgmlType::kQ4_0X16:
    case GgmlType::kPQ4_G32:
      *f = {X16Kind::kQ4S, 32};
      return true;
    case GgmlType::kPQ4_G64:
      *f = {X16Kind::kQ4S, 64};
      return true;
    case GgmlType::kPQ4_G128:
      *f = {X16Kind::kQ4S, 128};
      return true;
    case GgmlType::kPQ4_G32Z:
      *f = {X16Kind::kQ4Z, 32};
      return true;
    case GgmlType::kPQ4_G64Z:
      *f = {X16Kind::kQ4Z, 64};
      return true;
    case GgmlType::kPQ4_G128Z:
      *f = {X16Kind::kQ4Z, 128};
      return true;
    case GgmlType::kQ8_0X16:
      *f = {X16Kind::kQ8B, 32};
      return true;
    case GgmlType::kPQ8_C:
      *f = {X16Kind::kQ8C, 32};
      return true;
    case GgmlType::kPS8_C:
      *f = {X16Kind::kS8C, 32};
      return true;
    case GgmlType::kQ4_KX16:
      *f = {X16Kind::kQ4K, kQK_K};
      return true;
    case GgmlType::kQ6_KX16:
      *f = {X16Kind::kQ6K, kQK_K};
      return true;
    case GgmlType::kQ5_0X16:
      *f = {X16Kind::kQ5S, kQK};
      return true;
    case GgmlType::kQ5_1X16:
      *f = {X16Kind::kQ5Z, kQK};
      return true;
    case GgmlType::kQ5_KX16:
      *f = {X16Kind::kQ5K, kQK_K};
      return true;
    case GgmlType::kIQ4_NLX16:
      *f = {X16Kind::kL4S, kQK};
      return true;
    case GgmlType::kIQ4_XSX16:
      *f = {X16Kind::kL4X, kQK_K};
      return true;
    case GgmlType::kMXFP4X16:
      *f = {X16Kind::kM4, kQK};
      return true;
    case GgmlType::kQ3_KX16:
      *f = {X16Kind::kQ3K, kQK_K};
      return true;
    case GgmlType::kQ2_KX16:
      *f = {X16Kind::kQ2K, kQK_K};
      return true;
    default:
      return false;
  }
}

namespace {

// Byte geometry of a 16-row group: a prefix (PQ8_C's row scales), then per scale group a
// header (scales, minimums) and G / 32 quant blocks.
struct X16Geometry {  // formats/x16_layout.h, for one format's group size
  size_t prefix, header, block;
  int blocks_per_group;
  explicit X16Geometry(const X16Format& f)
      : prefix(X16LayoutOf(f.kind).prefix),
        header(X16LayoutOf(f.kind).header),
        block(X16LayoutOf(f.kind).block),
        blocks_per_group(f.group / kQK) {}
  size_t GroupStride() const { return header + static_cast<size_t>(blocks_per_group) * block; }
};

inline size_t Q8Byte(int i, int k) {
  return 64 * static_cast<size_t>(k / 4) + 4 * static_cast<size_t>(i) + k % 4;
}

}  // namespace

namespace {

// Where element (row, col) of a 16-row group lies: its format, the group, its scale group's
// header and its block's quants.
struct X16At {
  const X16Format& f;
  const uint8_t* group;
  const uint8_t* sg;
  const uint8_t* quants;
  int row;
  int64_t col;
  int blk, k;
};

// Q5_0 / Q5_1 re-laid (kQ5S, kQ5Z): fp16 scale (and minimum), 5-bit quants.
void ReadQ5(const X16At& at, int* q, float* d, float* m) {
  const X16Format& f = at.f;
  const uint8_t* sg = at.sg;
  const uint8_t* quants = at.quants;
  const int row = at.row, k = at.k;
  uint16_t h;
  std::memcpy(&h, sg + 2 * row, 2);
  *d = Fp16ToFp32(h);
  if (f.kind == X16Kind::kQ5Z) {
    std::memcpy(&h, sg + 32 + 2 * row, 2);
    *m = Fp16ToFp32(h);
  }
  *q = GetQ5(quants, row, k) - (f.kind == X16Kind::kQ5S ? 16 : 0);
}

// Q4_K / Q5_K: the super-block's fp16 scale and minimum times the sub-block's 6-bit ones.
void ReadQ4KQ5K(const X16At& at, int* q, float* d, float* m) {
  const X16Format& f = at.f;
  const uint8_t* sg = at.sg;
  const uint8_t* quants = at.quants;
  const int row = at.row, blk = at.blk, k = at.k;
  uint16_t h[2];
  std::memcpy(&h[0], sg + 2 * row, 2);
  std::memcpy(&h[1], sg + 32 + 2 * row, 2);
  uint8_t scales[12];
  for (int v = 0; v < 3; ++v) std::memcpy(scales + 4 * v, sg + 64 + 64 * v + 4 * row, 4);
  int sc, mn;
  KQuantScaleMin(blk, scales, &sc, &mn);
  const uint8_t byte = quants[Q4Byte(row, k)];
  *q = f.kind == X16Kind::kQ5K ? GetQ5(quants, row, k) : (k < 16 ? (byte & 15) : (byte >> 4));
  *d = Fp16ToFp32(h[0]) * static_cast<float>(sc);
  *m = -(Fp16ToFp32(h[1]) * static_cast<float>(mn));
}

// Q2_K: 2-bit quants, 4-bit scale and minimum per 16 elements.
void ReadQ2K(const X16At& at, int* q, float* d, float* m) {
  const uint8_t* sg = at.sg;
  const uint8_t* quants = at.quants;
  const int row = at.row, k = at.k;
  const int64_t col = at.col;
  uint16_t h[2];
  std::memcpy(&h[0], sg + 2 * row, 2);
  std::memcpy(&h[1], sg + 32 + 2 * row, 2);
  const int sub = static_cast<int>((col % kQK_K) / 16);
  const uint8_t sc = sg[64 + 64 * (sub / 4) + 4 * row + sub % 4];
  const int c = k / 16, sh = (k % 16) / 4, j = k % 4;
  *q = (quants[64 * c + 4 * row + j] >> (2 * sh)) & 3;
  *d = Fp16ToFp32(h[0]) * static_cast<float>(sc & 15);
  *m = -(Fp16ToFp32(h[1]) * static_cast<float>(sc >> 4));
}

// Q3_K: 2 low bits and a high bit, 6-bit signed scales per 16 elements.
void ReadQ3K(const X16At& at, int* q, float* d, float* m) {
  const uint8_t* sg = at.sg;
  const uint8_t* quants = at.quants;
  const int row = at.row, k = at.k;
  const int64_t col = at.col;
  uint16_t h;
  std::memcpy(&h, sg + 2 * row, 2);
  uint8_t b[12];
  for (int v = 0; v < 3; ++v) std::memcpy(b + 4 * v, sg + 32 + 64 * v + 4 * row, 4);
  const int sub = static_cast<int>((col % kQK_K) / 16);
  const int sc =
      ((b[sub % 8] >> (4 * (sub / 8))) & 15) | (((b[8 + sub % 4] >> (2 * (sub / 4))) & 3) << 4);
  const int c = k / 16, sh = (k % 16) / 4, j = k % 4;
  const int low = (quants[64 * c + 4 * row + j] >> (2 * sh)) & 3;
  const int high = (quants[X16LayoutOf(X16Kind::kQ3K).extra + 4 * row + j] >> (sh + 4 * c)) & 1;
  *q = low - (high ? 0 : 4);
  *d = Fp16ToFp32(h) * static_cast<float>(sc - 32);
}

// The lookup kinds (IQ4_NL, IQ4_XS, MXFP4): a grid value times the block's scale.
void ReadLut(const X16At& at, int* q, float* d, float* m) {
  const X16Format& f = at.f;
  const uint8_t* sg = at.sg;
  const uint8_t* quants = at.quants;
  const int row = at.row, blk = at.blk, k = at.k;
  const uint8_t byte = quants[Q4Byte(row, k)];
  const int nib = k < 16 ? (byte & 15) : (byte >> 4);
  if (f.kind == X16Kind::kM4) {
    *d = Mxfp4Scale(sg[row]);
    *q = kMxfp4Values[nib];
    return;
  }
  uint16_t h;
  std::memcpy(&h, sg + 2 * row, 2);
  *d = Fp16ToFp32(h);
  *q = kIq4NlValues[nib];
  if (f.kind == X16Kind::kL4X) {
    uint32_t sl;
    uint16_t sh;
    std::memcpy(&sl, sg + 32 + 4 * row, 4);
    std::memcpy(&sh, sg + 96 + 2 * row, 2);
    const int ls = static_cast<int>(((sl >> (4 * blk)) & 15) | (((sh >> (2 * blk)) & 3) << 4));
    *d *= static_cast<float>(ls - 32);
  }
}

// Q6_K: 4 low and 2 high bits, an int8 scale per 16 elements.
void ReadQ6K(const X16At& at, int* q, float* d, float* m) {
  const uint8_t* sg = at.sg;
  const uint8_t* quants = at.quants;
  const int row = at.row, k = at.k;
  const int64_t col = at.col;
  uint16_t h;
  std::memcpy(&h, sg + 2 * row, 2);
  const int sub = static_cast<int>((col % kQK_K) / 16);
  const auto sc = static_cast<int8_t>(sg[32 + 64 * (sub / 4) + 4 * row + sub % 4]);
  const uint8_t byte = quants[Q4Byte(row, k)];
  const int lo = k < 16 ? (byte & 15) : (byte >> 4);
  const int hi =
      (quants[X16LayoutOf(X16Kind::kQ6K).extra + Q6HighByte(row, k)] >> Q6HighShift(k)) & 3;
  *q = (lo | (hi << 4)) - 32;
  *d = Fp16ToFp32(h) * static_cast<float>(sc);
}

// The block kinds (Q4_0, Q4_1, Q8_0 re-laid, PQ4 with or without a minimum, PQ8 per channel,
// 2:4 sparse int8): a scale per block, group or row (and a minimum), the quant by its layout.
void ReadBlock(const X16At& at, int* q, float* d, float* m) {
  const X16Format& f = at.f;
  const uint8_t* group = at.group;
  const uint8_t* sg = at.sg;
  const uint8_t* quants = at.quants;
  const int row = at.row, k = at.k;
  if (f.kind == X16Kind::kQ8C || f.kind == X16Kind::kS8C) {
    std::memcpy(d, group + 4 * row, 4);
  } else {
    uint16_t h;
    std::memcpy(&h, sg + 2 * row, 2);
    *d = Fp16ToFp32(h);
    if (f.kind == X16Kind::kQ4Z) {
      std::memcpy(&h, sg + 32 + 2 * row, 2);
      *m = Fp16ToFp32(h);
    }
  }
  if (f.kind == X16Kind::kS8C) {  // stored or pruned (0)
    const int step = k / 8, grp = k / 4, pos = k % 4;
    const uint8_t code = quants[X16LayoutOf(X16Kind::kS8C).extra + 4 * row + step];
    const int c = (grp % 2 == 0) ? (code & 15) : (code >> 4);
    *q = 0;
    for (int j = 0; j < 2; ++j) {
      if (kSparsePairs[c][j] == pos)
        *q = static_cast<int8_t>(quants[32 + 64 * step + 4 * row + 2 * (grp % 2) + j]);
    }
  } else if (f.kind == X16Kind::kQ4S || f.kind == X16Kind::kQ4Z) {
    const uint8_t byte = quants[Q4Byte(row, k)];
    const int nib = k < 16 ? (byte & 15) : (byte >> 4);
    *q = f.kind == X16Kind::kQ4S ? nib - 8 : nib;
  } else {
    *q = quants[Q8Byte(row, k)] - 128;
  }
}

}  // namespace

void X16Quant(GgmlType type, const uint8_t* group, int64_t cols, int row, int64_t col, int* q,
              float* d, float* m) {
  X16Format f{};
  X16FormatOf(type, &f);
  const X16Geometry geo(f);
  const int64_t s = col / f.group;
  const int blk = static_cast<int>((col % f.group) / kQK), k = static_cast<int>(col % kQK);
  const uint8_t* sg = group + geo.prefix + static_cast<size_t>(s) * geo.GroupStride();
  const X16At at{f,   group, sg,  sg + geo.header + static_cast<size_t>(blk) * geo.block,
                 row, col,   blk, k};
  *m = 0;
  switch (f.kind) {
    case X16Kind::kQ5S:
    case X16Kind::kQ5Z:
      return ReadQ5(at, q, d, m);
    case X16Kind::kQ4K:
    case X16Kind::kQ5K:
      return ReadQ4KQ5K(at, q, d, m);
    case X16Kind::kQ2K:
      return ReadQ2K(at, q, d, m);
    case X16Kind::kQ3K:
      return ReadQ3K(at, q, d, m);
    case X16Kind::kQ6K:
      return ReadQ6K(at, q, d, m);
    default:
      break;
  }
  if (X16IsLut(f.kind)) return ReadLut(at, q, d, m);
  ReadBlock(at, q, d, m);
}

float X16Element(GgmlType type, const uint8_t* group, int64_t cols, int row, int64_t col) {
  int q;
  float d, m;
  X16Quant(type, group, cols, row, col, &q, &d, &m);
  return static_cast<float>(q) * d + m;
}

namespace {

// Row i of a 2:4 sparse int8 group: prune 2 of every 4 (keep the largest |w| *
// sqrt(importance)), then int8 per row.
void QuantRowS8C(const X16Geometry& geo, const float* x, int64_t cols, const float* importance,
                 int i, uint8_t* grp) {
  std::vector<uint8_t> codes(static_cast<size_t>(cols / 4));
  float amax = 0;
  for (int64_t g4 = 0; g4 < cols / 4; ++g4) {
    float score[4];
    for (int p = 0; p < 4; ++p) {
      const int64_t c = 4 * g4 + p;
      score[p] = std::fabs(x[c]) * (importance != nullptr ? std::sqrt(importance[c]) : 1.0f);
    }
    int best = 0;
    for (int code = 1; code < 6; ++code) {
      if (score[kSparsePairs[code][0]] + score[kSparsePairs[code][1]] >
          score[kSparsePairs[best][0]] + score[kSparsePairs[best][1]])
        best = code;
    }
    codes[static_cast<size_t>(g4)] = static_cast<uint8_t>(best);
    for (int j = 0; j < 2; ++j) amax = std::max(amax, std::fabs(x[4 * g4 + kSparsePairs[best][j]]));
  }
  const float row_d = amax / 127.0f, id = row_d != 0 ? 1.0f / row_d : 0.0f;
  std::memcpy(grp + 4 * i, &row_d, 4);
  for (int64_t b = 0; b < cols / kQK; ++b) {
    uint8_t* blk = grp + geo.prefix + static_cast<size_t>(b) * geo.block;
    int sum = 0;
    for (int step = 0; step < 4; ++step) {
      uint8_t code_byte = 0;
      for (int half = 0; half < 2; ++half) {
        const int64_t g4 = b * 8 + 2 * step + half;
        const uint8_t code = codes[static_cast<size_t>(g4)];
        code_byte = static_cast<uint8_t>(code_byte | (half == 0 ? code : code << 4));
        for (int j = 0; j < 2; ++j) {
          const int q = Level(x[4 * g4 + kSparsePairs[code][j]] * id, -127, 127);
          sum += q;
          blk[32 + 64 * step + 4 * i + 2 * half + j] = static_cast<uint8_t>(static_cast<int8_t>(q));
        }
      }
      blk[X16LayoutOf(X16Kind::kS8C).extra + 4 * i + step] = code_byte;
    }
    const int16_t s16 = static_cast<int16_t>(sum);
    std::memcpy(blk + 2 * i, &s16, 2);
  }
}

// Row i of an int8 group: a scale per row (kQ8C) or per block (kQ8B), quants offset by 128.
void QuantRowQ8(const X16Format& f, const X16Geometry& geo, const float* x, int64_t cols, int i,
                uint8_t* grp) {
  float row_d = 0;
  if (f.kind == X16Kind::kQ8C) {
    float amax = 0;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(x[c]));
    row_d = amax / 127.0f;
    std::memcpy(grp + 4 * i, &row_d, 4);
  }
  for (int64_t b = 0; b < cols / kQK; ++b) {
    float d = row_d;
    uint8_t* sg = grp + geo.prefix + static_cast<size_t>(b) * geo.GroupStride();
    if (f.kind == X16Kind::kQ8B) {
      float amax = 0;
      for (int k = 0; k < kQK; ++k) amax = std::max(amax, std::fabs(x[b * kQK + k]));
      const uint16_t h = Fp32ToFp16(amax / 127.0f);
      std::memcpy(sg + 2 * i, &h, 2);
      d = Fp16ToFp32(h);
    }
    const float id = d != 0 ? 1.0f / d : 0.0f;
    uint8_t* quants = sg + geo.header;
    for (int k = 0; k < kQK; ++k)
      quants[Q8Byte(i, k)] = static_cast<uint8_t>(Level(x[b * kQK + k] * id, -127, 127) + 128);
  }
}

// Row i of a 4-bit group: per scale group an fp16 scale (and minimum), nibbles in place.
void QuantRowQ4(const X16Format& f, const X16Geometry& geo, const float* x, int64_t cols,
                const float* importance, int i, uint8_t* grp) {
  int q[256];
  for (int64_t s = 0; s < cols / f.group; ++s) {
    const float* xs = x + s * f.group;
    const float* imp = importance != nullptr ? importance + s * f.group : nullptr;
    uint8_t* sg = grp + static_cast<size_t>(s) * geo.GroupStride();
    float d, m = 0;
    if (f.kind == X16Kind::kQ4S) {
      d = QuantGroupQ4S(xs, f.group, imp, q);
    } else {
      QuantGroupQ4Z(xs, f.group, imp, q, &d, &m);
      const uint16_t hm = Fp32ToFp16(m);
      std::memcpy(sg + 32 + 2 * i, &hm, 2);
    }
    const uint16_t hd = Fp32ToFp16(d);
    std::memcpy(sg + 2 * i, &hd, 2);
    for (int e = 0; e < f.group; ++e) {
      uint8_t* quants = sg + geo.header + static_cast<size_t>(e / kQK) * geo.block;
      const int k = e % kQK;
      quants[Q4Byte(i, k)] |= static_cast<uint8_t>(k < 16 ? q[e] : q[e] << 4);
    }
  }
}

}  // namespace

void QuantizeX16(GgmlType type, const float* src, int64_t rows, int64_t cols,
                 const float* importance, void* dst) {
  X16Format f{};
  if (!X16FormatOf(type, &f)) Fail("QuantizeX16: %s is not an interleaved type", Traits(type).name);
  if (!IsPaddockFileType(type))
    Fail("QuantizeX16: %s is a load-time layout of a llama.cpp type, not a file type",
         Traits(type).name);
  const X16Geometry geo(f);
  const size_t group_bytes = static_cast<size_t>(kX16Rows) * RowBytes(Traits(type), cols);
  auto* out = static_cast<uint8_t*>(dst);
  std::memset(out, 0, group_bytes * static_cast<size_t>(rows / kX16Rows));
  for (int64_t g = 0; g < rows / kX16Rows; ++g) {
    uint8_t* grp = out + static_cast<size_t>(g) * group_bytes;
    for (int i = 0; i < kX16Rows; ++i) {
      const float* x = src + static_cast<size_t>(g * kX16Rows + i) * static_cast<size_t>(cols);
      if (f.kind == X16Kind::kS8C) {
        QuantRowS8C(geo, x, cols, importance, i, grp);
      } else if (f.kind == X16Kind::kQ8C || f.kind == X16Kind::kQ8B) {
        QuantRowQ8(f, geo, x, cols, i, grp);
      } else {
        QuantRowQ4(f, geo, x, cols, importance, i, grp);
      }
    }
  }
}

void DequantizeMatrix(GgmlType type, const uint8_t* data, int64_t rows, int64_t cols, float* out) {
  const TypeTraits& tr = Traits(type);
  const size_t rb = RowBytes(tr, cols);
  if (!IsX16(type)) {
    if (tr.to_float == nullptr) Fail("cannot dequantize type %s", tr.name);
    for (int64_t r = 0; r < rows; ++r)
      tr.to_float(data + static_cast<size_t>(r) * rb, out + r * cols, cols);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* grp = data + static_cast<size_t>(r / kX16Rows) * kX16Rows * rb;
    for (int64_t c = 0; c < cols; ++c)
      out[r * cols + c] = X16Element(type, grp, cols, static_cast<int>(r % kX16Rows), c);
  }
}
}  // namespace paddock
