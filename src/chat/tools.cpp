// chat/tools.cpp: tool calls in the three conventions models are trained on (ToolFormat): how
// tools, calls and results are written into a prompt when the template does not do it itself
// (LowerTools, and the Mistral form in RenderToolsMistral), and how the calls a model writes are
// found again in its reply (ParseToolCalls, ToolCallSplitter).
//
// Not here: which tools a request may call and the grammar that constrains a call (the server's
// API layer), the model's own Jinja template (jinja_render.cpp gets tools as data).
#include "base/json_linear.h"
#include "base/strings.h"
#include "chat/jinja_ast.h"
#include "chat/tools_internal.h"
#include "chat/tools_json.h"

namespace paddock {
namespace {

using chat_internal::ArgsOf;
using chat_internal::Json;
using chat_internal::PyJson;
using chat_internal::ToolList;

constexpr std::string_view kHermesOpen = "<tool_call>", kHermesClose = "</tool_call>";
constexpr std::string_view kMistralOpen = "[TOOL_CALLS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";

// Where the JSON object or array starting at `from` ends (one past its closing bracket), or
// npos if it does not close: brackets counted outside strings.
size_t JsonEnd(std::string_view s, size_t from) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = from; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

// One call object: {"name": ..., <args_key>: {...}} (the other spelling of the arguments' key
// is accepted too; Mistral may send arguments as a JSON string). False if it is not one.
bool ReadCall(const Json& j, ChatToolCall* out) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  const Json* args = nullptr;
  for (const char* k : {"arguments", "parameters"})
    if (j.contains(k)) args = &j[k];
  std::string text = "{}";
  if (args != nullptr) {
    if (args->is_string()) {
      const Json parsed = Json::parse(args->get<std::string>(), nullptr, false);
      if (parsed.is_discarded() || !parsed.is_object()) return false;
      text = parsed.dump();
    } else if (args->is_object()) {
      text = args->dump();
    } else {
      return false;
    }
  }
  out->name = j["name"].get<std::string>();
  out->arguments = std::move(text);
  if (j.contains("id") && j["id"].is_string()) out->id = j["id"].get<std::string>();
  return true;
}

ParsedToolCalls ParseHermes(std::string_view text) {
  ParsedToolCalls out;
  std::string rest;
  size_t from = 0;
  for (;;) {
    const size_t open = text.find(kHermesOpen, from);
    if (open == std::string_view::npos) break;
    const size_t close = text.find(kHermesClose, open);
    if (close == std::string_view::npos) break;
    const std::string_view body =
        text.substr(open + kHermesOpen.size(), close - open - kHermesOpen.size());
    const Json j = Json::parse(body.begin(), body.end(), nullptr, false);
    rest.append(text.substr(from, open - from));
    ChatToolCall call;
    if (!j.is_discarded() && ReadCall(j, &call))
      out.calls.push_back(std::move(call));
    else
      rest.append(text.substr(open, close + kHermesClose.size() - open));
    from = close + kHermesClose.size();
  }
  rest.append(text.substr(from));
  out.content = std::string(TrimSpace(rest));
  return out;
}

// Llama 3.x: the reply is the call, one JSON object (several separated by ';' are accepted).
ParsedToolCalls ParseLlama3(std::string_view text) {
  ParsedToolCalls out;
  std::string_view t = TrimSpace(text);
  if (t.substr(0, kPythonTag.size()) == kPythonTag) t = TrimSpace(t.substr(kPythonTag.size()));
  std::vector<ChatToolCall> calls;
  size_t at = 0;
  while (at < t.size() && t[at] == '{') {
    const size_t end = JsonEnd(t, at);
    if (end == std::string_view::npos) break;
    const Json j = Json::parse(t.begin() + at, t.begin() + end, nullptr, false);
    ChatToolCall call;
    if (j.is_discarded() || !ReadCall(j, &call)) break;
    calls.push_back(std::move(call));
    at = end;
    while (at < t.size() && (t[at] == ';' || t[at] == ' ' || t[at] == '\n')) ++at;
  }
  if (calls.empty() || at < t.size()) {  // not (only) calls: the whole reply is content
    out.content = std::string(TrimSpace(text));
    return out;
  }
  out.calls = std::move(calls);
  return out;
}

// Mistral: content, then [TOOL_CALLS] and a JSON array of calls.
ParsedToolCalls ParseMistral(std::string_view text) {
  ParsedToolCalls out;
  const size_t open = text.find(kMistralOpen);
  if (open == std::string_view::npos) {
    out.content = std::string(TrimSpace(text));
    return out;
  }
  const size_t b = text.find_first_not_of(" \t\r\n", open + kMistralOpen.size());
  const size_t end = b == std::string_view::npos ? b : JsonEnd(text, b);
  bool ok = end != std::string_view::npos && text[b] == '[';
  if (ok) {
    const Json j = Json::parse(text.begin() + b, text.begin() + end, nullptr, false);
    ok = !j.is_discarded() && j.is_array() && !j.empty();
    for (size_t k = 0; ok && k < j.size(); ++k) {
      ChatToolCall call;
      ok = ReadCall(j[k], &call);
      out.calls.push_back(std::move(call));
    }
  }
  if (!ok) {
    out.calls.clear();
    out.content = std::string(TrimSpace(text));
    return out;
  }
  std::string rest(text.substr(0, open));
  rest.append(text.substr(end));
  out.content = std::string(TrimSpace(rest));
  return out;
}

}  // namespace

