#include "synth/synth.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/strings.h"
#include "formats/gguf_writer.h"
#include "synth/synth_rng.h"

namespace paddock {

using synth_detail::Rng;

namespace {

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

namespace {

void Encoder(SynthSpec& s, const char* arch, int dim, int layers, int heads, int ffn, int vocab,
             int ctx, int pooling) {
  s.arch = arch;
  s.dim = dim;
  s.n_layers = layers;
  s.n_heads = s.n_kv_heads = heads;
  s.ffn_dim = ffn;
  s.n_vocab = vocab;
  s.context = ctx;
  s.pooling = pooling;
  s.rope_base = 1000.0f;  // nomic-embed-text's
  s.type = GgmlType::kF16;
}

// Gemma 4: every third layer global (heads of hd; local ones hd_local, half their pairs
// rotated), the global layers' RoPE on a quarter of their pairs, final soft-cap 30.
void Gemma4(SynthSpec& s, int dim, int layers, int heads, int kv_heads, int hd, int hd_local,
            int ffn, int vocab, int ctx) {
  s.arch = "gemma4";
  s.dim = dim;
  s.n_layers = layers;
  s.n_heads = heads;
  s.n_kv_heads = kv_heads;
  s.head_dim = hd;
  s.head_dim_local = hd_local;
  s.rope_dim_local = hd_local / 2;
  s.ffn_dim = ffn;
  s.n_vocab = vocab;
  s.context = ctx;
  s.global_every = 3;
  s.rope_partial = 0.25f;
  s.rope_base = 1000000.0f;
  s.final_softcap = 30.0f;
  s.qk_norm = true;
  s.tied_embeddings = true;
}

// The tiny Gemma 4 presets' common shape: 6 layers of 64, a window of 8.
void TinyGemma4(SynthSpec& s) {
  Gemma4(s, 64, 6, 4, 2, 32, 16, 128, 512, 256);
  s.sliding_window = 8;
}

// The shapes `paddock synth --shape` knows: each sets what differs from SynthSpec's defaults.
struct Preset {
  const char* name;
  void (*apply)(SynthSpec& s);
};

constexpr Preset kPresets[] = {
    {"tiny", [](SynthSpec&) {}},
    {"tiny-gpt-oss",  // tests: gpt-oss's features at a small shape
     [](SynthSpec& s) {
       s.arch = "gpt-oss";
       s.harmony = true;
       s.head_dim = 32;
       s.n_heads = 4;
       s.n_kv_heads = 2;
       s.qkv_bias = true;
       s.n_experts = 4;
       s.n_experts_used = 2;
       s.expert_ffn_dim = 64;
       s.sliding_window = 4;
       s.rope_scaling = "yarn";
       s.rope_scaling_factor = 8;
       s.rope_orig_ctx = 64;
       s.rope_base = 150000;
     }},
    {"tiny-gemma4",  // tests: Gemma 4's features at a small shape (layers 2 and 5 global)
     [](SynthSpec& s) {
       TinyGemma4(s);
       s.shared_kv_layers = 3;
       s.per_layer_dim = 32;
     }},
    {"tiny-gemma4-moe",  // tests: Gemma 4's mixture of experts (8 of 64, 2 per token, a dense FFN)
     [](SynthSpec& s) {
       TinyGemma4(s);
       s.n_experts = 8;
       s.n_experts_used = 2;
       s.expert_ffn_dim = 64;
     }},
    {"gemma4-e2b",  // Gemma 4 E2B's text model: 35 layers (every 5th global), 20 sharing KV
     [](SynthSpec& s) {
       Gemma4(s, 1536, 35, 8, 1, 512, 256, 6144, 262144, 8192);
       s.sliding_window = 512;
       s.shared_kv_layers = 20;
       s.per_layer_dim = 256;
       s.global_every = 5;
       s.rope_dim_local = 256;
       s.double_wide = true;
     }},
    {"tiny-moe",  // tests: Qwen3 MoE, 8 experts of 64, 2 per token
     [](SynthSpec& s) {
       s.arch = "qwen3moe";
       s.qk_norm = true;
       s.n_experts = 8;
       s.n_experts_used = 2;
       s.expert_ffn_dim = 64;
     }},
    {"stories260k",
     [](SynthSpec& s) {
       s.dim = 64;
       s.n_layers = 5;
       s.n_heads = 8;
       s.n_kv_heads = 4;
       s.ffn_dim = 172;
       s.n_vocab = 512;
       s.context = 512;
       s.tied_embeddings = true;
     }},
    {"tinyllama",
     [](SynthSpec& s) {
       s.dim = 2048;
       s.n_layers = 22;
       s.n_heads = 32;
       s.n_kv_heads = 4;
       s.ffn_dim = 5632;
       s.n_vocab = 32000;
       s.context = 2048;
     }},
    {"llama2-7b",
     [](SynthSpec& s) {
       s.dim = 4096;
       s.n_layers = 32;
       s.n_heads = 32;
       s.n_kv_heads = 32;
       s.ffn_dim = 11008;
       s.n_vocab = 32000;
       s.context = 4096;
     }},
    {"llama3-8b",  // Llama 3 8B: GQA 8 KV heads, the 128,256-token vocabulary, base 500,000
     [](SynthSpec& s) {
       s.dim = 4096;
       s.n_layers = 32;
       s.n_heads = 32;
       s.n_kv_heads = 8;
       s.ffn_dim = 14336;
       s.n_vocab = 128256;
       s.context = 8192;
       s.rope_base = 500000.0f;
     }},
    {"mistral-7b",
     [](SynthSpec& s) {
       s.arch = "llama";
       s.dim = 4096;
       s.n_layers = 32;
       s.n_heads = 32;
       s.n_kv_heads = 8;
       s.ffn_dim = 14336;
       s.n_vocab = 32000;
       s.context = 32768;
       s.sliding_window = 4096;
     }},
    {"qwen2-0.5b",
     [](SynthSpec& s) {
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
     }},
    {"olmoe-1b-7b",  // OLMoE-1B-7B-0924
     [](SynthSpec& s) {
       s.arch = "olmoe";
       s.dim = 2048;
       s.n_layers = 16;
       s.n_heads = 16;
       s.n_kv_heads = 16;
       s.ffn_dim = 1024;
       s.n_experts = 64;
       s.n_experts_used = 8;
       s.qk_norm = true;
       s.n_vocab = 50304;
       s.context = 4096;
     }},
    {"qwen3-30b-a3b",
     [](SynthSpec& s) {
       s.arch = "qwen3moe";
       s.dim = 2048;
       s.n_layers = 48;
       s.n_heads = 32;
       s.n_kv_heads = 4;
       s.head_dim = 128;
       s.ffn_dim = 6144;
       s.expert_ffn_dim = 768;
       s.n_experts = 128;
       s.n_experts_used = 8;
       s.qk_norm = true;
       s.n_vocab = 151936;
       s.context = 40960;
       s.rope_base = 1000000.0f;
     }},
    {"qwen1.5-moe-a2.7b",
     [](SynthSpec& s) {
       s.arch = "qwen2moe";
       s.dim = 2048;
       s.n_layers = 24;
       s.n_heads = 16;
       s.n_kv_heads = 16;
       s.ffn_dim = 5632;
       s.expert_ffn_dim = 1408;
       s.shared_ffn_dim = 5632;
       s.n_experts = 60;
       s.n_experts_used = 4;
       s.qkv_bias = true;
       s.n_vocab = 151936;
       s.context = 8192;
       s.rope_base = 1000000.0f;
     }},
    {"gpt-oss-20b",
     [](SynthSpec& s) {
       s.arch = "gpt-oss";
       s.harmony = true;
       s.dim = 2880;
       s.n_layers = 24;
       s.n_heads = 64;
       s.n_kv_heads = 8;
       s.head_dim = 64;
       s.ffn_dim = 2880;
       s.expert_ffn_dim = 2880;
       s.n_experts = 32;
       s.n_experts_used = 4;
       s.qkv_bias = true;
       s.n_vocab = 201088;
       s.context = 131072;
       s.sliding_window = 128;
       s.rope_base = 150000;
       s.rope_scaling = "yarn";
       s.rope_scaling_factor = 32;
       s.rope_orig_ctx = 4096;
     }},
    // Encoders (retrieval): BERT-base / -small shapes (bge, e5, MiniLM-L12), NomicBERT
    // (nomic-embed-text v1.5), a BERT cross-encoder with a classification head.
    {"tiny-bert", [](SynthSpec& s) { Encoder(s, "bert", 64, 2, 4, 128, 2048, 128, 2); }},
    {"tiny-nomic", [](SynthSpec& s) { Encoder(s, "nomic-bert", 64, 2, 4, 128, 2048, 256, 1); }},
    {"tiny-reranker",
     [](SynthSpec& s) {
       Encoder(s, "bert", 64, 2, 4, 128, 2048, 128, 4);
       s.rank_head = true;
       s.add_eos = 1;  // [CLS] q [SEP] [SEP] d [SEP] (tiny-reranker-noeos: [CLS] q [SEP] d)
     }},
    {"tiny-reranker-noeos",
     [](SynthSpec& s) {
       Encoder(s, "bert", 64, 2, 4, 128, 2048, 128, 4);
       s.rank_head = true;
     }},
    {"tiny-xlmr",  // XLM-RoBERTa as llama.cpp writes it: bert with a Unigram vocabulary
     [](SynthSpec& s) {
       Encoder(s, "bert", 64, 2, 4, 128, 3000, 128, 4);
       s.tokenizer = "t5";
       s.rank_head = true;
       s.add_sep = 1;  // <s> q </s></s> d </s>
     }},
    {"bge-small", [](SynthSpec& s) { Encoder(s, "bert", 384, 12, 12, 1536, 30522, 512, 2); }},
    {"bge-base", [](SynthSpec& s) { Encoder(s, "bert", 768, 12, 12, 3072, 30522, 512, 2); }},
    {"nomic-embed",
     [](SynthSpec& s) { Encoder(s, "nomic-bert", 768, 12, 12, 3072, 30522, 2048, 1); }},
    {"bge-reranker",
     [](SynthSpec& s) {
       Encoder(s, "bert", 768, 12, 12, 3072, 30522, 512, 4);
       s.rank_head = true;
     }},
    {"mixtral-8x7b",
     [](SynthSpec& s) {
       s.dim = 4096;
       s.n_layers = 32;
       s.n_heads = 32;
       s.n_kv_heads = 8;
       s.ffn_dim = 14336;
       s.n_experts = 8;
       s.n_experts_used = 2;
       s.n_vocab = 32000;
       s.context = 32768;
       s.rope_base = 1000000.0f;
     }},
};

}  // namespace

SynthSpec SynthPreset(const std::string& name) {
  SynthSpec s;
  if (HybridPreset(name, &s)) return s;
  std::string known = HybridPresetNames();
  for (const Preset& p : kPresets) {
    if (name == p.name) {
      p.apply(s);
      return s;
    }
    known += std::string(known.empty() ? "" : ", ") + p.name;
  }
  Fail("unknown shape '%s' (known: %s)", name.c_str(), known.c_str());
}

namespace {

bool Gemma4Global(const SynthSpec& s, int l) {
  return s.global_every > 0 && l % s.global_every == s.global_every - 1;
}
int Gemma4HeadDim(const SynthSpec& s, int hd, int l) {
  return Gemma4Global(s, l) || s.head_dim_local <= 0 ? hd : s.head_dim_local;
}
int Gemma4Ffn(const SynthSpec& s, int l) {
  return s.double_wide && l >= s.n_layers - s.shared_kv_layers ? 2 * s.ffn_dim : s.ffn_dim;
}

// Gemma 4's keys as llama.cpp's converter writes them.
void Gemma4Metadata(const SynthSpec& s, int hd, GgufWriter* w) {
  const std::string a = "gemma4.";
  std::vector<bool> swa;
  std::vector<int32_t> ffn;
  for (int l = 0; l < s.n_layers; ++l) {
    swa.push_back(!Gemma4Global(s, l));
    ffn.push_back(Gemma4Ffn(s, l));
  }
  w->SetBoolArray(a + "attention.sliding_window_pattern", swa);
  if (s.double_wide) w->SetI32Array(a + "feed_forward_length", ffn);
  const int hl = s.head_dim_local > 0 ? s.head_dim_local : hd;
  w->SetU32(a + "attention.key_length", static_cast<uint32_t>(hd));
  w->SetU32(a + "attention.value_length", static_cast<uint32_t>(hd));
  w->SetU32(a + "attention.key_length_swa", static_cast<uint32_t>(hl));
  w->SetU32(a + "attention.value_length_swa", static_cast<uint32_t>(hl));
  w->SetU32(a + "rope.dimension_count_swa",
            static_cast<uint32_t>(s.rope_dim_local > 0 ? s.rope_dim_local : hl));
  w->SetF32(a + "rope.freq_base_swa", s.rope_base_local);
  w->SetU32(a + "attention.shared_kv_layers", static_cast<uint32_t>(s.shared_kv_layers));
  w->SetU32(a + "embedding_length_per_layer_input", static_cast<uint32_t>(s.per_layer_dim));
  w->SetF32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
}

void WriteMetadata(const SynthSpec& s, int hd, GgufWriter* w) {
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
  if (s.n_experts > 0) {
    w->SetU32(a + ".expert_count", static_cast<uint32_t>(s.n_experts));
    w->SetU32(a + ".expert_used_count", static_cast<uint32_t>(s.n_experts_used));
    w->SetU32(a + ".expert_feed_forward_length",
              static_cast<uint32_t>(s.expert_ffn_dim > 0 ? s.expert_ffn_dim : s.ffn_dim));
    if (s.shared_ffn_dim > 0)
      w->SetU32(a + ".expert_shared_feed_forward_length", static_cast<uint32_t>(s.shared_ffn_dim));
    if (s.expert_norm >= 0) w->SetBool(a + ".expert_weights_norm", s.expert_norm > 0);
  }
  if (!s.rope_scaling.empty()) {
    w->SetString(a + ".rope.scaling.type", s.rope_scaling);
    w->SetF32(a + ".rope.scaling.factor", s.rope_scaling_factor);
    if (s.rope_orig_ctx > 0)
      w->SetU32(a + ".rope.scaling.original_context_length",
                static_cast<uint32_t>(s.rope_orig_ctx));
  }
  if (s.arch == "gemma4") Gemma4Metadata(s, hd, w);
  w->SetU32("general.file_type", 0);
}

void WriteVocabulary(const SynthSpec& s, GgufWriter* w) {
  std::vector<std::string> pieces = s.vocab;
  std::vector<float> scores = s.scores;
  std::vector<int32_t> types;
  if (pieces.empty()) SyntheticVocab(s.n_vocab, &pieces, &scores, &types);
  std::vector<std::string> controls = s.control_tokens;
  if (s.harmony)
    for (const char* t : {"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>",
                          "<|return|>", "<|call|>"})
      controls.push_back(t);
  if (!controls.empty()) {
    if (types.empty() || pieces.size() < 300 + controls.size())
      Fail("synthetic model: control tokens need the synthetic vocabulary");
    for (size_t k = 0; k < controls.size(); ++k) {
      const size_t at = pieces.size() - controls.size() + k;
      pieces[at] = controls[k];
      scores[at] = 0;
      types[at] = 3;  // control
    }
  }
  if (static_cast<int>(pieces.size()) != s.n_vocab)
    Fail("synthetic model: vocabulary has %zu tokens, n_vocab is %d", pieces.size(), s.n_vocab);
  w->SetString("tokenizer.ggml.model", "llama");
  w->SetStringArray("tokenizer.ggml.tokens", pieces);
  w->SetF32Array("tokenizer.ggml.scores", scores);
  if (!types.empty()) w->SetI32Array("tokenizer.ggml.token_type", types);
  w->SetU32("tokenizer.ggml.bos_token_id", 1);
  w->SetU32("tokenizer.ggml.eos_token_id", 2);
  w->SetU32("tokenizer.ggml.unknown_token_id", 0);
}

// The tensors, drawn from one seeded generator in a fixed order (the same spec gives the same
// bytes).
class SynthTensors {
 public:
  SynthTensors(const SynthSpec& s, int hd, GgufWriter* w)
      : s_(s), w_(w), rng_(s.seed), hd_(hd), qd_(s.n_heads * hd), kvd_(s.n_kv_heads * hd) {}

