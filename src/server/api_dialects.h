// server/api_dialects.h: OpenAI's Responses API, Anthropic's Messages API and Ollama's API as
// front-ends over the OpenAI-compatible chat completions.
//
// A request in another API's shape is translated into the OpenAI chat (or completions, or
// embeddings) body and parsed by the same request schema (api_request.cpp), so every check,
// limit and sampler applies alike; the OpenAI response (a whole body, or server-sent chunks) is
// translated back, in that API's own event types and error shape. One generation path, three
// front-ends: what one API's clients can ask for the others get the same way.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "server/api.h"

namespace paddock::server {

enum class Dialect {
  kOpenAi,          // POST /v1/completions, /v1/chat/completions, /v1/embeddings, ...
  kAnthropic,       // POST /v1/messages
  kResponses,       // POST /v1/responses (OpenAI's Responses API)
  kOllamaChat,      // POST /api/chat
  kOllamaGenerate,  // POST /api/generate
  kOllamaEmbed,     // POST /api/embed, /api/embeddings
  kOllama,          // Ollama's other endpoints (errors in its shape)
};

// A request body in `d`'s shape as the OpenAI body it means (chat: *chat = true; completions:
// false); *stream: whether the reply streams. Extra: template variables the request implies
// (Anthropic's thinking, Ollama's think), optional ones. Throws ApiError with the dialect's own
// field names in `param`.
struct Translated {
  std::string body;
  bool chat = true;
  bool stream = false;
  std::vector<ChatVar> vars;
  // Responses API: the stored response whose conversation this one continues ("" none), and
  // whether to store this one (OpenAI's default: yes).
  std::string previous_response_id;
  bool store = false;
  bool instructions = false;  // the body's first message is the instructions' system message
  // Ollama: keep_alive in seconds (< 0: forever) when given; no prompt (/api/generate) or no
  // messages (/api/chat): load the model (unload it with keep_alive 0) and generate nothing.
  bool keep_alive_given = false;
  double keep_alive = 0;
  bool load_only = false;
};
Translated ToOpenAiRequest(Dialect d, std::string_view body);

// An OpenAI error body (ErrorBody) in the dialect's error shape.
std::string DialectErrorBody(Dialect d, int status, std::string_view openai_error_body);

// Translates the OpenAI response of one request (fed as it is produced: a whole JSON body, or
// server-sent events) into the dialect's: Anthropic's message / events, Ollama's object /
// newline-delimited objects. n_prompt: the prompt's tokens (Anthropic's message_start carries
// them before the usage does).
class ReplyTranslator {
 public:
  virtual ~ReplyTranslator() = default;
  // Bytes of the OpenAI reply; translated bytes appended to *out.
  virtual void Feed(std::string_view openai, std::string* out) = 0;
  // The OpenAI reply ended.
  virtual void End(std::string* out) = 0;
  // Responses API: called once with the whole response object (JSON) when the reply completed.
  void OnResponse(std::function<void(const std::string&)> fn) { on_response_ = std::move(fn); }

 protected:
  std::function<void(const std::string&)> on_response_;
};

// Responses API state. A request that continues a stored response: its body (the OpenAI chat
// body of ToOpenAiRequest) with the stored conversation (`prior`, a JSON array of messages)
// before its own messages (after the system message of its instructions, which are not carried
// over, as OpenAI does).
std::string ContinueConversation(std::string_view openai_body, std::string_view prior,
                                 bool instructions);
// The conversation to store for a response: the request's messages (its instructions' system
// message left out) and the response's output as an assistant message; a JSON array.
std::string StoredConversation(std::string_view openai_body, std::string_view response,
                               bool instructions);
std::string ResponseId(std::string_view response);
std::string ResponseDeletedBody(const std::string& id);  // DELETE /v1/responses/{id}
std::unique_ptr<ReplyTranslator> MakeReplyTranslator(Dialect d, bool stream,
                                                     const std::string& model, int n_prompt);

// The content type of a dialect's reply.
const char* DialectContentType(Dialect d, bool stream);

// Ollama's model listings: /api/tags, /api/ps, /api/show (body: {"model"}), /api/version.
struct ModelFacts {
  std::string name;
  std::string family;          // general.architecture
  std::string quantization;    // e.g. Q4_0
  std::string parameter_size;  // e.g. 1.1B
  std::string chat_template;   // the Jinja source, if any
  uint64_t size_bytes = 0;     // the model file
  int64_t modified = 0;        // unix seconds
  int context = 0;
  bool tools = false;  // the template writes tools
  bool embeddings = true;
  uint64_t loaded_bytes = 0;  // /api/ps: what it holds in memory
  double expires = 0;         // /api/ps: when keep_alive unloads it (unix seconds; 0: never)
};
std::string OllamaTagsBody(const std::vector<ModelFacts>& models, bool running);
// Ollama's answer to a request without a prompt: the model loaded (or unloaded).
std::string OllamaLoadBody(Dialect d, const std::string& model, bool unloaded);
std::string OllamaShowBody(const ModelFacts& m, std::string_view request_body,
                           const std::vector<std::string>& names);  // throws ApiError (404)
std::string OllamaVersionBody();

}  // namespace paddock::server
