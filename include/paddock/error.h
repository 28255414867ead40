// paddock/error.h: the exception type Paddock throws for bad input and failed operations.
//
// Every error carries a single human-readable line that names the problem (and, for file
// parsers, where in the file it was found). Callers at the edge (CLI, server) print it as is.
// The server's request parsing throws one more, server::ApiError (server/api.h: an HTTP status
// and OpenAI's error fields, not a std::exception), which never leaves the server layer.
#pragma once

#include <stdexcept>
#include <string>

namespace paddock {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace paddock
