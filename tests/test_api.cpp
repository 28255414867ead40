// The request schema and the API parser (server/request_schema.h, server/api.h), without HTTP:
// the table drives the refusals and agrees with docs/api.md; the tool-call grammar resolves each
// tool's references within its own schema.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>

#include "base/json_linear.h"
#include "grammar/cfg.h"
#include "server/api.h"
#include "server/api_dialects.h"
#include "server/background.h"
#include "server/model_registry.h"
#include "server/request_schema.h"
#include "server/response_store.h"
#include "test_util.h"

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
  if (std::getenv("PADDOCK_UPDATE_DOCS") != nullptr) {  // regenerate the table in place
    std::ofstream(std::string(PADDOCK_SOURCE_DIR) + "/docs/api.md")
        << doc.substr(0, a + begin.size()) << RequestFieldsMarkdown() << doc.substr(b);
    return;
  }
  EXPECT_EQ(doc.substr(a + begin.size(), b - a - begin.size()), RequestFieldsMarkdown())
      << "docs/api.md's field table differs from server/request_schema.cpp: paste the expected "
         "text above between the markers (or run the test with PADDOCK_UPDATE_DOCS=1)";
}

TEST(RequestSchema, EveryRowIsWellFormed) {
  std::set<std::pair<std::string, int>> seen;
  for (const RequestField& f : RequestFields()) {
    EXPECT_FALSE(f.effect.empty()) << f.name;
    EXPECT_FALSE(f.origin.empty()) << f.name;
    EXPECT_NE(f.endpoints, 0) << f.name;
    for (int bit = 1; bit <= kLoraUpdate; bit <<= 1)
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
  const EmbeddingsRequest e = ParseEmbeddings(R"({"input": "x", "dimensions": 8})", Context());
  EXPECT_EQ(e.dimensions, 8);
  EXPECT_FALSE(e.truncate);
  EXPECT_TRUE(ParseEmbeddings(R"({"input": "x", "truncate": true})", Context()).truncate);
  for (const char* bad :
       {R"({"input": "x", "dimensions": 0})", R"({"input": "x", "dimensions": "8"})",
        R"({"input": "x", "truncate": "yes"})"}) {
    try {
      ParseEmbeddings(bad, Context());
      ADD_FAILURE() << bad;
    } catch (const ApiError& x) {
      EXPECT_TRUE(x.param == "dimensions" || x.param == "truncate") << bad << " " << x.param;
    }
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

namespace paddock::server {
namespace {

// What a chat response's message carries comes back in the next request: reasoning_content
// (handed to the template), refusal, annotations, null audio / function_call / tool_calls.
TEST(ClientRoundTrip, AResponseMessageIsAcceptedBack) {
  const ApiRequest r = ParseRequest(
      R"({"messages": [{"role": "user", "content": "hi"},
          {"role": "assistant", "content": "4", "reasoning_content": "2 + 2", "refusal": null,
           "annotations": [], "audio": null, "function_call": null, "tool_calls": null},
          {"role": "assistant", "content": null, "refusal": "I can't help with that."},
          {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}],
           "reasoning": "thought", "name": null},
          {"role": "user", "content": [{"type": "text", "text": "again", "annotations": []}]}]})",
      true, Context());
  ASSERT_EQ(r.messages.size(), 5u);
  EXPECT_EQ(r.messages[1].content, "4");
  EXPECT_EQ(r.messages[1].reasoning_content, "2 + 2");
  EXPECT_EQ(r.messages[2].content, "I can't help with that.");
  EXPECT_EQ(r.messages[3].content, "No.");
  EXPECT_EQ(r.messages[3].reasoning_content, "thought");
  EXPECT_EQ(r.messages[4].content, "again");
}

