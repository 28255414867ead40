// server/api_request.cpp: request bodies to ApiRequest (and the embeddings, tokenize and
// detokenize requests). Types, ranges, defaults and the set of accepted names come from the
// request schema (server/request_schema.h); the functions here add what a table cannot say:
// cross-field rules, nested objects, grammars.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>

#include "base/json_linear.h"
#include "base/utf8.h"
#include "server/api.h"
#include "server/api_json.h"
#include "vision/image.h"

namespace paddock::server {
namespace api_detail {

[[noreturn]] void Bad(const std::string& param, const std::string& msg, const std::string& code) {
  ApiError e;
  e.status = 400;
  e.param = param;
  e.message = msg;
  e.code = code;
  throw e;
}

const json* Field(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

double Number(const json& j, const char* name, double dflt, double lo, double hi) {
  const json* f = Field(j, name);
  if (f == nullptr) return dflt;
  if (!f->is_number()) Bad(name, std::string("'") + name + "' must be a number");
  const double v = f->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    Bad(name, std::string("'") + name + "' must be between " + json(lo).dump() + " and " +
                  json(hi).dump() + ", got " + f->dump());
  }
  return v;
}

int64_t Integer(const json& j, const char* name, int64_t dflt, int64_t lo, int64_t hi) {
  const json* f = Field(j, name);
  if (f == nullptr) return dflt;
  if (!f->is_number_integer()) {
    // 16.0 is an integer in JSON's number model; accept whole floats.
    if (f->is_number_float() && std::floor(f->get<double>()) == f->get<double>() &&
        std::fabs(f->get<double>()) < 9e15) {
      const auto v = static_cast<int64_t>(f->get<double>());
      if (v < lo || v > hi)
        Bad(name, std::string("'") + name + "' must be between " + std::to_string(lo) + " and " +
                      std::to_string(hi) + ", got " + f->dump());
      return v;
    }
    Bad(name, std::string("'") + name + "' must be an integer");
  }
  if (f->is_number_unsigned() && f->get<uint64_t>() > static_cast<uint64_t>(hi)) {
    Bad(name, std::string("'") + name + "' must be between " + std::to_string(lo) + " and " +
                  std::to_string(hi) + ", got " + f->dump());
  }
  const int64_t v = f->get<int64_t>();
  if (v < lo || v > hi)
    Bad(name, std::string("'") + name + "' must be between " + std::to_string(lo) + " and " +
                  std::to_string(hi) + ", got " + f->dump());
  return v;
}

bool Bool(const json& j, const char* name, bool dflt) {
  const json* f = Field(j, name);
  if (f == nullptr) return dflt;
  if (!f->is_boolean()) Bad(name, std::string("'") + name + "' must be a boolean");
  return f->get<bool>();
}

std::string Text(const json& j, const char* name) {
  const json* f = Field(j, name);
  if (f == nullptr) return "";
  if (!f->is_string()) Bad(name, std::string("'") + name + "' must be a string");
  return f->get<std::string>();
}

const RequestField& Spec(std::string_view name, uint8_t endpoints) {
  const RequestField* f = FindRequestField(name, endpoints);
  if (f == nullptr) std::abort();  // a field the parser reads is a row of the schema
  return *f;
}

double Number(const json& j, const char* name, uint8_t endpoints) {
  const RequestField& f = Spec(name, endpoints);
  return Number(j, name, f.def, f.lo, f.hi);
}

int64_t Integer(const json& j, const char* name, uint8_t endpoints) {
  const RequestField& f = Spec(name, endpoints);
  return Integer(j, name, static_cast<int64_t>(f.def), static_cast<int64_t>(f.lo),
                 static_cast<int64_t>(f.hi));
}

bool Bool(const json& j, const char* name, uint8_t endpoints) {
  return Bool(j, name, Spec(name, endpoints).def != 0);
}

namespace {

// Refuses JSON nested deeper than kMaxDepth before any of it is built: one pass over the bytes
// (strings and their escapes skipped), no allocation. A body of 8 MB of `{"a":` costs a scan,
// not a tree.
void CheckNesting(std::string_view body) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxDepth)
        Bad("", "the request body nests deeper than " + std::to_string(kMaxDepth) + " levels");
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
}

bool HasType(const json& v, FieldType t) {
  switch (t) {
    case FieldType::kBool:
      return v.is_boolean();
    case FieldType::kInteger:  // 16.0 is an integer in JSON's number model (Integer checks)
    case FieldType::kNumber:
      return v.is_number();
    case FieldType::kString:
      return v.is_string();
    case FieldType::kObject:
      return v.is_object();
    case FieldType::kArray:
      return v.is_array();
    case FieldType::kStringOrArray:
      return v.is_string() || v.is_array();
    case FieldType::kAny:
      return true;
  }
  return false;
}

// "a boolean", "an integer", ... for the type errors.
const char* TypePhrase(FieldType t) {
  switch (t) {
    case FieldType::kBool:
      return "a boolean";
    case FieldType::kInteger:
      return "an integer";
    case FieldType::kNumber:
      return "a number";
    case FieldType::kString:
      return "a string";
    case FieldType::kObject:
      return "an object";
    case FieldType::kArray:
      return "an array";
    case FieldType::kStringOrArray:
    case FieldType::kAny:
      break;
  }
  return "a string or an array of strings";
}

// Every name a row of the schema for the endpoint; null values stand for absent fields.
void CheckNames(const json& j, Endpoint endpoint) {
  for (const auto& [k, v] : j.items()) {
    const RequestField* f = FindRequestField(k, endpoint);
    if (f == nullptr) {
      for (const RequestField& other : RequestFields()) {
        if (other.name != k || (endpoint & kGenerate) == 0 || (other.endpoints & kGenerate) == 0)
          continue;
        Bad(k, "'" + k + "' applies to " + EndpointNames(other.endpoints) + ", not " +
                   EndpointNames(endpoint));
      }
      Bad(k, "unknown field '" + k + "' (docs/api.md lists the fields)");
    }
    if (f->use == FieldUse::kRefused)
      Bad(k, "'" + k + "' is not supported: " + std::string(f->effect));
    if (v.is_null()) continue;
    if (!HasType(v, f->type)) Bad(k, "'" + k + "' must be " + TypePhrase(f->type));
    if (f->use != FieldUse::kAlias) continue;
    for (const RequestField& other : RequestFields()) {  // the field, or another alias of it
      const bool same =
          other.name == f->alias_of || (other.alias_of == f->alias_of && other.name != f->name);
      if (same && (other.endpoints & endpoint) != 0 &&
          Field(j, std::string(other.name).c_str()) != nullptr)
        Bad(k, "give one of '" + std::string(other.name) + "' and '" + k + "', not both");
    }
  }
}

}  // namespace

