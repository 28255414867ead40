#include "engine/calibration.h"

#include <algorithm>
#include <cmath>

#include "base/cpu.h"
#include "base/strings.h"
#include "base/thread_pool.h"
#include "cpu/transformer.h"
#include "kernels/kernels.h"
#include "kv/kv_manager.h"
#include "model/weights.h"

namespace paddock {

namespace {

// Sums of squares of every matrix input channel, per layer and site.
class ChannelSquares : public ActivationObserver {
 public:
  std::vector<std::vector<double>> attn, attn_out, ffn, down;
  std::vector<double> output;
  int64_t tokens = 0;

  void Start(const ModelConfig& c) override {
    const size_t L = static_cast<size_t>(c.n_layers);
    auto init = [&](std::vector<std::vector<double>>* v, int cols) {
      if (v->size() != L) v->assign(L, std::vector<double>(static_cast<size_t>(cols), 0.0));
    };
    init(&attn, c.dim);
    init(&attn_out, c.max_q_dim());
    init(&ffn, c.dim);
    init(&down, c.max_ffn_dim());
    if (output.empty()) output.assign(static_cast<size_t>(c.dim), 0.0);
  }
  void Observe(ActSite site, int layer, const float* x, int n, int cols) override {
    std::vector<double>* sums = &output;
    const size_t l = static_cast<size_t>(std::max(layer, 0));
    switch (site) {
      case ActSite::kAttnIn:
        sums = &attn[l];
        break;
      case ActSite::kAttnOut:
        sums = &attn_out[l];
        break;
      case ActSite::kFfnIn:
        sums = &ffn[l];
        break;
      case ActSite::kDownIn:
        sums = &down[l];
        break;
      case ActSite::kOutput:
        break;
    }
    for (int j = 0; j < n; ++j) {
      const float* r = x + static_cast<size_t>(j) * static_cast<size_t>(cols);
      for (int c = 0; c < cols; ++c)
        (*sums)[static_cast<size_t>(c)] += static_cast<double>(r[c]) * r[c];
    }
  }
  void Tokens(int n) override { tokens += n; }
};

}  // namespace

struct Calibration::Impl {
  std::unique_ptr<LoadedModel> model;
  ThreadPool pool{PhysicalCores()};
  std::unique_ptr<Transformer> tf;
  std::unique_ptr<KvManager> kv;
  int ctx = 0;
  std::vector<std::vector<int32_t>> windows;
  std::vector<double> ref;  // reference log-probabilities (windows x positions x vocab)
  std::map<std::string, WeightTensor*> named;

  std::vector<double> LogProbs();
};

Calibration::Calibration(const std::string& path, const std::string& text, int ctx, int max_windows)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.model = LoadModel(path);
  const ModelConfig& c = s.model->config;
  s.ctx = std::min(ctx, c.context_length);
  // int8 activations where the weights have integer kernels (both the reference and each
  // trial run the same way, so the KL isolates the one swapped matrix).
  s.tf = std::make_unique<Transformer>(*s.model, GetKernels(DetectIsa()), s.pool, 256);
  KvCacheOptions ko;
  ko.k_type = ko.v_type = KvDtype::kF32;
  s.kv = std::make_unique<KvManager>(c, ko, s.ctx, s.tf.get());
  const auto toks = s.model->tokenizer->Encode(text, false);
  const size_t span = static_cast<size_t>(s.ctx - 1);
  for (size_t w = 0; w < static_cast<size_t>(max_windows); ++w) {
    const size_t from = w * span;
    if (from + span > toks.size()) break;
    std::vector<int32_t> win = {s.model->tokenizer->bos()};
    win.insert(win.end(), toks.begin() + static_cast<std::ptrdiff_t>(from),
               toks.begin() + static_cast<std::ptrdiff_t>(from + span));
    s.windows.push_back(win);
  }
  if (s.windows.empty())
    Fail("the calibration text is too short for one window of %d tokens", s.ctx);
  auto& w = s.model->weights;
  s.named["token_embd.weight"] = &w.tok_embd;
  if (!c.tied_embeddings) s.named["output.weight"] = &w.output;
  for (int l = 0; l < c.n_layers; ++l) {
    auto& L = w.layers[static_cast<size_t>(l)];
    const std::string p = StrFormat("blk.%d.", l);
    s.named[p + "attn_q.weight"] = &L.wq;
    s.named[p + "attn_k.weight"] = &L.wk;
    s.named[p + "attn_v.weight"] = &L.wv;
    s.named[p + "attn_output.weight"] = &L.wo;
    s.named[p + "ffn_gate.weight"] = &L.w_gate;
    s.named[p + "ffn_up.weight"] = &L.w_up;
    s.named[p + "ffn_down.weight"] = &L.w_down;
  }
}