  void Write() {
    // Embeddings with larger magnitude, like trained ones relative to the norms.
    buf_.resize(static_cast<size_t>(s_.dim) * static_cast<size_t>(s_.n_vocab));
    for (float& v : buf_) v = rng_.Uniform();
    w_->AddTensorF32("token_embd.weight", {s_.dim, s_.n_vocab}, TypeOf("token_embd.weight"),
                     buf_.data());
    const bool gpt2 = s_.arch == "gpt2";
    if (gpt2) {  // learned positions, a little smaller than the token embeddings
      buf_.resize(static_cast<size_t>(s_.dim) * static_cast<size_t>(s_.context));
      for (float& v : buf_) v = 0.5f * rng_.Uniform();
      w_->AddTensorF32("position_embd.weight", {s_.dim, s_.context}, GgmlType::kF32, buf_.data());
    }
    for (int l = 0; l < s_.n_layers; ++l) {
      const std::string p = StrFormat("blk.%d.", l);
      Vec(p + "attn_norm.weight", s_.dim, 1.0f, 0.1f);
      if (gpt2) {
        Gpt2Layer(p);
      } else if (s_.arch == "gemma4") {
        Gemma4Layer(p, l);
      } else {
        Layer(p);
      }
    }
    if (s_.arch == "gemma4") Gemma4Globals();
    if (s_.active_layers > 0) rng_ = Rng(s_.seed ^ 0x5eed07ull);  // independent of the depth
    Vec("output_norm.weight", s_.dim, 1.0f, 0.1f);
    if (gpt2) Vec("output_norm.bias", s_.dim, 0.0f, 0.3f);
    if (!s_.tied_embeddings) Matrix("output.weight", s_.dim, s_.n_vocab);
  }

