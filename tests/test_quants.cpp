// Every supported tensor type: known values, round trips through the GGUF writer and reader,
// and error bands of the reference quantizers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/half.h"
#include "formats/ggml_types.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "paddock/error.h"

namespace paddock {
namespace {

const GgmlType kComputable[] = {
    GgmlType::kF32,  GgmlType::kF16,    GgmlType::kBF16,   GgmlType::kQ8_0, GgmlType::kQ4_0,
    GgmlType::kQ4_1, GgmlType::kQ5_0,   GgmlType::kQ5_1,   GgmlType::kQ4_K, GgmlType::kQ5_K,
    GgmlType::kQ6_K, GgmlType::kIQ4_NL, GgmlType::kIQ4_XS, GgmlType::kMXFP4};

std::vector<float> Dequant(GgmlType t, const std::string& bytes, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  Traits(t).to_float(bytes.data(), out.data(), n);
  return out;
}

// Writes raw blocks as a one-tensor GGUF, reads the file back and dequantizes from the mapping.
std::vector<float> DequantThroughFile(GgmlType t, const std::string& bytes, int64_t n) {
  GgufWriter w;
  w.AddTensor("blocks", {n}, t, bytes.data(), bytes.size());
  const std::string file = w.Serialize();
  GgufFile g = GgufFile::Parse(reinterpret_cast<const uint8_t*>(file.data()), file.size());
  const GgufTensor* ti = g.FindTensor("blocks");
  EXPECT_EQ(ti->type, t);
  std::vector<float> out(static_cast<size_t>(n));
  Traits(t).to_float(ti->data, out.data(), n);
  return out;
}

std::string Quant(GgmlType t, const std::vector<float>& x) {
  std::string b(RowBytes(Traits(t), static_cast<int64_t>(x.size())), '\0');
  Traits(t).from_float(x.data(), b.data(), static_cast<int64_t>(x.size()));
  return b;
}

// Values each format represents exactly, so quantize -> write -> read -> dequantize is exact.
std::vector<float> ExactValues(GgmlType t, int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int j = static_cast<int>(i % 32);
    switch (t) {
      case GgmlType::kQ8_0:
        x[i] = (j == 0 ? 127 : (j * 37 % 255) - 127) * 0.25f;
        break;
      case GgmlType::kQ4_0:
        x[i] = (j == 0 ? -8 : (j * 5 % 16) - 8) * 0.5f;
        break;
      case GgmlType::kQ4_1:
        x[i] = (j == 0 ? 0 : j == 1 ? 15 : (j * 7 % 16)) * 0.25f - 1.0f;
        break;
      case GgmlType::kQ5_0:
        x[i] = (j == 0 ? -16 : (j * 11 % 32) - 16) * 0.125f;
        break;
      case GgmlType::kQ5_1:
        x[i] = (j == 0 ? 0 : j == 1 ? 31 : (j * 13 % 32)) * 0.5f + 2.0f;
        break;
      default:
        x[i] = static_cast<float>((i * 7919) % 97 - 48) * 0.03125f;
        break;  // exact in f16/bf16
    }
  }
  return x;
}

TEST(Quants, BlockSizesMatchTheGgmlLayouts) {
  EXPECT_EQ(Traits(GgmlType::kQ4_0).type_size, 18);
  EXPECT_EQ(Traits(GgmlType::kQ4_K).type_size, 144);
  EXPECT_EQ(Traits(GgmlType::kQ6_K).block_size, 256);
  EXPECT_EQ(FindTypeTraits(4), nullptr);  // removed Q4_2
  EXPECT_EQ(FindTypeTraitsByName("q5_k")->type, GgmlType::kQ5_K);
}

TEST(Quants, ExactValuesRoundTripThroughWriterAndReader) {
  for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0,
                     GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1}) {
    const int64_t cols = 64, rows = 3;
    const auto x = ExactValues(t, cols * rows);
    GgufWriter w;
    w.AddTensorF32("t", {cols, rows}, t, x.data());
    const std::string file = w.Serialize();
    GgufFile g = GgufFile::Parse(reinterpret_cast<const uint8_t*>(file.data()), file.size());
    const GgufTensor* ti = g.FindTensor("t");
    ASSERT_NE(ti, nullptr);
    ASSERT_EQ(ti->type, t);
    std::vector<float> y(x.size());
    Traits(t).to_float(ti->data, y.data(), cols * rows);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], x[i]) << TypeName(t) << " element " << i;
  }
}

