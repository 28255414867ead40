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
// A dot-product level: its own integer families over the base table.
template <void (*SetInt8)(KernelTable*), void (*SetX16)(KernelTable*, Prefetch)>
KernelTable Level(Isa isa, Prefetch prefetch) {
  KernelTable k = Base(prefetch);
  k.isa = isa;
  SetInt8(&k);
  SetX16(&k, prefetch);
  return FinishTable(k);
}
KernelTable Dotprod(Prefetch prefetch) {
  return Level<dotprod::SetInt8Kernels, dotprod::SetX16Kernels>(Isa::kDotprod, prefetch);
}
KernelTable I8mm(Prefetch prefetch) {
  return Level<i8mm::SetInt8Kernels, i8mm::SetX16Kernels>(Isa::kI8mm, prefetch);
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
