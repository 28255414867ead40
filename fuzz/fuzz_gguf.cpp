// libFuzzer target: the GGUF parser and everything the loader derives from it (config,
// vocabulary, a Unigram vocabulary's precompiled character map) over arbitrary bytes, and the
// same bytes as text through the WordPiece and Unigram tokenizers of synthetic encoder
// vocabularies. Must never crash, hang or over-read; Error is fine.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "model/config.h"
#include "model/tokenizer.h"
#include "paddock/error.h"
#include "synth/synth.h"

namespace {

// The vocabulary of a synthetic encoder (its tensors are never read).
std::unique_ptr<paddock::Tokenizer> EncoderVocab(const char* shape) {
  static std::string bytes[2];
  static int n = 0;
  paddock::SynthSpec s = paddock::SynthPreset(shape);
  s.n_layers = 1;
  paddock::GgufWriter w;
  paddock::BuildSyntheticEncoder(s, &w);
  std::string& b = bytes[n++];
  b = w.Serialize();
  const auto g = paddock::GgufFile::Parse(reinterpret_cast<const uint8_t*>(b.data()), b.size());
  return std::make_unique<paddock::Tokenizer>(paddock::Tokenizer::FromGguf(g));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto wordpiece = EncoderVocab("tiny-bert");
  static const auto unigram = EncoderVocab("tiny-xlmr");
  // (The text's first 4 KiB: longer inputs add time, not paths.)
  const std::string_view text(reinterpret_cast<const char*>(data), size < 4096 ? size : 4096);
  wordpiece->Encode(text, true, true);
  unigram->Encode(text, true, true);
  try {
    paddock::GgufFile g = paddock::GgufFile::Parse(data, size);
    try {
      paddock::ConfigFromGguf(g).Validate();
    } catch (const paddock::Error&) {
    }
    try {
      auto t = paddock::Tokenizer::FromGguf(g);
      t.Encode("Hello world", true);
      t.Encode("\xEF\xBC\xA1 caf\xC3\xA9 \xE4\xBD\xA0", true, true);
    } catch (const paddock::Error&) {
    }
  } catch (const paddock::Error&) {
  }
  return 0;
}
