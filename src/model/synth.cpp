#include "model/synth.h"

#include <cmath>
#include <cstdio>

#include "base/strings.h"
#include "formats/gguf_writer.h"

namespace paddock {

namespace {

// xorshift64*: fast, deterministic, good enough for weights.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  float Uniform() {  // [-1, 1)
    s_ ^= s_ >> 12;
    s_ ^= s_ << 25;
    s_ ^= s_ >> 27;
    const uint64_t r = s_ * 0x2545F4914F6CDD1Dull;
    return static_cast<float>(r >> 40) * (2.0f / 16777216.0f) - 1.0f;
  }

 private:
  uint64_t s_;
};

void SyntheticVocab(int n, std::vector<std::string>* pieces, std::vector<float>* scores,
                    std::vector<int32_t>* types) {
  if (n < 259 + 1) Fail("synthetic vocabulary needs at least 260 tokens (got %d)", n);
  pieces->clear();
  scores->clear();
  types->clear();
  const char* specials[] = {"<unk>", "<s>", "</s>"};
  for (int i = 0; i < 3; ++i) {
    pieces->push_back(specials[i]);
    scores->push_back(0);
    types->push_back(i == 0 ? 2 : 3);
  }
  for (int b = 0; b < 256; ++b) {
    pieces->push_back(StrFormat("<0x%02X>", b));
    scores->push_back(0);
    types->push_back(6);
  }
  const std::string marker = "\xE2\x96\x81";
  int k = 0;
  // Printable ASCII, then "▁"+letter pairs, then numbered pieces.
  for (char c = 33; c < 127 && static_cast<int>(pieces->size()) < n; ++c) {
    pieces->push_back(std::string(1, c));
    scores->push_back(-1000.0f - static_cast<float>(k++));
    types->push_back(1);
  }
  for (int i = 0; static_cast<int>(pieces->size()) < n; ++i) {
    std::string p = i < 26 ? marker + static_cast<char>('a' + i) : marker + StrFormat("w%d", i);
    pieces->push_back(p);
    scores->push_back(-static_cast<float>(i));
    types->push_back(1);
  }
}

}  // namespace

SynthSpec SynthPreset(const std::string& name) {
  SynthSpec s;
  if (name == "tiny") return s;
  if (name == "stories260k") {
    s.dim = 64;
    s.n_layers = 5;
    s.n_heads = 8;
    s.n_kv_heads = 4;
    s.ffn_dim = 172;
    s.n_vocab = 512;
    s.context = 512;
    s.tied_embeddings = true;
  } else if (name == "tinyllama") {
    s.dim = 2048;
    s.n_layers = 22;
    s.n_heads = 32;
    s.n_kv_heads = 4;
    s.ffn_dim = 5632;
    s.n_vocab = 32000;
    s.context = 2048;
  } else if (name == "llama2-7b") {
    s.dim = 4096;
    s.n_layers = 32;
    s.n_heads = 32;
    s.n_kv_heads = 32;
    s.ffn_dim = 11008;
    s.n_vocab = 32000;
    s.context = 4096;
  } else if (name == "mistral-7b") {
    s.arch = "llama";
    s.dim = 4096;
    s.n_layers = 32;
    s.n_heads = 32;
    s.n_kv_heads = 8;
    s.ffn_dim = 14336;
    s.n_vocab = 32000;
    s.context = 32768;
    s.sliding_window = 4096;
  } else if (name == "qwen2-0.5b") {
    s.arch = "qwen2";
    s.dim = 896;
    s.n_layers = 24;
    s.n_heads = 14;
    s.n_kv_heads = 2;
    s.ffn_dim = 4864;
    s.n_vocab = 32000;
    s.context = 4096;
    s.qkv_bias = true;
    s.rope_base = 1000000.0f;
    s.tied_embeddings = true;
  } else {
    Fail(
        "unknown shape '%s' (known: tiny, stories260k, tinyllama, llama2-7b, mistral-7b, "
        "qwen2-0.5b)",
        name.c_str());
  }
  return s;
}

