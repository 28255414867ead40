// Encoders (BERT, NomicBERT, a BERT reranker): WordPiece tokenization, embeddings and rerank
// scores against llama.cpp's own outputs for the same synthetic files (goldens taken with
// llama.cpp c392e50's llama-tokenize, llama-embedding and llama-server /v1/rerank on the files
// `paddock synth --shape tiny-bert | tiny-nomic | tiny-reranker` writes), on every kernel ISA
// this CPU runs; packed steps equal one input at a time; what an encoder refuses.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/cpu.h"
#include "model/weights.h"
#include "paddock/engine.h"
#include "paddock/error.h"
#include "paddock/service.h"
#include "synth/synth.h"
#include "test_util.h"

namespace paddock {
namespace {

// The file of a synthetic shape, written once per test run.
const std::string& Synth(const std::string& shape) {
  static std::map<std::string, std::string> written;
  auto [it, fresh] = written.try_emplace(shape, test::TempPath("enc-" + shape + ".gguf"));
  if (fresh) WriteSyntheticModel(SynthPreset(shape), it->second);
  return it->second;
}
const std::string& TinyBert() {
  return Synth("tiny-bert");
}
const std::string& TinyNomic() {
  return Synth("tiny-nomic");
}
const std::string& TinyXlmr() {
  return Synth("tiny-xlmr");
}
const std::string& TinyReranker() {
  return Synth("tiny-reranker");
}

std::unique_ptr<Service> Serve(const std::string& path, const std::string& isa = "auto",
                               bool bf16 = false) {
  EngineOptions eo;
  eo.model_path = path;
  eo.threads = 2;
  eo.isa = isa;
  eo.encoder_bf16 = bf16;
  return Service::Create(Engine::Create(eo), ServiceOptions());
}

double Cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    d += static_cast<double>(a[i]) * b[i];
    na += static_cast<double>(a[i]) * a[i];
    nb += static_cast<double>(b[i]) * b[i];
  }
  return d / std::sqrt(na * nb);
}

std::vector<std::string> Isas() {  // every kernel ISA this CPU runs
  std::vector<std::string> isas;
  for (int i = 0; i <= static_cast<int>(DetectIsa()); ++i)
    isas.push_back(IsaName(static_cast<Isa>(i)));
  return isas;
}

TEST(Encoder, WordPieceMatchesLlamaCppOnTheSyntheticVocabulary) {
  auto tok = LoadTokenizer(TinyBert());
  ASSERT_TRUE(tok->wordpiece());
  const std::vector<std::pair<std::string, std::vector<int32_t>>> cases = {
      {"Hello world", {584, 548}},
      {" Hello, World!", {584, 126, 548, 104}},
      {"The capital of France is Paris.", {434, 614, 436, 616, 444, 612, 130}},
      {"na\u00efve caf\u00e9 F\u00fchrer r\u00e9sum\u00e9",
       {1286, 1071, 189, 728, 887, 918, 1017, 625, 1496, 1581, 1243}},
      {"\u4f60\u597d\u4e16\u754c and \u4e00\u4e2a", {100, 100, 392, 100, 438, 370, 412}},
      {"\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440",
       {336, 339, 323, 311, 317, 343, 126, 330, 323, 339}},
      {"don't stop-believing (1999) $5.00 #tag @me",
       {808, 207, 116, 218, 1578, 1365, 128, 478, 1201, 869,  621, 118, 136, 153,
        153, 153, 120, 110, 144,  130,  134, 135, 108,  1592, 193, 166, 1242}},
      {"tab\tnew\nline  spaces", {1592, 183, 498, 1200, 1295, 1570, 639, 633}},
      {"supercalifragilistic xyzzy qqqq",
       {1580, 1393, 1493, 657, 1045, 1489, 947, 1201, 1579, 1039, 1844, 1951, 229, 1468, 1469}},
      {"emoji \U0001F999 here", {854, 1355, 197, 100, 508, 189}},
      {"ALL CAPS TEXT", {522, 728, 1421, 1600, 1835}},
      {"ctrl\x07"
       "char \u200bzero",
       {766, 1511, 743, 667, 1908, 1517}},
  };
  for (const auto& [text, ids] : cases) EXPECT_EQ(tok->Encode(text, false), ids) << text;
  // Specials added: [CLS] text [SEP]; an empty text is the two alone.
  EXPECT_EQ(tok->Encode("Hello world", true), (std::vector<int32_t>{101, 584, 548, 102}));
  EXPECT_EQ(tok->Encode("", true), (std::vector<int32_t>{101, 102}));
  // Invalid UTF-8 never throws: its bytes vanish as U+FFFD does.
  EXPECT_EQ(tok->Encode("hello\xff\xfe world", false), (std::vector<int32_t>{584, 548}));
}

