#include "server/request_schema.h"

#include <cmath>
#include <cstdio>

#include "paddock/service.h"

namespace paddock::server {
namespace {

using T = FieldType;
using U = FieldUse;
constexpr double kN = static_cast<double>(kMaxChoices);

// Order: as docs/api.md lists them (the request's subject, then sampling, limits, output shape).
constexpr RequestField kFields[] = {
    // name, endpoints, type, use, lo, hi, def, default_doc, alias_of, origin, effect
    {"model", kGenerate | kEmbeddings | kTokenize | kDetokenize | kRerank, T::kString, U::kUsed, 0,
     0, 0, "the served model", "", "OpenAI",
     "the served name, one of its aliases or a served LoRA adapter's id (completions and chat: "
     "the adapter applies); with several models (`--models-dir`) it selects one, loaded on "
     "demand; else `404 model_not_found` listing them; at most 256 bytes"},
    {"prompt", kCompletions, T::kAny, U::kUsed, 0, 0, 0, "required", "", "OpenAI",
     "a string, an array of token ids, or up to 32 of either (the choices of each prompt in turn: "
     "`index` = prompt x `n` + choice; not with `echo`). "
     "Control tokens spelled in the text stay text unless `serve --special-in-prompts`"},
    {"messages", kChat, T::kArray, U::kUsed, 0, 0, 0, "required", "", "OpenAI",
     "`role` system / developer (as system) / user / assistant / tool, `content` a string, null or "
     "`text` parts (an assistant's `refusal` parts too), `image_url` parts (`{\"url\": "
     "\"data:image/...;base64,...\"}`, `detail` accepted; PNG, JPEG, WebP, GIF; a model served "
     "with `--mmproj`, else `400` naming it; remote URLs: `400`, nothing is fetched) (audio and "
     "file parts: `400`), "
     "`name` accepted (not passed to the template), an assistant's `tool_calls`, "
     "`reasoning_content` (or `reasoning`: handed to the template, which keeps or drops it), "
     "`refusal` (the content when there is none), `annotations` and null `audio` / "
     "`function_call` (what a response message carries comes back unchanged), a tool "
     "message's `tool_call_id`; null for any optional field; other message fields: `400`. "
     "Control tokens come only from the template"},
    {"input", kEmbeddings, T::kAny, U::kUsed, 0, 0, 0, "required", "", "OpenAI",
     "a string, strings, token ids or arrays of token ids (at most 2048 inputs, OpenAI's limit; "
     "more: `400` naming it)"},
    {"encoding_format", kEmbeddings, T::kString, U::kUsed, 0, 0, 0, "float", "", "OpenAI",
     "`float` or `base64` (little-endian float32)"},
    {"dimensions", kEmbeddings, T::kInteger, U::kUsed, 1, 1 << 20, 0, "the model's width", "",
     "OpenAI",
     "Matryoshka: each vector's first N components, normalized again (more than the model's "
     "width: `400` naming it)"},
    {"query", kRerank, T::kString, U::kUsed, 0, 0, 0, "required", "", "Jina, Cohere",
     "the text the documents are scored against"},
    {"documents", kRerank, T::kArray, U::kUsed, 0, 0, 0, "required", "", "Jina, Cohere",
     "strings, or objects with a `text` string (at most 2048); each scored as the pair [CLS] "
     "query [EOS] [SEP] document [EOS], as llama-server forms it"},
    {"top_n", kRerank, T::kInteger, U::kUsed, 1, 1 << 20, 0, "all", "", "Jina, Cohere",
     "the best N results, highest score first"},
    {"return_documents", kRerank, T::kBool, U::kUsed, 0, 0, 0,
     "false (`/v1/rerank`, `/rerank`: true)", "", "Jina, Cohere",
     "each result carries `document: {text}`"},
    {"max_tokens_per_doc", kRerank, T::kInteger, U::kUsed, 1, 1 << 20, 0, "the context", "",
     "Cohere",
     "a document's first N tokens are scored (a pair over the context: `400` unless "
     "`truncate`)"},
    {"truncate", kEmbeddings | kRerank, T::kBool, U::kUsed, 0, 0, 0, "false", "", "TEI, Ollama",
     "an input over the context keeps its first tokens (else `400 context_length_exceeded`; "
     "Ollama's `/api/embed` truncates unless `truncate: false`, as Ollama); rerank: the "
     "document is cut so its pair fits"},
    {"stream", kGenerate, T::kBool, U::kUsed, 0, 0, 0, "false", "", "OpenAI",
     "server-sent events, ending with `data: [DONE]`"},
    {"stream_options", kGenerate, T::kObject, U::kUsed, 0, 0, 0, "", "", "OpenAI",
     "`include_usage`: a final chunk with `usage`; other fields, or without `stream: true`: "
     "`400`"},
    {"max_tokens", kGenerate, T::kInteger, U::kUsed, 0, kContextLength, 16,
     "completions 16, chat: to the end of the context", "", "OpenAI",
     "tokens to generate (0, completions only: score the prompt with `echo`); prompt + max_tokens "
     "over the context: `400 context_length_exceeded`"},
    {"max_completion_tokens", kGenerate, T::kInteger, U::kAlias, 0, kContextLength, 16, "",
     "max_tokens", "OpenAI", "as `max_tokens`"},
    {"n_predict", kGenerate, T::kInteger, U::kAlias, -1, kContextLength, -1, "", "max_tokens",
     "llama-server", "as `max_tokens` (`-1`: no limit)"},
    {"temperature", kGenerate, T::kNumber, U::kUsed, 0, 2, 1, "1", "", "OpenAI", "0: greedy"},
    {"top_p", kGenerate, T::kNumber, U::kUsed, 0, 1, 1, "1", "", "OpenAI",
     "nucleus sampling (0: the single most likely token)"},
    {"top_k", kGenerate, T::kInteger, U::kUsed, -1, 1 << 20, 0, "0", "", "vLLM / llama-server",
     "0 or -1: off"},
    {"min_p", kGenerate, T::kNumber, U::kUsed, 0, 1, 0, "0", "", "vLLM / llama-server",
     "drop tokens below min_p x the top probability"},
    {"presence_penalty", kGenerate, T::kNumber, U::kUsed, -2, 2, 0, "0", "", "OpenAI",
     "over the whole context"},
    {"frequency_penalty", kGenerate, T::kNumber, U::kUsed, -2, 2, 0, "0", "", "OpenAI",
     "over the whole context"},
    {"repetition_penalty", kGenerate, T::kNumber, U::kUsed, 0.01, 10, 1, "1", "", "vLLM",
     "divides repeated tokens' positive logits (multiplies negative ones)"},
    {"repeat_penalty", kGenerate, T::kNumber, U::kAlias, 0.01, 10, 1, "", "repetition_penalty",
     "llama-server", "as `repetition_penalty`"},
    {"repeat_last_n", kGenerate, T::kInteger, U::kUsed, -1, 1 << 20, -1, "the context", "",
     "llama-server",
     "the tokens the repetition, presence and frequency penalties look back over "
     "(`-1`: the whole context, `0`: none)"},
    {"typical_p", kGenerate, T::kNumber, U::kUsed, 0, 1, 1, "1", "", "llama-server",
     "locally typical sampling: the tokens whose surprise is closest to the entropy, up to this "
     "mass (1: off)"},
    {"xtc_probability", kGenerate, T::kNumber, U::kUsed, 0, 1, 0, "0", "", "llama-server",
     "XTC: the chance per token that every candidate at or above `xtc_threshold` except the "
     "least likely of them is removed (0: off)"},
    {"xtc_threshold", kGenerate, T::kNumber, U::kUsed, 0, 1, 0.1, "0.1", "", "llama-server",
     "XTC's probability threshold"},
    {"mirostat", kGenerate, T::kInteger, U::kUsed, 0, 2, 0, "0", "", "llama-server",
     "1: Mirostat, 2: Mirostat 2.0 (replaces top-k, top-p, min-p, typical-p and XTC; no "
     "speculative drafts for the request); 0: off"},
    {"mirostat_tau", kGenerate, T::kNumber, U::kUsed, 0, 100, 5, "5", "", "llama-server",
     "Mirostat's target surprise in bits"},
    {"mirostat_eta", kGenerate, T::kNumber, U::kUsed, 0, 1, 0.1, "0.1", "", "llama-server",
     "Mirostat's learning rate"},
    {"dry_multiplier", kGenerate, T::kNumber, U::kUsed, 0, 100, 0, "0", "", "llama-server",
     "DRY: a token that would extend a repeat of `dry_allowed_length` or more tokens loses "
     "multiplier x base^(length - allowed) of its logit (0: off)"},
    {"dry_base", kGenerate, T::kNumber, U::kUsed, 1, 100, 1.75, "1.75", "", "llama-server",
     "DRY's exponential base"},
    {"dry_allowed_length", kGenerate, T::kInteger, U::kUsed, 1, 1000, 2, "2", "", "llama-server",
     "the longest repeat DRY leaves alone"},
    {"dry_penalty_last_n", kGenerate, T::kInteger, U::kUsed, -1, 1 << 20, -1, "-1", "",
     "llama-server", "the tokens DRY looks back over (`-1`: the whole context, `0`: off)"},
    {"dry_sequence_breakers", kGenerate, T::kArray, U::kUsed, 0, 0, 0,
     "`[\"\\n\", \":\", \"\\\"\", \"*\"]`", "", "llama-server",
     "strings no repeat extends across (a token whose text holds one; at most 32, 1-64 bytes "
     "each)"},
    {"seed", kGenerate, T::kInteger, U::kUsed, -9.2e18, 1.8e19, 0, "a fresh one per request", "",
     "OpenAI", "reproducible sampling; choice i of `n` samples with seed + i"},
    {"logit_bias", kGenerate, T::kObject, U::kUsed, 0, 0, 0, "", "", "OpenAI",
     "`{\"token id\": bias}`, bias in [-100, 100], at most 1024 entries, added to the logits "
     "before penalties and every sampler (also under greedy decoding)"},
    {"stop", kGenerate, T::kStringOrArray, U::kUsed, 0, 0, 0, "", "", "OpenAI",
     "a string or up to 16 (each 1-1024 bytes); excluded from the output"},
    {"ignore_eos", kGenerate, T::kBool, U::kUsed, 0, 0, 0, "false", "", "vLLM / llama-server",
     "keep generating past end-of-sequence"},
    {"n", kGenerate, T::kInteger, U::kUsed, 1, kN, 1, "1", "", "OpenAI",
     "choices of the same prompt: the prompt is computed once and the choices fork its KV blocks "
     "(copy-on-write) when the first token is sampled"},
    {"best_of", kGenerate, T::kInteger, U::kUsed, 1, 1000000, 1, "n", "", "OpenAI",
     "only equal to `n` (else `400`): all choices are returned"},
    {"logprobs", kCompletions, T::kInteger, U::kUsed, 0, 20, 0, "none", "", "OpenAI",
     "`choices[].logprobs` = `tokens`, `token_logprobs`, `top_logprobs` (that many alternatives "
     "per token), `text_offset`"},
    {"logprobs", kChat, T::kBool, U::kUsed, 0, 0, 0, "false", "", "OpenAI",
     "`choices[].logprobs.content[]` = `token`, `logprob`, `bytes`, `top_logprobs[]`"},
    {"top_logprobs", kChat, T::kInteger, U::kUsed, 0, 20, 0, "0", "", "OpenAI",
     "alternatives per token (needs `logprobs: true`)"},
    {"echo", kCompletions, T::kBool, U::kUsed, 0, 0, 0, "false", "", "OpenAI",
     "the prompt before the completion in `text`; with `logprobs`, the prompt's tokens first "
     "(the first with a `null` logprob)"},
    {"suffix", kCompletions, T::kAny, U::kRefused, 0, 0, 0, "", "", "OpenAI",
     "fill-in-the-middle is not implemented"},
    {"response_format", kGenerate, T::kObject, U::kUsed, 0, 0, 0, "text", "", "OpenAI",
     "`text`, `json_object` (llama-server's `schema` inside it: a JSON Schema) or `json_schema` "
     "(`name`, `schema`, `strict`, `description`): the output matches it"},
    {"grammar", kGenerate, T::kString, U::kUsed, 0, 0, 0, "", "", "llama-server",
     "a GBNF grammar the output matches"},
    {"json_schema", kGenerate, T::kAny, U::kUsed, 0, 0, 0, "", "", "llama-server",
     "a JSON Schema the output matches (at most one of `response_format`, `grammar` and "
     "`json_schema`)"},
    {"chat_template_kwargs", kChat, T::kObject, U::kUsed, 0, 0, 0, "", "", "vLLM / llama-server",
     "variables for the model's Jinja chat template (e.g. `enable_thinking: false`); a built-in "
     "family without a Jinja template refuses them"},
    {"tools", kChat, T::kArray, U::kUsed, 0, 0, 0, "", "", "OpenAI",
     "function tools (at most 128; see \"Tool calls\")"},
    {"tool_choice", kChat, T::kAny, U::kUsed, 0, 0, 0, "auto", "", "OpenAI",
     "`none`, `auto`, `required` or a named function (the last two constrain the reply)"},
    {"parallel_tool_calls", kChat, T::kBool, U::kUsed, 0, 0, 0, "true", "", "OpenAI",
     "up to 8 calls per reply where the convention can write several"},
    {"functions", kChat, T::kAny, U::kRefused, 0, 0, 0, "", "", "OpenAI (deprecated)",
     "use `tools`"},
    {"function_call", kChat, T::kAny, U::kRefused, 0, 0, 0, "", "", "OpenAI (deprecated)",
     "use `tool_choice`"},
    {"n_probs", kGenerate, T::kInteger, U::kUsed, 0, 20, 0, "", "", "llama-server",
     "as `logprobs` (completions) or `logprobs: true` with `top_logprobs` (chat); not with "
     "them"},
    {"reasoning_effort", kChat, T::kString, U::kUsed, 0, 0, 0, "", "", "OpenAI",
     "`none`, `minimal`, `low`, `medium` or `high`: handed to a Jinja chat template as "
     "`reasoning_effort` (gpt-oss reads it; `chat_template_kwargs` wins); other templates "
     "ignore it"},
    {"modalities", kChat, T::kArray, U::kUsed, 0, 0, 0, "`[\"text\"]`", "", "OpenAI",
     "`[\"text\"]` only; `audio`: `400`"},
    {"audio", kChat, T::kAny, U::kRefused, 0, 0, 0, "", "", "OpenAI",
     "audio output needs a model that speaks"},
    {"web_search_options", kChat, T::kAny, U::kRefused, 0, 0, 0, "", "", "OpenAI",
     "no network searches from a local server"},
    {"cache_prompt", kGenerate, T::kBool, U::kAccepted, 0, 0, 0, "true", "", "llama-server",
     "the prefix cache is always on and serves every request; outputs are the same either way "
     "(batch invariance), so `false` changes nothing"},
    {"store", kGenerate, T::kBool, U::kAccepted, 0, 0, 0, "false", "", "OpenAI",
     "nothing is stored for distillation or evals on a local server"},
    {"metadata", kGenerate, T::kObject, U::kAccepted, 0, 0, 0, "", "", "OpenAI",
     "at most 16 pairs of strings (keys up to 64 bytes, values up to 512), as OpenAI checks "
     "them; kept nowhere"},
    {"service_tier", kGenerate, T::kString, U::kAccepted, 0, 0, 0, "auto", "", "OpenAI",
     "`auto`, `default`, `flex`, `priority` or `scale`: one tier here (use `priority` for "
     "ordering)"},
    {"prediction", kChat, T::kObject, U::kAccepted, 0, 0, 0, "", "", "OpenAI",
     "predicted output: speculative decoding drafts from the model itself instead"},
    {"prompt_cache_key", kGenerate, T::kString, U::kAccepted, 0, 0, 0, "", "", "OpenAI",
     "the prefix cache matches prompts by their tokens, with no key"},
    {"safety_identifier", kGenerate, T::kString, U::kAccepted, 0, 0, 0, "", "", "OpenAI",
     "an end-user id for the caller's own bookkeeping; not used"},
    {"priority", kGenerate, T::kInteger, U::kUsed, -1000000, 1000000, 0, "0", "", "vLLM",
     "higher runs first; may preempt lower-priority requests under KV pressure"},
    {"timeout", kGenerate, T::kNumber, U::kUsed, 0, 1e6, 0, "`serve --timeout`", "", "Paddock",
     "per-request deadline in seconds (`finish_reason` `timeout`)"},
    {"user", kGenerate | kEmbeddings, T::kString, U::kAccepted, 0, 0, 0, "", "", "OpenAI",
     "an end-user id for the caller's own bookkeeping; not used"},
    {"content", kTokenize, T::kString, U::kUsed, 0, 0, 0, "required", "", "llama-server",
     "the text to tokenize"},
    {"add_special", kTokenize, T::kBool, U::kUsed, 0, 0, 1, "true", "", "llama-server",
     "BOS where the model adds one"},
    {"parse_special", kTokenize, T::kBool, U::kUsed, 0, 0, 0, "false", "", "llama-server",
     "control tokens spelled in the text become those tokens"},
    {"with_pieces", kTokenize, T::kBool, U::kUsed, 0, 0, 0, "false", "", "llama-server",
     "each token with its text (`piece`; bytes that are not UTF-8 as a byte array)"},
    {"tokens", kDetokenize, T::kArray, U::kUsed, 0, 0, 0, "required", "", "llama-server",
     "token ids to turn into text"},
    {"lora_name", kLoraUpdate, T::kString, U::kUsed, 0, 0, 0, "required", "", "vLLM",
     "the adapter's model id (load: a new one; unload: a served one)"},
    {"lora_path", kLoraUpdate, T::kString, U::kUsed, 0, 0, 0, "required to load", "", "vLLM",
     "the adapter file (llama.cpp's GGUF adapter layout), read by the server"},
    {"lora_scale", kLoraUpdate, T::kNumber, U::kUsed, -1000, 1000, 1, "1", "", "Paddock",
     "the product's scale (llama.cpp's --lora-scaled)"},
    {"base_model_name", kLoraUpdate, T::kString, U::kUsed, 0, 0, 0, "the served model", "", "vLLM",
     "the model the adapter applies to (with several models, `--models-dir`)"},
};

const char* TypeName(FieldType t) {
  switch (t) {
    case T::kBool:
      return "boolean";
    case T::kInteger:
      return "integer";
    case T::kNumber:
      return "number";
    case T::kString:
      return "string";
    case T::kObject:
      return "object";
    case T::kArray:
      return "array";
    case T::kStringOrArray:
      return "string or array";
    case T::kAny:
      return "see effect";
  }
  return "";
}

std::string FormatLimit(double v) {
  if (v == kContextLength) return "context";
  if (std::fabs(v) >= 1e15) return v < 0 ? "-2^63" : "2^64-1";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

}  // namespace

std::span<const RequestField> RequestFields() {
  return kFields;
}

const RequestField* FindRequestField(std::string_view name, uint8_t endpoints) {
  for (const RequestField& f : kFields)
    if (f.name == name && (f.endpoints & endpoints) != 0) return &f;
  return nullptr;
}

std::string EndpointNames(uint8_t endpoints) {
  static constexpr std::pair<Endpoint, const char*> kNames[] = {{kCompletions, "completions"},
                                                                {kChat, "chat"},
                                                                {kEmbeddings, "embeddings"},
                                                                {kTokenize, "tokenize"},
                                                                {kDetokenize, "detokenize"},
                                                                {kLoraUpdate, "lora update"},
                                                                {kRerank, "rerank"}};
  std::string out;
  for (const auto& [bit, name] : kNames) {
    if ((endpoints & bit) == 0) continue;
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

std::string RequestFieldsMarkdown() {
  std::string out =
      "| field | endpoints | type | default | from | what Paddock does |\n"
      "|---|---|---|---|---|---|\n";
  for (const RequestField& f : kFields) {
    std::string type = TypeName(f.type);
    if ((f.type == T::kInteger || f.type == T::kNumber) && f.lo != f.hi)
      type += " " + FormatLimit(f.lo) + ".." + FormatLimit(f.hi);
    std::string effect(f.effect);
    if (f.use == U::kAlias) effect = "alias of `" + std::string(f.alias_of) + "`: " + effect;
    if (f.use == U::kAccepted) effect = "accepted, no effect: " + effect;
    if (f.use == U::kRefused) effect = "`400` naming it: " + effect;
    out += "| `" + std::string(f.name) + "` | " + EndpointNames(f.endpoints) + " | " + type +
           " | " + std::string(f.default_doc) + " | " + std::string(f.origin) + " | " + effect +
           " |\n";
  }
  return out;
}

}  // namespace paddock::server
