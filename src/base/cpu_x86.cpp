// base/cpu_x86.cpp: the x86-64 CPU's instruction sets (CPUID, XCR0, Linux's AMX permission):
// DetectIsa, the feature list and the BF16 checks of base/cpu.h. (cpu_portable.cpp on other
// architectures.)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/cpu.h"

namespace paddock {

namespace {
// F16C (CPUID.1:ECX bit 29); not every compiler's __builtin_cpu_supports knows it.
bool HasF16c() {
  unsigned a, b, c, d;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return false;
  return (c & (1u << 29)) != 0;
}

// AMX-TILE and AMX-INT8 (CPUID.(7,0):EDX bits 24, 25), the OS saving the tile state (XCR0 bits
// 17, 18), and Linux's per-process permission for it (arch_prctl ARCH_REQ_XCOMP_PERM for
// XTILEDATA; without it the first tile instruction faults). Asked once.
bool AmxUsable() {
  static const bool usable = [] {
    unsigned a, b, c, d;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
    if ((d & (1u << 24)) == 0 || (d & (1u << 25)) == 0) return false;
    if (__get_cpuid(1, &a, &b, &c, &d) == 0 || (c & (1u << 27)) == 0) return false;  // OSXSAVE
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return false;
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return usable;
}
}  // namespace

Isa DetectIsa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma") && HasF16c()) {
    return AmxUsable() ? Isa::kAmx : Isa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && HasF16c()) {
    return Isa::kAvx2;
  }
  return Isa::kScalar;
}

std::string CpuFeatureList() {
  __builtin_cpu_init();
  std::string s;
  auto add = [&s](bool has, const char* name) {
    if (!has) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(__builtin_cpu_supports("avx2"), "avx2");
  add(__builtin_cpu_supports("fma"), "fma");
  add(HasF16c(), "f16c");
  add(__builtin_cpu_supports("avx512f"), "avx512f");
  add(__builtin_cpu_supports("avx512vnni"), "avx512_vnni");
  add(CpuHasAvx512Bf16(), "avx512_bf16");
  add(AmxUsable(), "amx_int8");
  add(CpuHasAmxBf16(), "amx_bf16");
  return s.empty() ? "none" : s;
}

bool CpuHasAvx512Bf16() {
  // CPUID.(EAX=7, ECX=1):EAX bit 5, and the AVX-512 level the BF16 kernels build on.
  unsigned a, b, c, d;
  if (static_cast<int>(DetectIsa()) < static_cast<int>(Isa::kAvx512) ||
      __get_cpuid_count(7, 1, &a, &b, &c, &d) == 0)
    return false;
  return (a & (1u << 5)) != 0;
}

bool CpuHasAmxBf16() {
  // CPUID.(EAX=7, ECX=0):EDX bit 22, the tile state usable (AmxUsable), and AVX-512 BF16 (the
  // conversions that feed the tiles).
  unsigned a, b, c, d;
  if (!CpuHasAvx512Bf16() || !AmxUsable() || __get_cpuid_count(7, 0, &a, &b, &c, &d) == 0)
    return false;
  return (d & (1u << 22)) != 0;
}

bool CpuHasArmBf16() {
  return false;
}

}  // namespace paddock
