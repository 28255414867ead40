// formats/llama2c.h: llama2.c checkpoints (legacy v0 `.bin`) and `tokenizer.bin` vocabularies.
//
// The checkpoint's float32 weights are exposed as tensor views under GGUF tensor names, so the
// model layer sees one naming scheme whatever the file format. The trailing RoPE tables are
// ignored (RoPE is computed); a positive vocab size in the header means the classifier is the
// embedding table. Newer llama2.c export versions (magic "ak42") are rejected by name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace paddock {

class MappedFile;

struct Llama2cConfig {
  int dim = 0, hidden_dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, vocab_size = 0,
      seq_len = 0;
  bool shared_classifier = true;
};

struct Llama2cTensor {
  std::string name;        // GGUF-style name, e.g. "blk.0.attn_q.weight"
  int64_t ne[2] = {1, 1};  // ne[0] = row length
  const float* data = nullptr;
};

struct Llama2cCheckpoint {
  Llama2cConfig config;
  std::vector<Llama2cTensor> tensors;
  std::shared_ptr<const MappedFile> file;
};

// Throws Error naming the problem (bad header values, truncated file, ...).
Llama2cCheckpoint OpenLlama2c(const std::string& path, bool populate = true);
// Same, over a buffer the caller keeps alive.
Llama2cCheckpoint ParseLlama2c(const uint8_t* data, size_t size);

struct Llama2cVocab {
  int max_token_length = 0;
  std::vector<std::string> pieces;
  std::vector<float> scores;
};

// Reads every entry of a llama2.c tokenizer file (until the end of the file).
Llama2cVocab ReadLlama2cTokenizer(const std::string& path);
Llama2cVocab ParseLlama2cTokenizer(const uint8_t* data, size_t size);

}  // namespace paddock