TEST(ClientRoundTrip, WhatCannotBeReadIsRefusedByName) {
  auto msg = [](const std::string& m) {
    return R"({"messages": [{"role": "user", "content": "x"}, )" + m + "]}";
  };
  EXPECT_EQ(
      Refusal(msg(R"({"role": "assistant", "content": "a", "audio": {"id": "x"}})"), true).param,
      "messages[1].audio");
  EXPECT_EQ(
      Refusal(msg(R"({"role": "user", "reasoning_content": "r", "content": "a"})"), true).param,
      "messages[1].reasoning_content");
  EXPECT_EQ(
      Refusal(msg(R"({"role": "assistant", "content": "a", "reasoning_content": 3})"), true).param,
      "messages[1].reasoning_content");
  // Image parts are read (the image's data: URL checked here; a model without a projector
  // refuses them later, naming itself); other part types are refused naming the type.
  const ApiError img = Refusal(
      msg(R"({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:"}}]})"),
      true);
  EXPECT_EQ(img.param, "messages[1].content[0].image_url.url");
  const ApiError remote = Refusal(
      msg(R"({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://a/b.png"}}]})"),
      true);
  EXPECT_NE(remote.message.find("not fetched"), std::string::npos) << remote.message;
  const ApiError audio = Refusal(
      msg(R"({"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]})"), true);
  EXPECT_EQ(audio.param, "messages[1].content[0].type");
  EXPECT_NE(audio.message.find("input_audio"), std::string::npos);
  EXPECT_EQ(Refusal(msg(R"({"role": "assistant", "content": "a", "colour": "red"})"), true).param,
            "messages[1].colour");
}

// Fields OpenAI and llama-server clients send: accepted (checked as OpenAI checks them), used
// where they mean something here.
TEST(ClientFields, AgentFrameworkFieldsAreAccepted) {
  const ApiRequest r = ParseRequest(
      R"({"messages": [{"role": "user", "content": "x"}], "store": false,
          "metadata": {"session": "abc"}, "service_tier": "auto", "reasoning_effort": "low",
          "parallel_tool_calls": false, "modalities": ["text"], "cache_prompt": true,
          "prompt_cache_key": "k", "safety_identifier": "u1", "prediction": {"type": "content",
          "content": "x"}})",
      true, Context());
  bool effort = false;
  for (const ChatVar& v : r.template_vars)
    effort = effort || (v.name == "reasoning_effort" && v.str == "low");
  EXPECT_TRUE(effort);
  EXPECT_EQ(Refusal(R"({"prompt": "x", "metadata": {"k": 1}})", false).param, "metadata");
  EXPECT_EQ(Refusal(R"({"prompt": "x", "service_tier": "gold"})", false).param, "service_tier");
  EXPECT_EQ(
      Refusal(R"({"messages": [{"role": "user", "content": "x"}], "modalities": ["audio"]})", true)
          .param,
      "modalities");
  EXPECT_EQ(Refusal(R"({"prompt": "x", "stream_options": {"include_usage": true}})", false).param,
            "stream_options");
  EXPECT_EQ(Refusal(R"({"prompt": "x", "no_such_field": 1})", false).param, "no_such_field");
}

TEST(ClientFields, LlamaServerSamplersReachTheSampler) {
  const ApiRequest r = ParseRequest(
      R"({"prompt": "x", "typical_p": 0.9, "mirostat": 2, "mirostat_tau": 4, "mirostat_eta": 0.2,
          "dry_multiplier": 0.8, "dry_base": 2, "dry_allowed_length": 3, "dry_penalty_last_n": 64,
          "dry_sequence_breakers": ["\n"], "xtc_probability": 0.5, "xtc_threshold": 0.2,
          "repeat_last_n": 32, "n_probs": 3})",
      false, Context());
  const SamplingParams& s = r.options.generate.sampling;
  EXPECT_FLOAT_EQ(s.typical_p, 0.9f);
  EXPECT_EQ(s.mirostat, 2);
  EXPECT_FLOAT_EQ(s.mirostat_tau, 4.0f);
  EXPECT_FLOAT_EQ(s.mirostat_eta, 0.2f);
  EXPECT_FLOAT_EQ(s.dry_multiplier, 0.8f);
  EXPECT_FLOAT_EQ(s.dry_base, 2.0f);
  EXPECT_EQ(s.dry_allowed_length, 3);
  EXPECT_EQ(s.dry_penalty_last_n, 64);
  EXPECT_EQ(s.dry_sequence_breakers, std::vector<std::string>{"\n"});
  EXPECT_FLOAT_EQ(s.xtc_probability, 0.5f);
  EXPECT_FLOAT_EQ(s.xtc_threshold, 0.2f);
  EXPECT_EQ(s.penalty_last_n, 32);
  EXPECT_EQ(r.options.generate.logprobs, 3);
  EXPECT_EQ(Refusal(R"({"prompt": "x", "mirostat": 3})", false).param, "mirostat");
  EXPECT_EQ(Refusal(R"({"prompt": "x", "n_probs": 2, "logprobs": 2})", false).param, "n_probs");
  EXPECT_EQ(Refusal(R"({"prompt": "x", "dry_sequence_breakers": [""]})", false).param,
            "dry_sequence_breakers");
}

}  // namespace
}  // namespace paddock::server