TEST(Quants, HandBuiltQ4_0AndQ8_0Blocks) {
  BlockQ4_0 b{};
  b.d = Fp32ToFp16(2.0f);
  b.qs[0] = 0x1F;  // element 0: q=15 -> 14, element 16: q=1 -> -14
  b.qs[3] = 0x80;  // element 3: q=0 -> -16, element 19: q=8 -> 0
  std::string bytes(reinterpret_cast<const char*>(&b), sizeof(b));
  auto y = DequantThroughFile(GgmlType::kQ4_0, bytes, 32);
  EXPECT_EQ(y[0], 14.0f);
  EXPECT_EQ(y[16], -14.0f);
  EXPECT_EQ(y[3], -16.0f);
  EXPECT_EQ(y[19], 0.0f);
  EXPECT_EQ(y[1], -16.0f);  // qs[1] = 0 -> (0 - 8) * 2
  BlockQ8_0 c{};
  c.d = Fp32ToFp16(0.5f);
  c.qs[5] = -128;
  c.qs[31] = 127;
  bytes.assign(reinterpret_cast<const char*>(&c), sizeof(c));
  y = DequantThroughFile(GgmlType::kQ8_0, bytes, 32);
  EXPECT_EQ(y[5], -64.0f);
  EXPECT_EQ(y[31], 63.5f);
  EXPECT_EQ(y[0], 0.0f);
}

TEST(Quants, HandBuiltQ5Blocks) {
  BlockQ5_0 b{};
  b.d = Fp32ToFp16(1.0f);
  b.qs[2] = 0x3F;                              // element 2: low 0xF, element 18: low 0x3
  const uint32_t qh = (1u << 2) | (1u << 18);  // fifth bits of elements 2 and 18
  std::memcpy(b.qh, &qh, 4);
  std::string bytes(reinterpret_cast<const char*>(&b), sizeof(b));
  auto y = DequantThroughFile(GgmlType::kQ5_0, bytes, 32);
  EXPECT_EQ(y[2], 31.0f - 16.0f);
  EXPECT_EQ(y[18], 19.0f - 16.0f);
  EXPECT_EQ(y[0], -16.0f);
  BlockQ5_1 c{};
  c.d = Fp32ToFp16(0.5f);
  c.m = Fp32ToFp16(-3.0f);
  c.qs[0] = 0x21;
  const uint32_t qh1 = 1u << 16;  // element 16 gets +16
  std::memcpy(c.qh, &qh1, 4);
  bytes.assign(reinterpret_cast<const char*>(&c), sizeof(c));
  y = DequantThroughFile(GgmlType::kQ5_1, bytes, 32);
  EXPECT_EQ(y[0], 1 * 0.5f - 3.0f);
  EXPECT_EQ(y[16], (2 + 16) * 0.5f - 3.0f);
}