// XLM-RoBERTa's Unigram (tiny-xlmr: its precompiled character map maps fullwidth letters, a
// ligature, a circled digit, the trademark sign and two spaces; extra whitespace removed).
TEST(Encoder, UnigramMatchesLlamaCppOnTheSyntheticVocabulary) {
  auto tok = LoadTokenizer(TinyXlmr());
  const std::vector<std::pair<std::string, std::vector<int32_t>>> cases = {
      {"Hello world", {2913, 753, 1113, 448}},
      {"  Hello,   World!  ", {2913, 753, 1113, 27, 2943, 381, 1091, 5}},
      {"The capital of France is Paris.",
       {2937, 891, 514, 336, 2909, 115, 2531, 89, 344, 2929, 567, 345, 31}},
      {"na\u00efve caf\u00e9 F\u00fchrer", {1186, 173, 1601, 84, 545, 161, 2909, 199, 917, 525}},
      {"\uff21\uff42 \ufb01ne \u2460 \u2122 x\u00a0y\u3000z\uff0cw",
       {2899, 83, 794, 1195, 36, 2937, 2924, 126, 128, 130, 27, 125}},
      {"\u4f60\u597d\u4e16\u754c and \u4e00\u4e2a", {3, 338, 270, 3}},
      {"don't stop-believing (1999) $5.00", {86, 353, 17, 119, 1478, 1265, 29, 379, 1101, 769, 521,
                                             18, 37,  53, 53,  53,   21,   10, 45,  31,   35,  35}},
      {"tab\tnew\nline", {118, 537, 3, 399, 3, 1101, 1195}},
      {"supercalifragilistic xyzzy qqqq",
       {1480, 1293, 1393, 2441, 813, 2181, 1101, 1479, 939, 126, 1799, 1849, 1368, 1369}},
      {"emoji \U0001F999 here", {754, 1255, 97, 3, 408, 89}},
      {"<mask> token", {2999, 340, 101, 757}},
      {"a</s>b", {80, 2, 82}},
      {"\u00a0\u00a0lead", {1092, 541}},
      {"\uff21\uff21\uff21 \ufb01\ufb01", {2899, 2900, 2900, 794, 795}},
  };
  for (const auto& [text, ids] : cases) EXPECT_EQ(tok->Encode(text, false, true), ids) << text;
  // <s> text </s>, as the vocabulary asks; invalid UTF-8 is U+FFFD (unknown), never a throw.
  EXPECT_EQ(tok->Encode("Hello world", true), (std::vector<int32_t>{0, 2913, 753, 1113, 448, 2}));
  EXPECT_EQ(tok->Encode("\xff", false), (std::vector<int32_t>{3}));
}

