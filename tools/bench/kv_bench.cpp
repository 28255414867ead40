// paddock-kv-bench: the figures of the paged KV cache (not a test: prints measurements).
//
//   paddock-kv-bench prefix MODEL        time to first token for a request sharing a 1,000-token
//                                         prefix with the previous one, cached vs uncached
//   paddock-kv-bench window MODEL        KV memory in use at 1k..16k tokens, window on and off
//   paddock-kv-bench dtypes MODEL [-z TOKENIZER] TEXT
//                                         bytes per token and average next-token log-likelihood
//                                         of TEXT for each KV type configuration
// Medians of 5 runs where timing is involved.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "base/stats.h"
#include "base/strings.h"
#include "base/timer.h"
#include "paddock/paddock.h"

using namespace paddock;

namespace {

GenerateOptions Greedy(int n) {
  GenerateOptions o;
  o.max_tokens = n;
  o.sampling.temperature = 0;
  o.ignore_eos = true;
  return o;
}

// Builds a prompt of about `tokens` tokens from a repeated sentence.
std::string TextOfTokens(const Engine& e, int tokens) {
  const std::string s =
      "Once upon a time, there was a little girl named Lily who loved to play in the park with her "
      "red ball. ";
  std::string t;
  while (static_cast<int>(e.Tokenize(t, true).size()) < tokens) t += s;
  return t;
}

int Prefix(const std::string& model) {
  EngineOptions eo;
  eo.model_path = model;
  auto cached = Engine::Create(eo);
  eo.prefix_cache = false;
  auto uncached = Engine::Create(eo);
  const std::string prefix = TextOfTokens(*cached, 1000);
  std::vector<double> t_cold, t_warm;
  int cached_tokens = 0, prompt_tokens = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const std::string a = prefix + "Question " + std::to_string(2 * rep) + ": what did she see?";
    const std::string b =
        prefix + "Question " + std::to_string(2 * rep + 1) + ": where did she go?";
    t_cold.push_back(uncached->Generate(b, Greedy(1)).prompt_seconds);
    cached->Generate(a, Greedy(1));  // leaves the shared prefix in the cache
    const GenerateResult r = cached->Generate(b, Greedy(1));
    t_warm.push_back(r.prompt_seconds);
    cached_tokens = r.cached_tokens;
    prompt_tokens = r.prompt_tokens;
  }
  std::printf(
      "prefix reuse on %s: prompt %d tokens, %d reused from the cache (%.1f%% recomputed)\n",
      model.c_str(), prompt_tokens, cached_tokens,
      100.0 * (prompt_tokens - cached_tokens) / prompt_tokens);
  std::printf(
      "  time to first token: uncached %.1f ms, cached %.1f ms (%.1fx faster), medians of 5\n",
      Summarize(t_cold).median * 1e3, Summarize(t_warm).median * 1e3,
      Summarize(t_cold).median / Summarize(t_warm).median);
  return 0;
}

int Window(const std::string& model) {
  std::printf("KV memory in use while one sequence grows (%s):\n", model.c_str());
  std::printf("  %-10s %14s %14s\n", "tokens", "window 512", "no window");
  std::vector<uint64_t> used[2];
  for (int w = 0; w < 2; ++w) {
    EngineOptions eo;
    eo.model_path = model;
    eo.context = 16384 + 16;
    eo.sliding_window = w == 0 ? 512 : 0;
    auto e = Engine::Create(eo);
    const int32_t token = static_cast<int32_t>(e->info().n_vocab / 2);
    for (int pos = 0; pos < 16384; ++pos) {
      e->Evaluate({token}, pos);
      const int n = pos + 1;
      if (n >= 1024 && (n & (n - 1)) == 0) used[w].push_back(e->Memory().kv_used_bytes);
    }
  }
  int k = 1024;
  for (size_t i = 0; i < used[0].size() && i < used[1].size(); ++i, k *= 2) {
    std::printf("  %-10d %14s %14s\n", k, FormatBytes(used[0][i]).c_str(),
                FormatBytes(used[1][i]).c_str());
  }
  return 0;
}

int Dtypes(const std::string& model, const std::string& tokenizer, const std::string& text_path) {
  struct Config {
    const char* name;
    const char* k;
    const char* v;
    const char* layers;
  } configs[] = {
      {"f32", "f32", "f32", ""},
      {"f16", "f16", "f16", ""},
      {"bf16", "bf16", "bf16", ""},
      {"int8", "int8", "int8", ""},
      {"int4", "int4", "int4", ""},
      {"K int8 / V int4", "int8", "int4", ""},
      {"K f16 / V int8", "f16", "int8", ""},
      {"mix: int4, first+last int8", "int4", "int4", "first=int8,last=int8"},
  };
  const std::string text = ReadFileToString(text_path);
  double base = 0;
  std::printf("KV cache types on %s, text %s:\n", model.c_str(), text_path.c_str());
  std::printf("  %-30s %12s %12s %14s %10s\n", "K/V types", "bytes/token", "vs f16", "avg log-lik",
              "change");
  size_t f16_bytes = 0;
  for (const auto& c : configs) {
    EngineOptions eo;
    eo.model_path = model;
    eo.tokenizer_path = tokenizer;
    eo.cache_type_k = c.k;
    eo.cache_type_v = c.v;
    eo.kv_layer_types = c.layers;
    auto e = Engine::Create(eo);
    const auto toks = e->Tokenize(text, true);
    const int n = std::min<int>(static_cast<int>(toks.size()), e->info().context);
    double ll = 0;
    for (int i = 0; i + 1 < n; ++i) {
      const float* l = e->Evaluate({toks[static_cast<size_t>(i)]}, i);
      const int V = e->info().n_vocab;
      const float mx = *std::max_element(l, l + V);
      double z = 0;
      for (int j = 0; j < V; ++j) z += std::exp(static_cast<double>(l[j] - mx));
      ll += static_cast<double>(l[toks[static_cast<size_t>(i + 1)]] - mx) - std::log(z);
    }
    ll /= (n - 1);
    const size_t bpt = e->Memory().kv_bytes_per_token;
    if (std::strcmp(c.name, "f32") == 0) base = ll;
    if (std::strcmp(c.name, "f16") == 0) f16_bytes = bpt;
    std::printf("  %-30s %12zu %11.0f%% %14.5f %+10.5f\n", c.name, bpt,
                f16_bytes ? 100.0 * bpt / f16_bytes : 200.0, ll, ll - base);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc >= 3 && std::string(argv[1]) == "prefix") return Prefix(argv[2]);
    if (argc >= 3 && std::string(argv[1]) == "window") return Window(argv[2]);
    if (argc == 4 && std::string(argv[1]) == "dtypes") return Dtypes(argv[2], "", argv[3]);
    if (argc == 6 && std::string(argv[1]) == "dtypes" && std::string(argv[3]) == "-z")
      return Dtypes(argv[2], argv[4], argv[5]);
    std::fprintf(
        stderr,
        "usage: paddock-kv-bench prefix MODEL | window MODEL | dtypes MODEL [-z TOKENIZER] TEXT\n");
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "paddock-kv-bench: error: %s\n", e.what());
    return 1;
  }
}
