// GGUF reader/writer: every metadata type round-trips; a corpus of corrupted files is rejected
// with a clear error each (this file also runs under ASan/UBSan in scripts/test).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "model/weights.h"
#include "paddock/error.h"
#include "synth/synth.h"
#include "test_util.h"

namespace paddock {
namespace {

std::string SmallFile() {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetU32("a.u32", 7);
  std::vector<float> data(64 * 2);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);
  w.AddTensorF32("t0", {64, 2}, GgmlType::kF32, data.data());
  w.AddTensorF32("t1", {64}, GgmlType::kQ8_0, data.data());
  return w.Serialize();
}

GgufFile ParseString(const std::string& s) {
  return GgufFile::Parse(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

template <class T>
std::string Encode(T v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof(T));
}

TEST(Gguf, EveryMetadataTypeRoundTrips) {
  GgufWriter w;
  w.SetRaw("u8", GgufType::kU8, Encode<uint8_t>(200));
  w.SetRaw("i8", GgufType::kI8, Encode<int8_t>(-100));
  w.SetRaw("u16", GgufType::kU16, Encode<uint16_t>(60000));
  w.SetRaw("i16", GgufType::kI16, Encode<int16_t>(-30000));
  w.SetU32("u32", 4000000000u);
  w.SetI32("i32", -2000000000);
  w.SetF32("f32", 1.5f);
  w.SetBool("bool", true);
  w.SetString("str", "h\xC3\xA9llo");
  w.SetU64("u64", 1ull << 40);
  w.SetRaw("i64", GgufType::kI64, Encode<int64_t>(-(1ll << 40)));
  w.SetRaw("f64", GgufType::kF64, Encode<double>(0.25));
  w.SetStringArray("arr.str", {"a", "", "ccc"});
  w.SetF32Array("arr.f32", {1.0f, -2.0f});
  w.SetI32Array("arr.i32", {3, -4, 5});
  // An array of arrays (allowed by the spec, skipped by the reader).
  std::string nested = Encode<uint32_t>(9) + Encode<uint64_t>(2);
  for (int k = 0; k < 2; ++k)
    nested += Encode<uint32_t>(4) + Encode<uint64_t>(1) + Encode<uint32_t>(k);
  w.SetRaw("arr.nested", GgufType::kArray, nested);
  const std::string s = w.Serialize();
  GgufFile g = ParseString(s);
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(*g.GetInt("u8"), 200);
  EXPECT_EQ(*g.GetInt("i8"), -100);
  EXPECT_EQ(*g.GetInt("u16"), 60000);
  EXPECT_EQ(*g.GetInt("i16"), -30000);
  EXPECT_EQ(*g.GetInt("u32"), 4000000000ll);
  EXPECT_EQ(*g.GetInt("i32"), -2000000000);
  EXPECT_EQ(*g.GetFloat("f32"), 1.5);
  EXPECT_EQ(*g.GetBool("bool"), true);
  EXPECT_EQ(*g.GetString("str"), "h\xC3\xA9llo");
  EXPECT_EQ(*g.GetInt("u64"), 1ll << 40);
  EXPECT_EQ(*g.GetInt("i64"), -(1ll << 40));
  EXPECT_EQ(*g.GetFloat("f64"), 0.25);
  ASSERT_NE(g.GetStringArray("arr.str"), nullptr);
  EXPECT_EQ(g.GetStringArray("arr.str")->size(), 3u);
  EXPECT_EQ((*g.GetStringArray("arr.str"))[2], "ccc");
  EXPECT_EQ(g.GetFloatArray("arr.f32"), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(g.GetIntArray("arr.i32"), (std::vector<int64_t>{3, -4, 5}));
  EXPECT_EQ(g.Find("arr.nested")->count, 2u);
  EXPECT_FALSE(g.GetInt("missing").has_value());
  EXPECT_THROW(g.GetString("u32"), Error);  // wrong type is an error, not a silent default
}

TEST(Gguf, TensorsAreZeroCopyAndAligned) {
  const std::string s = SmallFile();
  GgufFile g = ParseString(s);
  ASSERT_EQ(g.tensors().size(), 2u);
  const GgufTensor* t = g.FindTensor("t0");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->ne[0], 64);
  EXPECT_EQ(t->ne[1], 2);
  EXPECT_EQ(t->nbytes, 64u * 2 * 4);
  EXPECT_GE(t->data, reinterpret_cast<const uint8_t*>(s.data()));
  EXPECT_LT(t->data, reinterpret_cast<const uint8_t*>(s.data()) + s.size());
  EXPECT_EQ((t->data - reinterpret_cast<const uint8_t*>(s.data())) % 32, 0);
  float v;
  std::memcpy(&v, t->data + 4 * 65, 4);
  EXPECT_EQ(v, 65.0f);
}

TEST(Gguf, CustomAlignmentIsHonoured) {
  GgufWriter w(64);
  std::vector<float> d(32, 1.0f);
  w.AddTensorF32("a", {32}, GgmlType::kF32, d.data());
  w.AddTensorF32("b", {32}, GgmlType::kF16, d.data());
  const std::string s = w.Serialize();
  GgufFile g = ParseString(s);
  EXPECT_EQ(g.alignment(), 64u);
  EXPECT_EQ(g.FindTensor("b")->offset % 64, 0u);
}

// A writer that spills its tensors to a scratch file writes the same bytes as one that keeps
// them in memory, and removes the scratch file.
TEST(Gguf, SpilledWriterWritesTheSameFile) {
  for (uint32_t align : {32u, 64u}) {
    GgufWriter mem(align), spilled(align);
    const std::string scratch = test::TempPath("spill.part"), out = test::TempPath("spill.gguf");
    spilled.SpillTo(scratch);
    std::vector<float> d(96 * 5);
    for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<float>(i % 17) - 8;
    for (GgufWriter* w : {&mem, &spilled}) {
      w->SetString("general.architecture", "llama");
      w->AddTensorF32("a", {96, 5}, GgmlType::kQ8_0, d.data());
      w->AddTensorF32("b", {7}, GgmlType::kF32, d.data());  // 28 bytes: padding follows
      w->AddTensorF32("c", {32, 3}, GgmlType::kQ4_0, d.data());
    }
    spilled.Write(out);
    std::FILE* f = std::fopen(out.c_str(), "rb");
    ASSERT_NE(f, nullptr);
    std::string got;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) got.append(buf, n);
    std::fclose(f);
    EXPECT_EQ(got, mem.Serialize()) << "alignment " << align;
    EXPECT_THROW(spilled.Serialize(), Error);
    std::remove(out.c_str());
  }
}

// Offsets into SmallFile(), located by searching for the bytes that follow.
size_t Find(const std::string& s, const std::string& what, size_t from = 0) {
  const size_t p = s.find(what, from);
  EXPECT_NE(p, std::string::npos) << what;
  return p;
}

template <class T>
void Poke(std::string* s, size_t off, T v) {
  std::memcpy(s->data() + off, &v, sizeof(T));
}

struct Corruption {
  const char* name;
  std::function<void(std::string*)> mutate;
  const char* expect;  // substring of the error message
};

TEST(Gguf, CorruptedFilesAreRejectedWithClearErrors) {
  const std::string good = SmallFile();
  // Layout anchors: tensor info of "t0": len(8) "t0" n_dims(4) dims(8*2) type(4) offset(8).
  const size_t t0 = Find(good, std::string("\x02\0\0\0\0\0\0\0t0", 10));
  const size_t t0_ndims = t0 + 10, t0_dim0 = t0_ndims + 4, t0_dim1 = t0_dim0 + 8,
               t0_type = t0_dim1 + 8, t0_off = t0_type + 4;
  const size_t t1 = Find(good, std::string("\x02\0\0\0\0\0\0\0t1", 10));
  const size_t t1_off = t1 + 10 + 4 + 8 + 4;
  const size_t key_u32 = Find(good, "a.u32") - 8;
  const size_t u32_type = key_u32 + 8 + 5;
  const size_t arch_val_len = Find(good, "general.architecture") + 20 + 4;

  std::vector<Corruption> cases = {
      {"empty file", [](std::string* s) { s->clear(); }, "too small"},
      {"bad magic", [](std::string* s) { (*s)[0] = 'X'; }, "bad magic"},
      {"version 1", [](std::string* s) { Poke<uint32_t>(s, 4, 1); }, "version 1"},
      {"version 99", [](std::string* s) { Poke<uint32_t>(s, 4, 99); }, "unsupported version"},
      {"huge tensor count", [](std::string* s) { Poke<uint64_t>(s, 8, 1ull << 60); },
       "tensor count"},
      {"huge metadata count", [](std::string* s) { Poke<uint64_t>(s, 16, 1ull << 60); },
       "metadata count"},
      {"truncated header", [](std::string* s) { s->resize(30); }, "impossible"},
      {"truncated in tensor infos", [&](std::string* s) { s->resize(t0_type); }, "truncated"},
      {"truncated tensor data", [](std::string* s) { s->resize(s->size() - 40); }, "past the end"},
      {"key length past end", [&](std::string* s) { Poke<uint64_t>(s, key_u32, 1ull << 40); },
       "truncated"},
      {"string length past end",
       [&](std::string* s) { Poke<uint64_t>(s, arch_val_len, 1ull << 50); }, "truncated"},
      {"unknown value type", [&](std::string* s) { Poke<uint32_t>(s, u32_type, 77); },
       "unknown value type"},
      {"zero dimensions", [&](std::string* s) { Poke<uint32_t>(s, t0_ndims, 0); }, "dimensions"},
      {"five dimensions", [&](std::string* s) { Poke<uint32_t>(s, t0_ndims, 5); }, "dimensions"},
      {"zero-sized dimension", [&](std::string* s) { Poke<uint64_t>(s, t0_dim1, 0); },
       "invalid size"},
      {"negative dimension", [&](std::string* s) { Poke<uint64_t>(s, t0_dim1, ~0ull); },
       "invalid size"},
      {"element count overflow",
       [&](std::string* s) {
         Poke<uint64_t>(s, t0_dim0, 1ull << 40);
         Poke<uint64_t>(s, t0_dim1, 1ull << 40);
       },
       "overflows"},
      {"tensor larger than file", [&](std::string* s) { Poke<uint64_t>(s, t0_dim1, 1ull << 30); },
       "past the end"},
      {"unknown tensor type", [&](std::string* s) { Poke<uint32_t>(s, t0_type, 123); },
       "unknown type"},
      {"row not a block multiple",
       [&](std::string* s) {
         Poke<uint32_t>(s, t0_type, 2);
         Poke<uint64_t>(s, t0_dim0, 48);
       },
       "block size"},
      {"misaligned offset", [&](std::string* s) { Poke<uint64_t>(s, t0_off, 4); }, "not aligned"},
      {"offset past end", [&](std::string* s) { Poke<uint64_t>(s, t1_off, 1ull << 40); },
       "past the end"},
      {"overlapping tensors", [&](std::string* s) { Poke<uint64_t>(s, t1_off, 0); }, "overlap"},
      {"duplicate tensor name", [&](std::string* s) { (*s)[t1 + 9] = '0'; }, "duplicate tensor"},
  };
  int rejected = 0;
  for (const auto& c : cases) {
    std::string s = good;
    c.mutate(&s);
    try {
      ParseString(s);
      ADD_FAILURE() << c.name << ": accepted";
    } catch (const Error& e) {
      ++rejected;
      EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos)
          << c.name << ": " << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
    }
  }
  EXPECT_GE(rejected, 20);
}

