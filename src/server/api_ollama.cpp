// server/api_ollama.cpp: Ollama's API (/api/chat, /api/generate, /api/embed, /api/tags, /api/ps,
// /api/show, /api/version) over the OpenAI one: options, format and think as the OpenAI and
// llama-server fields, replies as one object or one object per line.
#include "server/api_dialects_internal.h"
#include "server/model_host.h"

namespace paddock::server::dialect_detail {
namespace {

// ---- Ollama: requests -----------------------------------------------------------------------

// Ollama's options object into OpenAI / llama-server fields.
void OllamaOptions(const json& opts, json* o) {
  if (!opts.is_object()) Refuse("options", "options must be an object");
  static const std::pair<const char*, const char*> kMap[] = {
      {"temperature", "temperature"},
      {"top_p", "top_p"},
      {"top_k", "top_k"},
      {"min_p", "min_p"},
      {"typical_p", "typical_p"},
      {"repeat_penalty", "repetition_penalty"},
      {"repeat_last_n", "repeat_last_n"},
      {"presence_penalty", "presence_penalty"},
      {"frequency_penalty", "frequency_penalty"},
      {"seed", "seed"},
      {"stop", "stop"},
      {"mirostat", "mirostat"},
      {"mirostat_tau", "mirostat_tau"},
      {"mirostat_eta", "mirostat_eta"},
  };
  // Load-time settings Ollama takes per request; here the server's own settings decide them.
  static const char* const kServerSide[] = {"num_ctx",  "num_batch",  "num_gpu",   "main_gpu",
                                            "use_mmap", "num_thread", "numa",      "num_keep",
                                            "low_vram", "f16_kv",     "vocab_only"};
  for (const auto& [k, v] : opts.items()) {
    bool done = false;
    for (const auto& [from, to] : kMap) {
      if (k == from) {
        (*o)[to] = v;
        done = true;
      }
    }
    if (k == "num_predict") {
      if (!v.is_number_integer()) Refuse("options.num_predict", "num_predict must be an integer");
      if (v.get<int64_t>() >= 0) (*o)["max_tokens"] = v;
      done = true;
    }
    for (const char* s : kServerSide) done = done || k == s;
    if (!done) Refuse("options." + k, "unknown option '" + k + "'");
  }
}

// format: "json" or a JSON Schema.
void OllamaFormat(const json& f, json* o) {
  if (f.is_string() && f == "json") {
    (*o)["response_format"] = {{"type", "json_object"}};
  } else if (f.is_object()) {
    (*o)["response_format"] = {{"type", "json_schema"},
                               {"json_schema", {{"name", "format"}, {"schema", f}}}};
  } else if (!(f.is_string() && f == "")) {
    Refuse("format", "format must be \"json\" or a JSON Schema object");
  }
}

void OllamaCommon(const json& j, json* o, Translated* out) {
  if (const json* m = Get(j, "model")) (*o)["model"] = *m;
  out->stream = !Get(j, "stream") || (j["stream"].is_boolean() && j["stream"].get<bool>());
  (*o)["stream"] = out->stream;
  if (out->stream) (*o)["stream_options"] = {{"include_usage", true}};
  if (const json* opts = Get(j, "options")) OllamaOptions(*opts, o);
  if (const json* f = Get(j, "format")) OllamaFormat(*f, o);
  if (const json* ka = Get(j, "keep_alive")) {
    if (!ka->is_string() && !ka->is_number())
      Refuse("keep_alive", "keep_alive must be a duration string or a number of seconds");
    out->keep_alive_given = true;
    if (ka->is_number()) {
      out->keep_alive = ka->get<double>();
    } else {
      try {
        out->keep_alive = ParseKeepAlive(ka->get<std::string>());
      } catch (const Error& e) {
        Refuse("keep_alive", e.what());
      }
    }
  }
  if (const json* think = Get(j, "think")) {
    if (!think->is_boolean() && !think->is_string())
      Refuse("think", "think must be a boolean (or low, medium, high)");
    out->vars.push_back(
        OptionalBool("enable_thinking", !(think->is_boolean() && !think->get<bool>())));
  }
}

// The OpenAI reply (server/reply_reader.h) as Ollama's: one object, or newline-delimited
// objects (a line per chunk that says something, then the done line with the counts).
class OllamaReplyOf final : public ReplyReader {
 public:
  OllamaReplyOf(Dialect d, bool stream, std::string model, int n_prompt)
      : ReplyReader(stream), d_(d), model_(std::move(model)), n_prompt_(n_prompt), t0_(Now()) {}