// llama-embedding --pooling cls (tiny-bert) / mean (tiny-nomic) --embd-normalize 2.
const std::vector<float> kBertCls[2] = {
    {
        -0.124780f, -0.008303f, -0.111875f, 0.173900f,  -0.165867f, -0.020817f, 0.132993f,
        0.070564f,  0.102666f,  -0.321946f, -0.030054f, 0.027091f,  0.053193f,  -0.156868f,
        -0.025595f, 0.178453f,  0.019296f,  0.133911f,  -0.080927f, -0.226586f, -0.166378f,
        0.090325f,  0.108263f,  0.030415f,  -0.121651f, -0.082578f, 0.016767f,  0.002491f,
        -0.130980f, 0.115597f,  0.095147f,  -0.037709f, 0.176896f,  0.025480f,  -0.143081f,
        -0.058149f, -0.163256f, 0.030369f,  0.050783f,  0.066539f,  0.166452f,  0.099020f,
        -0.168308f, -0.151388f, -0.045776f, -0.025715f, -0.033565f, -0.042958f, 0.123841f,
        -0.184771f, -0.092887f, 0.179889f,  0.128307f,  0.252720f,  -0.057973f, 0.001495f,
        0.153438f,  -0.247465f, 0.148969f,  0.045011f,  0.028290f,  0.162587f,  -0.167114f,
        0.066825f,
    },
    {
        -0.127309f, 0.050162f,  -0.162361f, 0.114760f,  -0.319846f, 0.015422f,  0.203955f,
        0.104879f,  0.031384f,  -0.101964f, -0.020331f, 0.056082f,  0.020810f,  -0.152013f,
        -0.000577f, 0.128654f,  0.007788f,  -0.014811f, 0.009876f,  -0.286087f, -0.105116f,
        0.176283f,  0.062591f,  0.061799f,  -0.236924f, -0.056235f, 0.014811f,  0.078608f,
        -0.141865f, 0.053088f,  0.087777f,  -0.113150f, 0.262917f,  -0.039184f, -0.077699f,
        -0.197004f, -0.084109f, 0.107859f,  0.119216f,  -0.077360f, 0.142832f,  0.149061f,
        -0.076977f, -0.090568f, -0.039090f, 0.019897f,  -0.060523f, 0.062543f,  0.073079f,
        -0.228893f, -0.045752f, 0.169951f,  0.146728f,  0.118542f,  -0.039792f, -0.013581f,
        0.119046f,  -0.194214f, 0.086342f,  0.071509f,  0.039330f,  0.135680f,  -0.231519f,
        0.074902f,
    }};
const std::vector<float> kNomicMean[2] = {
    {
        -0.192072f, -0.003658f, 0.126499f,  -0.304645f, 0.122185f,  -0.090187f, -0.029352f,
        0.052385f,  0.175006f,  0.034123f,  0.000092f,  0.287670f,  -0.109404f, -0.091616f,
        0.005898f,  -0.056680f, -0.041334f, -0.102337f, 0.057045f,  -0.013104f, -0.147307f,
        0.162431f,  -0.011599f, -0.004833f, -0.069909f, 0.129873f,  0.057840f,  -0.001893f,
        -0.071878f, 0.060687f,  -0.015794f, 0.136720f,  -0.054743f, -0.007228f, -0.140023f,
        0.115567f,  0.067852f,  -0.170382f, 0.025116f,  -0.105767f, 0.209364f,  0.067822f,
        -0.291138f, 0.012413f,  -0.028630f, 0.013588f,  -0.304478f, 0.212300f,  0.188052f,
        0.197003f,  -0.075237f, -0.083615f, 0.000778f,  0.005083f,  -0.097978f, -0.083782f,
        -0.007253f, -0.023223f, -0.005849f, -0.107988f, 0.069812f,  0.271547f,  -0.076288f,
        0.137600f,
    },
    {
        -0.096371f, 0.075937f,  0.068055f,  -0.038970f, 0.102644f,  -0.017571f, 0.118822f,
        0.092735f,  0.272285f,  -0.042977f, -0.074421f, 0.189877f,  -0.059006f, -0.163576f,
        -0.102293f, 0.053410f,  -0.178202f, -0.099820f, 0.011728f,  -0.086063f, 0.005499f,
        0.085647f,  -0.044574f, 0.094984f,  -0.024496f, 0.157815f,  -0.009787f, -0.025309f,
        -0.056632f, -0.124278f, -0.015744f, 0.292663f,  -0.161474f, -0.085577f, -0.208728f,
        0.190953f,  0.012092f,  -0.159213f, 0.062200f,  0.085468f,  0.204643f,  -0.032332f,
        0.077328f,  -0.089531f, 0.008109f,  -0.014320f, -0.312416f, 0.126079f,  0.294567f,
        0.131820f,  -0.079079f, 0.046785f,  -0.032554f, -0.167657f, -0.194332f, -0.094581f,
        -0.098051f, 0.074703f,  -0.040033f, -0.123846f, -0.077347f, 0.144892f,  0.096046f,
        0.089874f,
    }};
