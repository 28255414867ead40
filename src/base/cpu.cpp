#include "base/cpu.h"

#include <cpuid.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "base/strings.h"

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

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAmx:
      return "amx";
  }
  return "?";
}

Isa ParseIsa(std::string_view name) {
  const Isa best = DetectIsa();
  Isa want;
  if (name == "auto" || name.empty()) return best;
  if (name == "scalar")
    want = Isa::kScalar;
  else if (name == "avx2")
    want = Isa::kAvx2;
  else if (name == "avx512")
    want = Isa::kAvx512;
  else if (name == "amx")
    want = Isa::kAmx;
  else
    Fail("unknown ISA '%.*s' (expected auto, scalar, avx2, avx512 or amx)", (int)name.size(),
         name.data());
  if (static_cast<int>(want) > static_cast<int>(best)) {
    Fail("this CPU cannot run %s kernels (best available: %s)", IsaName(want), IsaName(best));
  }
  return want;
}

int HardwareThreads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

int PhysicalCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return HardwareThreads();
  // One core per distinct sibling list among the CPUs we may run on (SMT siblings share one).
  std::set<std::string> cores;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    const std::string path =
        "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/thread_siblings_list";
    std::ifstream f(path);
    std::string siblings;
    if (!(f >> siblings)) return HardwareThreads();
    cores.insert(siblings);
  }
  return cores.empty() ? HardwareThreads() : static_cast<int>(cores.size());
}

}  // namespace paddock

namespace paddock {

std::string CpuModelName() {
  FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (f == nullptr) return "unknown CPU";
  char line[512];
  std::string name = "unknown CPU";
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    const std::string_view l(line);
    if (l.rfind("model name", 0) != 0) continue;
    const size_t colon = l.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view v = l.substr(colon + 1);
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.remove_suffix(1);
    if (!v.empty()) name = std::string(v);
    break;
  }
  std::fclose(f);
  return name;
}

uint64_t AvailableMemoryBytes() {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return 0;
  char line[256];
  unsigned long long kb = 0;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
  }
  std::fclose(f);
  return kb * 1024ull;
}

}  // namespace paddock