 private:
  void OnError(const std::string&, const std::string& message, std::string* out) override {
    out->append(api_detail::Dump({{"error", message}}) + (stream() ? "\n" : ""));
  }
  void OnChunkBegin(std::string*) override {
    if (!stream()) return;
    text_.clear();
    thinking_ = json();
    calls_ = json();
  }
  void OnUsage(int prompt_tokens, int completion_tokens) override {
    n_prompt_ = prompt_tokens;
    eval_count_ = completion_tokens;
  }
  void OnReasoning(const std::string& text, std::string*) override {
    thinking_ = (thinking_.is_string() ? thinking_.get<std::string>() : std::string()) + text;
  }
  void OnText(const std::string& text, std::string*) override { text_ += text; }
  void OnToolCall(const json& tc, std::string*) override {
    if (!calls_.is_array()) calls_ = json::array();
    const json fn = tc.value("function", json::object());
    const json args = JsonOrDiscarded<json>(fn.value("arguments", std::string()));
    calls_.push_back({{"function",
                       {{"name", fn.value("name", json())},
                        {"arguments", args.is_discarded() ? json::object() : args}}}});
  }
  void OnFinish(const std::string& reason, const json&, std::string*) override {
    done_reason_ = reason == "length" ? "length" : "stop";
  }
  void OnChunkEnd(std::string* out) override {
    if (!stream() || (text_.empty() && thinking_.is_null() && calls_.is_null())) return;
    json line = Line();
    Fill(&line);
    out->append(api_detail::Dump(line) + "\n");
  }
  void OnEnd(std::string* out) override {
    if (stream()) {  // the done line: no text of its own
      text_.clear();
      thinking_ = calls_ = json();
    }
    json line = Line();
    Fill(&line);
    Done(&line);
    out->append(api_detail::Dump(line) + (stream() ? "\n" : ""));
  }

  static double Now() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  json Line() const { return {{"model", model_}, {"created_at", Iso8601Now()}, {"done", false}}; }
  // The text, thinking and tool calls gathered (a chunk's, or the whole reply's).
  void Fill(json* line) const {
    if (d_ == Dialect::kOllamaGenerate) {
      (*line)["response"] = text_;
      if (!thinking_.is_null()) (*line)["thinking"] = thinking_;
      return;
    }
    json msg = {{"role", "assistant"}, {"content", text_}};
    if (!thinking_.is_null()) msg["thinking"] = thinking_;
    if (!calls_.is_null()) msg["tool_calls"] = calls_;
    (*line)["message"] = msg;
  }
  void Done(json* line) const {
    const auto ns = [](double s) { return static_cast<int64_t>(s * 1e9); };
    (*line)["done"] = true;
    (*line)["done_reason"] = done_reason_;
    (*line)["total_duration"] = ns(Now() - t0_);
    (*line)["load_duration"] = 0;
    (*line)["prompt_eval_count"] = n_prompt_;
    (*line)["eval_count"] = eval_count_;
  }

  Dialect d_;
  std::string model_;
  int n_prompt_;
  double t0_;
  std::string text_;
  json thinking_, calls_;  // null: none
  std::string done_reason_ = "stop";
  int eval_count_ = 0;
};

// Ollama's /api/embed: the OpenAI embeddings body re-shaped (whitespace probes before it pass
// through); anything else is an error in Ollama's shape.
class OllamaEmbedBody final : public ReplyTranslator {
 public:
  explicit OllamaEmbedBody(std::string model) : model_(std::move(model)) {}
  void Feed(std::string_view b, std::string* out) override {
    for (char c : b) {
      if (body_.empty() && (c == ' ' || c == '\n'))
        out->push_back(c);
      else
        body_.push_back(c);
    }
  }
  void End(std::string* out) override {
    json r = JsonOrDiscarded<json>(body_);
    try {
      if (!r.is_discarded() && r.is_object() && r.contains("data") && r["data"].is_array()) {
        json vectors = json::array();
        for (auto& d : r["data"]) vectors.push_back(d.at("embedding"));
        const int n = r.contains("usage") ? r["usage"].value("prompt_tokens", 0) : 0;
        out->append(api_detail::Dump(
            {{"model", model_}, {"embeddings", vectors}, {"prompt_eval_count", n}}));
        return;
      }
    } catch (const json::exception&) {
    }
    const std::string why =
        !r.is_discarded() && r.is_object() && r.contains("error") && r["error"].is_object()
            ? r["error"].value("message", "error")
            : "malformed embeddings reply";
    out->append(api_detail::Dump({{"error", why}}));
  }

