// server/api_dialects.cpp: Anthropic's Messages API and Ollama's API over the OpenAI one
// (server/api_dialects.h). Requests: translated field by field, anything unknown refused by its
// own name. Replies: the OpenAI body or chunks re-shaped.
#include "server/api_dialects.h"

#include <time.h>

#include <atomic>
#include <ctime>

#include "base/json_linear.h"
#include "server/api_json.h"

namespace paddock::server {
namespace {

using api_detail::json;
using api_detail::kMaxMembers;

[[noreturn]] void Refuse(const std::string& param, const std::string& msg, int status = 400) {
  ApiError e;
  e.status = status;
  e.param = param;
  e.message = msg;
  throw e;
}

json ParseObject(std::string_view body) {
  json j;
  std::string why;
  if (!ParseJsonLinear(body, &j, &why, kMaxMembers))
    Refuse("", "the request body is not valid JSON: " + why);
  if (!j.is_object()) Refuse("", "the request body must be a JSON object");
  return j;
}

void OnlyKeys(const json& j, const std::string& where, std::initializer_list<const char*> keys) {
  for (const auto& [k, v] : j.items()) {
    bool known = false;
    for (const char* x : keys) known = known || k == x;
    if (!known) {
      const std::string p = where.empty() ? k : where + "." + k;
      Refuse(p, "unknown field '" + p + "'");
    }
  }
}

const json* Get(const json& j, const char* k) {
  const auto it = j.find(k);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

ChatVar OptionalBool(const char* name, bool v) {
  ChatVar var;
  var.name = name;
  var.kind = ChatVar::Kind::kBool;
  var.b = v;
  var.optional = true;
  return var;
}

std::string Iso8601Now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// ---- Anthropic: request -------------------------------------------------------------------

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
      OnlyKeys(block, bp, {"type", "id", "name", "input", "cache_control"});
      if (!Get(block, "name") || !block["name"].is_string() || !Get(block, "id") ||
          !block["id"].is_string())
        Refuse(bp, "a tool_use block needs a string 'id' and 'name'");
      const json input = Get(block, "input") ? block["input"] : json::object();
      if (!input.is_object()) Refuse(bp + ".input", "input must be an object");
      calls.push_back({{"id", block["id"]},
                       {"type", "function"},
                       {"function", {{"name", block["name"]}, {"arguments", input.dump()}}}});
    } else if (type == "tool_result" && !assistant) {
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
      out->push_back(
          {{"role", "tool"}, {"tool_call_id", block["tool_use_id"]}, {"content", result}});
    } else if ((type == "thinking" || type == "redacted_thinking") && assistant) {
      if (type == "thinking" && Get(block, "thinking") && block["thinking"].is_string())
        thinking += block["thinking"].get<std::string>();
    } else if (type == "image" || type == "document") {
      Refuse(bp + ".type",
             "content blocks of type '" + type + "' are not supported: this model reads text");
    } else {
      Refuse(bp + ".type", "content block type '" + type + "' is not supported in a" +
                               (assistant ? "n assistant" : " user") + " message");
    }
  }
  if (text.empty() && calls.empty() && thinking.empty() && !assistant) return;  // tool results only
  msg["content"] = text;
  if (!calls.empty()) msg["tool_calls"] = calls;
  if (!thinking.empty()) msg["reasoning_content"] = thinking;
  out->push_back(msg);
}

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
  if (const json* tools = Get(j, "tools")) {
    if (!tools->is_array()) Refuse("tools", "'tools' must be an array");
    json list = json::array();
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      const std::string tp = "tools[" + std::to_string(i) + "]";
      if (!t.is_object()) Refuse(tp, "a tool must be an object");
      OnlyKeys(t, tp, {"name", "description", "input_schema", "type", "cache_control"});
      if (Get(t, "type") && t["type"] != "custom")
        Refuse(tp + ".type", "server tools ('" + t["type"].dump() + "') are not available here");
      json fn = {{"name", t.value("name", "")}};
      if (const json* d = Get(t, "description")) fn["description"] = *d;
      fn["parameters"] = Get(t, "input_schema") ? t["input_schema"] : json{{"type", "object"}};
      list.push_back({{"type", "function"}, {"function", fn}});
    }
    o["tools"] = list;
  }
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