TEST(Quants, HandBuiltQ4_KAndQ5_KBlocks) {
  // Sub-block 0 (scale 2, min 3) and sub-block 5 (scale 45, min 33: exercises the packed
  // high bits of the 6-bit fields).
  BlockQ4_K b{};
  b.d = Fp32ToFp16(1.0f);
  b.dmin = Fp32ToFp16(0.5f);
  b.scales[0] = 2;
  b.scales[4] = 3;
  // j = 5: sc = (scales[9] & 0xF) | (scales[1] >> 6) << 4; m = (scales[9] >> 4) | (scales[5] >> 6)
  // << 4
  b.scales[9] = static_cast<uint8_t>((45 & 0xF) | ((33 & 0xF) << 4));
  b.scales[1] = static_cast<uint8_t>((45 >> 4) << 6);
  b.scales[5] = static_cast<uint8_t>((33 >> 4) << 6);
  b.qs[0] = 0x07;       // element 0 (sub-block 0): q = 7
  b.qs[64 + 3] = 0x90;  // chunk 2, high nibble: element 128 + 32 + 3 = 163 (sub-block 5): q = 9
  std::string bytes(reinterpret_cast<const char*>(&b), sizeof(b));
  auto y = DequantThroughFile(GgmlType::kQ4_K, bytes, 256);
  EXPECT_EQ(y[0], 2 * 7 - 0.5f * 3);
  EXPECT_EQ(y[1], -0.5f * 3);
  EXPECT_EQ(y[163], 45 * 9 - 0.5f * 33);

  BlockQ5_K c{};
  c.d = Fp32ToFp16(1.0f);
  c.dmin = Fp32ToFp16(1.0f);
  c.scales[0] = 1;
  c.scales[1] = 1;  // sub-block 1 scale 1
  c.qs[4] = 0x21;   // element 4 (sub-block 0) low = 1; element 36 (sub-block 1) high = 2
  c.qh[4] = 0x03;   // bit 0: element 4 +16; bit 1: element 36 +16
  bytes.assign(reinterpret_cast<const char*>(&c), sizeof(c));
  y = DequantThroughFile(GgmlType::kQ5_K, bytes, 256);
  EXPECT_EQ(y[4], 17.0f);
  EXPECT_EQ(y[36], 18.0f);
}

TEST(Quants, HandBuiltQ6_KBlock) {
  BlockQ6_K b{};
  b.d = Fp32ToFp16(0.5f);
  for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<int8_t>(j - 8);
  // Element 0: ql[0] low, qh[0] bits 0-1. Element 200 = half 1, r 72: group 2, l 8:
  // ql[64 + 8] high nibble, qh[32 + 8] bits 4-5, scale index 200 / 16 = 12.
  b.ql[0] = 0x05;
  b.qh[0] = 0x02;  // q = 5 | 2 << 4 = 37 -> 5
  b.ql[72] = 0xA0;
  b.qh[40] = 0x30;  // q = 10 | 3 << 4 = 58 -> 26
  std::string bytes(reinterpret_cast<const char*>(&b), sizeof(b));
  auto y = DequantThroughFile(GgmlType::kQ6_K, bytes, 256);
  EXPECT_EQ(y[0], 0.5f * -8 * 5);
  EXPECT_EQ(y[200], 0.5f * 4 * 26);
  EXPECT_EQ(y[1], 0.5f * -8 * -32);
}

// Q2_K and Q3_K hand-built blocks: the element-to-bits mapping of the GGML layouts.
TEST(Quants, HandBuiltQ2_KAndQ3_KBlocks) {
  BlockQ2_K b2{};
  b2.d = Fp32ToFp16(0.5f);
  b2.dmin = Fp32ToFp16(0.25f);
  // Element 200: half 1, group 2, l 8 -> qs[32 + 8] bits 4-5; sub-block 12.
  b2.scales[12] = 3 | (2 << 4);  // sc 3, m 2
  b2.qs[40] = 2 << 4;
  b2.scales[0] = 1 | (4 << 4);
  b2.qs[0] = 3;  // element 0: q 3
  std::string bytes(reinterpret_cast<const char*>(&b2), sizeof(b2));
  auto y = DequantThroughFile(GgmlType::kQ2_K, bytes, 256);
  EXPECT_EQ(y[200], 0.5f * 3 * 2 - 0.25f * 2);
  EXPECT_EQ(y[0], 0.5f * 1 * 3 - 0.25f * 4);
  EXPECT_EQ(y[1], -0.25f * 4);  // q 0: just the minimum
  BlockQ3_K b3{};
  b3.d = Fp32ToFp16(0.5f);
  // Scales: sub-block 0 = 40 (-> 8), sub-block 13 (= 5 + 8: high nibble of byte 5, top bits
  // 2-3 of byte 9) = 20 (-> -12).
  b3.scales[0] = 40 & 15;
  b3.scales[8] = (40 >> 4) & 3;
  b3.scales[5] = (20 & 15) << 4;
  b3.scales[9] = ((20 >> 4) & 3) << 6;
  // Element 0: low bits 1, high bit set -> q 1. Element 210 (half 1, group 2, l 18, sub-block
  // 13): low bits qs[32 + 18] >> 4 = 2, high bit hmask[18] bit 6 clear -> q 2 - 4 = -2.
  b3.qs[0] = 1;
  b3.hmask[0] = 1;
  b3.qs[50] = 2 << 4;
  bytes.assign(reinterpret_cast<const char*>(&b3), sizeof(b3));
  y = DequantThroughFile(GgmlType::kQ3_K, bytes, 256);
  EXPECT_EQ(y[0], 0.5f * 8 * 1);
  EXPECT_EQ(y[210], 0.5f * -12 * -2);
}

