// kernels/dispatch_portable.cpp: the SIMD tables of an architecture without kernel families of
// its own yet (every 64-bit little-endian Linux builds and runs the scalar table).
#include "kernels/tables.h"

namespace paddock {

const KernelTable* SimdKernels(Isa, Prefetch) {
  return nullptr;
}

}  // namespace paddock