void BuildSyntheticModel(const SynthSpec& s, GgufWriter* w) {
  const int hd = s.head_dim > 0 ? s.head_dim : s.dim / (s.n_heads > 0 ? s.n_heads : 1);
  if (s.dim <= 0 || s.n_layers <= 0 || s.n_heads <= 0 || s.n_kv_heads <= 0 || s.ffn_dim <= 0 ||
      hd <= 0 || s.n_heads % s.n_kv_heads != 0) {
    Fail("synthetic model: impossible shape");
  }
  const std::string a = s.arch;
  w->SetString("general.architecture", a);
  w->SetString("general.name", "paddock synthetic " + a);
  w->SetU32(a + ".context_length", static_cast<uint32_t>(s.context));
  w->SetU32(a + ".embedding_length", static_cast<uint32_t>(s.dim));
  w->SetU32(a + ".block_count", static_cast<uint32_t>(s.n_layers));
  w->SetU32(a + ".feed_forward_length", static_cast<uint32_t>(s.ffn_dim));
  w->SetU32(a + ".attention.head_count", static_cast<uint32_t>(s.n_heads));
  w->SetU32(a + ".attention.head_count_kv", static_cast<uint32_t>(s.n_kv_heads));
  if (s.head_dim > 0) w->SetU32(a + ".attention.key_length", static_cast<uint32_t>(hd));
  w->SetU32(a + ".rope.dimension_count", static_cast<uint32_t>(hd));
  w->SetF32(a + ".rope.freq_base", s.rope_base);
  w->SetF32(a + (s.arch == "gpt2" ? ".attention.layer_norm_epsilon"
                                  : ".attention.layer_norm_rms_epsilon"),
            1e-5f);
  if (s.sliding_window > 0)
    w->SetU32(a + ".attention.sliding_window", static_cast<uint32_t>(s.sliding_window));
  if (s.attn_softcap > 0) w->SetF32(a + ".attn_logit_softcapping", s.attn_softcap);
  if (s.final_softcap > 0) w->SetF32(a + ".final_logit_softcapping", s.final_softcap);
  w->SetU32("general.file_type", 0);

  std::vector<std::string> pieces = s.vocab;
  std::vector<float> scores = s.scores;
  std::vector<int32_t> types;
  if (pieces.empty()) SyntheticVocab(s.n_vocab, &pieces, &scores, &types);
  if (static_cast<int>(pieces.size()) != s.n_vocab)
    Fail("synthetic model: vocabulary has %zu tokens, n_vocab is %d", pieces.size(), s.n_vocab);
  w->SetString("tokenizer.ggml.model", "llama");
  w->SetStringArray("tokenizer.ggml.tokens", pieces);
  w->SetF32Array("tokenizer.ggml.scores", scores);
  if (!types.empty()) w->SetI32Array("tokenizer.ggml.token_type", types);
  w->SetU32("tokenizer.ggml.bos_token_id", 1);
  w->SetU32("tokenizer.ggml.eos_token_id", 2);
  w->SetU32("tokenizer.ggml.unknown_token_id", 0);

  Rng rng(s.seed);
  std::vector<float> buf;
  const int n = s.n_layers;
  auto more_bits = [n](int i) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; };
  auto type_of = [&](const std::string& name) {
    if (!s.q4_k_m) return s.type;
    int layer = -1;
    std::sscanf(name.c_str(), "blk.%d.", &layer);
    const bool wide = name == "output.weight" || (layer >= 0 && more_bits(layer) &&
                                                  (name.find("attn_v.") != std::string::npos ||
                                                   name.find("ffn_down.") != std::string::npos));
    return wide ? GgmlType::kQ6_K : GgmlType::kQ4_K;
  };
  auto matrix = [&](const std::string& name, int cols, int rows) {
    buf.resize(static_cast<size_t>(cols) * static_cast<size_t>(rows));
    const float scale = std::sqrt(3.0f / static_cast<float>(cols));  // unit-variance outputs
    for (float& v : buf) v = rng.Uniform() * scale;
    w->AddTensorF32(name, {cols, rows}, type_of(name), buf.data());
  };
  auto vec = [&](const std::string& name, int n, float base, float jitter) {
    buf.resize(static_cast<size_t>(n));
    for (float& v : buf) v = base + jitter * rng.Uniform();
    w->AddTensorF32(name, {n}, GgmlType::kF32, buf.data());
  };
  const int qd = s.n_heads * hd, kvd = s.n_kv_heads * hd;
  {
    // Embeddings with larger magnitude, like trained ones relative to the norms.
    buf.resize(static_cast<size_t>(s.dim) * static_cast<size_t>(s.n_vocab));
    for (float& v : buf) v = rng.Uniform();
    w->AddTensorF32("token_embd.weight", {s.dim, s.n_vocab}, type_of("token_embd.weight"),
                    buf.data());
  }
  const bool gpt2 = s.arch == "gpt2";
  if (gpt2) {  // learned positions, a little smaller than the token embeddings
    buf.resize(static_cast<size_t>(s.dim) * static_cast<size_t>(s.context));
    for (float& v : buf) v = 0.5f * rng.Uniform();
    w->AddTensorF32("position_embd.weight", {s.dim, s.context}, GgmlType::kF32, buf.data());
  }
  for (int l = 0; l < s.n_layers; ++l) {
    const std::string p = StrFormat("blk.%d.", l);
    vec(p + "attn_norm.weight", s.dim, 1.0f, 0.1f);
    const bool phi3 = s.arch == "phi3";
    if (gpt2) {  // LayerNorm with bias, fused QKV with bias, biases on every projection
      vec(p + "attn_norm.bias", s.dim, 0.0f, 0.3f);
      matrix(p + "attn_qkv.weight", s.dim, qd + 2 * kvd);
      vec(p + "attn_qkv.bias", qd + 2 * kvd, 0.0f, 0.5f);
      matrix(p + "attn_output.weight", qd, s.dim);
      vec(p + "attn_output.bias", s.dim, 0.0f, 0.3f);
      vec(p + "ffn_norm.weight", s.dim, 1.0f, 0.1f);
      vec(p + "ffn_norm.bias", s.dim, 0.0f, 0.3f);
      matrix(p + "ffn_up.weight", s.dim, s.ffn_dim);
      vec(p + "ffn_up.bias", s.ffn_dim, 0.0f, 0.3f);
      matrix(p + "ffn_down.weight", s.ffn_dim, s.dim);
      vec(p + "ffn_down.bias", s.dim, 0.0f, 0.3f);
      continue;
    }
    if (phi3) {
      matrix(p + "attn_qkv.weight", s.dim, qd + 2 * kvd);  // fused [q | k | v]
    } else {
      matrix(p + "attn_q.weight", s.dim, qd);
      matrix(p + "attn_k.weight", s.dim, kvd);
      matrix(p + "attn_v.weight", s.dim, kvd);
    }
    if (s.qkv_bias) {
      vec(p + "attn_q.bias", qd, 0.0f, 0.5f);
      vec(p + "attn_k.bias", kvd, 0.0f, 0.5f);
      vec(p + "attn_v.bias", kvd, 0.0f, 0.5f);
    }
    if (s.qk_norm) {
      vec(p + "attn_q_norm.weight", hd, 1.0f, 0.5f);
      vec(p + "attn_k_norm.weight", hd, 1.0f, 0.5f);
    }
    matrix(p + "attn_output.weight", qd, s.dim);
    vec(p + "ffn_norm.weight", s.dim, 1.0f, 0.1f);
    if (phi3) {
      matrix(p + "ffn_up.weight", s.dim, 2 * s.ffn_dim);  // fused [gate | up]
    } else {
      matrix(p + "ffn_gate.weight", s.dim, s.ffn_dim);
      matrix(p + "ffn_up.weight", s.dim, s.ffn_dim);
    }
    matrix(p + "ffn_down.weight", s.ffn_dim, s.dim);
    if (s.arch == "gemma2") {
      vec(p + "post_attention_norm.weight", s.dim, 1.0f, 0.1f);
      vec(p + "post_ffw_norm.weight", s.dim, 1.0f, 0.1f);
    }
  }
  vec("output_norm.weight", s.dim, 1.0f, 0.1f);
  if (gpt2) vec("output_norm.bias", s.dim, 0.0f, 0.3f);
  if (!s.tied_embeddings) matrix("output.weight", s.dim, s.n_vocab);
}

void WriteSyntheticModel(const SynthSpec& spec, const std::string& path) {
  GgufWriter w;
  BuildSyntheticModel(spec, &w);
  w.Write(path);
}

}  // namespace paddock
