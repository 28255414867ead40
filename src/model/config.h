// model/config.h: the architecture of a decoder-only Transformer, as data.
//
// One struct describes Llama 2/3, TinyLlama, Mistral, Qwen2, Qwen3, Phi-3, Gemma and Gemma 2:
// the differences are fields (GQA head counts, RoPE layout and base, biases, QK-norm, sliding
// window and its layer pattern, FFN activation, embedding scale, soft-capping, post-norms),
// not code paths per model. Filled from GGUF metadata or a llama2.c header, then validated once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace paddock {

class GgufFile;
struct Llama2cConfig;

enum class FfnAct {
  kSilu,       // SwiGLU: silu(gate) * up (Llama, Mistral, Qwen, Phi-3)
  kGeluTanh,   // GeGLU: gelu_tanh(gate) * up (Gemma)
  kSwigluOai,  // gpt-oss: g = min(gate, 7), u = clamp(up, -7, 7), g * sigmoid(1.702 g) * (u + 1)
};

// How a mixture-of-experts router turns its logits into expert weights.
enum class ExpertGating {
  kSoftmax,     // softmax over all experts, then the top k (Mixtral, Qwen MoE, OLMoE)
  kSigmoid,     // sigmoid per expert, then the top k
  kSoftmaxTopK  // the top k logits, then softmax over those k
};

// What a decoder layer mixes its tokens with: attention over the KV cache, or a recurrence
// whose fixed-size state per sequence stands in for KV rows.
enum class LayerKind : uint8_t {
  kAttention,
  kShortConv,  // LFM2: y = c * conv(b * x) over the last conv_kernel tokens (a conv window)
  kDeltaNet,   // Qwen3.5: Gated DeltaNet (a causal conv1d window and a delta-rule state)
};

enum class RopeStyle {
  kAdjacentPairs,  // rotate (x[2i], x[2i+1]): GGUF "llama" layout and llama2.c
  kHalfSplit,      // rotate (x[i], x[i + d/2]): NeoX layout (Qwen2, Qwen3)
};

