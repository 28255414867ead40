// kernels/kernels.h: the compute kernels and the one dispatch point that picks them.
//
// A KernelTable holds one function pointer per operation (and one GEMV per weight type). The
// scalar table is the reference: plain loops with double accumulation, the numerical ground
// truth. The AVX2 and AVX-512 tables come from the same kernel families (kernels/simd/*.cpp)
// compiled once per instruction set (dispatch.cpp installs them; AMX and BF16 add their own
// files). GetKernels() is the only place that chooses between them; an
// accelerator backend would add a table here without touching the model or the scheduler.
//
// Conventions: a weight matrix has `rows` rows of `cols` elements (GGUF ne[0] = cols), stored
// row-major in its GGML encoding; activations are float32.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/cpu.h"
#include "base/half.h"
#include "formats/ggml_types.h"
#include "kernels/kv_format.h"

namespace paddock {

// y[r] = dot(row r of w, x) for r in [0, rows). `row_bytes` is the stride between rows.
using GemvFn = void (*)(const void* w, size_t row_bytes, int64_t cols, int64_t rows, const float* x,
                        float* y);

// Activations quantized to int8 in blocks of 32 (kQK): the operand of the integer GEMV kernels.
// Per block: scale d (x ~= d * q) and d * sum(q) (for zero-point corrections).
// A block's quants are x / (amax / 127) rounded to nearest even; its d is that divisor rounded to
// fp16 (ActScale), as ggml's Q8_0 keeps it: the int8 kernels then compute what llama.cpp's do
// (measured: qwen35moe Q8_0 perplexity 0.655% from llama.cpp's with fp32 d, 0.06% with fp16).
// Outside fp16's normal range (|x| under 0.0078 or over 8.3e6 in a whole block) d stays fp32,
// where fp16 would lose digits or overflow.
inline float ActScale(float divisor) {
  constexpr float kMinNormal = 6.103515625e-05f, kMax = 65504.0f;
  return divisor >= kMinNormal && divisor <= kMax ? Fp16ToFp32(Fp32ToFp16(divisor)) : divisor;
}

struct ActQ8 {
  const int8_t* qs = nullptr;  // (n)
  const float* d = nullptr;    // (n / 32)
  const float* ds = nullptr;   // (n / 32) d * sum(q): the block sum, scaled
  // The same activations packed for a table's tile GEMMs (KernelTable::pack_act_token) once
  // per matmul input, or null: the GEMM then packs them per call.
  const int8_t* tiles = nullptr;
  const float* tile_s = nullptr;
  int tile_count = 0;  // whole 16-token tiles packed
  // The step's prompt tokens that take the bf16 tile GEMM where the weight's type has one
  // (Transformer::BatchItem::prompt_len): their activations as bf16 A tiles
  // (KernelTable::pack_bf16_token), slot s holding token bf_rows[s]; bf_tok[t] != 0 for those
  // tokens. The int8 fields above hold every token, for the types without that GEMM.
  const uint16_t* bf = nullptr;
  const int32_t* bf_rows = nullptr;
  const uint8_t* bf_tok = nullptr;
  int bf_count = 0;
  int int8_lead = 0;  // the other tokens are exactly the first int8_lead (when they all lead)

