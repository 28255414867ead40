// Tool calls in the chat layer: the real templates of three families (Qwen 2.5 / Hermes,
// Llama 3.2, Mistral Nemo, in tests/chat_templates/) render tools, calls and results as they do
// under HF transformers; the built-in families write the same conventions; replies in each
// convention parse back into calls, streamed piece by piece or whole.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "base/strings.h"
#include "chat/jinja.h"
#include "paddock/chat.h"

namespace paddock {
namespace {

std::string ReadTemplate(const std::string& name) {
  std::ifstream in(std::string(PADDOCK_TEST_DATA) + "/chat_templates/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_FALSE(ss.str().empty()) << name;
  return ss.str();
}

const char* kTools =
    R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather now", )"
    R"("parameters": {"type": "object", "properties": {"city": {"type": "string"}}, )"
    R"("required": ["city"]}}}])";

std::vector<ChatMessage> ToolConversation() {
  ChatMessage call{"assistant", ""};
  call.tool_calls.push_back({"abcDEF123", "get_weather", R"({"city":"Paris"})"});
  ChatMessage result{"tool", R"({"temp": 21})"};
  result.tool_call_id = "abcDEF123";
  return {{"system", "You are terse."}, {"user", "Weather in Paris?"}, call, result};
}

std::unique_ptr<ChatFormatter> Formatter(const std::string& template_source,
                                         const std::string& family = "") {
  ModelInfo info;
  info.arch = "llama";
  info.bos_token = "<s>";
  info.eos_token = "</s>";
  info.chat_template = template_source;
  return ChatFormatter::Create(info, family);
}

const char* kQwenExpected =
    "<|im_start|>system\nYou are terse.\n\n# Tools\n\nYou may call one or more functions to assist "
    "with the user query.\n\nYou are provided with function signatures within <tools></tools> XML "
    "tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
    "\"description\": \"Weather now\", \"parameters\": {\"type\": \"object\", \"properties\": "
    "{\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n</tools>\n\nFor each "
    "function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in "
    "Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", "
    "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n"
    "<tool_response>\n{\"temp\": 21}\n</tool_response><|im_end|>\n<|im_start|>assistant\n";

TEST(Tools, QwenTemplateRendersToolsNatively) {
  auto f = Formatter(ReadTemplate("qwen2.5-tools.jinja"));
  EXPECT_EQ(f->description(), "the model's template");
  EXPECT_EQ(f->tool_format(), ToolFormat::kHermes);
  EXPECT_EQ(f->Render(ChatInput{ToolConversation(), true, {}, kTools}), kQwenExpected);
}

// The built-in ChatML family writes the same convention, byte for byte.
TEST(Tools, BuiltInChatMlLowersToHermes) {
  auto f = Formatter("", "chatml");
  EXPECT_EQ(f->tool_format(), ToolFormat::kHermes);
  EXPECT_EQ(f->Render(ChatInput{ToolConversation(), true, {}, kTools}), kQwenExpected);
  // Consecutive results share one user turn, as in Qwen's template.
  auto conv = ToolConversation();
  conv.push_back(conv.back());
  const std::string two = f->Render(ChatInput{conv, true, {}, kTools});
  EXPECT_NE(two.find("</tool_response>\n<tool_response>"), std::string::npos) << two;
  EXPECT_EQ(
      two,
      Formatter(ReadTemplate("qwen2.5-tools.jinja"))->Render(ChatInput{conv, true, {}, kTools}));
}

TEST(Tools, Llama3TemplateRendersToolsNatively) {
  auto f = Formatter(ReadTemplate("llama3.2-tools.jinja"));
  EXPECT_EQ(f->description(), "the model's template");
  EXPECT_EQ(f->tool_format(), ToolFormat::kLlama3);
  const std::string out = f->Render(ChatInput{ToolConversation(), true, {}, kTools});
  for (const char* want :
       {"<s><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge "
        "Date: December 2023\nToday Date: 26 Jul 2024\n\nYou are terse.<|eot_id|>",
        "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",",
        "\"required\": [\n                \"city\"\n            ]\n",
        "\n\nWeather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
        "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|eot_id|>",
        "<|start_header_id|>ipython<|end_header_id|>\n\n\"{\\\"temp\\\": 21}\"<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"})
    EXPECT_NE(out.find(want), std::string::npos) << "missing: " << want << "\nin:\n" << out;
}

TEST(Tools, BuiltInLlama3WritesJsonCalls) {
  auto f = Formatter("", "llama3");
  EXPECT_EQ(f->tool_format(), ToolFormat::kLlama3);
  const std::string out = f->Render(ChatInput{ToolConversation(), true, {}, kTools});
  for (const char* want :
       {"<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please "
        "respond with a JSON for a function call",
        "Weather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": "
        "\"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|eot_id|>",
        "<|start_header_id|>ipython<|end_header_id|>\n\n{\"temp\": 21}<|eot_id|>"})
    EXPECT_NE(out.find(want), std::string::npos) << "missing: " << want << "\nin:\n" << out;
}

TEST(Tools, MistralTemplateRendersToolsNatively) {
  auto f = Formatter(ReadTemplate("mistral-nemo-tools.jinja"));
  EXPECT_EQ(f->description(), "the model's template");
  EXPECT_EQ(f->tool_format(), ToolFormat::kMistral);
  EXPECT_EQ(f->Render(ChatInput{ToolConversation(), true, {}, kTools}),
            "<s>[AVAILABLE_TOOLS][{\"type\": \"function\", \"function\": {\"name\": "
            "\"get_weather\", \"description\": \"Weather now\", \"parameters\": {\"type\": "
            "\"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": "
            "[\"city\"]}}}][/AVAILABLE_TOOLS][INST]Weather in Paris?[/INST][TOOL_CALLS][{\"name\": "
            "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abcDEF123\"}]</s>"
            "[TOOL_RESULTS]{\"content\": {\"temp\": 21}, \"call_id\": \"abcDEF123\"}"
            "[/TOOL_RESULTS]");
  // The template's own checks still hold: an id that is not 9 characters is refused.
  auto conv = ToolConversation();
  conv[2].tool_calls[0].id = "call-1";
  EXPECT_THROW(f->Render(ChatInput{conv, true, {}, kTools}), Error);
}

TEST(Tools, BuiltInMistralWritesItsMarkers) {
  auto f = Formatter("", "mistral");
  EXPECT_EQ(f->tool_format(), ToolFormat::kMistral);
  EXPECT_EQ(f->Render(ChatInput{ToolConversation(), true, {}, kTools}),
            "[AVAILABLE_TOOLS] [{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
            "\"description\":\"Weather now\",\"parameters\":{\"type\":\"object\",\"properties\":{"
            "\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}][/AVAILABLE_TOOLS][INST] "
            "You are terse.\n\nWeather in Paris? [/INST][TOOL_CALLS] [{\"name\":\"get_weather\","
            "\"arguments\":{\"city\":\"Paris\"},\"id\":\"abcDEF123\"}]</s>[TOOL_RESULTS] "
            "{\"content\":{\"temp\":21},\"call_id\":\"abcDEF123\"}[/TOOL_RESULTS]");
}

// A template that knows no tools gets them in Hermes' convention, around its own turns.
TEST(Tools, TemplateWithoutToolsGetsHermesText) {
  auto f = Formatter(ReadTemplate("chatml.jinja"));
  EXPECT_EQ(f->description(), "the model's template");
  EXPECT_EQ(f->tool_format(), ToolFormat::kHermes);
  const std::string out = f->Render(ChatInput{ToolConversation(), true, {}, kTools});
  EXPECT_NE(out.find("<tools>\n{\"type\": \"function\""), std::string::npos) << out;
  EXPECT_NE(out.find("<|im_start|>user\n<tool_response>\n{\"temp\": 21}\n</tool_response>"),
            std::string::npos)
      << out;
  // Without tools and tool messages the plain path is used unchanged.
  EXPECT_EQ(f->Render(ChatInput{{{"user", "Hi"}}, true, {}, ""}),
            f->Render(std::vector<ChatMessage>{{"user", "Hi"}}));
}

TEST(Tools, ParseEachFormat) {
  ParsedToolCalls p = ParseToolCalls(
      ToolFormat::kHermes,
      "Let me look.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"g\"}\n</tool_call>");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.content, "Let me look.");
  EXPECT_EQ(p.calls[0].name, "f");
  EXPECT_EQ(p.calls[0].arguments, "{\"a\":1}");
  EXPECT_EQ(p.calls[1].arguments, "{}");
  // Broken JSON stays text.
  p = ParseToolCalls(ToolFormat::kHermes, "<tool_call>{oops</tool_call>");
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, "<tool_call>{oops</tool_call>");

