// base/cpu_portable.cpp: the instruction sets of an architecture Paddock has no SIMD kernels
// for yet (every 64-bit little-endian Linux): the scalar table. (cpu_x86.cpp on x86-64.)
#include "base/cpu.h"

namespace paddock {

Isa DetectIsa() {
  return Isa::kScalar;
}

bool CpuHasAvx512Bf16() {
  return false;
}

bool CpuHasAmxBf16() {
  return false;
}

}  // namespace paddock