json ParseBody(std::string_view body, Endpoint endpoint) {
  CheckNesting(body);
  json j;
  std::string why;
  if (!ParseJsonLinear(body, &j, &why, kMaxMembers))
    Bad("", "the request body is not valid JSON: " + why);
  if (!j.is_object()) Bad("", "the request body must be a JSON object");
  CheckNames(j, endpoint);
  return j;
}

std::string Dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace api_detail

namespace {

using namespace api_detail;

// A message's content: a string, null, or content parts. Text parts are joined; an assistant's
// refusal parts are what it said; other part types (images, audio, files) need a model that
// takes them: 400 naming the type.
std::string MessageContent(const json& c, size_t i, std::vector<std::string>* images) {
  const std::string param = "messages[" + std::to_string(i) + "].content";
  if (c.is_null()) return "";
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) Bad(param, "'" + param + "' must be a string or an array of content parts");
  std::string out;
  for (size_t k = 0; k < c.size(); ++k) {
    const json& part = c[k];
    const std::string pp = param + "[" + std::to_string(k) + "]";
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      Bad(pp, "each content part needs a string 'type'");
    const std::string type = part["type"].get<std::string>();
    if (type == "image_url") {  // {"image_url": {"url": "data:...", "detail": ...}} or a string
      for (const auto& [key, v] : part.items())
        if (key != "type" && key != "image_url")
          Bad(pp + "." + key, "unknown field '" + pp + "." + key + "'");
      const json* iu = Field(part, "image_url");
      const json* url = iu != nullptr && iu->is_object() ? Field(*iu, "url") : iu;
      if (url == nullptr || !url->is_string())
        Bad(pp + ".image_url", "an image_url content part needs 'image_url': {\"url\": ...}");
      if (iu->is_object())
        for (const auto& [key, v] : iu->items())
          if (key != "url" && key != "detail")
            Bad(pp + ".image_url." + key, "unknown field '" + pp + ".image_url." + key + "'");
      try {
        images->push_back(ImageBytesFromUrl(url->get<std::string>(), ImageLimits().max_bytes));
      } catch (const Error& e) {
        Bad(pp + ".image_url.url", e.what());
      }
      out += kImageMarker;
      continue;
    }
    const char* field = type == "text" ? "text" : type == "refusal" ? "refusal" : nullptr;
    if (field == nullptr)
      Bad(pp + ".type", "content parts of type '" + type +
                            "' are not supported (parts 'text', 'image_url' and 'refusal')");
    for (const auto& [key, v] : part.items())
      if (key != "type" && key != field && !(key == "annotations" && v.is_array()))
        Bad(pp + "." + key, "unknown field '" + pp + "." + key + "'");
    if (!part.contains(field) || !part[field].is_string())
      Bad(pp + "." + field,
          std::string("a ") + type + " content part needs a string '" + field + "'");
    out += part[field].get<std::string>();
  }
  return out;
}

