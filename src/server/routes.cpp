// server/routes.cpp: the one table of routes (server_impl.h: RouteEntry) and the routing.
//
// Each path and method is bound to its handler on one line, with the API whose shape its
// errors take. A path in no row is a 404, a known path with another method a 405 naming the
// ones it takes: by construction, never another handler's answer.
#include <string_view>

#include "model/stage_link.h"
#include "server/server_impl.h"
#include "server/ui.h"

namespace paddock::server::server_detail {

namespace {

// The page's own files only: no inline script may run, nothing loads from elsewhere, so model
// output that is HTML stays text even if it ever reached the page as markup.
void ServePage(const UiAsset& page, HttpResponse* res) {
  res->content_type = page.content_type;
  res->body.assign(reinterpret_cast<const char*>(page.data), page.size);
  res->SetHeader("Content-Security-Policy",
                 "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                 "img-src 'self' data:; base-uri 'none'; form-action 'none'; "
                 "frame-ancestors 'none'");
  res->SetHeader("X-Content-Type-Options", "nosniff");
  res->SetHeader("Cache-Control", "no-cache");
}

// Whether `path` is the route's: equal, or for a route ending in "/{id}" its prefix and a
// non-empty id (which may hold '/').
bool Matches(std::string_view route, std::string_view path) {
  constexpr std::string_view kId = "{id}";
  if (route.size() > kId.size() && route.substr(route.size() - kId.size()) == kId) {
    const std::string_view prefix = route.substr(0, route.size() - kId.size());
    return path.size() > prefix.size() && path.substr(0, prefix.size()) == prefix;
  }
  return route == path;
}

}  // namespace

const std::vector<RouteEntry>& Server::Routes() {
  using Q = const HttpRequest&;
  using R = HttpResponse*;
  using D = Dialect;
  constexpr unsigned kRun = RouteEntry::kComputes, kBg = RouteEntry::kBackground;
  // clang-format off
  static const std::vector<RouteEntry> kRoutes = {
    {"/v1/completions", "POST", D::kOpenAi, kRun, [](Server& s, Q q, R r) { s.OnGenerate(q, r, D::kOpenAi, false); }},
    {"/v1/chat/completions", "POST", D::kOpenAi, kRun, [](Server& s, Q q, R r) { s.OnGenerate(q, r, D::kOpenAi, true); }},
    {"/v1/embeddings", "POST", D::kOpenAi, kRun, [](Server& s, Q q, R r) { s.OnEmbeddings(q, r, D::kOpenAi); }},
    {"/v1/models", "GET", D::kOpenAi, 0, [](Server& s, Q, R r) { s.Models(r); }},
    {"/v1/models/{id}", "GET", D::kOpenAi, 0, [](Server& s, Q q, R r) { s.Model(q.path.substr(11), r); }},
    {"/v1/messages", "POST", D::kAnthropic, kRun, [](Server& s, Q q, R r) { s.OnGenerate(q, r, D::kAnthropic, true); }},
    {"/v1/responses", "POST", D::kResponses, kRun, [](Server& s, Q q, R r) { s.OnGenerate(q, r, D::kResponses, true); }},
    {"/v1/responses/{id}", "GET", D::kResponses, 0, [](Server& s, Q q, R r) { s.StoredResponse(q, r); }},
    {"/v1/responses/{id}", "DELETE", D::kResponses, 0, [](Server& s, Q q, R r) { s.StoredResponse(q, r); }},
    {"/v1/load_lora_adapter", "POST", D::kOpenAi, kRun | kBg, [](Server& s, Q q, R r) { s.OnLora(q, r); }},
    {"/v1/unload_lora_adapter", "POST", D::kOpenAi, kRun, [](Server& s, Q q, R r) { s.OnLora(q, r); }},
    {"/tokenize", "POST", D::kOpenAi, 0, [](Server& s, Q q, R r) { s.OnTokenize(q, r, false); }},
    {"/detokenize", "POST", D::kOpenAi, 0, [](Server& s, Q q, R r) { s.OnTokenize(q, r, true); }},
    {"/health", "GET", D::kOpenAi, 0, [](Server& s, Q, R r) { s.Health(r); }},
    {"/metrics", "GET", D::kOpenAi, 0, [](Server& s, Q, R r) { s.Metrics(r); }},
    {"/api/chat", "POST", D::kOllamaChat, kRun, [](Server& s, Q q, R r) { s.OnGenerate(q, r, D::kOllamaChat, true); }},
    {"/api/generate", "POST", D::kOllamaGenerate, kRun, [](Server& s, Q q, R r) { s.OnGenerate(q, r, D::kOllamaGenerate, false); }},
    {"/api/embed", "POST", D::kOllamaEmbed, kRun, [](Server& s, Q q, R r) { s.OnEmbeddings(q, r, D::kOllamaEmbed); }},
    {"/api/embeddings", "POST", D::kOllamaEmbed, kRun, [](Server& s, Q q, R r) { s.OnEmbeddings(q, r, D::kOllamaEmbed); }},
    {"/api/tags", "GET", D::kOllama, 0, [](Server& s, Q, R r) { s.OllamaTags(r, false); }},
    {"/api/ps", "GET", D::kOllama, 0, [](Server& s, Q, R r) { s.OllamaTags(r, true); }},
    {"/api/show", "POST", D::kOllama, 0, [](Server& s, Q q, R r) { s.OllamaShow(q, r); }},
    {"/api/version", "GET", D::kOllama, 0, [](Server& s, Q, R r) { s.OllamaVersion(r); }},
    {"/api/pull", "POST", D::kOllama, 0, [](Server& s, Q q, R r) { s.OllamaUnavailable(q, r); }},
    {"/api/push", "POST", D::kOllama, 0, [](Server& s, Q q, R r) { s.OllamaUnavailable(q, r); }},
    {"/api/create", "POST", D::kOllama, 0, [](Server& s, Q q, R r) { s.OllamaUnavailable(q, r); }},
    {"/api/copy", "POST", D::kOllama, 0, [](Server& s, Q q, R r) { s.OllamaUnavailable(q, r); }},
    {"/api/delete", "DELETE", D::kOllama, 0, [](Server& s, Q q, R r) { s.OllamaUnavailable(q, r); }},
  };
  // clang-format on
  return kRoutes;
}

// The route of a request, or null; *allow: the methods its path takes when only the method
// differs (GET also answers HEAD), else empty.
const RouteEntry* Server::FindRoute(const HttpRequest& req, std::string* allow) {
  allow->clear();
  for (const RouteEntry& e : Routes()) {
    if (!Matches(e.path, req.path)) continue;
    const std::string_view m = e.method;
    if (req.method == m || (m == "GET" && req.method == "HEAD")) return &e;
    *allow += (allow->empty() ? "" : ", ") + std::string(m) + (m == "GET" ? ", HEAD" : "");
  }
  if (!allow->empty()) *allow += ", OPTIONS";
  return nullptr;
}

// The API a request speaks: its route's, else (an unknown path) the one its path or headers
// name: Ollama's under /api/, Anthropic's under /v1/messages or with its version header.
Dialect Server::ApiOf(const HttpRequest& req) {
  std::string allow;
  if (const RouteEntry* e = FindRoute(req, &allow)) return e->api;
  for (const RouteEntry& e : Routes())
    if (Matches(e.path, req.path)) return e.api;
  const std::string_view p = req.path;
  if (p.substr(0, 5) == "/api/") return Dialect::kOllama;
  if (p.substr(0, 12) == "/v1/messages" || !req.Header("anthropic-version").empty())
    return Dialect::kAnthropic;
  return Dialect::kOpenAi;
}

bool Server::InBackground(const HttpRequest& req) {
  std::string allow;
  const RouteEntry* e = FindRoute(req, &allow);
  return e != nullptr && (e->flags & RouteEntry::kBackground) != 0;
}

// The web page's files (GET), then the table.
void Server::Route(const HttpRequest& req, HttpResponse* res) {
  ApiError e;
  std::string allow;
  const RouteEntry* hit = FindRoute(req, &allow);
  const UiAsset* page = opt_.ui ? FindUiAsset(req.path) : nullptr;
  if (page != nullptr && (req.method == "GET" || req.method == "HEAD"))
    return ServePage(*page, res);
  if (hit == nullptr && page != nullptr) allow = "GET, HEAD, OPTIONS";  // the page's files
  if (hit == nullptr && !allow.empty()) {
    e.status = 405;
    e.message =
        StrFormat("%s takes %s", req.path.c_str(),
                  allow.substr(0, allow.size() - std::string_view(", OPTIONS").size()).c_str());
    res->SetHeader("Allow", allow);
    return SendError(res, e);
  }
  if (hit == nullptr) {
    e.status = 404;
    e.type = "not_found";
    e.message = StrFormat("no such endpoint: %s %s", req.method.c_str(), req.path.c_str());
    return SendError(res, e);
  }
  if ((hit->flags & RouteEntry::kComputes) != 0 && opt_.engine.stages) {
    // A pipeline with a stage lost runs nothing until restarted.
    if (std::string lost = opt_.engine.stages->Lost(); !lost.empty()) {
      e.status = 503;
      e.type = "server_error";
      e.code = "pipeline_stage_lost";
      e.message = std::move(lost);
      return SendError(res, e);
    }
  }
  hit->fn(*this, req, res);
}

}  // namespace paddock::server::server_detail
