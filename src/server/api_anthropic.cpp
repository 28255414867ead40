// server/api_anthropic.cpp: Anthropic's Messages API (POST /v1/messages) over the OpenAI chat:
// the request's blocks (text, tool_use, tool_result, thinking) as chat messages, the reply as a
// message or as its event stream (message_start, content blocks with text, thinking and
// input_json deltas, message_delta, message_stop).
#include "server/api_dialects_internal.h"

namespace paddock::server::dialect_detail {
namespace {

// ---- Anthropic: request -------------------------------------------------------------------

// An assistant's tool_use block as an OpenAI tool call.
json ToolUseCall(const json& block, const std::string& bp) {
  OnlyKeys(block, bp, {"type", "id", "name", "input", "cache_control"});
  if (!Get(block, "name") || !block["name"].is_string() || !Get(block, "id") ||
      !block["id"].is_string())
    Refuse(bp, "a tool_use block needs a string 'id' and 'name'");
  const json input = Get(block, "input") ? block["input"] : json::object();
  if (!input.is_object()) Refuse(bp + ".input", "input must be an object");
  return {{"id", block["id"]},
          {"type", "function"},
          {"function", {{"name", block["name"]}, {"arguments", input.dump()}}}};
}

// A user's tool_result block as an OpenAI tool message (its text blocks joined).
json ToolResultMessage(const json& block, const std::string& bp) {
  OnlyKeys(block, bp, {"type", "tool_use_id", "content", "is_error", "cache_control"});
  if (!Get(block, "tool_use_id") || !block["tool_use_id"].is_string())
    Refuse(bp + ".tool_use_id", "a tool_result block needs a string 'tool_use_id'");
  std::string result;
  if (const json* c = Get(block, "content")) {
    if (c->is_string()) {
      result = *c;
    } else if (c->is_array()) {
      for (const auto& part : *c) {
        if (!part.is_object() || part.value("type", "") != "text" || !Get(part, "text"))
          Refuse(bp + ".content", "tool results hold text blocks only here");
        result += part["text"].get<std::string>();
      }
    } else {
      Refuse(bp + ".content", "content must be a string or text blocks");
    }
  }
  return {{"role", "tool"}, {"tool_call_id", block["tool_use_id"]}, {"content", result}};
}

// An image block's source: {"type": "base64", "media_type": ..., "data": ...} as a data: URL
// (or "url", which the chat parser refuses: nothing is fetched), for an OpenAI image_url part.
std::string ImageUrl(const json& block, const std::string& bp) {
  OnlyKeys(block, bp, {"type", "source", "cache_control"});
  const json* src = Get(block, "source");
  if (src == nullptr || !src->is_object() || !Get(*src, "type") || !(*src)["type"].is_string())
    Refuse(bp + ".source", "an image block needs a 'source' object with a 'type'");
  const std::string st = (*src)["type"].get<std::string>();
  if (st == "base64") {
    if (!Get(*src, "data") || !(*src)["data"].is_string())
      Refuse(bp + ".source.data", "a base64 image source needs a string 'data'");
    const std::string mt = Get(*src, "media_type") && (*src)["media_type"].is_string()
                               ? (*src)["media_type"].get<std::string>()
                               : "";
    return "data:" + mt + ";base64," + (*src)["data"].get<std::string>();
  }
  if (st == "url" && Get(*src, "url") && (*src)["url"].is_string())
    return (*src)["url"].get<std::string>();
  Refuse(bp + ".source.type", "image source type '" + st + "' is not supported (base64)");
}

// A content block list (or string) of one message into OpenAI messages: text joined; an
// assistant's tool_use as tool_calls and thinking as reasoning_content; a user's tool_result
// blocks as tool messages before its text.
void AnthropicMessage(const json& m, size_t i, json* out) {
  const std::string p = "messages[" + std::to_string(i) + "]";
  if (!m.is_object()) Refuse(p, "'" + p + "' must be an object");
  OnlyKeys(m, p, {"role", "content"});
  const json* role = Get(m, "role");
  if (role == nullptr || !role->is_string() || (*role != "user" && *role != "assistant"))
    Refuse(p + ".role", "role must be user or assistant");
  const bool assistant = *role == "assistant";
  const json* content = Get(m, "content");
  if (content == nullptr) Refuse(p + ".content", "'" + p + ".content' is required");
  json msg = {{"role", *role}};
  if (content->is_string()) {
    msg["content"] = *content;
    out->push_back(msg);
    return;
  }
  if (!content->is_array()) Refuse(p + ".content", "content must be a string or content blocks");
  std::string text, thinking;
  json calls = json::array();
  json parts = json::array();  // with images: the content as OpenAI parts
  for (size_t b = 0; b < content->size(); ++b) {
    const json& block = (*content)[b];
    const std::string bp = p + ".content[" + std::to_string(b) + "]";
    if (!block.is_object() || !Get(block, "type") || !block["type"].is_string())
      Refuse(bp + ".type", "each content block needs a string 'type'");
    const std::string type = block["type"];
    if (type == "text") {
      OnlyKeys(block, bp, {"type", "text", "cache_control", "citations"});
      if (!Get(block, "text") || !block["text"].is_string())
        Refuse(bp + ".text", "a text block needs a string 'text'");
      text += block["text"].get<std::string>();
    } else if (type == "tool_use" && assistant) {
      calls.push_back(ToolUseCall(block, bp));
    } else if (type == "tool_result" && !assistant) {
      out->push_back(ToolResultMessage(block, bp));
    } else if ((type == "thinking" || type == "redacted_thinking") && assistant) {
      if (type == "thinking" && Get(block, "thinking") && block["thinking"].is_string())
        thinking += block["thinking"].get<std::string>();
    } else if (type == "image" && !assistant) {
      const std::string url = ImageUrl(block, bp);
      if (!text.empty()) parts.push_back({{"type", "text"}, {"text", text}});
      text.clear();
      parts.push_back({{"type", "image_url"}, {"image_url", {{"url", url}}}});
    } else if (type == "image" || type == "document") {
      Refuse(bp + ".type", "content blocks of type '" + type + "' are not supported in a" +
                               (assistant ? "n assistant message"
                                          : " request: this model reads text and images"));
    } else {
      Refuse(bp + ".type", "content block type '" + type + "' is not supported in a" +
                               (assistant ? "n assistant" : " user") + " message");
    }
  }
  if (text.empty() && parts.empty() && calls.empty() && thinking.empty() && !assistant)
    return;  // tool results only
  if (!parts.empty()) {
    if (!text.empty()) parts.push_back({{"type", "text"}, {"text", text}});
    msg["content"] = parts;
  } else {
    msg["content"] = text;
  }
  if (!calls.empty()) msg["tool_calls"] = calls;
  if (!thinking.empty()) msg["reasoning_content"] = thinking;
  out->push_back(msg);
}

// A finish_reason and the stop string that ended it (null: none) as Anthropic's stop_reason;
// *sequence gets that string (stop_sequence), null otherwise.
std::string AnthropicStop(const std::string& finish, const json& stop, json* sequence) {
  *sequence = nullptr;
  if (finish == "length") return "max_tokens";
  if (finish == "tool_calls") return "tool_use";
  if (stop.is_string()) {
    *sequence = stop;
    return "stop_sequence";
  }
  return "end_turn";
}

// Anthropic's error types for OpenAI's (a server error is its api_error).
std::string AnthropicErrorType(const std::string& openai_type) {
  return openai_type == "server_error" || openai_type.empty() ? "api_error" : openai_type;
}

// The OpenAI reply (server/reply_reader.h) as a Messages API message, or its event stream:
// message_start, content blocks (thinking, text, tool_use) with their deltas, message_delta
// with the stop reason and usage, message_stop.
class AnthropicReplyOf final : public ReplyReader {
 public:
  AnthropicReplyOf(bool stream, std::string model, int n_prompt)
      : ReplyReader(stream),
        model_(std::move(model)),
        id_(NewId("msg_")),
        input_tokens_(n_prompt) {}

