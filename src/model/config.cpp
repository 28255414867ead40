#include "model/config.h"

#include <algorithm>
#include <cmath>

#include "base/strings.h"
#include "kernels/kv_format.h"
#include "formats/gguf.h"
#include "formats/llama2c.h"

namespace paddock {

namespace {
constexpr int64_t kMaxDim = 1 << 20;

int RequireInt(const GgufFile& g, const std::string& key) {
  auto v = g.GetInt(key);
  if (!v) Fail("model metadata lacks '%s'", key.c_str());
  if (*v <= 0 || *v > kMaxDim) Fail("model metadata '%s' = %lld is out of range", key.c_str(), (long long)*v);
  return static_cast<int>(*v);
}
int OptionalInt(const GgufFile& g, const std::string& key, int dflt) {
  auto v = g.GetInt(key);
  if (!v) return dflt;
  if (*v < 0 || *v > (int64_t{1} << 30)) Fail("model metadata '%s' = %lld is out of range", key.c_str(), (long long)*v);
  return static_cast<int>(*v);
}
}  // namespace

void ModelConfig::Validate() const {
  if (dim <= 0 || n_layers <= 0 || n_heads <= 0 || n_kv_heads <= 0 || head_dim <= 0 || ffn_dim <= 0) {
    Fail("model config has a non-positive size (dim %d, layers %d, heads %d/%d, head_dim %d, ffn %d)", dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim);
  }
  if (std::max({dim, q_dim(), ffn_dim}) > 262144) Fail("model config: a row of %d elements exceeds the supported maximum of 262144", std::max({dim, q_dim(), ffn_dim}));
  if (kv_dim() > kKvMaxRowElements) Fail("model config: KV width %d exceeds the supported maximum of %d", kv_dim(), kKvMaxRowElements);
  if (n_layers > 4096) Fail("model config: %d layers is out of range", n_layers);
  if (n_heads % n_kv_heads != 0) Fail("model config: %d heads is not a multiple of %d KV heads", n_heads, n_kv_heads);
  if (!(learned_pos && rope_dim == 0) && (rope_dim <= 0 || rope_dim > head_dim || rope_dim % 2 != 0)) Fail("model config: RoPE dimension %d must be even and at most the head size %d", rope_dim, head_dim);
  if (!(norm_eps > 0 && norm_eps < 1)) Fail("model config: norm epsilon %g is out of range", norm_eps);
  if (!(rope_base > 1)) Fail("model config: RoPE base %g is out of range", rope_base);
  if (!(rope_scaling_factor > 0)) Fail("model config: RoPE scaling factor %g is out of range", rope_scaling_factor);
  if (context_length <= 0) Fail("model config: context length %d is out of range", context_length);
  if (n_vocab <= 0) Fail("model config: vocabulary size %d is out of range", n_vocab);
}

float ModelConfig::AttentionScale() const {
  return attn_scale > 0 ? attn_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

ModelConfig ConfigFromGguf(const GgufFile& g) {
  ModelConfig c;
  auto arch = g.GetString("general.architecture");
  if (!arch) Fail("model metadata lacks 'general.architecture'");
  c.arch.assign(*arch);
  if (auto name = g.GetString("general.name")) c.name.assign(*name);
  if (c.arch == "llama" || c.arch == "mistral") {
    c.rope_style = RopeStyle::kAdjacentPairs;
  } else if (c.arch == "qwen2" || c.arch == "qwen3" || c.arch == "phi3" || c.arch == "gemma" || c.arch == "gemma2") {
    c.rope_style = RopeStyle::kHalfSplit;
  } else if (c.arch != "gpt2") {
    Fail("unsupported architecture '%s' (supported: llama, mistral, qwen2, qwen3, phi3, gemma, gemma2, gpt2)", c.arch.c_str());
  }
  const std::string p = c.arch + ".";
  c.dim = RequireInt(g, p + "embedding_length");
  c.n_layers = RequireInt(g, p + "block_count");
  c.ffn_dim = RequireInt(g, p + "feed_forward_length");
  c.n_heads = RequireInt(g, p + "attention.head_count");
  c.n_kv_heads = OptionalInt(g, p + "attention.head_count_kv", c.n_heads);
  c.context_length = RequireInt(g, p + "context_length");
  c.head_dim = OptionalInt(g, p + "attention.key_length", c.dim / c.n_heads);
  const int v_len = OptionalInt(g, p + "attention.value_length", c.head_dim);
  if (v_len != c.head_dim) Fail("model metadata: value length %d differs from key length %d (unsupported)", v_len, c.head_dim);
  c.rope_dim = OptionalInt(g, p + "rope.dimension_count", c.head_dim);
  c.n_vocab = OptionalInt(g, p + "vocab_size", 0);
  if (auto eps = g.GetFloat(p + "attention.layer_norm_rms_epsilon")) c.norm_eps = static_cast<float>(*eps);
  if (auto base = g.GetFloat(p + "rope.freq_base")) c.rope_base = static_cast<float>(*base);
  if (auto st = g.GetString(p + "rope.scaling.type")) c.rope_scaling.assign(*st);
  if (auto f = g.GetFloat(p + "rope.scaling.factor")) c.rope_scaling_factor = static_cast<float>(*f);
  if (c.rope_scaling == "none") c.rope_scaling_factor = 1.0f;
  c.sliding_window = OptionalInt(g, p + "attention.sliding_window", 0);
  c.qkv_bias = g.FindTensor("blk.0.attn_q.bias") != nullptr;
  c.qk_norm = g.FindTensor("blk.0.attn_q_norm.weight") != nullptr;
  c.tied_embeddings = g.FindTensor("output.weight") == nullptr;
  if (c.arch == "gemma" || c.arch == "gemma2") {
    c.ffn_act = FfnAct::kGeluTanh;
    c.embed_scale = std::sqrt(static_cast<float>(c.dim));
  }
  if (c.arch == "gpt2") {
    c.layer_norm = true;
    c.learned_pos = true;
    c.rope_dim = 0;
    c.ffn_gated = false;
    c.ffn_act = FfnAct::kGeluTanh;
    c.qkv_bias = g.FindTensor("blk.0.attn_qkv.bias") != nullptr;
    if (auto eps = g.GetFloat(p + "attention.layer_norm_epsilon")) c.norm_eps = static_cast<float>(*eps);
  }
  if (c.arch == "gemma2") {
    c.attn_softcap = static_cast<float>(g.GetFloat(p + "attn_logit_softcapping").value_or(50.0));
    c.final_softcap = static_cast<float>(g.GetFloat(p + "final_logit_softcapping").value_or(30.0));
    c.swa_pattern = 2;
    c.post_norms = true;
    // As the reference: the 27B model (46 layers) scales queries by 1/sqrt(dim / heads).
    if (c.n_layers == 46) c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.dim) / static_cast<float>(c.n_heads));
  }
  return c;
}

ModelConfig ConfigFromLlama2c(const Llama2cConfig& h) {
  ModelConfig c;
  c.arch = "llama";
  c.name = "llama2.c checkpoint";
  c.n_vocab = h.vocab_size;
  c.dim = h.dim;
  c.n_layers = h.n_layers;
  c.n_heads = h.n_heads;
  c.n_kv_heads = h.n_kv_heads;
  c.head_dim = h.dim / h.n_heads;
  c.ffn_dim = h.hidden_dim;
  c.context_length = h.seq_len;
  c.norm_eps = 1e-5f;
  c.rope_base = 10000.0f;
  c.rope_dim = c.head_dim;
  c.rope_style = RopeStyle::kAdjacentPairs;
  c.tied_embeddings = h.shared_classifier;
  return c;
}

}  // namespace paddock
