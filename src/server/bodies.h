// server/bodies.h: response bodies produced after the handler returned (server/http.h's
// BodySource), pulled by the event loop when the socket can take bytes: a generation's streams
// as server-sent events or one JSON body, and a whole body set later by another thread.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "paddock/service.h"
#include "server/api.h"
#include "server/http.h"

namespace paddock::server {

// While waiting: a keep-alive probe this often (an SSE comment, or JSON-neutral whitespace).
inline constexpr double kProbeSeconds = 1.0;

// A whole body that is produced later on another thread (embeddings, rerank scores): Set once,
// then it is sent; the status waits for it (BodySource::Whole), so an engine failure is a 503
// with Retry-After (SetError), not a 200.
class DeferredBody : public BodySource {
 public:
  void Set(std::string body, int status = 0) {
    Waker wake;
    {
      std::lock_guard<std::mutex> lock(mu_);
      body_ = std::move(body);
      status_ = status;
      ready_ = true;
      wake = waker_;
    }
    if (wake) wake();
  }
  // The engine failed the work (a device lost): a 503 naming it.
  void SetError(const std::string& message) { Set(EngineErrorBody(message), 503); }
  bool Whole() const override { return true; }
  int Status() const override { return status_; }
  Pull Next(std::string* out) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (sent_) return Pull::kEnd;
    if (!ready_) return Pull::kWait;
    out->append(body_);
    sent_ = true;
    return Pull::kData;
  }
  void SetWaker(Waker waker) override {
    std::lock_guard<std::mutex> lock(mu_);
    waker_ = std::move(waker);
  }

 private:
  std::mutex mu_;
  Waker waker_;
  std::string body_;
  int status_ = 0;
  bool ready_ = false, sent_ = false;
};

// A response body read from a RequestStream: server-sent events (a chunk per piece of text,
// keep-alive comments while waiting, the finish reason, usage if asked, [DONE]) or one JSON
// body at the end (whitespace while waiting: valid before JSON).

// A completion's body: each choice's RequestStream as OpenAI chunks (streaming) or one body at
// the end; keep-alive probes while nothing is ready; Abort cancels every choice.
std::shared_ptr<BodySource> MakeStreamBody(std::vector<std::shared_ptr<RequestStream>> streams,
                                           ApiRequest ar, ResponseMeta meta, int n_prompt);

// Another API's reply (server/api_dialects.h): the OpenAI body of `inner` translated as it is
// produced.
class ReplyTranslator;
std::shared_ptr<BodySource> MakeTranslatedBody(std::shared_ptr<BodySource> inner,
                                               std::unique_ptr<ReplyTranslator> translator);

}  // namespace paddock::server
