// libFuzzer target: chat templates (Jinja subset) from model files, parsed and rendered over
// arbitrary bytes: errors are fine, crashes, hangs and runaway memory are not.
#include <cstddef>
#include <cstdint>
#include <string>

#include "chat/jinja.h"
#include "paddock/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string src(reinterpret_cast<const char*>(data), size);
  try {
    paddock::JinjaTemplate t(src);
    t.RenderChat({{"system", "s"}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}}, true,
                 "<s>", "</s>");
  } catch (const paddock::Error&) {
  }
  return 0;
}