const char* kTexts[2] = {"The capital of France is Paris.",
                         "na\u00efve caf\u00e9 \u4f60\u597d, "
                         "\u041f\u0440\u0438\u0432\u0435\u0442!"};

// The file's F16 weights (the default): cosine 0.99999; as BF16 (--encoder-bf16, where the
// kernel table has the BF16 dot product): 0.9999.
TEST(Encoder, EmbeddingsMatchLlamaCppOnEveryIsa) {
  for (const std::string& isa : Isas()) {
    for (int m = 0; m < 4; ++m) {
      const bool bf16 = m >= 2;
      auto svc = Serve(m % 2 == 0 ? TinyBert() : TinyNomic(), isa, bf16);
      const Engine& e = svc->engine();
      EXPECT_EQ(e.info().kind, ModelKind::kEmbedding);
      std::vector<std::vector<int32_t>> inputs;
      for (const char* t : kTexts) inputs.push_back(e.Tokenize(t, true));
      const auto v =
          svc->Embed(inputs, m % 2 == 0 ? Service::Pooling::kCls : Service::Pooling::kMean);
      for (int i = 0; i < 2; ++i) {
        const auto& want = m % 2 == 0 ? kBertCls[i] : kNomicMean[i];
        ASSERT_EQ(v[static_cast<size_t>(i)].size(), want.size());
        EXPECT_GE(Cosine(v[static_cast<size_t>(i)], want), bf16 ? 0.9999 : 0.99999)
            << isa << (m % 2 == 0 ? " bert" : " nomic-bert") << (bf16 ? " bf16" : "") << " text "
            << i;
      }
    }
  }
}

TEST(Encoder, RerankScoresMatchLlamaServer) {
  // llama-server --rerank /v1/rerank: query "what is the capital of france".
  const char* docs[3] = {"paris is the capital of france", "the river flows", "hello world"};
  const float want[3] = {0.32856637f, 0.22510940f, 0.16738707f};
  auto svc = Serve(TinyReranker());
  const Engine& e = svc->engine();
  EXPECT_EQ(e.info().kind, ModelKind::kRerank);
  const auto q = e.Tokenize("what is the capital of france", false);
  std::vector<std::vector<int32_t>> pairs;  // [CLS] q [SEP] [SEP] d [SEP]
  for (const char* d : docs) pairs.push_back(e.RerankInput(q, e.Tokenize(d, false)));
  EXPECT_EQ(pairs[2],
            (std::vector<int32_t>{101, 590, 444, 434, 614, 436, 616, 102, 102, 584, 548, 102}));
  const auto s = svc->Embed(pairs, Service::Pooling::kRank);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(s[static_cast<size_t>(i)].size(), 1u);
    EXPECT_NEAR(s[static_cast<size_t>(i)][0], want[i], 1e-3) << docs[i];
  }
  // Not embeddings: a reranker says what it gives.
  try {
    svc->Embed({pairs[0]}, Service::Pooling::kMean);
    FAIL() << "a reranker gave embeddings";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("reranker"), std::string::npos) << err.what();
  }
}