// The lookup types decoded by hand from their published definitions: IQ4_NL (d times the
// non-linear grid), IQ4_XS (d times a 6-bit sub-block scale minus 32 times the grid) and MXFP4
// (2^(e - 128) times twice the E2M1 value), through a GGUF file.
TEST(Quants, LookupTypesDecodeTheirGrids) {
  BlockIQ4_NL nl{};
  nl.d = Fp32ToFp16(0.5f);
  nl.qs[0] = 0x3F;  // element 0: index 15 (113), element 16: index 3 (-65)
  nl.qs[5] = 0x80;  // element 5: index 0 (-127), element 21: index 8 (1)
  std::string bytes(reinterpret_cast<const char*>(&nl), sizeof(nl));
  auto y = DequantThroughFile(GgmlType::kIQ4_NL, bytes, 32);
  EXPECT_EQ(y[0], 0.5f * 113);
  EXPECT_EQ(y[16], 0.5f * -65);
  EXPECT_EQ(y[5], 0.5f * -127);
  EXPECT_EQ(y[21], 0.5f * 1);
  EXPECT_EQ(y[1], 0.5f * -127);  // nibble 0
  BlockIQ4_XS xs{};
  xs.d = Fp32ToFp16(0.25f);
  xs.scales_l[1] = 0x5A;              // sub-block 2: low bits 10; sub-block 3: 5
  xs.scales_h = (2 << 4) | (1 << 6);  // sub-block 2: high bits 2 (ls 42); 3: 1 (ls 21)
  xs.qs[32] = 0x0F;                   // sub-block 2, element 0: index 15
  xs.qs[48 + 1] = 0x20;               // sub-block 3, element 17: index 2
  bytes.assign(reinterpret_cast<const char*>(&xs), sizeof(xs));
  y = DequantThroughFile(GgmlType::kIQ4_XS, bytes, 256);
  EXPECT_EQ(y[64], 0.25f * (42 - 32) * 113);
  EXPECT_EQ(y[96 + 17], 0.25f * (21 - 32) * -83);
  EXPECT_EQ(y[0], 0.25f * (0 - 32) * -127);  // sub-block 0: ls 0
  BlockMXFP4 mx{};
  mx.e = 130;       // 2^(130 - 128) = 4
  mx.qs[0] = 0xD7;  // element 0: index 7 (12), element 16: index 13 (-6)
  mx.qs[1] = 0x08;  // element 1: index 8 (negative zero)
  bytes.assign(reinterpret_cast<const char*>(&mx), sizeof(mx));
  y = DequantThroughFile(GgmlType::kMXFP4, bytes, 32);
  EXPECT_EQ(y[0], 48.0f);  // 4 x 12 (E2M1 6.0 at scale 2^3)
  EXPECT_EQ(y[16], -24.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(Mxfp4Scale(127), 0.5f);
  EXPECT_EQ(Mxfp4Scale(1), std::ldexp(1.0f, -127));  // subnormal
  EXPECT_EQ(FindTypeTraitsByName("iq4_xs")->type, GgmlType::kIQ4_XS);
  EXPECT_EQ(FindTypeTraitsByName("mxfp4")->type, GgmlType::kMXFP4);
}

// Root-mean-square error of quantize -> dequantize on Gaussian data, relative to the data's
// RMS, must stay inside a band per bit width (catches both broken and suspiciously perfect).
TEST(Quants, RoundTripErrorBands) {
  struct Band {
    GgmlType t;
    double lo, hi;
  } bands[] = {
      {GgmlType::kF16, 0.0, 1e-3},     {GgmlType::kBF16, 1e-4, 5e-3},
      {GgmlType::kQ8_0, 1e-3, 0.01},   {GgmlType::kQ6_K, 0.005, 0.04},
      {GgmlType::kQ5_0, 0.01, 0.06},   {GgmlType::kQ5_1, 0.01, 0.06},
      {GgmlType::kQ5_K, 0.01, 0.06},   {GgmlType::kQ4_0, 0.04, 0.12},
      {GgmlType::kQ4_1, 0.03, 0.12},   {GgmlType::kQ4_K, 0.03, 0.12},
      {GgmlType::kQ3_K, 0.08, 0.30},   {GgmlType::kQ2_K, 0.15, 0.55},
      {GgmlType::kIQ4_NL, 0.03, 0.12}, {GgmlType::kIQ4_XS, 0.03, 0.12},
      {GgmlType::kMXFP4, 0.06, 0.25},
  };
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(4096);
  for (float& v : x) v = dist(rng);
  for (const auto& b : bands) {
    const auto y = Dequant(b.t, Quant(b.t, x), static_cast<int64_t>(x.size()));
    double se = 0, ss = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      se += (x[i] - y[i]) * (x[i] - y[i]);
      ss += x[i] * x[i];
    }
    const double rel = std::sqrt(se / ss);
    EXPECT_GE(rel, b.lo) << TypeName(b.t);
    EXPECT_LE(rel, b.hi) << TypeName(b.t);
  }
}

