// formats/ggml_types.h: the tensor element types of GGUF files, their block layouts and a
// traits table (name, block size, bytes per block, reference dequantize/quantize).
//
// Block structs mirror the on-disk layout byte for byte (static_assert'ed). The reference
// functions here are the numerical ground truth that every fast kernel is tested against.
// Types listed but without `to_float` can be parsed and reported, not computed with.
#pragma once

#include <cstddef>
#include <cstdint>

namespace paddock {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ4_NL = 20,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
  kMXFP4 = 39,
  // Internal layouts, produced by re-laying weights out at load; never read from or written to
  // files (FindTypeTraits does not know them).
  kQ8_0R = 46,      // Q8_0 with each row's fp16 scales gathered in front of its 32-byte quants
  kQ4_0R = 47,      // Q4_0 with each row's fp16 scales gathered in front of its 16-byte quants
  kQ4_0X16 = 48,    // Q4_0, 16 rows interleaved for the integer micro-kernel (see below)
  kQ8_0X16 = 49,    // Q8_0, 16 rows interleaved, quants stored offset by +128 (see below)
  kQ4_KX16 = 50,    // Q4_K, 16 rows interleaved (same size; see below)
  kQ6_KX16 = 51,    // Q6_K, 16 rows interleaved (same size; see below)
  kQ5_0X16 = 52,    // Q5_0, 16 rows interleaved (same size; see below)
  kQ5_1X16 = 53,    // Q5_1, 16 rows interleaved (same size)
  kQ5_KX16 = 54,    // Q5_K, 16 rows interleaved (same size)
  kIQ4_NLX16 = 55,  // IQ4_NL, 16 rows interleaved (same size)
  kIQ4_XSX16 = 56,  // IQ4_XS, 16 rows interleaved (same size)
  kMXFP4X16 = 57,   // MXFP4, 16 rows interleaved (same size)
  kQ3_KX16 = 58,    // Q3_K, 16 rows interleaved (same size)
  kQ2_KX16 = 59,    // Q2_K, 16 rows interleaved (same size)
  // Paddock file types (written by `paddock quantize`, GGUF key paddock.quantization_version
  // = 1): stored already interleaved in 16-row groups, so loading is a memory map with no
  // repacking. Layouts below; docs/quantization.md.
  kPQ8_C = 100,      // int8, one fp32 scale per output channel (row), symmetric
  kPQ4_G32 = 101,    // int4, groups of 32, symmetric (the values of Q4_0; layout of Q4_0X16)
  kPQ4_G64 = 102,    // int4, groups of 64, symmetric
  kPQ4_G128 = 103,   // int4, groups of 128, symmetric
  kPQ4_G32Z = 104,   // int4, groups of 32 with a zero point (value q * d + m, as Q4_1)
  kPQ4_G64Z = 105,   // int4, groups of 64 with a zero point
  kPQ4_G128Z = 106,  // int4, groups of 128 with a zero point
  kPS8_C = 107,      // int8 per output channel, 2:4 structured sparse (2 of every 4 stored)
};
constexpr int kGgmlTypeCount = 108;  // upper bound on type ids we index by
constexpr uint32_t kPaddockQuantVersion = 1;
// A Paddock file type (its layout is versioned by paddock.quantization_version).
inline bool IsPaddockFileType(GgmlType t) {
  return static_cast<uint32_t>(t) >= static_cast<uint32_t>(GgmlType::kPQ8_C);
}

constexpr int kQK = 32;     // block size of the legacy formats
constexpr int kQK_K = 256;  // super-block size of the k-quants

