// server/api.h: the OpenAI-compatible request and response bodies, without any HTTP.
//
// Parsing (api_request.cpp, api_tools.cpp) follows the request schema (request_schema.h): every
// field it accepts is a row there, with its type, range and default; any other name is a 400
// naming it. Rendering is api_response.cpp. Errors carry the HTTP status and an OpenAI-style
// error object. JSON handling stays in those files (api_json.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "paddock/chat.h"
#include "paddock/paddock.h"
#include "paddock/service.h"
#include "server/lora_registry.h"

namespace paddock::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field, if any
  std::string code;
};

// What the server knows when it parses a request.
struct ApiContext {
  std::string model_name;            // the first served name (metrics label)
  std::vector<std::string> aliases;  // further names the model answers to
  int context = 0;
  int n_vocab = 0;  // 0: token ids are not checked here
  double default_timeout = 0;
  // Compiles a grammar for the served model (Engine::CompileGrammar; throws Error).
  std::function<std::shared_ptr<const Grammar>(GrammarKind, const std::string&)> compile;
  // How the served model writes tool calls (ChatFormatter::tool_format).
  ToolFormat tool_format = ToolFormat::kHermes;
  // The served LoRA adapters (each a model id of its own), or null.
  const LoraRegistry* loras = nullptr;
};

struct ApiRequest {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;
  bool max_tokens_given = false;
  std::string model;
  // Completions: text or token ids; chat: messages.
  std::string prompt_text;
  std::vector<int32_t> prompt_tokens;
  bool prompt_is_tokens = false;
  std::vector<ChatMessage> messages;
  // Chat: the images of image_url parts (their bytes), in order; each part left kImageMarker
  // in its message's content.
  std::vector<std::string> images;
  // Completions with several prompts: all of them (prompt_text / prompt_tokens hold the first).
  struct Prompt {
    std::string text;
    std::vector<int32_t> tokens;
  };
  std::vector<Prompt> more_prompts;
  RequestOptions options;
  // Completions' echo: the prompt as text before the completion (set with the prompt), and its
  // first token's text (the one the echoed log-probabilities give no value for).
  bool echo = false;
  std::string echo_text, echo_first_token;
  // Chat: variables for the Jinja template (chat_template_kwargs); whether the reply's
  // <think> section is returned as reasoning_content, and whether the prompt opened it.
  std::vector<ChatVar> template_vars;
  bool reasoning = false, reasoning_open = false;
  // Chat with a harmony model (gpt-oss): the reply's channels are parsed (HarmonyParser), its
  // analysis becoming reasoning_content and its calls tool_calls, instead of the two above.
  bool harmony = false;
  // Chat with tools (tool_choice auto, required or named): the tools for the template (a JSON
  // array), and the calls in the reply (written in ctx.tool_format) become message.tool_calls.
  std::string tools;
  bool tool_calls = false, parallel_tool_calls = true;
  ToolFormat tool_format = ToolFormat::kHermes;
};

// Throws ApiError.
ApiRequest ParseRequest(std::string_view body, bool chat, const ApiContext& ctx);

std::string ErrorBody(const ApiError& e);
// A server_error body (code engine_failure) for work the engine thread failed (a device lost):
// a whole body's error, answered 503 with Retry-After.
std::string EngineErrorBody(const std::string& message);
// A unique, unguessable id for an object the server returns: prefix ("chatcmpl-", "msg_",
// "resp_", ...) and 128 random bits from the kernel's generator (32 hex digits). The one id
// generator.
std::string NewId(const char* prefix);
const char* OpenAiFinishReason(FinishReason r);

struct ResponseMeta {
  std::string id;
  int64_t created = 0;
  std::string model;
};

// Whole (non-streaming) response: one choice per result.
std::string CompletionBody(const ApiRequest& r, const ResponseMeta& m,
                           const std::vector<GenerateResult>& results);
// One server-sent event payload ("data: ...\n\n") for choice `index`: new text and its tokens'
// log-probabilities; finish: nullptr while streaming text; echo: the choice's first chunk of
// a completion with echo (the prompt text, and with logprobs its entries, first); offset: the
// choice's characters so far (text_offset), advanced.
struct ChunkPart {
  int index = 0;
  std::string_view text;
  std::string_view reasoning;  // chat: reasoning_content (ReasoningSplitter)
  const std::vector<ChatToolCall>* tool_calls = nullptr;  // chat: delta.tool_calls (the end)
  std::vector<TokenLogprob> logprobs;
  const char* finish = nullptr;
  const std::string* stop = nullptr;  // with finish: the stop string that ended it (stop_reason)
  bool first = false;
  bool echo = false;
  const std::vector<TokenLogprob>* prompt_logprobs = nullptr;
  size_t* offset = nullptr;
};
std::string StreamChunk(const ApiRequest& r, const ResponseMeta& m, const ChunkPart& part);
std::string StreamUsageChunk(const ApiRequest& r, const ResponseMeta& m,
                             const std::vector<GenerateResult>& results);
