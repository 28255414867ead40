// kernels/simd/table.cpp: this ISA's kernel table, from the families' setters.
#include "kernels/simd/common.h"

namespace paddock {
namespace PADDOCK_ISA_NS {

KernelTable MakeTable(Prefetch prefetch) {
  KernelTable t{};
  t.isa = kTableIsa;
  t.prefetch = prefetch;
  SetFloatKernels(&t);
  SetElementwiseKernels(&t);
  SetInt8Kernels(&t);
  SetX16Kernels(&t, prefetch);
  SetAttentionKernels(&t);
  SetRecurrentKernels(&t);
  return t;
}

}  // namespace PADDOCK_ISA_NS
}  // namespace paddock
