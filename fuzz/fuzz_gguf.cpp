// libFuzzer target: the GGUF parser and everything the loader derives from it (config,
// vocabulary) over arbitrary bytes. Must never crash, hang or over-read; Error is fine.
#include <cstddef>
#include <cstdint>

#include "formats/gguf.h"
#include "model/config.h"
#include "model/tokenizer.h"
#include "paddock/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    paddock::GgufFile g = paddock::GgufFile::Parse(data, size);
    try {
      paddock::ConfigFromGguf(g).Validate();
    } catch (const paddock::Error&) {
    }
    try {
      auto t = paddock::Tokenizer::FromGguf(g);
      t.Encode("Hello world", true);
    } catch (const paddock::Error&) {
    }
  } catch (const paddock::Error&) {
  }
  return 0;
}