 private:
  void OnKeepAlive(std::string* out) override {
    Start(out);
    out->append(SseEvent("ping", {{"type", "ping"}}));
  }
  void OnError(const std::string& type, const std::string& message, std::string* out) override {
    const json e = {{"type", "error"},
                    {"error", {{"type", AnthropicErrorType(type)}, {"message", message}}}};
    out->append(stream() ? SseEvent("error", e) : api_detail::Dump(e));
  }
  void OnChunkBegin(std::string* out) override {
    if (stream()) Start(out);
  }
  void OnUsage(int prompt_tokens, int completion_tokens) override {
    if (!stream()) input_tokens_ = prompt_tokens;
    output_tokens_ = completion_tokens;
  }
  void OnReasoning(const std::string& text, std::string* out) override {
    if (!stream())
      return content_.push_back({{"type", "thinking"}, {"thinking", text}, {"signature", ""}});
    Delta("thinking", "thinking_delta", "thinking", text, out);
  }
  void OnText(const std::string& text, std::string* out) override {
    if (!stream()) return content_.push_back({{"type", "text"}, {"text", text}});
    Delta("text", "text_delta", "text", text, out);
  }
  void OnToolCall(const json& tc, std::string* out) override {
    const json id = tc.value("id", json());
    const json fn = tc.value("function", json::object());
    const json name = fn.value("name", json());
    const std::string arguments = fn.value("arguments", std::string());
    if (!stream()) {
      const json input = JsonOrDiscarded<json>(arguments);
      return content_.push_back(
          {{"type", "tool_use"}, {"id", id}, {"name", name}, {"input", input}});
    }
    Close(out);
    out->append(SseEvent(
        "content_block_start",
        {{"type", "content_block_start"},
         {"index", index_},
         {"content_block",
          {{"type", "tool_use"}, {"id", id}, {"name", name}, {"input", json::object()}}}}));
    out->append(SseEvent("content_block_delta",
                         {{"type", "content_block_delta"},
                          {"index", index_},
                          {"delta", {{"type", "input_json_delta"}, {"partial_json", arguments}}}}));
    open_ = "tool_use";
  }
  void OnFinish(const std::string& reason, const json& stop, std::string*) override {
    stop_ = AnthropicStop(reason, stop, &sequence_);
  }
  void OnEnd(std::string* out) override {
    if (!stream()) {
      const json a = {
          {"id", id_},
          {"type", "message"},
          {"role", "assistant"},
          {"model", model_},
          {"content", content_},
          {"stop_reason", stop_},
          {"stop_sequence", sequence_},
          {"usage", {{"input_tokens", input_tokens_}, {"output_tokens", output_tokens_}}}};
      out->append(api_detail::Dump(a));
      return;
    }
    Start(out);
    Close(out);
    out->append(SseEvent("message_delta",
                         {{"type", "message_delta"},
                          {"delta", {{"stop_reason", stop_}, {"stop_sequence", sequence_}}},
                          {"usage", {{"output_tokens", output_tokens_}}}}));
    out->append(SseEvent("message_stop", {{"type", "message_stop"}}));
  }

