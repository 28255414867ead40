#include "model/config.h"

#include <algorithm>
#include <cmath>

#include "base/strings.h"
#include "formats/gguf.h"
#include "formats/llama2c.h"
#include "kernels/kv_format.h"

namespace paddock {

namespace {
constexpr int64_t kMaxDim = 1 << 20;

int RequireInt(const GgufFile& g, const std::string& key) {
  auto v = g.GetInt(key);
  if (!v) Fail("model metadata lacks '%s'", key.c_str());
  if (*v <= 0 || *v > kMaxDim)
    Fail("model metadata '%s' = %lld is out of range", key.c_str(), (long long)*v);
  return static_cast<int>(*v);
}
int OptionalInt(const GgufFile& g, const std::string& key, int dflt) {
  auto v = g.GetInt(key);
  if (!v) return dflt;
  if (*v < 0 || *v > (int64_t{1} << 30))
    Fail("model metadata '%s' = %lld is out of range", key.c_str(), (long long)*v);
  return static_cast<int>(*v);
}
}  // namespace

// The per-layer lists (Gemma 4): one entry per layer, each shape possible.
void ModelConfig::ValidateLayers() const {
  auto sized = [&](size_t n, const char* what) {
    if (n != 0 && n != static_cast<size_t>(n_layers))
      Fail("model config: %s has %zu entries for %d layers", what, n, n_layers);
  };
  sized(local_layer.size(), "the sliding-window pattern");
  sized(layer_kv_heads.size(), "the per-layer KV head counts");
  sized(layer_ffn_dim.size(), "the per-layer FFN widths");
  if (head_dim_local < 0 || head_dim_local > 4096 || rope_dim_local < 0 ||
      rope_dim_local > std::max(head_dim_local, head_dim) || rope_dim_local % 2 != 0)
    Fail("model config: local head size %d / RoPE dims %d out of range", head_dim_local,
         rope_dim_local);
  for (int l = 0; l < n_layers; ++l) {
    const int kvh = LayerKvHeads(l), f = LayerFfnDim(l);
    if (!Recurrent(l) && (kvh <= 0 || n_heads % kvh != 0))
      Fail("model config: layer %d has %d KV heads for %d heads", l, kvh, n_heads);
    if (f <= 0 || f > 262144) Fail("model config: layer %d's FFN width %d is out of range", l, f);
    if (kvh * LayerHeadDim(l) > kKvMaxRowElements)
      Fail("model config: layer %d's KV width %d exceeds the supported maximum of %d", l,
           kvh * LayerHeadDim(l), kKvMaxRowElements);
    if (LayerRopeDim(l) > LayerHeadDim(l))
      Fail("model config: layer %d rotates %d dims of heads of %d", l, LayerRopeDim(l),
           LayerHeadDim(l));
  }
  if (kv_layers < 0 || kv_layers > n_layers)
    Fail("model config: %d layers storing KV of %d", kv_layers, n_layers);
  for (int l = kv_layers; kv_layers > 0 && l < n_layers; ++l) {
    const int s = KvSource(l);
    if (s < 0)
      Fail("model config: layer %d shares the KV of an earlier %s layer, and there is none", l,
           LayerIsLocal(l) ? "local" : "global");
    if (LayerHeadDim(s) != LayerHeadDim(l) || LayerKvHeads(s) != LayerKvHeads(l))
      Fail("model config: layer %d shares layer %d's KV but its heads differ", l, s);
  }
  if (per_layer_dim < 0 || per_layer_dim > 65536)
    Fail("model config: per-layer input width %d is out of range", per_layer_dim);
  ValidateRecurrent();
}

// Hybrid recurrent models: the layer kinds and the recurrent layers' sizes.
void ModelConfig::ValidateRecurrent() const {
  if (layer_kind.empty()) return;
  if (layer_kind.size() != static_cast<size_t>(n_layers))
    Fail("model config: %zu layer kinds for %d layers", layer_kind.size(), n_layers);
  bool conv = false, delta = false;
  for (uint8_t k : layer_kind) {
    if (k > static_cast<uint8_t>(LayerKind::kDeltaNet)) Fail("model config: layer kind %d", k);
    conv |= k == static_cast<uint8_t>(LayerKind::kShortConv);
    delta |= k == static_cast<uint8_t>(LayerKind::kDeltaNet);
  }
  if ((conv || delta) && (conv_kernel < 2 || conv_kernel > 64))
    Fail("model config: convolution width %d is out of range [2, 64]", conv_kernel);
  if (delta) {
    if (ssm_state <= 0 || ssm_state > 1024 || ssm_k_heads <= 0 || ssm_v_heads <= 0 ||
        ssm_v_heads > 1024 || ssm_v_heads % ssm_k_heads != 0)
      Fail(
          "model config: Gated DeltaNet heads %d (keys) / %d (values) of %d are out of range (the "
          "value heads a multiple of the key heads)",
          ssm_k_heads, ssm_v_heads, ssm_state);
    if (ssm_conv_dim() > 262144)
      Fail("model config: Gated DeltaNet width %d is out of range", ssm_conv_dim());
  }
  if (kv_layers > 0) Fail("model config: KV shared across layers in a hybrid model");
}

bool ModelConfig::hybrid() const {
  for (int l = 0; l < n_layers; ++l)
    if (Recurrent(l)) return true;
  return false;
}

size_t ModelConfig::StateFloats(int l) const {
  const size_t window = static_cast<size_t>(std::max(conv_kernel - 1, 0));
  switch (Kind(l)) {
    case LayerKind::kShortConv:
      return window * static_cast<size_t>(dim);
    case LayerKind::kDeltaNet:
      return window * static_cast<size_t>(ssm_conv_dim()) +
             static_cast<size_t>(ssm_v_heads) * ssm_state * ssm_state;
    case LayerKind::kAttention:
      break;
  }
  return 0;
}

void ModelConfig::Validate() const {
  if (dim <= 0 || n_layers <= 0 || n_heads <= 0 || n_kv_heads <= 0 || head_dim <= 0 ||
      ffn_dim <= 0) {
    Fail(
        "model config has a non-positive size (dim %d, layers %d, heads %d/%d, head_dim %d, ffn "
        "%d)",
        dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim);
  }
  if (std::max({dim, q_dim(), ffn_dim}) > 262144)
    Fail("model config: a row of %d elements exceeds the supported maximum of 262144",
         std::max({dim, q_dim(), ffn_dim}));
  if (kv_dim() > kKvMaxRowElements)
    Fail("model config: KV width %d exceeds the supported maximum of %d", kv_dim(),
         kKvMaxRowElements);
  if (n_layers > 4096) Fail("model config: %d layers is out of range", n_layers);
  ValidateLayers();
  if (n_heads % n_kv_heads != 0)
    Fail("model config: %d heads is not a multiple of %d KV heads", n_heads, n_kv_heads);
  if (!(learned_pos && rope_dim == 0) &&
      (rope_dim <= 0 || rope_dim > head_dim || rope_dim % 2 != 0))
    Fail("model config: RoPE dimension %d must be even and at most the head size %d", rope_dim,
         head_dim);
  if (!(norm_eps > 0 && norm_eps < 1))
    Fail("model config: norm epsilon %g is out of range", norm_eps);
  if (!(rope_base > 1)) Fail("model config: RoPE base %g is out of range", rope_base);
  if (!(rope_scaling_factor > 0))
    Fail("model config: RoPE scaling factor %g is out of range", rope_scaling_factor);
  // Scaling types the forward pass computes; "llama3" factors come as the rope_freqs tensor,
  // "longrope" ones as the rope_factors tensors (the loader checks both).
  if (rope_scaling != "none" && rope_scaling != "linear" && rope_scaling != "yarn" &&
      rope_scaling != "llama3" && rope_scaling != "longrope")
    Fail(
        "model config: RoPE scaling type '%s' is not supported (none, linear, yarn, llama3, "
        "longrope)",
        rope_scaling.c_str());
  if (rope_scaling == "yarn" && rope_orig_ctx <= 0)
    Fail("model config: YaRN RoPE scaling needs the original context length");
  if (context_length <= 0) Fail("model config: context length %d is out of range", context_length);
  if (n_vocab <= 0) Fail("model config: vocabulary size %d is out of range", n_vocab);
  if (n_experts < 0 || n_experts > 1024)
    Fail("model config: %d experts is out of range (0 to 1024)", n_experts);
  if (n_experts > 0) {
    if (n_experts_used < 1 || n_experts_used > n_experts)
      Fail("model config: %d experts used per token of %d experts (1 to %d allowed)",
           n_experts_used, n_experts, n_experts);
    if (expert_ffn_dim <= 0 || expert_ffn_dim > 262144)
      Fail("model config: expert FFN width %d is out of range", expert_ffn_dim);
    if (shared_ffn_dim < 0 || shared_ffn_dim > 262144)
      Fail("model config: shared expert FFN width %d is out of range", shared_ffn_dim);
    if (!std::isfinite(expert_scale) || expert_scale == 0)
      Fail("model config: expert weight scale %g is out of range", expert_scale);
  } else if (n_experts_used != 0) {
    Fail("model config: %d experts used per token but the model has no experts", n_experts_used);
  }
}

int ModelConfig::max_ffn_dim() const {
  int m = std::max({ffn_dim, expert_ffn_dim, shared_ffn_dim});
  for (int f : layer_ffn_dim) m = std::max(m, f);
  return m;
}

int ModelConfig::KvSource(int l) const {
  if (kv_layers <= 0 || l < kv_layers) return l;
  for (int s = kv_layers - 1; s >= 0; --s)
    if (LayerIsLocal(s) == LayerIsLocal(l)) return s;
  return -1;  // (Validate refuses such a model)
}

int ModelConfig::max_head_dim() const {
  return std::max(head_dim, head_dim_local);
}

int ModelConfig::max_kv_dim() const {
  int m = 0;
  for (int l = 0; l < n_layers; ++l) m = std::max(m, LayerKvHeads(l) * LayerHeadDim(l));
  return m;
}

float ModelConfig::AttentionScale(int l) const {
  return attn_scale > 0 ? attn_scale : 1.0f / std::sqrt(static_cast<float>(LayerHeadDim(l)));
}

namespace {

// ---- architectures ----------------------------------------------------------------------
// Each architecture Paddock runs, and how its GGUF metadata departs from the common Llama-style
// keys read by ConfigFromGguf. Adding an architecture: one entry here (and its tensor names in
// loader.cpp if it has new ones; a shape in synth.cpp to test it).

void Gemma(const GgufFile&, const std::string&, ModelConfig* c) {  // GeGLU, scaled embeddings
  c->ffn_act = FfnAct::kGeluTanh;
  c->embed_scale = std::sqrt(static_cast<float>(c->dim));
}

void Gemma2(const GgufFile& g, const std::string& p, ModelConfig* c) {
  Gemma(g, p, c);
  c->attn_softcap = static_cast<float>(g.GetFloat(p + "attn_logit_softcapping").value_or(50.0));
  c->final_softcap = static_cast<float>(g.GetFloat(p + "final_logit_softcapping").value_or(30.0));
  c->swa_pattern = 2;  // local and global layers alternate
  c->post_norms = true;
  // As the reference: the 27B model (46 layers) scales queries by 1/sqrt(dim / heads).
  if (c->n_layers == 46)
    c->attn_scale = 1.0f / std::sqrt(static_cast<float>(c->dim) / static_cast<float>(c->n_heads));
}

// Gemma 3: five local (windowed, RoPE base 10000 unscaled) layers to one global (the file's
// RoPE base and scaling), QK-norm (found by its tensors), post-norms, no soft-capping.
void Gemma3(const GgufFile& g, const std::string& p, ModelConfig* c) {
  Gemma(g, p, c);
  c->swa_pattern = 6;
  c->rope_base_local = 10000.0f;
  c->post_norms = true;
  if (auto cap = g.GetFloat(p + "final_logit_softcapping"))
    c->final_softcap = static_cast<float>(*cap);
  // As the reference: the 27B model (62 layers) scales queries by 1/sqrt(dim / heads).
  if (c->n_layers == 62)
    c->attn_scale = 1.0f / std::sqrt(static_cast<float>(c->dim) / static_cast<float>(c->n_heads));
}

// Gemma 4: the file's per-layer sliding-window list, local layers with their own head size,
// rotated dims and RoPE base (the global layers' "proportional" RoPE comes as rope_freqs
// factors), unscaled attention with Q/K norms and values normalized, post-norms, per-layer
// KV heads and FFN widths (arrays), the last layers sharing earlier layers' KV, per-layer
// embeddings.
void Gemma4(const GgufFile& g, const std::string& p, ModelConfig* c) {
  Gemma(g, p, c);
  c->post_norms = true;
  c->attn_scale = 1.0f;
  c->v_norm = true;
  c->local_kv_ring = true;
  if (auto cap = g.GetFloat(p + "final_logit_softcapping"))
    c->final_softcap = static_cast<float>(*cap);
  const std::vector<int64_t> swa = g.GetIntArray(p + "attention.sliding_window_pattern");
  if (swa.empty()) Fail("model metadata lacks '%sattention.sliding_window_pattern'", p.c_str());
  for (int64_t v : swa) c->local_layer.push_back(v != 0 ? 1 : 0);
  c->head_dim_local = OptionalInt(g, p + "attention.key_length_swa", c->head_dim);
  if (OptionalInt(g, p + "attention.value_length_swa", c->head_dim_local) != c->head_dim_local)
    Fail("model metadata: local value length differs from key length (unsupported)");
  c->rope_dim_local = OptionalInt(g, p + "rope.dimension_count_swa", c->head_dim_local);
  c->rope_base_local = c->rope_base;
  if (auto b = g.GetFloat(p + "rope.freq_base_swa")) c->rope_base_local = static_cast<float>(*b);
  c->kv_layers = c->n_layers - OptionalInt(g, p + "attention.shared_kv_layers", 0);
  if (c->kv_layers <= 0) Fail("model metadata: every layer shares KV; none stores it");
  c->per_layer_dim = OptionalInt(g, p + "embedding_length_per_layer_input", 0);
}

// Integer metadata that is either one value or one per layer (Gemma 4's head_count_kv and
// feed_forward_length): *one the single value (or the first), *per the list (else empty).
// zero_ok: 0 is a value (LFM2: a layer without attention).
void ScalarOrLayers(const GgufFile& g, const std::string& key, int* one, std::vector<int>* per,
                    bool zero_ok = false) {
  const GgufValue* v = g.Find(key);
  if (v == nullptr || v->type != GgufType::kArray) return;
  for (int64_t x : g.GetIntArray(key)) {
    if (x < 0 || x > kMaxDim || (x == 0 && !zero_ok))
      Fail("model metadata '%s' has %lld, out of range", key.c_str(), (long long)x);
    per->push_back(static_cast<int>(x));
  }
  if (per->empty()) Fail("model metadata '%s' is an empty list", key.c_str());
  *one = *std::max_element(per->begin(), per->end());
}

// Qwen3.5 (dense and MoE): Gated DeltaNet layers with attention every
// full_attention_interval-th layer (or the file's recurrent-layer list), gated attention with
// QK-norm and partial NeoX RoPE, multi-token-prediction layers after the decoder's.
void Qwen35(const GgufFile& g, const std::string& p, ModelConfig* c) {
  c->attn_gate = true;
  c->conv_kernel = RequireInt(g, p + "ssm.conv_kernel");
  c->ssm_state = RequireInt(g, p + "ssm.state_size");
  c->ssm_v_heads = RequireInt(g, p + "ssm.time_step_rank");
  c->ssm_k_heads = RequireInt(g, p + "ssm.group_count");
  if (RequireInt(g, p + "ssm.inner_size") != c->ssm_value_dim())
    Fail("model metadata: '%sssm.inner_size' is not %d value heads of %d", p.c_str(),
         c->ssm_v_heads, c->ssm_state);
  c->nextn_layers = OptionalInt(g, p + "nextn_predict_layers", 0);
  if (c->nextn_layers >= c->n_layers)
    Fail("model metadata: %d prediction layers of %d blocks", c->nextn_layers, c->n_layers);
  c->n_layers -= c->nextn_layers;
  const std::vector<int64_t> recurrent = g.GetIntArray(p + "attention.recurrent_layers");
  const int every = OptionalInt(g, p + "full_attention_interval", 4);
  if (every <= 0) Fail("model metadata: '%sfull_attention_interval' is 0", p.c_str());
  for (int l = 0; l < c->n_layers; ++l) {
    const bool rec = recurrent.empty() ? (l + 1) % every != 0
                                       : l < static_cast<int>(recurrent.size()) &&
                                             recurrent[static_cast<size_t>(l)] != 0;
    c->layer_kind.push_back(
        static_cast<uint8_t>(rec ? LayerKind::kDeltaNet : LayerKind::kAttention));
  }
  // M-RoPE sections (interleaved): text positions are the same in the first three sections,
  // 0 in the fourth, so the rotation is NeoX's unless a pair falls in the fourth.
  const std::vector<int64_t> sec = g.GetIntArray(p + "rope.dimension_sections");
  if (sec.size() >= 4) {
    const int64_t total = sec[0] + sec[1] + sec[2] + sec[3];
    for (int i = 0; total > 0 && i < c->rope_dim / 2; ++i) {
      const int64_t s = i % total;
      const bool t = s % 3 == 0 && s < 3 * sec[0], h = s % 3 == 1 && s < 3 * sec[1],
                 w = s % 3 == 2 && s < 3 * sec[2];
      if (!t && !h && !w)
        Fail("model metadata: RoPE section 4 (%lld pairs) rotates text by position 0: unsupported",
             (long long)sec[3]);
    }
  }
}

// LFM2: gated short-convolution layers where head_count_kv is 0, attention (QK-norm, NeoX
// RoPE) on the others.
void Lfm2(const GgufFile& g, const std::string& p, ModelConfig* c) {
  c->conv_kernel = RequireInt(g, p + "shortconv.l_cache");
  if (c->layer_kv_heads.empty())
    Fail("model metadata: '%sattention.head_count_kv' is no list", p.c_str());
  for (int& kvh : c->layer_kv_heads) {
    c->layer_kind.push_back(
        static_cast<uint8_t>(kvh == 0 ? LayerKind::kShortConv : LayerKind::kAttention));
    if (kvh == 0) kvh = c->n_kv_heads;  // (unused: a convolution layer has no heads)
  }
}

// GPT-2: LayerNorm, learned positions.
void Gpt2(const GgufFile& g, const std::string& p, ModelConfig* c) {
  c->layer_norm = true;
  c->learned_pos = true;
  c->rope_dim = 0;
  c->ffn_gated = false;
  c->ffn_act = FfnAct::kGeluTanh;
  c->qkv_bias = g.FindTensor("blk.0.attn_qkv.bias") != nullptr;
  if (auto eps = g.GetFloat(p + "attention.layer_norm_epsilon"))
    c->norm_eps = static_cast<float>(*eps);
}

// Encoders as llama.cpp writes them: LayerNorm with bias, post-norm, bidirectional unless the
// file says causal. BERT: learned positions, GELU MLP with biases; NomicBERT: RoPE (NeoX
// layout), SwiGLU, fused QKV, no biases.
void Encoder(const GgufFile& g, const std::string& p, ModelConfig* c) {
  c->encoder = true;
  c->layer_norm = true;
  c->causal = g.GetBool(p + "attention.causal").value_or(false);
  if (auto eps = g.GetFloat(p + "attention.layer_norm_epsilon"))
    c->norm_eps = static_cast<float>(*eps);
}

void Bert(const GgufFile& g, const std::string& p, ModelConfig* c) {
  Encoder(g, p, c);
  c->learned_pos = true;
  c->rope_dim = 0;
  c->ffn_gated = false;
  c->ffn_act = FfnAct::kGeluTanh;
}

void NomicBert(const GgufFile& g, const std::string& p, ModelConfig* c) {
  Encoder(g, p, c);
}

// gpt-oss: the clamped SwiGLU, softmax over the top-k router logits, sliding-window and full
// layers alternating (even layers windowed), attention sinks (found by their tensors).
void GptOss(const GgufFile&, const std::string&, ModelConfig* c) {
  c->ffn_act = FfnAct::kSwigluOai;
  c->expert_gating = ExpertGating::kSoftmaxTopK;
  c->expert_norm = false;
  c->swa_pattern = 2;
}

// OLMoE: QK-norm over the whole Q and K rows (all heads at once).
void Olmoe(const GgufFile&, const std::string&, ModelConfig* c) {
  c->qk_norm_full = c->qk_norm;
}

// Mixture-of-experts metadata (any architecture): expert counts and widths, the router's
// gating function and whether the k weights are normalized. norm_default: the family's
// convention where the file does not say (llama.cpp's per-architecture choice).
void MoeConfig(const GgufFile& g, const std::string& p, bool norm_default, ModelConfig* c) {
  c->n_experts = OptionalInt(g, p + "expert_count", 0);
  c->n_experts_used = OptionalInt(g, p + "expert_used_count", 0);
  if (c->n_experts == 0) return;
  c->expert_ffn_dim = OptionalInt(g, p + "expert_feed_forward_length", c->ffn_dim);
  c->shared_ffn_dim = OptionalInt(g, p + "expert_shared_feed_forward_length", 0);
  c->expert_norm = norm_default;
  if (auto v = g.GetBool(p + "expert_weights_norm")) c->expert_norm = *v;
  if (auto s = g.GetFloat(p + "expert_weights_scale"); s && *s != 0)
    c->expert_scale = static_cast<float>(*s);
  const int gating = OptionalInt(g, p + "expert_gating_func", 1);
  switch (gating) {
    case 0:  // unset in some converters: the family default
    case 1:
      c->expert_gating = ExpertGating::kSoftmax;
      break;
    case 2:
      c->expert_gating = ExpertGating::kSigmoid;
      break;
    case 3:
      c->expert_gating = ExpertGating::kSoftmaxTopK;
      break;
    default:
      Fail(
          "model metadata '%sexpert_gating_func' = %d is not a known gating function (1 softmax, "
          "2 sigmoid, 3 softmax over the top k)",
          p.c_str(), gating);
  }
}

struct Architecture {
  const char* name;
  RopeStyle rope_style;
  void (*specifics)(const GgufFile& g, const std::string& prefix, ModelConfig* c);  // null: none
  bool expert_norm = false;  // MoE: the k weights are normalized unless the file says otherwise
};

constexpr Architecture kArchitectures[] = {
    {"llama", RopeStyle::kAdjacentPairs, nullptr, true},  // Llama 2/3, TinyLlama, Mixtral
    {"mistral", RopeStyle::kAdjacentPairs, nullptr},      // sliding window from the metadata
    {"qwen2", RopeStyle::kHalfSplit, nullptr},            // QKV bias (found by its tensors)
    {"qwen3", RopeStyle::kHalfSplit, nullptr},            // QK-norm (found by its tensors)
    {"phi3", RopeStyle::kHalfSplit, nullptr},             // fused QKV and gate/up (loader.cpp)
    {"gemma", RopeStyle::kHalfSplit, Gemma},              // GeGLU, scaled embeddings
    {"gemma2", RopeStyle::kHalfSplit, Gemma2},            // + soft-capping, post-norms, 1:1 local
    {"gemma3", RopeStyle::kHalfSplit, Gemma3},            // + QK-norm, 5:1 local, two RoPE bases
    {"gemma4", RopeStyle::kHalfSplit, Gemma4, true},      // + shared KV, per-layer inputs, shapes
    {"gpt2", RopeStyle::kAdjacentPairs, Gpt2},            // LayerNorm, learned positions
    {"qwen2moe", RopeStyle::kHalfSplit, nullptr},         // experts + a gated shared expert
    {"qwen3moe", RopeStyle::kHalfSplit, nullptr, true},   // experts, normalized top k
    {"olmoe", RopeStyle::kHalfSplit, Olmoe},              // experts, whole-row QK-norm
    {"gpt-oss", RopeStyle::kHalfSplit, GptOss},           // MXFP4 experts, sinks, YaRN
    {"qwen35", RopeStyle::kHalfSplit, Qwen35},            // Gated DeltaNet + gated attention
    {"qwen35moe", RopeStyle::kHalfSplit, Qwen35, true},   // + experts and a gated shared expert
    {"lfm2", RopeStyle::kHalfSplit, Lfm2},                // short convolutions + attention
    {"bert", RopeStyle::kAdjacentPairs, Bert},            // encoder: learned positions, GELU
    {"nomic-bert", RopeStyle::kHalfSplit, NomicBert},     // encoder: RoPE, SwiGLU
};

const Architecture& FindArchitecture(const std::string& name) {
  for (const auto& a : kArchitectures) {
    if (name == a.name) return a;
  }
  std::string known;
  for (const auto& a : kArchitectures) known += std::string(known.empty() ? "" : ", ") + a.name;
  Fail("unsupported architecture '%s' (supported: %s)", name.c_str(), known.c_str());
}

}  // namespace

ModelConfig ConfigFromGguf(const GgufFile& g) {
  ModelConfig c;
  auto arch = g.GetString("general.architecture");
  if (!arch) Fail("model metadata lacks 'general.architecture'");
  c.arch.assign(*arch);
  if (auto name = g.GetString("general.name")) c.name.assign(*name);
  const Architecture& spec = FindArchitecture(c.arch);
  c.rope_style = spec.rope_style;
  const std::string p = c.arch + ".";
  c.dim = RequireInt(g, p + "embedding_length");
  c.n_layers = RequireInt(g, p + "block_count");
  ScalarOrLayers(g, p + "feed_forward_length", &c.ffn_dim, &c.layer_ffn_dim);
  if (c.layer_ffn_dim.empty()) c.ffn_dim = RequireInt(g, p + "feed_forward_length");
  c.n_heads = RequireInt(g, p + "attention.head_count");
  ScalarOrLayers(g, p + "attention.head_count_kv", &c.n_kv_heads, &c.layer_kv_heads,
                 c.arch == "lfm2");
  if (c.layer_kv_heads.empty())
    c.n_kv_heads = OptionalInt(g, p + "attention.head_count_kv", c.n_heads);
  c.context_length = RequireInt(g, p + "context_length");
  c.head_dim = OptionalInt(g, p + "attention.key_length", c.dim / c.n_heads);
  const int v_len = OptionalInt(g, p + "attention.value_length", c.head_dim);
  if (v_len != c.head_dim)
    Fail("model metadata: value length %d differs from key length %d (unsupported)", v_len,
         c.head_dim);
  c.rope_dim = OptionalInt(g, p + "rope.dimension_count", c.head_dim);
  c.n_vocab = OptionalInt(g, p + "vocab_size", 0);
  if (auto eps = g.GetFloat(p + "attention.layer_norm_rms_epsilon"))
    c.norm_eps = static_cast<float>(*eps);
  if (auto base = g.GetFloat(p + "rope.freq_base")) c.rope_base = static_cast<float>(*base);
  if (auto st = g.GetString(p + "rope.scaling.type")) c.rope_scaling.assign(*st);
  if (auto f = g.GetFloat(p + "rope.scaling.factor"))
    c.rope_scaling_factor = static_cast<float>(*f);
  if (c.rope_scaling == "none") c.rope_scaling_factor = 1.0f;
  c.rope_orig_ctx = OptionalInt(g, p + "rope.scaling.original_context_length", c.context_length);
  if (auto af = g.GetFloat(p + "rope.scaling.attn_factor"))
    c.rope_attn_factor = static_cast<float>(*af);
  c.attn_sinks = g.FindTensor("blk.0.attn_sinks.weight") != nullptr ||
                 g.FindTensor("blk.0.attn_sinks") != nullptr;
  c.sliding_window = OptionalInt(g, p + "attention.sliding_window", 0);
  c.pooling_type = OptionalInt(g, p + "pooling_type", -1);
  c.qkv_bias = g.FindTensor("blk.0.attn_q.bias") != nullptr;
  c.qk_norm = g.FindTensor("blk.0.attn_q_norm.weight") != nullptr;
  c.tied_embeddings = g.FindTensor("output.weight") == nullptr;
  MoeConfig(g, p, spec.expert_norm, &c);
  if (spec.specifics != nullptr) spec.specifics(g, p, &c);
  for (int l = 0; l < c.n_layers && c.hybrid(); ++l) {  // (layer 0 may have no attention)
    if (c.Recurrent(l)) continue;
    const std::string b = StrFormat("blk.%d.", l);
    c.qkv_bias = g.FindTensor(b + "attn_q.bias") != nullptr;
    c.qk_norm = g.FindTensor(b + "attn_q_norm.weight") != nullptr;
    break;
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

ModelConfig MtpBlockConfig(const ModelConfig& c) {
  if (c.nextn_layers <= 0) Fail("the model has no multi-token-prediction layers");
  ModelConfig m = c;
  m.n_layers = 1;
  m.layer_kind.assign(1, static_cast<uint8_t>(LayerKind::kAttention));
  m.nextn_layers = 0;
  m.mtp_block = true;
  if (!c.local_layer.empty() || !c.layer_kv_heads.empty() || !c.layer_ffn_dim.empty() ||
      c.kv_layers > 0 || c.per_layer_dim > 0)
    Fail("%s: prediction layers of per-layer shapes are not supported", c.arch.c_str());
  return m;
}

}  // namespace paddock
