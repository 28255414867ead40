#include "base/base64.h"

#include <cstdint>

namespace paddock {

std::string Base64Encode(std::string_view data) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* b = reinterpret_cast<const unsigned char*>(data.data());
  const size_t n = data.size();
  std::string s;
  s.reserve((n + 2) / 3 * 4);
  for (size_t k = 0; k < n; k += 3) {
    const uint32_t v = (uint32_t{b[k]} << 16) | (k + 1 < n ? uint32_t{b[k + 1]} << 8 : 0) |
                       (k + 2 < n ? uint32_t{b[k + 2]} : 0);
    s += kAlphabet[(v >> 18) & 63];
    s += kAlphabet[(v >> 12) & 63];
    s += k + 1 < n ? kAlphabet[(v >> 6) & 63] : '=';
    s += k + 2 < n ? kAlphabet[v & 63] : '=';
  }
  return s;
}

bool Base64Decode(std::string_view text, std::string* out) {
  out->clear();
  out->reserve(text.size() / 4 * 3);
  uint32_t acc = 0;
  int bits = 0, pad = 0;
  for (const char c : text) {
    int v;
    if (c >= 'A' && c <= 'Z')
      v = c - 'A';
    else if (c >= 'a' && c <= 'z')
      v = c - 'a' + 26;
    else if (c >= '0' && c <= '9')
      v = c - '0' + 52;
    else if (c == '+' || c == '-')
      v = 62;  // '-', '_': the URL-safe alphabet
    else if (c == '/' || c == '_')
      v = 63;
    else if (c == '=') {
      ++pad;
      continue;
    } else if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
      continue;
    else
      return false;
    if (pad > 0) return false;  // data after padding
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return bits < 6 && pad <= 2;  // a lone 6-bit group is a truncated one
}

}  // namespace paddock