 private:
  std::string model_;
  std::string body_;
};

json OllamaModel(const ModelFacts& m) {
  return {{"name", m.name},
          {"model", m.name},
          {"modified_at", Iso8601Now()},
          {"size", m.size_bytes},
          {"digest", ""},
          {"details",
           {{"parent_model", ""},
            {"format", "gguf"},
            {"family", m.family},
            {"families", json::array({m.family})},
            {"parameter_size", m.parameter_size},
            {"quantization_level", m.quantization}}}};
}

}  // namespace

Translated OllamaChatRequest(std::string_view body) {
  const json j = ParseObject(body);
  OnlyKeys(j, "",
           {"model", "messages", "tools", "format", "options", "stream", "keep_alive", "think"});
  json o = json::object();
  Translated out;
  OllamaCommon(j, &o, &out);
  const json* ms = Get(j, "messages");
  if (ms == nullptr || !ms->is_array()) Refuse("messages", "'messages' must be an array");
  json messages = json::array();
  for (size_t i = 0; i < ms->size(); ++i) {
    const json& m = (*ms)[i];
    const std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) Refuse(p, "'" + p + "' must be an object");
    OnlyKeys(m, p, {"role", "content", "images", "tool_calls", "thinking", "tool_name"});
    json msg = {{"role", m.value("role", "")},
                {"content", Get(m, "content") ? m["content"] : json("")}};
    if (const json* im = Get(m, "images"); im != nullptr && !(im->is_array() && im->empty())) {
      // Base64 images after the message's text, as OpenAI image_url parts.
      if (!im->is_array()) Refuse(p + ".images", "images must be an array of base64 strings");
      if (!msg["content"].is_string()) Refuse(p + ".content", "content must be a string");
      json parts = json::array();
      if (!msg["content"].get<std::string>().empty())
        parts.push_back({{"type", "text"}, {"text", msg["content"]}});
      for (size_t k = 0; k < im->size(); ++k) {
        if (!(*im)[k].is_string())
          Refuse(p + ".images[" + std::to_string(k) + "]", "an image must be a base64 string");
        const std::string b = (*im)[k].get<std::string>();
        parts.push_back(
            {{"type", "image_url"},
             {"image_url", {{"url", b.rfind("data:", 0) == 0 ? b : "data:;base64," + b}}}});
      }
      msg["content"] = parts;
    }
    if (const json* th = Get(m, "thinking")) msg["reasoning_content"] = *th;
    if (const json* calls = Get(m, "tool_calls")) {
      if (!calls->is_array()) Refuse(p + ".tool_calls", "tool_calls must be an array");
      json tc = json::array();
      for (size_t c = 0; c < calls->size(); ++c) {
        const json& call = (*calls)[c];
        const json* fn = call.is_object() ? Get(call, "function") : nullptr;
        if (fn == nullptr || !fn->is_object())
          Refuse(p + ".tool_calls", "each tool call needs a function");
        const json args = Get(*fn, "arguments") ? (*fn)["arguments"] : json::object();
        tc.push_back({{"id", "call_" + std::to_string(i) + "_" + std::to_string(c)},
                      {"type", "function"},
                      {"function",
                       {{"name", fn->value("name", "")},
                        {"arguments", args.is_string() ? args.get<std::string>() : args.dump()}}}});
      }
      msg["tool_calls"] = tc;
    }
    messages.push_back(msg);
  }
  if (messages.empty()) {  // Ollama: loads the model (with keep_alive 0: unloads it)
    out.load_only = true;
    messages.push_back({{"role", "user"}, {"content", ""}});
  }
  o["messages"] = messages;
  if (const json* t = Get(j, "tools")) o["tools"] = *t;
  out.body = o.dump();
  return out;
}

Translated OllamaGenerateRequest(std::string_view body) {
  const json j = ParseObject(body);
  OnlyKeys(j, "",
           {"model", "prompt", "suffix", "system", "template", "raw", "format", "options", "stream",
            "keep_alive", "images", "think", "context"});
  json o = json::object();
  Translated out;
  OllamaCommon(j, &o, &out);
  if (Get(j, "suffix") && j["suffix"] != "")
    Refuse("suffix", "fill-in-the-middle (suffix) is not supported");
  if (Get(j, "template"))
    Refuse("template", "a per-request template is not supported: serve --chat-template-file");
  if (Get(j, "context"))
    Refuse("context",
           "context (token ids of an earlier reply) is deprecated: send messages to /api/chat");
  if (const json* im = Get(j, "images"); im != nullptr && !(im->is_array() && im->empty()))
    Refuse("images", "images are taken by /api/chat (a message's images), not /api/generate");
  const json* prompt = Get(j, "prompt");
  const std::string text = prompt && prompt->is_string() ? prompt->get<std::string>() : "";
  if (prompt != nullptr && !prompt->is_string()) Refuse("prompt", "prompt must be a string");
  const bool raw = Get(j, "raw") && j["raw"].is_boolean() && j["raw"].get<bool>();
  out.load_only = text.empty() && !Get(j, "system");
  if (raw) {
    if (Get(j, "system")) Refuse("system", "system does not apply to a raw prompt");
    o["prompt"] = text;
    out.chat = false;
  } else {
    json messages = json::array();
    if (const json* s = Get(j, "system")) messages.push_back({{"role", "system"}, {"content", *s}});
    messages.push_back({{"role", "user"}, {"content", text}});
    o["messages"] = messages;
  }
  out.body = o.dump();
  return out;
}

