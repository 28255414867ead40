// server/server.cpp: HTTP transport (cpp-httplib from Debian's libcpp-httplib-dev: a small,
// maintained, thread-pooled HTTP/1.1 server with chunked responses; compiled as a shared
// library there, so its header is light) over the batching Service.
//
// Each HTTP worker thread parses a request, submits it, and streams its RequestStream to the
// socket. A failed write means the client is gone: the request is cancelled and its KV blocks
// are freed at the next engine step. Non-streaming responses are chunked too, so a long wait
// can probe the connection with JSON-neutral whitespace and notice a client that left.
#include "server/server.h"

#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>

#include "base/strings.h"
#include "base/timer.h"
#include "server/api.h"
#include "server/metrics.h"

namespace paddock::server {
namespace {

constexpr double kProbeSeconds = 1.0;  // non-streaming: whitespace probe interval while waiting

std::string FileStem(const std::string& path) {
  size_t b = path.find_last_of('/');
  b = b == std::string::npos ? 0 : b + 1;
  std::string stem = path.substr(b);
  const size_t dot = stem.rfind('.');
  if (dot != std::string::npos && dot > 0) stem.resize(dot);
  return stem;
}

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string NewId(const char* prefix) {
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
  void Count(int status) {
    std::lock_guard<std::mutex> lock(http_mu_);
    http_.by_status[status]++;
  }
  void SendError(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    res.set_content(ErrorBody(e), "application/json");
    Count(e.status);
  }
  // Whether the request may pass the key check (401 sent otherwise).
  bool Authorized(const httplib::Request& req, httplib::Response& res);
  // CORS: the allow-origin headers when the request's Origin is allowed; true if it is.
  bool Cors(const httplib::Request& req, httplib::Response& res) const;
  // POST /v1/completions and /v1/chat/completions: the named steps below.
  void Completion(const httplib::Request& req, httplib::Response& res, bool chat);
  bool Ready(httplib::Response& res);
  std::vector<int32_t> Prompt(ApiRequest& ar, bool chat) const;  // throws ApiError / Error
  std::shared_ptr<RequestStream> Submit(const std::vector<int32_t>& prompt, const ApiRequest& ar,
                                        httplib::Response& res);
  static void StreamEvents(httplib::Response& res, std::shared_ptr<RequestStream> stream,
                           const ApiRequest& ar, const ResponseMeta& meta);
  static void SendBody(httplib::Response& res, std::shared_ptr<RequestStream> stream,
                       const ApiRequest& ar, const ResponseMeta& meta);
  void LoadModel();
  // stop() before listen() has started would be lost: wait until it runs.
  void StopHttp() {
    for (int i = 0; i < 5000 && !http_server_.is_running(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    http_server_.stop();
  }

  ServerOptions opt_;
  httplib::Server http_server_;
  enum class State { kLoading, kReady, kFailed, kStopping };
  std::atomic<State> state_{State::kLoading};
  std::unique_ptr<Service> service_;
  ApiContext ctx_;
  std::unique_ptr<ChatFormatter> chat_;
  int n_vocab_ = 0;
  int64_t created_ = UnixNow();
  std::mutex http_mu_;
  HttpCounters http_;
};

void Server::LoadModel() {
  try {
    auto engine = Engine::Create(opt_.engine);
    const ModelInfo& info = engine->info();
    for (const auto& w : info.warnings) std::fprintf(stderr, "paddock: warning: %s\n", w.c_str());
    ctx_.context = info.context;
    n_vocab_ = info.n_vocab;
    chat_ = ChatFormatter::Create(info, opt_.chat_template, opt_.chat_template_file);
    if (!chat_->warning().empty())
      std::fprintf(stderr, "paddock: warning: %s\n", chat_->warning().c_str());
    service_ = Service::Create(std::move(engine), opt_.service);
    const MemoryReport m = service_->engine().Memory();
    std::fprintf(
        stderr,
        "paddock: serving '%s' (%s, context %d, chat: %s); weights %s, KV cache %s, scratch %s\n",
        ctx_.model_name.c_str(), info.arch.c_str(), info.context, chat_->description().c_str(),
        FormatBytes(m.weight_bytes).c_str(), FormatBytes(m.kv_allocated_bytes).c_str(),
        FormatBytes(m.scratch_bytes).c_str());
    state_.store(State::kReady);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "paddock: error: %s\n", e.what());
    state_.store(State::kFailed);
    StopHttp();
  }
}

void Server::Completion(const httplib::Request& req, httplib::Response& res, bool chat) {
  if (!Ready(res)) return;
  ApiRequest ar;
  std::vector<int32_t> prompt;
  try {
    ar = ParseRequest(req.body, chat, ctx_);
    prompt = Prompt(ar, chat);
  } catch (const ApiError& e) {
    SendError(res, e);
    return;
  } catch (const Error& ex) {
    ApiError e;
    e.message = ex.what();
    SendError(res, e);
    return;
  }
  std::shared_ptr<RequestStream> stream = Submit(prompt, ar, res);
  if (!stream) return;
  Count(200);
  const ResponseMeta meta{NewId(chat ? "chatcmpl-" : "cmpl-"), UnixNow(), ar.model};
  if (ar.stream) {
    StreamEvents(res, std::move(stream), ar, meta);
  } else {
    SendBody(res, std::move(stream), ar, meta);
  }
}

// 503 with Retry-After unless the model is loaded and the server is not stopping.
bool Server::Ready(httplib::Response& res) {
  const State st = state_.load();
  if (st == State::kReady) return true;
  ApiError e;
  e.status = 503;
  e.type = "service_unavailable";
  e.message = st == State::kLoading ? "the model is still loading" : "the server is shutting down";
  res.set_header("Retry-After", "1");
  SendError(res, e);
  return false;
}

// Where each message's content stands in the rendered chat (searched in order, as written or
// trimmed, as templates print it): those bytes are tokenized as text, so a user typing "</s>"
// or "<|im_end|>" cannot forge a turn boundary. A content a template rewrote beyond trimming is
// not found and stays unprotected.
std::vector<std::pair<size_t, size_t>> ContentSpans(const std::string& text, const ApiRequest& ar) {
  std::vector<std::pair<size_t, size_t>> spans;
  size_t from = 0;
  for (const auto& m : ar.messages) {
    std::string_view c = m.content;
    size_t at = c.empty() ? std::string::npos : text.find(c, from);
    if (at == std::string::npos) {
      const size_t b = c.find_first_not_of(" \t\n"), e = c.find_last_not_of(" \t\n");
      if (b == std::string::npos) continue;
      c = c.substr(b, e - b + 1);
      at = text.find(c, from);
      if (at == std::string::npos) continue;
    }
    spans.emplace_back(at, at + c.size());
    from = at + c.size();
  }
  return spans;
}

// The request's prompt tokens: the chat rendered by the template, token ids as given, or text
// tokenized; checked against the vocabulary and the context (max_tokens clamped to fit).
std::vector<int32_t> Server::Prompt(ApiRequest& ar, bool chat) const {
  const Engine& engine = service_->engine();
  std::vector<int32_t> prompt;
  if (chat) {
    const std::string text = chat_->Render(ar.messages, true);
    // A template that writes BOS itself must not get a second one from the tokenizer.
    const std::string& bos = engine.info().bos_token;
    const bool has_bos = !bos.empty() && text.compare(0, bos.size(), bos) == 0;
    prompt = engine.TokenizeChat(text, engine.AddsBos() && !has_bos, ContentSpans(text, ar));
  } else if (ar.prompt_is_tokens) {
    prompt = ar.prompt_tokens;
    for (int32_t t : prompt) {
      if (t >= n_vocab_) {
        ApiError e;
        e.param = "prompt";
        e.message = StrFormat("token id %d is outside the vocabulary (0..%d)", t, n_vocab_ - 1);
        throw e;
      }
    }
  } else {
    prompt = engine.Tokenize(ar.prompt_text, engine.AddsBos(), opt_.special_in_prompts);
  }
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (n == 0) {
    ApiError e;
    e.param = chat ? "messages" : "prompt";
    e.message = "the prompt is empty";
    throw e;
  }
  GenerateOptions& g = ar.options.generate;
  if (n >= ctx_.context || (ar.max_tokens_given && n + g.max_tokens > ctx_.context)) {
    ApiError e;
    e.param =
        ar.max_tokens_given && n < ctx_.context ? "max_tokens" : (chat ? "messages" : "prompt");
    e.code = "context_length_exceeded";
    e.message = StrFormat(
        "This model's maximum context length is %d tokens. However, you requested %lld tokens "
        "(%lld in the prompt, %d for the completion).",
        ctx_.context, static_cast<long long>(n + (ar.max_tokens_given ? g.max_tokens : 1)),
        static_cast<long long>(n), ar.max_tokens_given ? g.max_tokens : 1);
    throw e;
  }
  if (!ar.max_tokens_given || n + g.max_tokens > ctx_.context)
    g.max_tokens = std::min<int>(g.max_tokens, ctx_.context - static_cast<int>(n));
  return prompt;
}

// Queues the request; on refusal answers 400 (invalid), 429 (queue full) or 503 (stopping)
// and returns null.
std::shared_ptr<RequestStream> Server::Submit(const std::vector<int32_t>& prompt,
                                              const ApiRequest& ar, httplib::Response& res) {
  std::shared_ptr<RequestStream> stream;
  SubmitStatus ss;
  try {
    ss = service_->Submit(prompt, ar.options, &stream);
  } catch (const Error& ex) {
    ApiError e;
    e.message = ex.what();
    SendError(res, e);
    return nullptr;
  }
  if (ss == SubmitStatus::kAccepted) return stream;
  ApiError e;
  e.status = ss == SubmitStatus::kQueueFull ? 429 : 503;
  e.type = ss == SubmitStatus::kQueueFull ? "rate_limit_exceeded" : "service_unavailable";
  e.message = ss == SubmitStatus::kQueueFull
                  ? "the server is at capacity (request queue full); retry later"
                  : "the server is shutting down";
  res.set_header("Retry-After", "1");
  SendError(res, e);
  return nullptr;
}

// The client went away: free everything now.
auto Releaser(std::shared_ptr<RequestStream> stream) {
  return [stream](bool success) {
    if (!success) stream->Cancel();
  };
}

// Server-sent events: a chunk per piece of text, keep-alive comments while waiting (so a
// closed connection is noticed), the finish reason, usage if asked, and [DONE].
void Server::StreamEvents(httplib::Response& res, std::shared_ptr<RequestStream> stream,
                          const ApiRequest& ar, const ResponseMeta& meta) {
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [stream, ar, meta, first = true](size_t, httplib::DataSink& sink) mutable {
        std::string text;
        for (;;) {
          text.clear();
          const RequestStream::Status s = stream->Wait(&text, kProbeSeconds);
          std::string out;
          if (s == RequestStream::Status::kText) {
            out = StreamChunk(ar, meta, text, nullptr, first);
            first = false;
          } else if (s == RequestStream::Status::kTimeout) {
            out = ": keep-alive\n\n";  // an SSE comment: lets us notice a closed connection
          } else {
            const GenerateResult& g = stream->result();
            out = StreamChunk(ar, meta, "", OpenAiFinishReason(g.finish), first);
            if (ar.include_usage) out += StreamUsageChunk(ar, meta, g);
            out += "data: [DONE]\n\n";
            if (!sink.write(out.data(), out.size())) return false;
            sink.done();
            return true;
          }
          if (!sink.write(out.data(), out.size())) {
            stream->Cancel();
            return false;
          }
        }
      },
      Releaser(stream));
}

// One JSON body at the end; whitespace while waiting (valid before JSON) notices a closed
// connection.
void Server::SendBody(httplib::Response& res, std::shared_ptr<RequestStream> stream,
                      const ApiRequest& ar, const ResponseMeta& meta) {
  res.set_chunked_content_provider(
      "application/json",
      [stream, ar, meta](size_t, httplib::DataSink& sink) {
        std::string text;
        for (;;) {
          const RequestStream::Status s = stream->Wait(&text, kProbeSeconds);
          if (s == RequestStream::Status::kDone) break;
          if (s == RequestStream::Status::kTimeout && !sink.write(" ", 1)) {
            stream->Cancel();
            return false;
          }
        }
        const std::string body = CompletionBody(ar, meta, stream->result());
        if (!sink.write(body.data(), body.size())) return false;
        sink.done();
        return true;
      },
      Releaser(stream));
}

// SIGTERM/SIGINT are blocked in every thread and taken by one waiter thread (sigwait), so no
// handler runs in signal context.
sigset_t StopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

// Equal in time whatever the first differing byte: every byte of every key is compared.
bool KeyMatches(const std::string& given, const std::vector<std::string>& keys) {
  unsigned ok = 0;
  for (const std::string& k : keys) {
    unsigned diff = given.size() != k.size() ? 1u : 0u;
    for (size_t i = 0; i < k.size(); ++i)
      diff |= static_cast<unsigned char>(k[i]) ^
              static_cast<unsigned char>(i < given.size() ? given[i] : 0);
    ok |= diff == 0 ? 1u : 0u;
  }
  return ok != 0;
}

bool Server::Cors(const httplib::Request& req, httplib::Response& res) const {
  if (opt_.cors_origins.empty()) return false;
  const std::string origin = req.get_header_value("Origin");
  if (origin.empty()) return false;
  bool any = false, listed = false;
  for (const std::string& o : opt_.cors_origins) {
    any |= o == "*";
    listed |= o == origin;
  }
  if (!any && !listed) return false;
  res.set_header("Access-Control-Allow-Origin", listed ? origin : "*");
  res.set_header("Access-Control-Expose-Headers", "Retry-After");
  res.set_header("Vary", "Origin");
  return true;
}

bool Server::Authorized(const httplib::Request& req, httplib::Response& res) {
  if (opt_.api_keys.empty()) return true;
  const std::string& p = req.path;
  const bool guarded = p.rfind("/v1/", 0) == 0 || p == "/v1" ||
                       (opt_.auth_health && (p == "/health" || p == "/metrics"));
  if (!guarded) return true;
  const std::string auth = req.get_header_value("Authorization");
  static const std::string kBearer = "Bearer ";
  if (auth.size() > kBearer.size() && auth.compare(0, kBearer.size(), kBearer) == 0 &&
      KeyMatches(auth.substr(kBearer.size()), opt_.api_keys))
    return true;
  ApiError e;
  e.status = 401;
  e.type = "invalid_request_error";
  e.code = "invalid_api_key";
  e.message = auth.empty() ? "no API key given (send Authorization: Bearer KEY)"
                           : "the API key is not valid";
  res.set_header("WWW-Authenticate", "Bearer");
  SendError(res, e);
  return false;
}

int Server::Run() {
  ctx_.model_name = opt_.model_name.empty() ? FileStem(opt_.engine.model_path) : opt_.model_name;
  ctx_.default_timeout = opt_.request_timeout;
  const sigset_t sigs = StopSignals();
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  // A closed socket is an error on the write, not a signal. SIGHUP (a closed terminal, or a
  // supervisor's "reload") reloads nothing: logs go to stderr, which the supervisor owns; it
  // must not kill the server mid-stream.
  signal(SIGPIPE, SIG_IGN);
  signal(SIGHUP, SIG_IGN);

  httplib::Server& h = http_server_;
  const int threads = opt_.http_threads > 0
                          ? opt_.http_threads
                          : std::min(1024, opt_.service.max_running + opt_.service.max_queue + 16);
  h.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  h.set_payload_max_length(opt_.max_body_bytes);
  h.set_read_timeout(30, 0);
  h.set_write_timeout(30, 0);
  h.set_keep_alive_timeout(5);
  h.set_exception_handler(
      [this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        ApiError e;
        e.status = 500;
        e.type = "server_error";
        e.message = "internal error";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& ex) {
          e.message = ex.what();
        } catch (...) {
        }
        SendError(res, e);
      });
  h.set_error_handler([this](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;  // a handler's own error body
    ApiError e;
    e.status = res.status;
    e.type = res.status == 404   ? "not_found"
             : res.status == 413 ? "request_too_large"
                                 : "invalid_request_error";
    e.message = res.status == 404   ? "no such endpoint"
                : res.status == 413 ? "the request body is too large"
                                    : "bad request";
    res.set_content(ErrorBody(e), "application/json");
    Count(res.status);
  });

