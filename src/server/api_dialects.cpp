// server/api_dialects.cpp: the dialects' dispatch (server/api_dialects.h): which front-end a
// path is, its request translation, its reply translator, its error shape. Each dialect's own
// translation is in api_anthropic.cpp, api_responses.cpp and api_ollama.cpp.
#include "server/api_dialects.h"

#include "server/api_dialects_internal.h"

namespace paddock::server {

using dialect_detail::json;

Translated ToOpenAiRequest(Dialect d, std::string_view body) {
  switch (d) {
    case Dialect::kAnthropic:
      return dialect_detail::AnthropicRequest(body);
    case Dialect::kResponses:
      return dialect_detail::ResponsesRequest(body);
    case Dialect::kOllamaChat:
      return dialect_detail::OllamaChatRequest(body);
    case Dialect::kOllamaGenerate:
      return dialect_detail::OllamaGenerateRequest(body);
    case Dialect::kOllamaEmbed:
      return dialect_detail::OllamaEmbedRequest(body);
    case Dialect::kOpenAi:
    case Dialect::kOllama:
      break;
  }
  Translated t;
  t.body = std::string(body);
  return t;
}

std::string DialectErrorBody(Dialect d, int status, std::string_view openai_error_body) {
  if (d == Dialect::kOpenAi || d == Dialect::kResponses) return std::string(openai_error_body);
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
      return dialect_detail::AnthropicReply(stream, model, n_prompt);
    case Dialect::kResponses:
      return dialect_detail::ResponsesReply(stream, model, n_prompt);
    case Dialect::kOllamaChat:
    case Dialect::kOllamaGenerate:
      return dialect_detail::OllamaReply(d, stream, model, n_prompt);
    case Dialect::kOllamaEmbed:
      return dialect_detail::OllamaEmbedReply(model);
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

}  // namespace paddock::server
