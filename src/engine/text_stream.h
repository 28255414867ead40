// engine/text_stream.h: generated tokens -> final text, one request at a time.
//
// Decodes each token's bytes, assembles whole UTF-8 characters, and watches for stop strings:
// text that could still be the start of a stop string is held back until ruled out, and a
// matched stop string (with everything after it) is cut off. Used by the single-sequence
// generation loop and by the batching service, so both stream exactly the same text.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/utf8.h"

namespace paddock {

class Tokenizer;

class TextAssembler {
 public:
  // Starts a new output; `prev_token` is the last prompt token (decoders drop a leading space
  // after BOS). `stops` must outlive the assembler's use.
  void Reset(const std::vector<std::string>* stops, int prev_token, size_t reserve = 0);
  // Appends the token's text. Returns true when a stop string appeared: the text is cut
  // before it and everything before it is final.
  bool Push(const Tokenizer& tok, int token);
  // Generation ended without a stop string: whatever is held back becomes final.
  void Finish();
  // Text that became final since the last call (empty if none).
  std::string_view TakeReady();
  const std::string& text() const { return text_; }
  // The stop string Push found (the earliest in the text), or null.
  const std::string* matched_stop() const { return matched_; }

 private:
  std::string text_;
  size_t final_ = 0;  // text_[0, final_) is final
  size_t taken_ = 0;  // text_[0, taken_) was handed out
  Utf8Stream utf8_;
  const std::vector<std::string>* stops_ = nullptr;
  size_t longest_stop_ = 0;
  const std::string* matched_ = nullptr;
  int prev_ = -1;
};

}  // namespace paddock