// The fields of a message, by role: what a response message carries is accepted back in a
// request (OpenAI's assistant message: refusal, audio: null, annotations, function_call: null;
// reasoning servers' reasoning_content). Any field may be null where it is optional.
void CheckMessageFields(const json& msg, const std::string& rs, const std::string& param) {
  for (const auto& [k, v] : msg.items()) {
    if (k == "role" || k == "content") continue;
    const bool assistant = rs == "assistant";
    if (k == "name" && (v.is_string() || v.is_null())) continue;  // accepted; not templated
    if (k == "tool_calls" && assistant) continue;
    if (k == "tool_call_id" && rs == "tool") continue;
    if ((k == "reasoning_content" || k == "reasoning" || k == "refusal") && assistant) {
      if (!v.is_string() && !v.is_null())
        Bad(param + "." + k, "'" + param + "." + k + "' must be a string or null");
      continue;
    }
    if (k == "annotations" && assistant && (v.is_array() || v.is_null())) continue;
    if ((k == "audio" || k == "function_call") && assistant) {
      if (v.is_null()) continue;
      Bad(param + "." + k, k == "audio" ? "audio replies are not supported by this model"
                                        : "function_call is deprecated: send tool_calls");
    }
    Bad(param + "." + k, "unknown field '" + param + "." + k + "'");
  }
}

// The model name (the served one, or 400 model_not_found) and streaming options.
void ParseModelAndStream(const json& j, const ApiContext& ctx, ApiRequest* rp) {
  ApiRequest& r = *rp;
  r.model = Text(j, "model");
  if (r.model.size() > kMaxModelBytes)
    Bad("model", "'model' is at most " + std::to_string(kMaxModelBytes) + " bytes");
  const bool alias =
      std::find(ctx.aliases.begin(), ctx.aliases.end(), r.model) != ctx.aliases.end();
  if (!r.model.empty() && r.model != ctx.model_name && !alias) {
    r.options.lora = ctx.loras != nullptr ? ctx.loras->Find(r.model) : nullptr;
    if (r.options.lora == nullptr) {
      throw UnknownModel(ctx, r.model);
    }
  }
  if (r.model.empty()) r.model = ctx.model_name;
  r.stream = Bool(j, "stream", false);
  if (const json* so = Field(j, "stream_options")) {
    if (!so->is_object()) Bad("stream_options", "'stream_options' must be an object");
    if (!r.stream) Bad("stream_options", "stream_options is only allowed with stream: true");
    for (const auto& [k, v] : so->items()) {
      if (k != "include_usage")
        Bad("stream_options." + k, "unknown field 'stream_options." + k + "'");
    }
    r.include_usage = Bool(*so, "include_usage", false);
  }
}

