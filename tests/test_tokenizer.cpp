// SentencePiece BPE: llama.cpp's test vectors exactly, tokenizer.bin == GGUF vocabulary, and
// decoding that reproduces the text and streams whole UTF-8 characters.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "base/utf8.h"
#include "model/tokenizer.h"
#include "model/weights.h"
#include "paddock/error.h"
#include "test_util.h"

namespace paddock {
namespace {

struct Vectors {
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> ids;
};

Vectors LoadVectorsAt(const std::string& path) {
  Vectors v;
  const std::string inp = test::ReadFile(path + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  size_t start = 0;
  for (size_t p; (p = inp.find(sep, start)) != std::string::npos; start = p + sep.size()) {
    v.texts.push_back(inp.substr(start, p - start));
  }
  std::istringstream out(test::ReadFile(path + ".out"));
  std::string line;
  while (std::getline(out, line)) {
    std::istringstream ls(line);
    std::vector<int32_t> ids;
    int32_t id;
    while (ls >> id) ids.push_back(id);
    v.ids.push_back(ids);
  }
  return v;
}

Vectors LoadVectors(const std::string& stem) {
  return LoadVectorsAt(test::ModelPath(stem));
}

std::string DecodeAll(const Tokenizer& t, const std::vector<int32_t>& ids) {
  std::string out;
  Utf8Stream u;
  int prev = -1;
  for (int32_t id : ids) {
    u.Feed(t.Decode(prev, id), &out);
    prev = id;
  }
  u.Flush(&out);
  return out;
}

TEST(Tokenizer, LlamaSpmVectorsExactly) {
  const Vectors v = LoadVectors("ggml-vocab-llama-spm.gguf");
  ASSERT_EQ(v.texts.size(), v.ids.size());
  ASSERT_GE(v.texts.size(), 40u);
  auto tok = LoadTokenizer(test::ModelPath("ggml-vocab-llama-spm.gguf"));
  EXPECT_EQ(tok->vocab_size(), 32000);
  for (size_t i = 0; i < v.texts.size(); ++i) {
    EXPECT_EQ(tok->Encode(v.texts[i], false), v.ids[i])
        << "text #" << i << ": '" << v.texts[i] << "'";
  }
}

// llama.cpp's BERT (bge) vocabulary and its test vectors (HF's tokenizer's ids), found where
// PADDOCK_LLAMA_VOCABS names a directory holding them (llama.cpp's models/; not among the
// project's test files: scripts/wordpiece-vectors runs this against a llama.cpp checkout). The
// suite checks WordPiece on every run against llama.cpp's output for the synthetic vocabulary
// (test_model.cpp, Encoder.*).
TEST(Tokenizer, BertWordPieceVectorsExactly) {
  const char* dir = std::getenv("PADDOCK_LLAMA_VOCABS");
  if (dir == nullptr) GTEST_SKIP() << "PADDOCK_LLAMA_VOCABS is not set";
  const std::string path = std::string(dir) + "/ggml-vocab-bert-bge.gguf";
  const Vectors v = LoadVectorsAt(path);
  ASSERT_EQ(v.texts.size(), v.ids.size());
  ASSERT_GE(v.texts.size(), 30u);
  auto tok = LoadTokenizer(path);
  EXPECT_TRUE(tok->wordpiece());
  for (size_t i = 0; i < v.texts.size(); ++i) {
    EXPECT_EQ(tok->Encode(v.texts[i], false), v.ids[i])
        << "text #" << i << ": '" << v.texts[i] << "'";
  }
  // Specials added: [CLS] text [SEP].
  const auto with = tok->Encode("Hello world", true);
  ASSERT_EQ(with.size(), tok->Encode("Hello world", false).size() + 2);
  EXPECT_EQ(with.front(), 101);
  EXPECT_EQ(with.back(), 102);
}

TEST(Tokenizer, DecodeReproducesTheText) {
  const Vectors v = LoadVectors("ggml-vocab-llama-spm.gguf");
  auto tok = LoadTokenizer(test::ModelPath("ggml-vocab-llama-spm.gguf"));
  for (const auto& text : v.texts) {
    EXPECT_EQ(DecodeAll(*tok, tok->Encode(text, true)), text);
  }
}

TEST(Tokenizer, Gpt2ByteLevelBpeVectorsExactly) {
  const Vectors v = LoadVectors("ggml-vocab-gpt-2.gguf");
  ASSERT_EQ(v.texts.size(), v.ids.size());
  ASSERT_GE(v.texts.size(), 40u);
  auto tok = LoadTokenizer(test::ModelPath("ggml-vocab-gpt-2.gguf"));
  EXPECT_EQ(tok->vocab_size(), 50257);
  EXPECT_TRUE(tok->byte_level());
  for (size_t i = 0; i < v.texts.size(); ++i) {
    EXPECT_EQ(tok->Encode(v.texts[i], false), v.ids[i])
        << "text #" << i << ": '" << v.texts[i] << "'";
    // Byte-level BPE is lossless: decoding gives back every byte.
    EXPECT_EQ(DecodeAll(*tok, v.ids[i]), v.texts[i]) << "text #" << i;
  }
}

TEST(Tokenizer, ByteLevelBpeHandlesInvalidUtf8AndSpecials) {
  auto tok = LoadTokenizer(test::ModelPath("ggml-vocab-gpt-2.gguf"));
  // Invalid UTF-8 bytes become their own byte tokens and decode back to the same bytes.
  const std::string bad = std::string("ab\xff\xfe cd\xc3") + "\x28 e";
  std::string back;
  for (int32_t id : tok->Encode(bad, false)) back += tok->Decode(-1, id);
  EXPECT_EQ(back, bad);
  // <|endoftext|> is matched whole only when special tokens are parsed.
  const auto with = tok->Encode("hi<|endoftext|>", false, true);
  ASSERT_FALSE(with.empty());
  EXPECT_EQ(with.back(), 50256);
  const auto without = tok->Encode("hi<|endoftext|>", false, false);
  EXPECT_NE(without.back(), 50256);
  EXPECT_GT(without.size(), 3u);
  EXPECT_TRUE(tok->IsEndOfGeneration(50256));
}

TEST(Tokenizer, TokenizerBinMatchesGgufVocabulary) {
  const Vectors v = LoadVectors("ggml-vocab-llama-spm.gguf");
  auto gguf = LoadTokenizer(test::ModelPath("ggml-vocab-llama-spm.gguf"));
  auto bin = LoadTokenizer(test::ModelPath("tokenizer.bin"));
  ASSERT_EQ(bin->vocab_size(), gguf->vocab_size());
  for (const auto& text : v.texts)
    EXPECT_EQ(bin->Encode(text, true), gguf->Encode(text, true)) << text;

  auto small_bin = LoadTokenizer(test::ModelPath("tok512.bin"));
  auto small_gguf = LoadTokenizer(test::ModelPath("stories260K.gguf"));
  const std::string story = test::ReadFile(test::ModelPath("stories260K.expected_t0.txt"));
  for (const auto& text : v.texts)
    EXPECT_EQ(small_bin->Encode(text, true), small_gguf->Encode(text, true)) << text;
  EXPECT_EQ(small_bin->Encode(story, true), small_gguf->Encode(story, true));
}

TEST(Tokenizer, BosEosAndSpecialTokens) {
  auto tok = LoadTokenizer(test::ModelPath("tokenizer.bin"));
  EXPECT_EQ(tok->bos(), 1);
  EXPECT_EQ(tok->eos(), 2);
  EXPECT_EQ(tok->Encode("", true), (std::vector<int32_t>{1}));
  EXPECT_TRUE(tok->Encode("", false).empty());
  // Without parse_special "</s>" is spelled out; with it, it is the EOS token.
  const auto plain = tok->Encode("a</s>", false, false);
  const auto special = tok->Encode("a</s>", false, true);
  EXPECT_EQ(special.back(), 2);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 2), 0);
  EXPECT_EQ(tok->Decode(0, 2), "");  // control tokens print nothing
}

TEST(Tokenizer, ByteFallbackStreamsWholeCharacters) {
  auto tok = LoadTokenizer(test::ModelPath("tok512.bin"));  // 512 tokens: most non-ASCII is bytes
  const std::string text = "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\xA6\x99";
  const auto ids = tok->Encode(text, true);
  int byte_tokens = 0;
  for (int32_t id : ids) byte_tokens += tok->Attr(id) == TokenAttr::kByte;
  EXPECT_GE(byte_tokens, 4);  // the llama emoji is not in this vocabulary: 4 byte tokens
  // Stream piece by piece: every chunk handed out must be valid, whole UTF-8.
  std::string out;
  Utf8Stream u;
  int prev = -1;
  for (int32_t id : ids) {
    const size_t before = out.size();
    u.Feed(tok->Decode(prev, id), &out);
    prev = id;
    const std::string chunk = out.substr(before);
    for (size_t i = 0; i < chunk.size();) {
      const int len = Utf8SequenceLength(static_cast<uint8_t>(chunk[i]));
      ASSERT_GT(len, 0) << "chunk starts mid-character";
      ASSERT_LE(i + len, chunk.size()) << "chunk ends mid-character";
      i += len;
    }
  }
  EXPECT_EQ(out, text);
}

// Control tokens are parsed in a rendered chat except inside the messages' contents.
TEST(Tokenizer, TextOnlySpansKeepControlTokensAsText) {
  auto tok = LoadTokenizer(test::ModelPath("ggml-vocab-llama-spm.gguf"));
  const std::string text = "</s>a</s>b</s>";  // the middle "</s>" is a user's
  const auto all = tok->Encode(text, false, true);
  EXPECT_EQ(std::count(all.begin(), all.end(), tok->eos()), 3);
  const Tokenizer::Spans user = {{5, 10}};  // "</s>b"
  const auto safe = tok->Encode(text, false, true, &user);
  EXPECT_EQ(std::count(safe.begin(), safe.end(), tok->eos()), 2);
  EXPECT_EQ(safe.front(), tok->eos());
  EXPECT_EQ(safe.back(), tok->eos());
  const Tokenizer::Spans overlap = {{6, 7}};  // any overlap protects the whole match
  const auto part = tok->Encode(text, false, true, &overlap);
  EXPECT_EQ(std::count(part.begin(), part.end(), tok->eos()), 2);
}

// Generated control, unknown and unused tokens are not text by default (as llama.cpp renders
// them without `special`); RenderSpecial(true) shows their stored spelling.
TEST(Tokenizer, ControlAndUnknownTokensAreNotRenderedUnlessAsked) {
  auto tok = LoadTokenizer(test::ModelPath("ggml-vocab-llama-spm.gguf"));
  ASSERT_EQ(tok->Attr(0), TokenAttr::kUnknown);
  ASSERT_EQ(tok->Attr(2), TokenAttr::kControl);
  const int hello = tok->Encode("Hello", false)[0];
  EXPECT_EQ(tok->Decode(hello, 0), "");
  EXPECT_EQ(tok->Decode(hello, 2), "");
  EXPECT_EQ(tok->Decode(-1, hello), "Hello");
  tok->RenderSpecial(true);
  EXPECT_EQ(tok->Decode(hello, 0), "<unk>");
  EXPECT_EQ(tok->Decode(hello, 2), "</s>");
  EXPECT_EQ(tok->Decode(-1, hello), "Hello");
  tok->RenderSpecial(false);
  EXPECT_EQ(tok->Decode(hello, 2), "");
}

}  // namespace
}  // namespace paddock

