// chat/jinja.h: the subset of Jinja that chat templates use.
//
// Enough for the templates shipped in GGUF files of the common families (Llama 2/3, ChatML /
// Qwen, Mistral, Phi-3, Gemma, Zephyr...): text, {{ expressions }}, {% if / elif / else %},
// {% for a[, b] in ... %} with `loop`, {% set %} (including namespace attributes),
// {% macro name(params, with=defaults) %} (top-level; called like functions), comments,
// whitespace control ({%- -%}), and HF's trim_blocks + lstrip_blocks; literals, lists, dicts,
// attribute and subscript access, slices, arithmetic, comparison, `in`, boolean logic,
// the ternary `a if c else b`, `~`, filters (trim, length, upper, lower, title, capitalize,
// tojson, string, int, first, last, default, join, replace, list, items), tests (defined,
// undefined, none, string, number, mapping, iterable, sequence, true, false), string methods
// (strip, lstrip, rstrip, startswith, endswith, split, upper, lower, title, replace), dict
// methods (items, keys, values, get), and the functions range, namespace, raise_exception,
// strftime_now (the local time).
// Anything else is an Error naming the construct and where it is.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "paddock/chat.h"

namespace paddock {

class JinjaTemplate {
 public:
  // Parses `source`; throws Error on syntax it does not support.
  explicit JinjaTemplate(const std::string& source);
  ~JinjaTemplate();

  // Renders a chat: `messages` (role, content), add_generation_prompt, bos_token, eos_token.
  // Throws Error (raise_exception's message, or an unsupported construct met while rendering).
  std::string RenderChat(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                         const std::string& bos_token, const std::string& eos_token,
                         const std::vector<ChatVar>& vars = {}) const;

  struct Node;

 private:
  void Parse(const std::string& source);
  std::vector<std::unique_ptr<Node>> body_;
};

}  // namespace paddock
