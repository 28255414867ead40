// The request schema and the API parser (server/request_schema.h, server/api.h), without HTTP:
// the table drives the refusals and agrees with docs/api.md; the tool-call grammar resolves each
// tool's references within its own schema.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "grammar/cfg.h"
#include "server/api.h"
#include "server/request_schema.h"

namespace paddock::server {
namespace {

ApiContext Context() {
  ApiContext ctx;
  ctx.model_name = "m";
  ctx.context = 256;
  ctx.n_vocab = 100;
  // Grammars are only parsed here (no vocabulary): a bad one still throws Error.
  ctx.compile = [](GrammarKind kind, const std::string& text) -> std::shared_ptr<const Grammar> {
    if (kind == GrammarKind::kGbnf) grammar::ParseGbnf(text);
    if (kind == GrammarKind::kJsonSchema) grammar::ParseGbnf(grammar::JsonSchemaToGbnf(text));
    return nullptr;
  };
  return ctx;
}

ApiError Refusal(const std::string& body, bool chat) {
  try {
    ParseRequest(body, chat, Context());
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body;
  return {};
}

std::string ReadDoc(const std::string& name) {
  std::ifstream f(std::string(PADDOCK_SOURCE_DIR) + "/docs/" + name);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(RequestSchema, DocsApiHoldsTheTable) {
  const std::string doc = ReadDoc("api.md");
  const std::string begin = "<!-- request-fields -->\n", end = "<!-- /request-fields -->";
  const size_t a = doc.find(begin), b = doc.find(end);
  ASSERT_NE(a, std::string::npos) << "docs/api.md has no " << begin;
  ASSERT_NE(b, std::string::npos) << "docs/api.md has no " << end;
  EXPECT_EQ(doc.substr(a + begin.size(), b - a - begin.size()), RequestFieldsMarkdown())
      << "docs/api.md's field table differs from server/request_schema.cpp: paste the expected "
         "text above between the markers";
}

TEST(RequestSchema, EveryRowIsWellFormed) {
  std::set<std::pair<std::string, int>> seen;
  for (const RequestField& f : RequestFields()) {
    EXPECT_FALSE(f.effect.empty()) << f.name;
    EXPECT_FALSE(f.origin.empty()) << f.name;
    EXPECT_NE(f.endpoints, 0) << f.name;
    for (int bit = 1; bit <= kDetokenize; bit <<= 1)
      if ((f.endpoints & bit) != 0)
        EXPECT_TRUE(seen.insert({std::string(f.name), bit}).second) << "two rows " << f.name;
    if (f.use == FieldUse::kAlias) {
      const RequestField* target =
          FindRequestField(f.alias_of, static_cast<Endpoint>(f.endpoints & -f.endpoints));
      EXPECT_NE(target, nullptr) << f.name << " is an alias of a field that is not there";
    }
  }
}

TEST(RequestSchema, UnknownAndMisplacedNamesAreRefusedByName) {
  ApiError e = Refusal(R"({"prompt": "x", "frobnicate": 1})", false);
  EXPECT_EQ(e.param, "frobnicate");
  EXPECT_NE(e.message.find("unknown field"), std::string::npos);
  e = Refusal(R"({"messages": [{"role": "user", "content": "x"}], "echo": true})", true);
  EXPECT_EQ(e.param, "echo");
  EXPECT_NE(e.message.find("applies to completions, not chat"), std::string::npos) << e.message;
  e = Refusal(R"({"prompt": "x", "tools": []})", false);
  EXPECT_EQ(e.param, "tools");
  EXPECT_NE(e.message.find("applies to chat"), std::string::npos) << e.message;
  e = Refusal(R"({"prompt": "x", "suffix": "y"})", false);
  EXPECT_EQ(e.param, "suffix");
  EXPECT_NE(e.message.find("not supported"), std::string::npos);
}

TEST(RequestSchema, TypesRangesAndDefaultsComeFromTheTable) {
  EXPECT_EQ(Refusal(R"({"prompt": "x", "temperature": "hot"})", false).param, "temperature");
  EXPECT_EQ(Refusal(R"({"prompt": "x", "top_p": 1.5})", false).param, "top_p");
  EXPECT_EQ(Refusal(R"({"prompt": "x", "n": 17})", false).param, "n");
  EXPECT_EQ(Refusal(R"({"prompt": "x", "priority": 2000000})", false).param, "priority");
  EXPECT_EQ(Refusal(R"({"prompt": "x", "user": 7})", false).param, "user");
  const ApiRequest r = ParseRequest(R"({"prompt": "x", "user": null})", false, Context());
  EXPECT_EQ(r.options.generate.sampling.temperature, 1.0f);
  EXPECT_EQ(r.options.generate.max_tokens, 16);
  EXPECT_EQ(r.options.n, 1);
  const ApiRequest c =
      ParseRequest(R"({"messages": [{"role": "user", "content": "x"}]})", true, Context());
  EXPECT_EQ(c.options.generate.max_tokens, 256);  // chat: to the end of the context
}

TEST(RequestSchema, AFieldAndItsAliasTogetherAreRefused) {
  EXPECT_EQ(Refusal(R"({"prompt": "x", "max_tokens": 4, "n_predict": 8})", false).param,
            "n_predict");
  const std::string p =
      Refusal(R"({"prompt": "x", "max_completion_tokens": 4, "n_predict": 8})", false).param;
  EXPECT_TRUE(p == "n_predict" || p == "max_completion_tokens") << p;
  EXPECT_EQ(
      Refusal(R"({"prompt": "x", "repetition_penalty": 1.1, "repeat_penalty": 1.2})", false).param,
      "repeat_penalty");
  const ApiRequest r = ParseRequest(R"({"prompt": "x", "repeat_penalty": 1.25})", false, Context());
  EXPECT_FLOAT_EQ(r.options.generate.sampling.repeat_penalty, 1.25f);
}

TEST(RequestSchema, OtherBodiesUseTheirRows) {
  EXPECT_THROW(ParseTokenize(R"({"content": "x", "stream": true})"), ApiError);
  EXPECT_TRUE(ParseTokenize(R"({"content": "x"})").add_special);
  EXPECT_THROW(ParseDetokenize(R"({"tokens": [1], "content": "x"})", 100), ApiError);
  try {
    ParseEmbeddings(R"({"input": "x", "dimensions": 8})", Context());
    ADD_FAILURE();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "dimensions");
  }
}

// A tool whose parameters refer to their own $defs: with tool_choice required the grammar
// resolves them within the tool's schema (not from a wrapper around all the tools).
TEST(ToolGrammar, ParametersWithDefsCompileWhenACallIsRequired) {
  std::string grammar_text;
  ApiContext ctx = Context();
  ctx.compile = [&](GrammarKind, const std::string& text) -> std::shared_ptr<const Grammar> {
    grammar_text = text;
    grammar::ParseGbnf(text);
    return nullptr;
  };
  const std::string tool = R"({"type": "function", "function": {"name": "add_person",
    "parameters": {"type": "object", "$defs": {"person": {"type": "object",
      "properties": {"name": {"type": "string"}}, "required": ["name"]}},
      "properties": {"who": {"$ref": "#/$defs/person"}}, "required": ["who"]}}})";
  for (ToolFormat f :
       {ToolFormat::kHermes, ToolFormat::kLlama3, ToolFormat::kMistral, ToolFormat::kHarmony}) {
    ctx.tool_format = f;
    for (const char* choice :
         {R"("required")", R"({"type": "function", "function": {"name": "add_person"}})"}) {
      const std::string body = R"({"messages": [{"role": "user", "content": "x"}], "tools": [)" +
                               tool + R"(], "tool_choice": )" + choice + "}";
      EXPECT_NO_THROW(ParseRequest(body, true, ctx)) << body;
      EXPECT_NE(grammar_text.find("add_person"), std::string::npos);
      EXPECT_NE(grammar_text.find("root ::= "), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace paddock::server
