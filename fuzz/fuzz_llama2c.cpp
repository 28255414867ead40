// libFuzzer target: llama2.c checkpoint and tokenizer.bin parsers over arbitrary bytes.
#include <cstddef>
#include <cstdint>

#include "formats/llama2c.h"
#include "model/tokenizer.h"
#include "paddock/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    paddock::ParseLlama2c(data, size);
  } catch (const paddock::Error&) {
  }
  try {
    auto v = paddock::ParseLlama2cTokenizer(data, size);
    auto t = paddock::Tokenizer::FromLlama2c(v);
    t.Encode("Hello world", true);
  } catch (const paddock::Error&) {
  }
  return 0;
}
