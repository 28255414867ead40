#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "grammar/cfg.h"
#include "grammar/matcher.h"
#include "model/tokenizer.h"
#include "model/weights.h"
#include "paddock/error.h"
#include "test_util.h"

namespace paddock::grammar {
namespace {

std::shared_ptr<const TokenTrie> TinyVocab(std::vector<std::string> toks) {
  return std::make_shared<TokenTrie>(std::move(toks), std::vector<int32_t>{0});
}

std::shared_ptr<const TokenGrammar> Compile(const std::string& gbnf,
                                            std::shared_ptr<const TokenTrie> trie) {
  return std::make_shared<TokenGrammar>(ParseGbnf(gbnf), std::move(trie));
}

// Whether the whole text is accepted (and the grammar can end there).
bool Matches(const std::string& gbnf, const std::string& text) {
  auto g = Compile(gbnf, TinyVocab({"", "x"}));
  Matcher m(g);
  return m.Accept(text) && m.CanEnd();
}

TEST(Gbnf, LiteralsClassesAndRepetition) {
  const std::string g = R"(root ::= "a" [b-d]+ "e"? tail
tail ::= ( "x" | "yz" ){1,3}  # a comment
)";
  EXPECT_TRUE(Matches(g, "abx"));
  EXPECT_TRUE(Matches(g, "abcdeyzx"));
  EXPECT_TRUE(Matches(g, "abxxx"));
  EXPECT_FALSE(Matches(g, "abxxxx"));  // {1,3}
  EXPECT_FALSE(Matches(g, "ax"));      // + needs one
  EXPECT_FALSE(Matches(g, "abee x"));
  EXPECT_FALSE(Matches(g, "ab"));
}

TEST(Gbnf, NegatedClassesDotAndUtf8) {
  EXPECT_TRUE(Matches(R"(root ::= [^"]* "\"")", "héllo wörld\""));
  EXPECT_FALSE(Matches(R"(root ::= [^"]* "\"")", "a\"b\""));
  EXPECT_TRUE(Matches(R"(root ::= [α-ω]+)", "αβγ"));
  EXPECT_FALSE(Matches(R"(root ::= [α-ω]+)", "αΩ"));
  EXPECT_TRUE(Matches(R"(root ::= . . .)", "a€😀"));
  EXPECT_FALSE(Matches(R"(root ::= .)", "\xff"));          // not UTF-8
  EXPECT_FALSE(Matches(R"(root ::= .)", "\xed\xa0\x80"));  // a surrogate
  EXPECT_TRUE(Matches(R"(root ::= "\x41\u00e9\n")", "Aé\n"));
}

TEST(Gbnf, RulesSpanLinesInParenthesesAndAfterBars) {
  const std::string g = R"(
root ::= item (
    "," item
  )* |
  "none"
item ::= [0-9]
)";
  EXPECT_TRUE(Matches(g, "1,2,3"));
  EXPECT_TRUE(Matches(g, "none"));
  EXPECT_FALSE(Matches(g, "1,"));
}

