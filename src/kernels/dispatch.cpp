// The single instruction-set dispatch point. Each table is built on first use only, and only
// after the CPU check: building a table runs code compiled for that instruction set.
#include "base/strings.h"
#include "kernels/tables.h"

namespace paddock {

namespace {
// What every table shares: the row unit of each weight type, and a GEMV for every readable type.
KernelTable Finish(KernelTable k) {
  SetGenericGemv(&k);
  for (int t = 0; t < kGgmlTypeCount; ++t)
    k.row_unit[t] = IsX16(static_cast<GgmlType>(t)) ? kX16Rows : 1;
  return k;
}
KernelTable Avx512(Prefetch prefetch) {
  KernelTable k = avx512::MakeTable(prefetch);
  if (CpuHasAvx512Bf16()) k.gemm_bf16_dot = avx512bf16::GemmBf16Dot;
  return Finish(k);
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

const KernelTable& GetKernels(Isa isa, Prefetch prefetch) {
  if (static_cast<int>(isa) > static_cast<int>(DetectIsa())) {
    Fail("this CPU cannot run %s kernels", IsaName(isa));
  }
  const int pf = static_cast<int>(prefetch);
  if (pf < 0 || pf > 2) Fail("unknown prefetch mode %d", pf);
  switch (isa) {
    case Isa::kAmx: {
      static const KernelTable t[3] = {Amx(Prefetch::kOff), Amx(Prefetch::kAuto),
                                       Amx(Prefetch::kAll)};
      return t[pf];
    }
    case Isa::kAvx512: {
      static const KernelTable t[3] = {Avx512(Prefetch::kOff), Avx512(Prefetch::kAuto),
                                       Avx512(Prefetch::kAll)};
      return t[pf];
    }
    case Isa::kAvx2: {
      static const KernelTable t[3] = {Finish(avx2::MakeTable(Prefetch::kOff)),
                                       Finish(avx2::MakeTable(Prefetch::kAuto)),
                                       Finish(avx2::MakeTable(Prefetch::kAll))};
      return t[pf];
    }
    case Isa::kScalar:
      break;
  }
  static const KernelTable t = Finish(MakeScalarTable());
  return t;
}

}  // namespace paddock
