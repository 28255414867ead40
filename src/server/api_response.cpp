// server/api_response.cpp: response bodies and server-sent events in OpenAI's shapes (and
// llama-server's for /tokenize and /detokenize).
#include <algorithm>

#include "base/base64.h"
#include "base/utf8.h"
#include "server/api.h"
#include "server/api_json.h"

namespace paddock::server {

using namespace api_detail;

std::string EmbeddingsBody(const std::vector<std::vector<float>>& vectors, const std::string& model,
                           int prompt_tokens, bool base64) {
  json data = json::array();
  for (size_t i = 0; i < vectors.size(); ++i) {
    json e = {{"object", "embedding"}, {"index", i}};
    if (base64) {
      e["embedding"] = Base64Encode(std::string_view(
          reinterpret_cast<const char*>(vectors[i].data()), vectors[i].size() * sizeof(float)));
    } else {
      e["embedding"] = vectors[i];
    }
    data.push_back(e);
  }
  json j = {{"object", "list"},
            {"data", data},
            {"model", model},
            {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ErrorBody(const ApiError& e) {
  json err = {{"message", ClipUtf8(e.message, kMaxErrorBytes)},
              {"type", e.type},
              {"param", e.param.empty() ? json() : json(ClipUtf8(e.param, kMaxParamBytes))},
              {"code", e.code.empty() ? json() : json(e.code)}};
  return json{{"error", err}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string EngineErrorBody(const std::string& message) {
  ApiError e;
  e.status = 503;
  e.type = "server_error";
  e.code = "engine_failure";
  e.message = message;
  return ErrorBody(e);
}

const char* OpenAiFinishReason(FinishReason r) {
  switch (r) {
    case FinishReason::kLength:
    case FinishReason::kContext:
      return "length";
    case FinishReason::kEos:
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kCancelled:
      return "abort";
    case FinishReason::kTimeout:
      return "timeout";
  }
  return "stop";
}

namespace {

json Usage(const GenerateResult& g) {
  json u = {{"prompt_tokens", g.prompt_tokens},
            {"completion_tokens", g.generated_tokens},
            {"total_tokens", g.prompt_tokens + g.generated_tokens}};
  u["prompt_tokens_details"] = {{"cached_tokens", g.cached_tokens}};
  return u;
}

json Bytes(std::string_view s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// Chat: {"content": [{token, logprob, bytes, top_logprobs: [...]}]}.
json ChatLogprobs(const std::vector<TokenLogprob>& lps) {
  json content = json::array();
  for (const TokenLogprob& t : lps) {
    json top = json::array();
    for (const auto& a : t.top)
      top.push_back({{"token", a.text}, {"logprob", a.logprob}, {"bytes", Bytes(a.text)}});
    content.push_back({{"token", t.text},
                       {"logprob", t.logprob},
                       {"bytes", Bytes(t.text)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

// Completions: {"tokens", "token_logprobs", "top_logprobs", "text_offset"}; *offset: the
// characters before the first token (advanced past them). `first_null`: the first entry is the
// prompt's first token (no logprob: nothing precedes it).
void AppendCompletionLogprobs(const std::vector<TokenLogprob>& lps, size_t* offset, json* out) {
  json& j = *out;
  if (j.is_null())
    j = {{"tokens", json::array()},
         {"token_logprobs", json::array()},
         {"top_logprobs", json::array()},
         {"text_offset", json::array()}};
  for (const TokenLogprob& t : lps) {
    j["tokens"].push_back(t.text);
    j["token_logprobs"].push_back(t.logprob);
    json top = json::object();
    for (const auto& a : t.top)
      if (!top.contains(a.text)) top[a.text] = a.logprob;
    j["top_logprobs"].push_back(top);
    j["text_offset"].push_back(*offset);
    *offset += CountCodePoints(t.text);
  }
}

// The echoed prompt's entries: its first token (null), then the scored ones.
void AppendPromptLogprobs(const ApiRequest& r, const std::vector<TokenLogprob>& prompt,
                          size_t* offset, json* out) {
  AppendCompletionLogprobs({}, offset, out);
  json& j = *out;
  j["tokens"].push_back(r.echo_first_token);
  j["token_logprobs"].push_back(nullptr);
  j["top_logprobs"].push_back(nullptr);
  j["text_offset"].push_back(*offset);
  *offset += CountCodePoints(r.echo_first_token);
  AppendCompletionLogprobs(prompt, offset, out);
}

// Over every choice; prompts counted once each (choices come n per prompt).
json UsageOf(const ApiRequest& r, const std::vector<GenerateResult>& g) {
  json u = Usage(g[0]);
  const size_t n = static_cast<size_t>(std::max(1, r.options.n));
  int completion = 0, prompt = 0, cached = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    completion += g[i].generated_tokens;
    if (i % n == 0) {
      prompt += g[i].prompt_tokens;
      cached += g[i].cached_tokens;
    }
  }
  u["prompt_tokens"] = prompt;
  u["completion_tokens"] = completion;
  u["total_tokens"] = prompt + completion;
  u["prompt_tokens_details"] = {{"cached_tokens", cached}};
  return u;
}

// A call's id: unique per response, choice and call. Mistral's templates take only ids of 9
// letters and digits (they refuse the conversation otherwise), so those are 9 characters of a
// hash of the same three.
std::string ToolCallId(const ApiRequest& r, const ResponseMeta& m, int choice, size_t call) {
  const std::string id = m.id + "-call-" + std::to_string(choice) + "-" + std::to_string(call);
  if (r.tool_format != ToolFormat::kMistral) return id;
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char ch : id) h = (h ^ ch) * 1099511628211ull;
  std::string out;
  for (int k = 0; k < 9; ++k, h /= 62) out.push_back(kAlnum[h % 62]);
  return out;
}

}  // namespace

std::string CompletionBody(const ApiRequest& r, const ResponseMeta& m,
                           const std::vector<GenerateResult>& results) {
  json choices = json::array();
  for (size_t i = 0; i < results.size(); ++i) {
    const GenerateResult& g = results[i];
    // stop_reason (vLLM's): the stop string that ended the choice, null otherwise.
    json choice = {{"index", i},
                   {"finish_reason", OpenAiFinishReason(g.finish)},
                   {"stop_reason", g.stop.empty() ? json() : json(g.stop)},
                   {"logprobs", nullptr}};
    const bool lp = r.options.generate.logprobs >= 0;
    if (r.chat) {
      choice["message"] = {{"role", "assistant"}, {"content", g.text}};
      ParsedToolCalls pr;
      if (r.harmony) {  // channels: analysis is reasoning, final content; calls by recipient
        std::string reasoning;
        pr = ParseHarmony(g.text, r.tool_calls, &reasoning);
        choice["message"]["content"] = pr.content;
        choice["message"]["reasoning_content"] = reasoning.empty() ? json() : json(reasoning);
      } else if (r.reasoning) {
        ReasoningSplitter split(r.reasoning_open);
        std::string reasoning, content;
        split.Feed(g.text, &reasoning, &content);
        split.Finish(&reasoning, &content);
        choice["message"]["content"] = content;
        choice["message"]["reasoning_content"] = reasoning.empty() ? json() : json(reasoning);
      }
      if (r.tool_calls) {
        if (!r.harmony)
          pr = ParseToolCalls(r.tool_format, choice["message"]["content"].get<std::string>());
        if (!pr.calls.empty()) {
          json calls = json::array();
          for (size_t c = 0; c < pr.calls.size(); ++c)
            calls.push_back(
                {{"id", ToolCallId(r, m, static_cast<int>(i), c)},
                 {"type", "function"},
                 {"function", {{"name", pr.calls[c].name}, {"arguments", pr.calls[c].arguments}}}});
          choice["message"]["tool_calls"] = calls;
          choice["message"]["content"] = pr.content.empty() ? json() : json(pr.content);
          if (g.finish == FinishReason::kEos || g.finish == FinishReason::kStop)
            choice["finish_reason"] = "tool_calls";
        }
      }
      if (lp) choice["logprobs"] = ChatLogprobs(g.logprobs);
    } else {
      choice["text"] = r.echo ? r.echo_text + g.text : g.text;
      if (lp) {
        json l;
        size_t offset = 0;
        if (r.echo) AppendPromptLogprobs(r, results[0].prompt_logprobs, &offset, &l);
        offset = r.echo ? CountCodePoints(r.echo_text) : 0;
        AppendCompletionLogprobs(g.logprobs, &offset, &l);
        choice["logprobs"] = l;
      }
    }
    choices.push_back(choice);
  }
  json j = {{"id", m.id},           {"object", r.chat ? "chat.completion" : "text_completion"},
            {"created", m.created}, {"model", m.model},
            {"choices", choices},   {"usage", UsageOf(r, results)}};
  return Dump(j);
}

std::string StreamChunk(const ApiRequest& r, const ResponseMeta& m, const ChunkPart& p) {
  json choice = {{"index", p.index},
                 {"finish_reason", p.finish ? json(p.finish) : json()},
                 {"logprobs", nullptr}};
  if (p.finish) choice["stop_reason"] = p.stop != nullptr ? json(*p.stop) : json();
  const bool lp = r.options.generate.logprobs >= 0 && (!p.logprobs.empty() || p.echo);
  if (r.chat) {
    json delta = json::object();
    if (p.first) delta["role"] = "assistant";
    if (!p.reasoning.empty()) delta["reasoning_content"] = std::string(p.reasoning);
    if (p.tool_calls != nullptr && !p.tool_calls->empty()) {
      json calls = json::array();
      for (size_t c = 0; c < p.tool_calls->size(); ++c)
        calls.push_back(
            {{"index", c},
             {"id", ToolCallId(r, m, p.index, c)},
             {"type", "function"},
             {"function",
              {{"name", (*p.tool_calls)[c].name}, {"arguments", (*p.tool_calls)[c].arguments}}}});
      delta["tool_calls"] = calls;
    }
    if (!p.text.empty() || (p.first && p.finish == nullptr && p.reasoning.empty()))
      delta["content"] = std::string(p.text);
    choice["delta"] = delta;
    if (lp) choice["logprobs"] = ChatLogprobs(p.logprobs);
  } else {
    choice["text"] = (p.echo ? r.echo_text : std::string()) + std::string(p.text);
    if (lp) {
      json l;
      if (p.echo) {
        size_t prompt_offset = 0;
        static const std::vector<TokenLogprob> kNone;
        AppendPromptLogprobs(r, p.prompt_logprobs ? *p.prompt_logprobs : kNone, &prompt_offset, &l);
      }
      AppendCompletionLogprobs(p.logprobs, p.offset, &l);
      choice["logprobs"] = l;
    }
  }
  json j = {{"id", m.id},
            {"object", r.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", m.created},
            {"model", m.model},
            {"choices", json::array({choice})}};
  if (r.include_usage) j["usage"] = nullptr;
  return "data: " + Dump(j) + "\n\n";
}

std::string StreamUsageChunk(const ApiRequest& r, const ResponseMeta& m,
                             const std::vector<GenerateResult>& results) {
  json j = {{"id", m.id},
            {"object", r.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", m.created},
            {"model", m.model},
            {"choices", json::array()},
            {"usage", UsageOf(r, results)}};
  return "data: " + Dump(j) + "\n\n";
}

std::string StreamErrorEvent(const ApiError& e) {
  return "data: " + ErrorBody(e) + "\n\n";
}

namespace {

json ModelObject(const ServedModel& m, const std::string& name, int64_t created) {
  json o = {{"id", name},
            {"object", "model"},
            {"created", created},
            {"owned_by", "paddock"},
            {"root", m.id},
            {"max_model_len", m.context},
            {"vocab_size", m.n_vocab}};
  if (m.status != nullptr) o["status"] = {{"value", m.status}};
  return o;
}

// A served adapter as vLLM lists one: its parent the base model, its root the file.
json AdapterObject(const ServedModel& m, const LoraRegistry::Entry& a, int64_t created) {
  json o = ModelObject(m, a.name, created);
  o["root"] = a.path;
  o["parent"] = m.id;
  return o;
}

}  // namespace

std::string LoraUpdatedBody(const std::string& name, bool loaded) {
  return Dump(
      json{{"object", "lora_adapter"}, {"id", name}, {loaded ? "loaded" : "unloaded", true}});
}

ServedModel ServedOf(const ApiContext& ctx) {
  ServedModel m;
  m.id = ctx.model_name;
  m.aliases = ctx.aliases;
  m.context = ctx.context;
  m.n_vocab = ctx.n_vocab;
  if (ctx.loras != nullptr) m.loras = ctx.loras->List();
  return m;
}

ApiError UnknownModel(const std::vector<ServedModel>& models, const std::string& id) {
  ApiError e;
  e.status = 404;
  e.type = "invalid_request_error";
  e.code = "model_not_found";
  e.param = "model";
  e.message =
      "The model '" + id.substr(0, kMaxModelBytes) + "' does not exist; this server serves ";
  bool first = true;
  auto name = [&](const std::string& n, const char* what) {
    e.message += (first ? "'" : ", '") + n + "'" + what;
    first = false;
  };
  for (const ServedModel& m : models) {
    name(m.id, "");
    for (const std::string& a : m.aliases) name(a, "");
    for (const auto& a : m.loras) name(a.name, " (an adapter)");
  }
  return e;
}

ApiError UnknownModel(const ApiContext& ctx, const std::string& id) {
  return UnknownModel(std::vector<ServedModel>{ServedOf(ctx)}, id);
}

std::string ModelsBody(const std::vector<ServedModel>& models, int64_t created) {
  json data = json::array();
  for (const ServedModel& m : models) {
    data.push_back(ModelObject(m, m.id, created));
    for (const std::string& a : m.aliases) data.push_back(ModelObject(m, a, created));
    for (const auto& a : m.loras) data.push_back(AdapterObject(m, a, created));
  }
  return Dump(json{{"object", "list"}, {"data", data}});
}

std::string ModelBody(const std::vector<ServedModel>& models, const std::string& id,
                      int64_t created) {
  for (const ServedModel& m : models) {
    if (id == m.id || std::find(m.aliases.begin(), m.aliases.end(), id) != m.aliases.end())
      return Dump(ModelObject(m, id, created));
    for (const auto& a : m.loras)
      if (a.name == id) return Dump(AdapterObject(m, a, created));
  }
  throw UnknownModel(models, id);
}

// ---- a top-level member without the full parse ------------------------------------------

namespace {

size_t SkipWs(std::string_view b, size_t i) {
  while (i < b.size() && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r')) ++i;
  return i;
}

// The end of the string token starting at b[i] == '"', or npos.
size_t StringEnd(std::string_view b, size_t i) {
  for (++i; i < b.size(); ++i) {
    if (b[i] == '\\') {
      ++i;
    } else if (b[i] == '"') {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

// The end of the value starting at b[i], or npos.
size_t ValueEnd(std::string_view b, size_t i) {
  if (i >= b.size()) return std::string_view::npos;
  if (b[i] == '"') return StringEnd(b, i);
  if (b[i] != '{' && b[i] != '[') {
    while (i < b.size() && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' &&
           b[i] != '\n' && b[i] != '\t' && b[i] != '\r')
      ++i;
    return i;
  }
  int depth = 0;
  for (; i < b.size(); ++i) {
    if (b[i] == '"') {
      i = StringEnd(b, i);
      if (i == std::string_view::npos) return i;
      --i;
    } else if (b[i] == '{' || b[i] == '[') {
      ++depth;
    } else if (b[i] == '}' || b[i] == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

std::string Decoded(std::string_view token) {
  try {
    const json v = json::parse(token);
    return v.is_string() ? v.get<std::string>() : "";
  } catch (const std::exception&) {
    return "";
  }
}

}  // namespace

std::string PeekString(std::string_view b, std::string_view key) {
  size_t i = SkipWs(b, 0);
  if (i >= b.size() || b[i] != '{') return "";
  i = SkipWs(b, i + 1);
  while (i < b.size() && b[i] == '"') {
    const size_t kend = StringEnd(b, i);
    if (kend == std::string_view::npos) return "";
    const std::string_view raw = b.substr(i + 1, kend - i - 2);
    const std::string name = raw.find('\\') == std::string_view::npos
                                 ? std::string(raw)
                                 : Decoded(b.substr(i, kend - i));
    i = SkipWs(b, kend);
    if (i >= b.size() || b[i] != ':') return "";
    i = SkipWs(b, i + 1);
    const size_t vend = ValueEnd(b, i);
    if (vend == std::string_view::npos) return "";
    if (name == key) return b[i] == '"' ? Decoded(b.substr(i, vend - i)) : "";
    i = SkipWs(b, vend);
    if (i >= b.size() || b[i] != ',') return "";
    i = SkipWs(b, i + 1);
  }
  return "";
}

std::string TokenizeBody(const std::vector<int32_t>& tokens,
                         const std::vector<std::string>* pieces) {
  json out = json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (pieces == nullptr) {
      out.push_back(tokens[i]);
      continue;
    }
    const std::string& p = (*pieces)[i];
    json piece;
    if (IsValidUtf8(p)) {
      piece = p;
    } else {
      piece = json::array();
      for (unsigned char b : p) piece.push_back(b);
    }
    out.push_back({{"id", tokens[i]}, {"piece", piece}});
  }
  return Dump(json{{"tokens", out}});
}

std::string DetokenizeBody(std::string_view text) {
  return Dump(json{{"content", std::string(text)}});
}

}  // namespace paddock::server