TEST(Gbnf, ErrorsNameTheProblem) {
  auto err = [](const std::string& g) {
    try {
      ParseGbnf(g);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(err("root ::= foo").find("undefined rule 'foo'"), std::string::npos);
  EXPECT_NE(err("start ::= \"a\"").find("no 'root'"), std::string::npos);
  EXPECT_NE(err("root ::= root \"a\" | \"b\"").find("left-recursive"), std::string::npos);
  EXPECT_NE(err("root ::= (\"a\"?)*").find("left-recursive"), std::string::npos);
  EXPECT_NE(err("root ::= \"a\" root").find("no finite string"), std::string::npos);
  EXPECT_NE(err("root ::= [z-a]").find("line 1, column"), std::string::npos);
  EXPECT_NE(err("root ::= \"abc").find("unterminated"), std::string::npos);
  EXPECT_NE(err("root ::= \"a\"\nroot ::= \"b\"").find("defined twice"), std::string::npos);
  EXPECT_NE(err("root ::= \"a\"{3,1}").find("n < m"), std::string::npos);
  EXPECT_NE(err("root ::= ( \"a\"{1000} ){2000}").find("elements"), std::string::npos);
  EXPECT_NE(err("root ::= \"\\q\"").find("unknown escape"), std::string::npos);
  EXPECT_NE(err("root ::= *").find("without anything"), std::string::npos);
}

TEST(Matcher, TokensMaySplitCharacters) {
  // "é" is C3 A9: two byte tokens, then a multi-character token crossing a character boundary.
  auto g = Compile(R"(root ::= [à-ÿ]+ "!")", TinyVocab({"", "\xc3", "\xa9", "\xa9\xc3\xa8!", "a"}));
  Matcher m(g);
  std::vector<uint64_t> mask(1);
  m.FillMask(mask.data());
  EXPECT_EQ(mask[0], 1ull << 1);  // only the lead byte
  EXPECT_TRUE(m.AcceptToken(1));
  m.FillMask(mask.data());
  EXPECT_EQ(mask[0], (1ull << 2) | (1ull << 3));
  EXPECT_TRUE(m.AcceptToken(3));
  EXPECT_TRUE(m.Done());
  m.FillMask(mask.data());
  EXPECT_EQ(mask[0], 1ull << 0);  // complete: only the end token
}

TEST(Matcher, EndOnlyWhereTheGrammarCanEnd) {
  auto g = Compile(R"(root ::= "ab" "c"?)", TinyVocab({"", "a", "b", "c", "bc"}));
  Matcher m(g);
  std::vector<uint64_t> mask(1);
  ASSERT_TRUE(m.AcceptToken(1));
  m.FillMask(mask.data());
  EXPECT_EQ(mask[0], (1ull << 2) | (1ull << 4));  // no end yet
  ASSERT_TRUE(m.AcceptToken(2));
  m.FillMask(mask.data());
  EXPECT_EQ(mask[0], (1ull << 0) | (1ull << 3));  // end or "c"
  EXPECT_FALSE(m.AcceptToken(2));                 // refused: state unchanged
  EXPECT_TRUE(m.CanEnd());
  EXPECT_FALSE(m.Done());
}

std::unique_ptr<Tokenizer> LoadVocab(const std::string& file) {
  return LoadTokenizer(test::ModelsDir() + "/" + file);
}

std::shared_ptr<const TokenTrie> TrieOf(const Tokenizer& tok) {
  std::vector<std::string> bytes(static_cast<size_t>(tok.vocab_size()));
  const int prev = tok.bos() == 0 ? 1 : 0;
  for (int i = 0; i < tok.vocab_size(); ++i) bytes[static_cast<size_t>(i)] = tok.Decode(prev, i);
  return std::make_shared<TokenTrie>(std::move(bytes), tok.end_of_generation());
}

// The fast mask against the scalar reference (each token checked on its own), along random
// walks through JSON grammars, on the real 32,000- and 50,257-token vocabularies.
void CheckAgainstReference(const std::string& vocab_file, const std::string& gbnf, int steps,
                           uint64_t seed) {
  auto tok = LoadVocab(vocab_file);
  auto trie = TrieOf(*tok);
  auto g = std::make_shared<TokenGrammar>(ParseGbnf(gbnf), trie);
  Matcher m(g);
  std::vector<uint64_t> mask((static_cast<size_t>(trie->n_vocab()) + 63) / 64);
  std::mt19937_64 rng(seed);
  // Under a sanitizer (10-20x slower; the Release stage runs the whole check) fewer steps, and
  // the scalar reference on every 8th token: the fast mask's memory accesses are the same.
  if (test::kSanitized) steps = std::min(steps, 6);
  const int stride = test::kSanitized ? 8 : 1;
  for (int step = 0; step < steps; ++step) {
    m.FillMask(mask.data());
    std::vector<int32_t> allowed;
    for (int id = 0; id < trie->n_vocab(); ++id) {
      const bool fast = Allowed(mask, id);
      if (id % stride == 0)
        ASSERT_EQ(fast, m.AllowsRef(id))
            << vocab_file << " step " << step << " token " << id << " '" << trie->token(id) << "'";
      if (fast) allowed.push_back(id);
    }
    ASSERT_FALSE(allowed.empty()) << "step " << step;
    // Prefer non-end tokens so the walk goes deep; end when only the end is left.
    std::vector<int32_t> text_tokens;
    for (int32_t id : allowed)
      if (!trie->token(id).empty()) text_tokens.push_back(id);
    if (text_tokens.empty()) break;
    const int32_t pick = text_tokens[rng() % text_tokens.size()];
    ASSERT_TRUE(m.AcceptToken(pick));
  }
}

const char* const kPerson = R"({"type": "object", "properties": {
  "name": {"type": "string", "maxLength": 12},
  "age": {"type": "integer", "minimum": 0, "maximum": 150},
  "tags": {"type": "array", "items": {"enum": ["a", "b", "c d"]}, "maxItems": 3},
  "ok": {"type": "boolean"}}, "required": ["name", "age"]})";

