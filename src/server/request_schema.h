// server/request_schema.h: every field of every request body the API reads, declared once.
//
// One row per field and endpoint: its JSON type, accepted range, default, where the name comes
// from (OpenAI, vLLM, llama-server, Paddock) and what Paddock does with it. The request parser
// (api_request.cpp) reads types, ranges and defaults from here, refuses every name this table
// does not hold for the endpoint (naming it), and docs/api.md's field table is this table
// (RequestFieldsMarkdown; a test checks that the two agree). Adding a field is adding a row and
// the code that uses it. Nested objects (messages, tools, response_format) are checked by their
// own parsers, not here.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace paddock::server {

enum class FieldType : uint8_t {
  kBool,
  kInteger,
  kNumber,
  kString,
  kObject,
  kArray,
  kStringOrArray,
  kAny,
};

// The request bodies (bit set: a row may serve several).
enum Endpoint : uint8_t {
  kCompletions = 1,  // POST /v1/completions
  kChat = 2,         // POST /v1/chat/completions
  kEmbeddings = 4,   // POST /v1/embeddings
  kTokenize = 8,     // POST /tokenize
  kDetokenize = 16,  // POST /detokenize
  kLoraUpdate = 32,  // POST /v1/load_lora_adapter, /v1/unload_lora_adapter
  kRerank = 64,      // POST /v1/rerank, /rerank, /v2/rerank
};
inline constexpr uint8_t kGenerate = kCompletions | kChat;

enum class FieldUse : uint8_t {
  kUsed,      // read and applied
  kAlias,     // another name of `alias_of` (the two together: 400)
  kAccepted,  // accepted, type-checked, with no effect here (`effect` says why)
  kRefused,   // a name another API defines that Paddock does not implement: 400 naming it
};

// hi: the served model's context length.
inline constexpr double kContextLength = -1e308;  // (a value no real bound takes)

struct RequestField {
  std::string_view name;
  uint8_t endpoints;
  FieldType type;
  FieldUse use;
  double lo = 0, hi = 0;         // kInteger / kNumber: the accepted range
  double def = 0;                // kInteger / kNumber / kBool: the default (an integer's: whole)
  std::string_view default_doc;  // the default as docs/api.md shows it ("" : none)
  std::string_view alias_of;     // kAlias: the field it stands for
  std::string_view origin;       // OpenAI, vLLM, llama-server, Paddock
  std::string_view effect;       // what Paddock does with it; kRefused: why not
};

std::span<const RequestField> RequestFields();

// The row for `name` on one of `endpoints` (Endpoint bits), or nullptr.
const RequestField* FindRequestField(std::string_view name, uint8_t endpoints);

// The endpoints' names ("completions, chat") for the bits of `endpoints`.
std::string EndpointNames(uint8_t endpoints);

// The Markdown table docs/api.md holds between `<!-- request-fields -->` and
// `<!-- /request-fields -->`.
std::string RequestFieldsMarkdown();

}  // namespace paddock::server