  p = ParseToolCalls(ToolFormat::kLlama3, " {\"name\": \"f\", \"parameters\": {\"q\": \"a}b\"}}");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, "{\"q\":\"a}b\"}");
  EXPECT_EQ(p.content, "");
  p = ParseToolCalls(ToolFormat::kLlama3,
                     "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}; "
                     "{\"name\": \"g\", \"parameters\": {}}");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[1].name, "g");
  p = ParseToolCalls(ToolFormat::kLlama3, "{\"name\": \"f\"} and then prose");
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, "{\"name\": \"f\"} and then prose");
  p = ParseToolCalls(ToolFormat::kLlama3, "Paris is sunny.");
  EXPECT_TRUE(p.calls.empty());

  p = ParseToolCalls(ToolFormat::kMistral,
                     "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"x\": [1, 2]}, \"id\": "
                     "\"abcDEF123\"}, {\"name\": \"g\", \"arguments\": \"{\\\"y\\\": 2}\"}]");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].id, "abcDEF123");
  EXPECT_EQ(p.calls[0].arguments, "{\"x\":[1,2]}");
  EXPECT_EQ(p.calls[1].arguments, "{\"y\":2}");
  p = ParseToolCalls(ToolFormat::kMistral, "[TOOL_CALLS] [{\"name\": 3}]");
  EXPECT_TRUE(p.calls.empty());
}