// A pair is formed as llama.cpp forms it: [BOS] q [EOS] [SEP] d [EOS], each by the vocabulary's
// add_bos / add_eos / add_sep flag (WordPiece's defaults: [CLS] and [SEP], no EOS). The same
// weights without the add-EOS flag: [CLS] q [SEP] d, and other scores than with it.
TEST(Encoder, RerankPairsFollowTheVocabularysFlags) {
  auto with = Serve(TinyReranker());
  auto without = Serve(Synth("tiny-reranker-noeos"));
  const Engine& e = without->engine();
  const auto q = e.Tokenize("what is the capital of france", false);
  const auto d = e.Tokenize("hello world", false);
  EXPECT_EQ(e.RerankInput(q, d),
            (std::vector<int32_t>{101, 590, 444, 434, 614, 436, 616, 102, 584, 548}));
  EXPECT_EQ(with->engine().RerankInput(q, d),
            (std::vector<int32_t>{101, 590, 444, 434, 614, 436, 616, 102, 102, 584, 548, 102}));
  const float a = with->Embed({with->engine().RerankInput(q, d)}, Service::Pooling::kRank)[0][0];
  const float b = without->Embed({e.RerankInput(q, d)}, Service::Pooling::kRank)[0][0];
  EXPECT_NEAR(a, 0.16738707f, 1e-3);  // llama-server's score for this pair (the test above)
  EXPECT_GT(std::fabs(a - b), 1e-4);  // the layout reaches the score
  // llama-server --rerank on the file without the flag (llama.cpp built here from the
  // unslothai/llama.cpp snapshot d32676d): the same query, its three documents, 37 prompt tokens.
  const char* docs[3] = {"paris is the capital of france", "the river flows", "hello world"};
  const float want[3] = {0.43071917f, 0.28018725f, 0.26659787f};
  std::vector<std::vector<int32_t>> pairs;
  int tokens = 0;
  for (const char* doc : docs) {
    pairs.push_back(e.RerankInput(q, e.Tokenize(doc, false)));
    tokens += static_cast<int>(pairs.back().size());
  }
  EXPECT_EQ(tokens, 37);
  const auto s = without->Embed(pairs, Service::Pooling::kRank);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(s[static_cast<size_t>(i)][0], want[i], 1e-3) << docs[i];
}

TEST(Encoder, XlmrRerankScoresMatchLlamaServer) {
  // llama-server --rerank /v1/rerank on tiny-xlmr: <s> query </s></s> document </s>.
  const char* docs[4] = {"Paris is the capital of France.", "The river flows",
                         "\uff21\uff42 \ufb01ne", "na\u00efve caf\u00e9"};
  const float want[4] = {0.28989977f, 0.24650425f, 0.35455778f, 0.43977159f};
  auto svc = Serve(TinyXlmr());
  const Engine& e = svc->engine();
  const auto q = e.Tokenize("What is the capital of France?", false);
  std::vector<std::vector<int32_t>> pairs;
  int tokens = 0;
  for (const char* d : docs) {
    pairs.push_back(e.RerankInput(q, e.Tokenize(d, false)));
    tokens += static_cast<int>(pairs.back().size());
  }
  EXPECT_EQ(tokens, 92);  // llama-server's usage.prompt_tokens for the same request
  const auto s = svc->Embed(pairs, Service::Pooling::kRank);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(s[static_cast<size_t>(i)][0], want[i], 1e-3) << docs[i];
}

TEST(Encoder, PackedStepsEqualOneInputAtATime) {
  auto svc = Serve(TinyBert());
  std::vector<std::vector<int32_t>> inputs;
  for (int i = 0; i < 40; ++i) {  // lengths 3..120: several steps, tile remainders
    std::vector<int32_t> t = {101};
    for (int k = 0; k < 1 + (i * 37) % 118; ++k) t.push_back(110 + (i * 7 + k * 13) % 1900);
    t.push_back(102);
    inputs.push_back(t);
  }
  for (auto pooling : {Service::Pooling::kMean, Service::Pooling::kCls, Service::Pooling::kLast}) {
    const auto all = svc->Embed(inputs, pooling);
    for (size_t i = 0; i < inputs.size(); i += 7) {
      const auto one = svc->Embed({inputs[i]}, pooling);
      EXPECT_EQ(one[0], all[i]) << "input " << i;
    }
  }
}

TEST(Encoder, RefusesWhatItDoesNotDo) {
  auto svc = Serve(TinyBert());
  Engine& e = const_cast<Engine&>(svc->engine());
  try {
    e.Generate("hello", test::Greedy(4));
    FAIL() << "an encoder generated text";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("embedding model"), std::string::npos) << err.what();
  }
  EXPECT_THROW(svc->Embed({{}}, Service::Pooling::kMean), Error);  // empty input
  EXPECT_THROW(svc->Embed({std::vector<int32_t>(129, 200)}, Service::Pooling::kMean),
               Error);  // over the context of 128
  EXPECT_THROW(svc->Embed({{101, 102}}, Service::Pooling::kRank), Error);  // no head
  EngineOptions eo;
  eo.model_path = TinyBert();
  eo.draft_model = TinyBert();
  eo.spec = "draft";
  EXPECT_THROW(Engine::Create(eo), Error);
}

}  // namespace
}  // namespace paddock