// Chat: chat_template_kwargs, variables for the model's Jinja template (any JSON value).
void ParseTemplateVars(const json& j, ApiRequest* rp) {
  const json* kw = Field(j, "chat_template_kwargs");
  if (kw == nullptr) return;
  if (!kw->is_object()) Bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
  for (const auto& [k, v] : kw->items()) {
    ChatVar var;
    var.name = k;
    if (v.is_boolean()) {
      var.kind = ChatVar::Kind::kBool;
      var.b = v.get<bool>();
    } else if (v.is_number_integer()) {
      var.kind = ChatVar::Kind::kInt;
      var.i = v.get<int64_t>();
    } else if (v.is_number()) {
      var.kind = ChatVar::Kind::kNumber;
      var.num = v.get<double>();
    } else if (v.is_string()) {
      var.kind = ChatVar::Kind::kString;
      var.str = v.get<std::string>();
    } else if (v.is_array() || v.is_object()) {
      var.kind = ChatVar::Kind::kJson;  // lists and dicts in the template
      var.str = v.dump();
    }
    rp->template_vars.push_back(std::move(var));
  }
}

// n choices; logprobs (completions: an integer of alternatives; chat: a boolean with
// top_logprobs); echo (completions: the prompt before the completion, and with logprobs its
// tokens' log-probabilities).
void ParseChoicesAndLogprobs(const json& j, bool chat, ApiRequest* rp) {
  ApiRequest& r = *rp;
  r.options.n = static_cast<int>(Integer(j, "n", kGenerate));
  const RequestField& best_of = Spec("best_of", kGenerate);  // (its default: n)
  if (Integer(j, "best_of", r.options.n, static_cast<int64_t>(best_of.lo),
              static_cast<int64_t>(best_of.hi)) != r.options.n)
    Bad("best_of", "best_of other than n is not supported (all n choices are returned)");
  int& lp = r.options.generate.logprobs;
  lp = -1;
  const json* l = Field(j, "logprobs");
  const json* np = Field(j, "n_probs");  // llama-server's spelling of both
  if (np != nullptr) {
    if (l != nullptr || Field(j, "top_logprobs") != nullptr)
      Bad("n_probs", "give one of 'n_probs' and 'logprobs' / 'top_logprobs', not both");
    lp = static_cast<int>(Integer(j, "n_probs", kGenerate));
  }
  if (chat) {
    const bool on = Bool(j, "logprobs", kChat);
    if (const json* t = Field(j, "top_logprobs"); t != nullptr && !t->is_null()) {
      if (!on) Bad("top_logprobs", "top_logprobs needs logprobs: true");
      lp = static_cast<int>(Integer(j, "top_logprobs", kChat));
    } else if (on) {
      lp = 0;
    }
  } else {
    if (l != nullptr && !l->is_null()) {
      if (l->is_boolean())
        Bad("logprobs", "'logprobs' must be an integer in [0, 20] for completions");
      lp = static_cast<int>(Integer(j, "logprobs", kCompletions));
    }
    r.echo = Bool(j, "echo", false);
    if (r.echo && !r.more_prompts.empty())
      Bad("echo", "echo takes one prompt per request (each choice would echo its own)");
    r.options.prompt_logprobs = r.echo && lp >= 0;
    if (r.options.generate.max_tokens == 0 && !r.echo)
      Bad("max_tokens", "max_tokens 0 generates nothing: it is for scoring a prompt (echo)");
  }
}

