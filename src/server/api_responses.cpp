// server/api_responses.cpp: OpenAI's Responses API (POST /v1/responses, what the Agents SDK
// and Codex call) over the chat: input items (messages, function calls and their outputs) as
// chat messages, the reply as a response object or its event stream (output items added, text,
// reasoning and argument deltas, done events, response.completed).
#include "server/api_dialects_internal.h"

namespace paddock::server::dialect_detail {
namespace {

// ---- OpenAI Responses: request -----------------------------------------------------------

// A message item's content: a string, or input_text / output_text / refusal parts.
std::string ResponsesText(const json& content, const std::string& p) {
  if (content.is_string()) return content;
  if (!content.is_array()) Refuse(p, "content must be a string or content parts");
  std::string text;
  for (size_t k = 0; k < content.size(); ++k) {
    const json& part = content[k];
    const std::string pp = p + "[" + std::to_string(k) + "]";
    const std::string type = part.is_object() ? part.value("type", "") : "";
    if (type == "input_text" || type == "output_text") {
      OnlyKeys(part, pp, {"type", "text", "annotations", "logprobs"});
      if (!Get(part, "text") || !part["text"].is_string())
        Refuse(pp + ".text", "text must be a string");
      text += part["text"].get<std::string>();
    } else if (type == "refusal") {
      OnlyKeys(part, pp, {"type", "refusal"});
      text += part.value("refusal", "");
    } else {
      Refuse(pp + ".type", "content parts of type '" + type +
                               "' are not supported: this model reads text (input_text, "
                               "output_text, refusal)");
    }
  }
  return text;
}

// input items into chat messages: messages, function calls (merged into the assistant turn
// before them) and their outputs; reasoning items dropped (the template decides about earlier
// reasoning, and has none to keep from another model).
void ResponsesInput(const json& input, json* messages) {
  if (input.is_string()) {
    messages->push_back({{"role", "user"}, {"content", input}});
    return;
  }
  if (!input.is_array()) Refuse("input", "input must be a string or an array of items");
  for (size_t i = 0; i < input.size(); ++i) {
    const json& it = input[i];
    const std::string p = "input[" + std::to_string(i) + "]";
    if (!it.is_object()) Refuse(p, "'" + p + "' must be an object");
    const std::string type = it.value("type", "message");
    if (type == "message") {
      OnlyKeys(it, p, {"type", "role", "content", "id", "status"});
      std::string role = it.value("role", "");
      if (role == "developer") role = "system";
      if (role != "user" && role != "assistant" && role != "system")
        Refuse(p + ".role", "role must be user, assistant, system or developer");
      const json* c = Get(it, "content");
      messages->push_back(
          {{"role", role}, {"content", c ? ResponsesText(*c, p + ".content") : ""}});
    } else if (type == "function_call") {
      OnlyKeys(it, p, {"type", "call_id", "name", "arguments", "id", "status"});
      if (!Get(it, "call_id") || !Get(it, "name") || !it["call_id"].is_string() ||
          !it["name"].is_string())
        Refuse(p, "a function_call item needs call_id and name");
      json call = {
          {"id", it["call_id"]},
          {"type", "function"},
          {"function", {{"name", it["name"]}, {"arguments", it.value("arguments", "{}")}}}};
      if (messages->empty() || messages->back()["role"] != "assistant")
        messages->push_back({{"role", "assistant"}, {"content", ""}});
      json& last = messages->back();
      if (!last.contains("tool_calls")) last["tool_calls"] = json::array();
      last["tool_calls"].push_back(call);
    } else if (type == "function_call_output") {
      OnlyKeys(it, p, {"type", "call_id", "output", "id", "status"});
      const json* out = Get(it, "output");
      std::string text = out == nullptr     ? ""
                         : out->is_string() ? out->get<std::string>()
                                            : ResponsesText(*out, p + ".output");
      messages->push_back(
          {{"role", "tool"}, {"tool_call_id", it.value("call_id", "")}, {"content", text}});
    } else if (type == "reasoning") {
      // (earlier reasoning: dropped, as the chat templates drop it)
    } else if (type == "item_reference") {
      Refuse(p + ".type", "item_reference needs stored responses: send the items themselves");
    } else {
      Refuse(p + ".type", "input items of type '" + type + "' are not supported");
    }
  }
}

// ---- OpenAI Responses: replies -------------------------------------------------------------

json ResponsesUsage(int input, int output) {
  return {{"input_tokens", input},
          {"input_tokens_details", {{"cached_tokens", 0}}},
          {"output_tokens", output},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", input + output}};
}

// The response object around `output` (status completed, or incomplete at the token limit).
json ResponseObject(const std::string& id, const std::string& model, const json& output,
                    const std::string& finish, const json& usage) {
  const bool incomplete = finish == "length";
  return {{"id", id},
          {"object", "response"},
          {"created_at", std::time(nullptr)},
          {"status", finish.empty() ? "in_progress"
                     : incomplete   ? "incomplete"
                                    : "completed"},
          {"error", nullptr},
          {"incomplete_details", incomplete ? json{{"reason", "max_output_tokens"}} : json()},
          {"instructions", nullptr},
          {"model", model},
          {"output", output},
          {"parallel_tool_calls", true},
          {"tool_choice", "auto"},
          {"tools", json::array()},
          {"text", {{"format", {{"type", "text"}}}}},
          {"metadata", json::object()},
          {"usage", usage}};
}

json MessageItem(const std::string& id, const std::string& text, const char* status) {
  return {
      {"type", "message"},
      {"id", id},
      {"status", status},
      {"role", "assistant"},
      {"content",
       json::array({{{"type", "output_text"}, {"text", text}, {"annotations", json::array()}}})}};
}

json ReasoningItem(const std::string& id, const std::string& text) {
  return {{"type", "reasoning"},
          {"id", id},
          {"summary", json::array()},
          {"content", json::array({{{"type", "reasoning_text"}, {"text", text}}})}};
}

json CallItem(const std::string& id, json call, const char* status) {
  // (copied one at a time: operator[] may insert a member and move the others, so references
  // into `call` must not wait in an initializer list)
  const json call_id = call["id"];
  const json name = call["function"]["name"];
  const json arguments = call["function"]["arguments"];
  return {{"type", "function_call"}, {"id", id},        {"call_id", call_id}, {"name", name},
          {"arguments", arguments},  {"status", status}};
}

// The OpenAI reply (server/reply_reader.h) as a Responses API response object, or its event
// stream: each output item added, its deltas, its done events; response.created first and
// response.completed (the whole object) last.
class ResponsesReplyOf final : public ReplyReader {
 public:
  ResponsesReplyOf(bool stream, std::string model, int n_prompt)
      : ReplyReader(stream), model_(std::move(model)), id_(NewId("resp_")), n_prompt_(n_prompt) {}

 private:
  void OnError(const std::string& type, const std::string& message, std::string* out) override {
    if (stream()) {
      return Emit("error", {{"code", nullptr}, {"message", message}, {"param", nullptr}}, out);
    }
    out->append(api_detail::Dump(
        {{"error",
          {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}}}}));
  }
  void OnChunkBegin(std::string* out) override {
    if (stream()) Start(out);
  }
  void OnUsage(int prompt_tokens, int completion_tokens) override {
    if (!stream()) n_prompt_ = prompt_tokens;
    output_tokens_ = completion_tokens;
  }
  void OnReasoning(const std::string& text, std::string* out) override {
    if (!stream()) return output_.push_back(ReasoningItem(NewId("rs_"), text));
    Text("reasoning", text, out);
  }
  void OnText(const std::string& text, std::string* out) override {
    if (!stream()) return output_.push_back(MessageItem(NewId("msg_"), text, "completed"));
    Text("message", text, out);
  }
  void OnToolCall(const json& tc, std::string* out) override {
    if (!stream()) return output_.push_back(CallItem(NewId("fc_"), tc, "completed"));
    CloseItem(out);
    const std::string item_id = NewId("fc_");
    json item = CallItem(item_id, tc, "in_progress");
    item["arguments"] = "";
    Emit("response.output_item.added", {{"output_index", output_.size()}, {"item", item}}, out);
    const std::string args = tc.value("function", json::object()).value("arguments", "");
    Emit("response.function_call_arguments.delta",
         {{"item_id", item_id}, {"output_index", output_.size()}, {"delta", args}}, out);
    Emit("response.function_call_arguments.done",
         {{"item_id", item_id}, {"output_index", output_.size()}, {"arguments", args}}, out);
    const json done = CallItem(item_id, tc, "completed");
    Emit("response.output_item.done", {{"output_index", output_.size()}, {"item", done}}, out);
    output_.push_back(done);
  }
  void OnFinish(const std::string& reason, const json&, std::string*) override { finish_ = reason; }
  void OnEnd(std::string* out) override {
    const std::string finish = finish_.empty() ? "stop" : finish_;
    const json usage = ResponsesUsage(n_prompt_, output_tokens_);
    if (!stream()) {
      const std::string whole =
          api_detail::Dump(ResponseObject(id_, model_, output_, finish, usage));
      out->append(whole);
      if (on_response_) on_response_(whole);
      return;
    }
    Start(out);
    CloseItem(out);
    const json done = ResponseObject(id_, model_, output_, finish, usage);
    Emit(finish_ == "length" ? "response.incomplete" : "response.completed", {{"response", done}},
         out);
    if (on_response_) on_response_(done.dump());
  }

  void Emit(const char* type, json data, std::string* out) {
    data["type"] = type;
    data["sequence_number"] = seq_++;
    out->append(SseEvent(type, data));
  }
  void Start(std::string* out) {
    if (started_) return;
    started_ = true;
    const json r = ResponseObject(id_, model_, json::array(), "", nullptr);
    Emit("response.created", {{"response", r}}, out);
    Emit("response.in_progress", {{"response", r}}, out);
  }
  // Text into the open item of `kind` (message or reasoning), opening it first.
  void Text(const std::string& kind, const std::string& delta, std::string* out) {
    if (open_ != kind) {
      CloseItem(out);
      open_ = kind;
      item_id_ = NewId(kind == "message" ? "msg_" : "rs_");
      text_.clear();
      const json item =
          kind == "message"
              ? json{{"type", "message"},
                     {"id", item_id_},
                     {"status", "in_progress"},
                     {"role", "assistant"},
                     {"content", json::array()}}
              : json{{"type", "reasoning"}, {"id", item_id_}, {"summary", json::array()}};
      Emit("response.output_item.added", {{"output_index", output_.size()}, {"item", item}}, out);
      const json part =
          kind == "message"
              ? json{{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}
              : json{{"type", "reasoning_text"}, {"text", ""}};
      Emit("response.content_part.added",
           {{"item_id", item_id_},
            {"output_index", output_.size()},
            {"content_index", 0},
            {"part", part}},
           out);
    }
    text_ += delta;
    Emit(kind == "message" ? "response.output_text.delta" : "response.reasoning_text.delta",
         {{"item_id", item_id_},
          {"output_index", output_.size()},
          {"content_index", 0},
          {"delta", delta}},
         out);
  }
  void CloseItem(std::string* out) {
    if (open_.empty()) return;
    const size_t index = output_.size();
    if (open_ == "message") {
      Emit("response.output_text.done",
           {{"item_id", item_id_}, {"output_index", index}, {"content_index", 0}, {"text", text_}},
           out);
      Emit("response.content_part.done",
           {{"item_id", item_id_},
            {"output_index", index},
            {"content_index", 0},
            {"part", {{"type", "output_text"}, {"text", text_}, {"annotations", json::array()}}}},
           out);
      output_.push_back(MessageItem(item_id_, text_, "completed"));
    } else {
      Emit("response.reasoning_text.done",
           {{"item_id", item_id_}, {"output_index", index}, {"content_index", 0}, {"text", text_}},
           out);
      output_.push_back(ReasoningItem(item_id_, text_));
    }
    Emit("response.output_item.done", {{"output_index", index}, {"item", output_.back()}}, out);
    open_.clear();
  }

  std::string model_, id_;
  int n_prompt_;
  bool started_ = false;
  int seq_ = 0;
  int output_tokens_ = 0;
  json output_ = json::array();
  std::string open_, item_id_, text_, finish_;
};

// tools (function tools, flat), tool_choice and text.format as the chat's fields.
void ResponsesToolsAndFormat(const json& j, json* out) {
  json& o = *out;
  json tools = FunctionTools(j, "parameters", [](const json& t, const std::string& tp) {
    if (!t.is_object() || t.value("type", "") != "function")
      Refuse(tp + ".type", "only function tools are available here (no hosted tools)");
    OnlyKeys(t, tp, {"type", "name", "description", "parameters", "strict"});
  });
  if (!tools.is_null()) o["tools"] = std::move(tools);
  if (const json* tc = Get(j, "tool_choice")) {
    if (tc->is_string()) {
      o["tool_choice"] = *tc;
    } else if (tc->is_object() && tc->value("type", "") == "function") {
      o["tool_choice"] = {{"type", "function"}, {"function", {{"name", tc->value("name", "")}}}};
    } else {
      Refuse("tool_choice", "tool_choice must be none, auto, required or {type: function, name}");
    }
  }
  if (const json* text = Get(j, "text")) {
    if (!text->is_object()) Refuse("text", "text must be an object");
    OnlyKeys(*text, "text", {"format", "verbosity"});
    if (const json* f = Get(*text, "format")) {
      const std::string type = f->is_object() ? f->value("type", "") : "";
      if (type == "json_schema") {
        json js = {{"name", f->value("name", "output")},
                   {"schema", Get(*f, "schema") ? (*f)["schema"] : json::object()}};
        if (const json* st = Get(*f, "strict")) js["strict"] = *st;
        o["response_format"] = {{"type", "json_schema"}, {"json_schema", js}};
      } else if (type == "json_object" || type == "text") {
        o["response_format"] = {{"type", type}};
      } else {
        Refuse("text.format.type", "text.format type must be text, json_object or json_schema");
      }
    }
  }
}

}  // namespace

Translated ResponsesRequest(std::string_view body) {
  const json j = ParseObject(body);
  OnlyKeys(j, "",
           {"model",
            "input",
            "instructions",
            "tools",
            "tool_choice",
            "text",
            "max_output_tokens",
            "temperature",
            "top_p",
            "stream",
            "parallel_tool_calls",
            "metadata",
            "store",
            "user",
            "reasoning",
            "truncation",
            "include",
            "service_tier",
            "safety_identifier",
            "prompt_cache_key",
            "previous_response_id",
            "stream_options",
            "top_logprobs",
            "background",
            "conversation",
            "max_tool_calls",
            "prompt"});
  for (const char* k : {"conversation", "prompt"})
    if (Get(j, k))
      Refuse(k, std::string(k) +
                    " needs state stored on the server that it does not keep (it keeps responses: "
                    "use previous_response_id, or send the whole input)");
  Translated out;
  if (const json* p = Get(j, "previous_response_id")) {
    if (!p->is_string() || p->get<std::string>().empty())
      Refuse("previous_response_id", "previous_response_id must be a response id");
    out.previous_response_id = p->get<std::string>();
  }
  out.store = true;
  if (const json* st = Get(j, "store")) {
    if (!st->is_boolean()) Refuse("store", "store must be a boolean");
    out.store = st->get<bool>();
  }
  if (const json* b = Get(j, "background"); b != nullptr && b->is_boolean() && b->get<bool>())
    Refuse("background", "background responses are not supported");
  json o = json::object();
  if (const json* m = Get(j, "model")) o["model"] = *m;
  json messages = json::array();
  if (const json* ins = Get(j, "instructions")) {
    if (!ins->is_string()) Refuse("instructions", "instructions must be a string");
    messages.push_back({{"role", "system"}, {"content", *ins}});
    out.instructions = true;
  }
  const json* input = Get(j, "input");
  if (input == nullptr) Refuse("input", "'input' is required");
  ResponsesInput(*input, &messages);
  o["messages"] = messages;
  if (const json* m = Get(j, "max_output_tokens")) o["max_tokens"] = *m;
  for (const char* k : {"temperature", "top_p", "stream", "parallel_tool_calls", "user",
                        "safety_identifier", "prompt_cache_key"})
    if (const json* v = Get(j, k)) o[k] = *v;
  if (const json* md = Get(j, "metadata")) o["metadata"] = *md;
  if (const json* tl = Get(j, "top_logprobs"); tl != nullptr && !(tl->is_number() && *tl == 0))
    Refuse("top_logprobs", "log-probabilities are served by /v1/chat/completions");
  out.stream = Get(j, "stream") && j["stream"].is_boolean() && j["stream"].get<bool>();
  if (out.stream) o["stream_options"] = {{"include_usage", true}};
  ResponsesToolsAndFormat(j, &o);
  if (const json* r = Get(j, "reasoning")) {
    if (!r->is_object()) Refuse("reasoning", "reasoning must be an object");
    OnlyKeys(*r, "reasoning", {"effort", "summary", "generate_summary"});
    if (const json* e = Get(*r, "effort")) o["reasoning_effort"] = *e;
  }
  out.body = o.dump();
  return out;
}

std::unique_ptr<ReplyTranslator> ResponsesReply(bool stream, const std::string& model,
                                                int n_prompt) {
  return std::make_unique<ResponsesReplyOf>(stream, model, n_prompt);
}

}  // namespace paddock::server::dialect_detail

namespace paddock::server {

using dialect_detail::json;

std::string ContinueConversation(std::string_view openai_body, std::string_view prior,
                                 bool instructions) {
  json body = json::parse(openai_body);
  json msgs = json::parse(prior);
  json& own = body["messages"];
  const size_t skip = instructions ? 1 : 0;
  json out = json::array();
  for (size_t i = 0; i < skip && i < own.size(); ++i) out.push_back(own[i]);
  for (auto& m : msgs) out.push_back(std::move(m));
  for (size_t i = skip; i < own.size(); ++i) out.push_back(std::move(own[i]));
  own = std::move(out);
  return body.dump();
}

std::string ResponseDeletedBody(const std::string& id) {
  return json{{"id", id}, {"object", "response"}, {"deleted", true}}.dump();
}

std::string ResponseId(std::string_view response) {
  return json::parse(response).value("id", "");
}

std::string StoredConversation(std::string_view openai_body, std::string_view response,
                               bool instructions) {
  json body = json::parse(openai_body);
  json r = json::parse(response);
  json out = json::array();
  json& own = body["messages"];
  for (size_t i = instructions ? 1 : 0; i < own.size(); ++i) out.push_back(std::move(own[i]));
  // The output items as one assistant message: reasoning, text, calls.
  json msg = {{"role", "assistant"}, {"content", ""}};
  std::string text;
  json calls = json::array();
  for (json& item : r["output"]) {
    const std::string type = item.value("type", "");
    if (type == "reasoning") {
      std::string reasoning;
      for (json& part : item["content"]) reasoning += part.value("text", "");
      msg["reasoning_content"] = reasoning;
    } else if (type == "message") {
      for (json& part : item["content"]) text += part.value("text", "");
    } else if (type == "function_call") {
      const json id = item["call_id"];  // (one at a time: operator[] may insert and move)
      const json name = item["name"];
      const json arguments = item["arguments"];
      calls.push_back({{"id", id},
                       {"type", "function"},
                       {"function", {{"name", name}, {"arguments", arguments}}}});
    }
  }
  msg["content"] = text;
  if (!calls.empty()) msg["tool_calls"] = calls;
  out.push_back(msg);
  return out.dump();
}

}  // namespace paddock::server