TEST(Quants, ZeroBlocksStayZero) {
  std::vector<float> x(256, 0.0f);
  for (GgmlType t : kComputable) {
    const auto y = Dequant(t, Quant(t, x), 256);
    for (float v : y) ASSERT_EQ(v, 0.0f) << TypeName(t);
  }
}

// Fitted k-quant scales (weighted least squares per 32-element sub-block) against the
// min/max reference encoder: never worse in total on the weighted error they optimize, with
// the default weights and with activation statistics (a few loud channels), and still plain
// Q4_K / Q5_K that the reference decoder reads.
TEST(Quants, FittedKQuantScalesBeatMinMax) {
  const int64_t rows = 8, cols = 512;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * cols)), imp(static_cast<size_t>(cols));
  for (float& v : x) v = nd(rng) * 0.1f + (nd(rng) > 2.0f ? 0.5f : 0.0f);  // some outliers
  for (int64_t c = 0; c < cols; ++c) imp[static_cast<size_t>(c)] = c % 11 == 0 ? 30.0f : 1.0f;
  for (GgmlType t : {GgmlType::kQ4_K, GgmlType::kQ5_K}) {
    ASSERT_TRUE(HasFittedQuantizer(t));
    const TypeTraits& tr = Traits(t);
    const size_t bytes = RowBytes(tr, cols) * rows;
    std::string rtn(bytes, '\0'), fit(bytes, '\0'), fiti(bytes, '\0');
    tr.from_float(x.data(), rtn.data(), rows * cols);
    QuantizeRowsFitted(t, x.data(), rows, cols, nullptr, fit.data());
    QuantizeRowsFitted(t, x.data(), rows, cols, imp.data(), fiti.data());
    auto err = [&](const std::string& q, bool weighted) {
      std::vector<float> y(x.size());
      DequantizeMatrix(t, reinterpret_cast<const uint8_t*>(q.data()), rows, cols, y.data());
      double e = 0;
      for (size_t i = 0; i < y.size(); ++i)
        e += (weighted ? imp[i % cols] : 1.0) * (y[i] - x[i]) * (y[i] - x[i]);
      return e;
    };
    EXPECT_LT(err(fit, false), 0.9 * err(rtn, false)) << tr.name;
    EXPECT_LT(err(fiti, true), err(fit, true)) << tr.name;
    EXPECT_LT(err(fiti, true), 0.9 * err(rtn, true)) << tr.name;
  }
  EXPECT_FALSE(HasFittedQuantizer(GgmlType::kQ4_0));
  EXPECT_THROW(QuantizeRowsFitted(GgmlType::kQ4_0, x.data(), 1, 32, nullptr, nullptr), Error);
}

}  // namespace
}  // namespace paddock
