// server/api_dialects_internal.h: what the API translators share (internal to server/): the
// request helpers (refusals naming the dialect's own fields), server-sent event splitting and
// writing, and each dialect's request translation and reply translators (api_anthropic.cpp,
// api_responses.cpp, api_ollama.cpp). Included only by those files and api_dialects.cpp.
#pragma once

#include <time.h>

#include <atomic>
#include <ctime>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

#include "base/json_linear.h"
#include "server/api_dialects.h"
#include "server/api_json.h"
#include "server/reply_reader.h"

namespace paddock::server::dialect_detail {

using api_detail::json;
using api_detail::kMaxMembers;

[[noreturn]] inline void Refuse(const std::string& param, const std::string& msg,
                                int status = 400) {
  ApiError e;
  e.status = status;
  e.param = param;
  e.message = msg;
  throw e;
}

inline json ParseObject(std::string_view body) {
  json j;
  std::string why;
  if (!ParseJsonLinear(body, &j, &why, kMaxMembers))
    Refuse("", "the request body is not valid JSON: " + why);
  if (!j.is_object()) Refuse("", "the request body must be a JSON object");
  return j;
}

inline void OnlyKeys(const json& j, const std::string& where,
                     std::initializer_list<const char*> keys) {
  for (const auto& [k, v] : j.items()) {
    bool known = false;
    for (const char* x : keys) known = known || k == x;
    if (!known) {
      const std::string p = where.empty() ? k : where + "." + k;
      Refuse(p, "unknown field '" + p + "'");
    }
  }
}

inline const json* Get(const json& j, const char* k) {
  const auto it = j.find(k);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

// The request's `tools` array (absent: null) as OpenAI function tools: `check` refuses what the
// dialect does not take in a tool (given the tool and its path "tools[i]", before anything is
// read of it); the rest is its name, description and parameters (from `params_key`; absent: any
// object).
template <class Check>
json FunctionTools(const json& j, const char* params_key, Check&& check) {
  const json* tools = Get(j, "tools");
  if (tools == nullptr) return json();
  if (!tools->is_array()) Refuse("tools", "'tools' must be an array");
  json list = json::array();
  for (size_t i = 0; i < tools->size(); ++i) {
    const json& t = (*tools)[i];
    check(t, "tools[" + std::to_string(i) + "]");
    json fn = {{"name", t.value("name", "")}};
    if (const json* d = Get(t, "description")) fn["description"] = *d;
    fn["parameters"] = Get(t, params_key) ? t[params_key] : json{{"type", "object"}};
    list.push_back({{"type", "function"}, {"function", fn}});
  }
  return list;
}

inline ChatVar OptionalBool(const char* name, bool v) {
  ChatVar var;
  var.name = name;
  var.kind = ChatVar::Kind::kBool;
  var.b = v;
  var.optional = true;
  return var;
}

inline std::string Iso8601(double unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

inline std::string Iso8601Now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

inline std::string SseEvent(const char* type, const json& data) {
  return std::string("event: ") + type + "\ndata: " + api_detail::Dump(data) + "\n\n";
}

// Anthropic's Messages API (api_anthropic.cpp).
Translated AnthropicRequest(std::string_view body);
std::unique_ptr<ReplyTranslator> AnthropicReply(bool stream, const std::string& model,
                                                int n_prompt);
// OpenAI's Responses API (api_responses.cpp).
Translated ResponsesRequest(std::string_view body);
std::unique_ptr<ReplyTranslator> ResponsesReply(bool stream, const std::string& model,
                                                int n_prompt);
// Ollama's API (api_ollama.cpp).
Translated OllamaChatRequest(std::string_view body);
Translated OllamaGenerateRequest(std::string_view body);
Translated OllamaEmbedRequest(std::string_view body);
std::unique_ptr<ReplyTranslator> OllamaReply(Dialect d, bool stream, const std::string& model,
                                             int n_prompt);
std::unique_ptr<ReplyTranslator> OllamaEmbedReply(const std::string& model);

}  // namespace paddock::server::dialect_detail