struct ModelConfig {
  std::string arch;  // general.architecture ("llama", "mistral", "qwen2", "qwen3")
  std::string name;  // general.name, if any
  int n_vocab = 0;
  int pooling_type =
      -1;       // <arch>.pooling_type (llama.cpp: 0 none, 1 mean, 2 cls, 3 last); -1 unset
  int dim = 0;  // residual stream width
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;  // < n_heads: grouped-query attention; 1: multi-query
  int head_dim = 0;
  int ffn_dim = 0;
  int context_length = 0;  // trained context
  float norm_eps = 1e-5f;
  float rope_base = 10000.0f;
  int rope_dim = 0;  // rotated dims per head (<= head_dim)
  RopeStyle rope_style = RopeStyle::kAdjacentPairs;
  std::string rope_scaling = "none";  // "none", "linear", "yarn", "llama3" (recorded)
  float rope_scaling_factor = 1.0f;
  int rope_orig_ctx = 0;  // YaRN: the context before scaling (rope.scaling.original_context_length)
  float rope_attn_factor = 1.0f;  // longrope: cos / sin scale (rope.scaling.attn_factor)
  bool attn_sinks = false;  // a learned per-head logit in every softmax's denominator (gpt-oss)
  int sliding_window = 0;   // 0: full attention
  bool qkv_bias = false;    // Qwen2
  bool qk_norm = false;     // Qwen3
  bool tied_embeddings = false;
  FfnAct ffn_act = FfnAct::kSilu;
  float embed_scale = 1.0f;    // token embeddings are multiplied by this (Gemma: sqrt(dim))
  float attn_scale = 0.0f;     // attention score scale; 0: 1/sqrt(head_dim)
  float attn_softcap = 0.0f;   // > 0: scores -> c * tanh(scores / c) (Gemma 2)
  float final_softcap = 0.0f;  // > 0: logits -> c * tanh(logits / c) (Gemma 2)
  int swa_pattern = 0;         // > 0: only layers with l % pattern < pattern - 1 use the window
                               // (Gemma 2: 2, even layers local, odd layers global; Gemma 3: 6)
  float rope_base_local = 0;   // > 0: the windowed (local) layers' RoPE base, unscaled (Gemma 3)
  bool post_norms =
      false;  // RMSNorm on the attention and FFN outputs before the residual (Gemma 2)
  bool layer_norm = false;  // LayerNorm with bias instead of RMSNorm (GPT-2)
  bool learned_pos =
      false;  // learned absolute position embeddings instead of RoPE (GPT-2; rope_dim 0)
  bool ffn_gated = true;  // gate/up GLU; false: up -> activation -> down (GPT-2)
  // An encoder (BERT, NomicBERT): post-norm layers (x = norm(x + block(x))), the embeddings
  // normalized, a token-type row added; it gives embeddings or a rank score, never text.
  // causal false (<arch>.attention.causal): a token sees its whole input.
  bool encoder = false;
  bool causal = true;
  // Mixture of experts (n_experts > 0): layers with a router run the n_experts_used experts
  // (gate/up/down of expert_ffn_dim rows each) their router picks per token, weighted, plus
  // an always-on shared expert of shared_ffn_dim rows where the file has one (Qwen2 MoE).
  int n_experts = 0;
  int n_experts_used = 0;
  int expert_ffn_dim = 0;
  int shared_ffn_dim = 0;
  ExpertGating expert_gating = ExpertGating::kSoftmax;
  bool expert_norm = false;   // the k weights are divided by their sum (Mixtral, Qwen3 MoE)
  float expert_scale = 1.0f;  // the k weights are multiplied by this
  bool qk_norm_full = false;  // QK-norm over the whole Q / K row, not per head (OLMoE)
  // Per-layer shapes and the memory savers (Gemma 4). local_layer: per layer 1 when windowed
  // (the file's pattern array; empty: swa_pattern decides). The local layers' head size and
  // rotated dims (0: head_dim, rope_dim). Per layer KV heads and FFN widths (empty: n_kv_heads,
  // ffn_dim). kv_layers > 0: layers from kv_layers on store no KV and read the last storing
  // layer of their kind (KvSource). per_layer_dim > 0: each layer adds a gated projection of
  // its own token-indexed input of this width. v_norm: values RMS-normalized per head, no weight.
  std::vector<uint8_t> local_layer;
  int head_dim_local = 0;
  int rope_dim_local = 0;
  std::vector<int> layer_kv_heads;
  std::vector<int> layer_ffn_dim;
  int kv_layers = 0;
  int per_layer_dim = 0;
  bool v_norm = false;
  // The windowed layers' K/V may be held as rings of their window (KvRing): Gemma 4.
  bool local_kv_ring = false;
  // Hybrid recurrent models (Qwen3.5, LFM2). layer_kind: per layer (empty: all attention).
  // conv_kernel: the causal convolution's width (its state keeps conv_kernel - 1 inputs).
  // The Gated DeltaNet: ssm_k_heads query/key heads and ssm_v_heads value heads of ssm_state
  // each (value head h reads key head h % ssm_k_heads, as llama.cpp lays the file out); a
  // state of ssm_state x ssm_state per value head. attn_gate: the attention layers' Q
  // projection also gives a per-head output gate (sigmoid, before Wo). nextn_layers: the
  // file's multi-token-prediction layers after the n_layers decoder layers.
  std::vector<uint8_t> layer_kind;
  int conv_kernel = 0;
  int ssm_state = 0;
  int ssm_k_heads = 0;
  int ssm_v_heads = 0;
  bool attn_gate = false;
  int nextn_layers = 0;
  // This config is a multi-token-prediction block's (MtpBlockConfig): one attention layer whose
  // input rows come from a projection of 2 x dim (the embedding and the hidden state).
  bool mtp_block = false;

