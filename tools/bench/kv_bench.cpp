// paddock-kv-bench: the figures of the paged KV cache (not a test: prints measurements).
//
//   paddock-kv-bench prefix MODEL        time to first token for a request sharing a 1,000-token
//                                         prefix with the previous one, cached vs uncached
//   paddock-kv-bench window MODEL        KV memory in use at 1k..16k tokens, window on and off
//   paddock-kv-bench dtypes MODEL [-z TOKENIZER] TEXT
//                                         bytes per token and average next-token log-likelihood
//                                         of TEXT for each KV type configuration
//   paddock-kv-bench kscales [SEED]      key scale granularity: attention error of int8 / int4
//                                         keys with one scale per head (Paddock's, rotated),
//                                         per group of 32 or 64 (llama.cpp's q8_0 / q4_0), and
//                                         per channel over blocks of 32 tokens (KIVI), on iid
//                                         and outlier-channel keys with RoPE
// Medians of 5 runs where timing is involved.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "base/half.h"
#include "base/mapped_file.h"
#include "base/stats.h"
#include "base/strings.h"
#include "base/timer.h"
#include "kernels/kernels.h"
#include "kernels/kv_format.h"
#include "kernels/kv_rows.h"
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

// ---- kscales ---------------------------------------------------------------------------

// Symmetric quantize-dequantize of n values with one scale (fp16 when half_scale, as group
// formats store it): levels +-qmax, the scale amax / qmax (int4: the extreme value maps to -8,
// as Q4_0 and Paddock's int4 do).
void QuantGroup(float* x, int n, int stride, int bits, bool half_scale) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i) {
    const float a = std::fabs(x[i * stride]);
    if (a > amax) {
      amax = a;
      max = x[i * stride];
    }
  }
  float d = bits == 8 ? amax / 127.0f : max / -8.0f;
  if (half_scale) d = Fp16ToFp32(Fp32ToFp16(d));
  const float id = d != 0 ? 1.0f / d : 0.0f;
  for (int i = 0; i < n; ++i) {
    float& v = x[i * stride];
    const float q = bits == 8 ? std::clamp(std::nearbyint(v * id), -127.0f, 127.0f)
                              : std::clamp(std::nearbyint(v * id), -8.0f, 7.0f);
    v = q * d;
  }
}

struct KEncoding {
  const char* name;
  double bytes_per_element;  // at head_dim 128
  // Quantize-dequantize keys [t][hd] (t a multiple of 32) in place.
  std::function<void(std::vector<float>*, int t, int hd)> apply;
};

// Paddock's own encoders (kv_store) and decoder, rotation included; the keys come back in the
// original basis (the Hadamard transform is its own inverse).
void EngineRoundTrip(KvDtype type, std::vector<float>* k, int t, int hd) {
  const KernelTable& kt = ReferenceKernels();
  std::vector<uint8_t> row(KvRowBytes(type, 1, hd));
  for (int i = 0; i < t; ++i) {
    float* x = k->data() + static_cast<size_t>(i) * hd;
    kt.kv_store[static_cast<int>(type)](row.data(), x, 1, hd);
    KvDecodeHead(type, row.data(), 0, 1, hd, 0, hd, x);
    if (KvRotated(type, hd)) Hadamard(x, hd);
  }
}

void Groups(std::vector<float>* k, int t, int hd, int g, int bits, bool rotate) {
  for (int i = 0; i < t; ++i) {
    float* x = k->data() + static_cast<size_t>(i) * hd;
    if (rotate) Hadamard(x, hd);
    for (int s = 0; s < hd; s += g) QuantGroup(x + s, g, 1, bits, true);
    if (rotate) Hadamard(x, hd);
  }
}

// KIVI: each channel quantized over a block of 32 tokens (keys written a block at a time),
// asymmetric as the paper does: fp16 scale and minimum per channel and block.
void PerChannel(std::vector<float>* k, int t, int hd, int bits) {
  const float levels = bits == 8 ? 255.0f : 15.0f;
  for (int b = 0; b < t; b += 32) {
    for (int c = 0; c < hd; ++c) {
      float* x = k->data() + static_cast<size_t>(b) * hd + c;
      float lo = x[0], hi = x[0];
      for (int i = 1; i < 32; ++i) {
        lo = std::min(lo, x[i * hd]);
        hi = std::max(hi, x[i * hd]);
      }
      const float d = Fp16ToFp32(Fp32ToFp16((hi - lo) / levels));
      const float z = Fp16ToFp32(Fp32ToFp16(lo));
      for (int i = 0; i < 32; ++i) {
        const float q = d > 0 ? std::clamp(std::nearbyint((x[i * hd] - z) / d), 0.0f, levels) : 0;
        x[i * hd] = z + q * d;
      }
    }
  }
}