  void Start(std::string* out) {
    if (started_) return;
    started_ = true;
    json msg = {{"id", id_},
                {"type", "message"},
                {"role", "assistant"},
                {"model", model_},
                {"content", json::array()},
                {"stop_reason", nullptr},
                {"stop_sequence", nullptr},
                {"usage", {{"input_tokens", input_tokens_}, {"output_tokens", 0}}}};
    out->append(SseEvent("message_start", {{"type", "message_start"}, {"message", msg}}));
  }
  void Close(std::string* out) {
    if (open_.empty()) return;
    out->append(
        SseEvent("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}}));
    open_.clear();
    ++index_;
  }
  void Delta(const char* block, const char* delta_type, const char* field, const std::string& text,
             std::string* out) {
    if (open_ != block) {
      Close(out);
      json cb = {{"type", block}, {field, ""}};
      if (std::string(block) == "thinking") cb["signature"] = "";
      out->append(
          SseEvent("content_block_start",
                   {{"type", "content_block_start"}, {"index", index_}, {"content_block", cb}}));
      open_ = block;
    }
    out->append(
        SseEvent("content_block_delta", {{"type", "content_block_delta"},
                                         {"index", index_},
                                         {"delta", {{"type", delta_type}, {field, text}}}}));
  }

  std::string model_, id_;
  int input_tokens_;
  int output_tokens_ = 0;
  bool started_ = false;
  std::string open_;  // the open content block's type (streaming)
  int index_ = 0;
  json content_ = json::array();  // the whole message's blocks
  std::string stop_ = "end_turn";
  json sequence_;  // stop_sequence
};

// tools (name, description, input_schema) and tool_choice (auto, any, tool, none) as the
// chat's function tools.
void AnthropicTools(const json& j, json* out) {
  json& o = *out;
  json tools = FunctionTools(j, "input_schema", [](const json& t, const std::string& tp) {
    if (!t.is_object()) Refuse(tp, "a tool must be an object");
    OnlyKeys(t, tp, {"name", "description", "input_schema", "type", "cache_control"});
    if (Get(t, "type") && t["type"] != "custom")
      Refuse(tp + ".type", "server tools ('" + t["type"].dump() + "') are not available here");
  });
  if (!tools.is_null()) o["tools"] = std::move(tools);
  if (const json* tc = Get(j, "tool_choice")) {
    if (!tc->is_object() || !Get(*tc, "type") || !(*tc)["type"].is_string())
      Refuse("tool_choice", "tool_choice must be an object with a 'type'");
    OnlyKeys(*tc, "tool_choice", {"type", "name", "disable_parallel_tool_use"});
    const std::string type = (*tc)["type"];
    if (type == "auto") {
      o["tool_choice"] = "auto";
    } else if (type == "any") {
      o["tool_choice"] = "required";
    } else if (type == "none") {
      o["tool_choice"] = "none";
    } else if (type == "tool") {
      o["tool_choice"] = {{"type", "function"}, {"function", {{"name", tc->value("name", "")}}}};
    } else {
      Refuse("tool_choice.type", "tool_choice type must be auto, any, tool or none");
    }
    if (const json* d = Get(*tc, "disable_parallel_tool_use"); d != nullptr && d->is_boolean())
      o["parallel_tool_calls"] = !d->get<bool>();
  }
}

}  // namespace

Translated AnthropicRequest(std::string_view body) {
  const json j = ParseObject(body);
  OnlyKeys(j, "",
           {"model", "messages", "system", "max_tokens", "stop_sequences", "stream", "temperature",
            "top_p", "top_k", "tools", "tool_choice", "metadata", "thinking", "service_tier"});
  json o = json::object();
  if (const json* m = Get(j, "model")) o["model"] = *m;
  const json* max = Get(j, "max_tokens");
  if (max == nullptr) Refuse("max_tokens", "'max_tokens' is required");
  o["max_tokens"] = *max;
  json messages = json::array();
  if (const json* sys = Get(j, "system")) {
    std::string s;
    if (sys->is_string()) {
      s = *sys;
    } else if (sys->is_array()) {
      for (const auto& b : *sys) {
        if (!b.is_object() || b.value("type", "") != "text" || !Get(b, "text") ||
            !b["text"].is_string())
          Refuse("system", "system must be a string or text blocks");
        s += b["text"].get<std::string>();
      }
    } else {
      Refuse("system", "system must be a string or text blocks");
    }
    messages.push_back({{"role", "system"}, {"content", s}});
  }
  const json* ms = Get(j, "messages");
  if (ms == nullptr || !ms->is_array() || ms->empty())
    Refuse("messages", "'messages' must be a non-empty array");
  for (size_t i = 0; i < ms->size(); ++i) AnthropicMessage((*ms)[i], i, &messages);
  o["messages"] = messages;
  if (const json* s = Get(j, "stop_sequences")) o["stop"] = *s;
  for (const char* k : {"stream", "temperature", "top_p", "top_k"})
    if (const json* v = Get(j, k)) o[k] = *v;
  if (const json* t = Get(j, "temperature"); t != nullptr && t->is_number() && *t > 1.0)
    Refuse("temperature", "temperature is in [0, 1] in the Messages API");
  Translated out;
  out.stream = Get(j, "stream") && j["stream"].is_boolean() && j["stream"].get<bool>();
  if (out.stream) o["stream_options"] = {{"include_usage", true}};
  AnthropicTools(j, &o);
  if (const json* md = Get(j, "metadata")) {
    if (!md->is_object()) Refuse("metadata", "metadata must be an object");
    OnlyKeys(*md, "metadata", {"user_id"});
  }
  if (const json* th = Get(j, "thinking")) {
    if (!th->is_object()) Refuse("thinking", "thinking must be an object");
    OnlyKeys(*th, "thinking", {"type", "budget_tokens"});
    const std::string type = th->value("type", "");
    if (type != "enabled" && type != "disabled")
      Refuse("thinking.type", "thinking type must be enabled or disabled");
    out.vars.push_back(OptionalBool("enable_thinking", type == "enabled"));
  }
  out.body = o.dump();
  return out;
}

std::unique_ptr<ReplyTranslator> AnthropicReply(bool stream, const std::string& model,
                                                int n_prompt) {
  return std::make_unique<AnthropicReplyOf>(stream, model, n_prompt);
}

}  // namespace paddock::server::dialect_detail
