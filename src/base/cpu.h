// base/cpu.h: which SIMD instruction set this CPU can run. The kernels layer turns this into
// its one dispatch decision; nothing else in Paddock branches on CPU features.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace paddock {

// x86-64: kAvx2: AVX2 + FMA + F16C. kAvx512: AVX-512 F/BW/VL/DQ + VNNI (+ FMA, F16C). kAmx:
// kAvx512 with AMX-TILE and AMX-INT8, and the Linux kernel's permission for this process to
// use the tile state (requested once, by DetectIsa).
// AArch64 (from the kernel's HWCAP bits): kNeon: Advanced SIMD (ARMv8.0). kDotprod: with the
// int8 dot products (SDOT, ARMv8.2 asimddp). kI8mm: with the int8 matrix multiply (SMMLA,
// USDOT: ARMv8.6 i8mm).
// Each architecture's levels are ordered: a CPU runs its best level and every level below it
// of its own architecture (IsaRuns).
enum class Isa {
  kScalar = 0,
  kAvx2 = 1,
  kAvx512 = 2,
  kAmx = 3,
  kNeon = 4,
  kDotprod = 5,
  kI8mm = 6
};

// The best ISA this CPU supports among those Paddock has kernels for.
Isa DetectIsa();
// Whether this CPU runs `isa`'s kernels: scalar, or a level of this CPU's architecture at most
// DetectIsa().
bool IsaRuns(Isa isa);
// Every ISA this CPU runs, scalar first, up to the best.
std::vector<Isa> RunnableIsas();
// The CPU's SIMD features as the kernel reported them (e.g. "asimd asimddp i8mm bf16" on
// AArch64, "avx2 avx512f avx512_vnni amx_int8" on x86-64), for `paddock info`.
std::string CpuFeatureList();
// AVX-512 BF16 (vdpbf16ps) on top of the AVX-512 level.
bool CpuHasAvx512Bf16();
// AMX-BF16 (`tdpbf16ps`) usable by this process, with AVX-512 BF16.
bool CpuHasAmxBf16();
// AArch64's BF16 extension (FEAT_BF16: BFMLALB/T, HWCAP2_BF16) with NEON.
bool CpuHasArmBf16();
const char* IsaName(Isa isa);
// Parses "auto", "scalar", "avx2", "avx512", "amx", "neon", "dotprod" or "i8mm"; throws Error
// otherwise, and if the CPU cannot run the requested ISA.
Isa ParseIsa(std::string_view name);

// Number of hardware threads available to this process.
int HardwareThreads();
// Number of physical cores among them (SMT siblings counted once): the default thread count,
// since the matrix kernels saturate a core's vector units and siblings only contend.
int PhysicalCores();
// The CPU's model name ("model name" in /proc/cpuinfo; "unknown CPU" if none).
std::string CpuModelName();
// MemAvailable from /proc/meminfo in bytes (0 if unknown).
uint64_t AvailableMemoryBytes();

}  // namespace paddock