// ---- Ollama: requests -----------------------------------------------------------------------

// Ollama's options object into OpenAI / llama-server fields.
void OllamaOptions(const json& opts, json* o) {
  if (!opts.is_object()) Refuse("options", "options must be an object");
  static const std::pair<const char*, const char*> kMap[] = {
      {"temperature", "temperature"},
      {"top_p", "top_p"},
      {"top_k", "top_k"},
      {"min_p", "min_p"},
      {"typical_p", "typical_p"},
      {"repeat_penalty", "repetition_penalty"},
      {"repeat_last_n", "repeat_last_n"},
      {"presence_penalty", "presence_penalty"},
      {"frequency_penalty", "frequency_penalty"},
      {"seed", "seed"},
      {"stop", "stop"},
      {"mirostat", "mirostat"},
      {"mirostat_tau", "mirostat_tau"},
      {"mirostat_eta", "mirostat_eta"},
  };
  // Load-time settings Ollama takes per request; here the server's own settings decide them.
  static const char* const kServerSide[] = {"num_ctx",  "num_batch",  "num_gpu",   "main_gpu",
                                            "use_mmap", "num_thread", "numa",      "num_keep",
                                            "low_vram", "f16_kv",     "vocab_only"};
  for (const auto& [k, v] : opts.items()) {
    bool done = false;
    for (const auto& [from, to] : kMap) {
      if (k == from) {
        (*o)[to] = v;
        done = true;
      }
    }
    if (k == "num_predict") {
      if (!v.is_number_integer()) Refuse("options.num_predict", "num_predict must be an integer");
      if (v.get<int64_t>() >= 0) (*o)["max_tokens"] = v;
      done = true;
    }
    for (const char* s : kServerSide) done = done || k == s;
    if (!done) Refuse("options." + k, "unknown option '" + k + "'");
  }
}

// format: "json" or a JSON Schema.
void OllamaFormat(const json& f, json* o) {
  if (f.is_string() && f == "json") {
    (*o)["response_format"] = {{"type", "json_object"}};
  } else if (f.is_object()) {
    (*o)["response_format"] = {{"type", "json_schema"},
                               {"json_schema", {{"name", "format"}, {"schema", f}}}};
  } else if (!(f.is_string() && f == "")) {
    Refuse("format", "format must be \"json\" or a JSON Schema object");
  }
}

void OllamaCommon(const json& j, json* o, Translated* out) {
  if (const json* m = Get(j, "model")) (*o)["model"] = *m;
  out->stream = !Get(j, "stream") || (j["stream"].is_boolean() && j["stream"].get<bool>());
  (*o)["stream"] = out->stream;
  if (out->stream) (*o)["stream_options"] = {{"include_usage", true}};
  if (const json* opts = Get(j, "options")) OllamaOptions(*opts, o);
  if (const json* f = Get(j, "format")) OllamaFormat(*f, o);
  if (const json* ka = Get(j, "keep_alive"); ka != nullptr && !ka->is_string() && !ka->is_number())
    Refuse("keep_alive", "keep_alive must be a duration string or a number of seconds");
  if (const json* think = Get(j, "think")) {
    if (!think->is_boolean() && !think->is_string())
      Refuse("think", "think must be a boolean (or low, medium, high)");
    out->vars.push_back(
        OptionalBool("enable_thinking", !(think->is_boolean() && !think->get<bool>())));
  }
}

