// paddock-grammar-bench: the figures of constrained decoding (not a test: prints measurements).
//
//   paddock-grammar-bench VOCAB [--requests N] [SCHEMA.json | GRAMMAR.gbnf ...]
//   paddock-grammar-bench --decode MODEL [--tokens T] [--reps R]
//
// --decode: decode throughput with and without a grammar through the batching service, at 1
// and 16 concurrent requests, interleaved repetitions (medians): T tokens per request (default
// 128) under a JSON schema (an array of 64 short strings: it cannot complete within T, so every
// token is constrained), against the same requests unconstrained.
//
// VOCAB is a model or vocabulary file (its tokenizer is used). For each schema or grammar:
// compile time (JSON Schema -> GBNF -> automaton bound to the vocabulary, median of 5), then N
// simulated requests, each a random walk through the grammar (a token drawn uniformly from the
// mask at every step, up to 256 steps) timing every mask: with the per-grammar cache shared by
// the requests as in serving, and cold (no cache: every mask a full trie walk). The baseline is
// llama.cpp's approach: every token checked on its own against the automaton (the scalar
// reference), on the first 16 steps of one request.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "base/strings.h"
#include "base/timer.h"
#include "engine/constrained.h"
#include "grammar/cfg.h"
#include "grammar/matcher.h"
#include "model/tokenizer.h"
#include "model/weights.h"
#include "paddock/paddock.h"
#include "paddock/service.h"

using namespace paddock;

namespace {

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

const char* const kBuiltin[] = {"json_object"};

struct Walk {
  std::vector<double> mask_us;
  int tokens = 0;
};

Walk Run(const std::shared_ptr<const grammar::TokenGrammar>& g, int requests, uint64_t seed,
         int max_steps) {
  Walk w;
  std::mt19937_64 rng(seed);
  const grammar::TokenTrie& trie = g->trie();
  std::vector<uint64_t> mask((static_cast<size_t>(trie.n_vocab()) + 63) / 64);
  for (int r = 0; r < requests; ++r) {
    grammar::Matcher m(g);
    for (int step = 0; step < max_steps && !m.Done(); ++step) {
      const double t0 = NowSeconds();
      m.FillMask(mask.data());
      w.mask_us.push_back((NowSeconds() - t0) * 1e6);
      std::vector<int32_t> allowed;
      for (int id = 0; id < trie.n_vocab(); ++id)
        if (grammar::Allowed(mask, id) && !trie.token(id).empty()) allowed.push_back(id);
      if (allowed.empty()) break;
      m.AcceptToken(allowed[rng() % allowed.size()]);
      w.tokens++;
    }
  }
  return w;
}

// Generated tokens per second over `batch` requests submitted together.
double DecodeRun(Service& svc, int batch, int tokens, const std::shared_ptr<const Grammar>& g,
                 uint64_t seed) {
  const std::vector<int32_t> prompt = svc.engine().Tokenize("Once upon a time", true);
  std::vector<std::shared_ptr<RequestStream>> streams(static_cast<size_t>(batch));
  const double t0 = NowSeconds();
  for (int i = 0; i < batch; ++i) {
    RequestOptions o;
    o.generate.max_tokens = tokens;
    o.generate.ignore_eos = true;
    o.generate.sampling.temperature = 1;
    o.generate.sampling.seed = seed + static_cast<uint64_t>(i);
    o.generate.grammar = g;
    if (svc.Submit(prompt, o, &streams[static_cast<size_t>(i)]) != SubmitStatus::kAccepted)
      Fail("the service refused a request");
  }
  int generated = 0;
  for (auto& s : streams) {
    std::string text;
    while (s->Wait(&text, 60) != RequestStream::Status::kDone) {
    }
    generated += s->result().generated_tokens;
  }
  return generated / (NowSeconds() - t0);
}

int Decode(const std::string& model, int tokens, int reps) {
  EngineOptions eo;
  eo.model_path = model;
  eo.kv_sequences = 16;
  auto engine = Engine::Create(eo);
  auto g = engine->CompileGrammar(
      GrammarKind::kJsonSchema,
      R"({"type": "array", "items": {"type": "string", "maxLength": 24}, "minItems": 64, "maxItems": 64})");
  ServiceOptions so;
  so.max_running = 16;
  auto svc = Service::Create(std::move(engine), so);
  std::printf(
      "| requests | unconstrained tok/s | constrained tok/s | ratio | mask us/token |\n"
      "|---|---|---|---|---|\n");
  for (int batch : {1, 16}) {
    std::vector<double> plain, constrained;
    DecodeRun(*svc, batch, 8, g, 99);  // warm-up
    const ServiceStats before = svc->Stats();
    for (int r = 0; r < reps; ++r) {
      plain.push_back(DecodeRun(*svc, batch, tokens, nullptr, 1000u * static_cast<uint64_t>(r)));
      constrained.push_back(DecodeRun(*svc, batch, tokens, g, 1000u * static_cast<uint64_t>(r)));
    }
    const ServiceStats after = svc->Stats();
    const double masks = static_cast<double>(after.grammar_masks - before.grammar_masks);
    const double p = Quantile(plain, 0.5), c = Quantile(constrained, 0.5);
    std::printf(
        "| %d | %.1f | %.1f | %.3f | %.1f |\n", batch, p, c, c / p,
        masks > 0 ? (after.grammar_mask_seconds - before.grammar_mask_seconds) / masks * 1e6 : 0);
    std::fflush(stdout);
  }
  return 0;
}

// The per-token baseline: each vocabulary token tested on its own, microseconds per mask.
std::vector<double> BaselineMaskUs(const std::shared_ptr<const grammar::TokenGrammar>& g,
                                   const grammar::TokenTrie& trie) {
  std::vector<double> base;
  grammar::Matcher m(g);
  std::mt19937_64 rng(7);
  for (int step = 0; step < 16 && !m.Done(); ++step) {
    const double b0 = NowSeconds();
    std::vector<int32_t> allowed;
    for (int id = 0; id < trie.n_vocab(); ++id)
      if (m.AllowsRef(id) && !trie.token(id).empty()) allowed.push_back(id);
    base.push_back((NowSeconds() - b0) * 1e6);
    if (allowed.empty()) break;
    m.AcceptToken(allowed[rng() % allowed.size()]);
  }
  return base;
}

// One table row: a grammar (the built-in json_object, a schema .json or a .gbnf file)
// compiled five times, then masks with the cache warm and cold against the baseline.
void MaskRow(const std::string& in, const std::shared_ptr<const grammar::TokenTrie>& trie,
             int requests) {
  const bool builtin = in == "json_object";
  const bool schema = !builtin && EndsWith(in, ".json");
  const std::string text = builtin ? "" : ReadFileToString(in);
  std::vector<double> compile;
  std::shared_ptr<const grammar::TokenGrammar> g;
  std::string gbnf;
  for (int k = 0; k < 5; ++k) {
    const double c0 = NowSeconds();
    gbnf = builtin ? grammar::JsonObjectGbnf() : schema ? grammar::JsonSchemaToGbnf(text) : text;
    g = std::make_shared<grammar::TokenGrammar>(grammar::ParseGbnf(gbnf), trie);
    compile.push_back((NowSeconds() - c0) * 1e3);
  }
  const Walk warm = Run(g, requests, 7, 256);
  const auto stats = g->cache_stats();
  auto cold_g = std::make_shared<grammar::TokenGrammar>(grammar::ParseGbnf(gbnf), trie, 0);
  const Walk cold = Run(cold_g, std::max(1, requests / 10), 7, 256);
  const std::vector<double> base = BaselineMaskUs(cold_g, *trie);
  const double cold_med = Quantile(cold.mask_us, 0.5);
  std::printf("| %s | %.2f | %d | %.1f | %.1f | %.1f%% | %.1f | %.1f | %.0f | %.0fx |\n",
              in.c_str(), Quantile(compile, 0.5), warm.tokens, Quantile(warm.mask_us, 0.5),
              Quantile(warm.mask_us, 0.99),
              100.0 * static_cast<double>(stats.hits) /
                  static_cast<double>(std::max<uint64_t>(1, stats.hits + stats.misses)),
              cold_med, Quantile(cold.mask_us, 0.99), Quantile(base, 0.5),
              cold_med > 0 ? Quantile(base, 0.5) / cold_med : 0);
  std::fflush(stdout);
}

// A count option's value: a whole number of at least 1.
int CountArg(const char* name, const char* value) {
  char* end = nullptr;
  const long v = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || v < 1 || v > 1000000)
    Fail("%s takes a whole number from 1 to 1000000, not '%s'", name, value);
  return static_cast<int>(v);
}

