// The single instruction-set dispatch point. Each table is built on first use only, and only
// after the CPU check: building a table runs code compiled for that instruction set. The SIMD
// tables are the architecture's (dispatch_x86.cpp on x86-64, dispatch_arm.cpp on AArch64;
// dispatch_portable.cpp elsewhere, where only the scalar table exists).
#include "base/strings.h"
#include "kernels/tables.h"

namespace paddock {

KernelTable FinishTable(KernelTable k) {
  SetGenericGemv(&k);
  for (int t = 0; t < kGgmlTypeCount; ++t)
    k.row_unit[t] = IsX16(static_cast<GgmlType>(t)) ? kX16Rows : 1;
  return k;
}

const KernelTable& GetKernels(Isa isa, Prefetch prefetch) {
  if (!IsaRuns(isa)) {
    Fail("this CPU cannot run %s kernels", IsaName(isa));
  }
  const int pf = static_cast<int>(prefetch);
  if (pf < 0 || pf > 2) Fail("unknown prefetch mode %d", pf);
  if (const KernelTable* simd = SimdKernels(isa, prefetch)) return *simd;
  static const KernelTable t = FinishTable(MakeScalarTable());
  return t;
}

}  // namespace paddock