  h.set_pre_routing_handler([this](const httplib::Request& q, httplib::Response& r) {
    Cors(q, r);
    if (q.method == "OPTIONS") return httplib::Server::HandlerResponse::Unhandled;  // no key
    return Authorized(q, r) ? httplib::Server::HandlerResponse::Unhandled
                            : httplib::Server::HandlerResponse::Handled;
  });
  // CORS preflight, on any path: what a browser may send (no key: preflights carry none).
  h.Options(R"(.*)", [this](const httplib::Request& q, httplib::Response& r) {
    r.status = 204;
    if (Cors(q, r)) {
      r.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      r.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
      r.set_header("Access-Control-Max-Age", "600");
    }
    Count(204);
  });
  h.Post("/v1/completions",
         [this](const httplib::Request& q, httplib::Response& r) { Completion(q, r, false); });
  h.Post("/v1/chat/completions",
         [this](const httplib::Request& q, httplib::Response& r) { Completion(q, r, true); });
  h.Get("/v1/models", [this](const httplib::Request&, httplib::Response& r) {
    if (state_.load() != State::kReady) {
      ApiError e;
      e.status = 503;
      e.type = "service_unavailable";
      e.message = "the model is still loading";
      SendError(r, e);
      return;
    }
    r.set_content(ModelsBody(ctx_, created_, n_vocab_), "application/json");
    Count(200);
  });
  h.Get("/health", [this](const httplib::Request&, httplib::Response& r) {
    const State st = state_.load();
    r.status = st == State::kReady ? 200 : 503;
    r.set_content(st == State::kReady     ? "{\"status\":\"ok\"}"
                  : st == State::kLoading ? "{\"status\":\"loading\"}"
                                          : "{\"status\":\"stopping\"}",
                  "application/json");
    Count(r.status);
  });
  h.Get("/metrics", [this](const httplib::Request&, httplib::Response& r) {
    if (state_.load() == State::kLoading || !service_) {
      r.set_content("", "text/plain; version=0.0.4");
      return;
    }
    HttpCounters http;
    {
      std::lock_guard<std::mutex> lock(http_mu_);
      http = http_;
    }
    r.set_content(PrometheusText(ctx_.model_name, service_->Stats(), http),
                  "text/plain; version=0.0.4");
  });

