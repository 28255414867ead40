// The single instruction-set dispatch point. Each table is built on first use only, and only
// after the CPU check: building a table runs code compiled for that instruction set.
#include "base/strings.h"
#include "kernels/tables.h"

namespace paddock {

namespace detail {
std::atomic<int> weight_prefetch{static_cast<int>(Prefetch::kAuto)};
}

namespace {
// What every table shares: the row unit of each weight type.
KernelTable Finish(KernelTable k) {
  for (int t = 0; t < kGgmlTypeCount; ++t) k.row_unit[t] = IsX16(static_cast<GgmlType>(t)) ? kX16Rows : 1;
  return k;
}
}  // namespace

const KernelTable& GetKernels(Isa isa) {
  if (static_cast<int>(isa) > static_cast<int>(DetectIsa())) {
    Fail("this CPU cannot run %s kernels", IsaName(isa));
  }
  switch (isa) {
    case Isa::kAvx512: {
      static const KernelTable t = [] {
        KernelTable k = avx512::MakeTable();
        if (CpuHasAvx512Bf16()) k.gemm_bf16_dot = avx512bf16::GemmBf16Dot;
        return Finish(k);
      }();
      return t;
    }
    case Isa::kAvx2: {
      static const KernelTable t = Finish(avx2::MakeTable());
      return t;
    }
    case Isa::kScalar: break;
  }
  static const KernelTable t = Finish(MakeScalarTable());
  return t;
}

}  // namespace paddock
