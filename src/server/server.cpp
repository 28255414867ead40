// server/server.cpp: the API endpoints over the event-driven HTTP layer (server/http.h) and the
// batching Service.
//
// A handler runs on an event thread and never blocks: it parses the request, renders and
// tokenizes the prompt, submits it, and answers with a BodySource that reads the request's
// RequestStream when the socket can take bytes. The stream's ready callback (engine thread)
// wakes the connection. A client that leaves, times out or stops reading ends the exchange:
// the request is cancelled and its KV blocks are freed at the next engine step. Non-streaming
// responses are chunked too, so a long wait can probe the connection with JSON-neutral
// whitespace and notice a client that left.
#include "server/server.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "base/cpu.h"
#include "base/strings.h"
#include "base/timer.h"
#include "base/utf8.h"
#include "model/stage_link.h"
#include "server/api.h"
#include "server/api_dialects.h"
#include "server/api_json.h"
#include "server/bodies.h"
#include "server/http.h"
#include "server/metrics.h"
#include "server/model_registry.h"
#include "server/server_impl.h"

namespace paddock::server::server_detail {

// The HAProxy agent protocol: one line per connection, then close. Nothing is read, so a
// client cannot hold this thread; each answer is a few bytes to a fresh socket.
void Server::AgentLoop(int fd) {
  pollfd p{fd, POLLIN, 0};
  while (!agent_stop_.load()) {
    if (poll(&p, 1, 200) <= 0) continue;
    const int c = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    const char* line = "drain\n";
    if (state_.load() == State::kReady) {
      bool full = false;
      for (const ModelLease& m : host_->Loaded())
        full |= m->service->Stats().waiting >= m->service->options().max_queue;
      if (!full) line = "ready up 100%\n";
    }
    send(c, line, std::strlen(line), MSG_NOSIGNAL | MSG_DONTWAIT);
    close(c);
  }
  close(fd);
}

// The served models' specs: `-m` as one pinned model, or every model of --models-dir.
std::vector<ModelSpec> Server::Specs() {
  if (!multi_) {
    ModelSpec spec;
    spec.id = opt_.model_name.empty() ? FileStem(opt_.engine.model_path) : opt_.model_name;
    for (const std::string& a : opt_.model_aliases)
      if (a != spec.id) spec.aliases.push_back(a);
    spec.engine = opt_.engine;
    spec.chat_template = opt_.chat_template;
    spec.chat_template_file = opt_.chat_template_file;
    for (const std::string& l : opt_.loras) {  // NAME=FILE or NAME=FILE:SCALE (checked by serve)
      LoraRegistry::Entry a;
      a.name = l.substr(0, l.find('='));
      ParseLoraArg(l.substr(l.find('=') + 1), &a.path, &a.scale);
      spec.loras.push_back(std::move(a));
    }
    spec.pinned = true;
    if (opt_.memory_budget > 0) InspectSpec(&spec);
    return {spec};
  }
  EngineOptions base = opt_.engine;
  // Each model's KV pool: 4 full contexts unless sized (--kv-memory, models.json kv_memory);
  // made smaller at load when the budget cannot hold it beside the weights.
  base.kv_sequences = std::min(base.kv_sequences, 4);
  base.compute = compute_;
  base.on_load_progress = nullptr;
  std::vector<std::string> skipped;
  std::vector<ModelSpec> specs = ScanModelsDir(opt_.models_dir, base, &skipped);
  for (const std::string& why : skipped)
    std::fprintf(stderr, "paddock: --models-dir: left out %s\n", why.c_str());
  if (specs.empty())
    Fail("--models-dir '%s' holds no model (no .gguf file that loads as one)",
         opt_.models_dir.c_str());
  for (ModelSpec& spec : specs) {
    if (spec.chat_template.empty() && spec.chat_template_file.empty()) {
      spec.chat_template = opt_.chat_template;
      spec.chat_template_file = opt_.chat_template_file;
    }
    const MemoryReport& e = spec.estimate;
    std::fprintf(stderr, "paddock: model '%s': %s (weights %s, KV %s, scratch %s)\n",
                 spec.id.c_str(), spec.engine.model_path.c_str(),
                 FormatBytes(e.weight_bytes).c_str(), FormatBytes(e.kv_allocated_bytes).c_str(),
                 FormatBytes(e.scratch_bytes).c_str());
  }
  return specs;
}

// A model as the handlers use it: its engine on the shared pool, service, chat template,
// adapters and request context.
std::unique_ptr<LoadedModel> Server::MakeLoaded(const ModelSpec& spec, uint64_t kv_bytes) {
  EngineOptions eo = spec.engine;
  if (kv_bytes > 0) eo.kv_memory = kv_bytes;
  auto engine = Engine::Create(eo);
  const ModelInfo& info = engine->info();
  for (const auto& w : info.warnings) std::fprintf(stderr, "paddock: warning: %s\n", w.c_str());
  auto m = std::make_unique<LoadedModel>();
  LoadedModel* raw = m.get();
  m->id = spec.id;
  ApiContext& ctx = m->ctx;
  ctx.model_name = spec.id;
  ctx.aliases = spec.aliases;
  ctx.default_timeout = opt_.request_timeout;
  ctx.context = info.context;
  ctx.n_vocab = info.n_vocab;
  ctx.compile = [raw](GrammarKind kind, const std::string& text) {
    return raw->service->engine().CompileGrammar(kind, text);
  };
  m->chat = ChatFormatter::Create(info, spec.chat_template, spec.chat_template_file);
  ctx.tool_format = m->chat->tool_format();
  ctx.loras = &m->loras;
  m->reasoning =
      opt_.reasoning_format == "deepseek" ||
      (opt_.reasoning_format == "auto" && info.chat_template.find("<think>") != std::string::npos);
  m->harmony = ctx.tool_format == ToolFormat::kHarmony && opt_.reasoning_format != "none";
  if (!m->chat->warning().empty())
    std::fprintf(stderr, "paddock: warning: %s\n", m->chat->warning().c_str());
  m->service = Service::Create(std::move(engine), opt_.service);
  LoadLoras(spec, m.get());
  const MemoryReport mem = m->service->engine().Memory();
  m->footprint = mem.weight_bytes + mem.kv_allocated_bytes + mem.scratch_bytes;
  std::fprintf(
      stderr,
      "paddock: serving '%s' (%s, context %d, chat: %s, tool calls: %s); weights %s, KV cache "
      "%s, scratch %s\n",
      spec.id.c_str(), info.arch.c_str(), info.context, m->chat->description().c_str(),
      ToolFormatName(m->chat->tool_format()), FormatBytes(mem.weight_bytes).c_str(),
      FormatBytes(mem.kv_allocated_bytes).c_str(), FormatBytes(mem.scratch_bytes).c_str());
  return m;
}

void Server::LoadModels() {
  try {
    ModelHost::Options ho;
    ho.keep_alive = multi_ ? opt_.keep_alive : -1;
    ho.max_waiting = std::max(1, opt_.service.max_queue);
    const uint64_t avail = AvailableMemoryBytes();
    ho.budget = opt_.memory_budget > 0 ? opt_.memory_budget
                : multi_ && avail > 0  ? avail / 4 * 3
                                       : UINT64_MAX;
    if (multi_)
      std::fprintf(stderr, "paddock: memory budget %s for all loaded models%s\n",
                   FormatBytes(ho.budget).c_str(),
                   opt_.memory_budget > 0 ? "" : " (75% of the available memory; --memory-budget)");
    host_ = std::make_unique<ModelHost>(
        ho, Specs(), [this](const ModelSpec& spec, uint64_t kv) { return MakeLoaded(spec, kv); });
    host_->LoadPinned();
    host_->Start();
    state_.store(State::kReady);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "paddock: error: %s\n", e.what());
    state_.store(State::kFailed);
    RequestStop();
  }
}