  // Token t of a batch whose tokens have `cols` elements each (without the packed tiles).
  ActQ8 Token(int64_t t, int64_t cols) const {
    ActQ8 a;
    a.qs = qs + t * cols;
    a.d = d + t * (cols / 32);
    a.ds = ds + t * (cols / 32);
    return a;
  }
};

// ActQ8's packed tiles: per 16-token tile and block, the activation bytes and the scale terms
// (the 16 tokens' d, ds, -8 ds and -128 ds: the zero-point terms of the kinds, computed once).
constexpr int kActTileTokens = 16;
constexpr size_t kActTileBytes = 16 * 32;
constexpr size_t kActTileFloats = 64;
// The integer tile GEMM takes calls of at least this many tokens; fewer (a batched-decode step
// of 16 sequences) run on the AVX-512 GEMM, bit-identical. With one 16-token tile the tile path
// pays each weight group's unpacking and its accumulators' round trip through memory for 16
// tokens only: TinyLlama Q4_0 decoding 16 sequences ran 1.16-1.29x faster on AVX-512 than on
// the tiles (Q8_0 1.02-1.18x, Q4_K_M 1.12-1.14x), 32 sequences 1.06-1.10x slower
// (`paddock bench -b 16|32 --isa amx|avx512`, alternating).
constexpr int kTileGemmMinTokens = 32;

// Several tokens with float activations: y[t * ldy + r] = dot(row r of w, x + t * cols).
using GemmFn = void (*)(const void* w, size_t row_bytes, int64_t cols, int64_t rows, const float* x,
                        int n_tok, float* y, int64_t ldy);

// Like GemvFn, with the activation vector quantized (cols a multiple of 32).
using GemvQ8Fn = void (*)(const void* w, size_t row_bytes, int64_t cols, int64_t rows,
                          const ActQ8& x, float* y);

// Several tokens at once: y[t * ldy + r] = dot(row r of w, token t of x) for t < n_tok, with
// token t's activations at x.qs + t * cols, x.d / x.ds + t * cols / 32.
using GemmQ8Fn = void (*)(const void* w, size_t row_bytes, int64_t cols, int64_t rows,
                          const ActQ8& x, int n_tok, float* y, int64_t ldy);

// The prefill GEMM on bf16 tiles (KernelTable::gemm_bf16_tiles): y[row(s) * ldy + r] = dot(row r
// of w, activation slot s) for s < n_tok, row(s) = out_rows[s] (null: s). The activations are
// bf16 A tiles packed by KernelTable::pack_bf16_token: per 16-slot tile and 32-element block,
// 16 x 32 bf16 at xa + (tile * cols / 32 + block) * kBf16TileElems; the last tile's unused slots
// may hold anything (their sums are never stored).
using GemmBf16TilesFn = void (*)(const void* w, size_t row_bytes, int64_t cols, int64_t rows,
                                 const uint16_t* xa, int n_tok, const int32_t* out_rows, float* y,
                                 int64_t ldy);
constexpr size_t kBf16TileElems = 16 * 32;

// One layer's K (or V) rows as the attention kernel walks them: position t lives in slot
// table[t / block_size] * block_size + t % block_size, `row_bytes` apart, encoded as `type`.
struct KvRowsRef {
  const uint8_t* base = nullptr;
  size_t row_bytes = 0;
  const int32_t* table = nullptr;
  int block_size = 1;
  KvDtype type = KvDtype::kF32;
  const uint8_t* Row(int t) const {
    return base + (static_cast<size_t>(table[t / block_size]) * static_cast<size_t>(block_size) +
                   static_cast<size_t>(t % block_size)) *
                      row_bytes;
  }
};

// Fused attention of query rows that share KV head g (a GQA group's heads, of one or several
// tokens of one sequence): row r's query q_rows[r] (hd floats) attends to positions
// [lo[r], hi[r]) with an online, max-subtracted softmax over tiles of kAttnTile positions; each
// K and V row is read and decoded once per tile for all rows, and the rows are the SIMD lanes.
// out_rows[r]: the normalized result (zeros if the row sees nothing). With `ml` (2 * n_rows
// floats) the result is left unnormalized and ml[2r], ml[2r + 1] receive the row's running max
// and sum, so partial results over disjoint position ranges can be merged (split-K decode).
// scratch: AttendScratchFloats(hd) floats. Any n_rows; the kernel takes up to kAttnMaxRows at a
// time.
constexpr int kAttnTile = 32;
constexpr int kAttnMaxRows = 256;
inline size_t AttendScratchFloats(int hd) {
  return static_cast<size_t>(hd) * (2 * kAttnMaxRows + 2 * kAttnTile) + kAttnTile * kAttnMaxRows +
         64;
}
using AttendRowsFn = void (*)(const float* const* q_rows, float* const* out_rows, int n_rows,
                              const int* lo, const int* hi, const KvRowsRef& k, const KvRowsRef& v,
                              int g, int n_kv, int hd, float scale, float softcap, float* scratch,
                              float* ml);
// Merges `parts` partial results of one row (unnormalized out + (max, sum) each) into `out`.
// sink: an attention sink's logit (a position with no value, gpt-oss), or -1e30f for none.
inline void MergeAttention(const float* const* outs, const float* const* mls, int parts, int hd,
                           float* out, float sink = -1e30f) {
  float m = sink;
  for (int p = 0; p < parts; ++p) m = mls[p][0] > m ? mls[p][0] : m;
  float l = sink > -1e30f ? __builtin_expf(sink - m) : 0.0f;
  for (int d = 0; d < hd; ++d) out[d] = 0;
  for (int p = 0; p < parts; ++p) {
    if (mls[p][1] <= 0) continue;
    const float c = __builtin_expf(mls[p][0] - m);
    l += c * mls[p][1];
    for (int d = 0; d < hd; ++d) out[d] += c * outs[p][d];
  }
  const float inv = l > 0 ? 1.0f / l : 0.0f;
  for (int d = 0; d < hd; ++d) out[d] *= inv;
}

// Software prefetch of the weight stream in the interleaved kernels, kWeightPrefetchBytes
// ahead. kAuto (the default): in the kinds where it was measured to help (see
// PrefetchesByDefault; `paddock bench --kernels` measures every kind with and without, `paddock
// tune` chooses per machine); kAll: every interleaved kind; kOff. Chosen when a table is built
// (GetKernels): each mode has its own table, so the kernels test it at compile time and no
// global state is read.
constexpr size_t kWeightPrefetchBytes = 4096;
enum class Prefetch : int { kOff = 0, kAuto = 1, kAll = 2 };
// The interleaved kinds that prefetch under kAuto in a table of `isa`: every kind. On an Intel
// Xeon (AVX-512) every layout streams faster with it (Q4_0X16 one core 9.3-9.8 GB/s against
// 7.9-8.1; TinyLlama Q4_0 decodes 1.12x faster on 2 threads). On an AMD EPYC (Zen 2, AVX2) only
// the k-quant and lookup kinds gained while the AVX2 GEMV computed each 8-row half of a group
// in its own pass; since it alternates the halves by chunks (gemm_x16.cpp) every kind gains
// (one core, Q4_0X16 13.2-14.3 against 10.8-11.0 GB/s; TinyLlama Q4_0 decode on 2 threads at
// 85-89% of the measured bandwidth against 74-78% without it for Q4_0).
constexpr bool PrefetchesByDefault(X16Kind, Isa) {
  return true;
}

struct KernelTable {
  Isa isa;
  Prefetch prefetch;  // the interleaved kernels' weight prefetch (see below)
  // Rows of a weight type are given to threads in multiples of this (16 for the interleaved
  // layouts, whose kernels advance 16 rows at once; else 1).
  int32_t row_unit[kGgmlTypeCount];
  GemvFn gemv[kGgmlTypeCount];  // null where the type is not computable
  // Float-activation GEMM (F32, F16, BF16 weights): register tiles of rows x tokens; the GEMV
  // of the same type gives bit-identical results for a token alone. Null where none.
  GemmFn gemm[kGgmlTypeCount];
  // BF16 weights times activations rounded to bf16 (round to nearest even), products exact,
  // sums in fp32: AVX-512 BF16 `vdpbf16ps`, 32 products per instruction. Any n_tok (1: the
  // GEMV, bit-identical to a token in a batch). The scalar table has the reference; null on
  // CPUs without the instruction.
  GemmFn gemm_bf16_dot;
  // Integer-dot GEMV (int8 activations); null where a type has no integer path.
  GemvQ8Fn gemv_q8[kGgmlTypeCount];
  // Integer GEMM (prefill, batched decode): register tiles of rows x tokens; null where none.
  GemmQ8Fn gemm_q8[kGgmlTypeCount];
  // Packs token `token` of x (cols per token) into its place as the tile GEMMs read their
  // activations: per 16-token tile and 32-element block, 16 x 32 activation bytes at tiles +
  // (tile * cols / 32 + block) * kActTileBytes and kActTileFloats scale terms at tile_s + the
  // same index * kActTileFloats. Null where the table has no tile GEMM (all but amx).
  void (*pack_act_token)(const ActQ8& x, int64_t cols, int token, int8_t* tiles, float* tile_s);
  // Prefill on AMX-BF16 tiles, per interleaved type with an AMX kind (null elsewhere, and on
  // every table but amx where the CPU has AMX-BF16): each 16-row group's weights dequantized
  // once per call to bf16 (w = scale * q + min in fp32, rounded to nearest even), activations
  // rounded to bf16, sums in fp32 over the whole row in block order: no per-block epilogue,
  // which is what caps the int8 tile GEMM. Not bit-identical to the integer GEMV: the model
  // takes it for the prompt tokens of long prompts only (Transformer::BatchItem::prefill), so
  // a token's result still never depends on its batch-mates. Reference: RefGemmBf16Tiles.
  GemmBf16TilesFn gemm_bf16_tiles[kGgmlTypeCount];
  // Rounds token x (cols floats) to bf16 into activation slot `slot` of the A tiles.
  void (*pack_bf16_token)(const float* x, int64_t cols, int slot, uint16_t* tiles);
  // Quantizes n floats (a multiple of 32) to int8 blocks: d = amax / 127, q = round(x / d).
  // Every table produces identical bytes.
  void (*quantize_act)(const float* x, int64_t n, int8_t* qs, float* d, float* ds);
  // Runs `iters` iterations of independent int8 dot-product instructions and returns the
  // number of int8 operations (multiply + add = 2) performed: the machine's integer peak,
  // for benchmarks. Null on the scalar table.
  int64_t (*int8_peak_probe)(int64_t iters);
  // The same for the tile GEMMs' products (AMX: tdpbsud on 16 x 16 x 32 tiles, the k of one
  // quant block, as the GEMM issues them); null where the table has none.
  int64_t (*tile_peak_probe)(int64_t iters);
  float (*dot)(const float* a, const float* b, int64_t n);
  // out = x / rms(x) * w  (w may alias nothing; out may alias x)
  void (*rmsnorm)(float* out, const float* x, const float* w, int64_t n, float eps);
  // LayerNorm: (x - mean) / sqrt(var + eps) * w + b (b may be null). out may equal x.
  void (*layernorm)(float* out, const float* x, const float* w, const float* b, int64_t n,
                    float eps);
  // x = softmax(x), max-subtracted
  void (*softmax)(float* x, int64_t n);
  // g = silu(g) * u
  void (*silu_mul)(float* g, const float* u, int64_t n);
  // g = gelu(g) * u with GELU in its tanh form (GeGLU: Gemma; u == nullptr: plain GELU, GPT-2).
  void (*gelu_mul)(float* g, const float* u, int64_t n);
  // x = cap * tanh(x / cap): the final logit soft-cap (Gemma 2-4), over a vocabulary's row.
  void (*softcap)(float* x, int64_t n, float cap);
  // y += x
  void (*add)(float* y, const float* x, int64_t n);
  // y += a * x
  void (*axpy)(float* y, float a, const float* x, int64_t n);
  // One token of the gated delta rule (Qwen3.5's Gated DeltaNet) on one head's state m of
  // d x d floats, row j holding value dim j's weights over the key dims (m[j][i] = S[i][j]):
  // m *= decay; delta = (v - m k) * beta; m += delta k^T; out = m q * scale.
  void (*delta_step)(float* m, const float* q, const float* k, const float* v, float decay,
                     float beta, float scale, float* out, int d);
  // One token of a causal convolution over ch channels: y[c] = sum_k in[k][c] * taps[k][c]
  // for the K rows in[0..K) (oldest first: the window, then the token's own input), taps tap-
  // major (K rows ld_taps apart); silu(y) when asked.
  void (*conv_token)(float* y, const float* const* in, const float* taps, int64_t ld_taps, int K,
                     int64_t ch, bool silu);
  // The same for a chunk of n <= kDeltaChunk tokens at once (the chunked, parallel form: the
  // within-chunk triangular system solved, the state read and written once per chunk): q and
  // k rows ld_qk floats apart, v rows ld_v apart, out rows ld_o apart; g the tokens' log
  // decays (decay = exp(g)), beta theirs; scratch DeltaChunkScratch(d) floats.
  void (*delta_chunk)(float* m, const float* q, const float* k, int ld_qk, const float* v, int ld_v,
                      const float* g, const float* beta, float scale, float* out, int ld_o, int n,
                      int d, float* scratch);
  // LoRA's two halves (model/lora.h) for n rows sharing one adapter pair. Down: t[j][r] =
  // s * dot(a[r], x[j]) for r < rank (a: rank x in; x rows `in` apart; t rows t_stride apart).
  // Up, one row: y[o] += sum_r t[r] * bt[r][o] for o in [o0, o1) (bt: rank x out), y read and
  // written once.
  void (*lora_down)(const float* a, int rank, int64_t in, float s, const float* x, int n, float* t,
                    int t_stride);
  void (*lora_up)(const float* bt, int rank, int64_t out, const float* t, float* y, int64_t o0,
                  int64_t o1);
  // Rotates the first rope_dim dims of each of n_heads heads (stride head_dim) by the angles
  // whose cos/sin are given per pair (rope_dim / 2 entries). half_split: pairs (i, i+rope_dim/2)
  // (NeoX style); otherwise adjacent pairs (2i, 2i+1) (GGUF llama, llama2.c).
  void (*rope)(float* x, int n_heads, int head_dim, int rope_dim, const float* cos,
               const float* sin, bool half_split);

