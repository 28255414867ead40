// engine/chat.cpp: built-in chat templates and recognition of a model's own template.
//
// Each family is written out as its reference Jinja template renders it (BOS is left to the
// tokenizer's add-BOS flag, so it is not repeated here). A model's template is recognized by
// the markers it emits, as llama.cpp does for its built-ins; a full Jinja renderer is separate
// work.
#include "paddock/chat.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "base/strings.h"
#include "chat/jinja.h"
#include "chat/tools_internal.h"

namespace paddock {
namespace {

// System text folded into the first user turn (families without a system role).
std::vector<ChatMessage> FoldSystem(const std::vector<ChatMessage>& msgs, const char* sep) {
  std::vector<ChatMessage> out;
  std::string system;
  for (const auto& m : msgs) {
    if (m.role == "system") {
      system += (system.empty() ? "" : "\n\n") + m.content;
      continue;
    }
    out.push_back(m);
    if (m.role == "user" && !system.empty()) {
      out.back().content = system + sep + m.content;
      system.clear();
    }
  }
  if (!system.empty()) out.insert(out.begin(), ChatMessage{"user", system});
  return out;
}

}  // namespace

const std::vector<std::string>& ChatTemplateNames() {
  static const std::vector<std::string> names = {"chatml", "llama2", "llama3", "mistral",
                                                 "phi3",   "gemma",  "zephyr", "harmony"};
  return names;
}

std::string ResolveChatTemplate(const ModelInfo& info, const std::string& override_name) {
  const auto& names = ChatTemplateNames();
  if (!override_name.empty()) {
    if (std::find(names.begin(), names.end(), override_name) == names.end()) {
      Fail("unknown chat template '%s' (known: %s)", override_name.c_str(),
           Join(names, ", ").c_str());
    }
    return override_name;
  }
  const std::string& t = info.chat_template;
  if (!t.empty()) {
    if (Contains(t, "<|channel|>")) return "harmony";
    if (Contains(t, "<|im_start|>")) return "chatml";
    if (Contains(t, "<|start_header_id|>")) return "llama3";
    if (Contains(t, "<start_of_turn>")) return "gemma";
    if (Contains(t, "<|assistant|>") && Contains(t, "<|end|>")) return "phi3";
    if (Contains(t, "<|assistant|>") || Contains(t, "<|user|>")) return "zephyr";
    if (Contains(t, "<<SYS>>")) return "llama2";
    if (Contains(t, "[INST]")) return "mistral";
  }
  if (info.arch == "qwen2" || info.arch == "qwen3") return "chatml";
  if (info.arch == "mistral") return "mistral";
  if (info.arch == "gemma" || info.arch == "gemma2" || info.arch == "gemma3") return "gemma";
  if (info.arch == "llama") return "llama2";
  if (info.arch == "gpt-oss") return "harmony";
  return "chatml";
}

std::string RenderChat(const std::string& name, const std::vector<ChatMessage>& messages,
                       bool gen) {
  if (name == "harmony") return chat_internal::RenderHarmony(messages, "", gen, {});
  for (const auto& m : messages) {
    // ipython: a tool's result in Llama 3's convention (chat_internal::LowerTools).
    if (m.role != "system" && m.role != "user" && m.role != "assistant" &&
        !(m.role == "ipython" && name == "llama3")) {
      Fail("unknown chat role '%s' (system, user or assistant)", m.role.c_str());
    }
  }
  std::string out;
  if (name == "chatml") {
    for (const auto& m : messages)
      out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    if (gen) out += "<|im_start|>assistant\n";
  } else if (name == "llama3") {
    for (const auto& m : messages)
      out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" +
             std::string(TrimSpace(m.content)) + "<|eot_id|>";
    if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  } else if (name == "llama2") {
    // [INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s><s>[INST] ...
    std::string system;
    bool first = true;
    for (const auto& m : messages) {
      if (m.role == "system") {
        system = m.content;
      } else if (m.role == "user") {
        if (!first) out += "<s>";
        out += "[INST] ";
        if (!system.empty()) {
          out += "<<SYS>>\n" + system + "\n<</SYS>>\n\n";
          system.clear();
        }
        out += std::string(TrimSpace(m.content)) + " [/INST]";
        first = false;
      } else {
        out += " " + std::string(TrimSpace(m.content)) + " </s>";
        first = false;
      }
    }
  } else if (name == "mistral") {
    // [INST] {system}\n\n{user} [/INST]{assistant}</s>[INST] ...
    for (const auto& m : FoldSystem(messages, "\n\n")) {
      if (m.role == "user")
        out += "[INST] " + m.content + " [/INST]";
      else
        out += m.content + "</s>";
    }
  } else if (name == "phi3") {
    for (const auto& m : messages) out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
    if (gen) out += "<|assistant|>\n";
  } else if (name == "zephyr") {
    for (const auto& m : messages) out += "<|" + m.role + "|>\n" + m.content + "</s>\n";
    if (gen) out += "<|assistant|>\n";
  } else if (name == "gemma") {
    for (const auto& m : FoldSystem(messages, "\n\n")) {
      out += "<start_of_turn>" + std::string(m.role == "assistant" ? "model" : "user") + "\n" +
             std::string(TrimSpace(m.content)) + "<end_of_turn>\n";
    }
    if (gen) out += "<start_of_turn>model\n";
  } else {
    Fail("unknown chat template '%s'", name.c_str());
  }
  return out;
}

struct ChatFormatter::Impl {
  std::unique_ptr<JinjaTemplate> jinja;
  std::string family;
  std::string bos, eos;
  // The convention calls are written in; jinja_tools: the Jinja template writes tools itself.
  ToolFormat tool_format = ToolFormat::kHermes;
  bool jinja_tools = false;
  void UseJinja(std::unique_ptr<JinjaTemplate> t, const std::string& source) {
    jinja = std::move(t);
    jinja_tools = chat_internal::TemplateToolFormat(source, &tool_format);
    // A template without a convention of its own: calls are lowered to Hermes' text, except
    // for a Llama 3 template, whose models are trained on their JSON form.
    if (!jinja_tools) tool_format = chat_internal::FamilyToolFormat(family);
    if (!jinja_tools && tool_format == ToolFormat::kMistral) tool_format = ToolFormat::kHermes;
  }
};

ChatFormatter::ChatFormatter() : impl_(std::make_unique<Impl>()) {}
ChatFormatter::~ChatFormatter() = default;

std::unique_ptr<ChatFormatter> ChatFormatter::Create(const ModelInfo& info,
                                                     const std::string& family_override,
                                                     const std::string& template_file) {
  std::unique_ptr<ChatFormatter> f(new ChatFormatter());
  Impl& im = *f->impl_;
  im.bos = info.bos_token;
  im.eos = info.eos_token;
  const std::vector<ChatMessage> probe = {
      {"system", "s"}, {"user", "u"}, {"assistant", "a"}, {"user", "u"}};
  if (!family_override.empty()) {
    im.family = ResolveChatTemplate(info, family_override);
    im.tool_format = chat_internal::FamilyToolFormat(im.family);
    f->description_ = "built-in " + im.family;
    return f;
  }
  if (!template_file.empty()) {
    std::ifstream in(template_file, std::ios::binary);
    if (!in) Fail("cannot read chat template file '%s'", template_file.c_str());
    std::stringstream ss;
    ss << in.rdbuf();
    ModelInfo file_info = info;
    file_info.chat_template = ss.str();
    im.family = ResolveChatTemplate(file_info, "");
    im.UseJinja(std::make_unique<JinjaTemplate>(ss.str()), ss.str());
    f->description_ = "template from " + template_file;
    return f;
  }
  im.family = ResolveChatTemplate(info, "");
  im.tool_format = chat_internal::FamilyToolFormat(im.family);
  f->description_ = "built-in " + im.family;
  if (!info.chat_template.empty()) {
    try {
      auto t = std::make_unique<JinjaTemplate>(info.chat_template);
      try {
        t->RenderChat(probe, true, im.bos, im.eos);
      } catch (const Error& e) {
        // Templates may refuse a system turn (raise_exception); try without one.
        if (std::string(e.what()).find("raised") == std::string::npos) throw;
        t->RenderChat({{"user", "u"}, {"assistant", "a"}, {"user", "u"}}, true, im.bos, im.eos);
      }
      im.UseJinja(std::move(t), info.chat_template);
      f->description_ = "the model's template";
    } catch (const Error& e) {
      f->warning_ =
          std::string(e.what()) + "; using the built-in " + im.family + " template instead";
    }
  }
  return f;
}

namespace {

// The variables a chat without any drops: the optional ones (hints such as reasoning_effort).
std::vector<ChatVar> Required(const std::vector<ChatVar>& vars) {
  std::vector<ChatVar> out;
  for (const ChatVar& v : vars)
    if (!v.optional) out.push_back(v);
  return out;
}

}  // namespace

std::string ChatFormatter::Render(const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt,
                                  const std::vector<ChatVar>& all_vars) const {
  const bool takes_vars = impl_->jinja || impl_->family == "harmony";
  const std::vector<ChatVar> vars = takes_vars ? all_vars : Required(all_vars);
  if (vars.empty()) return Render(messages, add_generation_prompt);
  if (!impl_->jinja && impl_->family == "harmony")
    return chat_internal::RenderHarmony(messages, "", add_generation_prompt, vars);
  if (!impl_->jinja)
    Fail("template variable '%s': the chat is rendered with the %s, which has no variables",
         vars[0].name.c_str(), description_.c_str());
  return impl_->jinja->RenderChat(messages, add_generation_prompt, impl_->bos, impl_->eos, vars);
}

ToolFormat ChatFormatter::tool_format() const {
  return impl_->tool_format;
}

std::string ChatFormatter::Render(const ChatInput& in) const {
  bool tool_messages = !in.tools.empty();
  for (const ChatMessage& m : in.messages)
    tool_messages = tool_messages || m.role == "tool" || !m.tool_calls.empty();
  if (!tool_messages) return Render(in.messages, in.add_generation_prompt, in.vars);
  const Impl& im = *impl_;
  if (im.jinja && im.jinja_tools) {
    std::vector<ChatVar> vars = in.vars;
    if (!in.tools.empty()) {
      ChatVar t;
      t.name = "tools";
      t.kind = ChatVar::Kind::kJson;
      t.str = in.tools;
      vars.push_back(std::move(t));
    }
    return im.jinja->RenderChat(in.messages, in.add_generation_prompt, im.bos, im.eos, vars);
  }
  if (!im.jinja && im.tool_format == ToolFormat::kHarmony)
    return chat_internal::RenderHarmony(in.messages, in.tools, in.add_generation_prompt, in.vars);
  if (!im.jinja && im.tool_format == ToolFormat::kMistral) {
    if (const std::vector<ChatVar> vars = Required(in.vars); !vars.empty())
      Fail("template variable '%s': the chat is rendered with the %s, which has no variables",
           vars[0].name.c_str(), description_.c_str());
    return chat_internal::RenderToolsMistral(in.messages, in.tools);
  }
  // (A harmony Jinja template that does not write tools itself gets Hermes' text.)
  const ToolFormat lower =
      im.tool_format == ToolFormat::kMistral || im.tool_format == ToolFormat::kHarmony
          ? ToolFormat::kHermes
          : im.tool_format;
  return Render(chat_internal::LowerTools(lower, in.messages, in.tools), in.add_generation_prompt,
                in.vars);
}

bool ChatFormatter::OpensReasoning(const std::string& rendered) {
  const size_t open = rendered.rfind("<think>");
  return open != std::string::npos && rendered.find("</think>", open) == std::string::npos &&
         rendered.find_first_not_of(" \t\r\n", open + 7) == std::string::npos;
}

std::string ChatFormatter::Render(const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt) const {
  if (impl_->jinja)
    return impl_->jinja->RenderChat(messages, add_generation_prompt, impl_->bos, impl_->eos);
  return RenderChat(impl_->family, messages, add_generation_prompt);
}

}  // namespace paddock