Calibration::~Calibration() = default;

std::map<std::string, std::vector<float>> Calibration::ActivationStats() {
  Impl& s = *impl_;
  ChannelSquares st;
  s.tf->set_observer(&st);
  s.LogProbs();
  s.tf->set_observer(nullptr);
  std::map<std::string, std::vector<float>> out;
  auto put = [&](const std::string& name, const std::vector<double>& sums) {
    std::vector<float>& v = out[name];
    for (double x : sums)
      v.push_back(static_cast<float>(x / static_cast<double>(std::max<int64_t>(1, st.tokens))) +
                  1e-12f);
  };
  for (int l = 0; l < s.model->config.n_layers; ++l) {
    const std::string p = StrFormat("blk.%d.", l);
    const size_t li = static_cast<size_t>(l);
    for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_qkv"})
      put(p + m + ".weight", st.attn[li]);
    put(p + "attn_output.weight", st.attn_out[li]);
    for (const char* m : {"ffn_gate", "ffn_up"}) put(p + m + ".weight", st.ffn[li]);
    put(p + "ffn_down.weight", st.down[li]);
  }
  put("output.weight", st.output);
  return out;
}

double Calibration::Sensitivity(const std::string& name, const RoundTrip& round_trip) {
  Impl& s = *impl_;
  auto it = s.named.find(name);
  if (it == s.named.end() || !*it->second) return -1;
  if (s.ref.empty()) s.ref = s.LogProbs();
  WeightTensor& t = *it->second;
  const WeightTensor saved = t;
  std::vector<float> f(static_cast<size_t>(t.rows * t.cols));
  DequantizeMatrix(t.type, t.data, t.rows, t.cols, f.data());
  round_trip(f.data(), t.rows, t.cols);
  t.type = GgmlType::kF32;
  t.row_bytes = sizeof(float) * static_cast<size_t>(t.cols);
  t.data = reinterpret_cast<const uint8_t*>(f.data());
  const bool tied = &t == &s.model->weights.tok_embd && s.model->config.tied_embeddings;
  if (tied) s.model->weights.output = t;
  const std::vector<double> lp = s.LogProbs();
  t = saved;
  if (tied) s.model->weights.output = t;
  const size_t V = static_cast<size_t>(s.model->config.n_vocab);
  double kl = 0;
  const size_t positions = s.ref.size() / V;
  for (size_t p = 0; p < positions; ++p) {
    for (size_t v = 0; v < V; ++v)
      kl += std::exp(s.ref[p * V + v]) * (s.ref[p * V + v] - lp[p * V + v]);
  }
  return std::max(0.0, kl / static_cast<double>(positions));
}

// Log-probabilities of every next token at every position of every window.
std::vector<double> Calibration::Impl::LogProbs() {
  const size_t V = static_cast<size_t>(model->config.n_vocab);
  std::vector<double> out;
  for (const auto& win : windows) {
    const auto seq = kv->Create(ctx);
    const int n = static_cast<int>(win.size());
    if (!kv->Reserve(seq, n)) Fail("calibration: the KV cache cannot hold %d tokens", n);
    const KvView view = kv->View(seq);
    std::vector<StepItem> items;
    for (int i = 0; i < n; ++i) items.push_back({&win[static_cast<size_t>(i)], 1, i, &view});
    std::vector<const float*> logits(static_cast<size_t>(n));
    for (int b = 0; b < n; b += tf->max_items()) {
      const int m = std::min(tf->max_items(), n - b);
      kv->BeginStep();
      tf->ForwardBatch(items.data() + b, m, logits.data() + b);
      kv->EndStep();
      for (int i = b; i < b + m; ++i) {
        const float* l = logits[static_cast<size_t>(i)];
        double mx = l[0], sum = 0;
        for (size_t v = 1; v < V; ++v) mx = std::max(mx, static_cast<double>(l[v]));
        for (size_t v = 0; v < V; ++v) sum += std::exp(l[v] - mx);
        const double lse = mx + std::log(sum);
        for (size_t v = 0; v < V; ++v) out.push_back(l[v] - lse);
      }
      kv->Commit(seq, win.data() + b, m);
    }
    kv->Free(seq);
  }
  return out;
}

}  // namespace paddock
