// kernels/kv_rows.h: scalar decoding of KV rows (internal to the kernels layer).
#pragma once

#include <cstdint>

#include "kernels/kernels.h"

namespace paddock {

// Decodes elements [begin, begin + n) of head `head` of an encoded row into `out`.
void KvDecodeHead(KvDtype t, const uint8_t* row, int head, int n_heads, int head_dim, int begin,
                  int n, float* out);
// kv_store, and reference kv_dot / kv_axpy.
void SetReferenceKvKernels(KernelTable* t);

}  // namespace paddock