namespace paddock {
namespace {

using OJson = nlohmann::ordered_json;

// The linear parser builds what nlohmann's own parser builds (order kept), refuses a repeated
// name and an object over the member limit (naming where), and reports syntax errors.
TEST(JsonLinear, BuildsWhatNlohmannBuilds) {
  const std::string text =
      R"({"b": [1, -2, 3.5, true, null, "s\u00e9"], "a": {"z": {}, "y": [[], [{"x": 1e300}]]},
          "n": 18446744073709551615, "": ""})";
  OJson mine;
  std::string why;
  ASSERT_TRUE(ParseJsonLinear(text, &mine, &why)) << why;
  const OJson theirs = OJson::parse(text);
  EXPECT_EQ(mine, theirs);
  EXPECT_EQ(mine.dump(), theirs.dump());  // same member order
  for (const char* bad : {"{", "{\"a\" 1}", "[1,]", "", "{\"a\":1}x"}) {
    OJson j;
    EXPECT_FALSE(ParseJsonLinear(bad, &j, &why)) << bad;
    EXPECT_TRUE(JsonOrDiscarded<OJson>(bad).is_discarded()) << bad;
  }
}

TEST(JsonLinear, RepeatedNamesAndOversizedObjectsAreRefusedByPath) {
  OJson j;
  std::string why;
  EXPECT_FALSE(ParseJsonLinear(R"({"a": {"k": 1, "k": 2}})", &j, &why));
  EXPECT_NE(why.find("'k' appears twice"), std::string::npos) << why;
  std::string big = R"({"m": [0, {"logit_bias": {)";
  for (int i = 0; i < 5; ++i) big += (i ? ",\"" : "\"") + std::to_string(i) + "\": 1";
  big += "}}]}";
  EXPECT_TRUE(ParseJsonLinear(big, &j, &why, 5)) << why;
  EXPECT_FALSE(ParseJsonLinear(big, &j, &why, 4));
  EXPECT_NE(why.find("'m[1].logit_bias' has more than 4 members"), std::string::npos) << why;
}

}  // namespace
}  // namespace paddock

namespace paddock::server {
namespace {

TEST(Dialects, AnthropicRequestsBecomeTheOpenAiChatTheyMean) {
  const Translated t =
      ToOpenAiRequest(Dialect::kAnthropic,
                      R"({"model": "m", "max_tokens": 9, "system": "sys", "stop_sequences": ["x"],
          "messages": [{"role": "user", "content": "q"},
            {"role": "assistant", "content": [{"type": "text", "text": "a"},
              {"type": "tool_use", "id": "t1", "name": "f", "input": {"k": 1}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
              "content": "r"}, {"type": "text", "text": "more"}]}],
          "tools": [{"name": "f", "input_schema": {"type": "object"}}],
          "tool_choice": {"type": "tool", "name": "f"},
          "thinking": {"type": "disabled"}})");
  const ApiRequest r = ParseRequest(t.body, true, Context());
  ASSERT_EQ(r.messages.size(), 5u);  // system, user, assistant, tool, user
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[2].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[2].tool_calls[0].arguments, R"({"k":1})");
  EXPECT_EQ(r.messages[3].role, "tool");
  EXPECT_EQ(r.messages[3].tool_call_id, "t1");
  EXPECT_EQ(r.options.generate.max_tokens, 9);
  EXPECT_EQ(r.options.generate.stop, std::vector<std::string>{"x"});
  EXPECT_TRUE(r.tool_calls);
  ASSERT_EQ(t.vars.size(), 1u);
  EXPECT_TRUE(t.vars[0].optional);
  // Images: Anthropic's base64 image block and Ollama's images become image_url parts, each
  // leaving the image marker in the message's text where it stood.
  const Translated ti = ToOpenAiRequest(Dialect::kAnthropic, R"({"model": "m", "max_tokens": 2,
      "messages": [{"role": "user", "content": [{"type": "text", "text": "see "},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
         "data": "aGVsbG8="}}, {"type": "text", "text": " now"}]}]})");
  const ApiRequest ri = ParseRequest(ti.body, true, Context());
  ASSERT_EQ(ri.images.size(), 1u);
  EXPECT_EQ(ri.images[0], "hello");
  EXPECT_EQ(ri.messages[0].content, "see " + std::string(kImageMarker) + " now");
  const Translated to = ToOpenAiRequest(Dialect::kOllamaChat, R"({"model": "m",
      "messages": [{"role": "user", "content": "what", "images": ["aGVsbG8=", "aGk="]}]})");
  const ApiRequest ro = ParseRequest(to.body, true, Context());
  ASSERT_EQ(ro.images.size(), 2u);
  EXPECT_EQ(ro.images[1], "hi");
  EXPECT_EQ(ro.messages[0].content, "what" + std::string(kImageMarker) + std::string(kImageMarker));
  auto refused = [](Dialect d, const std::string& body) {
    try {
      ToOpenAiRequest(d, body);
    } catch (const ApiError& e) {
      return e.param;
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refused(Dialect::kAnthropic, R"({"messages": [{"role": "user", "content": "x"}]})"),
            "max_tokens");
  EXPECT_EQ(refused(Dialect::kAnthropic, R"({"max_tokens": 1, "messages": [{"role": "user",
            "content": [{"type": "image", "source": {}}]}]})"),
            "messages[0].content[0].source");
  EXPECT_EQ(refused(Dialect::kAnthropic, R"({"max_tokens": 1, "messages": [{"role": "user",
            "content": [{"type": "document", "source": {}}]}]})"),
            "messages[0].content[0].type");
  EXPECT_EQ(refused(Dialect::kAnthropic, R"({"max_tokens": 1, "colour": 1, "messages": []})"),
            "colour");
  EXPECT_EQ(refused(Dialect::kOllamaChat, R"({"messages": [{"role": "user", "content": "x"}],
            "options": {"num_gpu_layers": 3}})"),
            "options.num_gpu_layers");
}