struct BlockQ4_0 {
  uint16_t d;      // fp16 scale
  uint8_t qs[16];  // nibbles: low = elements 0..15, high = 16..31; value (q - 8) * d
};
struct BlockQ4_1 {
  uint16_t d, m;  // fp16 scale and minimum; value q * d + m
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];   // 5th bits, bit j for element j
  uint8_t qs[16];  // value (q - 16) * d
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];  // value q * d
};
// Q2_K: 16 sub-blocks of 16, value d * sc * q - dmin * m, q 2 bits, sc and m 4 bits each.
struct BlockQ2_K {
  uint8_t scales[16];  // sc | m << 4 per sub-block
  uint8_t qs[64];      // per 128 elements, 32 bytes: element 32j + l at byte l, bits 2j
  uint16_t d, dmin;
};
// Q3_K: 16 sub-blocks of 16, value d * (sc - 32) * q, q in -4..3 (2 low bits in qs, the third
// in hmask: set means +0, clear means -4), sc 6 bits packed in 12 bytes.
struct BlockQ3_K {
  uint8_t hmask[32];   // element 128h + 32j + l: byte l, bit 4h + j
  uint8_t qs[64];      // as Q2_K's
  uint8_t scales[12];  // 16 6-bit scales (+32), packed (see quants_ref.cpp)
  uint16_t d;
};
struct BlockQ4_K {
  uint16_t d, dmin;    // super-block scales for the 6-bit sub-block scales and mins
  uint8_t scales[12];  // 8 scales + 8 mins, 6 bits each, packed
  uint8_t qs[128];     // 4-bit quants, 64 elements per 32 bytes (low nibbles first)
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];  // 5th bits
  uint8_t qs[128];
};
struct BlockQ6_K {
  uint8_t ql[128];    // low 4 bits
  uint8_t qh[64];     // high 2 bits
  int8_t scales[16];  // 8-bit sub-block scales (16 elements each)
  uint16_t d;
};
// IQ4_NL: 32 elements, value d * kIq4NlValues[q] (a non-linear 4-bit grid), nibbles as Q4_0.
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[16];
};
// IQ4_XS: 256 elements in 8 sub-blocks of 32, value d * (ls - 32) * kIq4NlValues[q], ls 6 bits
// (low 4 in scales_l, nibble ib % 2 of byte ib / 2; high 2 in scales_h, bits 2 ib), nibbles of
// sub-block ib at qs[16 ib..] as Q4_0.
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[4];
  uint8_t qs[128];
};
// MXFP4 (OCP microscaling): 32 FP4 (E2M1) values sharing an E8M0 exponent e: value
// 2^(e - 128) * kMxfp4Values[q] (the table holds twice the E2M1 values), nibbles as Q4_0.
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[16];
};
constexpr int8_t kIq4NlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1,    13,   25,  38,  53,  69,  89,  113};
constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
// An MXFP4 block's scale, 2^(e - 128) (ggml's E8M0 "half"); e < 2 gives subnormals.
inline float Mxfp4Scale(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockMXFP4) == 17);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);

