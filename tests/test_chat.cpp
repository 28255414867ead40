// Chat templates: each built-in family renders a multi-turn conversation with a system prompt
// and a generation prompt exactly as its reference template does; a model's own Jinja
// template is recognized by its markers; end-of-turn tokens stop generation.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "model/tokenizer.h"
#include "paddock/paddock.h"
#include "synth/synth.h"
#include "test_util.h"

namespace paddock {
namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "You are terse."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye"}};

TEST(Chat, ChatMl) {
  EXPECT_EQ(RenderChat("chatml", kConversation),
            "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>"
            "assistant\n");
}

TEST(Chat, Llama3) {
  EXPECT_EQ(RenderChat("llama3", kConversation),
            "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(Chat, Llama2) {
  EXPECT_EQ(
      RenderChat("llama2", kConversation),
      "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi [/INST] Hello. </s><s>[INST] Bye [/INST]");
}

TEST(Chat, Mistral) {
  EXPECT_EQ(RenderChat("mistral", kConversation),
            "[INST] You are terse.\n\nHi [/INST]Hello.</s>[INST] Bye [/INST]");
}

TEST(Chat, Phi3AndZephyr) {
  EXPECT_EQ(RenderChat("phi3", kConversation),
            "<|system|>\nYou are "
            "terse.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello.<|end|>\n<|user|>\nBye<|end|>"
            "\n<|assistant|>\n");
  EXPECT_EQ(RenderChat("zephyr", kConversation),
            "<|system|>\nYou are "
            "terse.</s>\n<|user|>\nHi</s>\n<|assistant|>\nHello.</s>\n<|user|>\nBye</"
            "s>\n<|assistant|>\n");
}

TEST(Chat, GemmaFoldsTheSystemPromptIntoTheFirstTurn) {
  EXPECT_EQ(RenderChat("gemma", kConversation),
            "<start_of_turn>user\nYou are "
            "terse.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
}

TEST(Chat, NoGenerationPromptAndErrors) {
  EXPECT_EQ(RenderChat("chatml", {{"user", "Hi"}}, false), "<|im_start|>user\nHi<|im_end|>\n");
  EXPECT_THROW(RenderChat("chatml", {{"tool", "x"}}), Error);
  EXPECT_THROW(RenderChat("jinja-of-the-future", kConversation), Error);
}

TEST(Chat, RecognizesTheModelsTemplate) {
  ModelInfo info;
  info.arch = "llama";
  EXPECT_EQ(ResolveChatTemplate(info, ""), "llama2");  // no template: the architecture's usual one
  info.chat_template =
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}";
  EXPECT_EQ(ResolveChatTemplate(info, ""), "chatml");
  info.chat_template = "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}";
  EXPECT_EQ(ResolveChatTemplate(info, ""), "llama3");
  info.chat_template = "{{ '<start_of_turn>' + role + '\n' }}";
  EXPECT_EQ(ResolveChatTemplate(info, ""), "gemma");
  info.chat_template =
      "{{'<|user|>' + '\n' + message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}";
  EXPECT_EQ(ResolveChatTemplate(info, ""), "phi3");
  info.chat_template = "{{ bos_token + '[INST] ' + content + ' [/INST]' }}";
  EXPECT_EQ(ResolveChatTemplate(info, ""), "mistral");
  EXPECT_EQ(ResolveChatTemplate(info, "gemma"), "gemma");  // the override wins
  EXPECT_THROW(ResolveChatTemplate(info, "nope"), Error);
  info.chat_template.clear();
  info.arch = "qwen2";
  EXPECT_EQ(ResolveChatTemplate(info, ""), "chatml");
  info.arch = "gemma3";  // a Gemma file without a template: the Gemma turns
  EXPECT_EQ(ResolveChatTemplate(info, ""), "gemma");
}

TEST(Chat, EndOfTurnTokensEndGeneration) {
  // EOS, the GGUF end-of-turn id, and conventional end-of-turn control tokens; the same
  // spelling as an ordinary (non-control) token does not count.
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetString("tokenizer.ggml.model", "llama");
  w.SetStringArray("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "<|im_end|>", "<end_of_turn>",
                                             "<|eot_id|>", "a", "<|end|>", "b"});
  w.SetF32Array("tokenizer.ggml.scores", std::vector<float>(9, 0.0f));
  w.SetI32Array("tokenizer.ggml.token_type", {2, 3, 3, 3, 3, 1, 1, 3, 1});
  w.SetI32("tokenizer.ggml.eot_token_id", 8);
  const std::string path = test::TempPath("eog-vocab.gguf");
  w.Write(path);
  const GgufFile g = GgufFile::Open(path);
  const Tokenizer t = Tokenizer::FromGguf(g);
  for (int id : {2, 3, 4, 7, 8}) EXPECT_TRUE(t.IsEndOfGeneration(id)) << id;
  for (int id : {0, 1, 5, 6}) EXPECT_FALSE(t.IsEndOfGeneration(id)) << id;
}

// gpt-oss's harmony vocabulary: <|return|> and <|call|> end a generation, <|end|> (the end of one
// message of several) does not; the header markers are rendered and matched as text, as
// llama.cpp does; <|end|> stays unrendered.
TEST(Chat, HarmonyVocabularyEndsAtReturnAndCallAndRendersHeaders) {
  const std::string path = test::TempPath("harmony-vocab.gguf");
  WriteSyntheticModel(SynthPreset("tiny-gpt-oss"), path);
  const GgufFile g = GgufFile::Open(path);
  const Tokenizer t = Tokenizer::FromGguf(g);
  auto id = [&](std::string_view piece) {
    for (int i = 0; i < t.vocab_size(); ++i)
      if (t.Piece(i) == piece) return i;
    ADD_FAILURE() << piece;
    return 0;
  };
  EXPECT_TRUE(t.IsEndOfGeneration(id("<|return|>")));
  EXPECT_TRUE(t.IsEndOfGeneration(id("<|call|>")));
  EXPECT_TRUE(t.IsEndOfGeneration(2));
  EXPECT_FALSE(t.IsEndOfGeneration(id("<|end|>")));
  for (const char* m : {"<|start|>", "<|channel|>", "<|message|>", "<|constrain|>"}) {
    EXPECT_EQ(t.Decode(5, id(m)), m);
    EXPECT_EQ(t.Attr(id(m)), TokenAttr::kUserDefined);
    EXPECT_FALSE(t.IsEndOfGeneration(id(m)));
  }
  EXPECT_EQ(t.Decode(5, id("<|end|>")), "");
  EXPECT_EQ(t.Decode(5, id("<|return|>")), "");
  const std::vector<int32_t> ids = t.Encode("<|channel|>final<|message|>", false);
  EXPECT_EQ(ids.front(), id("<|channel|>"));
  EXPECT_NE(std::find(ids.begin(), ids.end(), id("<|message|>")), ids.end());
}

}  // namespace
}  // namespace paddock