Translated OllamaEmbedRequest(std::string_view body) {
  const json j = ParseObject(body);
  OnlyKeys(j, "", {"model", "input", "prompt", "truncate", "options", "keep_alive", "dimensions"});
  json o = json::object();
  if (const json* m = Get(j, "model")) o["model"] = *m;
  if (const json* d = Get(j, "dimensions")) o["dimensions"] = *d;  // (checked as OpenAI's)
  // Ollama truncates an input over the context unless told not to.
  o["truncate"] = true;
  if (const json* t = Get(j, "truncate")) {
    if (!t->is_boolean()) Refuse("truncate", "truncate must be true or false");
    o["truncate"] = *t;
  }
  const json* in = Get(j, "input");
  if (in == nullptr) in = Get(j, "prompt");  // the older /api/embeddings
  if (in == nullptr) Refuse("input", "'input' is required");
  o["input"] = *in;
  Translated out;
  out.chat = false;
  out.body = o.dump();
  return out;
}

std::unique_ptr<ReplyTranslator> OllamaReply(Dialect d, bool stream, const std::string& model,
                                             int n_prompt) {
  return std::make_unique<OllamaReplyOf>(d, stream, model, n_prompt);
}

std::unique_ptr<ReplyTranslator> OllamaEmbedReply(const std::string& model) {
  return std::make_unique<OllamaEmbedBody>(model);
}

}  // namespace paddock::server::dialect_detail

namespace paddock::server {

using dialect_detail::Get;
using dialect_detail::Iso8601Now;
using dialect_detail::json;
using dialect_detail::OllamaModel;
using dialect_detail::OnlyKeys;
using dialect_detail::ParseObject;
using dialect_detail::Refuse;

std::string OllamaTagsBody(const std::vector<ModelFacts>& models, bool running) {
  json list = json::array();
  for (const ModelFacts& m : models) {
    json model = OllamaModel(m);
    if (running) {
      // (no keep_alive: loaded for the server's lifetime)
      model["expires_at"] =
          m.expires > 0 ? dialect_detail::Iso8601(m.expires) : "2999-12-31T23:59:59Z";
      model["size"] = m.loaded_bytes;
      model["size_vram"] = 0;
      model["context_length"] = m.context;
    }
    list.push_back(std::move(model));
  }
  return api_detail::Dump({{"models", list}});
}

std::string OllamaLoadBody(Dialect d, const std::string& model, bool unloaded) {
  json o = {{"model", model}, {"created_at", Iso8601Now()}};
  if (d == Dialect::kOllamaChat) {
    o["message"] = {{"role", "assistant"}, {"content", ""}};
  } else {
    o["response"] = "";
  }
  o["done_reason"] = unloaded ? "unload" : "load";
  o["done"] = true;
  return api_detail::Dump(o);
}

std::string OllamaShowBody(const ModelFacts& m, std::string_view request_body,
                           const std::vector<std::string>& names) {
  const json j = ParseObject(request_body);
  OnlyKeys(j, "", {"model", "name", "verbose"});
  const json* name = Get(j, "model");
  if (name == nullptr) name = Get(j, "name");
  if (name == nullptr || !name->is_string()) Refuse("model", "'model' is required");
  bool served = false;
  for (const std::string& n : names) served = served || n == name->get<std::string>();
  if (!served) Refuse("model", "model '" + name->get<std::string>() + "' not found", 404);
  json caps = json::array({"completion"});
  if (m.tools) caps.push_back("tools");
  if (m.embeddings) caps.push_back("embedding");
  return api_detail::Dump(
      {{"modelfile", ""},
       {"parameters", ""},
       {"template", m.chat_template},
       {"details", OllamaModel(m)["details"]},
       {"model_info",
        {{"general.architecture", m.family}, {m.family + ".context_length", m.context}}},
       {"capabilities", caps},
       {"modified_at", Iso8601Now()}});
}

std::string OllamaVersionBody() {
  return api_detail::Dump({{"version", "0.9.0"}});  // the Ollama API version it follows
}

}  // namespace paddock::server
