// base/base64.h: RFC 4648 base64 (the standard alphabet, '=' padding).
//
// For binary payloads in JSON: embeddings' encoding_format base64 out, images (data: URLs,
// Anthropic and Ollama image payloads) in.
#pragma once

#include <string>
#include <string_view>

namespace paddock {

// The base64 text of the bytes of `data`.
std::string Base64Encode(std::string_view data);
// The bytes of base64 text (padding optional, ASCII whitespace skipped); false, with *out
// unspecified, on any other character or a truncated group.
bool Base64Decode(std::string_view text, std::string* out);

}  // namespace paddock
