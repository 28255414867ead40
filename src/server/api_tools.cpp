// server/api_tools.cpp: a chat request's tools, tool_choice and parallel_tool_calls, and the
// grammar that constrains a reply that must call (tool_choice required or named).
#include <algorithm>

#include "grammar/cfg.h"
#include "server/api_json.h"

namespace paddock::server::api_detail {
namespace {

// The grammar of a reply that must call: one call (or up to 8 when parallel, where the format
// has a way to write several) of one of the tools (`only`: the one function allowed, or empty)
// with its arguments, in the model's convention. Each tool's parameter schema is a rule of its
// own (args-K), its $refs resolved within it; the call syntax around them is written here.
std::string ToolCallGrammar(ToolFormat format, const json& alternatives, const std::string& only,
                            bool parallel) {
  std::vector<grammar::NamedSchema> args;
  std::vector<std::string> names;
  for (const auto& a : alternatives) {
    if (!only.empty() && a["name"] != only) continue;
    args.push_back({"args-" + std::to_string(names.size()), a["params"].dump()});
    names.push_back(a["name"].get<std::string>());
  }
  std::string g = grammar::JsonSchemaRules(args);
  if (format == ToolFormat::kHarmony) {
    // One commentary message to=functions.NAME with NAME's arguments (a harmony reply makes one
    // call: <|call|> ends it).
    std::string alts;
    for (size_t k = 0; k < names.size(); ++k)
      alts += std::string(k ? " | " : "") +
              grammar::GbnfLiteral(names[k] + " <|constrain|>json<|message|>") + " args-" +
              std::to_string(k);
    return g + "root ::= \"<|channel|>commentary to=functions.\" ( " + alts + " )\n";
  }
  // {"name": NAME, "arguments": ARGS} (Llama 3: "parameters"), JSON as the schema rules write
  // it (a key, ws, colon, ws, value, ws).
  const std::string key =
      grammar::GbnfLiteral(json(format == ToolFormat::kLlama3 ? "parameters" : "arguments").dump());
  std::string calls;
  for (size_t k = 0; k < names.size(); ++k)
    calls += std::string(k ? " | " : "") + "\"{\" ws " + grammar::GbnfLiteral(json("name").dump()) +
             " ws \":\" ws " + grammar::GbnfLiteral(json(names[k]).dump()) + " ws \",\" ws " + key +
             " ws \":\" ws args-" + std::to_string(k) + " ws \"}\"";
  g += "tool-call ::= " + calls + "\n";
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

}  // namespace

// tools / tool_choice / parallel_tool_calls (chat). The functions are described to the model in
// a system turn (Hermes convention); `required` and a named function constrain the reply to
// <tool_call> blocks whose arguments follow the function's parameter schema.
namespace {

// tools[i]: a function tool, checked (known fields, name, a parameters schema that compiles);
// its entry for the template into `listed`, its grammar alternative into `alternatives`.
void ParseTool(size_t i, const json& t, std::vector<std::string>* names, json* listed,
               json* alternatives) {
  const std::string tp = "tools[" + std::to_string(i) + "]";
  if (!t.is_object() || t.value("type", std::string()) != "function")
    Bad(tp + ".type", "tools must be of type 'function'");
  for (const auto& [k, v] : t.items())
    if (k != "type" && k != "function") Bad(tp + "." + k, "unknown field '" + tp + "." + k + "'");
  const json* fn = Field(t, "function");
  if (fn == nullptr || !fn->is_object()) Bad(tp + ".function", "'" + tp + ".function' is required");
  for (const auto& [k, v] : fn->items())
    if (k != "name" && k != "description" && k != "parameters" && k != "strict")
      Bad(tp + ".function." + k, "unknown field '" + tp + ".function." + k + "'");
  const std::string name = fn->value("name", std::string());
  if (name.empty() || name.size() > 64 ||
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") !=
          std::string::npos)
    Bad(tp + ".function.name", "function names are 1-64 of a-z, A-Z, 0-9, _ and -");
  if (std::find(names->begin(), names->end(), name) != names->end())
    Bad(tp + ".function.name", "two tools named '" + name + "'");
  names->push_back(name);
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
  listed->push_back(d);
  alternatives->push_back({{"name", name}, {"params", params}});
}

// tool_choice: none, auto, required, or a named function (required, that one only).
void ParseToolChoice(const json* choice, const std::vector<std::string>& names, std::string* mode,
                     std::string* only) {
  *mode = "auto";
  if (choice == nullptr) return;
  if (choice->is_string()) {
    *mode = choice->get<std::string>();
    if (*mode != "none" && *mode != "auto" && *mode != "required")
      Bad("tool_choice", "tool_choice must be none, auto, required or a named function");
  } else if (choice->is_object() && choice->value("type", std::string()) == "function" &&
             choice->contains("function") && (*choice)["function"].is_object() &&
             (*choice)["function"].value("name", std::string()) != "") {
    *only = (*choice)["function"]["name"].get<std::string>();
    if (std::find(names.begin(), names.end(), *only) == names.end())
      Bad("tool_choice", "tool_choice names '" + *only + "', which is not among the tools");
    *mode = "required";
  } else {
    Bad("tool_choice",
        "tool_choice must be none, auto, required or {\"type\": \"function\", \"function\": "
        "{\"name\": ...}}");
  }
}

}  // namespace

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
  for (size_t i = 0; i < tools->size(); ++i)
    ParseTool(i, (*tools)[i], &names, &listed, &alternatives);
  std::string mode, only;
  ParseToolChoice(choice, names, &mode, &only);
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

}  // namespace paddock::server::api_detail
