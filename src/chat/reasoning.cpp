// chat/reasoning.cpp: ReasoningSplitter (paddock/chat.h), a reply's <think> section apart.
#include "base/strings.h"
#include "paddock/chat.h"

namespace paddock {

void ReasoningSplitter::Content(std::string_view s, std::string* content) {
  if (!content_started_) {  // the answer starts after the blank lines that follow </think>
    const size_t b = s.find_first_not_of(" \t\r\n");
    if (b == std::string_view::npos) return;
    s.remove_prefix(b);
    content_started_ = true;
  }
  content->append(s);
}

void ReasoningSplitter::Feed(std::string_view text, std::string* reasoning, std::string* content) {
  static constexpr std::string_view kOpen = "<think>", kClose = "</think>";
  held_.append(text);
  for (;;) {
    if (state_ == kStart) {
      const size_t b = held_.find_first_not_of(" \t\r\n");
      const std::string_view t = b == std::string::npos ? "" : std::string_view(held_).substr(b);
      if (t.substr(0, kOpen.size()) == kOpen) {
        held_.erase(0, b + kOpen.size());
        state_ = kThink;
        continue;
      }
      if (kOpen.substr(0, t.size()) == t) return;  // maybe the tag, not yet whole
      state_ = kContent;
      content_started_ = true;  // no reasoning section: the text is the answer as written
      continue;
    }
    if (state_ == kThink) {
      const size_t close = held_.find(kClose);
      if (close != std::string::npos) {
        reasoning->append(held_, 0, close);
        held_.erase(0, close + kClose.size());
        state_ = kContent;
        continue;
      }
      // Keep back the longest end that could begin the closing tag.
      const size_t keep = TagPrefixAtEnd(held_, kClose);
      reasoning->append(held_, 0, held_.size() - keep);
      held_.erase(0, held_.size() - keep);
      return;
    }
    Content(held_, content);
    held_.clear();
    return;
  }
}

void ReasoningSplitter::Finish(std::string* reasoning, std::string* content) {
  if (state_ == kThink) {
    reasoning->append(held_);
  } else {
    content->append(held_);
  }
  held_.clear();
}

}  // namespace paddock
