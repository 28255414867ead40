// engine/text_stream.cpp
#include "engine/text_stream.h"

#include <algorithm>

#include "model/tokenizer.h"

namespace paddock {
namespace {

// Longest suffix of `text` that is a proper prefix of some stop string.
size_t StopHoldback(std::string_view text, const std::vector<std::string>& stops) {
  size_t best = 0;
  for (const auto& s : stops) {
    const size_t max = std::min(text.size(), s.size() - 1);
    for (size_t k = max; k > best; --k) {
      if (text.substr(text.size() - k) == std::string_view(s).substr(0, k)) {
        best = k;
        break;
      }
    }
  }
  return best;
}

}  // namespace

void TextAssembler::Reset(const std::vector<std::string>* stops, int prev_token, size_t reserve) {
  text_.clear();
  if (reserve > text_.capacity()) text_.reserve(reserve);
  final_ = taken_ = 0;
  utf8_.Reset();
  stops_ = stops != nullptr && !stops->empty() ? stops : nullptr;
  longest_stop_ = 0;
  matched_ = nullptr;
  if (stops_ != nullptr) {
    for (const auto& s : *stops_) longest_stop_ = std::max(longest_stop_, s.size());
  }
  prev_ = prev_token;
}

bool TextAssembler::Push(const Tokenizer& tok, int token) {
  const size_t before = text_.size();
  utf8_.Feed(tok.Decode(prev_, token), &text_);
  prev_ = token;
  if (stops_ == nullptr) {
    final_ = text_.size();
    return false;
  }
  // A stop string can only end inside the new bytes; it may start up to longest-1 before.
  const size_t from = std::max(final_, before >= longest_stop_ ? before - longest_stop_ + 1 : 0);
  size_t hit = std::string::npos;
  for (const auto& st : *stops_) {
    const size_t at = text_.find(st, from);
    if (at < hit) {
      hit = at;
      matched_ = &st;
    }
  }
  if (hit != std::string::npos) {
    text_.resize(hit);
    final_ = hit;
    return true;
  }
  final_ = std::max(final_, text_.size() - StopHoldback(text_, *stops_));
  return false;
}

void TextAssembler::Finish() {
  utf8_.Flush(&text_);
  final_ = text_.size();
}

std::string_view TextAssembler::TakeReady() {
  if (final_ <= taken_) return {};
  std::string_view r = std::string_view(text_).substr(taken_, final_ - taken_);
  taken_ = final_;
  return r;
}

}  // namespace paddock
