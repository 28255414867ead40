// server/reply_reader.h: one reader of the OpenAI replies that the other APIs' translators
// re-shape (Anthropic's Messages, OpenAI's Responses, Ollama's chat and generate).
//
// Every API's generation runs as an OpenAI completion (server/api_dialects.h); its reply is a
// whole JSON body or a stream of chunks as server-sent events. ReplyReader reads either, once:
// it splits the stream, parses each chunk and calls back, in order, what the reply says (the
// reasoning, the text, each tool call, the finish, the usage), so a translator only writes its
// own API's shape. A chunk or body that is not an OpenAI one (not JSON, no choices) is an
// error the client sees in its API's shape (OnError), never skipped; after an error nothing
// more is read. Not here: the request side, the embeddings' bodies (WholeReply).
#pragma once

#include <string>
#include <string_view>

#include "server/api_dialects.h"
#include "server/api_json.h"

namespace paddock::server {

class ReplyReader : public ReplyTranslator {
 public:
  using json = api_detail::json;
  explicit ReplyReader(bool stream) : stream_(stream) {}
  void Feed(std::string_view bytes, std::string* out) final;
  void End(std::string* out) final;

 protected:
  // What the reply says, in its order; a whole body makes the same calls, once, at its end.
  virtual void OnKeepAlive(std::string* out) {}  // an event stream's comment
  // An error reply, or a malformed chunk (type "server_error"). Nothing follows it.
  virtual void OnError(const std::string& type, const std::string& message, std::string* out) = 0;
  virtual void OnChunkBegin(std::string* out) {}  // before each chunk's parts
  virtual void OnUsage(int prompt_tokens, int completion_tokens) {}
  virtual void OnReasoning(const std::string& text, std::string* out) {}
  virtual void OnText(const std::string& text, std::string* out) {}
  // An OpenAI tool call: {"id", "type", "function": {"name", "arguments"}}.
  virtual void OnToolCall(const json& call, std::string* out) {}
  // finish_reason, and the stop string that ended it (stop_reason) or null.
  virtual void OnFinish(const std::string& reason, const json& stop, std::string* out) {}
  virtual void OnChunkEnd(std::string* out) {}
  // The reply ended without an error.
  virtual void OnEnd(std::string* out) = 0;

  bool stream() const { return stream_; }

 private:
  void Chunk(json& chunk, std::string* out);
  void Error(const std::string& type, const std::string& message, std::string* out);

  bool stream_;
  bool errored_ = false;
  std::string buf_;  // the stream's unfinished event, or the whole body
};

}  // namespace paddock::server
