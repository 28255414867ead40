// paddock/chat.h: conversations to prompt text: built-in chat template families and the
// model's own Jinja template, rendered by Paddock's Jinja subset (src/chat/). A client of the
// engine: needs only a ModelInfo.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "paddock/engine.h"

namespace paddock {

// Chat formatting. Built-in templates for the common families; the model's own template
// (GGUF tokenizer.chat_template) is recognized by its markers and mapped to one of them.
// A function call an assistant made: the id the API gave it, the function's name and its
// arguments (a JSON object, as text).
struct ChatToolCall {
  std::string id, name, arguments;
};
struct ChatMessage {
  std::string role;  // system, user, assistant, tool
  std::string content;
  std::vector<ChatToolCall> tool_calls = {};  // assistant: the calls it made
  std::string tool_call_id = {};              // tool: the call this message answers
  std::string reasoning_content = {};         // assistant: its reasoning (templates decide)
};
// A variable handed to a Jinja chat template besides the messages (OpenAI-compatible servers'
// chat_template_kwargs, e.g. enable_thinking: false): a boolean, an integer, a number, a string,
// null, or any JSON value (kJson: `str` holds its text; lists and objects become Jinja lists and
// dicts).
struct ChatVar {
  enum class Kind { kNull, kBool, kInt, kNumber, kString, kJson };
  std::string name;
  Kind kind = Kind::kNull;
  bool b = false;
  int64_t i = 0;
  double num = 0;
  std::string str;
  bool optional = false;  // a hint (reasoning_effort): dropped where the chat takes no variables
};

// How a model writes tool calls, and how calls and results are written back into its prompt:
//   kHermes:  <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call> blocks (Hermes, Qwen
//             2.5/3 and every template without a convention of its own); results in a user turn
//             as <tool_response> blocks.
//   kLlama3:  the reply is one JSON object {"name": ..., "parameters": {...}} (Llama 3.1-3.3's
//             JSON tool calling, optionally after <|python_tag|>); results in an `ipython` turn.
//   kMistral: [TOOL_CALLS] [{"name": ..., "arguments": {...}, "id": ...}, ...]; the tools in
//             [AVAILABLE_TOOLS] before the last user turn, results as [TOOL_RESULTS] blocks.
//   kHarmony: gpt-oss's harmony format: a reply is messages on channels (analysis: reasoning,
//             final: the answer); a call is a commentary message addressed to=functions.NAME
//             with JSON arguments, ended by <|call|>; the tools are a TypeScript namespace in
//             the developer message, results a message from functions.NAME (HarmonyParser).
enum class ToolFormat { kHermes, kLlama3, kMistral, kHarmony };
const char* ToolFormatName(ToolFormat format);

// One conversation to render: the messages, whether to open the assistant's turn, template
// variables, and the tools the model may call (a JSON array of OpenAI function tools,
// {"type": "function", "function": {"name", "description", "parameters"}}; empty: none).
struct ChatInput {
  std::vector<ChatMessage> messages;
  bool add_generation_prompt = true;
  std::vector<ChatVar> vars;
  std::string tools;
};

// The calls in a reply written in `format`: the text outside them (trimmed) and each call's
// name and arguments (a JSON object as text; an id where the model wrote one). Text that looks
// like a call but does not parse stays content.
struct ParsedToolCalls {
  std::string content;
  std::vector<ChatToolCall> calls;
};
ParsedToolCalls ParseToolCalls(ToolFormat format, std::string_view text);

// Streams a reply's content until its tool calls start (an opening cut across pieces is held
// back), then keeps the rest for ParseToolCalls at the end. For kLlama3 a reply whose first
// non-blank character is '{' (or that starts with <|python_tag|>) is held whole.
class ToolCallSplitter {
 public:
  explicit ToolCallSplitter(ToolFormat format = ToolFormat::kHermes) : format_(format) {}
  void Feed(std::string_view text, std::string* content);
  // The text from where the calls start (empty if they did not).
  const std::string& tail() const { return tail_; }
  std::string TakeHeld() { return std::exchange(held_, {}); }

 private:
  ToolFormat format_;
  bool in_calls_ = false, started_ = false;
  std::string held_, tail_;
};

// A harmony reply (gpt-oss) parsed as it arrives. The model continues the prompt's
// `<|start|>assistant` with message headers and bodies; the tokenizer renders the markers
// <|start|>, <|channel|>, <|message|> and <|constrain|> as text (<|end|> is not rendered; a
// body also ends at the next header). Bodies on the analysis channel are reasoning, those on
// final (or commentary without a recipient: a preamble the user sees) are content, those
// addressed to=functions.NAME are calls (with tools; else their text is content). Text before
// any header is content, so a reply forced into plain JSON (response_format) stays whole.
// A marker cut across pieces is held back until it is whole.
class HarmonyParser {
 public:
  explicit HarmonyParser(bool tools = false) : tools_(tools) {}
  void Feed(std::string_view text, std::string* reasoning, std::string* content);
  // The end of the reply: what was held back, and the calls (in order).
  void Finish(std::string* reasoning, std::string* content);
  const std::vector<ChatToolCall>& calls() const { return calls_; }

 private:
  enum class Sink { kContent, kReasoning, kCall, kDrop };
  void Header(std::string_view header);
  void Body(std::string_view s, std::string* reasoning, std::string* content);
  void EndMessage();
  bool tools_;
  bool in_header_ = false, started_ = false;
  Sink sink_ = Sink::kContent;
  std::string held_, header_, call_name_, call_args_, pending_content_;
  std::vector<ChatToolCall> calls_;
};
// A reasoning model's output split as it arrives: the text of a <think> ... </think> section
// at its start (or from the start, when the prompt opened it) is reasoning, the rest content.
// A tag cut across pieces is held back until it is whole.
class ReasoningSplitter {
 public:
  explicit ReasoningSplitter(bool thinking = false) : state_(thinking ? kThink : kStart) {}
  void Feed(std::string_view text, std::string* reasoning, std::string* content);
  void Finish(std::string* reasoning, std::string* content);

 private:
  enum State { kStart, kThink, kContent } state_;
  bool content_started_ = false;
  std::string held_;
  void Content(std::string_view s, std::string* content);
};

// A whole harmony reply through HarmonyParser: its content and calls (calls only with tools),
// its reasoning into *reasoning.
ParsedToolCalls ParseHarmony(std::string_view text, bool tools, std::string* reasoning);

// Names: chatml, llama2, llama3, mistral, phi3, gemma, zephyr, harmony.
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
  // The whole input, tools and tool messages included: a Jinja template that knows tools gets
  // them as `tools` and the messages with their `tool_calls` / `tool_call_id`; otherwise they
  // are written in the family's convention (tool_format()) around the template.
  std::string Render(const ChatInput& input) const;
  // The convention this model's calls are written and read in.
  ToolFormat tool_format() const;
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
