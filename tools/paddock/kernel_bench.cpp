// paddock bench --kernels: how fast one core streams each weight type's GEMV from memory, with
// and without the software prefetch of the weight stream (the measurement behind the choice of
// the kinds that prefetch, kernels/simd/gemm_x16.cpp). No model needed.
#include "kernel_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "formats/ggml_types.h"
#include "kernels/kernels.h"

namespace paddock::cli {

int RunKernelStreamBench(Isa isa, int rounds, bool json) {
  // FFN-sized matrices (TinyLlama's gate: 5632 x 2048), enough of them to leave the caches.
  constexpr int64_t kCols = 2048, kRows = 5632;
  constexpr int kMats = 24;
  const KernelTable& k = GetKernels(isa);
  // The same kernels with the prefetch on for every kind, and off.
  const KernelTable* tables[2] = {&GetKernels(isa, Prefetch::kAll),
                                  &GetKernels(isa, Prefetch::kOff)};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> wf(static_cast<size_t>(kCols * kRows)), x(kCols), y(kRows);
  for (float& v : wf) v = u(rng);
  for (float& v : x) v = u(rng);
  std::vector<int8_t> qs(kCols);
  std::vector<float> d(kCols / kQK), ds(kCols / kQK);
  k.quantize_act(x.data(), kCols, qs.data(), d.data(), ds.data());
  ActQ8 a;
  a.qs = qs.data();
  a.d = d.data();
  a.ds = ds.data();
  if (json) std::printf("{\"isa\": \"%s\", \"rounds\": %d, \"types\": [", IsaName(isa), rounds);
  if (!json)
    std::printf(
        "one core streaming a %lld x %lld GEMV from memory, %s kernels, medians of %d\n%-8s %-9s "
        "%14s %14s\n",
        static_cast<long long>(kRows), static_cast<long long>(kCols), IsaName(isa), rounds, "type",
        "layout", "prefetch GB/s", "no prefetch");
  if (!json) std::printf("(last column: what the kernels do by default)\n");
  bool first = true;
  for (GgmlType t : {GgmlType::kQ4_0, GgmlType::kQ8_0, GgmlType::kQ5_0, GgmlType::kQ5_1,
                     GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K,
                     GgmlType::kQ6_K, GgmlType::kIQ4_NL, GgmlType::kIQ4_XS, GgmlType::kMXFP4}) {
    GgmlType to;
    X16RepackFn repack;
    if (!X16RelayoutOf(t, &to, &repack) || k.gemv_q8[static_cast<int>(to)] == nullptr) continue;
    const TypeTraits& tr = Traits(t);
    const size_t rb = RowBytes(tr, kCols), bytes = rb * kRows;
    std::vector<uint8_t> file(bytes);
    tr.from_float(wf.data(), file.data(), kCols * kRows);
    std::vector<std::vector<uint8_t>> mats(kMats, std::vector<uint8_t>(bytes));
    for (auto& m : mats) repack(file.data(), m.data(), kRows, kCols);
    std::vector<double> gbs[2];
    for (int r = 0; r < rounds + 1; ++r) {
      for (int pf = 0; pf < 2; ++pf) {
        const GemvQ8Fn gemv = tables[pf]->gemv_q8[static_cast<int>(to)];
        const auto t0 = std::chrono::steady_clock::now();
        for (const auto& m : mats) gemv(m.data(), rb, kCols, kRows, a, y.data());
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r > 0)
          gbs[pf].push_back(static_cast<double>(bytes) * kMats / s / 1e9);  // round 0 warms up
      }
    }
    for (auto& v : gbs) std::sort(v.begin(), v.end());
    const double with = gbs[0][gbs[0].size() / 2], without = gbs[1][gbs[1].size() / 2];
    X16Format f{};
    X16FormatOf(to, &f);
    const bool by_default = PrefetchesByDefault(f.kind, isa);  // what the kernels do by default
    if (json) {
      std::printf(
          "%s{\"type\": \"%s\", \"layout\": \"%s\", \"prefetch_gb_s\": %.2f, \"no_prefetch_gb_s\": "
          "%.2f, \"prefetch_by_default\": %s}",
          first ? "" : ", ", tr.name, Traits(to).name, with, without,
          by_default ? "true" : "false");
    } else {
      std::printf("%-8s %-9s %14.1f %14.1f   %s\n", tr.name, Traits(to).name, with, without,
                  by_default ? "prefetch" : "-");
    }
    first = false;
  }
  if (json) std::printf("]}\n");
  return 0;
}

}  // namespace paddock::cli
