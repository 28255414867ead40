#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <vector>

#include "base/base64.h"
#include "base/half.h"
#include "base/thread_pool.h"
#include "base/utf8.h"
#include "paddock/error.h"

namespace paddock {
namespace {

TEST(Half, EveryFp16RoundTripsThroughFp32) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = Fp16ToFp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(Fp32ToFp16(f), h) << "h=" << h;
  }
}

TEST(Half, KnownValuesAndRounding) {
  EXPECT_EQ(Fp16ToFp32(0x3c00), 1.0f);
  EXPECT_EQ(Fp16ToFp32(0xc000), -2.0f);
  EXPECT_EQ(Fp16ToFp32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(Fp32ToFp16(65504.0f), 0x7bff);
  EXPECT_EQ(Fp32ToFp16(1e6f), 0x7c00);                          // overflow to inf
  EXPECT_EQ(Fp32ToFp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie -> even
  EXPECT_EQ(Fp32ToFp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.0f, -25)), 0x0000);  // tie at half the smallest -> even (0)
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_TRUE(std::isnan(Fp16ToFp32(Fp32ToFp16(NAN))));
}

TEST(Half, Bf16RoundsToNearestEven) {
  EXPECT_EQ(Bf16ToFp32(Fp32ToBf16(1.0f)), 1.0f);
  EXPECT_EQ(Fp32ToBf16(BitsToFloat(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(Fp32ToBf16(BitsToFloat(0x3f818000u)), 0x3f82);
  EXPECT_EQ(Fp32ToBf16(BitsToFloat(0x3f808001u)), 0x3f81);
}

TEST(Utf8Stream, HoldsBackSplitCharacters) {
  Utf8Stream s;
  std::string out;
  const std::string euro = "\xE2\x82\xAC";
  s.Feed(euro.substr(0, 1), &out);
  EXPECT_EQ(out, "");
  s.Feed(euro.substr(1, 1), &out);
  EXPECT_EQ(out, "");
  s.Feed(euro.substr(2) + "a", &out);
  EXPECT_EQ(out, euro + "a");
  const std::string emoji = "\xF0\x9F\xA6\x99";
  for (char c : emoji) s.Feed(std::string(1, c), &out);
  EXPECT_EQ(out, euro + "a" + emoji);
}

TEST(Utf8Stream, ReplacesInvalidBytes) {
  Utf8Stream s;
  std::string out;
  s.Feed("\x80x", &out);  // stray continuation byte
  EXPECT_EQ(out, "\xEF\xBF\xBDx");
  out.clear();
  s.Feed("\xE2\x82y", &out);  // truncated sequence, then ASCII
  EXPECT_EQ(out, "\xEF\xBF\xBDy");
  out.clear();
  s.Feed("\xED\xA0\x80", &out);  // UTF-16 surrogate: invalid in UTF-8
  EXPECT_EQ(out.substr(0, 3), "\xEF\xBF\xBD");
  out.clear();
  s.Feed("\xE2", &out);
  s.Flush(&out);
  EXPECT_EQ(out, "\xEF\xBF\xBD");
}

TEST(Utf8, ValidationFollowsRfc3629) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("\xC3\xA9t\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"));  // ete, euro, emoji
  EXPECT_TRUE(IsValidUtf8("\xF4\x8F\xBF\xBF"));                                 // U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\x80"));                                            // lone continuation
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));                                        // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xE0\x80\xAF"));                                    // overlong, 3 bytes
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));                                    // surrogate
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));                                // past U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xE2\x82"));                                        // cut at the end
  EXPECT_FALSE(IsValidUtf8("\xE2\x82x"));                                       // cut in the middle
}

TEST(Utf8, ClipCutsAtACharacterBoundary) {
  EXPECT_EQ(ClipUtf8("short", 10), "short");
  EXPECT_EQ(ClipUtf8("abcdef", 3), "abc...");
  EXPECT_EQ(ClipUtf8("a\xE2\x82\xAC", 3), "a...");  // the euro sign is not split
}

TEST(Base64, EncodesRfc4648Vectors) {
  // RFC 4648 section 10.
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("foob"), "Zm9vYg==");
  EXPECT_EQ(Base64Encode("fooba"), "Zm9vYmE=");
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(Base64Encode(std::string("\xff\xfe\x00", 3)), "//4A");
}

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 100, 1001}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      for (int rep = 0; rep < 20; ++rep) {
        pool.ParallelFor(n, [&](int64_t b, int64_t e, int t) {
          ASSERT_GE(t, 0);
          ASSERT_LT(t, threads);
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
        });
      }
      for (auto& h : hits) ASSERT_EQ(h.load(), 20);
    }
  }
}

TEST(ThreadPool, ManyShortRunsComplete) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int rep = 0; rep < 20000; ++rep) {
    pool.ParallelFor(4, [&](int64_t b, int64_t e, int) { sum += e - b; });
  }
  EXPECT_EQ(sum.load(), 80000);
}

}  // namespace
}  // namespace paddock