// The K encodings compared: Paddock's (through the engine's own KV rows), llama.cpp's block
// types, KIVI's per-channel scales.
std::vector<KEncoding> KEncodings() {
  return {
      {"f16", 2.0,
       [](std::vector<float>* k, int, int) {
         for (float& v : *k) v = Fp16ToFp32(Fp32ToFp16(v));
       }},
      {"int8, scale per head, rotated (Paddock)", 1 + 4.0 / 128,
       [](std::vector<float>* k, int t, int hd) { EngineRoundTrip(KvDtype::kI8, k, t, hd); }},
      {"int8, scale per 64, rotated", 1 + 2.0 / 64,
       [](std::vector<float>* k, int t, int hd) { Groups(k, t, hd, 64, 8, true); }},
      {"int8, scale per 32, rotated", 1 + 2.0 / 32,
       [](std::vector<float>* k, int t, int hd) { Groups(k, t, hd, 32, 8, true); }},
      {"int8, scale per 32 (llama.cpp q8_0)", 1 + 2.0 / 32,
       [](std::vector<float>* k, int t, int hd) { Groups(k, t, hd, 32, 8, false); }},
      {"int8, scale per head, not rotated", 1 + 2.0 / 128,
       [](std::vector<float>* k, int t, int hd) { Groups(k, t, hd, hd, 8, false); }},
      {"int8, per channel / 32 tokens (KIVI)", 1 + 4.0 / 32,
       [](std::vector<float>* k, int t, int hd) { PerChannel(k, t, hd, 8); }},
      {"int4, scale per 32, rotated (Paddock)", 0.5 + 2.0 / 32,
       [](std::vector<float>* k, int t, int hd) { EngineRoundTrip(KvDtype::kI4, k, t, hd); }},
      {"int4, scale per 32 (llama.cpp q4_0)", 0.5 + 2.0 / 32,
       [](std::vector<float>* k, int t, int hd) { Groups(k, t, hd, 32, 4, false); }},
      {"int4, scale per head, rotated", 0.5 + 2.0 / 128,
       [](std::vector<float>* k, int t, int hd) { Groups(k, t, hd, hd, 4, true); }},
      {"int4, per channel / 32 tokens (KIVI)", 0.5 + 4.0 / 32,
       [](std::vector<float>* k, int t, int hd) { PerChannel(k, t, hd, 4); }},
  };
}

// A deterministic generator of uniform and Gaussian draws.
struct Rng {
  uint64_t st;
  double Uniform() {
    st = st * 6364136223846793005ull + 1442695040888963407ull;
    return (static_cast<double>(st >> 11) + 0.5) / 9007199254740992.0;
  }
  double Gauss() {
    return std::sqrt(-2 * std::log(Uniform())) * std::cos(6.283185307179586 * Uniform());
  }
};

// One head's T keys and values and its channel scales: iid Gaussian, or with outlier channels
// (4 low-frequency channels at 12x, lognormal rest) and RoPE applied (NeoX pairing).
struct Head {
  std::vector<double> chan;
  std::vector<float> k, v;
};
Head SyntheticHead(Rng& rng, int T, int hd, bool outliers) {
  Head h{std::vector<double>(hd, 1.0), std::vector<float>(static_cast<size_t>(T) * hd),
         std::vector<float>(static_cast<size_t>(T) * hd)};
  if (outliers) {
    for (double& c : h.chan) c = std::exp(0.6 * rng.Gauss());
    // RoPE pairs (i, i + hd/2); the last pairs turn slowest: outliers sit there.
    for (int p : {hd / 2 - 1, hd / 2 - 3}) h.chan[p] = h.chan[p + hd / 2] = 12.0;
  }
  for (int t = 0; t < T; ++t) {
    float* x = h.k.data() + static_cast<size_t>(t) * hd;
    for (int c = 0; c < hd; ++c) x[c] = static_cast<float>(h.chan[c] * rng.Gauss());
    if (outliers) {  // the mean of an outlier channel is not zero either
      for (int p : {hd / 2 - 1, hd / 2 - 3}) x[p] += 24.0f;
      for (int i = 0; i < hd / 2; ++i) {  // RoPE at position t (NeoX pairing)
        const double th = t * std::pow(10000.0, -2.0 * i / hd);
        const float a = x[i], b = x[i + hd / 2];
        x[i] = static_cast<float>(a * std::cos(th) - b * std::sin(th));
        x[i + hd / 2] = static_cast<float>(a * std::sin(th) + b * std::cos(th));
      }
    }
    for (int c = 0; c < hd; ++c)
      h.v[static_cast<size_t>(t) * hd + c] = static_cast<float>(rng.Gauss());
  }
  return h;
}

// Error sums per encoding: logit RMSE over its std, KL(p || p^), relative output error.
struct KErrors {
  std::vector<double> logit, kl, out;
};