std::string StreamErrorEvent(const ApiError& e);

// POST /v1/load_lora_adapter (load) and /v1/unload_lora_adapter: vLLM's body.
struct LoraUpdateRequest {
  std::string name, path;
  float scale = 1;
};
LoraUpdateRequest ParseLoraUpdate(std::string_view body, bool load);  // throws ApiError
std::string LoraUpdatedBody(const std::string& name, bool loaded);
// A served model as /v1/models lists it (each name, and each adapter as a model of its own).
struct ServedModel {
  std::string id;
  std::vector<std::string> aliases;
  int context = 0, n_vocab = 0;
  const char* status = nullptr;  // several models: "loaded", "loading" or "unloaded"
  std::vector<LoraRegistry::Entry> loras;
};
ServedModel ServedOf(const ApiContext& ctx);
std::string ModelsBody(const std::vector<ServedModel>& models, int64_t created);
// The 404 for a model id this server does not serve, naming the ones it does.
ApiError UnknownModel(const std::vector<ServedModel>& models, const std::string& id);
ApiError UnknownModel(const ApiContext& ctx, const std::string& id);
// GET /v1/models/{id}: one served name (or alias); else ApiError 404 model_not_found.
std::string ModelBody(const std::vector<ServedModel>& models, const std::string& id,
                      int64_t created);
// A top-level string member of a JSON object body (e.g. "model"), or "" (absent, not a
// string, or the body is not an object: the full parse reports that). Linear in the body.
std::string PeekString(std::string_view body, std::string_view key);

// POST /v1/embeddings (OpenAI): input a string, strings, token ids or arrays of them (at most
// 256 inputs); encoding_format float or base64 (little-endian float32).
struct EmbeddingsRequest {
  std::string model;
  std::vector<std::string> texts;  // or
  std::vector<std::vector<int32_t>> token_inputs;
  bool base64 = false;
  int dimensions = 0;     // > 0: each vector's first N components, normalized again
  bool truncate = false;  // an input over the context keeps its first tokens
};
EmbeddingsRequest ParseEmbeddings(std::string_view body, const ApiContext& ctx);  // ApiError

// POST /v1/rerank, /rerank (Jina's and llama-server's shape) and /v2/rerank (Cohere's):
// {"model", "query", "documents": [text | {"text"}], "top_n", "return_documents",
// "max_tokens_per_doc", "truncate"} (server/api_rerank.cpp).
struct RerankRequest {
  std::string model, query;
  std::vector<std::string> documents;
  int top_n = 0;  // 0: all
  bool return_documents = false;
  int max_tokens_per_doc = 0;  // 0: no limit
  bool truncate = false;
};
RerankRequest ParseRerank(std::string_view body, const ApiContext& ctx, bool cohere);  // ApiError
// The results, highest score first (ties: the earlier document), top_n of them. Cohere's shape
// (`cohere`): an id, scores as sigmoid(score) in [0, 1], meta.billed_units; else Jina's and
// llama-server's: the classification head's score as llama.cpp gives it, usage.
std::string RerankBody(const RerankRequest& r, const std::vector<float>& scores, int tokens,
                       bool cohere);
std::string EmbeddingsBody(const std::vector<std::vector<float>>& vectors, const std::string& model,
                           int prompt_tokens, bool base64);

// POST /tokenize (llama-server's shape): {"content": text, "add_special": bool (default true:
// BOS where the model adds one), "parse_special": bool (default false: control tokens spelled
// in the text stay text), "with_pieces": bool}. POST /detokenize: {"tokens": [ids]}.
struct TokenizeRequest {
  std::string content;
  bool add_special = true;
  bool parse_special = false;
  bool with_pieces = false;
};
TokenizeRequest ParseTokenize(std::string_view body);                      // throws ApiError
std::vector<int32_t> ParseDetokenize(std::string_view body, int n_vocab);  // throws ApiError
// pieces: each token's bytes (empty unless asked for); bytes that are not UTF-8 become byte arrays.
std::string TokenizeBody(const std::vector<int32_t>& tokens,
                         const std::vector<std::string>* pieces);
std::string DetokenizeBody(std::string_view text);

}  // namespace paddock::server
