// server/api.cpp: OpenAI request parsing and response formatting (nlohmann::json, Debian's
// nlohmann-json3-dev: a well-kept, exception-safe JSON library; used in this file only so its
// compile cost stays in one translation unit).
#include "server/api.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "base/utf8.h"
#include "grammar/cfg.h"

namespace paddock::server {
namespace {

// Ordered: a JSON Schema's properties keep the order they were written in (the order the
// model writes them: "reasoning" before "answer" matters to what it answers).
using json = nlohmann::ordered_json;

constexpr int kMaxDepth = 64;           // JSON nesting; a request needs 5
constexpr size_t kMaxStopBytes = 1024;  // per stop sequence
constexpr size_t kMaxModelBytes = 256;  // a model name
constexpr size_t kMaxErrorBytes = 512;  // an error message: never megabytes echoed back
constexpr size_t kMaxParamBytes = 128;

// s cut to at most n bytes at a UTF-8 character boundary, "..." marking the cut.
std::string Clip(std::string_view s, size_t n) {
  if (s.size() <= n) return std::string(s);
  size_t cut = n;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return std::string(s.substr(0, cut)) + "...";
}

[[noreturn]] void Bad(const std::string& param, const std::string& msg,
                      const std::string& code = "") {
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

std::string MessageContent(const json& c, size_t i) {
  const std::string param = "messages[" + std::to_string(i) + "].content";
  if (c.is_null()) return "";
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) Bad(param, "'" + param + "' must be a string or an array of content parts");
  std::string out;
  for (const auto& part : c) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      Bad(param, "each content part needs a string 'type'");
    if (part["type"] != "text")
      Bad(param, "content parts of type '" + part["type"].get<std::string>() +
                     "' are not supported (text only)");
    if (!part.contains("text") || !part["text"].is_string())
      Bad(param, "a text content part needs a string 'text'");
    out += part["text"].get<std::string>();
  }
  return out;
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
    ApiError e;
    e.status = 400;
    e.param = "model";
    e.code = "model_not_found";
    e.message =
        "The model '" + r.model + "' does not exist; this server serves '" + ctx.model_name + "'";
    for (const std::string& a : ctx.aliases) e.message += ", '" + a + "'";
    throw e;
  }
  if (r.model.empty()) r.model = ctx.model_name;
  r.stream = Bool(j, "stream", false);
  if (const json* so = Field(j, "stream_options")) {
    if (!so->is_object()) Bad("stream_options", "'stream_options' must be an object");
    for (const auto& [k, v] : so->items()) {
      if (k != "include_usage")
        Bad("stream_options." + k, "unknown field 'stream_options." + k + "'");
    }
    r.include_usage = Bool(*so, "include_usage", false);
  }
}

// Features we do not implement are refused by name rather than silently ignored.
void RefuseUnsupported(const json& j) {
  const int64_t n = Integer(j, "n", 1, 1, 1000000);
  if (Integer(j, "best_of", n, 1, 1000000) != n)
    Bad("best_of", "best_of other than n is not supported (all n choices are returned)");
  if (Field(j, "suffix") != nullptr) Bad("suffix", "suffix is not supported");
}

}  // namespace

void ReasoningSplitter::Content(std::string_view s, std::string* content) {
  if (!content_started_) {  // the answer starts after the blank lines that follow </think>
    const size_t b = s.find_first_not_of(" \t\r\n");
    if (b == std::string_view::npos) return;
    s.remove_prefix(b);
    content_started_ = true;
  }
  content->append(s);
}

void ReasoningSplitter::Feed(std::string_view text, std::string* reasoning, std::string* content) {
  static constexpr std::string_view kOpen = "<think>", kClose = "</think>";
  held_.append(text);
  for (;;) {
    if (state_ == kStart) {
      const size_t b = held_.find_first_not_of(" \t\r\n");
      const std::string_view t = b == std::string::npos ? "" : std::string_view(held_).substr(b);
      if (t.substr(0, kOpen.size()) == kOpen) {
        held_.erase(0, b + kOpen.size());
        state_ = kThink;
        continue;
      }
      if (kOpen.substr(0, t.size()) == t) return;  // maybe the tag, not yet whole
      state_ = kContent;
      content_started_ = true;  // no reasoning section: the text is the answer as written
      continue;
    }
    if (state_ == kThink) {
      const size_t close = held_.find(kClose);
      if (close != std::string::npos) {
        reasoning->append(held_, 0, close);
        held_.erase(0, close + kClose.size());
        state_ = kContent;
        continue;
      }
      // Keep back the longest end that could begin the closing tag.
      const size_t keep = TagPrefixAtEnd(held_, kClose);
      reasoning->append(held_, 0, held_.size() - keep);
      held_.erase(0, held_.size() - keep);
      return;
    }
    Content(held_, content);
    held_.clear();
    return;
  }
}

