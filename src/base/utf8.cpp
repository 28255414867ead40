#include "base/utf8.h"

namespace paddock {

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {
bool ValidSecondByte(uint8_t lead, uint8_t c);
}  // namespace

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto lead = static_cast<uint8_t>(s[i]);
    const auto n = static_cast<size_t>(Utf8SequenceLength(lead));
    if (n == 0 || i + n > s.size()) return false;
    if (n > 1 && !ValidSecondByte(lead, static_cast<uint8_t>(s[i + 1]))) return false;
    for (size_t k = 2; k < n; ++k)
      if ((static_cast<uint8_t>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

std::string ClipUtf8(std::string_view s, size_t n) {
  if (s.size() <= n) return std::string(s);
  size_t cut = n;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return std::string(s.substr(0, cut)) + "...";
}

namespace {
constexpr char kReplacement[] = "\xEF\xBF\xBD";

bool ValidSecondByte(uint8_t lead, uint8_t c) {
  if ((c & 0xc0) != 0x80) return false;
  if (lead == 0xe0) return c >= 0xa0;
  if (lead == 0xed) return c <= 0x9f;
  if (lead == 0xf0) return c >= 0x90;
  if (lead == 0xf4) return c <= 0x8f;
  return true;
}
}  // namespace

void Utf8Stream::Push(uint8_t c, std::string* out) {
  if (n_pending_ == 0) {
    const int len = Utf8SequenceLength(c);
    if (len == 1) {
      out->push_back(static_cast<char>(c));
    } else if (len == 0) {
      out->append(kReplacement);
    } else {
      pending_[0] = c;
      n_pending_ = 1;
      need_ = len;
    }
    return;
  }
  const bool ok = n_pending_ == 1 ? ValidSecondByte(pending_[0], c) : (c & 0xc0) == 0x80;
  if (!ok) {
    out->append(kReplacement);
    n_pending_ = 0;
    Push(c, out);  // c may start a new sequence
    return;
  }
  pending_[n_pending_++] = c;
  if (n_pending_ == need_) {
    out->append(reinterpret_cast<const char*>(pending_), static_cast<size_t>(n_pending_));
    n_pending_ = 0;
  }
}

void Utf8Stream::Feed(std::string_view bytes, std::string* out) {
  for (char ch : bytes) Push(static_cast<uint8_t>(ch), out);
}

void Utf8Stream::Flush(std::string* out) {
  if (n_pending_ > 0) out->append(kReplacement);
  n_pending_ = 0;
}

}  // namespace paddock