Translated OllamaChatRequest(std::string_view body) {
  const json j = ParseObject(body);
  OnlyKeys(j, "",
           {"model", "messages", "tools", "format", "options", "stream", "keep_alive", "think"});
  json o = json::object();
  Translated out;
  OllamaCommon(j, &o, &out);
  const json* ms = Get(j, "messages");
  if (ms == nullptr || !ms->is_array()) Refuse("messages", "'messages' must be an array");
  json messages = json::array();
  for (size_t i = 0; i < ms->size(); ++i) {
    const json& m = (*ms)[i];
    const std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) Refuse(p, "'" + p + "' must be an object");
    OnlyKeys(m, p, {"role", "content", "images", "tool_calls", "thinking", "tool_name"});
    if (const json* im = Get(m, "images"); im != nullptr && !(im->is_array() && im->empty()))
      Refuse(p + ".images", "images are not supported: this model reads text");
    json msg = {{"role", m.value("role", "")},
                {"content", Get(m, "content") ? m["content"] : json("")}};
    if (const json* th = Get(m, "thinking")) msg["reasoning_content"] = *th;
    if (const json* calls = Get(m, "tool_calls")) {
      if (!calls->is_array()) Refuse(p + ".tool_calls", "tool_calls must be an array");
      json tc = json::array();
      for (size_t c = 0; c < calls->size(); ++c) {
        const json& call = (*calls)[c];
        const json* fn = call.is_object() ? Get(call, "function") : nullptr;
        if (fn == nullptr || !fn->is_object())
          Refuse(p + ".tool_calls", "each tool call needs a function");
        const json args = Get(*fn, "arguments") ? (*fn)["arguments"] : json::object();
        tc.push_back({{"id", "call_" + std::to_string(i) + "_" + std::to_string(c)},
                      {"type", "function"},
                      {"function",
                       {{"name", fn->value("name", "")},
                        {"arguments", args.is_string() ? args.get<std::string>() : args.dump()}}}});
      }
      msg["tool_calls"] = tc;
    }
    messages.push_back(msg);
  }
  if (messages.empty()) Refuse("messages", "'messages' must not be empty");
  o["messages"] = messages;
  if (const json* t = Get(j, "tools")) o["tools"] = *t;
  out.body = o.dump();
  return out;
}

Translated OllamaGenerateRequest(std::string_view body) {
  const json j = ParseObject(body);
  OnlyKeys(j, "",
           {"model", "prompt", "suffix", "system", "template", "raw", "format", "options", "stream",
            "keep_alive", "images", "think", "context"});
  json o = json::object();
  Translated out;
  OllamaCommon(j, &o, &out);
  if (Get(j, "suffix") && j["suffix"] != "")
    Refuse("suffix", "fill-in-the-middle (suffix) is not supported");
  if (Get(j, "template"))
    Refuse("template", "a per-request template is not supported: serve --chat-template-file");
  if (Get(j, "context"))
    Refuse("context",
           "context (token ids of an earlier reply) is deprecated: send messages to /api/chat");
  if (const json* im = Get(j, "images"); im != nullptr && !(im->is_array() && im->empty()))
    Refuse("images", "images are not supported: this model reads text");
  const json* prompt = Get(j, "prompt");
  const std::string text = prompt && prompt->is_string() ? prompt->get<std::string>() : "";
  if (prompt != nullptr && !prompt->is_string()) Refuse("prompt", "prompt must be a string");
  const bool raw = Get(j, "raw") && j["raw"].is_boolean() && j["raw"].get<bool>();
  if (raw) {
    if (Get(j, "system")) Refuse("system", "system does not apply to a raw prompt");
    o["prompt"] = text;
    out.chat = false;
  } else {
    json messages = json::array();
    if (const json* s = Get(j, "system")) messages.push_back({{"role", "system"}, {"content", *s}});
    messages.push_back({{"role", "user"}, {"content", text}});
    o["messages"] = messages;
  }
  out.body = o.dump();
  return out;
}

Translated OllamaEmbedRequest(std::string_view body) {
  const json j = ParseObject(body);
  OnlyKeys(j, "", {"model", "input", "prompt", "truncate", "options", "keep_alive", "dimensions"});
  if (Get(j, "dimensions")) Refuse("dimensions", "the vectors have the model's width");
  if (Get(j, "truncate") && j["truncate"].is_boolean() && j["truncate"].get<bool>() == false) {
    // (Paddock never truncates: an input over the context is a 400 either way.)
  }
  json o = json::object();
  if (const json* m = Get(j, "model")) o["model"] = *m;
  const json* in = Get(j, "input");
  if (in == nullptr) in = Get(j, "prompt");  // the older /api/embeddings
  if (in == nullptr) Refuse("input", "'input' is required");
  o["input"] = *in;
  Translated out;
  out.chat = false;
  out.body = o.dump();
  return out;
}