// The spec a request's model name selects.
const ModelSpec& Server::Resolve(const std::string& name) const {
  const std::vector<ModelSpec>& specs = host_->specs();
  if (name.empty()) {
    if (specs.size() == 1) return specs[0];
    ApiError e;
    e.param = "model";
    e.message =
        StrFormat("'model' is required: this server serves %zu models (GET /v1/models lists them)",
                  specs.size());
    throw e;
  }
  if (const ModelSpec* s = host_->Find(name)) return *s;
  for (const ModelSpec& s : specs)
    for (const LoraRegistry::Entry& a : s.loras)
      if (a.name == name) return s;
  for (const ModelLease& m : host_->Loaded())
    if (m->loras.Find(name) != nullptr) return *host_->Find(m->id);
  throw UnknownModel(Served(), name);
}

std::vector<ServedModel> Server::Served() const {
  std::vector<ServedModel> out;
  const std::vector<ModelHost::Status> st = host_->Statuses();
  std::vector<ModelLease> loaded = host_->Loaded();
  for (size_t i = 0; i < host_->specs().size(); ++i) {
    const ModelSpec& spec = host_->specs()[i];
    ServedModel m;
    m.id = spec.id;
    m.aliases = spec.aliases;
    m.context = spec.context;
    m.n_vocab = spec.info.n_vocab;
    bool live = false;
    for (const ModelLease& l : loaded) {
      if (l->id != spec.id) continue;
      m = ServedOf(l->ctx);
      live = true;
    }
    if (!live) m.loras = spec.loras;
    if (multi_)
      m.status = st[i].state == ModelHost::State::kLoaded    ? "loaded"
                 : st[i].state == ModelHost::State::kLoading ? "loading"
                                                             : "unloaded";
    out.push_back(std::move(m));
  }
  return out;
}