const char* ToolFormatName(ToolFormat format) {
  switch (format) {
    case ToolFormat::kHermes:
      return "hermes";
    case ToolFormat::kLlama3:
      return "llama3";
    case ToolFormat::kMistral:
      return "mistral";
    case ToolFormat::kHarmony:
      return "harmony";
  }
  return "hermes";
}

ParsedToolCalls ParseToolCalls(ToolFormat format, std::string_view text) {
  switch (format) {
    case ToolFormat::kLlama3:
      return ParseLlama3(text);
    case ToolFormat::kMistral:
      return ParseMistral(text);
    case ToolFormat::kHarmony: {
      std::string reasoning;  // (not part of ParsedToolCalls)
      ParsedToolCalls out = ParseHarmony(text, true, &reasoning);
      out.content = std::string(TrimSpace(out.content));
      return out;
    }
    case ToolFormat::kHermes:
      break;
  }
  return ParseHermes(text);
}

void ToolCallSplitter::Feed(std::string_view text, std::string* content) {
  if (in_calls_) {
    tail_.append(text);
    return;
  }
  held_.append(text);
  if (format_ == ToolFormat::kLlama3) {
    if (started_) {  // the reply began as prose: it is content throughout
      content->append(held_);
      held_.clear();
      return;
    }
    const size_t b = held_.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) return;
    const std::string_view t = std::string_view(held_).substr(b);
    if (t[0] == '{' || t.substr(0, kPythonTag.size()) == kPythonTag) {
      tail_ = std::exchange(held_, {});
      in_calls_ = true;
      return;
    }
    if (kPythonTag.substr(0, t.size()) == t) return;  // maybe the tag, not yet whole
    started_ = true;
    content->append(held_);
    held_.clear();
    return;
  }
  const std::string_view open = format_ == ToolFormat::kMistral ? kMistralOpen : kHermesOpen;
  const size_t at = held_.find(open);
  if (at != std::string::npos) {
    content->append(held_, 0, at);
    tail_ = held_.substr(at);
    held_.clear();
    in_calls_ = true;
    return;
  }
  const size_t keep = TagPrefixAtEnd(held_, open);
  content->append(held_, 0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
}