TEST(Matcher, MaskEqualsReferenceOnLlamaVocabulary) {
  CheckAgainstReference("ggml-vocab-llama-spm.gguf", JsonObjectGbnf(), 40, 1);
  CheckAgainstReference("ggml-vocab-llama-spm.gguf", JsonSchemaToGbnf(kPerson), 40, 2);
}

TEST(Matcher, MaskEqualsReferenceOnGpt2VocabularyJsonObject) {
  CheckAgainstReference("ggml-vocab-gpt-2.gguf", JsonObjectGbnf(), 40, 3);
}

TEST(Matcher, MaskEqualsReferenceOnGpt2VocabularySchema) {
  CheckAgainstReference("ggml-vocab-gpt-2.gguf", JsonSchemaToGbnf(kPerson), 40, 4);
}

TEST(Matcher, CachedMasksAreReused) {
  auto tok = LoadVocab("ggml-vocab-llama-spm.gguf");
  auto g = std::make_shared<TokenGrammar>(ParseGbnf(R"(root ::= "[" [a-z]* "]")"), TrieOf(*tok));
  Matcher a(g), b(g);
  std::vector<uint64_t> m1((32000 + 63) / 64), m2(m1.size());
  a.FillMask(m1.data());
  b.FillMask(m2.data());
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(g->cache_stats().hits, 1u);
}

// JSON Schema -> GBNF: what the grammar accepts and refuses.
bool SchemaMatches(const std::string& schema, const std::string& text) {
  return Matches(JsonSchemaToGbnf(schema), text);
}

TEST(JsonSchema, ObjectsRequiredAndOptionalProperties) {
  EXPECT_TRUE(SchemaMatches(kPerson, R"({"name": "Ann", "age": 31})"));
  EXPECT_TRUE(SchemaMatches(kPerson, R"({"name":"Ann","age":150,"tags":["a","c d"],"ok":true})"));
  EXPECT_TRUE(SchemaMatches(kPerson, R"({"name": "Ann", "age": 0, "ok": false})"));
  EXPECT_FALSE(SchemaMatches(kPerson, R"({"age": 3, "name": "Ann"})"));  // schema order
  EXPECT_FALSE(SchemaMatches(kPerson, R"({"name": "Ann"})"));            // required
  EXPECT_FALSE(SchemaMatches(kPerson, R"({"name": "Ann", "age": 151})"));
  EXPECT_FALSE(SchemaMatches(kPerson, R"({"name": "Ann", "age": -1})"));
  EXPECT_FALSE(SchemaMatches(kPerson, R"({"name": "Ann", "age": 01})"));
  EXPECT_FALSE(SchemaMatches(kPerson, R"({"name": "Ann", "age": 1, "x": 1})"));
  EXPECT_FALSE(SchemaMatches(kPerson, R"({"name": "Ann", "age": 1, "tags": ["a","b","c d","a"]})"));
  EXPECT_FALSE(SchemaMatches(kPerson, R"({"name": "Annabelle Smith", "age": 1})"));  // maxLength
  EXPECT_FALSE(SchemaMatches(kPerson, R"({"name": "Ann", "age": 1,})"));
}

