// model/config.h: the architecture of a decoder-only Transformer, as data.
//
// One struct describes Llama 2/3, TinyLlama, Mistral, Qwen2 and Qwen3: the differences are
// fields (GQA head counts, RoPE layout and base, biases, QK-norm, sliding window), not code
// paths per model. Filled from GGUF metadata or a llama2.c header, then validated once.
#pragma once

#include <cstdint>
#include <string>

namespace paddock {

class GgufFile;
struct Llama2cConfig;

enum class RopeStyle {
  kAdjacentPairs,  // rotate (x[2i], x[2i+1]): GGUF "llama" layout and llama2.c
  kHalfSplit,      // rotate (x[i], x[i + d/2]): NeoX layout (Qwen2, Qwen3)
};

struct ModelConfig {
  std::string arch;          // general.architecture ("llama", "mistral", "qwen2", "qwen3")
  std::string name;          // general.name, if any
  int n_vocab = 0;
  int dim = 0;               // residual stream width
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;        // < n_heads: grouped-query attention; 1: multi-query
  int head_dim = 0;
  int ffn_dim = 0;
  int context_length = 0;    // trained context
  float norm_eps = 1e-5f;
  float rope_base = 10000.0f;
  int rope_dim = 0;          // rotated dims per head (<= head_dim)
  RopeStyle rope_style = RopeStyle::kAdjacentPairs;
  std::string rope_scaling = "none";  // "none", "linear", "yarn", "llama3" (recorded)
  float rope_scaling_factor = 1.0f;
  int sliding_window = 0;    // 0: full attention
  bool qkv_bias = false;     // Qwen2
  bool qk_norm = false;      // Qwen3
  bool tied_embeddings = false;

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }

  // Throws Error if the numbers cannot describe a working model.
  void Validate() const;
};

// Reads the config from GGUF metadata (`{arch}.*` keys). n_vocab is left 0 when the file
// does not record it; the loader fills it from the embedding table.
ModelConfig ConfigFromGguf(const GgufFile& gguf);
ModelConfig ConfigFromLlama2c(const Llama2cConfig& c);

}  // namespace paddock
