// cpu/activations.h: the float activations of a forward step, as named slices of one arena.
//
// Planned once (Plan) for the largest step a Transformer takes: B tokens, T threads, the
// logits rows of its items and, for a mixture of experts, R = B * n_experts_used gathered
// rows. Each slice is 64-byte aligned and zeroed at planning; nothing allocates afterwards.
// Shapes are the slices' row-major extents.
#pragma once

#include <cstddef>
#include <memory>

namespace paddock {

struct ModelConfig;

struct ActivationShape {
  size_t tokens = 1;    // B: the most tokens a step holds
  size_t threads = 1;   // T: the thread pool's size (per-thread scratch)
  size_t items = 1;     // logits rows (one per batch item)
  size_t ctx = 1;       // the context length (attention scores per thread)
  size_t moe_rows = 0;  // R: gathered (token, expert) rows
};

struct Activations {
  float* x = nullptr;   // (B, dim) residual stream
  float* xb = nullptr;  // (B, dim) normed input / projection output
  // Q, K, V and attention rows are the running layer's width (LayerOp::q_dim, kv_dim); the
  // buffers the widest layer's (max_q_dim, max_kv_dim).
  float* q = nullptr;             // (B, q_dim)
  float* kv_k = nullptr;          // (B, kv_dim)
  float* kv_v = nullptr;          // (B, kv_dim)
  float* att = nullptr;           // (B, q_dim) attention output
  float* hb = nullptr;            // (max(B * ffn_dim, R * expert_ffn_dim)) FFN hidden
  float* hb2 = nullptr;           // (same) FFN hidden, second projection
  float* logits = nullptr;        // (items, n_vocab) last-token logits of each batch item
  float* cos = nullptr;           // (B, rope_dim / 2)
  float* sin = nullptr;           // (B, rope_dim / 2)
  float* cos_local = nullptr;     // (B, local rope dims / 2) local layers' (rope_base_local > 0)
  float* sin_local = nullptr;     // (B, local rope dims / 2)
  float* scores = nullptr;        // (T, max(ctx, 2 * n_heads)) attention scores
  float* qrot = nullptr;          // (T, q_dim) rotated queries for Hadamard-rotated KV
  float* attn_scratch = nullptr;  // (T, AttendScratchFloats + kAttnMaxRows * head_dim)
  float* attn_part = nullptr;     // (2T, kAttnMaxRows * (head_dim + 2)) partial attention
  float* moe_logits = nullptr;    // (B, n_experts) router logits
  float* moe_x = nullptr;         // (R, dim) gathered float inputs (experts without int8 kernels)
  float* moe_out = nullptr;       // (R, dim) expert outputs, unweighted
  float* moe_shared = nullptr;    // (B, dim) the shared expert's (or dense branch's) output
  float* ple = nullptr;           // (B, n_layers * per_layer_dim) each token's per-layer inputs
  float* ple_row = nullptr;       // (n_layers * per_layer_dim) a table row, as floats
  float* gate = nullptr;          // (B, q_dim) the attention output gate (Qwen3.5)
  // Recurrent layers: the input projection (LFM2 b|c|x, 3 dim; DeltaNet q|k|v before the
  // convolution), the convolved channels, the DeltaNet's z gate (value dim), its beta and
  // decay per value head (2 x v heads), the mixer's output rows (value dim, LFM2 dim).
  float* rec_in = nullptr;
  float* rec_conv = nullptr;
  float* rec_z = nullptr;
  float* rec_ba = nullptr;
  float* rec_y = nullptr;
  float* rec_scratch = nullptr;  // (T, the chunked delta rule's scratch + 2 x 64) per thread

  // Lays out every slice for `cfg` at `shape`; returns the arena's bytes.
  size_t Plan(const ModelConfig& cfg, const ActivationShape& shape);

 private:
  std::unique_ptr<float[]> arena_;
};

}  // namespace paddock