TEST(JsonSchema, IntegerRanges) {
  const std::string s = R"({"type": "integer", "minimum": -12, "exclusiveMaximum": 305})";
  for (int v = -20; v <= 320; ++v)
    EXPECT_EQ(SchemaMatches(s, std::to_string(v)), v >= -12 && v < 305) << v;
  EXPECT_FALSE(SchemaMatches(s, "-0"));
}

TEST(JsonSchema, RefsAnyOfEnumConstAndFormats) {
  const std::string tree = R"({"$defs": {"node": {"type": "object", "properties": {
      "v": {"anyOf": [{"type": "number"}, {"type": "null"}]},
      "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}},
    "$ref": "#/$defs/node"})";
  EXPECT_TRUE(SchemaMatches(tree, R"({"v": 1.5e3, "kids": [{"v": null}, {"v": -2, "kids": []}]})"));
  EXPECT_FALSE(SchemaMatches(tree, R"({"v": "x"})"));
  EXPECT_TRUE(SchemaMatches(R"({"const": {"a": [1, "x"]}})", R"({"a":[1,"x"]})"));
  EXPECT_TRUE(SchemaMatches(R"({"enum": ["red", 3, null]})", "3"));
  EXPECT_FALSE(SchemaMatches(R"({"enum": ["red", 3, null]})", "\"blue\""));
  EXPECT_TRUE(SchemaMatches(R"({"type": "string", "format": "date"})", "\"2024-02-28\""));
  EXPECT_FALSE(SchemaMatches(R"({"type": "string", "format": "date"})", "\"2024-02-30\""));
  EXPECT_TRUE(
      SchemaMatches(R"({"type": "string", "format": "date-time"})", "\"2024-12-01T10:20:30.5Z\""));
  EXPECT_TRUE(SchemaMatches(R"({"type": ["string", "null"], "minLength": 2})", "null"));
  EXPECT_FALSE(SchemaMatches(R"({"type": ["string", "null"], "minLength": 2})", "\"a\""));
  EXPECT_TRUE(SchemaMatches(R"({"type": "object"})", R"({"any": {"thing": [true]}})"));
  EXPECT_TRUE(SchemaMatches(R"({"type": "object", "additionalProperties": {"type": "integer"}})",
                            R"({"a": 1, "b": 2})"));
  EXPECT_TRUE(SchemaMatches(R"({"type": "string"})", R"("tab\t \u00e9 é")"));
  EXPECT_FALSE(SchemaMatches(R"({"type": "string"})", "\"new\nline\""));
}

TEST(JsonSchema, EnumsAreTries) {
  const std::string s = R"({"enum": ["a", "ab", "abc", "b", "é", "éa", "ê", 1, 12, null,
      {"k": [1]}, "x\"y"]})";
  for (const char* v : {R"("a")", R"("ab")", R"("abc")", R"("b")", R"("é")", R"("éa")", R"("ê")",
                        "1", "12", "null", R"({"k":[1]})", R"("x\"y")"})
    EXPECT_TRUE(SchemaMatches(s, v)) << v;
  for (const char* v : {R"("")", R"("abcd")", R"("ac")", R"("éb")", "123", "2", R"({"k":[2]})"})
    EXPECT_FALSE(SchemaMatches(s, v)) << v;
  // Open alternatives stay few: 30,000 values compile and bind to a vocabulary.
  std::string values;
  std::mt19937 rng(3);
  for (int i = 0; i < 30000; ++i) {
    std::string w;
    for (int n = 4 + static_cast<int>(rng() % 7); n > 0; --n)
      w += static_cast<char>('a' + rng() % 26);
    values += (i ? ",\"" : "\"") + w + "\"";
  }
  auto g = Compile(JsonSchemaToGbnf("{\"enum\": [" + values + "]}"), TinyVocab({"", "a"}));
  EXPECT_GT(g->cfg().alts.size(), 1000u);
}