namespace chat_internal {

Json ToolList(const std::string& tools) {
  const Json j = JsonOrDiscarded<Json>(tools);
  if (j.is_discarded() || !j.is_array()) Fail("tools must be a JSON array");
  for (const auto& t : j)
    if (!t.is_object() || !t.contains("function") || !t["function"].is_object() ||
        !t["function"].contains("name") || !t["function"]["name"].is_string())
      Fail("each tool needs function.name");
  return j;
}

std::string PyJson(const Json& j) {
  return jinja::ToJson(jinja::FromJson(j.dump()));
}

Json ArgsOf(const ChatToolCall& c) {
  const Json a = JsonOrDiscarded<Json>(c.arguments.empty() ? "{}" : c.arguments);
  if (a.is_discarded()) Fail("the arguments of a call to '%s' are not valid JSON", c.name.c_str());
  return a;
}

ToolFormat FamilyToolFormat(const std::string& family) {
  if (family == "llama3") return ToolFormat::kLlama3;
  if (family == "mistral") return ToolFormat::kMistral;
  if (family == "harmony") return ToolFormat::kHarmony;
  return ToolFormat::kHermes;
}

bool TemplateToolFormat(const std::string& source, ToolFormat* format) {
  if (!Contains(source, "tools")) return false;
  if (Contains(source, "<|channel|>")) {
    *format = ToolFormat::kHarmony;
  } else if (Contains(source, "<tool_call>")) {
    *format = ToolFormat::kHermes;
  } else if (Contains(source, "[TOOL_CALLS]")) {
    *format = ToolFormat::kMistral;
  } else if (Contains(source, "<|python_tag|>") || Contains(source, "ipython") ||
             Contains(source, "\"parameters\"")) {
    *format = ToolFormat::kLlama3;
  } else {
    return false;
  }
  return true;
}

std::vector<ChatMessage> LowerTools(ToolFormat format, const std::vector<ChatMessage>& messages,
                                    const std::string& tools) {
  const Json list = tools.empty() ? Json::array() : ToolList(tools);
  std::vector<ChatMessage> out;
  if (format == ToolFormat::kLlama3) {
    // Llama 3.1-3.3's own wording: the tools open the first user message.
    std::string preface;
    if (!list.empty()) {
      preface =
          "Given the following functions, please respond with a JSON for a function call with its "
          "proper arguments that best answers the given prompt.\n\nRespond in the format "
          "{\"name\": function name, \"parameters\": dictionary of argument name and its "
          "value}.Do not use variables.\n\n";
      for (const auto& t : list) preface += t.dump(4) + "\n\n";
    }
    for (const ChatMessage& m : messages) {
      ChatMessage o{m.role, m.content};
      if (!m.tool_calls.empty()) {
        o.content.clear();
        for (const ChatToolCall& c : m.tool_calls) {
          if (!o.content.empty()) o.content += "; ";
          o.content += PyJson(Json{{"name", c.name}, {"parameters", ArgsOf(c)}});
        }
      } else if (m.role == "tool") {
        o.role = "ipython";
      } else if (m.role == "user" && !preface.empty()) {
        o.content = preface + m.content;
        preface.clear();
      }
      out.push_back(std::move(o));
    }
    if (!preface.empty()) out.push_back({"user", preface});
    return out;
  }
  // Hermes: the tools in the system turn; calls as <tool_call> blocks after the assistant's
  // text; results as <tool_response> blocks in a user turn (consecutive results share one).
  std::string sys;
  if (!list.empty()) {
    sys =
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
        "provided with function signatures within <tools></tools> XML tags:\n<tools>";
    for (const auto& t : list) sys += "\n" + PyJson(t);
    sys +=
        "\n</tools>\n\nFor each function call, return a json object with function name and "
        "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
        "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>";
  }
  for (const ChatMessage& m : messages) {
    if (m.role == "tool") {
      const std::string block = "<tool_response>\n" + m.content + "\n</tool_response>";
      if (!out.empty() && out.back().role == "user" &&
          out.back().content.rfind("</tool_response>") ==
              out.back().content.size() - std::string_view("</tool_response>").size())
        out.back().content += "\n" + block;
      else
        out.push_back({"user", block});
      continue;
    }
    ChatMessage o{m.role, m.content};
    for (const ChatToolCall& c : m.tool_calls) {
      if (!o.content.empty()) o.content += "\n";
      o.content += std::string(kHermesOpen) + "\n" +
                   PyJson(Json{{"name", c.name}, {"arguments", ArgsOf(c)}}) + "\n" +
                   std::string(kHermesClose);
    }
    out.push_back(std::move(o));
  }
  if (!sys.empty()) {
    if (!out.empty() && out[0].role == "system")
      out[0].content += "\n\n" + sys;
    else
      out.insert(out.begin(), ChatMessage{"system", sys});
  }
  return out;
}

std::string RenderToolsMistral(const std::vector<ChatMessage>& messages, const std::string& tools) {
  const Json list = tools.empty() ? Json::array() : ToolList(tools);
  std::string system;
  size_t last_user = messages.size();
  for (size_t i = 0; i < messages.size(); ++i)
    if (messages[i].role == "user") last_user = i;
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "system") {
      system += (system.empty() ? "" : "\n\n") + m.content;
    } else if (m.role == "user") {
      if (i == last_user && !list.empty())
        out += "[AVAILABLE_TOOLS] " + list.dump() + "[/AVAILABLE_TOOLS]";
      std::string text = m.content;
      if (i == last_user && !system.empty()) text = system + "\n\n" + text;
      out += "[INST] " + text + " [/INST]";
    } else if (m.role == "assistant" && !m.tool_calls.empty()) {
      Json calls = Json::array();
      for (const ChatToolCall& c : m.tool_calls) {
        Json call = {{"name", c.name}, {"arguments", ArgsOf(c)}};
        if (!c.id.empty()) call["id"] = c.id;
        calls.push_back(call);
      }
      out += m.content + "[TOOL_CALLS] " + calls.dump() + "</s>";
    } else if (m.role == "assistant") {
      out += m.content + "</s>";
    } else if (m.role == "tool") {
      const Json parsed = Json::parse(m.content, nullptr, false);
      Json r = {{"content", parsed.is_discarded() ? Json(m.content) : parsed}};
      if (!m.tool_call_id.empty()) r["call_id"] = m.tool_call_id;
      out += "[TOOL_RESULTS] " + r.dump() + "[/TOOL_RESULTS]";
    } else {
      Fail("unknown chat role '%s' (system, user, assistant or tool)", m.role.c_str());
    }
  }
  return out;
}

}  // namespace chat_internal
}  // namespace paddock
