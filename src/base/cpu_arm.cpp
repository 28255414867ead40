// base/cpu_arm.cpp: the AArch64 CPU's instruction sets, from the Linux kernel's HWCAP bits
// (getauxval): DetectIsa and the feature list of base/cpu.h. (cpu_x86.cpp on x86-64.)
#include <sys/auxv.h>

#include "base/cpu.h"

namespace paddock {

namespace {
// The arm64 HWCAP / HWCAP2 bits (the kernel's uapi asm/hwcap.h), spelled here so that an older
// libc's headers do not hide the newer ones.
constexpr unsigned long kHwcapFp = 1ul << 0, kHwcapAsimd = 1ul << 1, kHwcapAsimdHp = 1ul << 10,
                        kHwcapAsimdDp = 1ul << 20, kHwcapSve = 1ul << 22;
constexpr unsigned long kHwcap2Sve2 = 1ul << 1, kHwcap2I8mm = 1ul << 13, kHwcap2Bf16 = 1ul << 14;
}  // namespace

Isa DetectIsa() {
  const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
  if ((hw & kHwcapAsimd) == 0 || (hw & kHwcapFp) == 0) return Isa::kScalar;
  if ((hw & kHwcapAsimdDp) == 0) return Isa::kNeon;
  if ((hw2 & kHwcap2I8mm) == 0) return Isa::kDotprod;
  return Isa::kI8mm;
}

std::string CpuFeatureList() {
  const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
  std::string s;
  auto add = [&s](bool has, const char* name) {
    if (!has) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(hw & kHwcapAsimd, "asimd");
  add(hw & kHwcapAsimdHp, "asimdhp");
  add(hw & kHwcapAsimdDp, "asimddp");
  add(hw2 & kHwcap2I8mm, "i8mm");
  add(hw2 & kHwcap2Bf16, "bf16");
  add(hw & kHwcapSve, "sve");
  add(hw2 & kHwcap2Sve2, "sve2");
  return s.empty() ? "none" : s;
}

bool CpuHasAvx512Bf16() {
  return false;
}

bool CpuHasAmxBf16() {
  return false;
}

bool CpuHasArmBf16() {
  return DetectIsa() != Isa::kScalar && (getauxval(AT_HWCAP2) & kHwcap2Bf16) != 0;
}

}  // namespace paddock