TEST(JsonSchema, IntegerMultiples) {
  const std::string s = R"({"type": "integer", "multipleOf": 7, "minimum": -30,
      "exclusiveMaximum": 105})";
  for (int v = -120; v <= 250; ++v)
    EXPECT_EQ(SchemaMatches(s, std::to_string(v)), v >= -30 && v < 105 && v % 7 == 0) << v;
  EXPECT_FALSE(SchemaMatches(s, "07"));
  EXPECT_FALSE(SchemaMatches(s, "-0"));
  const std::string open = R"({"type": "integer", "multipleOf": 25})";
  for (long long v : {0LL, 25LL, -50LL, 1000000LL, 123456775LL, 9999999999999975LL})
    EXPECT_TRUE(SchemaMatches(open, std::to_string(v))) << v;
  for (long long v : {5LL, -30LL, 1000001LL, 123456770LL})
    EXPECT_FALSE(SchemaMatches(open, std::to_string(v))) << v;
  // A number's multipleOf p/q: the integer multiples of p are written (1.5 -> 3).
  const std::string num = R"({"type": "number", "multipleOf": 1.5, "minimum": 0, "maximum": 20})";
  for (int v = -5; v <= 25; ++v)
    EXPECT_EQ(SchemaMatches(num, std::to_string(v)), v >= 0 && v <= 20 && v % 3 == 0) << v;
  EXPECT_TRUE(SchemaMatches(R"({"type": "integer", "multipleOf": 0.5})", "-7"));
  EXPECT_TRUE(SchemaMatches(R"({"type": "integer", "multipleOf": 1e2})", "300"));
  EXPECT_FALSE(SchemaMatches(R"({"type": "integer", "multipleOf": 1e2})", "310"));
  // Every multiple of a 2-digit prime below 10^16: one rule per (digits left, remainder).
  EXPECT_TRUE(SchemaMatches(R"({"type": "integer", "multipleOf": 97})", "-9700000000000097"));
}

TEST(JsonSchema, PropertyCountsAndUniqueItems) {
  const std::string s = R"({"type": "object", "properties": {"a": {"type": "integer"},
      "b": {"type": "integer"}, "c": {"type": "integer"}}, "required": ["b"],
      "additionalProperties": false, "minProperties": 2, "maxProperties": 2})";
  EXPECT_TRUE(SchemaMatches(s, R"({"a": 1, "b": 2})"));
  EXPECT_TRUE(SchemaMatches(s, R"({"b": 2, "c": 3})"));
  EXPECT_FALSE(SchemaMatches(s, R"({"b": 2})"));
  EXPECT_FALSE(SchemaMatches(s, R"({"a": 1, "b": 2, "c": 3})"));
  EXPECT_FALSE(SchemaMatches(s, R"({"a": 1, "c": 3})"));
  const std::string free = R"({"type": "object", "minProperties": 2, "maxProperties": 3})";
  EXPECT_FALSE(SchemaMatches(free, R"({})"));
  EXPECT_FALSE(SchemaMatches(free, R"({"x": 1})"));
  EXPECT_TRUE(SchemaMatches(free, R"({"x": 1, "y": [2]})"));
  EXPECT_TRUE(SchemaMatches(free, R"({"x": 1, "y": 2, "z": 3})"));
  EXPECT_FALSE(SchemaMatches(free, R"({"x": 1, "y": 2, "z": 3, "w": 4})"));
  EXPECT_TRUE(SchemaMatches(R"({"properties": {"a": {}}, "minProperties": 2})",
                            R"({"a": 1, "q": 2, "r": 3})"));
  const std::string u = R"({"type": "array", "items": {"enum": ["a", "b", "c"]},
      "uniqueItems": true, "minItems": 2})";
  EXPECT_TRUE(SchemaMatches(u, R"(["a", "b"])"));
  EXPECT_TRUE(SchemaMatches(u, R"(["c", "a", "b"])"));
  EXPECT_FALSE(SchemaMatches(u, R"(["a", "a"])"));
  EXPECT_FALSE(SchemaMatches(u, R"(["b"])"));
  EXPECT_FALSE(SchemaMatches(u, R"(["a", "b", "a"])"));
  const std::string flags = R"({"items": {"type": "boolean"}, "uniqueItems": true})";
  EXPECT_TRUE(SchemaMatches(flags, "[]"));
  EXPECT_TRUE(SchemaMatches(flags, "[false, true]"));
  EXPECT_FALSE(SchemaMatches(flags, "[true, true]"));
  EXPECT_TRUE(SchemaMatches(R"({"items": {"type": "string"}, "uniqueItems": true,
      "maxItems": 1})",
                            R"(["x"])"));
}

