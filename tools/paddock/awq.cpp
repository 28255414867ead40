#include "awq.h"

#include <algorithm>
#include <cmath>

#include "base/strings.h"

namespace paddock::cli {
namespace {

// The rounding of a tensor type, simulated in float: `bits` levels per group of `group`
// elements, symmetric (scale from the largest magnitude) or with a minimum.
struct FakeQuant {
  int bits = 0;  // 0: not quantized (no search)
  int group = 32;
  bool asym = false;
};

FakeQuant FakeQuantFor(GgmlType t, int64_t cols) {
  switch (t) {
    case GgmlType::kQ4_0:
    case GgmlType::kPQ4_G32:
      return {4, 32, false};
    case GgmlType::kPQ4_G64:
      return {4, 64, false};
    case GgmlType::kPQ4_G128:
      return {4, 128, false};
    case GgmlType::kQ4_1:
    case GgmlType::kPQ4_G32Z:
    case GgmlType::kQ4_K:
      return {4, 32, true};
    case GgmlType::kPQ4_G64Z:
      return {4, 64, true};
    case GgmlType::kPQ4_G128Z:
      return {4, 128, true};
    case GgmlType::kQ5_0:
      return {5, 32, false};
    case GgmlType::kQ5_1:
    case GgmlType::kQ5_K:
      return {5, 32, true};
    case GgmlType::kQ6_K:
      return {6, 16, false};
    case GgmlType::kQ8_0:
      return {8, 32, false};
    case GgmlType::kPQ8_C:
      return {8, static_cast<int>(cols), false};
    default:
      return {};
  }
}

// sum_c imp_c (x_c - q(x)_c)^2 over one row.
double RowError(const float* x, const float* imp, int64_t n, const FakeQuant& fq) {
  double err = 0;
  const int levels = (1 << fq.bits) - 1;
  for (int64_t g0 = 0; g0 < n; g0 += fq.group) {
    const int64_t g1 = std::min<int64_t>(n, g0 + fq.group);
    if (fq.asym) {
      float mn = x[g0], mx = x[g0];
      for (int64_t c = g0; c < g1; ++c) {
        mn = std::min(mn, x[c]);
        mx = std::max(mx, x[c]);
      }
      const float d = (mx - mn) / static_cast<float>(levels), id = d > 0 ? 1.0f / d : 0.0f;
      for (int64_t c = g0; c < g1; ++c) {
        const float q =
            std::min(static_cast<float>(levels), std::max(0.0f, std::nearbyint((x[c] - mn) * id)));
        const double e = x[c] - (q * d + mn);
        err += imp[c] * e * e;
      }
    } else {
      float amax = 0, max = 0;
      for (int64_t c = g0; c < g1; ++c) {
        if (std::fabs(x[c]) > amax) {
          amax = std::fabs(x[c]);
          max = x[c];
        }
      }
      const float half = static_cast<float>(1 << (fq.bits - 1));
      const float d = max / -half, id = d != 0 ? 1.0f / d : 0.0f;
      for (int64_t c = g0; c < g1; ++c) {
        const float q = std::min(half - 1, std::max(-half, std::nearbyint(x[c] * id)));
        const double e = x[c] - q * d;
        err += imp[c] * e * e;
      }
    }
  }
  return err;
}

struct Matrix {
  std::string name;
  std::vector<float> w;
  int64_t rows = 0, cols = 0;
  FakeQuant fq;
};

}  // namespace

AwqPlan PlanAwq(int n_layers, const std::map<std::string, std::vector<float>>& stats,
                const TensorReader& read, const TypeOf& type_of, bool tied_output, bool gated_ffn) {
  AwqPlan plan;
  // One input group: the matrices reading it, the vectors its producer scales, the matrices
  // whose rows produce it.
  auto group = [&](const std::vector<std::string>& names, const std::vector<std::string>& vectors,
                   const std::string& producer_rows) {
    std::vector<Matrix> ms;
    const std::vector<float>* s2 = nullptr;
    for (const auto& n : names) {
      Matrix m;
      m.name = n;
      if (!read(n, &m.w, &m.rows, &m.cols)) continue;
      m.fq = FakeQuantFor(type_of(n, m.rows, m.cols), m.cols);
      if (m.fq.bits == 0) return;  // a matrix kept wide: leave the group alone
      auto it = stats.find(n);
      if (it == stats.end() || static_cast<int64_t>(it->second.size()) != m.cols) return;
      s2 = &it->second;
      ms.push_back(std::move(m));
    }
    if (ms.empty() || s2 == nullptr) return;
    const int64_t cols = ms[0].cols;
    std::vector<float> rms(static_cast<size_t>(cols)), s(rms.size()), imp(rms.size()),
        row(rms.size());
    for (int64_t c = 0; c < cols; ++c)
      rms[static_cast<size_t>(c)] = std::sqrt(std::max((*s2)[static_cast<size_t>(c)], 1e-20f));
    double best = -1;
    float best_alpha = 0;
    std::vector<float> best_s(rms.size(), 1.0f);
    double base_err = 0;
    for (int k = 0; k <= 10; ++k) {
      const float alpha = 0.1f * static_cast<float>(k);
      float lo = INFINITY, hi = 0;
      for (int64_t c = 0; c < cols; ++c) {
        s[static_cast<size_t>(c)] = std::pow(rms[static_cast<size_t>(c)], alpha);
        lo = std::min(lo, s[static_cast<size_t>(c)]);
        hi = std::max(hi, s[static_cast<size_t>(c)]);
      }
      const float norm = 1.0f / std::sqrt(lo * hi);
      for (int64_t c = 0; c < cols; ++c) {
        s[static_cast<size_t>(c)] *= norm;
        imp[static_cast<size_t>(c)] =
            (*s2)[static_cast<size_t>(c)] / (s[static_cast<size_t>(c)] * s[static_cast<size_t>(c)]);
      }
      double err = 0;
      for (const Matrix& m : ms) {
        for (int64_t r = 0; r < m.rows; ++r) {
          const float* wr = m.w.data() + r * m.cols;
          for (int64_t c = 0; c < cols; ++c)
            row[static_cast<size_t>(c)] = wr[c] * s[static_cast<size_t>(c)];
          err += RowError(row.data(), imp.data(), cols, m.fq);
        }
      }
      if (k == 0) base_err = err;
      if (best < 0 || err < best) {
        best = err;
        best_alpha = alpha;
        best_s = s;
      }
    }
    plan.log.push_back(StrFormat(
        "awq %-28s alpha %.1f, expected output error %.4g -> %.4g (%.1f%%)", ms[0].name.c_str(),
        best_alpha, base_err, best, base_err > 0 ? 100.0 * (best - base_err) / base_err : 0.0));
    if (best_alpha == 0) return;
    for (const Matrix& m : ms) plan.col[m.name] = best_s;
    for (const auto& v : vectors) plan.vec_div[v] = best_s;
    if (!producer_rows.empty()) plan.row_div[producer_rows] = best_s;
  };
  for (int l = 0; l < n_layers; ++l) {
    const std::string p = StrFormat("blk.%d.", l);
    group({p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight", p + "attn_qkv.weight"},
          {p + "attn_norm.weight", p + "attn_norm.bias"}, "");
    // Down first: its scale divides FFN-up's rows, which the gate/up search does not see
    // (a per-row factor scales each group's rounding with it).
    if (gated_ffn) group({p + "ffn_down.weight"}, {}, p + "ffn_up.weight");
    group({p + "ffn_gate.weight", p + "ffn_up.weight"},
          {p + "ffn_norm.weight", p + "ffn_norm.bias"}, "");
  }
  if (!tied_output) group({"output.weight"}, {"output_norm.weight", "output_norm.bias"}, "");
  return plan;
}

}  // namespace paddock::cli