// Structured output: response_format (OpenAI: text, json_object, json_schema), llama-server's
// `grammar` (GBNF) and `json_schema` (a schema), at most one of them; compiled (cached) here,
// on the request's thread, so a bad schema is a 400 naming it before anything is queued.
void ParseGrammar(const json& j, const ApiContext& ctx, ApiRequest* rp) {
  GenerateOptions& g = rp->options.generate;
  GrammarKind kind = GrammarKind::kGbnf;
  std::string text, param;
  auto one = [&](const char* name) {
    if (!param.empty())
      Bad(name, "give one of response_format, grammar and json_schema, not '" + param + "' and '" +
                    name + "'");
    param = name;
  };
  if (const json* rf = Field(j, "response_format")) {
    if (!rf->is_object()) Bad("response_format", "'response_format' must be an object");
    const std::string type = rf->value("type", std::string());
    for (const auto& [k, v] : rf->items()) {
      const bool known = k == "type" || (k == "json_schema" && type == "json_schema") ||
                         (k == "schema" && type == "json_object");
      if (!known) Bad("response_format." + k, "unknown field 'response_format." + k + "'");
    }
    if (type == "json_object") {
      one("response_format");
      kind = GrammarKind::kJsonObject;
      if (const json* sc = Field(*rf, "schema")) {  // llama-server's json_object with a schema
        kind = GrammarKind::kJsonSchema;
        text = sc->dump();
      }
    } else if (type == "json_schema") {
      one("response_format");
      const json* js = Field(*rf, "json_schema");
      if (js == nullptr || !js->is_object())
        Bad("response_format.json_schema", "'response_format.json_schema' must be an object");
      for (const auto& [k, v] : js->items()) {
        if (k != "name" && k != "schema" && k != "strict" && k != "description")
          Bad("response_format.json_schema." + k,
              "unknown field 'response_format.json_schema." + k + "'");
      }
      const json* sc = Field(*js, "schema");
      if (sc == nullptr)
        Bad("response_format.json_schema.schema",
            "'response_format.json_schema.schema' is required");
      if (const json* st = Field(*js, "strict"); st != nullptr && !st->is_boolean())
        Bad("response_format.json_schema.strict", "'strict' must be a boolean");
      kind = GrammarKind::kJsonSchema;
      text = sc->dump();
    } else if (type != "text") {
      Bad("response_format.type",
          "response_format.type must be text, json_object or json_schema, not '" + type + "'");
    }
  }
  if (const json* gr = Field(j, "grammar")) {
    one("grammar");
    if (!gr->is_string()) Bad("grammar", "'grammar' must be a string (GBNF)");
    kind = GrammarKind::kGbnf;
    text = gr->get<std::string>();
  }
  if (const json* js = Field(j, "json_schema")) {
    one("json_schema");
    kind = GrammarKind::kJsonSchema;
    text = js->dump();
  }
  if (param.empty()) return;
  if (!ctx.compile) Bad(param, "constrained decoding is not available here");
  try {
    g.grammar = ctx.compile(kind, text);
  } catch (const Error& e) {
    Bad(param, e.what());
  }
}

// Chat: messages[] of {role, content}; roles system (or developer), user, assistant, tool. An
// assistant's tool_calls and a tool message's tool_call_id are kept for the chat formatter,
// which writes them in the model's convention.
void ParseMessages(const json& j, ApiRequest* rp) {
  ApiRequest& r = *rp;
  const json* m = Field(j, "messages");
  if (m == nullptr) Bad("messages", "'messages' is required");
  if (!m->is_array() || m->empty()) Bad("messages", "'messages' must be a non-empty array");
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object()) Bad(param, "'" + param + "' must be an object");
    const json* role = Field(msg, "role");
    if (role == nullptr || !role->is_string())
      Bad(param + ".role", "'" + param + ".role' must be a string");
    std::string rs = role->get<std::string>();
    if (rs == "developer") rs = "system";
    if (rs != "system" && rs != "user" && rs != "assistant" && rs != "tool")
      Bad(param + ".role", "role '" + rs + "' is not supported (system, user, assistant, tool)");
    CheckMessageFields(msg, rs, param);
    ChatMessage out{
        rs, MessageContent(msg.contains("content") ? msg["content"] : json(), i, &r.images)};
    // A prior turn's reasoning goes to the template, which keeps or drops it as the model was
    // trained (Qwen3 keeps the last turn's, DeepSeek-R1 none); a refusal is what was said.
    for (const char* k : {"reasoning_content", "reasoning"})
      if (const json* rc = Field(msg, k); rc != nullptr && out.reasoning_content.empty())
        out.reasoning_content = rc->get<std::string>();
    if (const json* rf = Field(msg, "refusal"); rf != nullptr && out.content.empty())
      out.content = rf->get<std::string>();
    if (const json* id = Field(msg, "tool_call_id")) {
      if (!id->is_string()) Bad(param + ".tool_call_id", "'tool_call_id' must be a string");
      out.tool_call_id = id->get<std::string>();
    }
    if (const json* calls = Field(msg, "tool_calls")) {
      if (!calls->is_array()) Bad(param + ".tool_calls", "'tool_calls' must be an array");
      for (size_t c = 0; c < calls->size(); ++c) {
        const std::string cp = param + ".tool_calls[" + std::to_string(c) + "]";
        const json& call = (*calls)[c];
        const json* fn = call.is_object() ? Field(call, "function") : nullptr;
        if (fn == nullptr || !fn->is_object() || !Field(*fn, "name") || !(*fn)["name"].is_string())
          Bad(cp, "'" + cp + "' needs function.name");
        json args = json::object();
        if (const json* a = Field(*fn, "arguments")) {
          if (!a->is_string()) Bad(cp + ".function.arguments", "arguments must be a JSON string");
          args = JsonOrDiscarded<json>(a->get<std::string>());
          if (args.is_discarded() || !args.is_object())
            Bad(cp + ".function.arguments", "arguments must be a JSON object");
        }
        ChatToolCall tc;
        if (const json* id = Field(call, "id"); id != nullptr && id->is_string())
          tc.id = id->get<std::string>();
        tc.name = (*fn)["name"].get<std::string>();
        tc.arguments = args.dump();
        out.tool_calls.push_back(std::move(tc));
      }
    }
    r.messages.push_back(std::move(out));
  }
}

