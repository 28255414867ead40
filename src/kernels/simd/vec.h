// kernels/simd/vec.h: the vector type the kernel families are written against (VecF, VecI,
// VecM and a few integer helpers), one header per instruction set (AVX2, AVX-512, NEON). This is
// the only `#if` that picks an ISA: every family file is compiled once per ISA with that ISA's
// flags.
#pragma once

#if defined(__aarch64__)
#include "kernels/simd/vec_neon.h"
#elif defined(__AVX512F__)
#include "kernels/simd/vec_avx512.h"
#else
#include "kernels/simd/vec_avx2.h"
#endif