bool Server::Faulted(LoadedModel& m, HttpResponse* res) {
  const std::string f = m.service->engine().fault();
  if (f.empty()) return false;
  ApiError e;
  e.status = 503;
  e.type = "server_error";
  e.code = "backend_lost";
  e.message = "'" + m.id + "' cannot answer: " + f;
  SendError(res, e);
  res->SetHeader("Retry-After", "1");
  return true;
}

void Server::WithModel(const HttpRequest& req, HttpResponse* res, const std::string& name,
                       LoadedFn fn) {
  if (!Ready(res)) return;
  const ModelSpec* spec = nullptr;
  if (!Answering(res, [&] { spec = &Resolve(name); })) return;
  static const auto hold = [](HttpResponse* r, const ModelLease& m) {
    if (r->stream) r->stream = std::make_shared<LeasedBody>(std::move(r->stream), m);
  };
  if (ModelLease m = host_->TryAcquire(spec->id)) {
    if (Faulted(*m, res)) return;
    fn(req, res, *m);
    hold(res, m);
    return;
  }
  // Not loaded: the answer comes once the host has loaded it (other models serve meanwhile).
  auto copy = std::make_shared<const HttpRequest>(req);
  res->later = [this, copy, id = spec->id, fn](Reply reply) {
    auto ready = [this, copy, fn, reply](ModelLease m, const ApiError* e) {
      HttpResponse r;
      Decorate(*copy, &r);
      if (e != nullptr) {
        SendError(&r, *e);
        if (e->status == 503) r.SetHeader("Retry-After", "1");
      } else if (Faulted(*m, &r)) {
      } else {
        try {
          fn(*copy, &r, *m);
        } catch (const std::exception&) {
          r = HttpResponse();
          Decorate(*copy, &r);
          ApiError err;
          err.status = 500;
          err.type = "server_error";
          err.message = "internal error";
          SendError(&r, err);
        }
        hold(&r, m);
      }
      Counted(*copy, &r);
      reply(std::move(r));
    };
    if (host_->AcquireLater(id, ready)) return;
    HttpResponse busy;
    Decorate(*copy, &busy);
    ApiError e;
    e.status = opt_.busy_status;
    e.type = "rate_limit_exceeded";
    e.message = "model '" + id + "' is loading and its queue is full; retry later";
    busy.SetHeader("Retry-After", "1");
    busy.SetHeader("X-Paddock-Overloaded", "queue-full");
    SendError(&busy, e);
    Counted(*copy, &busy);
    reply(std::move(busy));
  };
}