TEST(Dialects, RepliesAndErrorsTakeEachApisShape) {
  const std::string sse =
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"hm\"}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n"
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n"
      "data: [DONE]\n\n";
  std::string a;
  auto anthropic = MakeReplyTranslator(Dialect::kAnthropic, true, "m", 3);
  anthropic->Feed(sse.substr(0, 50), &a);  // split anywhere
  anthropic->Feed(sse.substr(50), &a);
  anthropic->End(&a);
  const std::vector<std::string> order = {
      "message_start",       "content_block_start", "thinking_delta",
      "content_block_stop",  "content_block_start", "text_delta",
      "content_block_stop",  "message_delta",       "\"stop_reason\":\"max_tokens\"",
      "\"output_tokens\":2", "message_stop"};
  size_t at = 0;
  for (const std::string& s : order) {
    const size_t next = a.find(s, at);
    ASSERT_NE(next, std::string::npos) << s << " in order in:\n" << a;
    at = next;
  }
  std::string o;
  auto ollama = MakeReplyTranslator(Dialect::kOllamaChat, true, "m", 3);
  ollama->Feed(sse, &o);
  ollama->End(&o);
  EXPECT_NE(o.find("\"thinking\":\"hm\""), std::string::npos) << o;
  EXPECT_NE(o.find("\"content\":\"Hi\""), std::string::npos) << o;
  EXPECT_NE(o.find("\"done\":true"), std::string::npos) << o;
  EXPECT_NE(o.find("\"done_reason\":\"length\""), std::string::npos) << o;
  EXPECT_EQ(std::count(o.begin(), o.end(), '\n'), 3) << o;  // one object per line
  ApiError e;
  e.status = 401;
  e.message = "no key";
  EXPECT_EQ(DialectErrorBody(Dialect::kAnthropic, 401, ErrorBody(e)),
            R"({"type":"error","error":{"type":"authentication_error","message":"no key"}})");
  EXPECT_EQ(DialectErrorBody(Dialect::kOllama, 401, ErrorBody(e)), R"({"error":"no key"})");
}

