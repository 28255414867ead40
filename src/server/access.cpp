// server/access.cpp: who may use the server and from where: API keys (constant-time checks,
// Bearer or x-api-key), CORS for browsers, and whose stored responses a request sees.
#include <cinttypes>
#include <string>
#include <string_view>
#include <vector>

#include "base/hash64.h"
#include "base/strings.h"
#include "server/server_impl.h"

namespace paddock::server::server_detail {

// Equal in time whatever the first differing byte: every byte of every key is compared.
bool KeyMatches(std::string_view given, const std::vector<std::string>& keys) {
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

// A preflight's Access-Control-Request-Headers as the answer's Allow-Headers: a list of header
// names (token characters, commas, spaces; at most 2 KiB), else the two a client needs.
std::string PreflightHeaders(std::string_view asked) {
  const std::string_view kDefault = "Authorization, Content-Type";
  if (asked.empty() || asked.size() > 2048) return std::string(kDefault);
  for (char c : asked) {
    const bool token = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '-' || c == '_' || c == '.' || c == ',' || c == ' ';
    if (!token) return std::string(kDefault);
  }
  return std::string(asked);
}

bool Server::Cors(const HttpRequest& req, HttpResponse* res) const {
  if (opt_.cors_origins.empty()) return false;
  const std::string_view origin = req.Header("Origin");
  if (origin.empty()) return false;
  bool any = false, listed = false;
  for (const std::string& o : opt_.cors_origins) {
    any |= o == "*";
    listed |= o == origin;
  }
  if (!any && !listed) return false;
  res->SetHeader("Access-Control-Allow-Origin", listed ? std::string(origin) : "*");
  res->SetHeader("Access-Control-Expose-Headers", "Retry-After");
  res->SetHeader("Vary", "Origin");
  return true;
}

// The key a request was let in with (Authorization: Bearer first, as Authorized checks).
static std::string_view RequestKey(const HttpRequest& req, const std::vector<std::string>& keys) {
  static const std::string_view kBearer = "Bearer ";
  const std::string_view auth = req.Header("Authorization");
  if (auth.size() > kBearer.size() && auth.substr(0, kBearer.size()) == kBearer &&
      KeyMatches(auth.substr(kBearer.size()), keys))
    return auth.substr(kBearer.size());
  return req.Header("x-api-key");
}

std::string Server::StoreKey(const HttpRequest& req, const std::string& id) const {
  if (opt_.api_keys.empty()) return id;
  const std::string_view key = RequestKey(req, opt_.api_keys);
  return StrFormat("k%016" PRIx64 ":%s", HashBytes(key.data(), key.size(), 0x5eed0f5707edULL),
                   id.c_str());
}

bool Server::Authorized(const HttpRequest& req, HttpResponse* res) {
  if (opt_.api_keys.empty()) return true;
  const std::string& p = req.path;
  const bool guarded = p.rfind("/v1/", 0) == 0 || p == "/v1" || p.rfind("/api/", 0) == 0 ||
                       p == "/tokenize" || p == "/detokenize" ||
                       (opt_.auth_health && (p == "/health" || p == "/metrics"));
  if (!guarded) return true;
  const std::string_view auth = req.Header("Authorization");
  // (Anthropic's clients send the key as x-api-key.)
  const std::string_view x = req.Header("x-api-key");
  if (KeyMatches(RequestKey(req, opt_.api_keys), opt_.api_keys)) return true;
  ApiError e;
  e.status = 401;
  e.type = "invalid_request_error";
  e.code = "invalid_api_key";
  e.message = auth.empty() && x.empty()
                  ? "no API key given (send Authorization: Bearer KEY, or x-api-key: KEY)"
                  : "the API key is not valid";
  res->SetHeader("WWW-Authenticate", "Bearer");
  SendError(res, e);
  return false;
}

}  // namespace paddock::server::server_detail