// Streaming: content flows until the calls start, then everything is held for the parser; the
// result is the same whatever the pieces.
TEST(Tools, SplitterIsIndependentOfPieces) {
  struct Case {
    ToolFormat format;
    std::string reply, content;
    size_t calls;
  };
  const Case cases[] = {
      {ToolFormat::kHermes, "Sure. <tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
       "Sure.", 1},
      {ToolFormat::kHermes, "No call here, just <tool text.", "No call here, just <tool text.", 0},
      {ToolFormat::kLlama3, "  {\"name\": \"f\", \"parameters\": {\"a\": \"}\"}}", "", 1},
      {ToolFormat::kLlama3, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}", "", 1},
      {ToolFormat::kLlama3, "It is sunny {really}.", "It is sunny {really}.", 0},
      {ToolFormat::kMistral, "ok[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}}]", "ok", 1},
  };
  for (const Case& c : cases) {
    for (size_t piece : {1, 2, 3, 7, 1000}) {
      ToolCallSplitter split(c.format);
      std::string content;
      for (size_t at = 0; at < c.reply.size(); at += piece)
        split.Feed(std::string_view(c.reply).substr(at, piece), &content);
      content += split.TakeHeld();
      const ParsedToolCalls p = ParseToolCalls(c.format, split.tail());
      std::string all = content;
      if (!p.content.empty()) all += (all.empty() ? "" : "\n") + p.content;
      const size_t b = all.find_first_not_of(' '), e = all.find_last_not_of(' ');
      all = b == std::string::npos ? "" : all.substr(b, e - b + 1);
      EXPECT_EQ(all, c.content) << c.reply << " piece " << piece;
      EXPECT_EQ(p.calls.size(), c.calls) << c.reply << " piece " << piece;
    }
  }
}

// The Jinja constructs the tool templates use.
TEST(Tools, JinjaFiltersForTools) {
  auto r = [](const std::string& src) {
    return JinjaTemplate(src).RenderChat({{"user", "u"}, {"assistant", "a"}, {"user", "v"}}, false,
                                         "", "");
  };
  EXPECT_EQ(r("{{ messages | selectattr('role', 'equalto', 'user') | list | length }}"), "2");
  EXPECT_EQ(r("{{ messages | rejectattr('role', 'equalto', 'user') | map(attribute='content') | "
              "join(',') }}"),
            "a");
  EXPECT_EQ(r("{% for m in messages if m.role == 'user' %}{{ loop.index }}{{ m.content }}"
              "{% endfor %}"),
            "1u2v");
  EXPECT_EQ(r("{% for k, v in {'a': 1, 'return': 2, 'b': 3}.items() if k != 'return' %}{{ k }}"
              "{{ v }}{% if not loop.last %},{% endif %}{% endfor %}"),
            "a1,b3");
  EXPECT_EQ(r("{{ {'a': [1, {'b': none} ], 'c': {} } | tojson(indent=2) }}"),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": null\n    }\n  ],\n  \"c\": {}\n}");
  EXPECT_EQ(r("{{ messages[0] == (messages | selectattr('role', 'equalto', 'user') | first) }}"),
            "True");
}

// chat_template_kwargs with lists and objects reach the template as Jinja values.
TEST(Tools, JsonTemplateVariables) {
  ChatVar v;
  v.name = "cfg";
  v.kind = ChatVar::Kind::kJson;
  v.str = R"({"names": ["a", "b"], "deep": {"x": 1.5, "on": true, "none": null}})";
  EXPECT_EQ(JinjaTemplate("{{ cfg.names | join('+') }} {{ cfg.deep.x }} {{ cfg.deep.on }} "
                          "{{ cfg.deep.none is none }} {{ cfg | tojson }}")
                .RenderChat({{"user", "u"}}, true, "", "", {v}),
            "a+b 1.5 True True {\"names\": [\"a\", \"b\"], \"deep\": {\"x\": 1.5, \"on\": true, "
            "\"none\": null}}");
  v.str = "{oops";
  EXPECT_THROW(JinjaTemplate("{{ cfg }}").RenderChat({{"user", "u"}}, true, "", "", {v}), Error);
}

}  // namespace
}  // namespace paddock