TEST(JsonSchema, UnsupportedAndInvalidSchemasAreNamed) {
  auto err = [](const std::string& s) {
    try {
      ParseGbnf(JsonSchemaToGbnf(s));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(err(R"j({"type": "string", "pattern": "^a(b|c)*[^x]{2}$"})j"), "no error");
  EXPECT_NE(err(R"({"type": "array", "uniqueItems": true})").find("uniqueItems is supported"),
            std::string::npos);
  EXPECT_NE(err(R"({"type": "integer", "multipleOf": -2})").find("multipleOf must be"),
            std::string::npos);
  EXPECT_NE(err(R"({"type": "string", "multipleOf": 2})").find("applies to numbers"),
            std::string::npos);
  EXPECT_NE(err(R"({"type": "integer", "multipleOf": 7, "minimum": 1, "maximum": 6})")
                .find("no multiple of 7"),
            std::string::npos);
  EXPECT_NE(err(R"({"type": "integer", "multipleOf": 123457})").find("grammar rules"),
            std::string::npos);
  EXPECT_NE(err(R"({"type": "object", "minProperties": 3, "maxProperties": 1})")
                .find("maxProperties is below"),
            std::string::npos);
  EXPECT_NE(err(R"({"properties": {"a": {}}, "additionalProperties": false,
      "minProperties": 2})")
                .find("no object has"),
            std::string::npos);
  EXPECT_NE(err(R"j({"type": "string", "pattern": "a(?=b)"})j").find("lookaround"),
            std::string::npos);
  EXPECT_NE(err(R"j({"type": "string", "pattern": "(a)\\1"})j").find("\\1"), std::string::npos);
  EXPECT_NE(err(R"j({"type": "string", "pattern": "\\bx"})j").find("\\b"), std::string::npos);
  EXPECT_NE(err(R"j({"type": "string", "pattern": "a{2000}"})j").find("out of range"),
            std::string::npos);
  EXPECT_NE(err(R"({"type": "strnig"})").find("unknown type 'strnig'"), std::string::npos);
  EXPECT_NE(err(R"({"$ref": "#/$defs/missing"})").find("points nowhere"), std::string::npos);
  EXPECT_NE(err(R"({"$ref": "http://x/y.json"})").find("only references"), std::string::npos);
  EXPECT_NE(err(R"({"type": "integer", "minimum": 5, "maximum": 4})").find("no integer"),
            std::string::npos);
  EXPECT_NE(err(R"({"type": "object", "required": ["a"]})").find("'a'"), std::string::npos);
  EXPECT_NE(err(R"({"type": "array", "minItems": 3, "maxItems": 2})").find("maxItems"),
            std::string::npos);
  EXPECT_NE(err("false").find("matches nothing"), std::string::npos);
  EXPECT_NE(err("{").find("not valid JSON"), std::string::npos);
  EXPECT_EQ(err(R"({"type": "number", "minimum": 1.5, "exclusiveMaximum": 2})"), "no error");
  EXPECT_NE(err(R"({"type": "number", "minimum": 2, "exclusiveMaximum": 2})").find("no number"),
            std::string::npos);
  EXPECT_NE(err(R"({"type": "string", "format": "ipv6"})").find("'ipv6'"), std::string::npos);
  EXPECT_NE(err(R"({"type": "string", "format": "email", "maxLength": 20})").find("admit"),
            std::string::npos);
  // At most 1000 enum values across the schema (OpenAI's limit): more would make one mask walk
  // long enough to stall the other streams.
  auto enum_of = [](int n, int copies) {
    std::string values;
    for (int i = 0; i < n; ++i) values += (i ? ", \"v" : "\"v") + std::to_string(i) + "\"";
    std::string props;
    for (int c = 0; c < copies; ++c)
      props += (c ? ", \"p" : "\"p") + std::to_string(c) + "\": {\"enum\": [" + values + "]}";
    return R"({"type": "object", "properties": {)" + props + "}}";
  };
  EXPECT_EQ(err(enum_of(30000, 1)), "no error");  // (a trie: see EnumsAreTries)
  EXPECT_NE(err(enum_of(50001, 2)).find("more than 100000 enum values"), std::string::npos);
  // A self-reference with no way out: no finite JSON.
  EXPECT_NE(err(R"({"$defs": {"a": {"type": "object", "properties": {"n": {"$ref": "#/$defs/a"}},
      "required": ["n"]}}, "$ref": "#/$defs/a"})")
                .find("no finite"),
            std::string::npos);
}

}  // namespace
}  // namespace paddock::grammar