// Unpacks sub-block j's 6-bit scale and min from the 12-byte k-quant `scales` field.
static inline void KQuantScaleMin(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Dequantizes `n` elements (a multiple of block_size) from `src` into `dst`.
using DequantizeFn = void (*)(const void* src, float* dst, int64_t n);
// Reference quantizer: `n` floats (a multiple of block_size) into blocks at `dst`.
using QuantizeFn = void (*)(const float* src, void* dst, int64_t n);

struct TypeTraits {
  GgmlType type;
  const char* name;
  int block_size;         // elements per block
  int type_size;          // bytes per block
  DequantizeFn to_float;  // null: parse-only type (or interleaved: see X16Element)
  QuantizeFn from_float;  // null: no reference quantizer
  int row_extra = 0;      // bytes per row besides the blocks (a per-row scale)
};

// Null if `type` is not a known GGML type id (file types only).
const TypeTraits* FindTypeTraits(uint32_t type);
// Re-lays `rows` Q4_0 rows of `cols` elements out as kQ4_0R (same size): per row, the nb fp16
// scales, then the nb 16-byte quant groups.
void RepackQ4_0Rows(const void* src, void* dst, int64_t rows, int64_t cols);
// The same for Q8_0 -> kQ8_0R (nb fp16 scales, then nb 32-byte quant groups).
void RepackQ8_0Rows(const void* src, void* dst, int64_t rows, int64_t cols);
// 16-row interleaved layouts (kQ4_0X16, kQ8_0X16): the integer micro-kernel keeps one row per
// 32-bit lane of a 512-bit register, so one VNNI dot product advances 16 rows by 4 elements,
// the scales multiply 16 rows at once and no horizontal reduction is needed. `rows` must be a
// multiple of 16; the size is unchanged (a group of 16 rows takes 16 * row_bytes bytes).
// Per group of 16 rows, per 32-element block b, in order:
//   16 fp16 scales (row 0..15), then the quants as 64-byte vectors of 16 lanes x 4 bytes:
//   Q4_0X16: vector m (0..3), lane i, byte j: low nibble = q[i][4m + j], high nibble =
//            q[i][4m + 16 + j] (q in 0..15, value (q - 8) * d) — 4 vectors, 288 bytes a block;
//   Q8_0X16: vector g (0..7), lane i, byte j: q[i][4g + j] + 128 as an unsigned byte (value
//            (byte - 128) * d) — 8 vectors, 544 bytes a block.
// The Paddock file types share this scheme, with a scale group of G elements (32, 64, 128):
//   PQ4_G*:  per scale group: 16 fp16 scales, then G / 32 Q4 quant blocks as above;
//   PQ4_G*Z: per scale group: 16 fp16 scales, 16 fp16 minimums, then G / 32 Q4 quant blocks
//            (q in 0..15, value q * d + m);
//   PQ8_C:   per group of rows: 16 fp32 scales (one per row), then per 32-element block the 8
//            Q8 vectors as above (value (byte - 128) * d).
//   PS8_C:   2:4 sparse int8 per channel: per group of rows 16 fp32 scales, then per 32-element
//            block: 16 int16 lane sums of the stored quants (32 B); 4 vectors of the nonzero
//            quants (vector s, lane i, byte j: the j-th stored value of elements 8s..8s+7 of
//            row i, int8); 16 lanes x 4 index bytes (byte s of lane i: which 2 of the 4 elements
//            of groups 2s (low nibble) and 2s + 1 (high nibble) are stored, code 0..5 for the
//            pairs 01, 02, 03, 12, 13, 23). 22 bytes per 32 elements: 5.5 bits per weight.
// The k-quants, re-laid at load with their bytes unchanged in number (the values are exact):
//   Q4_KX16: per 256-element super-block: 16 fp16 d, 16 fp16 dmin, the 12 packed 6-bit
//            scale/min bytes of each row as 3 vectors (vector v, lane i: bytes 4v..4v+3),
//            then the 8 sub-blocks of 32 as Q4 quant blocks (value d * sc * q - dmin * m);
//   Q6_KX16: per super-block: 16 fp16 d, the 16 int8 sub-block scales of each row as 4
//            vectors (vector v, lane i: scales 4v..4v+3), then per 32 elements a Q4 quant block
//            of the low 4 bits and 2 vectors of the high 2 bits (vector h: elements 16h..16h+15;
//            lane i, byte j, bits 2m..2m+1: element 16h + 4m + j), value d * sc * (q - 32).
//   The 5-bit types keep Q4's nibble blocks and add one vector of 5th bits per 32 elements
//   (lane i, byte j: bit m = element 4m + j, bit 4 + m = element 16 + 4m + j):
//   Q5_0X16: per 32: 16 fp16 d, nibbles, 5th bits (value (q - 16) * d);
//   Q5_1X16: per 32: 16 fp16 d, 16 fp16 m, nibbles, 5th bits (value q * d + m);
//   Q5_KX16: Q4_KX16's super-block header, then per 32: nibbles, 5th bits.
// The lookup types keep Q4's nibble blocks (each nibble an index into their value grid):
//   IQ4_NLX16: per 32: 16 fp16 d, nibbles (value d * kIq4NlValues[q]);
//   IQ4_XSX16: per 256: 16 fp16 d, one vector of each row's 4 scales_l bytes (lane i; sub-block
//              ib's low 4 bits at bit 4 ib), 16 uint16 scales_h (bits 2 ib: the high 2), then
//              per 32 a nibble block;
//   MXFP4X16:  per 32: 16 E8M0 bytes (one per row), nibbles (value Mxfp4Scale(e) *
//              kMxfp4Values[q]).
//   Q3_KX16: per 256: 16 fp16 d, each row's 12 packed scale bytes as 3 vectors (vector v, lane
//            i: bytes 4v..4v+3), then per 32 elements: 2 vectors of the low 2 bits (vector c:
//            elements 16c..16c+15; lane i, byte j, bits 2m..2m+1: element 16c + 4m + j) and one
//            of the high bits (lane i, byte j, bit m + 4c: element 16c + 4m + j; clear means
//            -4), value d * (sc - 32) * q, q = low - 4 * !high in -4..3.
//   Q2_KX16: per 256: 16 fp16 d, 16 fp16 dmin, each row's 16 scale bytes (sc | m << 4) as 4
//            vectors (vector v, lane i: bytes 4v..4v+3), then per 32 elements Q3_KX16's two
//            2-bit planes, value d * sc * q - dmin * m.
constexpr int kX16Rows = 16;
enum class X16Kind : uint8_t {
  kQ4S,  // 4-bit, symmetric (zero point 8), fp16 scale per group
  kQ4Z,  // 4-bit with fp16 scale and minimum per group
  kQ8B,  // 8-bit (offset 128), fp16 scale per 32-block
  kQ8C,  // 8-bit (offset 128), fp32 scale per row
  kS8C,  // 2:4 sparse 8-bit, fp32 scale per row
  kQ4K,  // Q4_K: 4-bit, per 32 a 6-bit scale and min, per 256 fp16 d and dmin
  kQ6K,  // Q6_K: 6-bit (zero point 32), per 16 an int8 scale, per 256 an fp16 d
  kQ5S,  // Q5_0: 5-bit, symmetric (zero point 16), fp16 scale per 32
  kQ5Z,  // Q5_1: 5-bit with fp16 scale and minimum per 32
  kQ5K,  // Q5_K: Q4_K's scales with 5-bit quants
  // Lookup kinds: 4-bit indices into a 16-value int8 grid (one in-register table lookup per 32
  // bytes), dotted as int8 weights.
  kL4S,  // IQ4_NL: fp16 scale per 32
  kL4X,  // IQ4_XS: per 256 an fp16 d and the 8 packed 6-bit sub-block scales
  kM4,   // MXFP4: E8M0 exponent byte per 32
  kQ3K,  // Q3_K: 3-bit (2-bit planes + a high-bit plane), per 16 a 6-bit scale, per 256 fp16 d
  kQ2K,  // Q2_K: 2-bit planes, per 16 a 4-bit scale and min, per 256 fp16 d and dmin
};
// The stored pair of element positions (0..3) of a 2:4 group for codes 0..5.
constexpr uint8_t kSparsePairs[6][2] = {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}};
struct X16Format {
  X16Kind kind;
  int group;  // elements per scale group (kQ8C: 32, the quant block; the scale is per row)
};
// False if `t` is not an interleaved type.
bool X16FormatOf(GgmlType t, X16Format* f);
inline bool IsX16(GgmlType t) {
  X16Format f{};
  return X16FormatOf(t, &f);
}
void RepackQ4_0X16(const void* src, void* dst, int64_t rows, int64_t cols);
void RepackQ8_0X16(const void* src, void* dst, int64_t rows, int64_t cols);
// Q4_1 (value q * d + m, groups of 32) is exactly PQ4_G32Z: same values, interleaved.
void RepackQ4_1X16(const void* src, void* dst, int64_t rows, int64_t cols);
void RepackQ4_KX16(const void* src, void* dst, int64_t rows, int64_t cols);
void RepackQ6_KX16(const void* src, void* dst, int64_t rows, int64_t cols);
void RepackQ5_0X16(const void* src, void* dst, int64_t rows, int64_t cols);
void RepackQ5_1X16(const void* src, void* dst, int64_t rows, int64_t cols);
void RepackQ5_KX16(const void* src, void* dst, int64_t rows, int64_t cols);
void RepackIQ4_NLX16(const void* src, void* dst, int64_t rows, int64_t cols);
void RepackIQ4_XSX16(const void* src, void* dst, int64_t rows, int64_t cols);
void RepackMXFP4X16(const void* src, void* dst, int64_t rows, int64_t cols);
void RepackQ3_KX16(const void* src, void* dst, int64_t rows, int64_t cols);
void RepackQ2_KX16(const void* src, void* dst, int64_t rows, int64_t cols);
// The load-time interleaved layout of a file type (Q4_0, Q8_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K,
// Q6_K) and the function that re-lays `rows` (a multiple of 16) rows into it, same size.
// False for the other types.
using X16RepackFn = void (*)(const void* src, void* dst, int64_t rows, int64_t cols);
bool X16RelayoutOf(GgmlType from, GgmlType* to, X16RepackFn* repack);
// Element `col` of row `row` (0..15, within its group) of an interleaved group, as the integer
// quant q (zero point removed), its scale d and minimum m: value = q * d + m.
void X16Quant(GgmlType type, const uint8_t* group, int64_t cols, int row, int64_t col, int* q,
              float* d, float* m);
