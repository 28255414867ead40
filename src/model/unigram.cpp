// model/unigram.cpp: the Unigram tokenizer (tokenizer.ggml.model "t5": XLM-RoBERTa's bge-m3,
// multilingual-e5 and bge-reranker-v2-m3, T5), as llama.cpp runs it (its UGM session), so its
// ids for the same text and vocabulary are these.
//
// Normalization: the longest prefix the vocabulary's precompiled character map (SentencePiece's
// XOR-compressed double array, tokenizer.ggml.precompiled_charsmap) holds is replaced by its
// string; spaces become U+2581, one in front of the text (add_space_prefix) or, with
// remove_extra_whitespaces, one in front of each run of non-spaces and none elsewhere. Then
// Viterbi over the vocabulary's scores (user-defined tokens score 0); a code point no token
// covers is [UNK] at the lowest normal score less 10, and runs of [UNK] become one.
#include <algorithm>
#include <cfloat>
#include <cstring>
#include <vector>

#include "base/strings.h"
#include "base/utf8.h"
#include "formats/gguf.h"
#include "model/tokenizer.h"

namespace paddock {

namespace {

// One entry of the double array: BASE in bits 10-30 (shifted by 8 when bit 9 is set), LCHECK
// in bits 0-7 (bit 31 set on value entries, so they never match a byte), LEAF in bit 8.
struct Xcda {
  const uint32_t* a = nullptr;
  size_t n = 0;
  bool Get(size_t i, uint32_t* v) const {
    if (i >= n) return false;
    std::memcpy(v, reinterpret_cast<const char*>(a) + i * 4, 4);
    return true;
  }
  static uint32_t Base(uint32_t v) { return (v >> 10) << ((v & (1u << 9)) >> 6); }
  static uint32_t Lcheck(uint32_t v) { return v & ((1u << 31) | 0xffu); }
  static bool Leaf(uint32_t v) { return ((v >> 8) & 1u) != 0; }
  static uint32_t Value(uint32_t v) { return v & ((1u << 31) - 1); }
};

}  // namespace

void Tokenizer::SetUpUnigram(const GgufFile& g) {
  const size_t n = pieces_.size();
  if (unk_ < 0 || static_cast<size_t>(unk_) >= n)
    Fail("Unigram vocabulary of %zu tokens lacks its unknown token %d", n, unk_);
  ugm_ = true;
  remove_extra_ws_ = g.GetBool("tokenizer.ggml.remove_extra_whitespaces").value_or(false);
  float lo = FLT_MAX;
  for (size_t i = 0; i < n; ++i) {
    max_piece_ = std::max(max_piece_, pieces_[i].size());
    if (attrs_[i] == TokenAttr::kNormal) lo = std::min(lo, scores_[i]);
  }
  ugm_unk_score_ = lo - 10.0f;
  if (const GgufValue* cm = g.Find("tokenizer.ggml.precompiled_charsmap")) {
    if (cm->type != GgufType::kArray ||
        (cm->elem_type != GgufType::kU8 && cm->elem_type != GgufType::kI8))
      Fail("tokenizer.ggml.precompiled_charsmap is not an array of bytes");
    SetUnigramCharsmap(std::string(reinterpret_cast<const char*>(cm->raw), cm->count));
  }
}

void Tokenizer::SetUnigramCharsmap(std::string blob) {
  charsmap_ = std::move(blob);
  if (charsmap_.empty()) return;
  uint32_t xcda_bytes = 0;
  if (charsmap_.size() < 4)
    Fail("precompiled_charsmap of %zu bytes is truncated", charsmap_.size());
  std::memcpy(&xcda_bytes, charsmap_.data(), 4);
  if (static_cast<uint64_t>(xcda_bytes) + 4 >= charsmap_.size())
    Fail("precompiled_charsmap: its array of %u bytes runs past the blob of %zu", xcda_bytes,
         charsmap_.size());
  xcda_bytes_ = xcda_bytes;
}

// The replacement of the longest mapped prefix of text[i..] (*used bytes of input), else the
// code point at i unchanged (an invalid byte: U+FFFD, one byte used).
std::string_view Tokenizer::NormalizePrefix(std::string_view text, size_t i, size_t* used) const {
  if (xcda_bytes_ > 0) {
    Xcda x{reinterpret_cast<const uint32_t*>(charsmap_.data() + 4), xcda_bytes_ / 4};
    const std::string_view repl(charsmap_.data() + 4 + xcda_bytes_,
                                charsmap_.size() - 4 - xcda_bytes_);
    size_t best_len = 0, best_off = 0;
    uint32_t v = 0;
    if (x.Get(0, &v)) {
      size_t node = Xcda::Base(v);
      for (size_t p = i; p < text.size(); ++p) {
        const auto c = static_cast<unsigned char>(text[p]);
        if (c == 0) break;
        node ^= c;
        if (!x.Get(node, &v) || Xcda::Lcheck(v) != c) break;
        const bool leaf = Xcda::Leaf(v);
        node ^= Xcda::Base(v);
        if (leaf) {
          if (!x.Get(node, &v)) break;
          best_len = p - i + 1;
          best_off = Xcda::Value(v);
        }
      }
    }
    if (best_len > 0 && best_off < repl.size()) {
      *used = best_len;
      const std::string_view r = repl.substr(best_off);
      return r.substr(0, std::min(r.size(), std::strlen(r.data())));
    }
  }
  const int len = Utf8SequenceLength(static_cast<uint8_t>(text[i]));
  if (len == 0 || i + static_cast<size_t>(len) > text.size() ||
      !IsValidUtf8(text.substr(i, static_cast<size_t>(len)))) {
    *used = 1;
    return "\xEF\xBF\xBD";
  }
  *used = static_cast<size_t>(len);
  return text.substr(i, static_cast<size_t>(len));
}

// The text as the vocabulary's tokens spell it: mapped, spaces as U+2581 (module comment).
std::string Tokenizer::NormalizeUgm(std::string_view text) const {
  static constexpr std::string_view kSpace = "\xE2\x96\x81";
  std::string norm;
  norm.reserve(text.size() * 3);
  bool prepended = false, in_word = false;
  for (size_t i = 0; i < text.size();) {
    size_t used = 0;
    const std::string_view piece = NormalizePrefix(text, i, &used);
    for (char c : piece) {
      if (c != ' ') {
        if (!in_word) {
          in_word = true;
          if ((add_space_prefix_ && !prepended) || remove_extra_ws_) {
            norm.append(kSpace);
            prepended = true;
          }
        }
        norm.push_back(c);
      } else {
        in_word = false;
        if (!remove_extra_ws_) norm.append(kSpace);
      }
    }
    i += used;
  }
  return norm;
}

void Tokenizer::EncodeUgm(std::string_view text, std::vector<int32_t>* out) const {
  const std::string norm = NormalizeUgm(text);
  const size_t n = norm.size();
  if (n == 0) return;
  struct Best {
    int32_t id;
    size_t from;
    float score;
  };
  std::vector<Best> best(n + 1, Best{unk_, 0, -FLT_MAX});
  best[0] = {unk_, 0, 0};
  for (size_t i = 0; i < n;) {
    const size_t cp =
        std::min<size_t>(std::max(1, Utf8SequenceLength(static_cast<uint8_t>(norm[i]))), n - i);
    bool whole_cp = false;
    const double base = best[i].score;
    for (size_t len = 1; len <= max_piece_ && i + len <= n; ++len) {
      auto it = lookup_.find(std::string_view(norm).substr(i, len));
      if (it == lookup_.end()) continue;
      const TokenAttr a = attrs_[static_cast<size_t>(it->second)];
      if (a != TokenAttr::kNormal && a != TokenAttr::kUserDefined && a != TokenAttr::kUnused)
        continue;
      whole_cp = whole_cp || len == cp;
      const double s =
          base + (a == TokenAttr::kUserDefined ? 0.0 : scores_[static_cast<size_t>(it->second)]);
      if (s > best[i + len].score) best[i + len] = {it->second, i, static_cast<float>(s)};
    }
    if (!whole_cp) {
      const double s = base + ugm_unk_score_;
      if (s > best[i + cp].score) best[i + cp] = {unk_, i, static_cast<float>(s)};
    }
    i += cp;
  }
  const size_t start = out->size();
  bool prev_unk = false;
  for (size_t at = n;;) {
    const Best& b = best[at];
    const bool unk = b.id == unk_;
    if (!(prev_unk && unk)) out->push_back(b.id);
    if (b.from == 0) break;
    prev_unk = unk;
    at = b.from;
  }
  std::reverse(out->begin() + static_cast<std::ptrdiff_t>(start), out->end());
}

}  // namespace paddock
