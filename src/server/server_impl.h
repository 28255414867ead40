// server/server_impl.h: the server's state and handlers (internal to server/): the endpoints
// over the HTTP layer are split between server.cpp (lifecycle, routing, keys, CORS, the OpenAI
// completions) and server_endpoints.cpp (embeddings, tokenize, models, the other APIs'
// front-ends).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "base/strings.h"
#include "paddock/chat.h"
#include "paddock/service.h"
#include "server/api.h"
#include "server/api_dialects.h"
#include "server/background.h"
#include "server/http.h"
#include "server/metrics.h"
#include "server/response_store.h"
#include "server/server.h"

namespace paddock::server::server_detail {

inline int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline std::string NewId(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  return StrFormat("%s%016llx%04llx", prefix,
                   static_cast<unsigned long long>(salt ^ static_cast<uint64_t>(UnixNow())),
                   static_cast<unsigned long long>(counter.fetch_add(1) & 0xffff));
}

class Server {
 public:
  explicit Server(const ServerOptions& o) : opt_(o) {}

  int Run();

 private:
  // Every request: a POST with a large body is answered later from background_ (its parse
  // and grammar compile are the costly part), others at once by Respond.
  void Handle(const HttpRequest& req, HttpResponse* res);
  void Respond(const HttpRequest& req, HttpResponse* res);
  void Counted(const HttpRequest& req, HttpResponse* res);
  void Route(const HttpRequest& req, HttpResponse* res);
  // Anthropic's /v1/messages and Ollama's /api/* (server/api_dialects.h).
  void Dialects(const HttpRequest& req, HttpResponse* res);
  void DialectCompletion(const HttpRequest& req, HttpResponse* res, Dialect d);
  void StoredResponse(const HttpRequest& req, HttpResponse* res);
  // serve --lora NAME=FILE[:SCALE]: loaded with the model; POST /v1/load_lora_adapter and
  // /v1/unload_lora_adapter at run time (with --lora-updates).
  void LoadLoras();
  void LoraUpdate(const HttpRequest& req, HttpResponse* res);
  ModelFacts Facts() const;
  void Model(const std::string& raw_id, HttpResponse* res);
  // Runs fn; an ApiError or Error it throws becomes the answer (400 unless the ApiError says
  // otherwise). True when fn returned.
  template <class F>
  bool Answering(HttpResponse* res, F&& fn) {
    try {
      fn();
      return true;
    } catch (const ApiError& e) {
      SendError(res, e);
    } catch (const Error& ex) {
      ApiError e;
      e.message = ex.what();
      SendError(res, e);
    }
    return false;
  }
  void SendError(HttpResponse* res, const ApiError& e) {
    res->status = e.status;
    res->body = ErrorBody(e);
    res->content_type = "application/json";
  }
  // Whether the request may pass the key check (401 sent otherwise).
  bool Authorized(const HttpRequest& req, HttpResponse* res);
  // CORS: the allow-origin headers when the request's Origin is allowed; true if it is.
  bool Cors(const HttpRequest& req, HttpResponse* res) const;
  // POST /v1/completions and /v1/chat/completions: the named steps below.
  void Completion(const HttpRequest& req, HttpResponse* res, bool chat);
  bool SubmitMorePrompts(const ApiRequest& ar, std::vector<std::shared_ptr<RequestStream>>* streams,
                         HttpResponse* res);
  bool Ready(HttpResponse* res);
  std::vector<int32_t> Prompt(ApiRequest& ar, bool chat) const;  // throws ApiError / Error
  std::vector<std::shared_ptr<RequestStream>> Submit(const std::vector<int32_t>& prompt,
                                                     const ApiRequest& ar, HttpResponse* res);
  void Models(HttpResponse* res);
  void Health(HttpResponse* res);
  void Metrics(HttpResponse* res);
  void Tokenize(const HttpRequest& req, HttpResponse* res);
  void Detokenize(const HttpRequest& req, HttpResponse* res);
  void Embeddings(const HttpRequest& req, HttpResponse* res);
  void LoadModel();
  void AgentLoop(int fd);
  void RequestStop() {
    {
      std::lock_guard<std::mutex> lock(stop_mu_);
      stop_requested_ = true;
    }
    stop_cv_.notify_all();
  }

  ServerOptions opt_;
  std::unique_ptr<HttpServer> http_server_;
  Background background_{64, 10};                    // large bodies: 64 may wait, at nice +10
  ResponseStore responses_{1000, size_t{64} << 20};  // the Responses API's, by id
  LoraRegistry loras_;                               // adapters served as model ids
  enum class State { kLoading, kReady, kDraining, kFailed, kStopping };
  std::atomic<State> state_{State::kLoading};
  std::unique_ptr<Service> service_;
  ApiContext ctx_;
  std::unique_ptr<ChatFormatter> chat_;
  bool reasoning_ = false;  // split chat replies' <think> sections (--reasoning-format)
  bool harmony_ = false;    // parse chat replies' harmony channels (gpt-oss; not with none)
  int64_t created_ = UnixNow();
  std::mutex http_mu_;
  HttpCounters http_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_requested_ = false;
  std::atomic<bool> agent_stop_{false};
};

}  // namespace paddock::server::server_detail
