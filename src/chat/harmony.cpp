// chat/harmony.cpp: gpt-oss's harmony format. The built-in renderer writes a conversation as
// gpt-oss's own chat template does (system and developer messages, the tools as a TypeScript
// namespace, calls addressed to=functions.NAME, results from functions.NAME); HarmonyParser
// splits a reply into reasoning (analysis channel), content (final) and calls as it streams.
//
// Not here: the tokenizer's side (which markers are rendered as text, <|return|> and <|call|>
// ending a generation: model/tokenizer.cpp), the grammar of a forced call (server/api.cpp).
#include <algorithm>

#include "base/strings.h"
#include "chat/jinja_ast.h"
#include "chat/tools_internal.h"
#include "chat/tools_json.h"
#include "paddock/chat.h"

namespace paddock {
namespace {

using Json = chat_internal::Json;

constexpr std::string_view kStart = "<|start|>", kChannel = "<|channel|>", kMessage = "<|message|>",
                           kConstrain = "<|constrain|>", kEnd = "<|end|>", kReturn = "<|return|>",
                           kCall = "<|call|>";
// What ends a message's body: the next header, or an end marker (those are rendered only with
// render_special). A call's body ends only at an end marker: its arguments may spell anything
// in their strings (a forced call's grammar lets a random model write a marker there).
constexpr std::string_view kBodyEnds[] = {kStart, kChannel, kEnd, kReturn, kCall};
constexpr std::string_view kCallEnds[] = {kEnd, kReturn, kCall};

// Header markers inside a shown body are structure out of place, not text: removed.
void AppendText(std::string_view s, std::string* out) {
  for (;;) {
    const size_t a = s.find(kMessage), b = s.find(kConstrain);
    const size_t at = std::min(a, b);
    if (at == std::string_view::npos) break;
    out->append(s.substr(0, at));
    s.remove_prefix(at + (at == a ? kMessage.size() : kConstrain.size()));
  }
  out->append(s);
}
// A header longer than this without <|message|> is not a header: its text becomes content.
constexpr size_t kMaxHeader = 512;

// The word after `key` in a header (up to a space or the next marker), or empty.
std::string HeaderWord(std::string_view h, std::string_view key) {
  const size_t at = h.find(key);
  if (at == std::string_view::npos) return {};
  size_t b = at + key.size();
  while (b < h.size() && h[b] == ' ') ++b;
  size_t e = b;
  while (e < h.size() && h[e] != ' ' && h[e] != '<') ++e;
  return std::string(h.substr(b, e - b));
}

// A parameter's type as gpt-oss's template writes it in TypeScript.
std::string TsType(const Json& s) {
  if (!s.is_object()) return "any";
  const std::string nullable = s.value("nullable", false) ? " | null" : "";
  const Json type = s.contains("type") ? s["type"] : Json();
  if (type.is_array() && !type.empty()) {
    std::string out;
    for (const auto& t : type)
      out += (out.empty() ? "" : " | ") + (t.is_string() ? t.get<std::string>() : "any");
    return out;
  }
  if (s.contains("oneOf") && s["oneOf"].is_array()) {
    const Json& v = s["oneOf"];
    bool object = false;
    for (const auto& x : v) object = object || (x.is_object() && x.value("type", "") == "object");
    if (object && v.size() > 1) return "any";
    std::string out;
    for (const auto& x : v) out += (out.empty() ? "" : " | ") + TsType(x);
    return out;
  }
  const std::string t = type.is_string() ? type.get<std::string>() : "";
  if (t == "array") {
    if (!s.contains("items")) return "any[]" + nullable;
    const std::string it = s["items"].is_object() ? s["items"].value("type", "") : "";
    if (it == "string") return "string[]" + nullable;
    if (it == "number" || it == "integer") return "number[]" + nullable;
    if (it == "boolean") return "boolean[]" + nullable;
    const std::string inner = TsType(s["items"]);
    return (inner == "object | object" || inner.size() > 50 ? "any[]" : inner + "[]") + nullable;
  }
  if (t == "string") {
    if (s.contains("enum") && s["enum"].is_array() && !s["enum"].empty()) {
      std::string out;
      for (const auto& e : s["enum"])
        out += (out.empty() ? "\"" : "\" | \"") + (e.is_string() ? e.get<std::string>() : e.dump());
      return out + "\"";
    }
    return "string" + nullable;
  }
  if (t == "number" || t == "integer") return "number";
  if (t == "boolean") return "boolean";
  if (t == "object") {
    if (!s.contains("properties") || !s["properties"].is_object() || s["properties"].empty())
      return "object";
    const Json req =
        s.contains("required") && s["required"].is_array() ? s["required"] : Json::array();
    std::string out = "{\n";
    bool first = true;
    for (const auto& [name, p] : s["properties"].items()) {
      if (!first) out += ", ";
      first = false;
      out += name + (std::find(req.begin(), req.end(), name) == req.end() ? "?" : "") + ": " +
             TsType(p);
    }
    return out + "}";
  }
  return "any";
}

// The tools as gpt-oss's template describes them to the model.
std::string ToolNamespace(const Json& tools) {
  std::string out = "## functions\n\nnamespace functions {\n\n";
  for (const auto& t : tools) {
    const Json& f = t["function"];
    if (f.contains("description") && f["description"].is_string())
      out += "// " + f["description"].get<std::string>() + "\n";
    out += "type " + f["name"].get<std::string>() + " = ";
    const Json params = f.contains("parameters") ? f["parameters"] : Json::object();
    if (!params.is_object() || !params.contains("properties") ||
        !params["properties"].is_object() || params["properties"].empty()) {
      out += "() => any;\n\n";
      continue;
    }
    const Json req = params.contains("required") && params["required"].is_array()
                         ? params["required"]
                         : Json::array();
    out += "(_: {\n";
    for (const auto& [name, p] : params["properties"].items()) {
      if (p.is_object() && p.contains("description") && p["description"].is_string())
        out += "// " + p["description"].get<std::string>() + "\n";
      out += name + (std::find(req.begin(), req.end(), name) == req.end() ? "?" : "") + ": " +
             TsType(p);
      if (p.is_object() && p.contains("default")) {
        const Json& d = p["default"];
        const std::string raw = d.is_string() ? d.get<std::string>() : d.dump();
        if (p.contains("enum"))
          out += ", // default: " + raw;
        else if (p.contains("oneOf"))
          out += "// default: " + raw;
        else
          out += ", // default: " + chat_internal::PyJson(d);
      }
      out += ",\n";
    }
    out += "}) => any;\n\n";
  }
  return out + "} // namespace functions";
}

}  // namespace

void HarmonyParser::Header(std::string_view h) {
  const std::string channel = HeaderWord(h, kChannel);
  const std::string to = HeaderWord(h, "to=");
  constexpr std::string_view kFunctions = "functions.";
  if (tools_ && to.size() > kFunctions.size() && StartsWith(to, kFunctions)) {
    sink_ = Sink::kCall;  // (EndMessage left the call's name and arguments empty)
    call_name_ = to.substr(kFunctions.size());
  } else if (to.empty() && channel == "analysis") {
    sink_ = Sink::kReasoning;
  } else {
    sink_ = Sink::kContent;  // final, a commentary preamble, or a call nobody offered
  }
}

void HarmonyParser::Body(std::string_view s, std::string* reasoning, std::string* content) {
  switch (sink_) {
    case Sink::kReasoning:
      AppendText(s, reasoning);
      break;
    case Sink::kCall:
      call_args_.append(s);
      break;
    case Sink::kContent:
      AppendText(s, content);
      break;
    case Sink::kDrop:
      break;
  }
}

void HarmonyParser::Feed(std::string_view text, std::string* reasoning, std::string* content) {
  held_.append(text);
  for (;;) {
    if (!started_) {  // a reply opens with a header, or is plain text throughout
      for (std::string_view m : {kChannel, kStart}) {
        if (held_.size() < m.size() && m.substr(0, held_.size()) == held_) return;
        if (held_.compare(0, m.size(), m) == 0) in_header_ = true;
      }
      started_ = true;
      continue;
    }
    if (in_header_) {
      const size_t at = held_.find(kMessage);
      if (at == std::string::npos) {
        const size_t keep = TagPrefixAtEnd(held_, kMessage);
        header_.append(held_, 0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        if (header_.size() > kMaxHeader) {  // not a header after all
          in_header_ = false;
          sink_ = Sink::kContent;
          for (std::string_view m : kBodyEnds)
            for (size_t p; (p = header_.find(m)) != std::string::npos;) header_.erase(p, m.size());
          AppendText(header_, content);
          header_.clear();
          continue;
        }
        return;
      }
      header_.append(held_, 0, at);
      held_.erase(0, at + kMessage.size());
      Header(header_);
      header_.clear();
      in_header_ = false;
      continue;
    }
    const bool call = sink_ == Sink::kCall;
    const std::string_view* ends = call ? kCallEnds : kBodyEnds;
    const size_t n_ends = call ? std::size(kCallEnds) : std::size(kBodyEnds);
    size_t at = std::string::npos;
    std::string_view which;
    for (size_t k = 0; k < n_ends; ++k) {
      const size_t p = held_.find(ends[k]);
      if (p < at) {
        at = p;
        which = ends[k];
      }
    }
    if (at == std::string::npos) {
      size_t keep = 0;
      for (size_t k = 0; k < n_ends; ++k) keep = std::max(keep, TagPrefixAtEnd(held_, ends[k]));
      if (!call)  // (a header marker cut across pieces is removed once whole)
        for (std::string_view m : {kMessage, kConstrain})
          keep = std::max(keep, TagPrefixAtEnd(held_, m));
      Body(std::string_view(held_).substr(0, held_.size() - keep), reasoning, content);
      held_.erase(0, held_.size() - keep);
      return;
    }
    Body(std::string_view(held_).substr(0, at), reasoning, content);
    EndMessage();
    // The next header: <|channel|> belongs to it; <|start|>, <|end|>, <|return|>, <|call|> do not.
    held_.erase(0, which == kChannel ? at : at + which.size());
    in_header_ = true;
  }
}

void HarmonyParser::EndMessage() {
  if (sink_ == Sink::kCall) {
    const std::string_view args = TrimSpace(call_args_);
    const Json j = Json::parse(args.begin(), args.end(), nullptr, false);
    if (!j.is_discarded() && j.is_object()) {
      calls_.push_back({"", call_name_, j.dump()});
    } else {
      pending_content_.append(call_args_);  // not a call after all: its text is content
    }
  }
  sink_ = Sink::kDrop;  // until the next header says where a body goes
  call_name_.clear();
  call_args_.clear();
}

void HarmonyParser::Finish(std::string* reasoning, std::string* content) {
  if (!started_) {  // the whole reply was a marker's beginning: it is text
    content->append(held_);
  } else if (!in_header_) {
    Body(held_, reasoning, content);
  }  // (a reply cut inside a header: the header is not shown)
  held_.clear();
  header_.clear();
  EndMessage();
  content->append(pending_content_);
  pending_content_.clear();
}

ParsedToolCalls ParseHarmony(std::string_view text, bool tools, std::string* reasoning) {
  HarmonyParser p(tools);
  ParsedToolCalls out;
  p.Feed(text, reasoning, &out.content);
  p.Finish(reasoning, &out.content);
  out.calls = p.calls();
  return out;
}

namespace chat_internal {

std::string RenderHarmony(const std::vector<ChatMessage>& messages, const std::string& tools,
                          bool add_generation_prompt, const std::vector<ChatVar>& vars) {
  std::string identity = "You are ChatGPT, a large language model trained by OpenAI.",
              effort = "medium";
  for (const ChatVar& v : vars) {
    if (v.name != "reasoning_effort" && v.name != "model_identity")
      Fail(
          "template variable '%s': the built-in harmony template takes reasoning_effort and "
          "model_identity",
          v.name.c_str());
    if (v.kind != ChatVar::Kind::kString)
      Fail("template variable '%s' must be a string", v.name.c_str());
    (v.name == "reasoning_effort" ? effort : identity) = v.str;
  }
  const Json list = tools.empty() ? Json::array() : ToolList(tools);
  std::string out = "<|start|>system<|message|>" + identity + "\nKnowledge cutoff: 2024-06\n" +
                    "Current date: " + FormatLocalTime("%Y-%m-%d") + "\n\nReasoning: " + effort +
                    "\n\n# Valid channels: analysis, commentary, final. Channel must be included "
                    "for every message.";
  if (!list.empty())
    out += "\nCalls to these tools must go to the commentary channel: 'functions'.";
  out += "<|end|>";
  std::string developer;
  for (const ChatMessage& m : messages)
    if (m.role == "system" || m.role == "developer")
      developer += (developer.empty() ? "" : "\n\n") + m.content;
  if (!developer.empty() || !list.empty()) {
    out += "<|start|>developer<|message|>";
    if (!developer.empty()) out += "# Instructions\n\n" + developer + "\n\n";
    if (!list.empty()) out += "# Tools\n\n" + ToolNamespace(list);
    out += "<|end|>";
  }
  std::vector<ChatToolCall> made;  // calls so far: a result names its function by the call's id
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "system" || m.role == "developer") continue;
    if (m.role == "user") {
      out += "<|start|>user<|message|>" + m.content + "<|end|>";
    } else if (m.role == "assistant" && !m.tool_calls.empty()) {
      // Reasoning before calls is kept only while no later final answer exists (as gpt-oss's
      // template: the chain of thought of a finished turn is dropped).
      bool later_final = false;
      for (size_t k = i + 1; k < messages.size(); ++k)
        later_final =
            later_final || (messages[k].role == "assistant" && messages[k].tool_calls.empty());
      if (!m.content.empty() && !later_final)
        out += "<|start|>assistant<|channel|>analysis<|message|>" + m.content + "<|end|>";
      for (const ChatToolCall& c : m.tool_calls) {
        out += "<|start|>assistant to=functions." + c.name +
               "<|channel|>commentary json<|message|>" + PyJson(ArgsOf(c)) + "<|call|>";
        made.push_back(c);
      }
    } else if (m.role == "assistant") {
      const bool last = i + 1 == messages.size() && !add_generation_prompt;
      out += "<|start|>assistant<|channel|>final<|message|>" + m.content +
             (last ? "<|return|>" : "<|end|>");
    } else if (m.role == "tool") {
      const ChatToolCall* call = made.empty() ? nullptr : &made.back();
      for (const ChatToolCall& c : made)
        if (!m.tool_call_id.empty() && c.id == m.tool_call_id) call = &c;
      if (call == nullptr)
        Fail("a tool message needs an earlier assistant message with a tool call");
      out += "<|start|>functions." + call->name + " to=assistant<|channel|>commentary<|message|>" +
             jinja::ToJson(jinja::Value::Str(m.content)) + "<|end|>";
    } else {
      Fail("unknown chat role '%s' (system, developer, user, assistant or tool)", m.role.c_str());
    }
  }
  if (add_generation_prompt) out += "<|start|>assistant";
  return out;
}

}  // namespace chat_internal
}  // namespace paddock