// A reply chunk that is not an OpenAI one (not JSON, no choices, a wrong member type) is an
// error each API's client sees in its own shape, streamed or whole, and nothing after it.
TEST(Dialects, AMalformedReplyChunkIsAnErrorTheClientSees) {
  const std::string good = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n";
  const std::string after =
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Lo\"}}]}\n\n";
  const std::vector<std::string> bad = {
      "data: {\"choices\":[{\"delta\":{\"content\":\n\n",            // not JSON
      "data: {\"id\":\"x\"}\n\n",                                    // neither choices nor usage
      "data: [1,2]\n\n",                                             // not an object
      "data: {\"choices\":[{\"delta\":{\"tool_calls\":[7]}}]}\n\n",  // a call that is no object
      "event: x\n\n",                                                // not a data event
  };
  struct Api {
    Dialect d;
    const char* error;  // what the client sees
  };
  const Api apis[] = {
      {Dialect::kAnthropic,
       "event: error\ndata: "
       "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"malformed reply"},
      {Dialect::kResponses, "event: error\ndata: {\"code\":null,\"message\":\"malformed reply"},
      {Dialect::kOllamaChat, "{\"error\":\"malformed reply"},
      {Dialect::kOllamaGenerate, "{\"error\":\"malformed reply"},
  };
  for (const Api& api : apis) {
    for (const std::string& b : bad) {
      std::string out;
      auto t = MakeReplyTranslator(api.d, true, "m", 3);
      t->Feed(good + b + after, &out);
      t->End(&out);
      const std::string what = std::to_string(static_cast<int>(api.d)) + " " + b;
      EXPECT_NE(out.find(api.error), std::string::npos) << what << "\n" << out;
      EXPECT_NE(out.find("Hi"), std::string::npos) << what << "\n" << out;
      EXPECT_EQ(out.find("Lo"), std::string::npos) << "nothing after the error: " << what;
    }
    std::string whole;  // a whole body that is not an OpenAI completion
    auto t = MakeReplyTranslator(api.d, false, "m", 3);
    t->Feed("{\"object\":\"chat.completion\"}", &whole);
    t->End(&whole);
    EXPECT_NE(whole.find("malformed reply chunk: no choices"), std::string::npos) << whole;
  }
}

}  // namespace
}  // namespace paddock::server

namespace paddock::server {
namespace {

TEST(ClientFields, SeveralPromptsAreParsedInOrder) {
  const ApiRequest r = ParseRequest(R"({"prompt": ["a", "b", "c"]})", false, Context());
  ASSERT_EQ(r.more_prompts.size(), 3u);
  EXPECT_EQ(r.prompt_text, "a");
  EXPECT_EQ(r.more_prompts[2].text, "c");
  const ApiRequest t = ParseRequest(R"({"prompt": [[1, 2], [3]]})", false, Context());
  ASSERT_EQ(t.more_prompts.size(), 2u);
  EXPECT_EQ(t.more_prompts[1].tokens, std::vector<int32_t>{3});
  EXPECT_EQ(Refusal(R"({"prompt": ["a", [1]]})", false).param, "prompt");
  EXPECT_EQ(Refusal(R"({"prompt": ["a", "b"], "echo": true})", false).param, "echo");
  std::string many = R"({"prompt": [)";
  for (int i = 0; i < 33; ++i) many += (i ? ",\"x\"" : "\"x\"");
  EXPECT_EQ(Refusal(many + "]}", false).param, "prompt");
}

}  // namespace
}  // namespace paddock::server

namespace paddock::server {
namespace {

// The background thread for large bodies: jobs run in order, a full queue is refused (the
// caller answers 503), Stop drops what waits and lets the running job finish.
TEST(Background, RunsInOrderRefusesWhenFullAndStops) {
  Background bg(2, 10);
  std::mutex mu;
  std::condition_variable cv;
  bool release = false, started = false;
  std::vector<int> order;
  ASSERT_TRUE(bg.Submit([&] {
    std::unique_lock<std::mutex> lock(mu);
    started = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
    order.push_back(0);  // (under the lock, as the others)
  }));
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return started; });  // the first job runs: two may wait
  }
  EXPECT_TRUE(bg.Submit([&] {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(1);
  }));
  EXPECT_TRUE(bg.Submit([&] {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(2);
    cv.notify_all();
  }));
  EXPECT_FALSE(bg.Submit([] {}));  // full
  {
    std::unique_lock<std::mutex> lock(mu);
    release = true;
    cv.notify_all();
    cv.wait(lock, [&] { return order.size() == 3; });
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  bg.Stop();
  EXPECT_FALSE(bg.Submit([] {}));  // stopped
}