 private:
  // q4_k_m: llama.cpp's Q4_K_M mix (Q6_K for the output and for attn_v / ffn_down of the first
  // and last eighth of the layers and every third between).
  GgmlType TypeOf(const std::string& name) const {
    if (s_.dense_type >= 0 && name.find("_exps.") == std::string::npos)
      return static_cast<GgmlType>(s_.dense_type);
    const int n = s_.n_layers;
    int layer = -1;
    std::sscanf(name.c_str(), "blk.%d.", &layer);
    auto has = [&](const char* part) { return name.find(part) != std::string::npos; };
    if (s_.q3_k_m || s_.q2_k_m) {
      if (name == "output.weight") return GgmlType::kQ6_K;
      if (s_.q3_k_m) {
        if (has("attn_v.")) return layer < 2 ? GgmlType::kQ5_K : GgmlType::kQ4_K;
        if (has("ffn_down")) return layer < n / 16 ? GgmlType::kQ5_K : GgmlType::kQ4_K;
        if (has("attn_output.")) return GgmlType::kQ4_K;
        return GgmlType::kQ3_K;
      }
      if (has("attn_v."))
        return s_.n_heads / s_.n_kv_heads >= 4 ? GgmlType::kQ4_K : GgmlType::kQ3_K;
      if (has("ffn_down") || has("attn_output.")) return GgmlType::kQ3_K;
      return GgmlType::kQ2_K;
    }
    if (!s_.q4_k_m) return s_.type;
    return Q4KMixType(name, n);
  }
  // A matrix of `rows` rows of `cols` (depth > 0: `depth` of them, a 3-D expert tensor).
  void Matrix(const std::string& name, int cols, int rows, int depth = 0, bool f32 = false) {
    buf_.resize(static_cast<size_t>(cols) * static_cast<size_t>(rows) *
                static_cast<size_t>(std::max(depth, 1)));
    const float scale = std::sqrt(3.0f / static_cast<float>(cols));  // unit-variance outputs
    for (float& v : buf_) v = rng_.Uniform() * scale;
    if (Inert(name)) std::fill(buf_.begin(), buf_.end(), 0.0f);  // (drawn all the same)
    if (s_.ffn_down_scale != 1.0f && name.find("ffn_down.") != std::string::npos) {
      for (float& v : buf_) v *= s_.ffn_down_scale;
    }
    std::vector<int64_t> ne = {cols, rows};
    if (depth > 0) ne.push_back(depth);
    w_->AddTensorF32(name, ne, f32 ? GgmlType::kF32 : TypeOf(name), buf_.data());
  }
  // A mixture-of-experts FFN: the router, the experts, and the shared expert with its gate.
  void Experts(const std::string& p) {
    const int E = s_.n_experts, F = s_.expert_ffn_dim > 0 ? s_.expert_ffn_dim : s_.ffn_dim;
    if (s_.experts_from_dense) {
      if (F != s_.ffn_dim) Fail("synthetic model: experts_from_dense needs experts of ffn_dim");
      Copies(p + "ffn_gate_exps.weight", s_.dim, F, E, false);
      Copies(p + "ffn_up_exps.weight", s_.dim, F, E, false);
      Copies(p + "ffn_down_exps.weight", F, s_.dim, E, true);
      Rng router(s_.seed ^ 0x7a11e7ull);
      buf_.resize(static_cast<size_t>(s_.dim) * static_cast<size_t>(E));
      const float scale = s_.router_scale * std::sqrt(3.0f / static_cast<float>(s_.dim));
      for (float& v : buf_) v = router.Uniform() * scale;
      w_->AddTensorF32(p + "ffn_gate_inp.weight", {s_.dim, E}, GgmlType::kF32, buf_.data());
      return;
    }
    Matrix(p + "ffn_gate_inp.weight", s_.dim, E, 0, true);
    Matrix(p + "ffn_gate_exps.weight", s_.dim, F, E);
    Matrix(p + "ffn_up_exps.weight", s_.dim, F, E);
    Matrix(p + "ffn_down_exps.weight", F, s_.dim, E);
    if (s_.arch == "gpt-oss") {  // router and expert biases
      Vec(p + "ffn_gate_inp.bias", E, 0.0f, 0.5f);
      Biases(p + "ffn_gate_exps.bias", F, E);
      Biases(p + "ffn_up_exps.bias", F, E);
      Biases(p + "ffn_down_exps.bias", s_.dim, E);
    }
    if (s_.shared_ffn_dim > 0) {
      Matrix(p + "ffn_gate_shexp.weight", s_.dim, s_.shared_ffn_dim);
      Matrix(p + "ffn_up_shexp.weight", s_.dim, s_.shared_ffn_dim);
      Matrix(p + "ffn_down_shexp.weight", s_.shared_ffn_dim, s_.dim);
      Vec(p + "ffn_gate_inp_shexp.weight", s_.dim, 0.0f,
          std::sqrt(3.0f / static_cast<float>(s_.dim)));
    }
  }
  // E bias rows of n (a 2-D F32 tensor).
  void Biases(const std::string& name, int n, int E) {
    buf_.resize(static_cast<size_t>(n) * static_cast<size_t>(E));
    for (float& v : buf_) v = 0.3f * rng_.Uniform();
    w_->AddTensorF32(name, {n, E}, GgmlType::kF32, buf_.data());
  }
  // E copies of the matrix the dense model draws here (scaled: copy e times e + 1).
  void Copies(const std::string& name, int cols, int rows, int E, bool scaled) {
    const size_t n = static_cast<size_t>(cols) * static_cast<size_t>(rows);
    std::vector<float> one(n);
    const float scale = std::sqrt(3.0f / static_cast<float>(cols));
    for (float& v : one) v = rng_.Uniform() * scale;
    buf_.resize(n * static_cast<size_t>(E));
    for (int e = 0; e < E; ++e) {
      const float f = scaled ? static_cast<float>(e + 1) : 1.0f;
      for (size_t i = 0; i < n; ++i) buf_[static_cast<size_t>(e) * n + i] = one[i] * f;
    }
    w_->AddTensorF32(name, {cols, rows, E}, TypeOf(name), buf_.data());
  }
  // A layer past active_layers: its output projections are zero.
  bool Inert(const std::string& name) const {
    if (s_.active_layers <= 0) return false;
    int layer = -1;
    std::sscanf(name.c_str(), "blk.%d.", &layer);
    return layer >= s_.active_layers && (name.find("attn_output.") != std::string::npos ||
                                         name.find("ffn_down.") != std::string::npos);
  }
  void Vec(const std::string& name, int n, float base, float jitter) {
    buf_.resize(static_cast<size_t>(n));
    for (float& v : buf_) v = base + jitter * rng_.Uniform();
    w_->AddTensorF32(name, {n}, GgmlType::kF32, buf_.data());
  }
  // LayerNorm with bias, fused QKV with bias, biases on every projection.
  void Gpt2Layer(const std::string& p) {
    Vec(p + "attn_norm.bias", s_.dim, 0.0f, 0.3f);
    Matrix(p + "attn_qkv.weight", s_.dim, qd_ + 2 * kvd_);
    Vec(p + "attn_qkv.bias", qd_ + 2 * kvd_, 0.0f, 0.5f);
    Matrix(p + "attn_output.weight", qd_, s_.dim);
    Vec(p + "attn_output.bias", s_.dim, 0.0f, 0.3f);
    Vec(p + "ffn_norm.weight", s_.dim, 1.0f, 0.1f);
    Vec(p + "ffn_norm.bias", s_.dim, 0.0f, 0.3f);
    Matrix(p + "ffn_up.weight", s_.dim, s_.ffn_dim);
    Vec(p + "ffn_up.bias", s_.ffn_dim, 0.0f, 0.3f);
    Matrix(p + "ffn_down.weight", s_.ffn_dim, s_.dim);
    Vec(p + "ffn_down.bias", s_.dim, 0.0f, 0.3f);
  }
  void Layer(const std::string& p) {
    const bool phi3 = s_.arch == "phi3";
    if (phi3) {
      Matrix(p + "attn_qkv.weight", s_.dim, qd_ + 2 * kvd_);  // fused [q | k | v]
    } else {
      Matrix(p + "attn_q.weight", s_.dim, qd_);
      Matrix(p + "attn_k.weight", s_.dim, kvd_);
      Matrix(p + "attn_v.weight", s_.dim, kvd_);
    }
    if (s_.qkv_bias) {
      Vec(p + "attn_q.bias", qd_, 0.0f, 0.5f);
      Vec(p + "attn_k.bias", kvd_, 0.0f, 0.5f);
      Vec(p + "attn_v.bias", kvd_, 0.0f, 0.5f);
    }
    if (s_.qk_norm) {  // per head, or over the whole row (OLMoE)
      const bool full = s_.arch == "olmoe";
      Vec(p + "attn_q_norm.weight", full ? qd_ : hd_, 1.0f, 0.5f);
      Vec(p + "attn_k_norm.weight", full ? kvd_ : hd_, 1.0f, 0.5f);
    }
    Matrix(p + "attn_output.weight", qd_, s_.dim);
    const bool gpt_oss = s_.arch == "gpt-oss";
    if (gpt_oss) {  // output bias, sink logits, and the pre-FFN norm under its gpt-oss name
      Vec(p + "attn_output.bias", s_.dim, 0.0f, 0.3f);
      Vec(p + "attn_sinks.weight", s_.n_heads, 0.0f, 2.0f);
    }
    Vec(p + (gpt_oss ? "post_attention_norm.weight" : "ffn_norm.weight"), s_.dim, 1.0f, 0.1f);
    if (s_.n_experts > 0) {
      Experts(p);
    } else if (phi3) {
      Matrix(p + "ffn_up.weight", s_.dim, 2 * s_.ffn_dim);  // fused [gate | up]
    } else {
      Matrix(p + "ffn_gate.weight", s_.dim, s_.ffn_dim);
      Matrix(p + "ffn_up.weight", s_.dim, s_.ffn_dim);
    }
    if (s_.n_experts == 0) Matrix(p + "ffn_down.weight", s_.ffn_dim, s_.dim);
    if (s_.arch == "gemma2" || s_.arch == "gemma3") {
      Vec(p + "post_attention_norm.weight", s_.dim, 1.0f, 0.1f);
      Vec(p + "post_ffw_norm.weight", s_.dim, 1.0f, 0.1f);
    }
  }

