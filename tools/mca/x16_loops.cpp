// tools/mca/x16_loops.cpp: the interleaved integer kernels' hot loops as plain functions, for
// scripts/arm-mca (llvm-mca on their assembly). gemm_x16.cpp is included whole and compiled by
// that script alone, once per AArch64 level with the flags CMake gives it; each entry is one
// register tile with its token count fixed, so its loops are that tile's and nothing else's.
// Not part of any build.
#include "kernels/simd/gemm_x16.cpp"

namespace paddock::PADDOCK_ISA_NS {

#define PADDOCK_MCA_TILE(name, kind, tokens)                                                       \
  extern "C" __attribute__((noinline)) void name(const uint8_t* g, int64_t cols, const int8_t* xq, \
                                                 const float* xd, const float* xds, float* y) {    \
    X16Tile<X16Kind::kind, 32, tokens, true>(g, cols, xq, xd, xds, y, 16);                         \
  }
PADDOCK_MCA_TILE(mca_q4_0_decode, kQ4S, 1)  // Q4_0 re-laid (Q4_0X16): one token, the GEMV
PADDOCK_MCA_TILE(mca_q8_0_decode, kQ8B, 1)  // Q8_0 re-laid (Q8_0X16)
PADDOCK_MCA_TILE(mca_q4_0_prefill4, kQ4S, 4)
#if defined(__ARM_FEATURE_MATMUL_INT8)
PADDOCK_MCA_TILE(mca_q4_0_prefill8, kQ4S, 8)  // the SMMLA tile
#endif

}  // namespace paddock::PADDOCK_ISA_NS
