// server/reply_reader.cpp: the OpenAI reply read once, stream or whole (reply_reader.h).
#include "server/reply_reader.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "base/json_linear.h"
#include "base/strings.h"

namespace paddock::server {

std::string NewId(const char* prefix) {
  uint8_t bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {  // (the kernel's generator; blocks only before it is seeded)
    const ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (errno != EINTR) {
      Fail("no random bytes for an id (getrandom: %s)", std::strerror(errno));
    }
  }
  static const char kHex[] = "0123456789abcdef";
  std::string id = prefix;
  for (uint8_t b : bytes) {
    id += kHex[b >> 4];
    id += kHex[b & 15];
  }
  return id;
}

void ReplyReader::Feed(std::string_view bytes, std::string* out) {
  if (errored_) return;
  if (!stream_) {
    for (char c : bytes) {  // whitespace probes before the body pass through (valid JSON)
      if (buf_.empty() && (c == ' ' || c == '\n'))
        out->push_back(c);
      else
        buf_.push_back(c);
    }
    return;
  }
  buf_.append(bytes);
  size_t at;
  while (!errored_ && (at = buf_.find("\n\n")) != std::string::npos) {
    const std::string ev = buf_.substr(0, at);
    buf_.erase(0, at + 2);
    if (ev.rfind(":", 0) == 0) {
      OnKeepAlive(out);
      continue;
    }
    if (ev.rfind("data: ", 0) != 0) {
      Error("server_error", "malformed reply chunk: not a server-sent data event", out);
      return;
    }
    const std::string_view data = std::string_view(ev).substr(6);
    if (data == "[DONE]") continue;
    json chunk = JsonOrDiscarded<json>(data);
    if (chunk.is_discarded()) {
      Error("server_error", "malformed reply chunk: not JSON", out);
      return;
    }
    Chunk(chunk, out);
  }
}

void ReplyReader::End(std::string* out) {
  if (!stream_ && !errored_) {
    json body = JsonOrDiscarded<json>(buf_);
    if (body.is_discarded()) {
      Error("server_error", "malformed reply: not JSON", out);
    } else {
      Chunk(body, out);
    }
  }
  if (!errored_) OnEnd(out);
}

void ReplyReader::Error(const std::string& type, const std::string& message, std::string* out) {
  errored_ = true;
  OnError(type, message, out);
}

// One chunk (a whole body: the one chunk): an error object, or choices and usage.
void ReplyReader::Chunk(json& c, std::string* out) {
  try {
    if (!c.is_object()) return Error("server_error", "malformed reply chunk: not an object", out);
    if (c.contains("error")) {
      const json& e = c["error"];
      return Error(e.is_object() ? e.value("type", "server_error") : "server_error",
                   e.is_object() ? e.value("message", "") : e.dump(), out);
    }
    const bool has_choices = c.contains("choices") && c["choices"].is_array();
    if (!has_choices && !(c.contains("usage") && c["usage"].is_object()))
      return Error("server_error", "malformed reply chunk: no choices", out);
    OnChunkBegin(out);
    if (c.contains("usage") && c["usage"].is_object())
      OnUsage(c["usage"].value("prompt_tokens", 0), c["usage"].value("completion_tokens", 0));
    if (has_choices && !c["choices"].empty()) {
      json& ch = c["choices"][0];
      // A stream's delta, a whole chat body's message; a completion's text.
      json& m = ch.contains("delta") ? ch["delta"] : ch.contains("message") ? ch["message"] : ch;
      if (m.contains("reasoning_content") && m["reasoning_content"].is_string())
        OnReasoning(m["reasoning_content"].get<std::string>(), out);
      for (const char* k : {"content", "text"}) {
        if (m.contains(k) && m[k].is_string() && !m[k].get<std::string>().empty())
          OnText(m[k].get<std::string>(), out);
      }
      if (m.contains("tool_calls") && m["tool_calls"].is_array())
        for (const json& tc : m["tool_calls"]) OnToolCall(tc, out);
      if (ch.contains("finish_reason") && ch["finish_reason"].is_string()) {
        const json stop = ch.contains("stop_reason") ? ch["stop_reason"] : json();
        OnFinish(ch["finish_reason"].get<std::string>(), stop.is_string() ? stop : json(), out);
      }
    }
    OnChunkEnd(out);
  } catch (const json::exception& e) {
    Error("server_error", std::string("malformed reply chunk: ") + e.what(), out);
  }
}

}  // namespace paddock::server
