// kernels/dispatch_x86.cpp: the x86-64 tables (AVX2, AVX-512, AMX) for the dispatch point
// (dispatch.cpp), each built on first use, after the CPU check.
#include "kernels/tables.h"

namespace paddock {

namespace {
KernelTable Avx512(Prefetch prefetch) {
  KernelTable k = avx512::MakeTable(prefetch);
  if (CpuHasAvx512Bf16()) k.gemm_bf16_dot = avx512bf16::GemmBf16Dot;
  return FinishTable(k);
}
// AVX-512 with the integer GEMMs on AMX tiles where it has them.
KernelTable Amx(Prefetch prefetch) {
  KernelTable k = Avx512(prefetch);
  amx::SetAmxKernels(&k, prefetch);
  if (CpuHasAmxBf16()) amx::SetAmxBf16Kernels(&k);
  k.isa = Isa::kAmx;
  return k;
}
}  // namespace

const KernelTable* SimdKernels(Isa isa, Prefetch prefetch) {
  const int pf = static_cast<int>(prefetch);
  switch (isa) {
    case Isa::kAmx: {
      static const KernelTable t[3] = {Amx(Prefetch::kOff), Amx(Prefetch::kAuto),
                                       Amx(Prefetch::kAll)};
      return &t[pf];
    }
    case Isa::kAvx512: {
      static const KernelTable t[3] = {Avx512(Prefetch::kOff), Avx512(Prefetch::kAuto),
                                       Avx512(Prefetch::kAll)};
      return &t[pf];
    }
    case Isa::kAvx2: {
      static const KernelTable t[3] = {FinishTable(avx2::MakeTable(Prefetch::kOff)),
                                       FinishTable(avx2::MakeTable(Prefetch::kAuto)),
                                       FinishTable(avx2::MakeTable(Prefetch::kAll))};
      return &t[pf];
    }
    case Isa::kScalar:
      break;
  }
  return nullptr;
}

}  // namespace paddock