#include "model/pretokenize.h"

namespace paddock {
namespace {

std::vector<std::string> Pieces(const std::string& pre, const std::string& text) {
  std::vector<std::string_view> v;
  PreTokenizer(pre).Split(text, &v);
  return std::vector<std::string>(v.begin(), v.end());
}

// The pre-tokenizer families split as their reference expressions do.
TEST(PreTokenizer, FamiliesSplitAsTheirExpressions) {
  using V = std::vector<std::string>;
  EXPECT_EQ(Pieces("gpt2", "Hello world's 12345!!  ok"),
            (V{"Hello", " world", "'s", " 12345", "!!", " ", " ok"}));
  EXPECT_EQ(Pieces("llama3", "Hello world's 12345!!\n\nok"),
            (V{"Hello", " world", "'s", " ", "123", "45", "!!\n\n", "ok"}));
  EXPECT_EQ(Pieces("qwen2", "ab 123"), (V{"ab", " ", "1", "2", "3"}));
  EXPECT_EQ(Pieces("starcoder", "x1 22"), (V{"x", "1", " ", "2", "2"}));
  EXPECT_EQ(Pieces("llama3", "Grüße, 世界"), (V{"Grüße", ",", " 世界"}));
  // o200k (gpt-oss): case-aware words keep their contraction; digits in threes.
  EXPECT_EQ(Pieces("gpt-4o", "Hello World's HTTPServer 12345!!\n\nok"),
            (V{"Hello", " World's", " HTTPServer", " ", "123", "45", "!!\n\n", "ok"}));
  // Invalid UTF-8 bytes stand alone; the rest still splits.
  EXPECT_EQ(Pieces("gpt2", std::string("a\xff b")), (V{"a", "\xff", " b"}));
  try {
    PreTokenizer p("no-such-pre");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("llama3"), std::string::npos)
        << e.what();  // lists the known ones
  }
}

// Every pre-tokenizer the README names compiles and splits text back into itself.
TEST(PreTokenizer, EveryKnownNameCompilesAndCoversItsInput) {
  const std::string text = "Hello world's 12345!! Grüße, 世界 ὠώ ῒΐ ΩK\n\nok";
  for (const std::string& name : PreTokenizer::KnownNames()) {
    std::vector<std::string> pieces;
    ASSERT_NO_THROW(pieces = Pieces(name, text)) << name;
    std::string joined;
    for (const auto& p : pieces) joined += p;
    EXPECT_EQ(joined, text) << name;
  }
  // deepseek-llm (it failed to compile before: see pretokenize.cpp) splits as llama.cpp's
  // sequence of expressions does, each splitting the pieces of the one before: letters with a
  // leading space; then its punctuation class, whose range ':-~' also takes the ASCII letters
  // (so a non-ASCII letter inside a word stands apart); then digits.
  using V = std::vector<std::string>;
  EXPECT_EQ(Pieces("deepseek-llm", "Hello w\u00f6rld 123"),
            (V{"Hello", " w", "\u00f6", "rld", " ", "123"}));
}

}  // namespace
}  // namespace paddock
