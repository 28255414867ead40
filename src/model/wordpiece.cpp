// model/wordpiece.cpp: BERT's WordPiece tokenizer, as llama.cpp runs it (its WPM session), so
// its test vectors and its embeddings of the same text apply.
//
// Words: each code point is mapped to the first code point of its canonical decomposition
// (NFD's first: accents dropped), lower-cased; whitespace ends a word; control characters,
// U+0000 and U+FFFD vanish; punctuation, ASCII symbols and CJK ideographs are words of their
// own. Each word, spelled with a leading U+2581, is covered left to right by the longest
// vocabulary entries; a word with a part no entry covers becomes [UNK] whole. Unicode
// properties come from utf8proc (Debian's libutf8proc-dev; docs/dependencies.md says why).
#include <utf8proc.h>

#include <algorithm>
#include <string>
#include <vector>

#include "base/strings.h"
#include "base/utf8.h"
#include "model/tokenizer.h"

namespace paddock {

namespace {

bool IsWhitespace(uint32_t c) {  // Unicode White_Space, as llama.cpp lists it
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

bool IsCjk(uint32_t c) {  // BERT's "Chinese character" blocks (as the reference writes them)
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// The first code point of c's canonical decomposition (c itself when it has none).
uint32_t NfdFirst(uint32_t c) {
  if (c < 0xC0) return c;
  utf8proc_int32_t buf[8];
  utf8proc_int32_t last = 0;
  const utf8proc_ssize_t n =
      utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), buf, 8, UTF8PROC_DECOMPOSE, &last);
  return n >= 1 ? static_cast<uint32_t>(buf[0]) : c;
}

enum class CharKind { kText, kSpace, kDrop, kAlone };

CharKind KindOf(uint32_t c) {
  if (IsWhitespace(c)) return CharKind::kSpace;
  if (c == 0 || c == 0xFFFD) return CharKind::kDrop;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CS:
      return CharKind::kDrop;
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      return CharKind::kAlone;
    case UTF8PROC_CATEGORY_SM:
    case UTF8PROC_CATEGORY_SC:
    case UTF8PROC_CATEGORY_SK:
    case UTF8PROC_CATEGORY_SO:
      return c < 0x7F ? CharKind::kAlone : CharKind::kText;
    default:
      return IsCjk(c) ? CharKind::kAlone : CharKind::kText;
  }
}

// Decodes one code point at s[*i] (advancing *i); an invalid byte is U+FFFD.
uint32_t NextCodePoint(std::string_view s, size_t* i) {
  const auto b0 = static_cast<uint8_t>(s[*i]);
  const int len = Utf8SequenceLength(b0);
  if (len == 0 || *i + static_cast<size_t>(len) > s.size() ||
      !IsValidUtf8(s.substr(*i, static_cast<size_t>(len)))) {
    ++*i;
    return 0xFFFD;
  }
  uint32_t c = len == 1 ? b0 : (b0 & (0x7Fu >> len));
  for (int k = 1; k < len; ++k) c = (c << 6) | (static_cast<uint8_t>(s[*i + k]) & 0x3Fu);
  *i += static_cast<size_t>(len);
  return c;
}

// BERT's words of `text`, each already spelled with its leading U+2581.
void SplitWords(std::string_view text, std::vector<std::string>* words) {
  static constexpr std::string_view kMarker = "\xE2\x96\x81";
  std::string cur;
  auto finish = [&] {
    if (!cur.empty()) words->push_back(std::string(kMarker) + cur);
    cur.clear();
  };
  for (size_t i = 0; i < text.size();) {
    const uint32_t c = NfdFirst(NextCodePoint(text, &i));
    const CharKind kind = KindOf(c);
    if (kind == CharKind::kSpace) {
      finish();
      continue;
    }
    if (kind == CharKind::kDrop) continue;
    const auto lower = static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
    if (kind == CharKind::kAlone) {
      finish();
      AppendUtf8(lower, &cur);
      finish();
    } else {
      AppendUtf8(lower, &cur);
    }
  }
  finish();
}

}  // namespace

void Tokenizer::SetUpWordPiece() {
  const int n = vocab_size();
  if (bos_ < 0 || bos_ >= n || unk_ < 0 || unk_ >= n || sep_ >= n)
    Fail("WordPiece vocabulary of %d tokens lacks [CLS] %d, [SEP] %d or [UNK] %d", n, bos_, sep_,
         unk_);
  wpm_ = true;
  for (const auto& p : pieces_) max_piece_ = std::max(max_piece_, p.size());
}

void Tokenizer::EncodeWpm(std::string_view text, std::vector<int32_t>* out) const {
  thread_local std::vector<std::string> words;
  words.clear();
  SplitWords(text, &words);
  for (const std::string& w : words) {
    const size_t start = out->size(), n = w.size();
    for (size_t i = 0; i < n;) {
      size_t j = std::min(n, i + max_piece_);
      for (; j > i; --j) {
        auto it = lookup_.find(std::string_view(w).substr(i, j - i));
        if (it != lookup_.end()) {
          out->push_back(it->second);
          break;
        }
      }
      if (j == i) {  // a part no entry covers: the whole word is unknown
        out->resize(start);
        break;
      }
      i = j;
    }
    if (out->size() == start) out->push_back(unk_);
  }
}

}  // namespace paddock
