// base/cpu.h: which SIMD instruction set this CPU can run. The kernels layer turns this into
// its one dispatch decision; nothing else in Paddock branches on CPU features.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace paddock {

// kAvx2: AVX2 + FMA + F16C. kAvx512: AVX-512 F/BW/VL/DQ + VNNI (+ FMA, F16C). kAmx: kAvx512
// with AMX-TILE and AMX-INT8, and the Linux kernel's permission for this process to use the
// tile state (requested once, by DetectIsa).
enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAmx = 3 };

// The best ISA this CPU supports among those Paddock has kernels for.
Isa DetectIsa();
// AVX-512 BF16 (vdpbf16ps) on top of the AVX-512 level.
bool CpuHasAvx512Bf16();
// AMX-BF16 (`tdpbf16ps`) usable by this process, with AVX-512 BF16.
bool CpuHasAmxBf16();
const char* IsaName(Isa isa);
// Parses "scalar", "avx2", "avx512", "amx" or "auto"; throws Error otherwise, and if the CPU
// cannot run the requested ISA.
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
