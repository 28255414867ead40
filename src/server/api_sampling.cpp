// server/api_sampling.cpp: a request's sampling fields into SamplingParams: OpenAI's
// (temperature, top_p, penalties, seed, logit_bias), vLLM's and llama-server's (top_k, min_p,
// repetition_penalty, repeat_last_n, typical-p, XTC, Mirostat, DRY), ranges and defaults from
// the request schema.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>

#include "server/api_json.h"

namespace paddock::server::api_detail {
namespace {

// llama-server's samplers: typical-p, XTC, Mirostat, DRY (ranges and defaults from the schema).
void ParseLlamaSamplers(const json& j, SamplingParams* sp) {
  SamplingParams& s = *sp;
  auto num = [&](const char* name) { return static_cast<float>(Number(j, name, kGenerate)); };
  s.typical_p = std::max(num("typical_p"), 1e-6f);  // 0: the single most typical token
  s.xtc_probability = num("xtc_probability");
  s.xtc_threshold = num("xtc_threshold");
  s.mirostat = static_cast<int>(Integer(j, "mirostat", kGenerate));
  s.mirostat_tau = num("mirostat_tau");
  s.mirostat_eta = num("mirostat_eta");
  s.dry_multiplier = num("dry_multiplier");
  s.dry_base = num("dry_base");
  s.dry_allowed_length = static_cast<int>(Integer(j, "dry_allowed_length", kGenerate));
  s.dry_penalty_last_n = static_cast<int>(Integer(j, "dry_penalty_last_n", kGenerate));
  if (const json* b = Field(j, "dry_sequence_breakers")) {
    if (b->size() > 32) Bad("dry_sequence_breakers", "at most 32 dry_sequence_breakers");
    s.dry_sequence_breakers.clear();
    for (const auto& x : *b) {
      if (!x.is_string() || x.get<std::string>().empty() || x.get<std::string>().size() > 64)
        Bad("dry_sequence_breakers", "dry_sequence_breakers are strings of 1-64 bytes");
      s.dry_sequence_breakers.push_back(x.get<std::string>());
    }
  }
}

}  // namespace

// OpenAI semantics: only what the request asks for is applied.
void ParseSampling(const json& j, const ApiContext& ctx, SamplingParams* sp) {
  SamplingParams& s = *sp;
  s.temperature = static_cast<float>(Number(j, "temperature", kGenerate));
  s.top_p = static_cast<float>(Number(j, "top_p", kGenerate));
  if (s.top_p == 0) s.top_p = 1e-6f;  // "nucleus of zero" = the single most likely token
  int64_t top_k = Integer(j, "top_k", kGenerate);
  s.top_k = top_k < 0 ? 0 : static_cast<int>(top_k);
  s.min_p = static_cast<float>(Number(j, "min_p", kGenerate));
  s.presence_penalty = static_cast<float>(Number(j, "presence_penalty", kGenerate));
  s.frequency_penalty = static_cast<float>(Number(j, "frequency_penalty", kGenerate));
  // repetition_penalty (vLLM) or llama-server's repeat_penalty.
  const char* rp_name =
      Field(j, "repetition_penalty") != nullptr ? "repetition_penalty" : "repeat_penalty";
  s.repeat_penalty = static_cast<float>(Number(j, rp_name, kGenerate));
  const int64_t last_n = Integer(j, "repeat_last_n", kGenerate);
  s.penalty_last_n = last_n < 0 ? ctx.context : static_cast<int>(last_n);
  ParseLlamaSamplers(j, &s);
  if (const json* seed = Field(j, "seed")) {
    if (!seed->is_number_integer()) Bad("seed", "'seed' must be an integer");
    s.seed = seed->is_number_unsigned() ? seed->get<uint64_t>()
                                        : static_cast<uint64_t>(seed->get<int64_t>());
  } else {
    static std::atomic<uint64_t> counter{0x9e3779b97f4a7c15ull};
    s.seed = counter.fetch_add(0x9e3779b97f4a7c15ull);
  }
  // logit_bias: {"token id": bias in [-100, 100]} (OpenAI), added to the logits before sampling.
  if (const json* lb = Field(j, "logit_bias")) {
    if (!lb->is_object()) Bad("logit_bias", "'logit_bias' must be an object of token id -> bias");
    if (lb->size() > 1024) Bad("logit_bias", "at most 1024 logit_bias entries");
    for (const auto& [k, v] : lb->items()) {
      const bool digits =
          !k.empty() && k.size() <= 9 && k.find_first_not_of("0123456789") == std::string::npos;
      const long id = digits ? std::strtol(k.c_str(), nullptr, 10) : -1;
      if (id < 0 || (ctx.n_vocab > 0 && id >= ctx.n_vocab))
        Bad("logit_bias", "logit_bias key '" + k + "' is not a token id of this model (0.." +
                              std::to_string(ctx.n_vocab - 1) + ")");
      if (!v.is_number() || !(std::fabs(v.get<double>()) <= 100))
        Bad("logit_bias", "logit_bias values must be numbers in [-100, 100]");
      s.logit_bias.emplace_back(static_cast<int32_t>(id), v.get<float>());
    }
  }
}

}  // namespace paddock::server::api_detail
