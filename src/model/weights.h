// model/weights.h: views of a model's weights, in place in the memory-mapped file, and the
// loader that produces them from GGUF or llama2.c files.
//
// Large matrices are never copied: a WeightTensor points into the mapping. Small vectors
// (norm weights, biases) are converted to float32 once, since kernels read them as floats.
// Every shape and type is checked here, so the forward pass can trust them.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "formats/ggml_types.h"
#include "model/config.h"
#include "model/layer_ops.h"
#include "model/tokenizer.h"

namespace paddock {

struct WeightTensor {
  GgmlType type = GgmlType::kF32;
  int64_t cols = 0;  // elements per row (GGUF ne[0])
  int64_t rows = 0;
  size_t row_bytes = 0;
  const uint8_t* data = nullptr;
  explicit operator bool() const { return data != nullptr; }
};

// One expert's FFN: rows of a 3-D expert tensor ([cols, rows, n_experts] in GGUF), each
// expert's slice a matrix of its own (re-laid at load like a dense one).
struct ExpertWeights {
  WeightTensor gate;              // (expert_ffn_dim, dim)
  WeightTensor up;                // (expert_ffn_dim, dim)
  WeightTensor down;              // (dim, expert_ffn_dim)
  const float* b_gate = nullptr;  // (expert_ffn_dim) biases (gpt-oss), else null
  const float* b_up = nullptr;    // (expert_ffn_dim)
  const float* b_down = nullptr;  // (dim)
};

// An encoder's layer keeps its post-norms in the norm slots: attn_norm is attn_output_norm
// (after attention), ffn_norm is layer_output_norm (after the FFN).
struct LayerWeights {
  const float* attn_norm = nullptr;  // (dim)
  WeightTensor wq;                   // (q_dim rows, dim cols)
  WeightTensor wk;                   // (kv_dim, dim)
  WeightTensor wv;                   // (kv_dim, dim)
  WeightTensor wo;                   // (dim, q_dim)
  const float* bq = nullptr;         // (q_dim) Qwen2 bias, else null
  const float* bk = nullptr;         // (kv_dim)
  const float* bv = nullptr;         // (kv_dim)
  const float* q_norm = nullptr;     // (head_dim) Qwen3 QK-norm, else null
  const float* k_norm = nullptr;     // (head_dim)
  const float* ffn_norm = nullptr;   // (dim)
  WeightTensor w_gate;               // (ffn_dim, dim)
  WeightTensor w_up;                 // (ffn_dim, dim)
  WeightTensor w_down;               // (dim, ffn_dim)
  // GPT-2: LayerNorm biases and the biases of the output and FFN projections, else null.
  const float* attn_norm_b = nullptr;
  const float* ffn_norm_b = nullptr;
  const float* bo = nullptr;              // (dim)
  const float* b_up = nullptr;            // (ffn_dim)
  const float* b_down = nullptr;          // (dim)
  const float* post_attn_norm = nullptr;  // (dim) Gemma 2, else null
  const float* post_ffn_norm = nullptr;   // (dim)
  // Mixture of experts (empty experts: a dense FFN). In a MoE layer w_gate / w_up / w_down,
  // when present, are the shared expert, scaled by sigmoid(shared_gate . x) when that is set.
  WeightTensor router;  // (n_experts, dim) ffn_gate_inp
  std::vector<ExpertWeights> experts;
  const float* shared_gate = nullptr;  // (dim) ffn_gate_inp_shexp (Qwen2 MoE)
  const float* router_b = nullptr;     // (n_experts) the router's bias (gpt-oss)
  const float* attn_sinks = nullptr;   // (n_heads) attention sink logits (gpt-oss)
  // Gemma 4: the layer's output scale (one value), its per-layer input's gate (per_layer_dim
  // rows of dim), projection (dim rows of per_layer_dim) and post-norm; a MoE layer's dense FFN
  // is w_gate / w_up / w_down beside the experts, with its own norms (pre_norm_2 before the
  // experts, post_norm_1 / post_norm_2 after each branch), the router's input scale (dim) and
  // each expert's output scale (n_experts).
  const float* out_scale = nullptr;
  WeightTensor pl_gate;
  WeightTensor pl_proj;
  const float* pl_post_norm = nullptr;
  const float* pre_norm_2 = nullptr;
  const float* post_norm_1 = nullptr;
  const float* post_norm_2 = nullptr;
  const float* router_scale = nullptr;
  const float* expert_scale = nullptr;
  // Qwen3.5's gated attention: the output gate's rows of the file's Q projection (which
  // interleaves each head's query and gate rows; the loader takes them apart into wq and this).
  WeightTensor wq_gate;  // (q_dim, dim)
  // A recurrent layer (ModelConfig::Kind). LFM2's short convolution: rec_in (3 dim rows: b, c,
  // x), conv (the taps: conv_kernel rows of dim, tap-major), rec_out (dim rows of dim). Qwen3.5's
  // Gated DeltaNet: rec_in (the q|k|v channels before the convolution), rec_gate (z, value-dim
  // rows), rec_beta and rec_alpha (a row per value head), conv (its taps, tap-major),
  // ssm_dt (the decay's bias) and ssm_a (-exp(A_log)) per value head, ssm_norm (a value head's
  // gated RMSNorm), rec_out (dim rows of value-dim).
  WeightTensor rec_in, rec_gate, rec_beta, rec_alpha, rec_out;
  const float* conv = nullptr;
  const float* ssm_dt = nullptr;
  const float* ssm_a = nullptr;
  const float* ssm_norm = nullptr;
};

// A multi-token-prediction block (Qwen3.5's blk.{n_layers}.nextn.*, llama.cpp's layout): the
// input row is eh_proj [enorm(embedding of token t) ; hnorm(hidden state before t)], then one
// attention layer, head_norm and the head; it predicts the token after t's successor.
// embed / head / head_norm unset: the model's own.
struct MtpWeights {
  LayerWeights layer;
  WeightTensor eh_proj;  // (dim rows of 2 dim)
  const float* enorm = nullptr;
  const float* hnorm = nullptr;
  const float* head_norm = nullptr;
  WeightTensor embed, head;
};

struct ModelWeights {
  WeightTensor tok_embd;                 // (n_vocab, dim)
  const float* output_norm = nullptr;    // (dim)
  const float* output_norm_b = nullptr;  // (dim) GPT-2
  WeightTensor pos_embd;                 // (context, dim) GPT-2 learned positions, else empty
  WeightTensor output;  // (n_vocab, dim); tied: tok_embd's rows (RelayoutWeights: its own copy)
  std::vector<LayerWeights> layers;
  std::vector<float> rope_freq_factors;  // (rope_dim / 2) Llama 3 "rope_freqs", or empty
  // Gemma 4's per-layer embeddings (config per_layer_dim > 0): the token-indexed table (n_vocab
  // rows of n_layers x per_layer_dim, read a row per token, never streamed), the projection of
  // the token's embedding onto it (n_layers x per_layer_dim rows of dim) and its norm.
  WeightTensor pl_tok_embd;
  WeightTensor pl_model_proj;
  const float* pl_proj_norm = nullptr;
  const float* ones = nullptr;  // (max head size) a weightless norm's weights (Gemma 4's V)
  // Phi-3 longrope: per-dimension factors for contexts past the original one and within it.
  std::vector<float> rope_factors_long, rope_factors_short;
  // Encoders (BERT, NomicBERT): the embeddings' LayerNorm, token type 0's row (added to every
  // token), and a reranker's classification head: score = out . tanh(cls x + cls_b) + out_b on
  // the first token's state (without `out`: tanh(...)'s first value). Else null.
  const float* embd_norm = nullptr;    // (dim)
  const float* embd_norm_b = nullptr;  // (dim)
  const float* type0 = nullptr;        // (dim)
  const float* cls = nullptr;          // (dim, dim) rows
  const float* cls_b = nullptr;        // (dim)
  const float* cls_out = nullptr;      // (dim)
  const float* cls_out_b = nullptr;    // (1)
  // The file's first multi-token-prediction block (config nextn_layers > 0), else empty.
  std::vector<MtpWeights> mtp;
};

struct TensorTypeCount {
  std::string type;
  int count = 0;
  uint64_t bytes = 0;
};

// A loaded model: configuration, weight views, vocabulary, and the mapping they point into.
struct LoadedModel {
  std::string path;
  std::string format;  // "gguf v3", "llama2.c"
  ModelConfig config;
  ModelWeights weights;
  std::unique_ptr<Tokenizer> tokenizer;
  std::string chat_template;  // GGUF tokenizer.chat_template (Jinja source), if any
  std::vector<TensorTypeCount> type_counts;
  int64_t n_params = 0;
  int64_t n_active_params = 0;       // read per token: n_params less the experts a token skips
  uint64_t active_weight_bytes = 0;  // likewise, in bytes
  uint64_t weight_bytes = 0;
  uint64_t nextn_bytes = 0;  // the multi-token-prediction layers' tensors (not in active_*)
  // Per layer, what it computes (model/layer_ops.h), resolved once at load; its views point
  // into `weights`, which stay where they are (re-layout changes a tensor's data in place).
  LayerOpList ops;

