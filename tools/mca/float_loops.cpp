// tools/mca/float_loops.cpp: the float GEMV's hot loop (F16 weights, one token) as a plain
// function, for scripts/arm-mca; gemm_float.cpp included whole (see x16_loops.cpp). Not part of
// any build.
#include "kernels/simd/gemm_float.cpp"

namespace paddock::PADDOCK_ISA_NS {

extern "C" __attribute__((noinline)) void mca_f16_gemv(const uint8_t* w, size_t rb, int64_t cols,
                                                       const float* x, float* y) {
  FloatTile<GgmlType::kF16, kFloatRows, 1>(w, rb, cols, x, y, 1);
}

}  // namespace paddock::PADDOCK_ISA_NS