// --models-dir: projectors (mmproj*.gguf) are not models; a model takes the only one beside
// it, or among several the one whose name holds its stem; several and none named: served
// without images, said in the skipped list.
TEST(ModelsDir, ProjectorsPairWithTheModelsBesideThem) {
  namespace fs = std::filesystem;
  const std::string model = test::ModelPath("stories260K.gguf");
  if (!fs::exists(model)) GTEST_SKIP() << "no " << model;
  const std::string dir = test::TempPath("models");
  for (const char* d : {"/one", "/two", "/three"}) fs::create_directories(dir + d);
  fs::copy_file(model, dir + "/one/alpha.gguf");
  { std::ofstream(dir + "/one/mmproj-model-f16.gguf") << "x"; }
  fs::copy_file(model, dir + "/two/beta.gguf");
  { std::ofstream(dir + "/two/mmproj-beta-f16.gguf") << "x"; }
  { std::ofstream(dir + "/two/mmproj-other-f16.gguf") << "x"; }
  fs::copy_file(model, dir + "/three/gamma.gguf");
  { std::ofstream(dir + "/three/mmproj-a.gguf") << "x"; }
  { std::ofstream(dir + "/three/MMPROJ-b.gguf") << "x"; }
  std::vector<std::string> skipped;
  const std::vector<ModelSpec> specs = ScanModelsDir(dir, EngineOptions{}, &skipped);
  ASSERT_EQ(specs.size(), 3u);  // the projectors are not models
  std::map<std::string, std::string> mmproj;
  for (const ModelSpec& m : specs) mmproj[m.id] = m.engine.mmproj;
  EXPECT_EQ(mmproj["alpha"], dir + "/one/mmproj-model-f16.gguf");
  EXPECT_EQ(mmproj["beta"], dir + "/two/mmproj-beta-f16.gguf");
  EXPECT_EQ(mmproj["gamma"], "");
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("2 projectors beside it"), std::string::npos) << skipped[0];
  fs::remove_all(dir);
}

// Stored responses: by id, least recently used out past the count or the bytes; in memory and
// in SQLite alike.
TEST(ResponseStore, KeepsTheRecentWithinItsBounds) {
  const std::string dir = test::TempPath("responses");
  for (const std::string where : {std::string(), dir}) {
    ResponseStoreOptions o;
    o.dir = where;
    o.max_entries = 3;
    o.max_bytes = 100;
    ResponseStore st(o);
    SCOPED_TRACE(st.where());
    std::string out;
    st.Put("a", "ra", "ca");
    st.Put("b", "rb", "cb");
    st.Put("c", "rc", "cc");
    ASSERT_TRUE(st.Response("a", &out));  // a is now the most recent
    EXPECT_EQ(out, "ra");
    st.Put("d", "rd", "cd");  // over the count: b (least recent) goes
    EXPECT_FALSE(st.Response("b", &out));
    ASSERT_TRUE(st.Conversation("c", &out));
    EXPECT_EQ(out, "cc");
    st.Put("e", std::string(90, 'x'), "");  // over the bytes: the others go
    EXPECT_FALSE(st.Response("a", &out));
    EXPECT_TRUE(st.Response("e", &out));
    st.Put("f", std::string(101, 'x'), "");  // larger than the store: not kept
    EXPECT_FALSE(st.Response("f", &out));
    EXPECT_TRUE(st.Erase("e"));
    EXPECT_FALSE(st.Erase("e"));
  }
  std::filesystem::remove_all(dir);
}

// In SQLite: kept across a reopen (a restart), shared by two stores on one file (two servers),
// expired by age; a directory that cannot be created is an error naming it.
TEST(ResponseStore, SurvivesARestartIsSharedAndExpires) {
  const std::string dir = test::TempPath("responses");
  ResponseStoreOptions o;
  o.dir = dir;
  {
    ResponseStore st(o);
    st.Put("resp_1", R"({"id":"resp_1"})", R"([{"role":"user","content":"hi"}])");
  }
  ResponseStore a(o), b(o);
  std::string out;
  ASSERT_TRUE(a.Response("resp_1", &out));
  EXPECT_EQ(out, R"({"id":"resp_1"})");
  ASSERT_TRUE(b.Conversation("resp_1", &out));
  EXPECT_EQ(out, R"([{"role":"user","content":"hi"}])");
  b.Put("resp_2", "r2", "c2");
  EXPECT_TRUE(a.Response("resp_2", &out));
  EXPECT_TRUE(a.Erase("resp_2"));
  EXPECT_FALSE(b.Response("resp_2", &out));
  ResponseStoreOptions young = o;
  young.max_age_seconds = 1e-3;
  ResponseStore c(young);
  usleep(20000);  // older than a millisecond now
  EXPECT_FALSE(c.Response("resp_1", &out));
  EXPECT_TRUE(a.Response("resp_1", &out));  // (only c's age limit says so)
  ResponseStoreOptions bad;
  bad.dir = "/proc/self/status/responses";
  try {
    ResponseStore s(bad);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(bad.dir), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace paddock::server
