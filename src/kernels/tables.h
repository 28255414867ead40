// kernels/tables.h: internal constructors of the per-ISA tables (used by dispatch.cpp only).
#pragma once

#include "kernels/kernels.h"

namespace paddock {
KernelTable MakeScalarTable();
// Every type with a dequantizer (TypeTraits::to_float) and no GEMV of its own gets the
// reference one (dequantize a chunk, double-accumulated dot): a new weight type runs on every
// table as soon as it can be read; fast kernels are additions.
void SetGenericGemv(KernelTable* t);
// Fills the kv_store entries (shared by every table).
void SetKvStoreKernels(KernelTable* t);
// The tiled attention's score products (S^T = K Q^T) on a tile unit, behind the SIMD kernel
// (kernels/simd/attention.cpp), which keeps the softmax and the value sums. `begin` takes a run's
// scaled queries ([groups][hd][16] floats, rows as lanes) and answers whether the unit takes
// this head size; `scores` writes the scores of positions [0, nt) of a decoded K tile (kr: nt x
// hd floats) to pt ([kAttnTile][groups][16] floats, the SIMD kernel's layout); `end` frees the
// unit after the run.
struct AttnScoreTiles {
  bool (*begin)(const float* qt, int groups, int hd);
  void (*scores)(const float* kr, int nt, int hd, int groups, float* pt);
  void (*end)();
};
namespace avx2 {
KernelTable MakeTable(Prefetch prefetch);
}
namespace avx512 {
KernelTable MakeTable(Prefetch prefetch);
// The table's attend_rows with its scores on `tiles` (null: on the vector unit).
void AttendRowsWithTiles(const AttnScoreTiles* tiles, const float* const* q_rows,
                         float* const* out_rows, int n_rows, const int* lo, const int* hi,
                         const KvRowsRef& k, const KvRowsRef& v, int g, int n_kv, int hd,
                         float scale, float softcap, float* scratch, float* ml);
}  // namespace avx512
namespace amx {
// AMX tiles (kernels/simd/gemm_amx.cpp): over `t`, the AVX-512 table of the same prefetch
// mode, replaces the integer GEMMs of the kinds it has, keeping `t`'s for the tokens short of
// a whole 16-token tile, and puts attention's scores on BF16 tiles.
void SetAmxKernels(KernelTable* t, Prefetch prefetch);
// attend_rows with its scores on BF16 tiles (kernels/simd/attention_amx.cpp).
void SetAmxAttention(KernelTable* t);
}  // namespace amx
namespace avx512bf16 {
void GemmBf16Dot(const void* w, size_t rb, int64_t cols, int64_t rows, const float* x, int n_tok,
                 float* y, int64_t ldy);
}
}  // namespace paddock
