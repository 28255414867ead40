// server/server.h: the OpenAI-compatible HTTP server over a paddock::Service.
//
// Endpoints: POST /v1/completions, POST /v1/chat/completions (streaming as server-sent events
// in OpenAI's chunk format, ending in [DONE]), GET /v1/models, GET /health (503 while the
// model loads), GET /metrics (Prometheus text, vLLM-compatible names). The listening socket is
// open before the model loads. SIGTERM/SIGINT: stop taking requests, let in-flight ones finish
// within the grace period, exit 0.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "paddock/paddock.h"
#include "paddock/service.h"

namespace paddock::server {

struct ServerOptions {
  EngineOptions engine;
  ServiceOptions service;
  std::string host = "127.0.0.1";
  int port = 8080;                         // 0: any free port (printed on stderr)
  std::string model_name;                  // served name (default: the file's stem)
  std::vector<std::string> model_aliases;  // more names requests may use (listed in /v1/models)
  // Several models: every GGUF file under this directory (server/model_registry.h), instead
  // of engine.model_path, each loaded when a request names it and unloaded (least recently
  // used, idle) to keep memory_budget.
  std::string models_dir;
  // Bytes for weights + KV + scratch of all loaded models; 0: with models_dir, 75% of the
  // memory available at start; with one model, no limit (a model over a given budget fails).
  uint64_t memory_budget = 0;
  // With models_dir: seconds an idle model stays loaded (Ollama's keep_alive; < 0: forever).
  double keep_alive = 300;
  // LoRA adapters served as model ids of their own: NAME=FILE or NAME=FILE:SCALE.
  std::vector<std::string> loras;
  // POST /v1/load_lora_adapter and /v1/unload_lora_adapter accepted (they read files named by
  // the request: off unless the operator allows it, as vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING).
  bool lora_updates = false;
  std::string chat_template;  // a built-in chat template family instead of the model's template
  std::string chat_template_file;  // a Jinja chat template file instead of the model's
  // Chat replies of reasoning models: "auto" (split <think>...</think> into reasoning_content
  // when the chat template writes such sections; a harmony model's analysis channel, gpt-oss),
  // "deepseek" (always split), "none" (never: the reply as the model wrote it).
  std::string reasoning_format = "auto";
  std::string pooling;  // embeddings: mean, last or cls (empty: the model file's, else mean)
  // The Responses API's stored responses: an SQLite database in this directory, kept across
  // restarts ("": in memory; the CLI's default is $XDG_DATA_HOME/paddock), retained by count,
  // bytes and age in seconds (0: no age limit).
  std::string data_dir;
  bool data_dir_is_default = false;  // not asked for: one that cannot be used falls back to memory
  size_t responses_max = 10000;
  uint64_t responses_max_bytes = uint64_t{256} << 20;
  double responses_max_age = 30 * 86400.0;
  bool responses_refuse_damaged = false;  // a damaged database: an error at start, not moved aside
  size_t max_body_bytes = 8u << 20;
  int http_threads = 0;        // event threads (0: the HTTP layer's default, 2)
  size_t max_connections = 0;  // open connections at most (0: 4096); more are closed at once
  double header_timeout = 0;   // seconds for the request line and headers (0: 10)
  double body_timeout = 0;     // seconds for a request body (0: 60)
  double idle_timeout = 0;     // seconds without a byte moving either way (0: 30)
  double request_timeout = 0;  // default per-request deadline in seconds (0: none)
  double grace_seconds = 30;   // on SIGTERM, how long in-flight requests may take
  // Control tokens spelled in a raw completions prompt become those tokens (off: the prompt is
  // text). Chat messages are always text: control tokens come only from the template.
  bool special_in_prompts = false;
  // Bearer keys: when any is set, every /v1 route needs `Authorization: Bearer KEY` (401
  // otherwise); with auth_health, /health and /metrics do too.
  std::vector<std::string> api_keys;
  bool auth_health = false;
  // The web page (chat and dashboard) at / (false: 404, as any unknown path).
  bool ui = true;
  // Browser origins allowed to call the API ("*": any); empty: no CORS headers.
  std::vector<std::string> cors_origins;
  // In a cluster (deploy/haproxy): the name sent as X-Paddock-Replica on every answer; the
  // status of a queue-full refusal (429, or 503 so a balancer retries it elsewhere; either
  // carries X-Paddock-Overloaded); and, on SIGTERM, how long /health fails while requests are
  // still taken, so balancers and Kubernetes stop sending before the replica refuses work.
  std::string replica_name;
  int busy_status = 429;
  double drain_seconds = 0;
  // HAProxy agent-check port (0: none): each connection gets one line, "ready up 100%" while the
  // replica has room, "drain" while its queue is full or it is draining, so the balancer sends
  // new requests elsewhere.
  int agent_port = 0;
  // Called once the server listens (the bound port) — for tests and the CLI.
  std::function<void(int port)> on_listening;
};

// Serves until SIGTERM/SIGINT; returns the process exit code. Throws Error if the socket
// cannot be bound; a model that fails to load is reported and gives exit code 1.
int RunServer(const ServerOptions& options);

}  // namespace paddock::server