// ---- Replies ----------------------------------------------------------------------------------

// Splits server-sent events out of a byte stream: each "data: ..." payload, and comments.
class SseSplitter {
 public:
  template <class F>
  void Feed(std::string_view bytes, F&& on_event) {
    buf_.append(bytes);
    size_t at;
    while ((at = buf_.find("\n\n")) != std::string::npos) {
      const std::string ev = buf_.substr(0, at);
      buf_.erase(0, at + 2);
      if (ev.rfind("data: ", 0) == 0)
        on_event(std::string_view(ev).substr(6), false);
      else if (ev.rfind(":", 0) == 0)
        on_event(std::string_view(), true);
    }
  }

 private:
  std::string buf_;
};

std::string AnthropicStop(const json& finish) {
  const std::string f = finish.is_string() ? finish.get<std::string>() : "stop";
  if (f == "length") return "max_tokens";
  if (f == "tool_calls") return "tool_use";
  return "end_turn";
}

std::string SseEvent(const char* type, const json& data) {
  return std::string("event: ") + type + "\ndata: " + api_detail::Dump(data) + "\n\n";
}

class AnthropicWhole : public ReplyTranslator {
 public:
  explicit AnthropicWhole(std::string model) : model_(std::move(model)) {}
  void Feed(std::string_view b, std::string* out) override {
    // Whitespace probes pass (valid before JSON); the body is kept until it ends.
    for (char c : b) {
      if (body_.empty() && (c == ' ' || c == '\n'))
        out->push_back(c);
      else
        body_.push_back(c);
    }
  }
  void End(std::string* out) override {
    try {
      Translate(out);
    } catch (const json::exception&) {  // not an OpenAI body (an error): as it is
      out->append(body_);
    }
  }

 private:
  void Translate(std::string* out) {
    const json r = JsonOrDiscarded<json>(body_);
    if (r.is_discarded() || !r.contains("choices")) {
      out->append(body_);
      return;
    }
    const json& c = r.at("choices").at(0);
    const json& msg = c.at("message");
    json content = json::array();
    if (msg.contains("reasoning_content") && msg["reasoning_content"].is_string())
      content.push_back(
          {{"type", "thinking"}, {"thinking", msg["reasoning_content"]}, {"signature", ""}});
    if (msg.contains("content") && msg["content"].is_string() && msg["content"] != "")
      content.push_back({{"type", "text"}, {"text", msg["content"]}});
    if (msg.contains("tool_calls")) {
      for (const auto& tc : msg["tool_calls"])
        content.push_back(
            {{"type", "tool_use"},
             {"id", tc["id"]},
             {"name", tc["function"]["name"]},
             {"input", JsonOrDiscarded<json>(tc["function"]["arguments"].get<std::string>())}});
    }
    json a = {{"id", "msg_" + r.value("id", std::string("x"))},
              {"type", "message"},
              {"role", "assistant"},
              {"model", model_},
              {"content", content},
              {"stop_reason", AnthropicStop(c["finish_reason"])},
              {"stop_sequence", nullptr},
              {"usage",
               {{"input_tokens", r["usage"]["prompt_tokens"]},
                {"output_tokens", r["usage"]["completion_tokens"]}}}};
    out->append(api_detail::Dump(a));
  }

  std::string model_, body_;
};