// Completions: a string, an array of token ids, or an array holding one of those.
void ParsePrompt(const json& j, ApiRequest* rp) {
  ApiRequest& r = *rp;
  const json* p = Field(j, "prompt");
  if (p == nullptr) Bad("prompt", "'prompt' is required");
  auto tokens = [&](const json& a) {
    for (const auto& t : a) {
      if (!t.is_number_integer()) Bad("prompt", "a token prompt must be an array of integers");
      const int64_t v = t.get<int64_t>();
      if (v < 0 || v > INT32_MAX) Bad("prompt", "token id " + t.dump() + " is out of range");
      r.prompt_tokens.push_back(static_cast<int32_t>(v));
    }
    r.prompt_is_tokens = true;
  };
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
  } else if (p->is_array() && !p->empty() && (*p)[0].is_number()) {
    tokens(*p);
  } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
    r.prompt_text = (*p)[0].get<std::string>();
  } else if (p->is_array() && p->size() == 1 && (*p)[0].is_array()) {
    tokens((*p)[0]);
  } else if (p->is_array() && p->size() > 1) {
    // Several prompts (how evaluation harnesses batch): all strings or all token arrays; the
    // choices come prompt by prompt (index = prompt * n + choice).
    if (p->size() > kMaxPrompts)
      Bad("prompt", "at most " + std::to_string(kMaxPrompts) + " prompts in one request");
    const bool strings = (*p)[0].is_string();
    for (const auto& x : *p) {
      if (strings && !x.is_string())
        Bad("prompt", "several prompts must be all strings or all token arrays");
      if (!strings && !x.is_array())
        Bad("prompt", "several prompts must be all strings or all token arrays");
      if (strings) {
        r.more_prompts.push_back({x.get<std::string>(), {}});
      } else {
        r.prompt_tokens.clear();
        tokens(x);
        r.more_prompts.push_back({"", r.prompt_tokens});
      }
    }
    r.prompt_text = r.more_prompts[0].text;
    r.prompt_tokens = r.more_prompts[0].tokens;
  } else {
    Bad("prompt",
        "'prompt' must be a string, an array of token ids, or an array holding one of those");
  }
}

// max_tokens (or max_completion_tokens), ignore_eos and stop sequences.
void ParseLimits(const json& j, bool chat, const ApiContext& ctx, ApiRequest* rp) {
  ApiRequest& r = *rp;
  GenerateOptions& g = r.options.generate;
  // max_completion_tokens (OpenAI's newer name) or llama-server's n_predict (-1: no limit)
  // stand for max_tokens.
  const char* max_name =
      Field(j, "max_completion_tokens") != nullptr ? "max_completion_tokens" : "max_tokens";
  if (Field(j, "max_tokens") == nullptr && Field(j, "max_completion_tokens") == nullptr) {
    if (const json* np = Field(j, "n_predict")) {
      if (!np->is_number_integer()) Bad("n_predict", "'n_predict' must be an integer");
      if (np->get<int64_t>() != -1) max_name = "n_predict";
    }
  }
  r.max_tokens_given = Field(j, max_name) != nullptr;
  // Completions default to 16 tokens (as OpenAI); chat runs to the end of the context.
  // (0: the prompt only, for scoring with echo and logprobs; completions only)
  g.max_tokens =
      static_cast<int>(Integer(j, max_name, chat ? ctx.context : 16, chat ? 1 : 0, ctx.context));
  g.ignore_eos = Bool(j, "ignore_eos", false);
  if (const json* st = Field(j, "stop")) {
    if (st->is_string()) {
      g.stop.push_back(st->get<std::string>());
    } else if (st->is_array()) {
      if (st->size() > 16) Bad("stop", "at most 16 stop sequences");
      for (const auto& x : *st) {
        if (!x.is_string()) Bad("stop", "'stop' must be a string or an array of strings");
        g.stop.push_back(x.get<std::string>());
      }
    } else {
      Bad("stop", "'stop' must be a string or an array of strings");
    }
    for (const auto& x : g.stop) {
      if (x.empty()) Bad("stop", "stop sequences must not be empty");
      if (x.size() > kMaxStopBytes)
        Bad("stop", "stop sequences are at most " + std::to_string(kMaxStopBytes) + " bytes");
    }
  }
}

