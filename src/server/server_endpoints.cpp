// server/server_endpoints.cpp: the handlers besides the OpenAI completions (server_impl.h):
// embeddings, tokenize / detokenize, a model by id, and the Anthropic, Responses and Ollama
// front-ends (server/api_dialects.h), whose requests run as OpenAI ones.
#include <algorithm>
#include <cmath>

#include "server/bodies.h"
#include "server/server_impl.h"

namespace paddock::server::server_detail {

// Every API's generation (server_impl.h: the one completion path): a request in another API's
// shape is translated into the OpenAI body first; parsed, prompted and submitted alike; its
// reply translated back (server/api_dialects.h).
void Server::Generate(const HttpRequest& req, HttpResponse* res, Dialect d, bool chat,
                      LoadedModel& m) {
  ApiRequest ar;
  std::vector<int32_t> prompt;
  Translated t;
  if (!Answering(res, [&] {
        if (const ModelKind kind = m.service->engine().info().kind;
            kind != ModelKind::kGeneration) {
          ApiError e;
          e.param = "model";
          e.message =
              StrFormat("'%s' is %s: it does not generate text (%s)", m.ctx.model_name.c_str(),
                        kind == ModelKind::kRerank ? "a reranker" : "an embedding model",
                        kind == ModelKind::kRerank ? "/v1/rerank" : "/v1/embeddings");
          throw e;
        }
        t = Translate(req, d, req.body, chat, m);
        if (t.load_only) return;
        ar = ParseRequest(t.body, t.chat, m.ctx);
        for (ChatVar& v : t.vars) {
          bool given = false;
          for (const ChatVar& w : ar.template_vars) given = given || w.name == v.name;
          if (!given) ar.template_vars.push_back(std::move(v));
        }
        prompt = Prompt(m, ar, t.chat);
      }))
    return;
  if (t.load_only) {  // Ollama: no prompt loads the model (keep_alive 0: unloads it)
    res->body =
        OllamaLoadBody(d, PeekString(req.body, "model"), t.keep_alive_given && t.keep_alive == 0);
    return;
  }
  std::vector<std::shared_ptr<RequestStream>> streams = Submit(m, prompt, ar, res);
  if (streams.empty() || !SubmitMorePrompts(m, ar, &streams, res)) return;
  const bool stream = d == Dialect::kOpenAi ? ar.stream : t.stream;
  const std::string model = ar.model.empty() ? m.ctx.model_name : ar.model;
  ResponseMeta meta{NewId(t.chat ? "chatcmpl-" : "cmpl-"), UnixNow(), ar.model};
  res->status = 200;
  res->content_type = DialectContentType(d, stream);
  if (stream) res->SetHeader("Cache-Control", "no-cache");
  const int n_prompt = static_cast<int>(prompt.size());
  res->stream = MakeStreamBody(std::move(streams), std::move(ar), std::move(meta), n_prompt);
  if (d == Dialect::kOpenAi) return;
  auto translator = MakeReplyTranslator(d, stream, model, n_prompt);
  if (t.store) {
    translator->OnResponse([this, body = std::move(t.body), instr = t.instructions,
                            owner = StoreKey(req, "")](const std::string& response) {
      responses_->Put(owner + ResponseId(response), response,
                      StoredConversation(body, response, instr));
    });
  }
  res->stream = MakeTranslatedBody(std::move(res->stream), std::move(translator));
}

// The request as the OpenAI body it means (OpenAI's own: as sent); a Responses request that
// continues a stored one gets that conversation first; Ollama's keep_alive is applied.
Translated Server::Translate(const HttpRequest& req, Dialect d, const std::string& body, bool chat,
                             LoadedModel& m) {
  Translated t;
  if (d == Dialect::kOpenAi) {
    t.body = body;
    t.chat = chat;
    return t;
  }
  t = ToOpenAiRequest(d, body);
  if (t.keep_alive_given) host_->SetKeepAlive(m, t.keep_alive);
  if (!t.previous_response_id.empty()) {
    std::string prior;
    if (!responses_->Conversation(StoreKey(req, t.previous_response_id), &prior)) {
      ApiError e;
      e.status = 404;
      e.type = "invalid_request_error";
      e.param = "previous_response_id";
      const ResponseStoreOptions& k = responses_->options();
      e.message =
          StrFormat("no stored response '%s' (responses are kept: the last %zu, %s, %g days)",
                    t.previous_response_id.c_str(), k.max_entries, FormatBytes(k.max_bytes).c_str(),
                    k.max_age_seconds / 86400);
      throw e;
    }
    t.body = ContinueConversation(t.body, prior, t.instructions);
  }
  return t;
}

// The spec's adapters (serve --lora, models.json), each served as a model id of its own.
void Server::LoadLoras(const ModelSpec& spec, LoadedModel* m) {
  for (LoraRegistry::Entry a : spec.loras) {
    if (a.name == spec.id ||
        std::find(spec.aliases.begin(), spec.aliases.end(), a.name) != spec.aliases.end())
      Fail("adapter '%s': the name is the model's own", a.name.c_str());
    a.adapter = m->service->engine().LoadLora(a.path, a.scale);
    const std::string name = a.name, path = a.path;
    const float scale = a.scale;
    if (!m->loras.Add(std::move(a)))
      Fail("adapter '%s': another adapter has the name", name.c_str());
    std::fprintf(stderr, "paddock: adapter '%s' on '%s' from %s (scale %g)\n", name.c_str(),
                 spec.id.c_str(), path.c_str(), scale);
  }
}

// POST /v1/load_lora_adapter, /v1/unload_lora_adapter (vLLM's): off without --lora-updates.
// With several models, base_model_name names the model (an adapter loaded at run time lasts
// while its model stays loaded).
void Server::LoraUpdate(const HttpRequest& req, HttpResponse* res, LoadedModel& m) {
  const bool load = req.path == "/v1/load_lora_adapter";
  Answering(res, [&] {
    if (!opt_.lora_updates) {
      ApiError e;
      e.status = 403;
      e.type = "permission_error";
      e.message =
          "adapters are loaded and unloaded at run time only when the server runs with "
          "--lora-updates";
      throw e;
    }
    const LoraUpdateRequest u = ParseLoraUpdate(req.body, load);
    ApiError e;
    e.param = "lora_name";
    if (load) {
      bool taken = false;
      try {
        (void)Resolve(u.name);
        taken = true;
      } catch (const ApiError&) {
      }
      if (taken ||
          !m.loras.Add({u.name, u.path, u.scale, m.service->engine().LoadLora(u.path, u.scale)})) {
        e.message = "the model id '" + u.name + "' is taken";
        throw e;
      }
    } else if (!m.loras.Remove(u.name)) {
      e.status = 404;
      e.message = "no adapter '" + u.name + "' is served on '" + m.id + "'";
      throw e;
    }
    res->body = LoraUpdatedBody(u.name, load);
  });
}

// GET / DELETE /v1/responses/{id}: a stored response (server/response_store.h).
void Server::StoredResponse(const HttpRequest& req, HttpResponse* res, const RouteEntry&) {
  const std::string id = req.path.substr(std::string_view("/v1/responses/").size());
  std::string body;
  const std::string key = StoreKey(req, id);
  const bool found =
      req.method == "DELETE" ? responses_->Erase(key) : responses_->Response(key, &body);
  if (!found) {
    ApiError e;
    e.status = 404;
    e.type = "invalid_request_error";
    e.message = "no stored response '" + id + "'";
    SendError(res, e);
    return;
  }
  res->body = req.method == "DELETE" ? ResponseDeletedBody(id) : body;
}

// POST of a generation in any API: its model, loaded if need be (Ollama: keep_alive 0 without a
// prompt for a model that is not loaded has nothing to load or unload).
void Server::OnGenerate(const HttpRequest& req, HttpResponse* res, const RouteEntry& route) {
  const Dialect d = route.api;
  const bool chat = (route.flags & RouteEntry::kChat) != 0;
  if (!Ready(res)) return;
  const std::string model = PeekString(req.body, "model");
  if (d == Dialect::kOllamaChat || d == Dialect::kOllamaGenerate) {
    // (A loaded model's request is translated once, by Generate.)
    const ModelSpec* spec = nullptr;
    if (!Answering(res, [&] { spec = &Resolve(model); })) return;
    if (!host_->TryAcquire(spec->id)) {
      Translated t;
      if (!Answering(res, [&] { t = ToOpenAiRequest(d, req.body); })) return;
      if (t.load_only && t.keep_alive_given && t.keep_alive == 0) {
        res->body = OllamaLoadBody(d, model, true);
        return;
      }
    }
  }
  WithModel(req, res, model,
            [this, d, chat](const HttpRequest& q, HttpResponse* r, LoadedModel& m) {
              Generate(q, r, d, chat, m);
            });
}

// OpenAI's /v1/embeddings, and Ollama's /api/embed(dings) run as it.
void Server::OnEmbeddings(const HttpRequest& req, HttpResponse* res, const RouteEntry& route) {
  const Dialect d = route.api;
  const std::string model = PeekString(req.body, "model");
  WithModel(req, res, model, [this, d](const HttpRequest& q, HttpResponse* r, LoadedModel& m) {
    if (d == Dialect::kOpenAi) return Embeddings(q, r, m);
    HttpRequest as_openai = q;
    try {
      const Translated t = ToOpenAiRequest(d, q.body);
      if (t.keep_alive_given) host_->SetKeepAlive(m, t.keep_alive);
      as_openai.body = t.body;
    } catch (const ApiError& e) {
      return SendError(r, e);
    }
    Embeddings(as_openai, r, m);
    if (r->status == 200 && r->stream)
      r->stream = MakeTranslatedBody(std::move(r->stream), MakeReplyTranslator(d, false, m.id, 0));
  });
}

void Server::OnTokenize(const HttpRequest& req, HttpResponse* res, const RouteEntry&) {
  const bool detokenize = req.path == "/detokenize";
  WithModel(req, res, PeekString(req.body, "model"),
            [this, detokenize](const HttpRequest& q, HttpResponse* r, LoadedModel& m) {
              detokenize ? Detokenize(q, r, m) : Tokenize(q, r, m);
            });
}

void Server::OnLora(const HttpRequest& req, HttpResponse* res, const RouteEntry&) {
  WithModel(req, res, PeekString(req.body, "base_model_name"),
            [this](const HttpRequest& q, HttpResponse* r, LoadedModel& m) { LoraUpdate(q, r, m); });
}

// GET /api/tags (every model) and /api/ps (the loaded ones).
void Server::OllamaTags(const HttpRequest& req, HttpResponse* res, const RouteEntry&) {
  if (!Ready(res)) return;
  const bool ps = req.path == "/api/ps";
  std::vector<ModelFacts> facts;
  const std::vector<ModelHost::Status> st = host_->Statuses();
  for (size_t i = 0; i < host_->specs().size(); ++i) {
    if (ps && st[i].state != ModelHost::State::kLoaded) continue;
    ModelFacts f = Facts(host_->specs()[i]);
    f.loaded_bytes = st[i].footprint;
    f.expires = st[i].expires;
    facts.push_back(std::move(f));
  }
  res->body = OllamaTagsBody(facts, ps);
}

void Server::OllamaShow(const HttpRequest& req, HttpResponse* res, const RouteEntry&) {
  if (!Ready(res)) return;
  const std::string model = PeekString(req.body, "model");
  const std::string name = model.empty() ? PeekString(req.body, "name") : model;
  const ModelSpec* spec = host_->Find(name);
  if (spec == nullptr && host_->specs().size() == 1 && !multi_) spec = &host_->specs()[0];
  std::vector<std::string> names;
  if (spec != nullptr) {
    names = spec->aliases;
    names.insert(names.begin(), spec->id);
  }
  Answering(res, [&] {
    res->body = OllamaShowBody(spec != nullptr ? Facts(*spec) : ModelFacts(), req.body, names);
  });
}

void Server::OllamaVersion(const HttpRequest&, HttpResponse* res, const RouteEntry&) {
  if (Ready(res)) res->body = OllamaVersionBody();
}

// Ollama's model management: models are files here.
void Server::OllamaUnavailable(const HttpRequest& req, HttpResponse* res, const RouteEntry&) {
  if (!Ready(res)) return;
  ApiError e;
  e.status = 501;
  e.type = "not_implemented";
  e.message = req.path == "/api/pull"
                  ? "downloading models is not available: this server reads GGUF files from "
                    "its --models-dir (copy a file there; GET /api/tags lists them)"
                  : req.path +
                        " is not available: models are the GGUF files of the "
                        "server's --models-dir, managed on disk";
  SendError(res, e);
}

// What Ollama's listings say about a served model.
ModelFacts Server::Facts(const ModelSpec& spec) const {
  const ModelInfo& info = spec.info;
  ModelFacts f;
  f.name = spec.id;
  f.family = info.arch;
  f.context = spec.context;
  f.size_bytes = info.weight_bytes;
  // The type holding the most bytes (Ollama's quantization_level).
  uint64_t most = 0;
  for (const auto& t : info.tensor_types) {
    if (t.bytes > most) {
      most = t.bytes;
      f.quantization = t.type;
    }
  }
  const double params = static_cast<double>(info.n_params);
  f.parameter_size = params >= 1e9   ? StrFormat("%.1fB", params / 1e9)
                     : params >= 1e6 ? StrFormat("%.1fM", params / 1e6)
                                     : StrFormat("%.0fK", params / 1e3);
  f.chat_template = info.chat_template;
  try {
    f.tools =
        ChatFormatter::Create(info, spec.chat_template, spec.chat_template_file)->tool_format() !=
        ToolFormat::kHermes;
  } catch (const Error&) {
    f.tools = false;
  }
  return f;
}

// GET /v1/models/{id} (client.models.retrieve); the id as sent, percent-decoded (a model id
// may hold '/').
void Server::Model(const std::string& raw_id, HttpResponse* res) {
  if (state_.load() != State::kReady && state_.load() != State::kDraining) {
    Models(res);  // the same 503
    return;
  }
  std::string id;
  for (size_t i = 0; i < raw_id.size(); ++i) {
    const auto hex = [](char c) {
      return c >= '0' && c <= '9'   ? c - '0'
             : c >= 'a' && c <= 'f' ? c - 'a' + 10
             : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                    : -1;
    };
    if (raw_id[i] == '%' && i + 2 < raw_id.size() && hex(raw_id[i + 1]) >= 0 &&
        hex(raw_id[i + 2]) >= 0) {
      id += static_cast<char>(hex(raw_id[i + 1]) * 16 + hex(raw_id[i + 2]));
      i += 2;
    } else {
      id += raw_id[i];
    }
  }
  try {
    res->body = ModelBody(Served(), id, created_);
  } catch (const ApiError& e) {
    SendError(res, e);
  }
}

// Matryoshka truncation (OpenAI's `dimensions`): each vector's first `dims` components, scaled
// to unit length again.
static void TruncateEmbeddings(std::vector<std::vector<float>>* vs, int dims) {
  for (auto& v : *vs) {
    v.resize(std::min(v.size(), static_cast<size_t>(dims)));
    double n = 0;
    for (float x : v) n += static_cast<double>(x) * x;
    const double k = n > 0 ? 1.0 / std::sqrt(n) : 0;
    for (float& x : v) x = static_cast<float>(x * k);
  }
}

// POST /v1/embeddings: computed on the engine thread between steps, all inputs of a request in
// shared forwards; the handler returns at once and the body follows when the vectors are done.
void Server::Embeddings(const HttpRequest& req, HttpResponse* res, LoadedModel& m) {
  const ApiContext& ctx_ = m.ctx;
  Answering(res, [&] {
    EmbeddingsRequest er = ParseEmbeddings(req.body, ctx_);
    const Engine& engine = m.service->engine();
    if (engine.info().kind == ModelKind::kRerank) {
      ApiError e;
      e.param = "model";
      e.message = StrFormat(
          "'%s' is a reranker: it scores documents against a query (/v1/rerank), it gives no "
          "embeddings",
          m.ctx.model_name.c_str());
      throw e;
    }
    std::vector<std::vector<int32_t>> inputs = std::move(er.token_inputs);
    for (const auto& t : er.texts) inputs.push_back(engine.Tokenize(t, engine.AddsBos()));
    const int width = engine.info().dim;
    if (er.dimensions > width) {
      ApiError e;
      e.param = "dimensions";
      e.message = StrFormat("dimensions %d exceeds the width %d of '%s'", er.dimensions, width,
                            m.ctx.model_name.c_str());
      throw e;
    }
    int tokens = 0;
    for (auto& in : inputs) {
      if (er.truncate && static_cast<int>(in.size()) > ctx_.context)
        in.resize(static_cast<size_t>(ctx_.context));  // its first tokens (TEI, Ollama)
      if (static_cast<int>(in.size()) > ctx_.context) {
        ApiError e;
        e.param = "input";
        e.code = "context_length_exceeded";
        e.message =
            StrFormat("an input of %zu tokens exceeds the context of %d", in.size(), ctx_.context);
        throw e;
      }
      tokens += static_cast<int>(in.size());
    }
    const std::string p = !opt_.pooling.empty()            ? opt_.pooling
                          : !engine.info().pooling.empty() ? engine.info().pooling
                                                           : "mean";
    const Service::Pooling pooling = p == "last"  ? Service::Pooling::kLast
                                     : p == "cls" ? Service::Pooling::kCls
                                                  : Service::Pooling::kMean;
    // The vectors come later, from the engine thread: the response waits as a body source, so
    // the event thread goes on serving other connections meanwhile.
    auto body = std::make_shared<DeferredBody>();
    m.service->EmbedAsync(
        std::move(inputs), pooling,
        [body, model = er.model, tokens, base64 = er.base64, dims = er.dimensions](
            std::vector<std::vector<float>> v, const std::string& error) {
          if (dims > 0) TruncateEmbeddings(&v, dims);
          if (!error.empty()) return body->SetError(error);
          body->Set(EmbeddingsBody(v, model, tokens, base64));
        });
    res->stream = body;
  });
}

void Server::Tokenize(const HttpRequest& req, HttpResponse* res, LoadedModel& m) {
  try {
    const TokenizeRequest t = ParseTokenize(req.body);
    const Engine& engine = m.service->engine();
    const std::vector<int32_t> ids =
        engine.Tokenize(t.content, t.add_special && engine.AddsBos(), t.parse_special);
    std::vector<std::string> pieces;
    // A token's piece is what it adds after its predecessor (so SentencePiece's leading space
    // is kept, which detokenizing it alone would drop).
    for (size_t i = 0; t.with_pieces && i < ids.size(); ++i) {
      if (i == 0) {
        pieces.push_back(engine.Detokenize({ids[0]}));
        continue;
      }
      const std::string before = engine.Detokenize({ids[i - 1]});
      const std::string both = engine.Detokenize({ids[i - 1], ids[i]});
      pieces.push_back(both.compare(0, before.size(), before) == 0 ? both.substr(before.size())
                                                                   : engine.Detokenize({ids[i]}));
    }
    res->body = TokenizeBody(ids, t.with_pieces ? &pieces : nullptr);
  } catch (const ApiError& e) {
    SendError(res, e);
  }
}

void Server::Detokenize(const HttpRequest& req, HttpResponse* res, LoadedModel& m) {
  try {
    res->body =
        DetokenizeBody(m.service->engine().Detokenize(ParseDetokenize(req.body, m.ctx.n_vocab)));
  } catch (const ApiError& e) {
    SendError(res, e);
  }
}

}  // namespace paddock::server::server_detail
