// base/base64.h: RFC 4648 base64 (the standard alphabet, '=' padding).
//
// For binary payloads in JSON (embeddings' encoding_format base64). Encoding only: nothing in
// Paddock reads base64 yet.
#pragma once

#include <string>
#include <string_view>

namespace paddock {

// The base64 text of the bytes of `data`.
std::string Base64Encode(std::string_view data);

}  // namespace paddock
