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
  using S = Server;
  using D = Dialect;
  constexpr unsigned kRun = RouteEntry::kComputes, kBg = RouteEntry::kBackground;
  constexpr unsigned kChat = RouteEntry::kChat;
  static const std::vector<RouteEntry> kRoutes = {
      {"/v1/completions", "POST", D::kOpenAi, kRun, &S::OnGenerate},
      {"/v1/chat/completions", "POST", D::kOpenAi, kRun | kChat, &S::OnGenerate},
      {"/v1/embeddings", "POST", D::kOpenAi, kRun, &S::OnEmbeddings},
      {"/v1/rerank", "POST", D::kOpenAi, kRun, &S::OnRerank},
      {"/rerank", "POST", D::kOpenAi, kRun, &S::OnRerank},
      {"/v2/rerank", "POST", D::kOpenAi, kRun, &S::OnRerank},
      {"/v1/models", "GET", D::kOpenAi, 0, &S::OnModels},
      {"/v1/models/{id}", "GET", D::kOpenAi, 0, &S::OnModel},
      {"/v1/messages", "POST", D::kAnthropic, kRun | kChat, &S::OnGenerate},
      {"/v1/responses", "POST", D::kResponses, kRun | kChat, &S::OnGenerate},
      {"/v1/responses/{id}", "GET", D::kResponses, 0, &S::StoredResponse},
      {"/v1/responses/{id}", "DELETE", D::kResponses, 0, &S::StoredResponse},
      {"/v1/load_lora_adapter", "POST", D::kOpenAi, kRun | kBg, &S::OnLora},
      {"/v1/unload_lora_adapter", "POST", D::kOpenAi, kRun, &S::OnLora},
      {"/tokenize", "POST", D::kOpenAi, 0, &S::OnTokenize},
      {"/detokenize", "POST", D::kOpenAi, 0, &S::OnTokenize},
      {"/health", "GET", D::kOpenAi, 0, &S::OnHealth},
      {"/metrics", "GET", D::kOpenAi, 0, &S::OnMetrics},
      {"/api/chat", "POST", D::kOllamaChat, kRun | kChat, &S::OnGenerate},
      {"/api/generate", "POST", D::kOllamaGenerate, kRun, &S::OnGenerate},
      {"/api/embed", "POST", D::kOllamaEmbed, kRun, &S::OnEmbeddings},
      {"/api/embeddings", "POST", D::kOllamaEmbed, kRun, &S::OnEmbeddings},
      {"/api/tags", "GET", D::kOllama, 0, &S::OllamaTags},
      {"/api/ps", "GET", D::kOllama, 0, &S::OllamaTags},
      {"/api/show", "POST", D::kOllama, 0, &S::OllamaShow},
      {"/api/version", "GET", D::kOllama, 0, &S::OllamaVersion},
      {"/api/pull", "POST", D::kOllama, 0, &S::OllamaUnavailable},
      {"/api/push", "POST", D::kOllama, 0, &S::OllamaUnavailable},
      {"/api/create", "POST", D::kOllama, 0, &S::OllamaUnavailable},
      {"/api/copy", "POST", D::kOllama, 0, &S::OllamaUnavailable},
      {"/api/delete", "DELETE", D::kOllama, 0, &S::OllamaUnavailable},
  };
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
  for (const RouteEntry& e : Routes())  // (a path's rows all name one API)
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
  (this->*hit->fn)(req, res, *hit);
}

}  // namespace paddock::server::server_detail