  // Gemma 4's layer: Q (K, V where it stores KV), Q/K norms, post-norms, the FFN of its
  // width, the output scale, the per-layer input's gate, projection and norm.
  void Gemma4Layer(const std::string& p, int l) {
    const int hd = Gemma4HeadDim(s_, hd_, l), qd = s_.n_heads * hd, kvd = s_.n_kv_heads * hd;
    const bool stores = l < s_.n_layers - s_.shared_kv_layers;
    Matrix(p + "attn_q.weight", s_.dim, qd);
    if (stores) {
      Matrix(p + "attn_k.weight", s_.dim, kvd);
      if (s_.v_proj) Matrix(p + "attn_v.weight", s_.dim, kvd);
    }
    Matrix(p + "attn_output.weight", qd, s_.dim);
    // Unscaled attention: the Q/K norms' weights carry the 1/sqrt(hd) (as trained ones do).
    const float qk = 1.0f / std::sqrt(std::sqrt(static_cast<float>(hd)));
    Vec(p + "attn_q_norm.weight", hd, qk, 0.5f * qk);
    if (stores) Vec(p + "attn_k_norm.weight", hd, qk, 0.5f * qk);
    Vec(p + "post_attention_norm.weight", s_.dim, 1.0f, 0.1f);
    Vec(p + "ffn_norm.weight", s_.dim, 1.0f, 0.1f);
    const int ffn = Gemma4Ffn(s_, l);
    Matrix(p + "ffn_gate.weight", s_.dim, ffn);
    Matrix(p + "ffn_up.weight", s_.dim, ffn);
    Matrix(p + "ffn_down.weight", ffn, s_.dim);
    Vec(p + "post_ffw_norm.weight", s_.dim, 1.0f, 0.1f);
    if (s_.n_experts > 0) {  // the experts beside the dense FFN, with their norms and scales
      const int E = s_.n_experts, F = s_.expert_ffn_dim;
      // The router reads x's norm over sqrt(dim): its weights larger, its choices decisive.
      buf_.resize(static_cast<size_t>(s_.dim) * static_cast<size_t>(E));
      for (float& v : buf_) v = rng_.Uniform() * 4.0f * std::sqrt(3.0f);
      w_->AddTensorF32(p + "ffn_gate_inp.weight", {s_.dim, E}, GgmlType::kF32, buf_.data());
      Vec(p + "ffn_gate_inp.scale", s_.dim, 1.0f, 0.3f);
      Matrix(p + "ffn_gate_exps.weight", s_.dim, F, E);
      Matrix(p + "ffn_up_exps.weight", s_.dim, F, E);
      Matrix(p + "ffn_down_exps.weight", F, s_.dim, E);
      Vec(p + "ffn_down_exps.scale", E, 1.0f, 0.5f);
      Vec(p + "pre_ffw_norm_2.weight", s_.dim, 1.0f, 0.1f);
      Vec(p + "post_ffw_norm_1.weight", s_.dim, 1.0f, 0.1f);
      Vec(p + "post_ffw_norm_2.weight", s_.dim, 1.0f, 0.1f);
    }
    Vec(p + "layer_output_scale.weight", 1, 0.75f, 0.2f);
    if (s_.per_layer_dim > 0) {
      Matrix(p + "inp_gate.weight", s_.dim, s_.per_layer_dim);
      Matrix(p + "proj.weight", s_.per_layer_dim, s_.dim);
      Vec(p + "post_norm.weight", s_.dim, 1.0f, 0.1f);
    }
  }
  // The global layers' RoPE factors (1 for the rotated pairs, 1e30 for the rest, as the
  // converter writes "proportional" RoPE) and the per-layer embeddings.
  void Gemma4Globals() {
    if (s_.rope_partial > 0) {
      buf_.assign(static_cast<size_t>(hd_ / 2), 1e30f);
      const int rotated = static_cast<int>(static_cast<float>(hd_ / 2) * s_.rope_partial);
      std::fill(buf_.begin(), buf_.begin() + rotated, 1.0f);
      w_->AddTensorF32("rope_freqs.weight", {hd_ / 2}, GgmlType::kF32, buf_.data());
    }
    if (s_.per_layer_dim <= 0) return;
    const int width = s_.n_layers * s_.per_layer_dim;
    Matrix("per_layer_token_embd.weight", width, s_.n_vocab);
    Matrix("per_layer_model_proj.weight", s_.dim, width);
    Vec("per_layer_proj_norm.weight", s_.per_layer_dim, 1.0f, 0.1f);
  }

