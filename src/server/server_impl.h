// server/server_impl.h: the server's state and handlers (internal to server/): the endpoints
// over the HTTP layer are split between routes.cpp (the one route table), server.cpp
// (lifecycle, keys, CORS, prompts and submission) and server_endpoints.cpp (the handlers: the
// one completion path of every API, embeddings, tokenize, models, Ollama's listings).
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
#include "base/timer.h"
#include "paddock/chat.h"
#include "paddock/service.h"
#include "server/api.h"
#include "server/api_dialects.h"
#include "server/background.h"
#include "server/http.h"
#include "server/metrics.h"
#include "server/model_host.h"
#include "server/response_store.h"
#include "server/server.h"

namespace paddock::server::server_detail {

// A preflight's Access-Control-Request-Headers as the answer's Allow-Headers (access.cpp).
std::string PreflightHeaders(std::string_view asked);

inline int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A response body that holds its model while it is sent (no eviction mid-answer); the model
// counts as used until the body ends.
class LeasedBody : public BodySource {
 public:
  LeasedBody(std::shared_ptr<BodySource> inner, ModelLease m)
      : inner_(std::move(inner)), m_(std::move(m)) {}
  ~LeasedBody() override { m_->last_used = NowSeconds(); }
  Pull Next(std::string* out) override { return inner_->Next(out); }
  void Abort() override { inner_->Abort(); }
  void SetWaker(Waker w) override { inner_->SetWaker(std::move(w)); }
  bool Whole() const override { return inner_->Whole(); }
  int Status() const override { return inner_->Status(); }

 private:
  std::shared_ptr<BodySource> inner_;
  ModelLease m_;
};

class Server;

// One row of the route table (routes.cpp): a path (exact, or ending in "/{id}"), a method, the
// API whose shape its errors take, and its handler.
struct RouteEntry {
  enum Flags : unsigned {
    kComputes = 1,    // runs the model: refused while a pipeline stage is lost
    kBackground = 2,  // answered from the background pool whatever its size (reads a file)
    kChat = 4,        // a generation's chat form (messages; else a prompt)
  };
  const char* path;
  const char* method;
  Dialect api;
  unsigned flags;
  void (Server::*fn)(const HttpRequest& req, HttpResponse* res, const RouteEntry& route);
};

class Server {
 public:
  explicit Server(const ServerOptions& o) : opt_(o) {}
  void OpenResponses();

  int Run();

 private:
  using LoadedFn = std::function<void(const HttpRequest&, HttpResponse*, LoadedModel&)>;