float X16Element(GgmlType type, const uint8_t* group, int64_t cols, int row, int64_t col);
// Quantizes `rows` x `cols` floats (rows a multiple of 16) into an interleaved Paddock type.
// `importance` (cols values, or null) weights each column's squared error in the choice of
// each group's scale (and minimum): activation-aware quantization from calibration statistics.
// For PS8_C: the 2 of every 4 consecutive weights with the largest |w| * sqrt(importance)
// are kept (magnitude pruning without statistics, activation-weighted with them).
void QuantizeX16(GgmlType type, const float* src, int64_t rows, int64_t cols,
                 const float* importance, void* dst);
// Q4_K / Q5_K with each 32-element sub-block's (scale, min) fitted by weighted least squares
// over candidate level assignments instead of taken from its min and max; weights from
// `importance` (cols values: activation statistics) when given. Still plain Q4_K / Q5_K.
bool HasFittedQuantizer(GgmlType t);
void QuantizeRowsFitted(GgmlType t, const float* src, int64_t rows, int64_t cols,
                        const float* importance, void* dst);
// Dequantizes a whole matrix of any computable type (interleaved or not) to floats.
void DequantizeMatrix(GgmlType type, const uint8_t* data, int64_t rows, int64_t cols, float* out);

// For a known type (asserts).
const TypeTraits& Traits(GgmlType type);
inline const char* TypeName(GgmlType t) {
  return Traits(t).name;
}
// Looks a type up by its name ("q4_0", "Q4_K", "f16" ...); null if unknown.
const TypeTraits* FindTypeTraitsByName(const char* name);

// Bytes of `n` elements of `type`; n must be a multiple of the block size.
inline uint64_t RowBytes(const TypeTraits& t, int64_t n) {
  return static_cast<uint64_t>(n / t.block_size) * static_cast<uint64_t>(t.type_size) +
         static_cast<uint64_t>(t.row_extra);
}

}  // namespace paddock
