// server/api_json.h: what the API's request and response files share (internal to server/).
//
// nlohmann::json (Debian's nlohmann-json3-dev: a well-kept, exception-safe JSON library) is
// included only by the API's translation units (api_request, api_tools, api_response), so its
// compile cost stays there. Field getters read a field's type, range and default from the
// request schema and throw ApiError (400, `param` naming the field) for anything else.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "server/api.h"
#include "server/request_schema.h"

namespace paddock::server::api_detail {

// Ordered: a JSON Schema's properties keep the order they were written in (the order the model
// writes them: "reasoning" before "answer" matters to what it answers).
using json = nlohmann::ordered_json;

inline constexpr int kMaxDepth = 64;           // JSON nesting; a request needs 5
inline constexpr size_t kMaxStopBytes = 1024;  // per stop sequence
inline constexpr size_t kMaxModelBytes = 256;  // a model name
inline constexpr size_t kMaxErrorBytes = 512;  // an error message: never megabytes echoed back
inline constexpr size_t kMaxParamBytes = 128;
inline constexpr size_t kMaxPrompts = 32;  // several prompts in one completions request
// Members of any one object in a request body (logit_bias takes 1024, metadata 16): a body with
// a bigger object is refused while it is parsed, before it is built.
inline constexpr size_t kMaxMembers = 4096;
// Inputs of one embeddings request, documents of one rerank request (OpenAI's limit).
inline constexpr size_t kMaxEmbedInputs = 2048;

[[noreturn]] void Bad(const std::string& param, const std::string& msg,
                      const std::string& code = "");

// The field, or nullptr when it is absent or null.
const json* Field(const json& j, const char* name);

// Typed getters with explicit defaults and ranges (for fields whose range depends on the
// request or the model, e.g. max_tokens up to the context).
double Number(const json& j, const char* name, double dflt, double lo, double hi);
int64_t Integer(const json& j, const char* name, int64_t dflt, int64_t lo, int64_t hi);
bool Bool(const json& j, const char* name, bool dflt);
std::string Text(const json& j, const char* name);

// The same, with the default and range of the schema's row for `name` on `endpoint`.
// (endpoints: a set of Endpoint bits, e.g. kGenerate)
const RequestField& Spec(std::string_view name, uint8_t endpoints);
double Number(const json& j, const char* name, uint8_t endpoints);
int64_t Integer(const json& j, const char* name, uint8_t endpoints);
bool Bool(const json& j, const char* name, uint8_t endpoints);

// A request body: a JSON object nested at most kMaxDepth deep (checked before it is parsed),
// every top-level name a row of the schema for `endpoint` (400 naming any other, or saying which
// endpoint it applies to, or why it is refused), every value of its row's type, and no field
// given together with its alias.
json ParseBody(std::string_view body, Endpoint endpoint);

// Generated text may end in an invalid UTF-8 sequence only on cancellation: replaced, never a
// throw.
std::string Dump(const json& j);

// The sampling fields (OpenAI's, vLLM's, llama-server's) into *sp (api_sampling.cpp).
void ParseSampling(const json& j, const ApiContext& ctx, SamplingParams* sp);

// Chat with tools: tools / tool_choice / parallel_tool_calls into r (api_tools.cpp).
void ParseTools(const json& j, const ApiContext& ctx, ApiRequest* r);

}  // namespace paddock::server::api_detail