// paddock-grammar-bench --decode MODEL [--tokens N] [--reps N]
int DecodeMain(int argc, char** argv) {
  int tokens = 128, reps = 3;
  for (int i = 3; i < argc; i += 2) {
    if (i + 1 >= argc) Fail("option '%s' needs a value", argv[i]);
    if (std::strcmp(argv[i], "--tokens") == 0) {
      tokens = CountArg("--tokens", argv[i + 1]);
    } else if (std::strcmp(argv[i], "--reps") == 0) {
      reps = CountArg("--reps", argv[i + 1]);
    } else {
      Fail("unknown option '%s'", argv[i]);
    }
  }
  return Decode(argv[2], tokens, reps);
}

// paddock-grammar-bench VOCAB [--requests N] [SCHEMA.json | GRAMMAR.gbnf ...]
int MaskMain(int argc, char** argv) {
  auto tok = LoadTokenizer(argv[1]);
  int requests = 100;
  std::vector<std::string> inputs;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--requests") == 0) {
      if (i + 1 >= argc) Fail("option '--requests' needs a value");
      requests = CountArg("--requests", argv[++i]);
    } else if (std::strncmp(argv[i], "--", 2) == 0) {
      Fail("unknown option '%s'", argv[i]);
    } else {
      inputs.push_back(argv[i]);
    }
  }
  if (inputs.empty()) inputs.assign(std::begin(kBuiltin), std::end(kBuiltin));
  const double t0 = NowSeconds();
  auto trie = TokenTrieOf(*tok);
  std::printf("vocabulary %s: %d tokens, trie of %zu nodes built in %.1f ms\n", argv[1],
              trie->n_vocab(), trie->nodes().size(), (NowSeconds() - t0) * 1e3);
  std::printf(
      "| grammar | compile ms | tokens | mask us median | p99 | cache hits | cold median | "
      "cold p99 | per-token baseline median | speedup |\n|---|---|---|---|---|---|---|---|---|---"
      "|\n");
  for (const std::string& in : inputs) MaskRow(in, trie, requests);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || (std::strcmp(argv[1], "--decode") == 0 && argc < 3)) {
    std::fprintf(stderr,
                 "usage: paddock-grammar-bench VOCAB [--requests N] [SCHEMA.json | GRAMMAR.gbnf "
                 "...]\n       paddock-grammar-bench --decode MODEL [--tokens N] [--reps N]\n");
    return 2;
  }
  try {
    return std::strcmp(argv[1], "--decode") == 0 ? DecodeMain(argc, argv) : MaskMain(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "paddock-grammar-bench: error: %s\n", e.what());
    return 1;
  }
}