  int q_dim() const { return n_heads * head_dim; }
  bool is_moe() const { return n_experts > 0; }
  // The widest FFN hidden row any layer computes (dense, one expert or the shared expert).
  int max_ffn_dim() const;
  int kv_dim() const { return n_kv_heads * head_dim; }

  // Whether layer l is a local (windowed) layer of an alternating pattern (or the file's list).
  bool LayerIsLocal(int l) const {
    if (!local_layer.empty()) return local_layer[static_cast<size_t>(l)] != 0;
    return swa_pattern > 0 && l % swa_pattern < swa_pattern - 1;
  }
  // Whether every layer attends within the window (no local/global pattern), and whether
  // layer l does (when there is a window): every layer, else the local ones.
  bool EveryLayerWindowed() const { return swa_pattern == 0 && local_layer.empty(); }
  bool LayerWindowed(int l) const { return EveryLayerWindowed() || LayerIsLocal(l); }
  // The attention window of layer l (0: full attention).
  int LayerWindow(int l, int window) const { return window > 0 && LayerWindowed(l) ? window : 0; }
  // Layer l's shape: head size, KV heads, rotated dims, FFN width.
  int LayerHeadDim(int l) const {
    return head_dim_local > 0 && LayerIsLocal(l) ? head_dim_local : head_dim;
  }
  int LayerKvHeads(int l) const {
    return layer_kv_heads.empty() ? n_kv_heads : layer_kv_heads[static_cast<size_t>(l)];
  }
  int LayerRopeDim(int l) const { return LayerIsLocal(l) ? LocalRopeDim() : rope_dim; }
  // The local layers' rotated dims (their RoPE table's width).
  int LocalRopeDim() const { return rope_dim_local > 0 ? rope_dim_local : rope_dim; }
  int LayerFfnDim(int l) const {
    return layer_ffn_dim.empty() ? ffn_dim : layer_ffn_dim[static_cast<size_t>(l)];
  }
  // The layer whose KV cache layer l reads (l itself unless it shares an earlier one's).
  int KvSource(int l) const;
  bool StoresKv(int l) const { return !Recurrent(l) && KvSource(l) == l; }
  LayerKind Kind(int l) const {
    return layer_kind.empty() ? LayerKind::kAttention
                              : static_cast<LayerKind>(layer_kind[static_cast<size_t>(l)]);
  }
  bool Recurrent(int l) const { return Kind(l) != LayerKind::kAttention; }
  bool hybrid() const;  // some layer is recurrent
  // The Gated DeltaNet's widths: keys (= queries), values, the convolved channels q|k|v.
  int ssm_key_dim() const { return ssm_k_heads * ssm_state; }
  int ssm_value_dim() const { return ssm_v_heads * ssm_state; }
  int ssm_conv_dim() const { return 2 * ssm_key_dim() + ssm_value_dim(); }
  // Layer l's recurrent state per sequence, in floats (0: an attention layer): the conv
  // window's conv_kernel - 1 rows of its channels, then (DeltaNet) the delta-rule states.
  size_t StateFloats(int l) const;
  // The widest head, query row and KV row of any layer (buffers are planned for these).
  int max_head_dim() const;
  int max_q_dim() const { return n_heads * max_head_dim(); }
  int max_kv_dim() const;
  // Layer l's attention score scale (attn_scale, else 1/sqrt of its head size).
  float AttentionScale(int l) const;

  // Throws Error if the numbers cannot describe a working model.
  void Validate() const;
  void ValidateLayers() const;
  void ValidateRecurrent() const;
};

// Reads the config from GGUF metadata (`{arch}.*` keys). n_vocab is left 0 when the file
// does not record it; the loader fills it from the embedding table.
ModelConfig ConfigFromGguf(const GgufFile& gguf);
ModelConfig ConfigFromLlama2c(const Llama2cConfig& c);
// The config of a model's first multi-token-prediction block (its file layer n_layers) run as a
// model of its own: one attention layer of the model's shapes, no recurrent layers.
ModelConfig MtpBlockConfig(const ModelConfig& c);

}  // namespace paddock
