#include "base/cpu.h"

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
    case Isa::kNeon:
      return "neon";
    case Isa::kDotprod:
      return "dotprod";
    case Isa::kI8mm:
      return "i8mm";
  }
  return "?";
}

namespace {
bool IsArm(Isa isa) {
  return static_cast<int>(isa) >= static_cast<int>(Isa::kNeon);
}
}  // namespace

bool IsaRuns(Isa isa) {
  const Isa best = DetectIsa();
  if (isa == Isa::kScalar) return true;
  if (best == Isa::kScalar || IsArm(isa) != IsArm(best)) return false;
  return static_cast<int>(isa) <= static_cast<int>(best);
}

std::vector<Isa> RunnableIsas() {
  std::vector<Isa> v;
  for (int i = 0; i <= static_cast<int>(Isa::kI8mm); ++i)
    if (IsaRuns(static_cast<Isa>(i))) v.push_back(static_cast<Isa>(i));
  return v;
}

Isa ParseIsa(std::string_view name) {
  if (name == "auto" || name.empty()) return DetectIsa();
  for (int i = 0; i <= static_cast<int>(Isa::kI8mm); ++i) {
    const Isa want = static_cast<Isa>(i);
    if (name != IsaName(want)) continue;
    if (!IsaRuns(want)) {
      Fail("this CPU cannot run %s kernels (best available: %s)", IsaName(want),
           IsaName(DetectIsa()));
    }
    return want;
  }
  Fail("unknown ISA '%.*s' (expected auto, scalar, avx2, avx512, amx, neon, dotprod or i8mm)",
       (int)name.size(), name.data());
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