// Completions with several prompts: the second and later ones submitted after the first, their
// choices appended in order. A prompt refused (400, 429) ends the request: the choices already
// submitted are cancelled and the refusal is the answer.
bool Server::SubmitMorePrompts(LoadedModel& m, const ApiRequest& ar,
                               std::vector<std::shared_ptr<RequestStream>>* streams,
                               HttpResponse* res) {
  for (size_t i = 1; i < ar.more_prompts.size(); ++i) {
    ApiRequest one = ar;
    one.more_prompts.clear();
    one.prompt_text = ar.more_prompts[i].text;
    one.prompt_tokens = ar.more_prompts[i].tokens;
    std::vector<std::shared_ptr<RequestStream>> more;
    Answering(res, [&] { more = Submit(m, Prompt(m, one, false), one, res); });
    if (more.empty()) {
      for (auto& s : *streams) s->Cancel();
      return false;
    }
    streams->insert(streams->end(), more.begin(), more.end());
  }
  return true;
}

// 503 with Retry-After unless the model is loaded and the server is not stopping.
bool Server::Ready(HttpResponse* res) {
  const State st = state_.load();
  if (st == State::kReady || st == State::kDraining) return true;
  ApiError e;
  e.status = 503;
  e.type = "service_unavailable";
  e.message = st == State::kLoading ? "the model is still loading" : "the server is shutting down";
  res->SetHeader("Retry-After", "1");
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
std::vector<int32_t> Server::Prompt(const LoadedModel& m, ApiRequest& ar, bool chat) const {
  const Engine& engine = m.service->engine();
  const ApiContext& ctx_ = m.ctx;
  std::vector<int32_t> prompt;
  if (chat) {
    std::string text;
    try {
      text = m.chat->Render(ChatInput{ar.messages, true, ar.template_vars, ar.tools});
    } catch (const Error& ex) {
      ApiError e;
      e.param = ar.template_vars.empty() ? "messages" : "chat_template_kwargs";
      e.message = ex.what();
      throw e;
    }
    ar.harmony = m.harmony;
    ar.reasoning = m.reasoning && !m.harmony;
    ar.reasoning_open = ar.reasoning && ChatFormatter::OpensReasoning(text);
    // A template that writes BOS itself must not get a second one from the tokenizer.
    const std::string& bos = engine.info().bos_token;
    const bool has_bos = !bos.empty() && text.compare(0, bos.size(), bos) == 0;
    if (!ar.images.empty()) {
      if (!engine.has_vision()) {
        ApiError e;
        e.param = "messages";
        e.code = "model_not_multimodal";
        e.message = "the model '" + m.id + "' reads text only: it takes no images";
        throw e;
      }
      const auto spans = ContentSpans(text, ar);
      try {
        prompt = engine.TokenizeImages(text, engine.AddsBos() && !has_bos, &spans, ar.images,
                                       &ar.options.generate.images);
      } catch (const Error& ex) {
        ApiError e;
        e.param = "messages";
        e.message = ex.what();
        throw e;
      }
    } else {
      prompt = engine.TokenizeChat(text, engine.AddsBos() && !has_bos, ContentSpans(text, ar));
    }
  } else if (ar.prompt_is_tokens) {
    prompt = ar.prompt_tokens;
    for (int32_t t : prompt) {
      if (t >= ctx_.n_vocab) {
        ApiError e;
        e.param = "prompt";
        e.message = StrFormat("token id %d is outside the vocabulary (0..%d)", t, ctx_.n_vocab - 1);
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
  if (ar.echo) {
    ar.echo_text = ar.prompt_is_tokens ? engine.Detokenize(prompt) : ar.prompt_text;
    ar.echo_first_token = engine.Detokenize({prompt[0]});
  }
  return prompt;
}

// Queues the request; on refusal answers 400 (invalid), 429 (queue full) or 503 (stopping)
// and returns null.
std::vector<std::shared_ptr<RequestStream>> Server::Submit(LoadedModel& m,
                                                           const std::vector<int32_t>& prompt,
                                                           const ApiRequest& ar,
                                                           HttpResponse* res) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  SubmitStatus ss;
  try {
    ss = m.service->Submit(prompt, ar.options, &streams);
  } catch (const Error& ex) {
    ApiError e;
    e.message = ex.what();
    SendError(res, e);
    return {};
  }
  if (ss == SubmitStatus::kAccepted) return streams;
  ApiError e;
  e.status = ss == SubmitStatus::kQueueFull ? opt_.busy_status : 503;
  if (ss == SubmitStatus::kQueueFull) res->SetHeader("X-Paddock-Overloaded", "queue-full");
  e.type = ss == SubmitStatus::kQueueFull ? "rate_limit_exceeded" : "service_unavailable";
  e.message = ss == SubmitStatus::kQueueFull
                  ? "the server is at capacity (request queue full); retry later"
                  : "the server is shutting down";
  res->SetHeader("Retry-After", "1");
  SendError(res, e);
  return {};
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

void Server::Models(HttpResponse* res) {
  if (state_.load() != State::kReady && state_.load() != State::kDraining) {
    ApiError e;
    e.status = 503;
    e.type = "service_unavailable";
    e.message = "the model is still loading";
    SendError(res, e);
    return;
  }
  res->body = ModelsBody(Served(), created_);
}

void Server::Health(HttpResponse* res) {
  const State st = state_.load();
  if (opt_.engine.stages && st == State::kReady) {  // a pipeline: is every stage answering?
    if (const std::string lost = opt_.engine.stages->Lost(); !lost.empty()) {
      res->status = 503;
      res->body = nlohmann::json{{"status", "error"}, {"error", lost}}.dump();
      return;
    }
  }
  if (st == State::kReady) {  // a model whose device was lost can no longer answer
    for (const ModelLease& m : host_->Loaded()) {
      if (const std::string f = m->service->engine().fault(); !f.empty()) {
        res->status = 503;
        res->body = nlohmann::json{{"status", "error"}, {"error", f}}.dump();
        return;
      }
    }
  }
  res->status = st == State::kReady ? 200 : 503;
  res->body = st == State::kReady      ? "{\"status\":\"ok\"}"
              : st == State::kLoading  ? "{\"status\":\"loading\"}"
              : st == State::kDraining ? "{\"status\":\"draining\"}"
                                       : "{\"status\":\"stopping\"}";
}

void Server::Metrics(HttpResponse* res) {
  res->content_type = "text/plain; version=0.0.4";
  if (state_.load() == State::kLoading || state_.load() == State::kFailed) return;
  HttpCounters http;
  {
    std::lock_guard<std::mutex> lock(http_mu_);
    http = http_;
  }
  const HttpStats hs = http_server_->Stats();
  http.connections_open = hs.connections_open;
  http.refused = hs.refused;
  http.timeouts = hs.timeouts;
  http.oversized = hs.oversized;
  std::vector<ModelMetrics> ms;
  const std::vector<ModelHost::Status> st = host_->Statuses();
  const std::vector<ModelLease> loaded = host_->Loaded();
  for (const ModelHost::Status& s : st) {
    ModelMetrics m;
    m.name = s.id;
    m.footprint = s.footprint;
    m.host = s.counters;
    for (const ModelLease& l : loaded) {
      if (l->id != s.id) continue;
      m.loaded = true;
      m.stats = l->service->Stats();
      m.faulted = !l->service->engine().fault().empty();
    }
    ms.push_back(std::move(m));
  }
  const std::string labels =
      multi_ ? "" : "model_name=\"" + (st.empty() ? std::string() : st[0].id) + "\"";
  res->body = PrometheusText(ms, http, host_->budget() == UINT64_MAX ? 0 : host_->budget(),
                             host_->committed(), labels);
}

// Bodies from this size on are parsed (and their grammars compiled) in the background: a
// chat request with a few tools is a few KB; a 30,000-value enum schema is 330 KB.
constexpr size_t kBackgroundBodyBytes = 64 * 1024;

void Server::Handle(const HttpRequest& req, HttpResponse* res) {
  // (An adapter load reads a file: in the background too.)
  if (req.method != "POST" || (req.body.size() < kBackgroundBodyBytes && !InBackground(req)))
    return Respond(req, res);
  // One copy of the request (its body may be megabytes), shared by the job and the refusal.
  auto copy = std::make_shared<const HttpRequest>(req);
  res->later = [this, copy](Reply reply) {
    auto job = [this, copy, reply] {
      HttpResponse r;
      try {
        Respond(*copy, &r);
        if (r.later) {  // (its model is loading: the answer comes from the host)
          auto later = std::move(r.later);
          later(reply);
          return;
        }
      } catch (const std::exception&) {
        r = HttpResponse();
        ApiError e;
        e.status = 500;
        e.type = "server_error";
        e.message = "internal error";
        SendError(&r, e);
      }
      reply(std::move(r));
    };
    if (background_.Submit(std::move(job))) return;
    HttpResponse busy;
    ApiError e;
    e.status = 503;
    e.type = "server_error";
    e.message = "too many large requests are waiting to be parsed; retry later";
    SendError(&busy, e);
    busy.SetHeader("Retry-After", "1");
    Decorate(*copy, &busy);
    Counted(*copy, &busy);
    reply(std::move(busy));
  };
}

// Every answer passes here: CORS, keys, routing, and the count by status.
bool Server::Decorate(const HttpRequest& req, HttpResponse* res) const {
  if (!opt_.replica_name.empty()) res->SetHeader("X-Paddock-Replica", opt_.replica_name);
  return Cors(req, res);
}

void Server::Respond(const HttpRequest& req, HttpResponse* res) {
  const bool cors = Decorate(req, res);
  if (req.method == "OPTIONS") {
    // CORS preflight, on any path: what a browser may send (no key: preflights carry none).
    // The headers it asks for are echoed (the official SDKs send x-stainless-*, x-api-key,
    // anthropic-version ...): the origin is one the operator allowed, and keys still decide.
    res->status = 204;
    res->content_type = "text/plain";
    if (cors) {
      res->SetHeader("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
      res->SetHeader("Access-Control-Allow-Headers",
                     PreflightHeaders(req.Header("Access-Control-Request-Headers")));
      res->SetHeader("Access-Control-Max-Age", "7200");
      res->SetHeader("Vary", "Origin, Access-Control-Request-Headers");
    }
  } else if (Authorized(req, res)) {
    Route(req, res);
  }
  if (!res->later) Counted(req, res);  // (a later answer is counted when it is given)
}

// An answer's last step: an error in the shape of the request's API, and the count by status.
void Server::Counted(const HttpRequest& req, HttpResponse* res) {
  if (const Dialect d = ApiOf(req);
      d != Dialect::kOpenAi && res->status >= 400 && !res->body.empty())
    res->body = DialectErrorBody(d, res->status, res->body);
  std::lock_guard<std::mutex> lock(http_mu_);
  http_.by_status[res->status]++;
}

HttpLimits Limits(const ServerOptions& o) {
  HttpLimits l;
  l.max_body_bytes = o.max_body_bytes;
  if (o.http_threads > 0) l.threads = o.http_threads;
  if (o.max_connections > 0) l.max_connections = o.max_connections;
  if (o.header_timeout > 0) l.header_seconds = o.header_timeout;
  if (o.body_timeout > 0) l.body_seconds = o.body_timeout;
  if (o.idle_timeout > 0) l.idle_seconds = static_cast<unsigned>(o.idle_timeout);
  return l;
}

// The stored responses: SQLite under --data-dir, or memory (none, or an unusable default).
void Server::OpenResponses() {
  ResponseStoreOptions ro;
  ro.dir = opt_.data_dir;
  ro.max_entries = opt_.responses_max;
  ro.max_bytes = opt_.responses_max_bytes;
  ro.max_age_seconds = opt_.responses_max_age;
  ro.refuse_damaged = opt_.responses_refuse_damaged;
  try {
    responses_ = std::make_unique<ResponseStore>(ro);
  } catch (const Error& e) {
    if (!opt_.data_dir_is_default) throw;
    // The default directory (not asked for) cannot be used, e.g. a read-only home: memory.
    std::fprintf(stderr, "paddock: %s; stored responses are kept in memory (--data-dir DIR)\n",
                 e.what());
    ro.dir.clear();
    responses_ = std::make_unique<ResponseStore>(ro);
  }
  std::fprintf(stderr, "paddock: stored responses: %s\n", responses_->where().c_str());
}

int Server::Run() {
  multi_ = !opt_.models_dir.empty();
  if (multi_) compute_ = ComputeShare::Create(opt_.engine.threads);
  const sigset_t sigs = StopSignals();
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  // A closed socket is an error on the write, not a signal. SIGHUP (a closed terminal, or a
  // supervisor's "reload") reloads nothing: logs go to stderr, which the supervisor owns; it
  // must not kill the server mid-stream.
  signal(SIGPIPE, SIG_IGN);
  signal(SIGHUP, SIG_IGN);

  OpenResponses();  // (before the socket: a data directory that cannot be used is an error)
  // The socket listens before the model loads (health says "loading" meanwhile).
  http_server_ =
      std::make_unique<HttpServer>(opt_.host, opt_.port, Limits(opt_),
                                   [this](const HttpRequest& q, HttpResponse* r) { Handle(q, r); });
  const int port = http_server_->port();
  http_server_->Start();
  std::fprintf(stderr, "paddock: listening on http://%s:%d\n", opt_.host.c_str(), port);
  if (opt_.on_listening) opt_.on_listening(port);

  std::thread agent;
  if (opt_.agent_port > 0) {
    const int fd = ListenTcp(opt_.host, opt_.agent_port);
    agent = std::thread([this, fd] { AgentLoop(fd); });
  }
  std::thread loader([this] { LoadModels(); });
  std::atomic<bool> exiting{false};
  int signal_number = 0;
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    if (exiting.load()) return;  // our own wake-up: the server already stopped
    signal_number = sig;
    RequestStop();
  });
  {
    std::unique_lock<std::mutex> lock(stop_mu_);
    stop_cv_.wait(lock, [&] { return stop_requested_; });
  }
  loader.join();  // a signal during the load: the load finishes (or fails) first
  const bool signalled = signal_number != 0;
  if (signalled) {
    std::fprintf(stderr,
                 "paddock: %s: no new requests; letting in-flight requests finish (up to %.0f s)\n",
                 signal_number == SIGTERM ? "SIGTERM" : "SIGINT", opt_.grace_seconds);
  } else {
    exiting = true;
    pthread_kill(waiter.native_handle(), SIGTERM);  // release the waiter
  }
  waiter.join();
  if (state_.load() == State::kReady && signalled && opt_.drain_seconds > 0) {
    // Health fails first; requests are still taken until the balancers have noticed.
    std::fprintf(stderr, "paddock: draining: /health answers 503 for %.1f s before the drain\n",
                 opt_.drain_seconds);
    state_.store(State::kDraining);
    std::this_thread::sleep_for(std::chrono::duration<double>(opt_.drain_seconds));
  }
  if (state_.load() == State::kReady || state_.load() == State::kDraining) {
    state_.store(State::kStopping);
    host_->Shutdown(opt_.grace_seconds);
  }
  agent_stop_ = true;
  if (agent.joinable()) agent.join();
  // Every stream has its end now: a few seconds for the last bytes to reach their clients.
  http_server_->Stop(5);
  background_.Stop();  // (after the HTTP layer: a late reply finds its exchange ended)
  http_server_.reset();
  host_.reset();
  if (state_.load() == State::kFailed) return 1;
  std::fprintf(stderr, "paddock: stopped\n");
  return 0;
}

}  // namespace paddock::server::server_detail

namespace paddock::server {

int RunServer(const ServerOptions& options) {
  server_detail::Server s(options);
  return s.Run();
}

}  // namespace paddock::server