class AnthropicStream : public ReplyTranslator {
 public:
  AnthropicStream(std::string model, int n_prompt)
      : model_(std::move(model)), n_prompt_(n_prompt) {}
  void Feed(std::string_view b, std::string* out) override {
    sse_.Feed(b, [&](std::string_view data, bool comment) {
      try {
        Event(data, comment, out);
      } catch (const json::exception&) {  // (not an OpenAI chunk: skipped)
      }
    });
  }
  void Event(std::string_view data, bool comment, std::string* out) {
    {
      if (comment) {
        Start(out);
        out->append(SseEvent("ping", {{"type", "ping"}}));
        return;
      }
      if (data == "[DONE]") return;
      const json ev = JsonOrDiscarded<json>(data);
      if (ev.is_discarded()) return;
      if (ev.contains("error")) {
        out->append(SseEvent("error", {{"type", "error"},
                                       {"error",
                                        {{"type", ev["error"].value("type", "api_error")},
                                         {"message", ev["error"].value("message", "")}}}}));
        errored_ = true;
        return;
      }
      Start(out);
      if (ev.contains("usage") && ev["usage"].is_object())
        output_tokens_ = ev["usage"].value("completion_tokens", output_tokens_);
      if (!ev.contains("choices") || ev["choices"].empty()) return;
      const json& c = ev["choices"][0];
      const json& d = c["delta"];
      if (d.contains("reasoning_content") && d["reasoning_content"].is_string())
        Delta("thinking", "thinking_delta", "thinking", d["reasoning_content"], out);
      if (d.contains("content") && d["content"].is_string() && d["content"] != "")
        Delta("text", "text_delta", "text", d["content"], out);
      if (d.contains("tool_calls")) {
        for (const auto& tc : d["tool_calls"]) {
          Close(out);
          out->append(SseEvent("content_block_start", {{"type", "content_block_start"},
                                                       {"index", index_},
                                                       {"content_block",
                                                        {{"type", "tool_use"},
                                                         {"id", tc["id"]},
                                                         {"name", tc["function"]["name"]},
                                                         {"input", json::object()}}}}));
          out->append(SseEvent(
              "content_block_delta",
              {{"type", "content_block_delta"},
               {"index", index_},
               {"delta",
                {{"type", "input_json_delta"}, {"partial_json", tc["function"]["arguments"]}}}}));
          open_ = "tool_use";
        }
      }
      if (c.contains("finish_reason") && !c["finish_reason"].is_null())
        stop_ = AnthropicStop(c["finish_reason"]);
    }
  }
  void End(std::string* out) override {
    if (errored_) return;
    Start(out);
    Close(out);
    out->append(
        SseEvent("message_delta", {{"type", "message_delta"},
                                   {"delta", {{"stop_reason", stop_}, {"stop_sequence", nullptr}}},
                                   {"usage", {{"output_tokens", output_tokens_}}}}));
    out->append(SseEvent("message_stop", {{"type", "message_stop"}}));
  }

