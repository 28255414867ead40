// base/cpu_portable.cpp: the instruction sets of an architecture Paddock has no SIMD kernels
// for (every 64-bit little-endian Linux): the scalar table. (cpu_x86.cpp on x86-64,
// cpu_arm.cpp on AArch64.)
#include "base/cpu.h"

namespace paddock {

Isa DetectIsa() {
  return Isa::kScalar;
}

std::string CpuFeatureList() {
  return "none";
}

bool CpuHasAvx512Bf16() {
  return false;
}

bool CpuHasAmxBf16() {
  return false;
}

bool CpuHasArmBf16() {
  return false;
}

}  // namespace paddock
