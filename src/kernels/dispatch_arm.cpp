// kernels/dispatch_arm.cpp: the AArch64 tables (NEON, dot product, int8 matrix multiply) for the
// dispatch point (dispatch.cpp), each built on first use, after the CPU check. The float and
// elementwise families are the same at every level (compiled once, for ARMv8.0); the dotprod
// and i8mm tables replace the integer families with their own builds.
#include "kernels/tables.h"

namespace paddock {

namespace {
// Every level's float and elementwise families, with the BF16 dot product where the CPU has it.
KernelTable Base(Prefetch prefetch) {
  KernelTable k = neon::MakeTable(prefetch);
  if (CpuHasArmBf16()) k.gemm_bf16_dot = neonbf16::GemmBf16Dot;
  return k;
}
KernelTable Neon(Prefetch prefetch) {
  return FinishTable(Base(prefetch));
}
KernelTable Dotprod(Prefetch prefetch) {
  KernelTable k = Base(prefetch);
  k.isa = Isa::kDotprod;
  dotprod::SetInt8Kernels(&k);
  dotprod::SetX16Kernels(&k, prefetch);
  return FinishTable(k);
}
KernelTable I8mm(Prefetch prefetch) {
  KernelTable k = Base(prefetch);
  k.isa = Isa::kI8mm;
  i8mm::SetInt8Kernels(&k);
  i8mm::SetX16Kernels(&k, prefetch);
  return FinishTable(k);
}
}  // namespace

const KernelTable* SimdKernels(Isa isa, Prefetch prefetch) {
  const int pf = static_cast<int>(prefetch);
  switch (isa) {
    case Isa::kI8mm: {
      static const KernelTable t[3] = {I8mm(Prefetch::kOff), I8mm(Prefetch::kAuto),
                                       I8mm(Prefetch::kAll)};
      return &t[pf];
    }
    case Isa::kDotprod: {
      static const KernelTable t[3] = {Dotprod(Prefetch::kOff), Dotprod(Prefetch::kAuto),
                                       Dotprod(Prefetch::kAll)};
      return &t[pf];
    }
    case Isa::kNeon: {
      static const KernelTable t[3] = {Neon(Prefetch::kOff), Neon(Prefetch::kAuto),
                                       Neon(Prefetch::kAll)};
      return &t[pf];
    }
    default:
      break;
  }
  return nullptr;
}

}  // namespace paddock
