// model/synth.h: synthetic models with random weights at real shapes, written as GGUF with the
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
  float attn_softcap = 0;          // gemma2: written as {arch}.attn_logit_softcapping when > 0
  float final_softcap = 0;         // gemma2: {arch}.final_logit_softcapping
  GgmlType type = GgmlType::kF32;  // type of the 2-D weight matrices
  // llama.cpp's Q4_K_M mix: `type` Q4_K, with output, and attn_v / ffn_down of the layers
  // llama.cpp gives more bits (first and last eighth, every third between), in Q6_K.
  bool q4_k_m = false;
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
};

// Named shapes: "tiny" (tests), "stories260k", "tinyllama" (1.1B), "llama2-7b",
// "qwen2-0.5b", "mistral-7b". Throws Error for an unknown name.
SynthSpec SynthPreset(const std::string& name);

// Fills `w` with the model described by `spec`. Throws Error on impossible shapes.
void BuildSyntheticModel(const SynthSpec& spec, GgufWriter* w);
void WriteSyntheticModel(const SynthSpec& spec, const std::string& path);

}  // namespace paddock