  // KV cache rows (encodings in kv_format.h), indexed by KvDtype. `head` selects the
  // head_dim-long segment of a row of n_heads heads.
  // Encodes a whole row (n_heads * head_dim floats). Shared scalar code on every ISA, so the
  // bytes written do not depend on the ISA.
  void (*kv_store[kKvDtypeCount])(uint8_t* row, const float* src, int n_heads, int head_dim);
  // dot(q, head `head` of row)
  float (*kv_dot[kKvDtypeCount])(const float* q, const uint8_t* row, int head, int n_heads,
                                 int head_dim);
  // y += a * head `head` of row
  void (*kv_axpy[kKvDtypeCount])(float* y, float a, const uint8_t* row, int head, int n_heads,
                                 int head_dim);
  AttendRowsFn attend_rows;
};

// The gated delta rule's chunk (KernelTable::delta_chunk): tokens at most, and the scratch
// floats it needs for heads of d.
constexpr int kDeltaChunk = 64;
inline size_t DeltaChunkScratch(int d) {
  return 2 * kDeltaChunk * kDeltaChunk + 2 * kDeltaChunk * static_cast<size_t>(d) +
         2 * kDeltaChunk + static_cast<size_t>(d) * d + 64;
}

// The table for `isa` (which the CPU must support), with the given weight prefetch.
const KernelTable& GetKernels(Isa isa, Prefetch prefetch = Prefetch::kAuto);
// The reference of gemm_bf16_tiles, with float activations x (n_tok x cols): each element of
// an interleaved `type` (X16Element) and of x rounded to bf16, products summed in double.
void RefGemmBf16Tiles(GgmlType type, const void* w, size_t row_bytes, int64_t cols, int64_t rows,
                      const float* x, int n_tok, float* y, int64_t ldy);

// The reference table.
inline const KernelTable& ReferenceKernels() {
  return GetKernels(Isa::kScalar);
}

}  // namespace paddock
