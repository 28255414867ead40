// base/strings.h: tiny string helpers (formatting without iostreams in headers).
#pragma once

#include <cstdarg>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "paddock/error.h"

namespace paddock {

// printf-style formatting into a std::string.
std::string StrFormat(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Throws paddock::Error with a printf-style message.
[[noreturn]] void Fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// The parts joined with `sep`.
std::string Join(const std::vector<std::string>& parts, std::string_view sep);

// Human-readable byte count ("1.25 GiB").
std::string FormatBytes(uint64_t bytes);
// "a,b,,c" split at sep: {"a", "b", "", "c"} (an empty string: {}).
std::vector<std::string> Split(const std::string& s, char sep);
// "dir/model.gguf" -> "model".
std::string FileStem(const std::string& path);
// The local time now, formatted by strftime (at most 255 bytes): "%Y-%m-%d" -> "2026-12-02".
std::string FormatLocalTime(const char* fmt);

// `s` without leading and trailing spaces, tabs and line breaks.
std::string_view TrimSpace(std::string_view s);
// The length of the longest end of `s` that begins `tag` (a tag the next piece of a stream may
// still complete: streaming splitters hold that much back).
size_t TagPrefixAtEnd(std::string_view s, std::string_view tag);

inline bool Contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}
inline bool StartsWith(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(0, p.size()) == p;
}
inline bool EndsWith(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

}  // namespace paddock
