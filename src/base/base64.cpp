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

}  // namespace paddock