// Fields accepted for what clients send (their values checked as OpenAI checks them), and the
// chat fields that choose a template variable or the output's modality.
void ParseClientFields(const json& j, bool chat, ApiRequest* rp) {
  if (const json* md = Field(j, "metadata")) {
    if (md->size() > 16) Bad("metadata", "metadata holds at most 16 pairs");
    for (const auto& [k, v] : md->items())
      if (k.size() > 64 || !v.is_string() || v.get<std::string>().size() > 512)
        Bad("metadata", "metadata keys are strings of up to 64 bytes, values up to 512");
  }
  const std::string tier = Text(j, "service_tier");
  if (!tier.empty() && tier != "auto" && tier != "default" && tier != "flex" &&
      tier != "priority" && tier != "scale")
    Bad("service_tier", "service_tier must be auto, default, flex, priority or scale");
  if (!chat) return;
  if (const json* m = Field(j, "modalities")) {
    for (const auto& x : *m)
      if (!x.is_string() || x.get<std::string>() != "text")
        Bad("modalities", "this model answers in text: modalities must be [\"text\"]");
  }
  const std::string effort = Text(j, "reasoning_effort");
  if (effort.empty()) return;
  if (effort != "none" && effort != "minimal" && effort != "low" && effort != "medium" &&
      effort != "high")
    Bad("reasoning_effort", "reasoning_effort must be none, minimal, low, medium or high");
  for (const ChatVar& v : rp->template_vars)
    if (v.name == "reasoning_effort") return;  // chat_template_kwargs says it already
  ChatVar var;
  var.name = "reasoning_effort";
  var.kind = ChatVar::Kind::kString;
  var.str = effort;
  var.optional = true;  // a template that does not read it (or has no variables) ignores it
  rp->template_vars.push_back(std::move(var));
}

}  // namespace

ApiRequest ParseRequest(std::string_view body, bool chat, const ApiContext& ctx) {
  const json j = ParseBody(body, chat ? kChat : kCompletions);
  ApiRequest r;
  r.chat = chat;
  ParseModelAndStream(j, ctx, &r);
  if (chat) {
    ParseMessages(j, &r);
  } else {
    ParsePrompt(j, &r);
  }
  ParseSampling(j, ctx, &r.options.generate.sampling);
  ParseLimits(j, chat, ctx, &r);
  ParseGrammar(j, ctx, &r);
  ParseChoicesAndLogprobs(j, chat, &r);
  if (chat) {
    ParseTemplateVars(j, &r);
    ParseTools(j, ctx, &r);
  }
  ParseClientFields(j, chat, &r);
  r.options.priority = static_cast<int>(Integer(j, "priority", kGenerate));
  const RequestField& timeout = Spec("timeout", kGenerate);
  r.options.timeout_seconds = Number(j, "timeout", ctx.default_timeout, timeout.lo, timeout.hi);
  return r;
}