namespace paddock {
namespace {

// gpt-oss's harmony format. The expected text is what gpt-oss's own chat template renders for
// this conversation (checked with Paddock's Jinja against that template); the built-in writes
// the same when the model's template is missing.
const char* kHarmonyTools =
    R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather now", )"
    R"("parameters": {"type": "object", "properties": {"city": {"type": "string", "description": )"
    R"("The city"}, "unit": {"type": "string", "enum": ["c", "f"], "default": "c"}, "days": )"
    R"({"type": "integer", "default": 1}, "tags": {"type": "array", "items": {"type": "string"}}}, )"
    R"("required": ["city"]}}}, {"type": "function", "function": {"name": "now", "description": )"
    R"("Time", "parameters": {"type": "object"}}}])";

const char* kHarmonyExpected =
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
    "Knowledge cutoff: 2024-06\n"
    "Current date: @DATE@\n"
    "\n"
    "Reasoning: medium\n"
    "\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every message.\n"
    "Calls to these tools must go to the commentary channel: "
    "'functions'.<|end|><|start|>developer<|message|># Instructions\n"
    "\n"
    "You are terse.\n"
    "\n"
    "# Tools\n"
    "\n"
    "## functions\n"
    "\n"
    "namespace functions {\n"
    "\n"
    "// Weather now\n"
    "type get_weather = (_: {\n"
    "// The city\n"
    "city: string,\n"
    "unit?: \"c\" | \"f\", // default: c,\n"
    "days?: number, // default: 1,\n"
    "tags?: string[],\n"
    "}) => any;\n"
    "\n"
    "// Time\n"
    "type now = () => any;\n"
    "\n"
    "} // namespace functions<|end|><|start|>user<|message|>Weather in Paris?<|end|>"
    "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
    "{\"city\": \"Paris\"}<|call|><|start|>functions.get_weather "
    "to=assistant<|channel|>commentary<|message|>\"{\\\"temp\\\": 21}\"<|end|>"
    "<|start|>assistant<|channel|>final<|message|>21 C.<|end|><|start|>user<|message|>"
    "Thanks<|end|><|start|>assistant";

TEST(Harmony, BuiltInRendersAsGptOssTemplate) {
  ModelInfo info;
  info.arch = "gpt-oss";
  auto f = ChatFormatter::Create(info);
  EXPECT_EQ(f->description(), "built-in harmony");
  EXPECT_EQ(f->tool_format(), ToolFormat::kHarmony);
  std::vector<ChatMessage> msgs = ToolConversation();
  msgs[2].tool_calls[0].id = "abc";
  msgs[3].tool_call_id = "abc";
  msgs.push_back({"assistant", "21 C."});
  msgs.push_back({"user", "Thanks"});
  std::string want = kHarmonyExpected;
  want.replace(want.find("@DATE@"), 6, FormatLocalTime("%Y-%m-%d"));
  EXPECT_EQ(f->Render(ChatInput{msgs, true, {}, kHarmonyTools}), want);
  // Without tools: no developer message unless there is a system one; a last assistant turn
  // without a generation prompt ends with <|return|>; reasoning_effort is a variable.
  ChatVar effort;
  effort.name = "reasoning_effort";
  effort.kind = ChatVar::Kind::kString;
  effort.str = "high";
  const std::string plain =
      f->Render(ChatInput{{{"user", "hi"}, {"assistant", "hello"}}, false, {effort}, ""});
  EXPECT_NE(plain.find("Reasoning: high\n"), std::string::npos);
  EXPECT_EQ(plain.find("developer"), std::string::npos);
  EXPECT_NE(plain.find("<|start|>user<|message|>hi<|end|><|start|>assistant<|channel|>final"
                       "<|message|>hello<|return|>"),
            std::string::npos);
  ChatVar other = effort;
  other.name = "enable_thinking";
  EXPECT_THROW(f->Render(ChatInput{{{"user", "hi"}}, true, {other}, ""}), Error);
  EXPECT_THROW(f->Render(ChatInput{{{"tool", "x"}}, true, {}, ""}), Error);  // no call before
  // A model's template with harmony's markers is recognized as harmony.
  info.chat_template =
      "{{ '<|start|>' }}{% for m in messages %}{{ m.content }}{% endfor %}"
      "{% if tools %}{% endif %}<|channel|>";
  EXPECT_EQ(ChatFormatter::Create(info)->tool_format(), ToolFormat::kHarmony);
  EXPECT_EQ(ResolveChatTemplate(info, ""), "harmony");
}

struct HarmonyCase {
  std::string reply;
  bool tools;
  std::string reasoning, content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
};

const HarmonyCase kHarmonyCases[] = {
    // Reasoning, then the answer (how gpt-oss continues "<|start|>assistant"; <|end|> is not
    // rendered, the next header begins with <|start|>).
    {"<|channel|>analysis<|message|>User says hi. Reply.<|start|>assistant<|channel|>final"
     "<|message|>Hello! <|how|> are you?",
     false,
     "User says hi. Reply.",
     "Hello! <|how|> are you?",
     {}},
    // With control tokens rendered (render_special): <|end|> and <|return|> end messages too.
    {"<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>"
     "ok<|return|>",
     false,
     "think",
     "ok",
     {}},
    // A call as the harmony docs write it (recipient after the channel, <|constrain|>).
    {"<|channel|>analysis<|message|>Need weather.<|start|>assistant<|channel|>commentary "
     "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}",
     true,
     "Need weather.",
     "",
     {{"get_weather", "{\"city\":\"Paris\"}"}}},
    // ... and as gpt-oss's template writes it (recipient in the role part).
    {"<|start|>assistant to=functions.now<|channel|>commentary json<|message|>{}<|call|>",
     true,
     "",
     "",
     {{"now", "{}"}}},
    // A commentary preamble without a recipient is shown; a call nobody offered is content.
    {"<|channel|>commentary<|message|>Checking.<|start|>assistant<|channel|>commentary "
     "to=functions.f <|constrain|>json<|message|>{\"a\": 1}",
     false,
     "",
     "Checking.{\"a\": 1}",
     {}},
    // Arguments that are not a JSON object: not a call, the text is content.
    {"<|channel|>commentary to=functions.f<|message|>{\"a\": ", true, "", "{\"a\": ", {}},
    // Plain text (a reply forced into JSON by response_format): content as written.
    {"{\"answer\": 42}", true, "", "{\"answer\": 42}", {}},
    {"<|", false, "", "<|", {}},
    // A call's arguments end only at the end of the call: markers inside its strings are text
    // (a forced call's grammar lets a random model write them).
    {"<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"q\": \"a<|start|>b"
     "<|channel|>\"}",
     true,
     "",
     "",
     {{"f", "{\"q\":\"a<|start|>b<|channel|>\"}"}}},
    // Header markers out of place in a shown body are dropped, whatever the pieces.
    {"x<|message|>y<|constrain|>z", false, "", "xyz", {}},
    // A "header" that never reaches <|message|> within 512 bytes is text (its markers dropped).
    {"<|channel|>" + std::string(600, 'x'), false, "", std::string(600, 'x'), {}},
    // Cut inside a header (max_tokens): the header is not shown.
    {"<|channel|>analysis<|message|>hm<|start|>assistant<|channel|>fin", false, "hm", "", {}},
};

// Reasoning, content and calls are the same whatever pieces the reply arrives in, and the same
// through ParseToolCalls.
TEST(Harmony, ParserSplitsChannelsWhateverThePieces) {
  for (const HarmonyCase& c : kHarmonyCases) {
    for (size_t piece : {1, 2, 3, 5, 11, 1000}) {
      HarmonyParser p(c.tools);
      std::string reasoning, content;
      for (size_t at = 0; at < c.reply.size(); at += piece)
        p.Feed(std::string_view(c.reply).substr(at, piece), &reasoning, &content);
      p.Finish(&reasoning, &content);
      EXPECT_EQ(reasoning, c.reasoning) << c.reply << " piece " << piece;
      EXPECT_EQ(content, c.content) << c.reply << " piece " << piece;
      ASSERT_EQ(p.calls().size(), c.calls.size()) << c.reply;
      for (size_t k = 0; k < c.calls.size(); ++k) {
        EXPECT_EQ(p.calls()[k].name, c.calls[k].first);
        EXPECT_EQ(p.calls()[k].arguments, c.calls[k].second);
      }
    }
    if (c.tools) {
      const ParsedToolCalls pr = ParseToolCalls(ToolFormat::kHarmony, c.reply);
      EXPECT_EQ(pr.calls.size(), c.calls.size()) << c.reply;
    }
  }
}

}  // namespace
}  // namespace paddock