// softmax(l * scale) into *p.
void ScaledSoftmax(const std::vector<double>& l, double scale, std::vector<double>* p) {
  const double mx = *std::max_element(l.begin(), l.end());
  double z = 0;
  p->resize(l.size());
  for (size_t t = 0; t < l.size(); ++t) z += ((*p)[t] = std::exp((l[t] - mx) * scale));
  for (double& x : *p) x /= z;
}

// One query q against the head's exact keys and each encoding's (kq): the errors added to *e.
void ScoreQuery(const std::vector<double>& q, const Head& h,
                const std::vector<std::vector<float>>& kq, int T, int hd, KErrors* e) {
  auto logits = [&](const std::vector<float>& k) {
    std::vector<double> s(T);
    for (int t = 0; t < T; ++t) {
      double d = 0;
      for (int c = 0; c < hd; ++c) d += q[c] * k[static_cast<size_t>(t) * hd + c];
      s[t] = d;
    }
    return s;
  };
  auto output = [&](const std::vector<double>& p) {
    std::vector<double> o(hd, 0.0);
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < hd; ++c) o[c] += p[t] * h.v[static_cast<size_t>(t) * hd + c];
    return o;
  };
  const std::vector<double> s = logits(h.k);
  double mean = 0, var = 0;
  for (double x : s) mean += x / T;
  for (double x : s) var += (x - mean) * (x - mean) / T;
  const double scale = 2.5 / std::sqrt(var);  // logits at std 2.5
  std::vector<double> p;
  ScaledSoftmax(s, scale, &p);
  const std::vector<double> o = output(p);
  double on = 0;
  for (double x : o) on += x * x;
  for (size_t i = 0; i < kq.size(); ++i) {
    const std::vector<double> sq = logits(kq[i]);
    double se = 0;
    for (int t = 0; t < T; ++t) se += (sq[t] - s[t]) * (sq[t] - s[t]) * scale * scale;
    std::vector<double> pq;
    ScaledSoftmax(sq, scale, &pq);
    double klv = 0, oe = 0;
    for (int t = 0; t < T; ++t)
      if (p[t] > 0) klv += p[t] * std::log(p[t] / std::max(pq[t], 1e-300));
    const std::vector<double> oq = output(pq);
    for (int c = 0; c < hd; ++c) oe += (oq[c] - o[c]) * (oq[c] - o[c]);
    e->logit[i] += std::sqrt(se / T) / 2.5;
    e->kl[i] += klv;
    e->out[i] += std::sqrt(oe / on);
  }
}

int KScales(uint64_t seed) {
  const std::vector<KEncoding> encodings = KEncodings();
  struct Dist {
    const char* name;
    bool outliers;
  } dists[] = {{"iid Gaussian keys", false},
               {"outlier channels + RoPE (4 low-frequency channels at 12x, lognormal rest)", true}};
  const int T = 1024, kHeads = 16, kQueries = 8;
  const size_t E = encodings.size();
  for (int hd : {128, 64}) {
    for (const Dist& dist : dists) {
      std::printf("\nhead_dim %d, %s; %d keys x %d heads x %d queries, logits at std 2.5:\n", hd,
                  dist.name, T, kHeads, kQueries);
      std::printf("  %-42s %8s %14s %14s %14s\n", "K encoding", "B/elem", "logit RMSE/std",
                  "KL(p||p^)", "out rel err");
      KErrors err{std::vector<double>(E), std::vector<double>(E), std::vector<double>(E)};
      Rng rng{seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(hd)};
      for (int h = 0; h < kHeads; ++h) {
        const Head head = SyntheticHead(rng, T, hd, dist.outliers);
        std::vector<std::vector<float>> kq(E, head.k);
        for (size_t e = 0; e < E; ++e) encodings[e].apply(&kq[e], T, hd);
        for (int qi = 0; qi < kQueries; ++qi) {
          std::vector<double> q(hd);
          for (int c = 0; c < hd; ++c) q[c] = head.chan[c] * rng.Gauss();
          ScoreQuery(q, head, kq, T, hd, &err);
        }
      }
      const double n = kHeads * kQueries;
      for (size_t e = 0; e < E; ++e)
        std::printf("  %-42s %8.3f %14.5f %14.3e %14.5f\n", encodings[e].name,
                    encodings[e].bytes_per_element, err.logit[e] / n, err.kl[e] / n,
                    err.out[e] / n);
    }
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
    if ((argc == 2 || argc == 3) && std::string(argv[1]) == "kscales") {
      char* end = nullptr;
      const unsigned long long seed = argc == 3 ? std::strtoull(argv[2], &end, 10) : 1;
      if (argc == 3 && (end == argv[2] || *end != '\0'))
        Fail("kscales: the seed must be a number (got '%s')", argv[2]);
      return KScales(seed);
    }
    std::fprintf(
        stderr,
        "usage: paddock-kv-bench prefix MODEL | window MODEL | dtypes MODEL [-z TOKENIZER] TEXT | "
        "kscales [SEED]\n");
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "paddock-kv-bench: error: %s\n", e.what());
    return 1;
  }
}