#include "chat/jinja.h"

namespace paddock {
namespace {

// The chat templates as the families publish them (Hugging Face tokenizer_config.json /
// GGUF tokenizer.chat_template), checked in under tests/chat_templates/, rendered by the Jinja
// subset.
std::string Template(const char* name) {
  std::ifstream in(std::string(PADDOCK_TEST_DATA) + "/chat_templates/" + name);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();  // (a missing file renders nothing: the checks below fail)
}
const std::string kChatMlJinja = Template("chatml.jinja");
const std::string kLlama3Jinja = Template("llama3.jinja");
const std::string kLlama2Jinja = Template("llama2.jinja");
const std::string kMistralJinja = Template("mistral.jinja");
const std::string kPhi3Jinja = Template("phi3.jinja");
const std::string kGemmaJinja = Template("gemma.jinja");

const std::vector<ChatMessage> kNoSystem = {
    {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye"}};

TEST(Jinja, RendersTheFamiliesTemplates) {
  EXPECT_EQ(JinjaTemplate(kChatMlJinja).RenderChat(kConversation, true, "", "<|endoftext|>"),
            RenderChat("chatml", kConversation));
  EXPECT_EQ(
      JinjaTemplate(kChatMlJinja).RenderChat(kNoSystem, false, "", ""),
      "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
      "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n");
  EXPECT_EQ(JinjaTemplate(kLlama3Jinja)
                .RenderChat(kConversation, true, "<|begin_of_text|>", "<|eot_id|>"),
            "<|begin_of_text|>" + RenderChat("llama3", kConversation));
  EXPECT_EQ(
      JinjaTemplate(kLlama2Jinja).RenderChat(kConversation, true, "<s>", "</s>"),
      "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi [/INST] Hello. </s><s>[INST] Bye [/INST]");
  EXPECT_EQ(JinjaTemplate(kMistralJinja).RenderChat(kNoSystem, true, "<s>", "</s>"),
            "<s>[INST] Hi [/INST]Hello.</s>[INST] Bye [/INST]");
  EXPECT_EQ(JinjaTemplate(kPhi3Jinja).RenderChat(kConversation, true, "<s>", "<|endoftext|>"),
            RenderChat("phi3", kConversation));
  EXPECT_EQ(
      JinjaTemplate(kPhi3Jinja).RenderChat(kNoSystem, false, "<s>", "<|endoftext|>"),
      "<|user|>\nHi<|end|>\n<|assistant|>\nHello.<|end|>\n<|user|>\nBye<|end|>\n<|endoftext|>");
  EXPECT_EQ(JinjaTemplate(kGemmaJinja).RenderChat(kNoSystem, true, "<bos>", "<eos>"),
            "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>"
            "\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
}

TEST(Jinja, RaiseExceptionAndUnsupportedConstructsAreErrors) {
  try {
    JinjaTemplate(kGemmaJinja).RenderChat(kConversation, true, "", "");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("System role not supported"), std::string::npos)
        << e.what();
  }
  // Found by fuzzing: an integer literal past int64 was an uncaught std::out_of_range.
  EXPECT_THROW(JinjaTemplate("{% if messages[999999999999999999999999] %}{% endif %}"), Error);
  EXPECT_THROW(JinjaTemplate("{{ 'ab' * 100000000000 }}").RenderChat(kConversation, true, "", ""),
               Error);
  for (const char* bad :
       {"{% call f() %}x{% endcall %}", "{{ x | wordcount }}", "{% for m in messages %}", "{{ 'a' ",
        "{% if x %}{% endfor %}", "{{ x is divisibleby(3) }}", "{% set x %}a{% endset %}"}) {
    EXPECT_THROW(JinjaTemplate(bad).RenderChat(kConversation, true, "", ""), Error) << bad;
  }
  try {
    JinjaTemplate("{% call f() %}{% endcall %}");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'call'"), std::string::npos)
        << e.what();  // names the construct
  }
}

// Macros (gpt-oss's template renders its tools with them): parameters by position, by name and
// by default; recursion; the body sees the template's variables but not the caller's loop
// variables; a namespace set inside is shared; misuse is an Error naming the macro.
TEST(Jinja, Macros) {
  auto r = [](const std::string& src) {
    return JinjaTemplate(src).RenderChat(kConversation, true, "", "");
  };
  EXPECT_EQ(r("{%- macro greet(name, punct='!') -%}hi {{ name }}{{ punct }}{%- endmacro -%}"
              "{{ greet('a') }} {{ greet('b', '?') }} {{ greet(punct='.', name='c') }}"),
            "hi a! hi b? hi c.");
  EXPECT_EQ(r("{%- macro fact(n) -%}{%- if n <= 1 -%}1{%- else -%}{{ n }}*{{ fact(n - 1) }}"
              "{%- endif -%}{%- endmacro -%}{{ fact(4) }}"),
            "4*3*2*1");
  EXPECT_EQ(r("{%- macro roles() -%}{% for m in messages %}{{ m.role[0] }}{% endfor %}"
              "{%- endmacro -%}{{ roles() | length }}:{{ roles() }}"),
            "4:suau");
  EXPECT_EQ(r("{%- macro see() -%}[{{ x is defined }}]{%- endmacro -%}"
              "{% for x in [1] %}{{ see() }}{% endfor %}"),
            "[False]");
  EXPECT_EQ(r("{%- set ns = namespace(n=0) -%}{%- macro bump() -%}{%- set ns.n = ns.n + 1 -%}"
              "{%- endmacro -%}{{ bump() }}{{ bump() }}{{ ns.n }}"),
            "2");
  EXPECT_EQ(r("{%- macro t(s) -%}{{ s.type }}{%- endmacro -%}{{ t({'type': 'string'}) + '[]' }}"),
            "string[]");
  // A close inside open brackets does not end the tag (as Jinja's lexer balances them).
  EXPECT_EQ(r("{{ {'a': {'b': 1}}['a']['b'] }}|{{ [[1, 2]][0][1] }}"), "1|2");
  for (const char* bad :
       {"{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}", "{% macro f(a) %}{% endmacro %}{{ f(b=1) }}",
        "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "{% macro f() %}x",
        "{% if 1 %}{% macro f() %}{% endmacro %}{% endif %}", "{% macro f(a b) %}{% endmacro %}"}) {
    EXPECT_THROW(r(bad), Error) << bad;
  }
  // strftime_now: the local date, in the format asked.
  const std::string year = r("{{ strftime_now('%Y') }}");
  EXPECT_EQ(year.size(), 4u);
  EXPECT_GE(std::stoi(year), 2024);
  EXPECT_THROW(r("{{ strftime_now() }}"), Error);
}

TEST(Jinja, ExpressionsFiltersAndWhitespaceControl) {
  auto r = [](const char* src) {
    return JinjaTemplate(src).RenderChat(kConversation, true, "<s>", "</s>");
  };
  EXPECT_EQ(r("{{ messages | length }} {{ messages[-1].content }} {{ messages[1:3] | length }} {{ "
              "(messages | first).role }}"),
            "4 Bye 2 system");
  EXPECT_EQ(
      r("{% for m in messages %}{{ loop.index }}{% if not loop.last %},{% endif %}{% endfor %}"),
      "1,2,3,4");
  EXPECT_EQ(r("{% set ns = namespace(n=0) %}{% for m in messages %}{% if m.role == 'user' %}{% set "
              "ns.n = ns.n + 1 %}{% endif %}{% endfor %}{{ ns.n }}"),
            "2");
  EXPECT_EQ(r("{{ '  x  ' | trim }}|{{ 'ab' | upper }}|{{ 'a-b' .replace('-', '+') }}|{{ 'x' ~ 3 ~ "
              "none }}|{{ 7 // 2 }} {{ -7 % 3 }} {{ 1 / 2 }}"),
            "x|AB|a+b|x3None|3 2 0.5");
  EXPECT_EQ(r("{{ undefined_thing is defined }} {{ 'a' in 'cat' }} {{ 3 if false else 4 }} {{ x | "
              "default('d') }} {{ [1, 2] | tojson }}"),
            "False True 4 d [1, 2]");
  EXPECT_EQ(r("{{ 'a b  c'.split() | join('-') }} {{ 'Hello'.startswith('He') }} {{ {'k': "
              "1}.get('k') }} {{ {'k': 1}.get('z', 9) }}"),
            "a-b-c True 1 9");
  // HF renders with trim_blocks and lstrip_blocks; '-' strips whitespace explicitly.
  EXPECT_EQ(r("{% if true %}\n  a\n{% endif %}\nb"), "  a\nb");
  EXPECT_EQ(r("x  {%- if true -%}  y  {%- endif -%}  z"), "xyz");
  EXPECT_EQ(r("{# a comment #}{{ bos_token }}"), "<s>");
}

TEST(Jinja, ChatFormatterPrefersTheModelsTemplateAndFallsBack) {
  ModelInfo info;
  info.arch = "llama";
  info.bos_token = "<|begin_of_text|>";
  info.chat_template = kLlama3Jinja;
  auto f = ChatFormatter::Create(info);
  EXPECT_EQ(f->description(), "the model's template");
  EXPECT_EQ(f->Render(kConversation), "<|begin_of_text|>" + RenderChat("llama3", kConversation));
  info.chat_template = std::string(kChatMlJinja) + "{% call unsupported() %}{% endcall %}";
  f = ChatFormatter::Create(info);
  EXPECT_EQ(f->description(), "built-in chatml");
  EXPECT_NE(f->warning().find("call"), std::string::npos) << f->warning();
  EXPECT_EQ(f->Render(kConversation), RenderChat("chatml", kConversation));
  info.chat_template = kGemmaJinja;  // refuses system turns: still usable
  f = ChatFormatter::Create(info);
  EXPECT_EQ(f->description(), "the model's template");
  EXPECT_EQ(ChatFormatter::Create(info, "phi3")->description(), "built-in phi3");
}

}  // namespace
}  // namespace paddock

namespace paddock {
namespace {

// chat_template_kwargs reach the template as variables (Qwen3's enable_thinking switch).
TEST(Jinja, TemplateVariables) {
  const JinjaTemplate t(
      "{% for m in messages %}{{ m.content }}{% endfor %}"
      "{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}"
      "{{ style }}{{ n + 1 }}");
  ChatVar off;
  off.name = "enable_thinking";
  off.kind = ChatVar::Kind::kBool;
  off.b = false;
  ChatVar style;
  style.name = "style";
  style.kind = ChatVar::Kind::kString;
  style.str = "!";
  ChatVar n;
  n.name = "n";
  n.kind = ChatVar::Kind::kInt;
  n.i = 41;
  EXPECT_EQ(t.RenderChat({{"user", "hi"}}, true, "", "", {off, style, n}), "hi<think></think>!42");
  EXPECT_TRUE(ChatFormatter::OpensReasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(ChatFormatter::OpensReasoning("<think>a</think>\n"));
}

}  // namespace
}  // namespace paddock
