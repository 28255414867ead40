// libFuzzer target: request bodies for /v1/completions, /v1/chat/completions, /tokenize and
// /detokenize through the API parser (server/api.h), and for Anthropic's /v1/messages and
// Ollama's /api/* through their translation (server/api_dialects.h), whose reply translators
// also take the input as an OpenAI reply: every input is refused with an ApiError or parsed; a
// crash, an escaping exception or runaway memory is not fine.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/api.h"
#include "server/api_dialects.h"

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
  using paddock::server::Dialect;
  for (Dialect d : {Dialect::kAnthropic, Dialect::kOllamaChat, Dialect::kOllamaGenerate,
                    Dialect::kOllamaEmbed}) {
    try {
      const paddock::server::Translated t = paddock::server::ToOpenAiRequest(d, body);
      (void)paddock::server::ParseRequest(t.body, t.chat, ctx);
    } catch (const paddock::server::ApiError& e) {
      (void)paddock::server::DialectErrorBody(d, e.status, paddock::server::ErrorBody(e));
    }
    for (bool stream : {false, true}) {
      std::string out;
      auto tr = paddock::server::MakeReplyTranslator(d, stream, "m", 3);
      tr->Feed(body, &out);
      tr->End(&out);
    }
  }
  return 0;
}
