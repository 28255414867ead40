// model/relayout.cpp: the weights re-laid out once for the kernels at load (RelayoutWeights:
// the 16-row interleaved and row-split layouts, huge-page buffers) and an encoder's F16 matrices
// as BF16 copies.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <thread>
#include <utility>
#include <vector>

#include "base/half.h"
#include "base/mapped_file.h"
#include "model/weights.h"

namespace paddock {

namespace {

// A buffer for re-laid weights. Matrices of 2 MiB or more: 2 MiB aligned and marked for
// transparent huge pages, so the decode stream crosses fewer page boundaries (fewer TLB walks,
// prefetchers run further). Smaller ones: 64-byte aligned (a huge page each would waste memory).
constexpr size_t kHugePageBytes = size_t{2} << 20;
std::unique_ptr<uint8_t, LoadedModel::FreeDeleter> WeightBuffer(size_t bytes, bool huge_pages) {
  const bool huge = huge_pages && bytes >= kHugePageBytes;
  const size_t align = huge ? kHugePageBytes : 64;
  const size_t size = (bytes + align - 1) / align * align;
  void* p = nullptr;
  if (posix_memalign(&p, align, size) != 0) throw std::bad_alloc();
  if (huge) madvise(p, size, MADV_HUGEPAGE);  // advice only: no error if the kernel declines
  return std::unique_ptr<uint8_t, LoadedModel::FreeDeleter>(static_cast<uint8_t*>(p));
}

}  // namespace

void RelayoutWeights(LoadedModel* m, bool huge_pages,
                     const std::function<void(double done, double total)>& progress,
                     const WeightRange& range) {
  ModelWeights& w = m->weights;
  // Matrices whose rows come in groups of 16 are interleaved for the integer micro-kernel
  // (kQ4_0X16 / kQ8_0X16, Q4_1 as PQ4_G32Z, Q5_0 / Q5_1 and the k-quants Q4_K, Q5_K, Q6_K
  // into their X16 forms); the other Q4_0 / Q8_0 ones get the row-split layout (kQ4_0R /
  // kQ8_0R). A tied output matrix is re-laid like any other into its own buffer, and the
  // embedding lookup goes on reading rows of the file's mapping (a row per token: the same
  // resident memory as one shared row-split copy, and the classifier streams at the X16 rate).
  using Repack = void (*)(const void*, void*, int64_t, int64_t);
  std::mutex mu;  // m->relaid, m->relaid_bytes, the progress count
  auto relayout = [&](WeightTensor* t, bool row_access) {
    const bool x16 = !row_access && t->rows % kX16Rows == 0;
    Repack repack = nullptr;
    GgmlType to = t->type;
    if (x16) {
      if (!X16RelayoutOf(t->type, &to, &repack)) repack = nullptr;
    } else if (t->type == GgmlType::kQ4_0) {
      repack = RepackQ4_0Rows;
      to = GgmlType::kQ4_0R;
    } else if (t->type == GgmlType::kQ8_0) {
      repack = RepackQ8_0Rows;
      to = GgmlType::kQ8_0R;
    }
    const size_t bytes = static_cast<size_t>(t->rows) * t->row_bytes;
    // Paddock file types are stored in the kernels' layout already: with huge pages, the large
    // ones are copied out of the 4 KiB-paged file mapping into huge-page buffers (the same
    // decode-stream benefit the re-laid types get).
    const bool copy =
        repack == nullptr && huge_pages && IsPaddockFileType(t->type) && bytes >= kHugePageBytes;
    if (repack == nullptr && !copy) return;
    auto buf = WeightBuffer(bytes, huge_pages);
    if (copy) {
      std::memcpy(buf.get(), t->data, bytes);
    } else {
      repack(t->data, buf.get(), t->rows, t->cols);
    }
    ReleasePages(t->data, bytes);
    t->data = buf.get();
    t->type = to;
    std::lock_guard<std::mutex> lock(mu);
    m->relaid_bytes += bytes;
    m->relaid.push_back(std::move(buf));
  };
  auto size = [](const WeightTensor* t) { return static_cast<double>(t->rows) * t->row_bytes; };
  // A layer's matrices: attention, the dense FFN (or shared expert), the router and experts.
  auto matrices = [](LayerWeights& L) {
    std::vector<WeightTensor*> v = {&L.wq,       &L.wk,       &L.wv,        &L.wo,
                                    &L.w_gate,   &L.w_up,     &L.w_down,    &L.router,
                                    &L.pl_gate,  &L.pl_proj,  &L.wq_gate,   &L.rec_in,
                                    &L.rec_gate, &L.rec_beta, &L.rec_alpha, &L.rec_out};
    for (ExpertWeights& e : L.experts) v.insert(v.end(), {&e.gate, &e.up, &e.down});
    return v;
  };
  std::vector<std::pair<WeightTensor*, bool>> work;  // (matrix, read by rows)
  const int end = range.end < 0 ? static_cast<int>(w.layers.size()) : range.end;
  for (int l = range.begin; l < end; ++l)
    for (WeightTensor* t : matrices(w.layers[static_cast<size_t>(l)])) work.emplace_back(t, false);
  if (range.output) work.emplace_back(&w.output, false);
  if (range.begin == 0 && w.pl_model_proj) work.emplace_back(&w.pl_model_proj, false);
  double total = 0, done = 0;
  for (const auto& x : work) total += size(x.first);
  // The matrices are independent: the cores take them in turn (a reload after an eviction
  // waits on this copy; memory bandwidth, not one core, is then the limit).
  std::atomic<size_t> next{0};
  std::exception_ptr failure;
  auto worker = [&](bool report) {
    for (size_t i; (i = next.fetch_add(1)) < work.size();) {
      try {
        relayout(work[i].first, work[i].second);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!failure) failure = std::current_exception();
        next = work.size();
      }
      double d;
      {
        std::lock_guard<std::mutex> lock(mu);
        d = done += size(work[i].first);
      }
      if (report && progress) progress(d, total);
    }
  };
  const unsigned helpers = std::min(std::max(std::thread::hardware_concurrency(), 1u), 4u) - 1;
  std::vector<std::thread> threads;
  for (unsigned h = 0; h < helpers; ++h) threads.emplace_back(worker, false);
  worker(true);
  for (std::thread& t : threads) t.join();
  if (failure) std::rethrow_exception(failure);
  if (progress) progress(total, total);
}

void F16WeightsToBf16(LoadedModel* m) {
  for (LayerWeights& L : m->weights.layers) {
    for (WeightTensor* t : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) {
      if (!*t || t->type != GgmlType::kF16) continue;
      const size_t n = static_cast<size_t>(t->rows) * static_cast<size_t>(t->cols);
      auto buf = WeightBuffer(n * 2, true);
      const auto* src = reinterpret_cast<const uint16_t*>(t->data);
      auto* dst = reinterpret_cast<uint16_t*>(buf.get());
      for (size_t i = 0; i < n; ++i) dst[i] = Fp32ToBf16(Fp16ToFp32(src[i]));
      ReleasePages(t->data, n * 2);
      t->data = buf.get();
      t->type = GgmlType::kBF16;
      t->row_bytes = static_cast<size_t>(t->cols) * 2;
      m->relaid_bytes += n * 2;
      m->relaid.push_back(std::move(buf));
    }
  }
}

}  // namespace paddock
