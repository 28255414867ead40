#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "formats/llama2c.h"
#include "paddock/error.h"
#include "test_util.h"

namespace paddock {
namespace {

Llama2cCheckpoint Parse(const std::string& s) {
  return ParseLlama2c(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

TEST(Llama2c, ReadsStories260K) {
  Llama2cCheckpoint ck = OpenLlama2c(test::ModelPath("stories260K.bin"));
  const Llama2cConfig& c = ck.config;
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.seq_len, 512);
  EXPECT_TRUE(c.shared_classifier);
  EXPECT_EQ(ck.tensors.front().name, "token_embd.weight");
  EXPECT_EQ(ck.tensors.back().name, "output_norm.weight");
  EXPECT_EQ(ck.tensors.size(), 2u + 9u * 5u);
}

TEST(Llama2c, CorruptHeadersAndTruncationsAreRejected) {
  const std::string good = test::ReadFile(test::ModelPath("stories260K.bin"));
  struct Case {
    const char* name;
    int field;  // header int to overwrite, or -1 to truncate
    int32_t value;
    const char* expect;
  } cases[] = {
      {"zero dim", 0, 0, "dim"},
      {"negative layers", 2, -5, "n_layers"},
      {"huge hidden", 1, 1 << 30, "hidden_dim"},
      {"heads do not divide dim", 3, 7, "divisible"},
      {"kv heads do not divide heads", 4, 3, "multiple"},
      {"zero vocab", 5, 0, "vocab_size"},
      {"INT_MIN vocab", 5, INT32_MIN, "vocab_size"},
      {"huge seq_len", 6, 1 << 25, "seq_len"},
      {"vocab too big for file", 5, 100000, "truncated"},
  };
  for (const auto& c : cases) {
    std::string s = good;
    std::memcpy(s.data() + 4 * c.field, &c.value, 4);
    try {
      Parse(s);
      ADD_FAILURE() << c.name;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos)
          << c.name << ": " << e.what();
    }
  }
  for (size_t n : {0ul, 3ul, 27ul, 28ul, 1000ul, good.size() / 2}) {
    EXPECT_THROW(Parse(good.substr(0, n)), Error) << n;
  }
  std::string v1 = good;
  std::memcpy(v1.data(), "24ka", 4);  // "ak42" little-endian magic of newer exports
  EXPECT_THROW(Parse(v1), Error);
}

TEST(Llama2c, TokenizerFileParsesAndRejectsCorruption) {
  Llama2cVocab v = ReadLlama2cTokenizer(test::ModelPath("tok512.bin"));
  EXPECT_EQ(v.pieces.size(), 512u);
  EXPECT_EQ(v.pieces[1], "\n<s>\n");  // as llama2.c exports it
  EXPECT_EQ(v.pieces[3], "<0x00>");
  const std::string good = test::ReadFile(test::ModelPath("tok512.bin"));
  auto parse = [](const std::string& s) {
    return ParseLlama2cTokenizer(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  EXPECT_THROW(parse(good.substr(0, 2)), Error);
  EXPECT_THROW(parse(good.substr(0, good.size() - 1)), Error);
  std::string bad = good;
  const int32_t huge = 1 << 20;
  std::memcpy(bad.data() + 4 + 4, &huge, 4);  // first entry's length
  EXPECT_THROW(parse(bad), Error);
  std::string bad2 = good;
  std::memcpy(bad2.data(), &huge, 4);  // max_token_length
  EXPECT_THROW(parse(bad2), Error);
}

}  // namespace
}  // namespace paddock
