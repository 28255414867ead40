// libFuzzer target: chat templates (Jinja subset) from model files, parsed and rendered over
// arbitrary bytes, and the same bytes parsed as a harmony reply: errors are fine, crashes, hangs
// and runaway memory are not.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

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
  // The same bytes as a harmony reply (gpt-oss's channels), whole and in pieces of 7: the parser
  // must take any model output.
  for (size_t piece : {src.size() + 1, size_t{7}}) {
    paddock::HarmonyParser p(size % 2 == 0);
    std::string reasoning, content;
    for (size_t at = 0; at < src.size(); at += piece)
      p.Feed(std::string_view(src).substr(at, piece), &reasoning, &content);
    p.Finish(&reasoning, &content);
  }
  return 0;
}