  const SynthSpec& s_;
  GgufWriter* w_;
  Rng rng_;
  std::vector<float> buf_;
  int hd_, qd_, kvd_;
};

}  // namespace

void BuildSyntheticModel(const SynthSpec& s, GgufWriter* w) {
  if (s.arch == "bert" || s.arch == "nomic-bert") {
    BuildSyntheticEncoder(s, w);
    return;
  }
  const int hd = s.head_dim > 0 ? s.head_dim : s.dim / (s.n_heads > 0 ? s.n_heads : 1);
  if (s.dim <= 0 || s.n_layers <= 0 || s.n_heads <= 0 || s.n_kv_heads <= 0 || s.ffn_dim <= 0 ||
      hd <= 0 || s.n_heads % s.n_kv_heads != 0) {
    Fail("synthetic model: impossible shape");
  }
  if (IsHybridArch(s.arch)) {
    WriteHybridMetadata(s, hd, w);
    WriteVocabulary(s, w);
    WriteHybridTensors(s, hd, w);
    return;
  }
  WriteMetadata(s, hd, w);
  WriteVocabulary(s, w);
  SynthTensors(s, hd, w).Write();
}

void WriteSyntheticModel(const SynthSpec& spec, const std::string& path) {
  GgufWriter w;
  w.SpillTo(path + ".part");  // tensors on disk as they are made: models larger than memory
  BuildSyntheticModel(spec, &w);
  w.Write(path);
}

void WriteSyntheticLora(const std::string& base_path, int rank, uint64_t seed,
                        const std::string& path) {
  if (rank < 1 || rank > 4096) Fail("a LoRA rank must be within 1..4096 (got %d)", rank);
  const GgufFile base = GgufFile::Open(base_path);
  GgufWriter w;
  w.SetString("general.type", "adapter");
  w.SetString("general.architecture",
              std::string(base.GetString("general.architecture").value_or("llama")));
  w.SetString("adapter.type", "lora");
  w.SetF32("adapter.lora.alpha", static_cast<float>(rank));
  Rng rng(seed ^ 0x10aull);
  int pairs = 0;
  static const char* kTargets[] = {"attn_q.weight",      "attn_k.weight",   "attn_v.weight",
                                   "attn_output.weight", "ffn_gate.weight", "ffn_up.weight",
                                   "ffn_down.weight"};
  for (const GgufTensor& t : base.tensors()) {
    if (t.name.rfind("blk.", 0) != 0 || t.n_dims != 2) continue;
    const size_t dot = t.name.find('.', 4);
    if (dot == std::string::npos) continue;
    const std::string suffix = t.name.substr(dot + 1);
    if (std::find(std::begin(kTargets), std::end(kTargets), suffix) == std::end(kTargets)) continue;
    const int64_t in = t.ne[0], out = t.ne[1];
    // A ~ 1/sqrt(in) and B ~ 0.5/sqrt(rank): the product moves a projection's output by a
    // fraction of its own size, enough to change greedy text, never to swamp it.
    std::vector<float> a(static_cast<size_t>(rank * in)), b(static_cast<size_t>(out * rank));
    const float sa = 1.0f / std::sqrt(static_cast<float>(in));
    const float sb = 0.5f / std::sqrt(static_cast<float>(rank));
    for (float& v : a) v = sa * rng.Uniform();
    for (float& v : b) v = sb * rng.Uniform();
    w.AddTensor(t.name + ".lora_a", {in, rank}, GgmlType::kF32, a.data(), a.size() * 4);
    w.AddTensor(t.name + ".lora_b", {rank, out}, GgmlType::kF32, b.data(), b.size() * 4);
    ++pairs;
  }
  if (pairs == 0) Fail("%s: no attention or FFN matrices to adapt", base_path.c_str());
  w.Write(path);
}

}  // namespace paddock
