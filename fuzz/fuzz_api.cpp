// libFuzzer target: request bodies for /v1/completions, /v1/chat/completions, /tokenize and
// /detokenize through the API parser (server/api.h): every input is refused with an ApiError
// or parsed; a crash, an escaping exception or runaway memory is not fine.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  paddock::server::ApiContext ctx;
  ctx.model_name = "m";
  ctx.context = 64;
  for (bool chat : {false, true}) {
    try {
      paddock::server::ApiRequest r = paddock::server::ParseRequest(body, chat, ctx);
      (void)r;
    } catch (const paddock::server::ApiError& e) {
      (void)paddock::server::ErrorBody(e);
    }
  }
  try {
    (void)paddock::server::ParseTokenize(body);
  } catch (const paddock::server::ApiError&) {
  }
  try {
    (void)paddock::server::ParseDetokenize(body, 512);
  } catch (const paddock::server::ApiError&) {
  }
  return 0;
}
