// paddock/chat.h: conversations to prompt text: built-in chat template families and the
// model's own Jinja template, rendered by Paddock's Jinja subset (src/chat/). A client of the
// engine: needs only a ModelInfo.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "paddock/engine.h"

namespace paddock {

// Chat formatting. Built-in templates for the common families; the model's own template
// (GGUF tokenizer.chat_template) is recognized by its markers and mapped to one of them.
struct ChatMessage {
  std::string role;  // system, user, assistant
  std::string content;
};
// A variable handed to a Jinja chat template besides the messages (OpenAI-compatible servers'
// chat_template_kwargs, e.g. enable_thinking: false): a boolean, an integer, a number, a string
// or null.
struct ChatVar {
  enum class Kind { kNull, kBool, kInt, kNumber, kString };
  std::string name;
  Kind kind = Kind::kNull;
  bool b = false;
  int64_t i = 0;
  double num = 0;
  std::string str;
};

// Names: chatml, llama2, llama3, mistral, phi3, gemma, zephyr.
const std::vector<std::string>& ChatTemplateNames();
// The family of `override_name` if set (Error if unknown), else the one the model's template
// belongs to, else the architecture's usual one (chatml for unknown ones).
std::string ResolveChatTemplate(const ModelInfo& info, const std::string& override_name);
// Renders a conversation; add_generation_prompt opens the assistant's turn. Control markers are
// spelled as text: tokenize with parse_special. Throws Error on an unknown role or template.
std::string RenderChat(const std::string& template_name, const std::vector<ChatMessage>& messages,
                       bool add_generation_prompt = true);

// Formats conversations for a model: its own Jinja chat template (GGUF tokenizer.chat_template,
// or a file) when Paddock can render it, else the built-in family the template is recognized
// as. Thread-safe after creation.
class ChatFormatter {
 public:
  // family_override: a built-in family name (wins), or empty. template_file: a Jinja template
  // file to use instead of the model's, or empty. Throws Error for an unknown family, an
  // unreadable file, or a template file Paddock cannot render (naming the construct).
  static std::unique_ptr<ChatFormatter> Create(const ModelInfo& info,
                                               const std::string& family_override = "",
                                               const std::string& template_file = "");
  ~ChatFormatter();
  std::string Render(const std::vector<ChatMessage>& messages,
                     bool add_generation_prompt = true) const;
  // With template variables: the Jinja template must be in use (a built-in family has no
  // variables: Error naming the first).
  std::string Render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                     const std::vector<ChatVar>& vars) const;
  // The rendered chat ends inside an opened reasoning section ("<think>"): what the model
  // writes first is its reasoning.
  static bool OpensReasoning(const std::string& rendered);
  // What is used, e.g. "the model's template" or "built-in chatml"; `warning` says why a
  // model template was not used (empty if it was, or there was none).
  const std::string& description() const { return description_; }
  const std::string& warning() const { return warning_; }

  struct Impl;

 private:
  ChatFormatter();
  std::unique_ptr<Impl> impl_;
  std::string description_, warning_;
};

}  // namespace paddock