TEST(Gguf, DuplicateKeysAreRejected) {
  GgufWriter w;
  w.SetRaw("k", GgufType::kU8, Encode<uint8_t>(1));
  w.SetRaw("j", GgufType::kU8, Encode<uint8_t>(1));
  std::string s = w.Serialize();
  s[s.find('j')] = 'k';
  EXPECT_THROW(ParseString(s), Error);
}

// Every truncation of a real model file must fail cleanly (never crash or over-read).
TEST(Gguf, EveryTruncationOfARealHeaderFailsCleanly) {
  const std::string real = test::ReadFile(test::ModelPath("stories260K.gguf"));
  ASSERT_GT(real.size(), 1000u);
  GgufFile full = ParseString(real);
  const size_t header = static_cast<size_t>(full.data_offset());
  for (size_t n = 0; n < header; n += 7) {
    const std::string cut = real.substr(0, n);  // heap copy: ASan sees any over-read
    EXPECT_THROW(ParseString(cut), Error) << n;
  }
}

TEST(Gguf, ModelLevelChecksNameTheProblem) {
  // A structurally valid GGUF whose tensors do not fit the declared architecture.
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetU32("llama.context_length", 64);
  w.SetU32("llama.embedding_length", 32);
  w.SetU32("llama.block_count", 1);
  w.SetU32("llama.feed_forward_length", 64);
  w.SetU32("llama.attention.head_count", 4);
  std::vector<float> d(32 * 100, 0.5f);
  w.AddTensorF32("token_embd.weight", {32, 100}, GgmlType::kF32, d.data());
  const std::string path = test::TempPath("bad_model.gguf");
  w.Write(path);
  try {
    LoadModel(path);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("output_norm.weight"), std::string::npos) << e.what();
  }
  // Mixtures of experts whose metadata and tensors disagree: one error naming the tensor.
  const struct {
    const char* key;
    uint32_t value;
    const char* names;
  } moe_cases[] = {
      {"qwen3moe.expert_count", 6, "'blk.0.ffn_gate_inp.weight' has shape [64, 8"},  // router
      {"qwen3moe.expert_feed_forward_length", 32, "'blk.0.ffn_gate_exps.weight' has shape"},
      {"qwen3moe.expert_used_count", 9, "9 experts used per token of 8 experts"},
      {"qwen3moe.expert_used_count", 0, "0 experts used per token"},
      {"qwen3moe.expert_count", 0, "2 experts used per token but the model has no experts"},
  };
  for (const auto& c : moe_cases) {
    GgufWriter m;
    BuildSyntheticModel(SynthPreset("tiny-moe"), &m);
    m.SetU32(c.key, c.value);
    const std::string mp = test::TempPath("bad_moe.gguf");
    m.Write(mp);
    try {
      LoadModel(mp);
      ADD_FAILURE() << c.key << " = " << c.value << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.names), std::string::npos) << e.what();
    }
  }
  GgufWriter w2;
  w2.SetString("general.architecture", "gpt-neo-unknown");
  const std::string path2 = test::TempPath("bad_arch.gguf");
  w2.Write(path2);
  try {
    LoadModel(path2);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported architecture"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace paddock
