// model/lora.cpp: reading LoRA adapters and the scalar low-rank product (model/lora.h).
#include "model/lora.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "base/strings.h"
#include "base/thread_pool.h"
#include "formats/ggml_types.h"
#include "formats/gguf.h"
#include "kernels/kernels.h"

namespace paddock {
namespace {

// The base matrices an adapter may name: "blk.N.<suffix>".
WeightTensor* BaseMatrix(LayerWeights& L, const std::string& suffix) {
  const bool moe = !L.experts.empty();  // (its w_gate / w_up / w_down are the shared expert)
  if (suffix == "attn_q.weight") return &L.wq;
  if (suffix == "attn_k.weight") return &L.wk;
  if (suffix == "attn_v.weight") return &L.wv;
  if (suffix == "attn_output.weight") return &L.wo;
  if (suffix == "ffn_gate.weight" && !moe) return &L.w_gate;
  if (suffix == "ffn_up.weight" && !moe) return &L.w_up;
  if (suffix == "ffn_down.weight" && !moe) return &L.w_down;
  return nullptr;
}

std::vector<float> Floats(const GgufTensor& t, const std::string& path) {
  if (t.n_dims != 2)
    Fail("%s: tensor '%s' has %d dimensions, a LoRA matrix 2", path.c_str(), t.name.c_str(),
         t.n_dims);
  std::vector<float> out(static_cast<size_t>(t.ne[0] * t.ne[1]));
  if (t.type != GgmlType::kF32 && t.type != GgmlType::kF16 && t.type != GgmlType::kBF16 &&
      t.type != GgmlType::kQ8_0)
    Fail("%s: tensor '%s' has type %s (adapters in F32, F16, BF16 or Q8_0 are read)", path.c_str(),
         t.name.c_str(), TypeName(t.type));
  DequantizeMatrix(t.type, t.data, t.ne[1], t.ne[0], out.data());
  return out;
}

}  // namespace

std::unique_ptr<LoraAdapter> LoraAdapter::Load(const std::string& path, const LoadedModel& base,
                                               float scale) {
  const GgufFile f = GgufFile::Open(path);
  const auto type = f.GetString("general.type");
  const auto kind = f.GetString("adapter.type");
  if (!type || *type != "adapter" || !kind || *kind != "lora")
    Fail("%s: not a LoRA adapter (general.type \"adapter\" and adapter.type \"lora\" expected)",
         path.c_str());
  if (const auto arch = f.GetString("general.architecture"); arch && *arch != base.config.arch)
    Fail("%s: an adapter for architecture '%.*s', the model is '%s'", path.c_str(),
         static_cast<int>(arch->size()), arch->data(), base.config.arch.c_str());
  const double alpha = f.GetFloat("adapter.lora.alpha").value_or(0);
  auto ad = std::unique_ptr<LoraAdapter>(new LoraAdapter());
  // The base's matrices are the model's own (the adapter keys them by address).
  auto& layers = const_cast<std::vector<LayerWeights>&>(base.weights.layers);
  for (const GgufTensor& ta : f.tensors()) {
    const std::string& name = ta.name;
    const bool is_a = name.size() > 7 && name.compare(name.size() - 7, 7, ".lora_a") == 0;
    const bool is_b = name.size() > 7 && name.compare(name.size() - 7, 7, ".lora_b") == 0;
    if (is_b) {
      if (f.FindTensor(name.substr(0, name.size() - 7) + ".lora_a") == nullptr)
        Fail("%s: tensor '%s' has no lora_a", path.c_str(), name.c_str());
      continue;
    }
    if (!is_a)
      Fail("%s: tensor '%s' is not a LoRA matrix (.lora_a / .lora_b)", path.c_str(), name.c_str());
    const std::string target = name.substr(0, name.size() - 7);
    const GgufTensor* tb = f.FindTensor(target + ".lora_b");
    if (tb == nullptr) Fail("%s: tensor '%s' has no lora_b", path.c_str(), name.c_str());
    WeightTensor* w = nullptr;
    if (target.rfind("blk.", 0) == 0) {
      char* end = nullptr;
      const long l = std::strtol(target.c_str() + 4, &end, 10);
      if (end != target.c_str() + 4 && *end == '.' && l >= 0 &&
          l < static_cast<long>(layers.size()))
        w = BaseMatrix(layers[static_cast<size_t>(l)], end + 1);
    }
    if (w == nullptr || !*w)
      Fail(
          "%s: '%s' names no matrix of this model that an adapter may change (the attention "
          "and dense FFN projections)",
          path.c_str(), target.c_str());
    const int64_t r = ta.ne[1];
    if (ta.ne[0] != w->cols || tb->ne[1] != w->rows || tb->ne[0] != r || r < 1 || r > kMaxLoraRank)
      Fail(
          "%s: '%s' does not fit its base matrix: lora_a [%lld, %lld] and lora_b [%lld, %lld] "
          "for a [%lld, %lld] matrix (an adapter for another model?)",
          path.c_str(), target.c_str(), static_cast<long long>(ta.ne[0]),
          static_cast<long long>(ta.ne[1]), static_cast<long long>(tb->ne[0]),
          static_cast<long long>(tb->ne[1]), static_cast<long long>(w->cols),
          static_cast<long long>(w->rows));
    LoraPair p;
    p.rank = static_cast<int>(r);
    p.in = static_cast<int>(w->cols);
    p.out = static_cast<int>(w->rows);
    p.a = Floats(ta, path);
    p.b = Floats(*tb, path);
    p.bt.resize(p.b.size());
    for (int o = 0; o < p.out; ++o)
      for (int q = 0; q < p.rank; ++q)
        p.bt[static_cast<size_t>(q) * p.out + o] = p.b[static_cast<size_t>(o) * p.rank + q];
    p.s = alpha != 0 ? static_cast<float>(scale * alpha / p.rank) : scale;
    ad->pairs_.emplace(w, std::move(p));
  }
  if (ad->pairs_.empty()) Fail("%s: the adapter has no LoRA matrices", path.c_str());
  ad->scale_ = scale;
  static std::atomic<uint64_t> next_id{1};
  ad->id_ = next_id++;
  return ad;
}

size_t LoraAdapter::bytes() const {
  size_t n = 0;
  for (const auto& [_, p] : pairs_) n += (p.a.size() + p.b.size() + p.bt.size()) * sizeof(float);
  return n;
}

void LoraAdapter::Apply(const WeightTensor* w, const float* x, int n, float* y, float* tmp,
                        Dot dot) const {
  const LoraPair* p = For(w);
  if (p == nullptr) return;
  auto scalar = [](const float* a, const float* b, int64_t len) {
    float s = 0;
    for (int64_t i = 0; i < len; ++i) s += a[i] * b[i];
    return s;
  };
  for (int j = 0; j < n; ++j) {
    const float* xj = x + static_cast<size_t>(j) * p->in;
    float* yj = y + static_cast<size_t>(j) * p->out;
    for (int r = 0; r < p->rank; ++r) {
      const float* ar = p->a.data() + static_cast<size_t>(r) * p->in;
      tmp[r] = (dot != nullptr ? dot(ar, xj, p->in) : scalar(ar, xj, p->in)) * p->s;
    }
    for (int o = 0; o < p->out; ++o) {
      const float* bo = p->b.data() + static_cast<size_t>(o) * p->rank;
      yj[o] += dot != nullptr ? dot(bo, tmp, p->rank) : scalar(bo, tmp, p->rank);
    }
  }
}

// Each row's pair for each of the m matrices (m <= kSlots, one slot each) and its rank
// vector (rows are independent: a row's product never depends on its batch-mates); one pass over
// threads for all of them when there are many. False: no row has one.
LoraStep::LoraStep(int max_batch, const KernelTable& k, ThreadPool& pool)
    : B_(static_cast<size_t>(max_batch)),
      k_(&k),
      pool_(pool),
      tmp_(kSlots * B_ * kMaxLoraRank, 0.f),
      pair_(kSlots * B_, nullptr) {}

bool LoraStep::Down(const LoraAdapter* const* row_adapter, const WeightTensor* const* ws, int m,
                    const float* x, int n) {
  const size_t B = B_;
  bool any = false;
  for (int k = 0; k < m; ++k) {
    const LoraAdapter* last = nullptr;
    const LoraPair* pair = nullptr;
    for (int j = 0; j < n; ++j) {  // (few adapters: each looked up once)
      const LoraAdapter* a = row_adapter[j];
      if (a != last) {
        last = a;
        pair = a != nullptr ? a->For(ws[k]) : nullptr;
      }
      pair_[static_cast<size_t>(k) * B + static_cast<size_t>(j)] = pair;
      any = any || pair != nullptr;
    }
  }
  if (!any) return false;
  const int64_t cols = ws[0]->cols;  // (the matrices of one call share their input)
  // Tasks of up to 4 rows of one matrix; rows with the same pair go to the kernel together.
  const int64_t per = (n + 3) / 4;
  auto down = [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      const size_t k = static_cast<size_t>(i / per);
      const int j0 = static_cast<int>(i % per) * 4, j1 = std::min(n, j0 + 4);
      for (int j = j0; j < j1;) {
        const LoraPair* p = pair_[k * B + static_cast<size_t>(j)];
        int run = 1;
        while (j + run < j1 && pair_[k * B + static_cast<size_t>(j + run)] == p) ++run;
        if (p != nullptr)
          k_->lora_down(p->a.data(), p->rank, p->in, p->s, x + j * cols, run,
                        tmp_.data() + (k * B + static_cast<size_t>(j)) * kMaxLoraRank,
                        kMaxLoraRank);
        j += run;
      }
    }
  };
  const int64_t tasks = per * m;
  if (static_cast<int64_t>(n) * m >= 8) {
    pool_.ParallelFor(tasks, down);
  } else {
    down(0, tasks, 0);
  }
  return true;
}

void LoraStep::Up(int k, const WeightTensor& w, int n, float* y, int64_t o0, int64_t o1) const {
  const size_t B = B_;
  for (int64_t j = 0; j < n; ++j) {
    const size_t slot = static_cast<size_t>(k) * B + static_cast<size_t>(j);
    if (const LoraPair* p = pair_[slot])
      k_->lora_up(p->bt.data(), p->rank, p->out, tmp_.data() + slot * kMaxLoraRank, y + j * w.rows,
                  o0, o1);
  }
}

}  // namespace paddock
