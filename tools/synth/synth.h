// synth/synth.h: synthetic models with random weights at real shapes, written as GGUF with the
// tensor names and metadata the loader expects for each architecture.
//
// Used by tests (one model per architecture variant) and by `paddock synth` for speed work on
// shapes like TinyLlama-1.1B without downloading anything. The text such a model produces is
// noise; the shapes, types and memory traffic are real.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/ggml_types.h"

namespace paddock {

class GgufWriter;

struct SynthSpec {
  std::string arch =
      "llama";  // llama, mistral, qwen2, qwen3, phi3 (fused tensors), gemma, gemma2, gpt2
  int dim = 64;
  int n_layers = 2;
  int n_heads = 4;
  int n_kv_heads = 2;
  int head_dim = 0;  // 0: dim / n_heads
  int ffn_dim = 128;
  int n_vocab = 320;
  int context = 256;
  float rope_base = 10000.0f;
  int sliding_window = 0;
  bool qkv_bias = false;
  bool qk_norm = false;
  bool tied_embeddings = false;
  float attn_softcap = 0;   // gemma2: written as {arch}.attn_logit_softcapping when > 0
  float final_softcap = 0;  // gemma2: {arch}.final_logit_softcapping
  // Mixture of experts (n_experts > 0): every layer's FFN is a router (F32, as llama.cpp keeps
  // it) over n_experts experts of expert_ffn_dim rows (0: ffn_dim) in 3-D tensors, n_experts_used
  // per token; shared_ffn_dim > 0 adds a gated shared expert (qwen2moe). expert_norm: written
  // as {arch}.expert_weights_norm (-1: not written, the family's default applies).
  int n_experts = 0;
  int n_experts_used = 0;
  int expert_ffn_dim = 0;
  int shared_ffn_dim = 0;
  int expert_norm = -1;
  // Tests with known routing: every expert is the FFN the dense model of the same spec would
  // draw, expert e's down projection times e + 1 (so each expert's share shows in the output),
  // and the router (drawn from its own generator, so the rest matches the dense model) times
  // router_scale (0: all logits equal, so the first k experts are chosen with equal weights).
  bool experts_from_dense = false;
  float router_scale = 1.0f;
  float ffn_down_scale = 1.0f;     // a dense model's down projection times this
  GgmlType type = GgmlType::kF32;  // type of the weight matrices
  // A mixture of experts' other matrices (attention, embeddings, output) in this type instead
  // of `type` (gpt-oss files: MXFP4 experts, the rest Q8_0); -1: `type` for all.
  int dense_type = -1;
  // RoPE scaling written to the metadata: "yarn" or "linear" with this factor (0: none) and,
  // for YaRN, the original context.
  std::string rope_scaling;
  float rope_scaling_factor = 0;
  int rope_orig_ctx = 0;
  // llama.cpp's Q4_K_M mix: `type` Q4_K, with output, and attn_v / ffn_down of the layers
  // llama.cpp gives more bits (first and last eighth, every third between), in Q6_K.
  bool q4_k_m = false;
  // llama.cpp's Q3_K_M mix (Q3_K; Q5_K for attn_v of the first 2 layers and ffn_down of the
  // first sixteenth, else Q4_K for attn_v, ffn_down and attn_output; output Q6_K) and its Q2_K
  // file mix (Q2_K; Q3_K for ffn_down and attn_output, attn_v Q3_K or Q4_K with 4+ query heads
  // per KV head; output Q6_K).
  bool q3_k_m = false;
  bool q2_k_m = false;
  uint64_t seed = 1;
  // > 0: only the first active_layers layers change the residual stream (the others have zero
  // attention-output and FFN-down weights: their full cost, no effect), and the output matrix
  // is drawn from its own generator, independent of the layer count. So a model with
  // n_layers = active_layers computes the same function at a fraction of the cost: a draft
  // for speculative decoding that agrees with its target by construction.
  int active_layers = 0;
  // Vocabulary: if empty, a synthetic SentencePiece-style one (specials, 256 byte tokens,
  // then made-up pieces) of n_vocab entries.
  std::vector<std::string> vocab;
  std::vector<float> scores;
  // The synthetic vocabulary ends with gpt-oss's harmony control tokens (<|start|>, <|end|>,
  // <|message|>, <|channel|>, <|constrain|>, <|return|>, <|call|>), so chat replies are parsed
  // by channel (the gpt-oss presets).
  bool harmony = false;
  // Control tokens written over the synthetic vocabulary's last entries (before harmony's):
  // the image markers of vision models (<start_of_image>, <fake_token_around_image>, ...).
  std::vector<std::string> control_tokens;
  // Gemma 4 (arch "gemma4"): every global_every-th layer global (the others windowed, heads
  // of head_dim_local with rope_dim_local rotated), the last shared_kv_layers layers reading
  // the KV of the last storing layer of their kind, per-layer inputs of per_layer_dim, the
  // global layers rotating rope_partial of their pairs (rope_freqs' factors), the sharing
  // layers' FFN twice as wide when double_wide (a per-layer array), V = K when !v_proj.
  int global_every = 0;
  int head_dim_local = 0;
  int rope_dim_local = 0;
  int shared_kv_layers = 0;
  int per_layer_dim = 0;
  float rope_partial = 0;
  float rope_base_local = 10000.0f;
  bool double_wide = false;
  bool v_proj = true;
  // Hybrid recurrent models (synth/synth_hybrid.cpp). Qwen3.5 ("qwen35", "qwen35moe"):
  // attention every attn_every-th layer, the others Gated DeltaNet layers of ssm_k_heads key
  // and ssm_v_heads value heads of ssm_state, a conv_kernel-wide convolution; the attention
  // rotating rope_dim dims (M-RoPE sections rope_sections). LFM2 ("lfm2"): attention on
  // attn_layers, short convolutions of conv_kernel elsewhere.
  int attn_every = 4;
  std::vector<int> attn_layers;
  int conv_kernel = 4;
  int ssm_state = 16;
  int ssm_k_heads = 2;
  int ssm_v_heads = 4;
  int rope_dim = 0;  // 0: the head size
  std::vector<int> rope_sections;
  // Qwen3.5: multi-token-prediction blocks after the layers (blk.{n_layers}.nextn.*: its
  // gated-attention layer, eh_proj, enorm, hnorm, shared_head_norm; the model's head).
  int nextn_layers = 0;
  // The token mixers' output projections (attention, convolution, DeltaNet) times this: small,
  // the model is nearly a function of the last token and greedy text soon repeats (tests of
  // speculation that get drafts accepted), while every layer's state still counts.
  float mixer_scale = 1.0f;
  // Encoders (arch "bert", "nomic-bert"; synth/synth_encoder.cpp): a WordPiece vocabulary
  // (synthetic, or copied from the GGUF file vocab_from), {arch}.pooling_type when >= 0
  // (llama.cpp's numbers: 1 mean, 2 cls, 4 rank), a reranker's classification head.
  int pooling = -1;
  bool rank_head = false;
  std::string vocab_from;
  std::string tokenizer = "bert";  // encoders: "bert" (WordPiece) or "t5" (Unigram, XLM-R)
  // Encoders: tokenizer.ggml.add_eos_token / add_sep_token written when >= 0 (how a reranker's
  // pairs are formed: [BOS] q [EOS] [SEP] d [EOS], each by its flag); -1: left out.
  int add_eos = -1, add_sep = -1;
};

// A vision projector (mmproj) in llama.cpp's layout (vision/clip.h) with random weights.
struct SynthVisionSpec {
  std::string projector = "mlp";  // mlp (LLaVA), gemma3, idefics3 (SmolVLM)
  int image_size = 32;
  int patch_size = 8;
  int dim = 32;
  int ffn_dim = 64;
  int n_layers = 2;
  int n_heads = 2;                 // head dim 16 at the tiny width (llama.cpp's peer mishandles 8)
  int merge = 2;                   // gemma3 pooling / idefics3 pixel shuffle
  int longest_edge = 0;            // idefics3 preproc_image_size (0: 2 x image_size)
  int mlp_hidden = 0;              // mlp: the projector's hidden width (0: the text dim)
  int text_dim = 64;               // the text model's dim
  GgmlType type = GgmlType::kF16;  // the encoder's matrices (patch embedding stays F16)
  uint64_t seed = 7;
};

// A vision-language preset: the text model and its projector. Names: "tiny-llava",
// "tiny-gemma3", "tiny-smolvlm" (tests) and the real shapes "llava-1.5-7b", "gemma3-4b",
// "smolvlm-256m". False for a name that is not one.
bool SynthVisionPreset(const std::string& name, SynthSpec* text, SynthVisionSpec* vision);
std::vector<std::string> SynthVisionPresetNames();
void WriteSyntheticMmproj(const SynthVisionSpec& spec, const std::string& path);

// Named shapes: "tiny" and "tiny-moe" (tests), "stories260k", "tinyllama" (1.1B), "llama2-7b",
// Gemma 4's "gemma4-e2b" (and "tiny-gemma4", "tiny-gemma4-moe" for tests),
// "qwen2-0.5b", "mistral-7b", and the mixtures of experts "olmoe-1b-7b", "qwen3-30b-a3b",
// "qwen1.5-moe-a2.7b", "mixtral-8x7b", "gpt-oss-20b" (and "tiny-gpt-oss" for tests); the
// encoders "bge-small", "bge-base", "nomic-embed", "bge-reranker" (and "tiny-bert",
// "tiny-nomic", "tiny-reranker" for tests). Throws
// Error for an unknown name.
SynthSpec SynthPreset(const std::string& name);

// An encoder's file (spec.arch "bert" or "nomic-bert"; BuildSyntheticModel calls it).
void BuildSyntheticEncoder(const SynthSpec& spec, GgufWriter* w);
// A hybrid recurrent model's metadata and tensors (spec.arch "qwen35", "qwen35moe", "lfm2";
// BuildSyntheticModel writes the vocabulary between them).
bool IsHybridArch(const std::string& arch);
// llama.cpp's Q4_K_M mix for a tensor of a model of n_layers: Q6_K for the output and for
// attn_v / ffn_down of the first and last eighth and every third layer between, else Q4_K.
GgmlType Q4KMixType(const std::string& name, int n_layers);
// The hybrid shapes (tiny-qwen35, tiny-qwen35moe, tiny-lfm2, qwen3.5-0.8b, lfm2-350m): false
// for another name; their names, comma-separated.
bool HybridPreset(const std::string& name, SynthSpec* s);
std::string HybridPresetNames();
void WriteHybridMetadata(const SynthSpec& spec, int head_dim, GgufWriter* w);
void WriteHybridTensors(const SynthSpec& spec, int head_dim, GgufWriter* w);

// Fills `w` with the model described by `spec`. Throws Error on impossible shapes.
void BuildSyntheticModel(const SynthSpec& spec, GgufWriter* w);
void WriteSyntheticModel(const SynthSpec& spec, const std::string& path);

// A LoRA adapter for the GGUF model at base_path, in llama.cpp's adapter layout (model/lora.h):
// F32 pairs of the given rank for every layer's q, k, v, o (and gate, up, down where the layer
// has a dense FFN), random, alpha = rank (so the product's scale is the user's). Throws Error.
void WriteSyntheticLora(const std::string& base_path, int rank, uint64_t seed,
                        const std::string& path);

}  // namespace paddock
