// Chat templates: each built-in family renders a multi-turn conversation with a system prompt
// and a generation prompt exactly as its reference template does; a model's own Jinja
// template is recognized by its markers; end-of-turn tokens stop generation.
#include <gtest/gtest.h>

#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "model/tokenizer.h"
#include "paddock/paddock.h"
#include "test_util.h"

namespace paddock {
namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "You are terse."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye"}};

TEST(Chat, ChatMl) {
  EXPECT_EQ(RenderChat("chatml", kConversation),
            "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
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
  EXPECT_EQ(RenderChat("llama2", kConversation),
            "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi [/INST] Hello. </s><s>[INST] Bye [/INST]");
}

TEST(Chat, Mistral) {
  EXPECT_EQ(RenderChat("mistral", kConversation), "[INST] You are terse.\n\nHi [/INST]Hello.</s>[INST] Bye [/INST]");
}

TEST(Chat, Phi3AndZephyr) {
  EXPECT_EQ(RenderChat("phi3", kConversation),
            "<|system|>\nYou are terse.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello.<|end|>\n<|user|>\nBye<|end|>\n<|assistant|>\n");
  EXPECT_EQ(RenderChat("zephyr", kConversation),
            "<|system|>\nYou are terse.</s>\n<|user|>\nHi</s>\n<|assistant|>\nHello.</s>\n<|user|>\nBye</s>\n<|assistant|>\n");
}

TEST(Chat, GemmaFoldsTheSystemPromptIntoTheFirstTurn) {
  EXPECT_EQ(RenderChat("gemma", kConversation),
            "<start_of_turn>user\nYou are terse.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
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
  info.chat_template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}";
  EXPECT_EQ(ResolveChatTemplate(info, ""), "chatml");
  info.chat_template = "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}";
  EXPECT_EQ(ResolveChatTemplate(info, ""), "llama3");
  info.chat_template = "{{ '<start_of_turn>' + role + '\n' }}";
  EXPECT_EQ(ResolveChatTemplate(info, ""), "gemma");
  info.chat_template = "{{'<|user|>' + '\n' + message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}";
  EXPECT_EQ(ResolveChatTemplate(info, ""), "phi3");
  info.chat_template = "{{ bos_token + '[INST] ' + content + ' [/INST]' }}";
  EXPECT_EQ(ResolveChatTemplate(info, ""), "mistral");
  EXPECT_EQ(ResolveChatTemplate(info, "gemma"), "gemma");  // the override wins
  EXPECT_THROW(ResolveChatTemplate(info, "nope"), Error);
  info.chat_template.clear();
  info.arch = "qwen2";
  EXPECT_EQ(ResolveChatTemplate(info, ""), "chatml");
}

TEST(Chat, EndOfTurnTokensEndGeneration) {
  // EOS, the GGUF end-of-turn id, and conventional end-of-turn control tokens; the same
  // spelling as an ordinary (non-control) token does not count.
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetString("tokenizer.ggml.model", "llama");
  w.SetStringArray("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "<|im_end|>", "<end_of_turn>", "<|eot_id|>", "a", "<|end|>", "b"});
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

}  // namespace
}  // namespace paddock
