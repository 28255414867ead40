// chat/tools_internal.h: the tool-call conventions as chat.cpp uses them (private to src/chat).
#pragma once

#include <string>
#include <vector>

#include "paddock/chat.h"

namespace paddock::chat_internal {

// The convention of a built-in family: llama3 and mistral have their own, the rest Hermes'.
ToolFormat FamilyToolFormat(const std::string& family);
// True if a Jinja template writes tools itself (it reads `tools` and spells a known
// convention's markers), with that convention in *format.
bool TemplateToolFormat(const std::string& source, ToolFormat* format);
// Tools, calls and results written as plain system/user/assistant (and, for kLlama3, ipython)
// messages in `format`'s convention, for a template that does not know them. Not for
// kMistral, whose markers sit outside the turns (RenderToolsMistral). Error if `tools` is not a
// JSON array of function tools or a call's arguments are not JSON.
std::vector<ChatMessage> LowerTools(ToolFormat format, const std::vector<ChatMessage>& messages,
                                    const std::string& tools);
// The built-in Mistral template with tools: [AVAILABLE_TOOLS] before the last user turn,
// [TOOL_CALLS] and [TOOL_RESULTS] blocks (Mistral v0.3's layout). Nothing opens the assistant's
// turn: a Mistral prompt ends with [/INST] either way.
std::string RenderToolsMistral(const std::vector<ChatMessage>& messages, const std::string& tools);
// The built-in harmony template (gpt-oss), tools and all: system and developer messages (the
// tools as a TypeScript namespace), calls to=functions.NAME, results from functions.NAME.
// Variables: reasoning_effort (low, medium, high) and model_identity; others are an Error.
std::string RenderHarmony(const std::vector<ChatMessage>& messages, const std::string& tools,
                          bool add_generation_prompt, const std::vector<ChatVar>& vars);

}  // namespace paddock::chat_internal
