// server/api_rerank.cpp: reranking: the request and response shapes (Jina's and llama-server's
// /v1/rerank and /rerank, Cohere's /v2/rerank) and the handler, which scores every
// (query, document) pair on the engine thread in shared steps (Service::EmbedAsync, kRank).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>

#include "base/strings.h"
#include "server/api.h"
#include "server/api_json.h"
#include "server/bodies.h"
#include "server/server_impl.h"

namespace paddock::server {

using namespace api_detail;

RerankRequest ParseRerank(std::string_view body, const ApiContext& ctx, bool cohere) {
  const json j = ParseBody(body, kRerank);
  RerankRequest r;
  r.model = Text(j, "model");
  if (r.model.size() > kMaxModelBytes)
    Bad("model", "'model' is at most " + std::to_string(kMaxModelBytes) + " bytes");
  if (!r.model.empty() && r.model != ctx.model_name &&
      std::find(ctx.aliases.begin(), ctx.aliases.end(), r.model) == ctx.aliases.end())
    throw UnknownModel(ctx, r.model);
  if (r.model.empty()) r.model = ctx.model_name;
  const json* q = Field(j, "query");
  if (q == nullptr || !q->is_string() || q->get<std::string>().empty())
    Bad("query", "'query' must be a non-empty string");
  r.query = q->get<std::string>();
  const json* docs = Field(j, "documents");
  if (docs == nullptr || !docs->is_array() || docs->empty())
    Bad("documents", "'documents' must be a non-empty array of strings or {\"text\": ...}");
  if (docs->size() > kMaxEmbedInputs)
    Bad("documents",
        StrFormat("%zu documents: at most %zu per request", docs->size(), kMaxEmbedInputs));
  for (const json& d : *docs) {
    const json* text = d.is_object() ? Field(d, "text") : &d;
    if (text == nullptr || !text->is_string())
      Bad("documents", "each document must be a string or an object with a 'text' string");
    r.documents.push_back(text->get<std::string>());
  }
  r.top_n = static_cast<int>(Integer(j, "top_n", kRerank));
  r.return_documents = Bool(j, "return_documents", !cohere);
  r.max_tokens_per_doc = static_cast<int>(Integer(j, "max_tokens_per_doc", kRerank));
  r.truncate = Bool(j, "truncate", kRerank);
  return r;
}

std::string RerankBody(const RerankRequest& r, const std::vector<float>& scores, int tokens,
                       bool cohere) {
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  if (r.top_n > 0 && static_cast<size_t>(r.top_n) < order.size())
    order.resize(static_cast<size_t>(r.top_n));
  json results = json::array();
  for (size_t i : order) {
    const double s = scores[i];
    json e = {{"index", i}, {"relevance_score", cohere ? 1.0 / (1.0 + std::exp(-s)) : s}};
    if (r.return_documents) e["document"] = {{"text", r.documents[i]}};
    results.push_back(std::move(e));
  }
  json j;
  if (cohere) {
    j = {{"id", NewId("rerank-")},
         {"results", std::move(results)},
         {"meta", {{"billed_units", {{"search_units", 1}}}}}};
  } else {
    j = {{"model", r.model},
         {"object", "list"},
         {"results", std::move(results)},
         {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}};
  }
  return Dump(j);
}

namespace server_detail {

[[noreturn]] static void OverContext(const char* param, std::string message) {
  ApiError e;
  e.param = param;
  e.code = "context_length_exceeded";
  e.message = std::move(message);
  throw e;
}

// Every document's pair with the query (cut as the request says); *tokens: their sum.
// ApiError: a pair over the context.
static std::vector<std::vector<int32_t>> RerankPairs(const Engine& engine, const RerankRequest& rr,
                                                     int ctx, int* tokens) {
  const std::vector<int32_t> query = engine.Tokenize(rr.query, false);
  // The pair's own tokens (its specials, by the vocabulary's flags) and the query's: what a
  // document has room for.
  const int specials = static_cast<int>(engine.RerankInput({}, {}).size());
  const int room = ctx - static_cast<int>(query.size()) - specials;
  if (room < 1)
    OverContext("query", StrFormat("the query is %zu tokens: with the pair's %d special tokens it "
                                   "leaves no room for a document in the context of %d (shorten "
                                   "the query)",
                                   query.size(), specials, ctx));
  std::vector<std::vector<int32_t>> pairs;
  *tokens = 0;
  for (const std::string& text : rr.documents) {
    std::vector<int32_t> doc = engine.Tokenize(text, false);
    if (rr.max_tokens_per_doc > 0 && static_cast<int>(doc.size()) > rr.max_tokens_per_doc)
      doc.resize(static_cast<size_t>(rr.max_tokens_per_doc));
    if (rr.truncate && static_cast<int>(doc.size()) > room) doc.resize(static_cast<size_t>(room));
    pairs.push_back(engine.RerankInput(query, doc));
    if (static_cast<int>(pairs.back().size()) > ctx)
      OverContext("documents", StrFormat("document %zu with the query is %zu tokens, over the "
                                         "context of %d (truncate: true cuts the document to fit)",
                                         pairs.size() - 1, pairs.back().size(), ctx));
    *tokens += static_cast<int>(pairs.back().size());
  }
  return pairs;
}

void Server::OnRerank(const HttpRequest& req, HttpResponse* res, const RouteEntry&) {
  const bool cohere = req.path == "/v2/rerank";
  WithModel(req, res, PeekString(req.body, "model"),
            [this, cohere](const HttpRequest& q, HttpResponse* r, LoadedModel& m) {
              Rerank(q, r, m, cohere);
            });
}

void Server::Rerank(const HttpRequest& req, HttpResponse* res, LoadedModel& m, bool cohere) {
  Answering(res, [&] {
    auto rr = std::make_shared<RerankRequest>(ParseRerank(req.body, m.ctx, cohere));
    const Engine& engine = m.service->engine();
    if (engine.info().kind != ModelKind::kRerank) {
      ApiError e;
      e.param = "model";
      e.message = StrFormat(
          "'%s' is %s: it does not rerank (a reranker is an encoder with a "
          "classification head)",
          m.ctx.model_name.c_str(),
          engine.info().kind == ModelKind::kEmbedding ? "an embedding model"
                                                      : "a text generation model");
      throw e;
    }
    int tokens = 0;
    std::vector<std::vector<int32_t>> pairs = RerankPairs(engine, *rr, m.ctx.context, &tokens);
    auto body = std::make_shared<DeferredBody>();
    m.service->EmbedAsync(
        std::move(pairs), Service::Pooling::kRank,
        [body, rr, tokens, cohere](std::vector<std::vector<float>> v, const std::string& error) {
          if (!error.empty()) return body->SetError(error);
          std::vector<float> scores;
          for (const auto& s : v) scores.push_back(s.empty() ? 0.0f : s[0]);
          body->Set(RerankBody(*rr, scores, tokens, cohere));
        });
    res->stream = body;
  });
}

}  // namespace server_detail
}  // namespace paddock::server
