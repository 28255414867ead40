// paddock serve: the OpenAI-compatible HTTP server.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "args.h"
#include "base/strings.h"
#include "commands.h"
#include "paddock/service.h"
#include "progress.h"
#include "server/model_host.h"
#include "server/response_store.h"
#include "server/server.h"

namespace paddock::cli {

extern const std::vector<OptionSpec> kKvSpecs;
uint64_t ParseBytes(const std::string& flag, const std::string& s);
void AddKvOptions(const Args& args, EngineOptions* eo);
void AddSpecOptions(const Args& args, EngineOptions* eo);  // cmd_run.cpp
extern const std::vector<OptionSpec> kSpecSpecs;
void AddTraceOption(const Args& args, EngineOptions* eo);  // cmd_run.cpp
extern const OptionSpec kTraceSpec;

namespace {

// The model and how its answers are shaped.
const std::vector<OptionSpec>& ModelSpecs() {
  static const std::vector<OptionSpec> s = {
      {{"-m", "--model"}, true, "model file: GGUF or llama2.c checkpoint (or --models-dir)"},
      {{"--models-dir"},
       true,
       "serve every GGUF file under DIR (ids: file stems, or names and options from DIR/"
       "models.json), each loaded when a request names it, within --memory-budget"},
      {{"--memory-budget"},
       true,
       "bytes for weights + KV + scratch of all loaded models, e.g. 6G or 60% of the "
       "available memory (default with --models-dir: 75%); least recently used idle models "
       "are unloaded to keep it"},
      {{"--keep-alive"},
       true,
       "with --models-dir: how long an idle model stays loaded (Ollama's keep_alive: 300, 5m, "
       "1h; -1 forever, 0 unload when idle; default 5m); requests may set their own"},
      {{"-z", "--tokenizer"}, true, "tokenizer file (llama2.c tokenizer.bin or vocabulary GGUF)"},
      {{"--host"}, true, "address to listen on (default 127.0.0.1)"},
      {{"--port"}, true, "port (default 8080; 0 picks a free one)"},
      {{"--model-name"},
       true,
       "name the API serves the model under (default: the file name without extension)"},
      {{"--served-model-name"},
       true,
       "a name the model answers to (repeatable: the first is the main one, the rest aliases "
       "that clients may hard-code; all listed in /v1/models)",
       true},
      {{"--mmproj"},
       true,
       "the model's vision projector (llama.cpp's mmproj GGUF: LLaVA, Gemma 3, SmolVLM): "
       "image_url parts, Anthropic image blocks and Ollama images in requests"},
      {{"--encoder-bf16"},
       false,
       "an embedding encoder's F16 matrices as BF16 where the CPU has the AVX-512 BF16 dot "
       "product: 1.2-1.5x faster, embeddings within ~1e-4 cosine of F16's"},
      {{"--image-bf16"},
       false,
       "the projector's F16/F32 matrices as BF16 on the BF16 dot product (AVX-512 BF16 CPUs; "
       "faster, results within ~6e-3 of the F16 GEMM's)"},
      {{"--lora"},
       true,
       "a LoRA adapter served as a model id of its own on the base model: NAME=FILE or "
       "NAME=FILE:SCALE (repeatable; llama.cpp's GGUF adapter layout)",
       true},
      {{"--lora-updates"},
       false,
       "accept POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's; they read the "
       "file a request names, so off by default)"},
      {{"--chat-template"},
       true,
       "built-in chat template: chatml, llama2, llama3, mistral, phi3, gemma, zephyr (default: the "
       "model's own)"},
      {{"--chat-template-file"}, true, "a Jinja chat template file to use instead of the model's"},
      {{"--pooling"},
       true,
       "embeddings (/v1/embeddings): mean, last or cls (default: the model file's, else mean)"},
      {{"--reasoning-format"},
       true,
       "chat replies' <think> sections (a harmony model's analysis channel) as "
       "reasoning_content: auto (when the template writes them), deepseek (always) or none (the "
       "reply as generated; default auto)"},
      {{"-t", "--threads"}, true, "compute threads (default: one per physical core)"},
      {{"-c", "--ctx"}, true, "context per request in tokens (default: model's, at most 4096)"},
      kIsaSpec,
      {{"-h", "--help"}, false, "show this help"},
  };
  return s;
}

// Scheduling: batch, queue and admission limits, deadlines.
const std::vector<OptionSpec>& SchedulingSpecs() {
  static const std::vector<OptionSpec> s = {
      {{"--max-batch-tokens"}, true, "tokens per engine step over all requests (default 256)"},
      {{"--max-running"},
       true,
       "requests decoding together at most (default: the knee bench --sweep-batch measured for "
       "this model, else 64)"},
      {{"--max-queue"}, true, "requests waiting at most; more get 429 (default 256)"},
      {{"--kv-watermark"}, true, "admit new requests only below this KV usage, 0..1 (default 0.9)"},
      {{"--batching"}, true, "continuous (default) or static (only to measure the difference)"},
      {{"--timeout"}, true, "default per-request deadline in seconds (default: none)"},
  };
  return s;
}

// HTTP: keys, browsers, the page, tracing, connection and body limits.
const std::vector<OptionSpec>& HttpSpecs() {
  static const std::vector<OptionSpec> s = {
      {{"--special-in-prompts"},
       false,
       "control tokens spelled in completions prompts become tokens (default: text; chat "
       "messages are always text)"},
      {{"--api-key"},
       true,
       "require Authorization: Bearer KEY on /v1 routes (repeatable; also PADDOCK_API_KEY)",
       true},
      {{"--api-key-file"}, true, "a file of API keys, one per line (# comments)"},
      {{"--cors-origin"},
       true,
       "a browser origin allowed to call the API, e.g. https://app.example (repeatable; * for any)",
       true},
      {{"--auth-health"}, false, "/health and /metrics need a key too (default: open)"},
      {{"--no-ui"}, false, "do not serve the web page (chat and dashboard) at /"},
      kTraceSpec,
      kNoTuneSpec,
      kPrefetchSpec,
      {{"--max-body"}, true, "largest request body in bytes, K/M suffixes (default 8M)"},
      {{"--http-threads"}, true, "HTTP event threads (default 2; no thread per connection)"},
      {{"--max-connections"},
       true,
       "open connections at most; more are closed at once (default 4096)"},
      {{"--header-timeout"},
       true,
       "seconds a client has to send the request line and headers (default 10)"},
      {{"--body-timeout"}, true, "seconds a client has to send a request body (default 60)"},
      {{"--idle-timeout"},
       true,
       "seconds a connection may move no byte either way, e.g. a client that stops reading "
       "(default 30)"},
  };
  return s;
}

// Behind a balancer: replica name, busy status, agent check, drain and grace.
const std::vector<OptionSpec>& DeploySpecs() {
  static const std::vector<OptionSpec> s = {
      {{"--replica-name"}, true, "name sent as X-Paddock-Replica on every answer (clusters)"},
      {{"--busy-status"},
       true,
       "status of a queue-full refusal: 429 (default) or 503, which balancers retry elsewhere"},
      {{"--agent-port"},
       true,
       "HAProxy agent-check port: \"drain\" while the queue is full, else \"ready up 100%\""},
      {{"--drain-seconds"},
       true,
       "on SIGTERM, seconds /health answers 503 while requests are still taken (default 0)"},
      {{"--grace"}, true, "seconds in-flight requests may take after SIGTERM (default 30)"},
  };
  return s;
}

// State kept across restarts: the stored responses (the KV disk tier is --kv-disk).
const std::vector<OptionSpec>& StateSpecs() {
  static const std::vector<OptionSpec> s = {
      {{"--data-dir"},
       true,
       "where stored Responses API responses are kept across restarts (SQLite), or none: in "
       "memory (default $XDG_DATA_HOME/paddock, else ~/.local/share/paddock)"},
      {{"--responses-max"}, true, "stored responses kept at most (default 10000)"},
      {{"--responses-if-damaged"},
       true,
       "a --data-dir database that fails its check: move (aside, naming both files, and start "
       "a fresh one; the default) or refuse (an error at start)"},
      {{"--responses-max-bytes"}, true, "bytes of stored responses at most (default 256M)"},
      {{"--responses-max-age"},
       true,
       "how long a stored response is kept: seconds, or e.g. 12h, 30d; 0: none kept (as "
       "--responses-max 0); none: no limit (default 30d)"},
  };
  return s;
}

std::vector<OptionSpec> ServeSpecs() {
  std::vector<OptionSpec> s;
  for (const auto* group :
       {&ModelSpecs(), &SchedulingSpecs(), &HttpSpecs(), &DeploySpecs(), &StateSpecs()})
    s.insert(s.end(), group->begin(), group->end());
  s.insert(s.end(), kKvSpecs.begin(), kKvSpecs.end());
  s.insert(s.end(), kSpecSpecs.begin(), kSpecSpecs.end());
  s.insert(s.end(), PipelineSpecs().begin(), PipelineSpecs().end());
  return s;
}

// Keys from --api-key (repeatable), --api-key-file and PADDOCK_API_KEY, together.
std::vector<std::string> ApiKeys(const Args& args) {
  std::vector<std::string> keys = args.All("--api-key");
  if (const char* env = std::getenv("PADDOCK_API_KEY"); env && *env) keys.push_back(env);
  if (args.Has("--api-key-file")) {
    const std::string path = args.Str("--api-key-file");
    std::ifstream in(path);
    if (!in) throw UsageError("serve: cannot read --api-key-file '" + path + "'");
    const size_t before = keys.size();
    for (std::string line; std::getline(in, line);) {
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
        line.pop_back();
      const size_t b = line.find_first_not_of(" \t");
      if (b == std::string::npos || line[b] == '#') continue;
      keys.push_back(line.substr(b));
    }
    if (keys.size() == before) throw UsageError("serve: --api-key-file '" + path + "' has no key");
  }
  for (const std::string& k : keys)
    if (k.empty() || k.find_first_of(" \t\r\n") != std::string::npos)
      throw UsageError("serve: an API key must be non-empty and contain no whitespace");
  return keys;
}

}  // namespace

namespace {

// The engine and the scheduler: model, threads, kernels, KV, speculation, batching.
void ReadEngineAndService(const Args& args, server::ServerOptions* so) {
  so->engine.model_path = args.Str("-m");
  so->engine.mmproj = args.Str("--mmproj");
  so->engine.image_bf16 = args.Has("--image-bf16");
  so->engine.encoder_bf16 = args.Has("--encoder-bf16");
  if (args.Has("--mmproj") && !args.Has("-m"))
    throw UsageError("--mmproj goes with -m (a directory's models name theirs in models.json)");
  so->models_dir = args.Str("--models-dir");
  if (so->engine.model_path.empty() && so->models_dir.empty())
    throw UsageError("serve: no model given (-m MODEL, or --models-dir DIR)");
  if (!so->engine.model_path.empty() && !so->models_dir.empty())
    throw UsageError("serve: give -m MODEL or --models-dir DIR, not both");
  for (const char* flag :
       {"-z", "--lora", "--model-name", "--served-model-name", "--trace", "--draft-model"})
    if (!so->models_dir.empty() && args.Has(flag))
      throw UsageError(std::string("serve: ") + flag +
                       " is per model: with --models-dir, set it in DIR/models.json");
  if (args.Has("--memory-budget"))
    so->memory_budget = ParseBytes("--memory-budget", args.Str("--memory-budget"));
  if (args.Has("--keep-alive")) {
    if (so->models_dir.empty())
      throw UsageError("serve: --keep-alive is for --models-dir (one model stays loaded)");
    so->keep_alive = server::ParseKeepAlive(args.Str("--keep-alive"));
  }
  so->engine.tokenizer_path = args.Str("-z");
  so->engine.threads = static_cast<int>(args.Int("-t", 0, 0, 1024));
  so->engine.context = static_cast<int>(args.Int("-c", 0, 0, 1 << 24));
  so->engine.isa = IsaArg(args);
  so->engine.max_batch = static_cast<int>(args.Int("--max-batch-tokens", 256, 1, 4096));
  AddPrefetchOption(args, &so->engine);
  AddKvOptions(args, &so->engine);  // (first: the device it names chooses the tune entry)
  ApplyTuneCache(args, "--max-batch-tokens", &so->engine);
  AddSpecOptions(args, &so->engine);
  AddTraceOption(args, &so->engine);
  static std::shared_ptr<Progress> load_bar;  // (the model loads on the server's own thread)
  ShowLoadProgress(&so->engine, &load_bar);
  ServiceOptions& sv = so->service;
  sv.max_batch_tokens = so->engine.max_batch;
  sv.max_running = static_cast<int>(args.Int("--max-running", 64, 1, 256));
  if (!args.Has("--max-running")) {
    // The knee `bench --sweep-batch` measured for this model on this CPU, when there is one.
    if (const int knee = CachedKnee(so->engine.model_path); knee > 0) {
      sv.max_running = knee;
      std::fprintf(stderr,
                   "paddock: max running requests %d: the batch knee measured by bench "
                   "--sweep-batch (%s; --max-running overrides)\n",
                   knee, CachePath("knee.tsv").c_str());
    }
  }
  // Without --kv-memory: room for every running request's full context (within 30% of RAM).
  so->engine.kv_sequences = sv.max_running;
  sv.max_queue = static_cast<int>(args.Int("--max-queue", 256, 0, 100000));
  sv.kv_watermark = args.Float("--kv-watermark", 0.9, 0.01, 1.0);
  const std::string batching = args.Str("--batching", "continuous");
  if (batching != "continuous" && batching != "static")
    throw UsageError("serve: --batching must be continuous or static, not '" + batching + "'");
  sv.static_batching = batching == "static";
}

// What the API does with requests: names, chat template, reasoning, pooling, timeouts.
void ReadApi(const Args& args, server::ServerOptions* so) {
  so->model_name = args.Str("--model-name");
  so->model_aliases = args.All("--served-model-name");
  if (so->model_name.empty() && !so->model_aliases.empty()) {
    so->model_name = so->model_aliases.front();
    so->model_aliases.erase(so->model_aliases.begin());
  }
  for (const std::string& n : so->model_aliases)
    if (n.empty() || n.size() > 256)
      throw UsageError("serve: --served-model-name must be 1..256 characters");
  so->loras = args.All("--lora");
  for (const std::string& l : so->loras)
    if (l.find('=') == std::string::npos || l.front() == '=' || l.back() == '=')
      throw UsageError("serve: --lora takes NAME=FILE or NAME=FILE:SCALE, not '" + l + "'");
  so->lora_updates = args.Has("--lora-updates");
  so->chat_template = args.Str("--chat-template");
  so->chat_template_file = args.Str("--chat-template-file");
  if (!so->chat_template.empty() && !so->chat_template_file.empty())
    throw UsageError("serve: give --chat-template or --chat-template-file, not both");
  if (!so->chat_template.empty())
    ResolveChatTemplate(ModelInfo(), so->chat_template);  // validates the name now
  so->request_timeout = args.Float("--timeout", 0, 0, 1e7);
  so->special_in_prompts = args.Has("--special-in-prompts");
  so->reasoning_format = args.Str("--reasoning-format", "auto");
  so->pooling = args.Str("--pooling");
  if (!so->pooling.empty() && so->pooling != "mean" && so->pooling != "last" &&
      so->pooling != "cls")
    throw UsageError("unknown --pooling '" + so->pooling + "' (expected mean, last or cls)");
  if (so->reasoning_format != "auto" && so->reasoning_format != "deepseek" &&
      so->reasoning_format != "none")
    throw UsageError("unknown --reasoning-format '" + so->reasoning_format +
                     "' (expected auto, deepseek or none)");
}

// Stored responses: where (--data-dir, or none) and how many, how large, how old.
void ReadState(const Args& args, server::ServerOptions* so) {
  const std::string dir = args.Str("--data-dir");
  if (dir == "none") {
    so->data_dir.clear();
  } else if (!dir.empty()) {
    so->data_dir = dir;
  } else {
    so->data_dir = server::DefaultDataDir();  // (neither HOME nor XDG_DATA_HOME: in memory)
    so->data_dir_is_default = true;
  }
  so->responses_max = static_cast<size_t>(args.Int("--responses-max", 10000, 0, 100000000));
  if (args.Has("--responses-if-damaged")) {
    const std::string d = args.Str("--responses-if-damaged");
    if (d != "move" && d != "refuse")
      throw UsageError("--responses-if-damaged: '" + d + "' is not one of move, refuse");
    so->responses_refuse_damaged = d == "refuse";
  }
  if (args.Has("--responses-max-bytes"))
    so->responses_max_bytes =
        ParseBytes("--responses-max-bytes", args.Str("--responses-max-bytes"));
  // 0 keeps none (as --responses-max 0); "none": no age limit.
  if (args.Has("--responses-max-age")) {
    const std::string a = args.Str("--responses-max-age");
    if (a == "none") {
      so->responses_max_age = 0;
    } else {
      double secs = 0;
      try {
        secs = server::ParseDuration(a, "--responses-max-age", "30d, 12h, 45m, 0, none");
      } catch (const Error& e) {
        throw UsageError(e.what());
      }
      if (secs > 0) {
        so->responses_max_age = secs;
      } else {
        so->responses_max = 0;  // (expired at once: none kept)
      }
    }
  }
}

// The transport and the front door: address, limits, deadlines, cluster hooks, keys, CORS.
void ReadTransport(const Args& args, server::ServerOptions* so) {
  so->host = args.Str("--host", "127.0.0.1");
  so->port = static_cast<int>(args.Int("--port", 8080, 0, 65535));
  so->max_body_bytes =
      args.Has("--max-body") ? ParseBytes("--max-body", args.Str("--max-body")) : (8u << 20);
  if (so->max_body_bytes < 1024) throw UsageError("serve: --max-body must be at least 1K");
  so->http_threads = static_cast<int>(args.Int("--http-threads", 2, 1, 64));
  so->max_connections = static_cast<size_t>(args.Int("--max-connections", 4096, 1, 1000000));
  so->header_timeout = args.Float("--header-timeout", 10, 0.5, 3600);
  so->body_timeout = args.Float("--body-timeout", 60, 0.5, 3600);
  so->idle_timeout = args.Float("--idle-timeout", 30, 1, 3600);
  so->grace_seconds = args.Float("--grace", 30, 0, 1e6);
  so->replica_name = args.Str("--replica-name");
  if (so->replica_name.size() > 128 ||
      so->replica_name.find_first_of("\r\n\t ") != std::string::npos)
    throw UsageError("serve: --replica-name must be at most 128 characters without whitespace");
  so->busy_status = static_cast<int>(args.Int("--busy-status", 429, 429, 503));
  if (so->busy_status != 429 && so->busy_status != 503)
    throw UsageError("serve: --busy-status must be 429 or 503");
  so->drain_seconds = args.Float("--drain-seconds", 0, 0, 3600);
  so->agent_port = static_cast<int>(args.Int("--agent-port", 0, 0, 65535));
  so->api_keys = ApiKeys(args);
  so->auth_health = args.Has("--auth-health");
  so->ui = !args.Has("--no-ui");
  so->cors_origins = args.All("--cors-origin");
  for (const std::string& o : so->cors_origins) {
    const bool scheme = o.rfind("http://", 0) == 0 || o.rfind("https://", 0) == 0;
    const size_t host = o.find("//") + 2;
    if (o != "*" && (!scheme || o.size() <= host || o.find('/', host) != std::string::npos))
      throw UsageError("serve: --cors-origin '" + o +
                       "' is not an origin (scheme://host[:port], or *)");
  }
  if (so->auth_health && so->api_keys.empty())
    throw UsageError(
        "serve: --auth-health needs a key (--api-key, --api-key-file or PADDOCK_API_KEY)");
}

}  // namespace

int CmdServe(int argc, char** argv) {
  const std::vector<OptionSpec> specs = ServeSpecs();
  Args args("serve", specs, argc, argv);
  if (args.Has("-h")) {
    std::fputs(Usage("serve", "-m MODEL | --models-dir DIR [options]", specs).c_str(), stdout);
    return 0;
  }
  if (!args.positional().empty())
    throw UsageError("serve: unexpected argument '" + args.positional()[0] + "'");
  server::ServerOptions so;
  ReadEngineAndService(args, &so);
  ReadTransport(args, &so);
  ReadApi(args, &so);
  ReadState(args, &so);
  if (!so.models_dir.empty() && JoinPipelineLaunched())
    throw UsageError("serve: --models-dir under mpirun: a pipeline serves one model (-m)");
  if (!JoinPipelineIfLaunched(args, &so.engine, so.memory_budget)) return 0;  // a stage: done
  return server::RunServer(so);
}

}  // namespace paddock::cli