EmbeddingsRequest ParseEmbeddings(std::string_view body, const ApiContext& ctx) {
  const json j = ParseBody(body, kEmbeddings);
  EmbeddingsRequest r;
  ApiRequest m;
  ParseModelAndStream(j, ctx, &m);
  r.model = m.model;
  if (m.options.lora != nullptr)  // (the embedding pass runs the base model)
    Bad("model", "'" + m.model + "' is a LoRA adapter: embeddings come from the base model '" +
                     ctx.model_name + "'");
  const std::string fmt = Text(j, "encoding_format");
  if (!fmt.empty() && fmt != "float" && fmt != "base64")
    Bad("encoding_format", "encoding_format must be float or base64");
  r.base64 = fmt == "base64";
  r.dimensions = static_cast<int>(Integer(j, "dimensions", kEmbeddings));
  r.truncate = Bool(j, "truncate", kEmbeddings);
  const json* in = Field(j, "input");
  if (in == nullptr) Bad("input", "'input' is required");
  auto ids = [&](const json& a) {
    std::vector<int32_t> t;
    for (const auto& x : a) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 ||
          (ctx.n_vocab > 0 && x.get<int64_t>() >= ctx.n_vocab))
        Bad("input", "token ids must be integers in the vocabulary");
      t.push_back(static_cast<int32_t>(x.get<int64_t>()));
    }
    if (t.empty()) Bad("input", "an input is empty");
    return t;
  };
  if (in->is_string()) {
    r.texts.push_back(in->get<std::string>());
  } else if (in->is_array() && !in->empty() && (*in)[0].is_number()) {
    r.token_inputs.push_back(ids(*in));
  } else if (in->is_array() && !in->empty()) {
    if (in->size() > kMaxEmbedInputs)
      Bad("input", StrFormat("%zu inputs: at most %zu per request", in->size(), kMaxEmbedInputs));
    for (const auto& x : *in) {
      if (x.is_string()) {
        if (!r.token_inputs.empty()) Bad("input", "inputs are all strings or all token arrays");
        r.texts.push_back(x.get<std::string>());
      } else if (x.is_array()) {
        if (!r.texts.empty()) Bad("input", "inputs are all strings or all token arrays");
        r.token_inputs.push_back(ids(x));
      } else {
        Bad("input", "'input' must be a string, strings, token ids or arrays of token ids");
      }
    }
  } else {
    Bad("input", "'input' must be a string, strings, token ids or arrays of token ids");
  }
  for (const auto& t : r.texts)
    if (t.empty()) Bad("input", "an input is empty");
  return r;
}

TokenizeRequest ParseTokenize(std::string_view body) {
  const json j = ParseBody(body, kTokenize);
  const json* c = Field(j, "content");
  if (c == nullptr || !c->is_string()) Bad("content", "'content' must be a string");
  TokenizeRequest r;
  r.content = c->get<std::string>();
  r.add_special = Bool(j, "add_special", kTokenize);
  r.parse_special = Bool(j, "parse_special", kTokenize);
  r.with_pieces = Bool(j, "with_pieces", kTokenize);
  return r;
}

LoraUpdateRequest ParseLoraUpdate(std::string_view body, bool load) {
  const json j = ParseBody(body, kLoraUpdate);
  LoraUpdateRequest r;
  const json* n = Field(j, "lora_name");
  if (n == nullptr || !n->is_string() || n->get<std::string>().empty() ||
      n->get<std::string>().size() > kMaxModelBytes)
    Bad("lora_name",
        "'lora_name' must be a name of 1.." + std::to_string(kMaxModelBytes) + " bytes");
  r.name = n->get<std::string>();
  const json* p = Field(j, "lora_path");
  if (load && (p == nullptr || !p->is_string() || p->get<std::string>().empty()))
    Bad("lora_path", "'lora_path' must name the adapter file");
  if (!load && p != nullptr) Bad("lora_path", "'lora_path' is for /v1/load_lora_adapter");
  if (p != nullptr) r.path = p->get<std::string>();
  if (!load && Field(j, "lora_scale") != nullptr)
    Bad("lora_scale", "'lora_scale' is for /v1/load_lora_adapter");
  r.scale = static_cast<float>(Number(j, "lora_scale", kLoraUpdate));
  return r;
}

std::vector<int32_t> ParseDetokenize(std::string_view body, int n_vocab) {
  const json j = ParseBody(body, kDetokenize);
  const json* t = Field(j, "tokens");
  if (t == nullptr || !t->is_array()) Bad("tokens", "'tokens' must be an array of token ids");
  std::vector<int32_t> ids;
  for (const auto& x : *t) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= n_vocab)
      Bad("tokens", "token ids must be integers in 0.." + std::to_string(n_vocab - 1));
    ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  return ids;
}

}  // namespace paddock::server