  // cpp-httplib listens with a backlog of 5; bursts of clients would overflow it (dropped
  // handshakes, retries). Keep the socket and raise the backlog once it listens.
  int listen_fd = -1;
  h.set_socket_options([&listen_fd](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<const void*>(&yes), sizeof(yes));
    listen_fd = sock;
  });
  int port = opt_.port;
  if (port == 0) {
    port = h.bind_to_any_port(opt_.host);
    if (port < 0) Fail("cannot listen on %s (any port)", opt_.host.c_str());
  } else if (!h.bind_to_port(opt_.host, port)) {
    Fail("cannot listen on %s:%d (in use or not permitted)", opt_.host.c_str(), port);
  }
  if (listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);
  std::fprintf(stderr, "paddock: listening on http://%s:%d\n", opt_.host.c_str(), port);
  if (opt_.on_listening) opt_.on_listening(port);

  std::thread loader([this] { LoadModel(); });
  std::atomic<bool> signalled{false}, exiting{false};
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    if (exiting.load()) return;  // our own wake-up: the server already stopped
    signalled = true;
    std::fprintf(stderr,
                 "paddock: %s: no new requests; letting in-flight requests finish (up to %.0f s)\n",
                 sig == SIGTERM ? "SIGTERM" : "SIGINT", opt_.grace_seconds);
    while (state_.load() == State::kLoading)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (state_.load() == State::kReady) {
      state_.store(State::kStopping);
      service_->Shutdown(opt_.grace_seconds);
    }
    // Handlers still writing their last bytes finish before listen() returns.
    StopHttp();
  });
  const bool ok = h.listen_after_bind();
  if (!signalled.load()) {
    // listen() ended without a signal (the model failed to load): release the waiter.
    exiting = true;
    pthread_kill(waiter.native_handle(), SIGTERM);
  }
  waiter.join();
  loader.join();
  service_.reset();
  if (state_.load() == State::kFailed) return 1;
  if (!ok && !signalled) return 1;
  std::fprintf(stderr, "paddock: stopped\n");
  return 0;
}

}  // namespace

int RunServer(const ServerOptions& options) {
  Server s(options);
  return s.Run();
}

}  // namespace paddock::server
