// kernels/tables.h: internal constructors of the per-ISA tables (used by dispatch.cpp only).
#pragma once

#include "kernels/kernels.h"

namespace paddock {
KernelTable MakeScalarTable();
// What every table shares: the row unit of each weight type, and a GEMV for every readable
// type (dispatch.cpp).
KernelTable FinishTable(KernelTable k);
// The architecture's table for a SIMD ISA (dispatch_x86.cpp, dispatch_arm.cpp,
// dispatch_portable.cpp), built on
// first use; null for the scalar ISA or an ISA this architecture has no kernels for.
const KernelTable* SimdKernels(Isa isa, Prefetch prefetch);
// Every type with a dequantizer (TypeTraits::to_float) and no GEMV of its own gets the
// reference one (dequantize a chunk, double-accumulated dot): a new weight type runs on every
// table as soon as it can be read; fast kernels are additions.
void SetGenericGemv(KernelTable* t);
// Fills the kv_store entries (shared by every table).
void SetKvStoreKernels(KernelTable* t);
namespace avx2 {
KernelTable MakeTable(Prefetch prefetch);
}
namespace avx512 {
KernelTable MakeTable(Prefetch prefetch);
}
namespace amx {
// AMX tiles (kernels/simd/gemm_amx.cpp): over `t`, the AVX-512 table of the same prefetch
// mode, replaces the integer GEMMs of the kinds it has, keeping `t`'s for the tokens short of
// a whole 16-token tile.
void SetAmxKernels(KernelTable* t, Prefetch prefetch);
// The prefill GEMM on AMX-BF16 tiles (gemm_bf16_tiles, pack_bf16_token): only where the CPU has
// AMX-BF16 and AVX-512 BF16.
void SetAmxBf16Kernels(KernelTable* t);
}  // namespace amx
// AArch64: the NEON table (ARMv8.0), and the integer families of the dot-product and int8
// matrix-multiply levels (kernels/simd/gemm_int8_neon.cpp, gemm_x16.cpp) laid over it.
namespace neon {
KernelTable MakeTable(Prefetch prefetch);
}
namespace dotprod {
void SetInt8Kernels(KernelTable* t);
void SetX16Kernels(KernelTable* t, Prefetch prefetch);
}  // namespace dotprod
namespace i8mm {
void SetInt8Kernels(KernelTable* t);
void SetX16Kernels(KernelTable* t, Prefetch prefetch);
}  // namespace i8mm
namespace neonbf16 {  // AArch64 FEAT_BF16 (kernels/bf16_neon.cpp)
void GemmBf16Dot(const void* w, size_t rb, int64_t cols, int64_t rows, const float* x, int n_tok,
                 float* y, int64_t ldy);
}
namespace avx512bf16 {
void GemmBf16Dot(const void* w, size_t rb, int64_t cols, int64_t rows, const float* x, int n_tok,
                 float* y, int64_t ldy);
}
}  // namespace paddock