  // Every request: a POST with a large body is answered later from background_ (its parse
  // and grammar compile are the costly part), others at once by Respond.
  void Handle(const HttpRequest& req, HttpResponse* res);
  void Respond(const HttpRequest& req, HttpResponse* res);
  // The headers every answer gets (replica name, CORS); true if CORS allowed the origin.
  bool Decorate(const HttpRequest& req, HttpResponse* res) const;
  void Counted(const HttpRequest& req, HttpResponse* res);
  // Routing (routes.cpp): the table, a request's row (null: none; *allow: the methods its
  // path takes), the API it speaks (its row's, or by its path for an unknown one).
  void Route(const HttpRequest& req, HttpResponse* res);
  static const std::vector<RouteEntry>& Routes();
  static const RouteEntry* FindRoute(const HttpRequest& req, std::string* allow);
  static Dialect ApiOf(const HttpRequest& req);
  static bool InBackground(const HttpRequest& req);
  // The table's handlers that pick the model (WithModel) and run the named steps below.
  // Each takes the request, the answer and its row (the API, the flags).
  using Q = const HttpRequest&;
  using R = HttpResponse*;
  using E = const RouteEntry&;
  void OnGenerate(Q req, R res, E route);
  void OnEmbeddings(Q req, R res, E route);
  void OnRerank(Q req, R res, E route);
  void OnTokenize(Q req, R res, E route);
  void OnLora(Q req, R res, E route);
  void OnModels(Q, R res, E) { Models(res); }
  void OnModel(Q req, R res, E) {
    Model(req.path.substr(std::string_view("/v1/models/").size()), res);
  }
  void OnHealth(Q, R res, E) { Health(res); }
  void OnMetrics(Q, R res, E) { Metrics(res); }
  void OllamaTags(Q req, R res, E route);
  void OllamaShow(Q req, R res, E route);
  void OllamaVersion(Q req, R res, E route);
  void OllamaUnavailable(Q req, R res, E route);
  void StoredResponse(Q req, R res, E route);
  // The model a request names (its "model", or `name`): fn runs with it now if it is loaded,
  // else later (res->later) once the host has loaded it; its body holds the model.
  void WithModel(const HttpRequest& req, HttpResponse* res, const std::string& name, LoadedFn fn);
  // The spec a model name selects (an id, alias or adapter name; "" the only model). Throws
  // ApiError: 400 without a name among several models, 404 for an unknown one.
  const ModelSpec& Resolve(const std::string& name) const;
  std::vector<ServedModel> Served() const;
  std::unique_ptr<LoadedModel> MakeLoaded(const ModelSpec& spec, uint64_t kv_bytes);
  std::vector<ModelSpec> Specs();
  // serve --lora NAME=FILE[:SCALE]: loaded with the model; POST /v1/load_lora_adapter and
  // /v1/unload_lora_adapter at run time (with --lora-updates).
  void LoadLoras(const ModelSpec& spec, LoadedModel* m);
  void LoraUpdate(const HttpRequest& req, HttpResponse* res, LoadedModel& m);
  ModelFacts Facts(const ModelSpec& spec) const;
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
  // Where a request's stored response `id` lives: with API keys, under a tag of the key the
  // request came in with (another key's request finds nothing: 404), else the id itself.
  std::string StoreKey(const HttpRequest& req, const std::string& id) const;
  // CORS: the allow-origin headers when the request's Origin is allowed; true if it is.
  bool Cors(const HttpRequest& req, HttpResponse* res) const;
  // The one completion path of every API (OpenAI's completions and chat, Anthropic's messages,
  // the Responses API, Ollama's chat and generate): translate, parse, prompt, submit, reply.
  void Generate(const HttpRequest& req, HttpResponse* res, Dialect d, bool chat, LoadedModel& m);
  Translated Translate(const HttpRequest& req, Dialect d, const std::string& body, bool chat,
                       LoadedModel& m);
  bool SubmitMorePrompts(LoadedModel& m, const ApiRequest& ar,
                         std::vector<std::shared_ptr<RequestStream>>* streams, HttpResponse* res);
  bool Ready(HttpResponse* res);
  // A model whose backend can no longer step (its device lost): a 503 naming why, with
  // Retry-After (a restart, or another replica behind the balancer, can serve); true if so.
  bool Faulted(LoadedModel& m, HttpResponse* res);
  // throws ApiError / Error
  std::vector<int32_t> Prompt(const LoadedModel& m, ApiRequest& ar, bool chat) const;
  std::vector<std::shared_ptr<RequestStream>> Submit(LoadedModel& m,
                                                     const std::vector<int32_t>& prompt,
                                                     const ApiRequest& ar, HttpResponse* res);
  void Models(HttpResponse* res);
  void Health(HttpResponse* res);
  void Metrics(HttpResponse* res);
  void Tokenize(const HttpRequest& req, HttpResponse* res, LoadedModel& m);
  void Detokenize(const HttpRequest& req, HttpResponse* res, LoadedModel& m);
  void Embeddings(const HttpRequest& req, HttpResponse* res, LoadedModel& m);
  void Rerank(const HttpRequest& req, HttpResponse* res, LoadedModel& m, bool cohere);
  void LoadModels();
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
  Background background_{64, 10};  // large bodies: 64 may wait, at nice +10
  // The Responses API's, by id (Run opens the configured store; in memory until then).
  std::unique_ptr<ResponseStore> responses_ = std::make_unique<ResponseStore>();
  std::unique_ptr<ModelHost> host_;        // the served models
  bool multi_ = false;                     // --models-dir
  std::shared_ptr<ComputeShare> compute_;  // the models' shared pool (--models-dir)
  enum class State { kLoading, kReady, kDraining, kFailed, kStopping };
  std::atomic<State> state_{State::kLoading};
  int64_t created_ = UnixNow();
  std::mutex http_mu_;
  HttpCounters http_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_requested_ = false;
  std::atomic<bool> agent_stop_{false};
};

}  // namespace paddock::server::server_detail
