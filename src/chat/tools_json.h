// chat/tools_json.h: the JSON side of the tool-call conventions, shared by tools.cpp and
// harmony.cpp (private to src/chat; kept out of tools_internal.h so that chat.cpp does not
// compile nlohmann/json).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "paddock/chat.h"

namespace paddock::chat_internal {

using Json = nlohmann::ordered_json;

// The tool definitions as JSON (an array), checked for shape: Error naming what is wrong.
Json ToolList(const std::string& tools);
// JSON as Python's json.dumps writes it (", " and ": "), the way templates' tojson spell it, so
// text written here matches what the models saw in training.
std::string PyJson(const Json& j);
// A call's arguments as JSON ({} when empty); Error if they are not valid JSON.
Json ArgsOf(const ChatToolCall& c);

}  // namespace paddock::chat_internal