 private:
  void Start(std::string* out) {
    if (started_) return;
    started_ = true;
    static std::atomic<uint64_t> counter{1};
    json msg = {
        {"id", "msg_" + std::to_string(std::time(nullptr)) + "_" + std::to_string(counter++)},
        {"type", "message"},
        {"role", "assistant"},
        {"model", model_},
        {"content", json::array()},
        {"stop_reason", nullptr},
        {"stop_sequence", nullptr},
        {"usage", {{"input_tokens", n_prompt_}, {"output_tokens", 0}}}};
    out->append(SseEvent("message_start", {{"type", "message_start"}, {"message", msg}}));
  }
  void Close(std::string* out) {
    if (open_.empty()) return;
    out->append(
        SseEvent("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}}));
    open_.clear();
    ++index_;
  }
  void Delta(const char* block, const char* delta_type, const char* field, const json& text,
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

  std::string model_;
  int n_prompt_;
  SseSplitter sse_;
  bool started_ = false, errored_ = false;
  std::string open_;  // the open content block's type
  int index_ = 0;
  int output_tokens_ = 0;
  std::string stop_ = "end_turn";
};

// Ollama: one object (stream: false) or one object per line.
class OllamaReply : public ReplyTranslator {
 public:
  OllamaReply(Dialect d, bool stream, std::string model, int n_prompt)
      : d_(d), stream_(stream), model_(std::move(model)), n_prompt_(n_prompt), t0_(Now()) {}
  void Feed(std::string_view b, std::string* out) override {
    if (!stream_) {
      body_.append(b);
      return;
    }
    sse_.Feed(b, [&](std::string_view data, bool comment) {
      try {
        Event(data, comment, out);
      } catch (const json::exception&) {  // (not an OpenAI chunk: skipped)
      }
    });
  }
  void Event(std::string_view data, bool comment, std::string* out) {
    {
      if (comment || data == "[DONE]") return;
      const json ev = JsonOrDiscarded<json>(data);
      if (ev.is_discarded()) return;
      if (ev.contains("error")) {
        out->append(api_detail::Dump({{"error", ev["error"].value("message", "")}}) + "\n");
        errored_ = true;
        return;
      }
      if (ev.contains("usage") && ev["usage"].is_object()) {
        eval_count_ = ev["usage"].value("completion_tokens", eval_count_);
        n_prompt_ = ev["usage"].value("prompt_tokens", n_prompt_);
      }
      if (!ev.contains("choices") || ev["choices"].empty()) return;
      const json& c = ev["choices"][0];
      if (c.contains("finish_reason") && !c["finish_reason"].is_null())
        done_reason_ = c["finish_reason"] == "length" ? "length" : "stop";
      json line = Line();
      bool any = false;
      if (d_ == Dialect::kOllamaGenerate) {
        const std::string text = c.contains("text") && c["text"].is_string()
                                     ? c["text"].get<std::string>()
                                 : c.contains("delta") && c["delta"].contains("content") &&
                                         c["delta"]["content"].is_string()
                                     ? c["delta"]["content"].get<std::string>()
                                     : "";
        line["response"] = text;
        any = !text.empty();
        if (c.contains("delta") && c["delta"].contains("reasoning_content")) {
          line["thinking"] = c["delta"]["reasoning_content"];
          any = true;
        }
      } else {
        const json& d = c["delta"];
        json msg = {{"role", "assistant"},
                    {"content",
                     d.contains("content") && d["content"].is_string() ? d["content"] : json("")}};
        any = msg["content"] != "";
        if (d.contains("reasoning_content") && d["reasoning_content"].is_string()) {
          msg["thinking"] = d["reasoning_content"];
          any = true;
        }
        if (d.contains("tool_calls")) {
          msg["tool_calls"] = Calls(d["tool_calls"]);
          any = true;
        }
        line["message"] = msg;
      }
      if (any) out->append(api_detail::Dump(line) + "\n");
    }
  }
  void End(std::string* out) override {
    try {
      Finish(out);
    } catch (const json::exception&) {  // not an OpenAI body (an error): as it is
      out->append(body_);
    }
  }
  void Finish(std::string* out) {
    if (errored_) return;
    if (stream_) {
      json line = Line();
      if (d_ == Dialect::kOllamaGenerate)
        line["response"] = "";
      else
        line["message"] = {{"role", "assistant"}, {"content", ""}};
      Done(&line);
      out->append(api_detail::Dump(line) + "\n");
      return;
    }
    const json r = JsonOrDiscarded<json>(body_);
    if (r.is_discarded() || !r.contains("choices")) {
      out->append(body_);
      return;
    }
    const json& c = r["choices"][0];
    done_reason_ = c["finish_reason"] == "length" ? "length" : "stop";
    eval_count_ = r["usage"].value("completion_tokens", 0);
    n_prompt_ = r["usage"].value("prompt_tokens", n_prompt_);
    json line = Line();
    if (d_ == Dialect::kOllamaGenerate) {
      line["response"] = c.contains("text") ? c["text"] : c["message"]["content"];
      if (c.contains("message") && c["message"].contains("reasoning_content") &&
          c["message"]["reasoning_content"].is_string())
        line["thinking"] = c["message"]["reasoning_content"];
    } else {
      const json& m = c["message"];
      json msg = {{"role", "assistant"},
                  {"content", m["content"].is_string() ? m["content"] : json("")}};
      if (m.contains("reasoning_content") && m["reasoning_content"].is_string())
        msg["thinking"] = m["reasoning_content"];
      if (m.contains("tool_calls")) msg["tool_calls"] = Calls(m["tool_calls"]);
      line["message"] = msg;
    }
    Done(&line);
    out->append(api_detail::Dump(line));
  }

 private:
  static double Now() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  json Line() const { return {{"model", model_}, {"created_at", Iso8601Now()}, {"done", false}}; }
  static json Calls(const json& openai_calls) {
    json out = json::array();
    for (const auto& tc : openai_calls) {
      const json args = JsonOrDiscarded<json>(tc["function"]["arguments"].get<std::string>());
      out.push_back({{"function",
                      {{"name", tc["function"]["name"]},
                       {"arguments", args.is_discarded() ? json::object() : args}}}});
    }
    return out;
  }
  void Done(json* line) const {
    const auto ns = [](double s) { return static_cast<int64_t>(s * 1e9); };
    (*line)["done"] = true;
    (*line)["done_reason"] = done_reason_;
    (*line)["total_duration"] = ns(Now() - t0_);
    (*line)["load_duration"] = 0;
    (*line)["prompt_eval_count"] = n_prompt_;
    (*line)["eval_count"] = eval_count_;
  }

  Dialect d_;
  bool stream_;
  std::string model_;
  int n_prompt_;
  double t0_;
  SseSplitter sse_;
  std::string body_;
  std::string done_reason_ = "stop";
  int eval_count_ = 0;
  bool errored_ = false;
};

// Ollama's /api/embed: the OpenAI embeddings body re-shaped.
class OllamaEmbedReply : public ReplyTranslator {
 public:
  explicit OllamaEmbedReply(std::string model) : model_(std::move(model)) {}
  void Feed(std::string_view b, std::string* out) override { body_.append(b); }
  void End(std::string* out) override {
    try {
      Translate(out);
    } catch (const json::exception&) {
      out->append(body_);
    }
  }
  void Translate(std::string* out) {
    const json r = JsonOrDiscarded<json>(body_);
    if (r.is_discarded() || !r.contains("data")) {
      out->append(body_);
      return;
    }
    json vectors = json::array();
    for (const auto& d : r["data"]) vectors.push_back(d["embedding"]);
    out->append(api_detail::Dump({{"model", model_},
                                  {"embeddings", vectors},
                                  {"prompt_eval_count", r["usage"].value("prompt_tokens", 0)}}));
  }

 private:
  std::string model_, body_;
};

}  // namespace

Dialect DialectOfPath(std::string_view path) {
  if (path == "/v1/messages") return Dialect::kAnthropic;
  if (path == "/api/chat") return Dialect::kOllamaChat;
  if (path == "/api/generate") return Dialect::kOllamaGenerate;
  if (path == "/api/embed" || path == "/api/embeddings") return Dialect::kOllamaEmbed;
  if (path.rfind("/api/", 0) == 0) return Dialect::kOllama;
  return Dialect::kOpenAi;
}

Translated ToOpenAiRequest(Dialect d, std::string_view body) {
  switch (d) {
    case Dialect::kAnthropic:
      return AnthropicRequest(body);
    case Dialect::kOllamaChat:
      return OllamaChatRequest(body);
    case Dialect::kOllamaGenerate:
      return OllamaGenerateRequest(body);
    case Dialect::kOllamaEmbed:
      return OllamaEmbedRequest(body);
    case Dialect::kOpenAi:
    case Dialect::kOllama:
      break;
  }
  Translated t;
  t.body = std::string(body);
  return t;
}

std::string DialectErrorBody(Dialect d, int status, std::string_view openai_error_body) {
  if (d == Dialect::kOpenAi) return std::string(openai_error_body);
  const json e = JsonOrDiscarded<json>(openai_error_body);
  std::string message = "error";
  std::string type = "invalid_request_error";
  if (!e.is_discarded() && e.contains("error") && e["error"].is_object()) {
    message = e["error"].value("message", message);
    type = e["error"].value("type", type);
    if (e["error"].contains("param") && e["error"]["param"].is_string())
      message += " (" + e["error"]["param"].get<std::string>() + ")";
  }
  if (d == Dialect::kAnthropic) {
    // Anthropic's types by status: 401 authentication_error, 404 not_found_error, 429
    // rate_limit_error, 5xx api_error / overloaded_error.
    const char* t = status == 401   ? "authentication_error"
                    : status == 403 ? "permission_error"
                    : status == 404 ? "not_found_error"
                    : status == 413 ? "request_too_large"
                    : status == 429 ? "rate_limit_error"
                    : status == 503 ? "overloaded_error"
                    : status >= 500 ? "api_error"
                                    : "invalid_request_error";
    (void)type;
    return api_detail::Dump({{"type", "error"}, {"error", {{"type", t}, {"message", message}}}});
  }
  return api_detail::Dump({{"error", message}});
}

std::unique_ptr<ReplyTranslator> MakeReplyTranslator(Dialect d, bool stream,
                                                     const std::string& model, int n_prompt) {
  switch (d) {
    case Dialect::kAnthropic:
      if (stream) return std::make_unique<AnthropicStream>(model, n_prompt);
      return std::make_unique<AnthropicWhole>(model);
    case Dialect::kOllamaChat:
    case Dialect::kOllamaGenerate:
      return std::make_unique<OllamaReply>(d, stream, model, n_prompt);
    case Dialect::kOllamaEmbed:
      return std::make_unique<OllamaEmbedReply>(model);
    case Dialect::kOpenAi:
    case Dialect::kOllama:
      break;
  }
  return nullptr;
}

const char* DialectContentType(Dialect d, bool stream) {
  if (!stream) return "application/json";
  if (d == Dialect::kOllamaChat || d == Dialect::kOllamaGenerate) return "application/x-ndjson";
  return "text/event-stream";
}

namespace {

json OllamaModel(const ModelFacts& m) {
  return {{"name", m.name},
          {"model", m.name},
          {"modified_at", Iso8601Now()},
          {"size", m.size_bytes},
          {"digest", ""},
          {"details",
           {{"parent_model", ""},
            {"format", "gguf"},
            {"family", m.family},
            {"families", json::array({m.family})},
            {"parameter_size", m.parameter_size},
            {"quantization_level", m.quantization}}}};
}

}  // namespace

std::string OllamaTagsBody(const ModelFacts& m, bool running) {
  json model = OllamaModel(m);
  if (running) {
    model["expires_at"] = "2999-12-31T23:59:59Z";  // loaded for the server's lifetime
    model["size_vram"] = 0;
    model["context_length"] = m.context;
  }
  return api_detail::Dump({{"models", json::array({model})}});
}

std::string OllamaShowBody(const ModelFacts& m, std::string_view request_body,
                           const std::vector<std::string>& names) {
  const json j = ParseObject(request_body);
  OnlyKeys(j, "", {"model", "name", "verbose"});
  const json* name = Get(j, "model");
  if (name == nullptr) name = Get(j, "name");
  if (name == nullptr || !name->is_string()) Refuse("model", "'model' is required");
  bool served = false;
  for (const std::string& n : names) served = served || n == name->get<std::string>();
  if (!served) Refuse("model", "model '" + name->get<std::string>() + "' not found", 404);
  json caps = json::array({"completion"});
  if (m.tools) caps.push_back("tools");
  if (m.embeddings) caps.push_back("embedding");
  return api_detail::Dump(
      {{"modelfile", ""},
       {"parameters", ""},
       {"template", m.chat_template},
       {"details", OllamaModel(m)["details"]},
       {"model_info",
        {{"general.architecture", m.family}, {m.family + ".context_length", m.context}}},
       {"capabilities", caps},
       {"modified_at", Iso8601Now()}});
}

std::string OllamaVersionBody() {
  return api_detail::Dump({{"version", "0.9.0"}});  // the Ollama API version it follows
}

}  // namespace paddock::server