namespace paddock::grammar {
namespace {

// A choice among tens of thousands of alternatives would make one mask walk long enough to stall
// the streams beside it: at most 2048 alternatives a rule, 8192 open at once.
TEST(Gbnf, AlternativeCountsAreBounded) {
  auto alts = [](int n, const char* prefix) {
    std::string g;
    for (int i = 0; i < n; ++i)
      g += std::string(i ? " | " : "") + "\"" + prefix + std::to_string(i) + "\"";
    return g;
  };
  EXPECT_NO_THROW(ParseGbnf("root ::= " + alts(2048, "v")));
  try {
    ParseGbnf("root ::= " + alts(30000, "v"));
    ADD_FAILURE() << "30000 alternatives accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than 2048 alternatives"), std::string::npos)
        << e.what();
  }
  // Through nested rules: 20,000 open at the start, refused when bound to a vocabulary.
  std::string many = "root ::= r0";
  for (int r = 1; r < 10; ++r) many += " | r" + std::to_string(r);
  for (int r = 0; r < 10; ++r)
    many +=
        "\nr" + std::to_string(r) + " ::= " + alts(2000, ("r" + std::to_string(r) + "v").c_str());
  auto open_error = [](const std::string& g) {
    try {
      Compile(g, TinyVocab({"", "a", "b"}));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(open_error(many).find("more than 8192 alternatives are open at once"),
            std::string::npos)
      << open_error(many);
  // 8 rules of 8 alternatives, each a path of its own: 8^8 open at the start from 64
  // alternatives written (the total alone would not have caught it).
  std::string deep;
  for (int r = 0; r < 8; ++r) {
    deep += (r ? "r" + std::to_string(r) : std::string("root")) + " ::= ";
    for (int a = 0; a < 8; ++a)
      deep += std::string(a ? " | " : "") + (r < 7 ? "r" + std::to_string(r + 1) + " " : "") +
              "\"" + std::string(1, static_cast<char>('a' + a)) + "\"";
    deep += "\n";
  }
  EXPECT_NE(open_error(deep).find("are open at once"), std::string::npos) << open_error(deep);
  // A chain of rules before the first byte deeper than the walk's bound; a long chain after
  // bytes is fine (and its shortest lengths come out in one pass whatever the rules' order).
  std::string chain = "root ::= c0\n";
  for (int r = 0; r < 3000; ++r)
    chain += "c" + std::to_string(r) + " ::= c" + std::to_string(r + 1) + " \"a\"\n";
  chain += "c3000 ::= \"b\"\n";
  EXPECT_NE(open_error(chain).find("nest more than 2000 deep"), std::string::npos);
  std::string tail = "root ::= t0\n";
  for (int r = 0; r < 20000; ++r)
    tail += "t" + std::to_string(r) + " ::= \"a\" t" + std::to_string(r + 1) + " | \"b\"\n";
  tail += "t20000 ::= \"a\"\n";
  auto g = Compile(tail, TinyVocab({"", "a", "b"}));
  Matcher m(g);
  EXPECT_EQ(m.Distance(), 1u);
  EXPECT_TRUE(m.Accept("aab") && m.Done());
}

}  // namespace
}  // namespace paddock::grammar
