// base/utf8.h: streaming UTF-8 assembly for detokenization.
//
// Tokens can end in the middle of a multi-byte character (byte-fallback tokens carry single
// bytes). Utf8Stream holds back an incomplete tail so that only whole characters are emitted;
// bytes that can never form a valid character become U+FFFD. Appending never allocates once the
// output string has capacity.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace paddock {

// Length of the UTF-8 sequence that starts with byte `c` (1-4), or 0 if `c` cannot start one.
inline int Utf8SequenceLength(uint8_t c) {
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) return 2;
  if (c >= 0xe0 && c <= 0xef) return 3;
  if (c >= 0xf0 && c <= 0xf4) return 4;
  return 0;
}

// Appends the UTF-8 encoding of code point `cp` (at most 0x10FFFF) to *out.
void AppendUtf8(uint32_t cp, std::string* out);

// Code points in `s`: bytes that do not continue a sequence (a character cut at the end of `s`
// counts where its first byte is).
inline size_t CountCodePoints(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Whether `s` is well-formed UTF-8 (RFC 3629: no overlong forms, surrogates or code points past
// U+10FFFF; a character cut at the end is not well-formed).
bool IsValidUtf8(std::string_view s);

// `s` cut to at most n bytes at a character boundary, "..." marking a cut.
std::string ClipUtf8(std::string_view s, size_t n);

class Utf8Stream {
 public:
  // Appends the complete characters of pending + bytes to *out, keeps an incomplete tail.
  void Feed(std::string_view bytes, std::string* out);
  // Emits whatever is held back (as U+FFFD) and resets.
  void Flush(std::string* out);
  void Reset() { n_pending_ = 0; }

 private:
  void Push(uint8_t c, std::string* out);
  uint8_t pending_[4] = {};
  int n_pending_ = 0;
  int need_ = 0;
};

}  // namespace paddock