  std::shared_ptr<const void> storage;          // keeps the mapping alive
  std::vector<std::unique_ptr<float[]>> owned;  // float copies of small vectors
  struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
  };
  std::vector<std::unique_ptr<uint8_t, FreeDeleter>> relaid;  // weights re-laid-out at load
  uint64_t relaid_bytes = 0;
};

// Re-lays the quantized matrices out for the kernels, once: 16-row interleaved groups (Q4_0,
// Q8_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K -> their X16 layouts, ggml_types.h) where the rows
// allow, else for Q4_0 / Q8_0 each row's scales in front of its quants (Q4_0R / Q8_0R). The
// original pages are dropped from the mapping. Same values and size; a switch for measurement.
// huge_pages: the new buffers are 2 MiB aligned and marked for transparent huge pages
// (measured: steadier and faster decode of large models), and large Paddock-type matrices
// (already in the kernels' layout) are copied into such buffers too.
// progress(done, total): bytes of weight matrices gone through (for a progress bar), or null.
// range: the part of the model this process runs (a pipeline stage): only its layers' matrices
// (and the output head when it holds it) are re-laid, the others' pages never touched.
struct WeightRange {
  int begin = 0, end = -1;  // layers [begin, end); -1: to the last
  bool output = true;       // the output head
};
void RelayoutWeights(LoadedModel* model, bool huge_pages = true,
                     const std::function<void(double done, double total)>& progress = nullptr,
                     const WeightRange& range = {});
// The layers' F16 matrices as BF16 (copies; the file's pages dropped): an encoder's steps then
// run on the AVX-512 BF16 dot product (EngineOptions::encoder_bf16), each weight rounded to
// 8 significant bits.
void F16WeightsToBf16(LoadedModel* model);
// Bytes of layer l's matrices and vectors as stored (a pipeline's split by memory).
uint64_t LayerWeightBytes(const LoadedModel& model, int layer);
// Bytes of the token embeddings and of the output head (0 when tied to the embeddings).
uint64_t EmbeddingBytes(const LoadedModel& model);
uint64_t OutputHeadBytes(const LoadedModel& model);

// Loads `path` (GGUF or llama2.c, told apart by content). `tokenizer_path` (optional)
// overrides the vocabulary: a llama2.c tokenizer.bin or a GGUF holding a vocabulary. Throws
// Error with a one-line reason.
// populate: pre-fault the file's pages at load (false: a pipeline's process, which reads only
// its layers).
std::unique_ptr<LoadedModel> LoadModel(const std::string& path,
                                       const std::string& tokenizer_path = "",
                                       bool populate = true);

// Loads only a vocabulary (GGUF with tokenizer metadata, or tokenizer.bin).
std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& path);

}  // namespace paddock
