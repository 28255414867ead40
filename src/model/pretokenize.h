// model/pretokenize.h: the pre-tokenization split of byte-level BPE vocabularies.
//
// Before merges, text is cut into pieces by the regular expressions that the GGUF key
// `tokenizer.ggml.pre` names (GPT-2, Llama 3, Qwen2, DeepSeek, StarCoder, Falcon, ...). They
// use Unicode classes (\p{L}, \p{N}, \p{P}) and look-ahead, so they run on PCRE2 (Debian's
// libpcre2-dev) in UTF + UCP mode with its JIT. Several expressions apply in sequence, as in
// llama.cpp: each splits the pieces of the previous one, keeping both matches and the text
// between them. Bytes that are not valid UTF-8 become one-byte pieces of their own.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace paddock {

class PreTokenizer {
 public:
  // Throws Error for a pre-tokenizer name it does not know (the message lists the known ones).
  explicit PreTokenizer(const std::string& name);
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  // Appends the pieces of `text` (views into it) to *out. Thread-safe.
  void Split(std::string_view text, std::vector<std::string_view>* out) const;
  const std::string& name() const { return name_; }

  static const std::vector<std::string>& KnownNames();

 private:
  struct Regex;
  std::string name_;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace paddock