void ReasoningSplitter::Finish(std::string* reasoning, std::string* content) {
  if (state_ == kThink) {
    reasoning->append(held_);
  } else {
    content->append(held_);
  }
  held_.clear();
}

namespace {

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
  r.options.n = static_cast<int>(Integer(j, "n", 1, 1, kMaxChoices));
  int& lp = r.options.generate.logprobs;
  lp = -1;
  const json* l = Field(j, "logprobs");
  if (chat) {
    const bool on = Bool(j, "logprobs", false);
    if (const json* t = Field(j, "top_logprobs"); t != nullptr && !t->is_null()) {
      if (!on) Bad("top_logprobs", "top_logprobs needs logprobs: true");
      lp = static_cast<int>(Integer(j, "top_logprobs", 0, 0, 20));
    } else if (on) {
      lp = 0;
    }
    if (Field(j, "echo") != nullptr) Bad("echo", "echo applies to completions, not chat");
  } else {
    if (Field(j, "top_logprobs") != nullptr)
      Bad("top_logprobs", "top_logprobs is a chat field (completions: logprobs: N)");
    if (l != nullptr && !l->is_null()) {
      if (l->is_boolean())
        Bad("logprobs", "'logprobs' must be an integer in [0, 20] for completions");
      lp = static_cast<int>(Integer(j, "logprobs", 0, 0, 20));
    }
    if (Field(j, "chat_template_kwargs") != nullptr)
      Bad("chat_template_kwargs", "chat_template_kwargs applies to chat, not completions");
    r.echo = Bool(j, "echo", false);
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
    for (const auto& [k, v] : msg.items()) {
      if (k == "role" || k == "content") continue;
      if (k == "name" && v.is_string()) continue;  // accepted; not passed to the template
      if (k == "tool_calls" && rs == "assistant") continue;
      if (k == "tool_call_id" && rs == "tool") continue;
      Bad(param + "." + k, "unknown field '" + param + "." + k + "'");
    }
    ChatMessage out{rs, MessageContent(msg.contains("content") ? msg["content"] : json(), i)};
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
          args = json::parse(a->get<std::string>(), nullptr, false);
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

// The grammar of a reply that must call: one call (or up to 8 when parallel, where the format
// has a way to write several) of {"name": <a tool's name>, <arguments>: <its parameter schema>},
// in the model's convention. `only`: the one function allowed, or empty.
std::string ToolCallGrammar(ToolFormat format, const json& alternatives, const std::string& only,
                            bool parallel) {
  if (format == ToolFormat::kHarmony) {
    // One commentary message to=functions.NAME with NAME's arguments (a harmony reply makes one
    // call: <|call|> ends it). Each function's schema is a definition, so its rule is known.
    json defs = json::object(), refs = json::array();
    std::vector<std::string> names;
    for (const auto& a : alternatives) {
      if (!only.empty() && a["name"] != only) continue;
      const std::string k = "t" + std::to_string(names.size());
      defs[k] = a["params"];
      refs.push_back({{"$ref", "#/$defs/" + k}});
      names.push_back(a["name"].get<std::string>());
    }
    std::string g = grammar::JsonSchemaToGbnf(json{{"$defs", defs}, {"anyOf", refs}}.dump());
    const size_t at = g.rfind("\nroot ::= ");
    g.erase(at + 1, g.find('\n', at + 1) - at);
    std::string alts;
    for (size_t k = 0; k < names.size(); ++k)
      alts += std::string(k ? " | " : "") + "\"" + names[k] +
              " <|constrain|>json<|message|>\" ref-t" + std::to_string(k) + "-s";
    return g + "root ::= \"<|channel|>commentary to=functions.\" ( " + alts + " )\n";
  }
  const char* args_key = format == ToolFormat::kLlama3 ? "parameters" : "arguments";
  json any = json::array();
  for (const auto& a : alternatives) {
    if (!only.empty() && a["name"] != only) continue;
    any.push_back({{"type", "object"},
                   {"properties", {{"name", {{"const", a["name"]}}}, {args_key, a["params"]}}},
                   {"required", {"name", args_key}},
                   {"additionalProperties", false}});
  }
  std::string g = grammar::JsonSchemaToGbnf(json{{"anyOf", any}}.dump());
  const size_t at = g.rfind("\nroot ::= ");
  g.replace(at, 10, "\ntool-call ::= ");
  switch (format) {
    case ToolFormat::kLlama3:  // Llama 3's convention has one call per reply
      g += "root ::= tool-call\n";
      break;
    case ToolFormat::kMistral:
      g += std::string("root ::= \"[TOOL_CALLS] [\" tool-call") +
           (parallel ? " ( \", \" tool-call ){0,7}" : "") + " \"]\"\n";
      break;
    case ToolFormat::kHarmony:  // (above)
    case ToolFormat::kHermes:
      g += "tool-block ::= \"<tool_call>\\n\" tool-call \"\\n</tool_call>\"\n";
      g += std::string("root ::= tool-block") + (parallel ? " ( \"\\n\" tool-block ){0,7}" : "") +
           "\n";
      break;
  }
  return g;
}

// tools / tool_choice / parallel_tool_calls (chat). The functions are described to the model in
// a system turn (Hermes convention); `required` and a named function constrain the reply to
// <tool_call> blocks whose arguments follow the function's parameter schema.
void ParseTools(const json& j, const ApiContext& ctx, ApiRequest* rp) {
  ApiRequest& r = *rp;
  const json* tools = Field(j, "tools");
  const json* choice = Field(j, "tool_choice");
  r.parallel_tool_calls = Bool(j, "parallel_tool_calls", true);
  if (tools == nullptr || tools->empty()) {
    if (tools != nullptr && !tools->is_array()) Bad("tools", "'tools' must be an array");
    if (choice != nullptr && !(choice->is_string() && choice->get<std::string>() == "none") &&
        !(choice->is_string() && choice->get<std::string>() == "auto"))
      Bad("tool_choice", "tool_choice needs tools");
    return;
  }
  if (!tools->is_array()) Bad("tools", "'tools' must be an array");
  if (tools->size() > 128) Bad("tools", "at most 128 tools");
  json listed = json::array(), alternatives = json::array();
  std::vector<std::string> names;
  for (size_t i = 0; i < tools->size(); ++i) {
    const std::string tp = "tools[" + std::to_string(i) + "]";
    const json& t = (*tools)[i];
    if (!t.is_object() || t.value("type", std::string()) != "function")
      Bad(tp + ".type", "tools must be of type 'function'");
    for (const auto& [k, v] : t.items())
      if (k != "type" && k != "function") Bad(tp + "." + k, "unknown field '" + tp + "." + k + "'");
    const json* fn = Field(t, "function");
    if (fn == nullptr || !fn->is_object())
      Bad(tp + ".function", "'" + tp + ".function' is required");
    for (const auto& [k, v] : fn->items())
      if (k != "name" && k != "description" && k != "parameters" && k != "strict")
        Bad(tp + ".function." + k, "unknown field '" + tp + ".function." + k + "'");
    const std::string name = fn->value("name", std::string());
    if (name.empty() || name.size() > 64 ||
        name.find_first_not_of(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") !=
            std::string::npos)
      Bad(tp + ".function.name", "function names are 1-64 of a-z, A-Z, 0-9, _ and -");
    if (std::find(names.begin(), names.end(), name) != names.end())
      Bad(tp + ".function.name", "two tools named '" + name + "'");
    names.push_back(name);
    json params = fn->contains("parameters") ? (*fn)["parameters"] : json{{"type", "object"}};
    if (!params.is_object())
      Bad(tp + ".function.parameters", "parameters must be a JSON Schema object");
    try {
      grammar::ParseGbnf(grammar::JsonSchemaToGbnf(params.dump()));
    } catch (const Error& e) {
      Bad(tp + ".function.parameters", e.what());
    }
    json d = {{"type", "function"}, {"function", {{"name", name}, {"parameters", params}}}};
    if (fn->contains("description")) d["function"]["description"] = (*fn)["description"];
    listed.push_back(d);
    alternatives.push_back({{"name", name}, {"params", params}});
  }
  std::string mode = "auto", only;
  if (choice != nullptr) {
    if (choice->is_string()) {
      mode = choice->get<std::string>();
      if (mode != "none" && mode != "auto" && mode != "required")
        Bad("tool_choice", "tool_choice must be none, auto, required or a named function");
    } else if (choice->is_object() && choice->value("type", std::string()) == "function" &&
               choice->contains("function") && (*choice)["function"].is_object() &&
               (*choice)["function"].value("name", std::string()) != "") {
      only = (*choice)["function"]["name"].get<std::string>();
      if (std::find(names.begin(), names.end(), only) == names.end())
        Bad("tool_choice", "tool_choice names '" + only + "', which is not among the tools");
      mode = "required";
    } else {
      Bad("tool_choice",
          "tool_choice must be none, auto, required or {\"type\": \"function\", \"function\": "
          "{\"name\": ...}}");
    }
  }
  if (mode == "none") return;  // the model is not told about the tools: it cannot call them
  r.tool_calls = true;
  r.tools = listed.dump();
  r.tool_format = ctx.tool_format;
  if (mode != "required") return;
  if (r.options.generate.grammar)
    Bad("tool_choice", "tool_choice required cannot be combined with response_format or a grammar");
  if (!ctx.compile) Bad("tool_choice", "constrained decoding is not available here");
  try {
    r.options.generate.grammar =
        ctx.compile(GrammarKind::kGbnf,
                    ToolCallGrammar(ctx.tool_format, alternatives, only, r.parallel_tool_calls));
  } catch (const Error& e) {
    Bad("tools", e.what());
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
    Bad("prompt", "several prompts in one request are not supported (send one request per prompt)");
  } else {
    Bad("prompt",
        "'prompt' must be a string, an array of token ids, or an array holding one of those");
  }
}

// OpenAI semantics: only what the request asks for is applied.
void ParseSampling(const json& j, const ApiContext& ctx, SamplingParams* sp) {
  SamplingParams& s = *sp;
  s.temperature = static_cast<float>(Number(j, "temperature", 1.0, 0.0, 2.0));
  s.top_p = static_cast<float>(Number(j, "top_p", 1.0, 0.0, 1.0));
  if (s.top_p == 0) s.top_p = 1e-6f;  // "nucleus of zero" = the single most likely token
  int64_t top_k = Integer(j, "top_k", 0, -1, 1 << 20);
  s.top_k = top_k < 0 ? 0 : static_cast<int>(top_k);
  s.min_p = static_cast<float>(Number(j, "min_p", 0.0, 0.0, 1.0));
  s.presence_penalty = static_cast<float>(Number(j, "presence_penalty", 0.0, -2.0, 2.0));
  s.frequency_penalty = static_cast<float>(Number(j, "frequency_penalty", 0.0, -2.0, 2.0));
  // repetition_penalty (vLLM) or llama-server's repeat_penalty.
  const char* rp_name =
      Field(j, "repetition_penalty") != nullptr ? "repetition_penalty" : "repeat_penalty";
  s.repeat_penalty = static_cast<float>(Number(j, rp_name, 1.0, 0.01, 10.0));
  s.penalty_last_n = ctx.context;
  if (const json* seed = Field(j, "seed")) {
    if (!seed->is_number_integer()) Bad("seed", "'seed' must be an integer");
    s.seed = seed->is_number_unsigned() ? seed->get<uint64_t>()
                                        : static_cast<uint64_t>(seed->get<int64_t>());
  } else {
    static std::atomic<uint64_t> counter{0x9e3779b97f4a7c15ull};
    s.seed = counter.fetch_add(0x9e3779b97f4a7c15ull);
  }
  // logit_bias: {"token id": bias in [-100, 100]} (OpenAI), added to the logits before sampling.
  if (const json* lb = Field(j, "logit_bias")) {
    if (!lb->is_object()) Bad("logit_bias", "'logit_bias' must be an object of token id -> bias");
    if (lb->size() > 1024) Bad("logit_bias", "at most 1024 logit_bias entries");
    for (const auto& [k, v] : lb->items()) {
      const bool digits =
          !k.empty() && k.size() <= 9 && k.find_first_not_of("0123456789") == std::string::npos;
      const long id = digits ? std::strtol(k.c_str(), nullptr, 10) : -1;
      if (id < 0 || (ctx.n_vocab > 0 && id >= ctx.n_vocab))
        Bad("logit_bias", "logit_bias key '" + k + "' is not a token id of this model (0.." +
                              std::to_string(ctx.n_vocab - 1) + ")");
      if (!v.is_number() || !(std::fabs(v.get<double>()) <= 100))
        Bad("logit_bias", "logit_bias values must be numbers in [-100, 100]");
      s.logit_bias.emplace_back(static_cast<int32_t>(id), v.get<float>());
    }
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

}  // namespace

// No field is silently ignored: every top-level field is read above, an accepted alias, or
// refused here by name (docs/api.md lists them all).
void RefuseUnknownFields(const json& j, bool chat) {
  static const char* const kCommon[] = {"model",
                                        "stream",
                                        "stream_options",
                                        "n",
                                        "best_of",
                                        "echo",
                                        "logprobs",
                                        "logit_bias",
                                        "suffix",
                                        "tools",
                                        "response_format",
                                        "temperature",
                                        "top_p",
                                        "top_k",
                                        "min_p",
                                        "presence_penalty",
                                        "frequency_penalty",
                                        "repetition_penalty",
                                        "repeat_penalty",
                                        "seed",
                                        "max_tokens",
                                        "max_completion_tokens",
                                        "n_predict",
                                        "ignore_eos",
                                        "stop",
                                        "priority",
                                        "timeout",
                                        "user",
                                        "grammar",
                                        "json_schema",
                                        "top_logprobs",
                                        "chat_template_kwargs",
                                        "tool_choice",
                                        "parallel_tool_calls"};
  // Known elsewhere, not implemented yet: refused with what they are.
  static const char* const kNotYet[] = {"functions", "function_call"};
  for (const auto& [k, v] : j.items()) {
    if (std::find(std::begin(kCommon), std::end(kCommon), k) != std::end(kCommon)) continue;
    if (k == (chat ? "messages" : "prompt")) continue;
    if (std::find(std::begin(kNotYet), std::end(kNotYet), k) != std::end(kNotYet))
      Bad(k, "'" + k + "' is not supported yet");
    Bad(k, "unknown field '" + k + "' (docs/api.md lists the fields)");
  }
}

// Refuses JSON nested deeper than kMaxDepth before any of it is built: one pass over the bytes
// (strings and their escapes skipped), no allocation. A body of 8 MB of `{"a":` costs a scan,
// not a tree.
static void CheckNesting(std::string_view body) {
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

// A request body: a JSON object, its nesting checked before it is parsed.
static json ParseObject(std::string_view body) {
  CheckNesting(body);
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) Bad("", "the request body is not valid JSON");
  if (!j.is_object()) Bad("", "the request body must be a JSON object");
  return j;
}

ApiRequest ParseRequest(std::string_view body, bool chat, const ApiContext& ctx) {
  const json j = ParseObject(body);
  ApiRequest r;
  r.chat = chat;
  RefuseUnknownFields(j, chat);
  ParseModelAndStream(j, ctx, &r);
  RefuseUnsupported(j);
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
  } else {
    for (const char* k : {"tools", "tool_choice", "parallel_tool_calls"})
      if (Field(j, k) != nullptr) Bad(k, std::string(k) + " applies to chat, not completions");
  }
  r.options.priority = static_cast<int>(Integer(j, "priority", 0, -1000000, 1000000));
  r.options.timeout_seconds = Number(j, "timeout", ctx.default_timeout, 0.0, 1e6);
  return r;
}

EmbeddingsRequest ParseEmbeddings(std::string_view body, const ApiContext& ctx) {
  const json j = ParseObject(body);
  EmbeddingsRequest r;
  for (const auto& [k, v] : j.items()) {
    if (k == "input" || k == "model" || k == "encoding_format" || k == "user") continue;
    if (k == "dimensions")
      Bad(k, "'dimensions' is not supported: the vectors have the model's width");
    Bad(k, "unknown field '" + k + "'");
  }
  ApiRequest m;
  ParseModelAndStream(j, ctx, &m);
  if (m.stream) Bad("stream", "embeddings are not streamed");
  r.model = m.model;
  const std::string fmt = Text(j, "encoding_format");
  if (!fmt.empty() && fmt != "float" && fmt != "base64")
    Bad("encoding_format", "encoding_format must be float or base64");
  r.base64 = fmt == "base64";
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
    if (in->size() > 256) Bad("input", "at most 256 inputs per request");
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

std::string EmbeddingsBody(const std::vector<std::vector<float>>& vectors, const std::string& model,
                           int prompt_tokens, bool base64) {
  static const char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  json data = json::array();
  for (size_t i = 0; i < vectors.size(); ++i) {
    json e = {{"object", "embedding"}, {"index", i}};
    if (base64) {
      const auto* b = reinterpret_cast<const unsigned char*>(vectors[i].data());
      const size_t n = vectors[i].size() * sizeof(float);
      std::string s;
      for (size_t k = 0; k < n; k += 3) {
        const uint32_t v = (uint32_t{b[k]} << 16) | (k + 1 < n ? uint32_t{b[k + 1]} << 8 : 0) |
                           (k + 2 < n ? uint32_t{b[k + 2]} : 0);
        s += kB64[(v >> 18) & 63];
        s += kB64[(v >> 12) & 63];
        s += k + 1 < n ? kB64[(v >> 6) & 63] : '=';
        s += k + 2 < n ? kB64[v & 63] : '=';
      }
      e["embedding"] = s;
    } else {
      e["embedding"] = vectors[i];
    }
    data.push_back(e);
  }
  json j = {{"object", "list"},
            {"data", data},
            {"model", model},
            {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ErrorBody(const ApiError& e) {
  json err = {{"message", Clip(e.message, kMaxErrorBytes)},
              {"type", e.type},
              {"param", e.param.empty() ? json() : json(Clip(e.param, kMaxParamBytes))},
              {"code", e.code.empty() ? json() : json(e.code)}};
  return json{{"error", err}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

const char* OpenAiFinishReason(FinishReason r) {
  switch (r) {
    case FinishReason::kLength:
    case FinishReason::kContext:
      return "length";
    case FinishReason::kEos:
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kCancelled:
      return "abort";
    case FinishReason::kTimeout:
      return "timeout";
  }
  return "stop";
}

namespace {

json Usage(const GenerateResult& g) {
  json u = {{"prompt_tokens", g.prompt_tokens},
            {"completion_tokens", g.generated_tokens},
            {"total_tokens", g.prompt_tokens + g.generated_tokens}};
  u["prompt_tokens_details"] = {{"cached_tokens", g.cached_tokens}};
  return u;
}

std::string Dump(const json& j) {
  // Generated text may end in an invalid UTF-8 sequence only on cancellation; replace, never throw.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

namespace {

json Bytes(std::string_view s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// Chat: {"content": [{token, logprob, bytes, top_logprobs: [...]}]}.
json ChatLogprobs(const std::vector<TokenLogprob>& lps) {
  json content = json::array();
  for (const TokenLogprob& t : lps) {
    json top = json::array();
    for (const auto& a : t.top)
      top.push_back({{"token", a.text}, {"logprob", a.logprob}, {"bytes", Bytes(a.text)}});
    content.push_back({{"token", t.text},
                       {"logprob", t.logprob},
                       {"bytes", Bytes(t.text)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

// Completions: {"tokens", "token_logprobs", "top_logprobs", "text_offset"}; *offset: the
// characters before the first token (advanced past them). `first_null`: the first entry is the
// prompt's first token (no logprob: nothing precedes it).
void AppendCompletionLogprobs(const std::vector<TokenLogprob>& lps, size_t* offset, json* out) {
  json& j = *out;
  if (j.is_null())
    j = {{"tokens", json::array()},
         {"token_logprobs", json::array()},
         {"top_logprobs", json::array()},
         {"text_offset", json::array()}};
  for (const TokenLogprob& t : lps) {
    j["tokens"].push_back(t.text);
    j["token_logprobs"].push_back(t.logprob);
    json top = json::object();
    for (const auto& a : t.top)
      if (!top.contains(a.text)) top[a.text] = a.logprob;
    j["top_logprobs"].push_back(top);
    j["text_offset"].push_back(*offset);
    *offset += CountCodePoints(t.text);
  }
}

// The echoed prompt's entries: its first token (null), then the scored ones.
void AppendPromptLogprobs(const ApiRequest& r, const std::vector<TokenLogprob>& prompt,
                          size_t* offset, json* out) {
  AppendCompletionLogprobs({}, offset, out);
  json& j = *out;
  j["tokens"].push_back(r.echo_first_token);
  j["token_logprobs"].push_back(nullptr);
  j["top_logprobs"].push_back(nullptr);
  j["text_offset"].push_back(*offset);
  *offset += CountCodePoints(r.echo_first_token);
  AppendCompletionLogprobs(prompt, offset, out);
}

json UsageOf(const std::vector<GenerateResult>& g) {
  json u = Usage(g[0]);
  int completion = 0;
  for (const auto& x : g) completion += x.generated_tokens;
  u["completion_tokens"] = completion;
  u["total_tokens"] = g[0].prompt_tokens + completion;
  return u;
}

// A call's id: unique per response, choice and call. Mistral's templates take only ids of 9
// letters and digits (they refuse the conversation otherwise), so those are 9 characters of a
// hash of the same three.
std::string ToolCallId(const ApiRequest& r, const ResponseMeta& m, int choice, size_t call) {
  const std::string id = m.id + "-call-" + std::to_string(choice) + "-" + std::to_string(call);
  if (r.tool_format != ToolFormat::kMistral) return id;
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char ch : id) h = (h ^ ch) * 1099511628211ull;
  std::string out;
  for (int k = 0; k < 9; ++k, h /= 62) out.push_back(kAlnum[h % 62]);
  return out;
}

}  // namespace

std::string CompletionBody(const ApiRequest& r, const ResponseMeta& m,
                           const std::vector<GenerateResult>& results) {
  json choices = json::array();
  for (size_t i = 0; i < results.size(); ++i) {
    const GenerateResult& g = results[i];
    json choice = {
        {"index", i}, {"finish_reason", OpenAiFinishReason(g.finish)}, {"logprobs", nullptr}};
    const bool lp = r.options.generate.logprobs >= 0;
    if (r.chat) {
      choice["message"] = {{"role", "assistant"}, {"content", g.text}};
      ParsedToolCalls pr;
      if (r.harmony) {  // channels: analysis is reasoning, final content; calls by recipient
        std::string reasoning;
        pr = ParseHarmony(g.text, r.tool_calls, &reasoning);
        choice["message"]["content"] = pr.content;
        choice["message"]["reasoning_content"] = reasoning.empty() ? json() : json(reasoning);
      } else if (r.reasoning) {
        ReasoningSplitter split(r.reasoning_open);
        std::string reasoning, content;
        split.Feed(g.text, &reasoning, &content);
        split.Finish(&reasoning, &content);
        choice["message"]["content"] = content;
        choice["message"]["reasoning_content"] = reasoning.empty() ? json() : json(reasoning);
      }
      if (r.tool_calls) {
        if (!r.harmony)
          pr = ParseToolCalls(r.tool_format, choice["message"]["content"].get<std::string>());
        if (!pr.calls.empty()) {
          json calls = json::array();
          for (size_t c = 0; c < pr.calls.size(); ++c)
            calls.push_back(
                {{"id", ToolCallId(r, m, static_cast<int>(i), c)},
                 {"type", "function"},
                 {"function", {{"name", pr.calls[c].name}, {"arguments", pr.calls[c].arguments}}}});
          choice["message"]["tool_calls"] = calls;
          choice["message"]["content"] = pr.content.empty() ? json() : json(pr.content);
          if (g.finish == FinishReason::kEos || g.finish == FinishReason::kStop)
            choice["finish_reason"] = "tool_calls";
        }
      }
      if (lp) choice["logprobs"] = ChatLogprobs(g.logprobs);
    } else {
      choice["text"] = r.echo ? r.echo_text + g.text : g.text;
      if (lp) {
        json l;
        size_t offset = 0;
        if (r.echo) AppendPromptLogprobs(r, results[0].prompt_logprobs, &offset, &l);
        offset = r.echo ? CountCodePoints(r.echo_text) : 0;
        AppendCompletionLogprobs(g.logprobs, &offset, &l);
        choice["logprobs"] = l;
      }
    }
    choices.push_back(choice);
  }
  json j = {{"id", m.id},           {"object", r.chat ? "chat.completion" : "text_completion"},
            {"created", m.created}, {"model", m.model},
            {"choices", choices},   {"usage", UsageOf(results)}};
  return Dump(j);
}

std::string StreamChunk(const ApiRequest& r, const ResponseMeta& m, const ChunkPart& p) {
  json choice = {{"index", p.index},
                 {"finish_reason", p.finish ? json(p.finish) : json()},
                 {"logprobs", nullptr}};
  const bool lp = r.options.generate.logprobs >= 0 && (!p.logprobs.empty() || p.echo);
  if (r.chat) {
    json delta = json::object();
    if (p.first) delta["role"] = "assistant";
    if (!p.reasoning.empty()) delta["reasoning_content"] = std::string(p.reasoning);
    if (p.tool_calls != nullptr && !p.tool_calls->empty()) {
      json calls = json::array();
      for (size_t c = 0; c < p.tool_calls->size(); ++c)
        calls.push_back(
            {{"index", c},
             {"id", ToolCallId(r, m, p.index, c)},
             {"type", "function"},
             {"function",
              {{"name", (*p.tool_calls)[c].name}, {"arguments", (*p.tool_calls)[c].arguments}}}});
      delta["tool_calls"] = calls;
    }
    if (!p.text.empty() || (p.first && p.finish == nullptr && p.reasoning.empty()))
      delta["content"] = std::string(p.text);
    choice["delta"] = delta;
    if (lp) choice["logprobs"] = ChatLogprobs(p.logprobs);
  } else {
    choice["text"] = (p.echo ? r.echo_text : std::string()) + std::string(p.text);
    if (lp) {
      json l;
      if (p.echo) {
        size_t prompt_offset = 0;
        static const std::vector<TokenLogprob> kNone;
        AppendPromptLogprobs(r, p.prompt_logprobs ? *p.prompt_logprobs : kNone, &prompt_offset, &l);
      }
      AppendCompletionLogprobs(p.logprobs, p.offset, &l);
      choice["logprobs"] = l;
    }
  }
  json j = {{"id", m.id},
            {"object", r.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", m.created},
            {"model", m.model},
            {"choices", json::array({choice})}};
  if (r.include_usage) j["usage"] = nullptr;
  return "data: " + Dump(j) + "\n\n";
}

std::string StreamUsageChunk(const ApiRequest& r, const ResponseMeta& m,
                             const std::vector<GenerateResult>& results) {
  json j = {{"id", m.id},
            {"object", r.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", m.created},
            {"model", m.model},
            {"choices", json::array()},
            {"usage", UsageOf(results)}};
  return "data: " + Dump(j) + "\n\n";
}

std::string StreamErrorEvent(const ApiError& e) {
  return "data: " + ErrorBody(e) + "\n\n";
}

std::string ModelsBody(const ApiContext& ctx, int64_t created) {
  json data = json::array();
  std::vector<std::string> names = {ctx.model_name};
  names.insert(names.end(), ctx.aliases.begin(), ctx.aliases.end());
  for (const std::string& name : names) {
    data.push_back({{"id", name},
                    {"object", "model"},
                    {"created", created},
                    {"owned_by", "paddock"},
                    {"root", ctx.model_name},
                    {"max_model_len", ctx.context},
                    {"vocab_size", ctx.n_vocab}});
  }
  return Dump(json{{"object", "list"}, {"data", data}});
}

namespace {

// A JSON object body with only the named fields (400 naming any other).
json ObjectBody(std::string_view body, std::initializer_list<const char*> fields) {
  json j = ParseObject(body);
  for (const auto& [k, v] : j.items()) {
    bool known = false;
    for (const char* f : fields) known |= k == f;
    if (!known) Bad(k, "unknown field '" + k + "'");
  }
  return j;
}

bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = static_cast<size_t>(Utf8SequenceLength(static_cast<uint8_t>(s[i])));
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

}  // namespace

TokenizeRequest ParseTokenize(std::string_view body) {
  const json j = ObjectBody(body, {"content", "add_special", "parse_special", "with_pieces"});
  const json* c = Field(j, "content");
  if (c == nullptr || !c->is_string()) Bad("content", "'content' must be a string");
  TokenizeRequest r;
  r.content = c->get<std::string>();
  r.add_special = Bool(j, "add_special", true);
  r.parse_special = Bool(j, "parse_special", false);
  r.with_pieces = Bool(j, "with_pieces", false);
  return r;
}

std::vector<int32_t> ParseDetokenize(std::string_view body, int n_vocab) {
  const json j = ObjectBody(body, {"tokens"});
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

std::string TokenizeBody(const std::vector<int32_t>& tokens,
                         const std::vector<std::string>* pieces) {
  json out = json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (pieces == nullptr) {
      out.push_back(tokens[i]);
      continue;
    }
    const std::string& p = (*pieces)[i];
    json piece;
    if (ValidUtf8(p)) {
      piece = p;
    } else {
      piece = json::array();
      for (unsigned char b : p) piece.push_back(b);
    }
    out.push_back({{"id", tokens[i]}, {"piece", piece}});
  }
  return Dump(json{{"tokens", out}});
}

std::string DetokenizeBody(std::string_view text) {
  return Dump(json{{"content", std::string(text)}});
}

}  // namespace paddock::server
