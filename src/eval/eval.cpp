// engine/eval.cpp: perplexity and model-vs-model comparison over a text (paddock perplexity,
// paddock compare). Log-probabilities are computed in double from each position's logits.
#include "paddock/eval.h"

#include <algorithm>
#include <cmath>

#include "base/strings.h"
#include "base/timer.h"

namespace paddock {
namespace {

// The text cut into windows of `ctx` tokens; in each, positions [first, ctx - 1) are scored
// (each predicting the next token), as llama.cpp's perplexity tool does by default: the text is
// tokenized once (with BOS where the vocabulary adds one) and cut every ctx tokens, each
// window's first token replaced by BOS, the second half scored. With bos_prefix (Paddock's
// earlier scheme): BOS followed by ctx - 1 text tokens per window, one more position scored.
struct Windows {
  std::vector<int32_t> tokens;
  int ctx = 0, n = 0, first = 0;
  bool bos_prefix = false, add_bos = true;
  int stride() const { return bos_prefix ? ctx - 1 : ctx; }
  std::vector<int32_t> Window(int k, int bos) const {
    std::vector<int32_t> t;
    t.reserve(static_cast<size_t>(ctx));
    const auto from = tokens.begin() + static_cast<std::ptrdiff_t>(k) * stride();
    if (bos_prefix) t.push_back(bos);
    t.insert(t.end(), from, from + stride());
    if (!bos_prefix && add_bos) t[0] = bos;
    return t;
  }
};

Windows Plan(Engine& e, std::string_view text, const EvalOptions& o) {
  Windows w;
  if (o.ctx < 0 || o.max_windows < 0) Fail("evaluation: negative window size or count");
  w.ctx = o.ctx > 0 ? o.ctx : std::min(e.info().context, 512);
  if (w.ctx > e.info().context)
    Fail("evaluation window %d exceeds the context %d (raise -c)", w.ctx, e.info().context);
  if (w.ctx < 8) Fail("evaluation window %d is too small (at least 8 tokens)", w.ctx);
  w.bos_prefix = o.bos_prefix;
  w.add_bos = w.bos_prefix || e.AddsBos();
  w.tokens = e.Tokenize(text, !w.bos_prefix && w.add_bos, false);
  w.first = w.bos_prefix ? w.ctx / 2 - 1 : w.ctx / 2;
  w.n = static_cast<int>(w.tokens.size() / static_cast<size_t>(w.stride()));
  if (o.max_windows > 0) w.n = std::min(w.n, o.max_windows);
  if (w.n == 0)
    Fail(
        "the text has %zu tokens: too short for one window of %d (use a longer text or a smaller "
        "--ctx)",
        w.tokens.size(), w.ctx);
  return w;
}

// Runs window k of `w` and calls f(position in window, logits row, next token) for the scored
// positions.
template <class F>
void RunWindow(Engine& e, const Windows& w, int k, int bos, F&& f) {
  const std::vector<int32_t> toks = w.Window(k, bos);
  const int vocab = e.info().n_vocab;
  const int step = e.max_eval_tokens();
  for (int pos = 0; pos < w.ctx - 1; pos += step) {
    const int n = std::min(step, w.ctx - 1 - pos);
    std::vector<int32_t> chunk(toks.begin() + pos, toks.begin() + pos + n);
    const float* logits = e.EvaluateAll(chunk, pos);
    for (int i = 0; i < n; ++i) {
      const int p = pos + i;
      if (p >= w.first)
        f(p, logits + static_cast<size_t>(i) * static_cast<size_t>(vocab),
          toks[static_cast<size_t>(p + 1)]);
    }
  }
}

// log-softmax of a row into lp (double), returns the argmax.
int LogSoftmax(const float* logits, int n, std::vector<double>* lp) {
  lp->resize(static_cast<size_t>(n));
  int arg = 0;
  for (int i = 1; i < n; ++i) {
    if (logits[i] > logits[arg]) arg = i;
  }
  const double mx = logits[arg];
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double lse = mx + std::log(sum);
  for (int i = 0; i < n; ++i) (*lp)[static_cast<size_t>(i)] = static_cast<double>(logits[i]) - lse;
  return arg;
}

struct Moments {
  double sum = 0, sum2 = 0;
  int64_t n = 0;
  void Add(double x) {
    sum += x;
    sum2 += x * x;
    ++n;
  }
  double Mean() const { return n > 0 ? sum / static_cast<double>(n) : 0; }
  double Se() const {
    if (n < 2) return 0;
    const double m = Mean();
    const double var = std::max(0.0, (sum2 / static_cast<double>(n) - m * m) *
                                         static_cast<double>(n) / static_cast<double>(n - 1));
    return std::sqrt(var / static_cast<double>(n));
  }
};

PerplexityReport Finish(const Moments& nll, const Windows& w, double seconds) {
  PerplexityReport r;
  r.mean_nll = nll.Mean();
  r.ppl = std::exp(r.mean_nll);
  r.ppl_se = r.ppl * nll.Se();
  r.scored = nll.n;
  r.windows = w.n;
  r.ctx = w.ctx;
  r.seconds = seconds;
  return r;
}

int BosOf(const Engine& e) {
  const auto t = e.Tokenize("", true, false);
  if (t.empty()) Fail("the vocabulary has no BOS token to start evaluation windows with");
  return t[0];
}

}  // namespace

PerplexityReport Perplexity(Engine& e, std::string_view text, const EvalOptions& o) {
  const double t0 = NowSeconds();
  const Windows w = Plan(e, text, o);
  const int bos = BosOf(e);
  Moments nll;
  std::vector<double> lp;
  for (int k = 0; k < w.n; ++k) {
    RunWindow(e, w, k, bos, [&](int, const float* logits, int next) {
      LogSoftmax(logits, e.info().n_vocab, &lp);
      nll.Add(-lp[static_cast<size_t>(next)]);
    });
    if (o.on_progress) o.on_progress(k + 1, w.n);
  }
  return Finish(nll, w, NowSeconds() - t0);
}

CompareReport Compare(Engine& a, Engine& b, std::string_view text, const EvalOptions& o) {
  if (a.info().n_vocab != b.info().n_vocab)
    Fail("the models have different vocabularies (%d vs %d tokens)", a.info().n_vocab,
         b.info().n_vocab);
  const double t0 = NowSeconds();
  const Windows wa = Plan(a, text, o);
  const Windows wb = Plan(b, text, o);
  if (wa.tokens != wb.tokens || wa.ctx != wb.ctx)
    Fail("the models tokenize the text differently; compare needs the same vocabulary");
  const int bos = BosOf(a);
  const int vocab = a.info().n_vocab;
  // Model A's log-probabilities per scored position are kept for one window, then B runs.
  Moments nll_a, nll_b, kl;
  int64_t agree = 0, index = 0;
  double kl_max = 0;
  std::vector<CompareReport::Position> worst;
  std::vector<std::vector<double>> lp_a;
  std::vector<int> arg_a, positions;
  std::vector<double> lp_b;
  for (int k = 0; k < wa.n; ++k) {
    lp_a.clear();
    arg_a.clear();
    positions.clear();
    RunWindow(a, wa, k, bos, [&](int p, const float* logits, int next) {
      lp_a.emplace_back();
      arg_a.push_back(LogSoftmax(logits, vocab, &lp_a.back()));
      positions.push_back(p);
      nll_a.Add(-lp_a.back()[static_cast<size_t>(next)]);
    });
    size_t j = 0;
    RunWindow(b, wb, k, bos, [&](int p, const float* logits, int next) {
      const int arg_b = LogSoftmax(logits, vocab, &lp_b);
      nll_b.Add(-lp_b[static_cast<size_t>(next)]);
      const std::vector<double>& pa = lp_a[j];
      double d = 0;
      for (int t = 0; t < vocab; ++t)
        d += std::exp(pa[static_cast<size_t>(t)]) *
             (pa[static_cast<size_t>(t)] - lp_b[static_cast<size_t>(t)]);
      d = std::max(0.0, d);
      kl.Add(d);
      kl_max = std::max(kl_max, d);
      agree += arg_a[j] == arg_b;
      if (o.worst > 0) {
        CompareReport::Position w;
        w.index = index;
        w.kl = d;
        const std::vector<int32_t> win = wa.Window(k, bos);
        std::vector<int32_t> ctx(win.begin() + std::max(1, p - 7), win.begin() + p + 1);
        worst.push_back(w);
        worst.back().context = a.Detokenize(ctx);
        worst.back().top_a = a.Detokenize({arg_a[j]});
        worst.back().top_b = a.Detokenize({arg_b});
        std::sort(worst.begin(), worst.end(),
                  [](const auto& x, const auto& y) { return x.kl > y.kl; });
        if (static_cast<int>(worst.size()) > o.worst) worst.pop_back();
      }
      ++j;
      ++index;
    });
    if (o.on_progress) o.on_progress(k + 1, wa.n);
  }
  const double secs = NowSeconds() - t0;
  CompareReport r;
  r.a = Finish(nll_a, wa, secs);
  r.b = Finish(nll_b, wb, secs);
  r.kl = kl.Mean();
  r.kl_se = kl.Se();
  r.kl_max = kl_max;
  r.top1_agreement = kl.n > 0 ? static_cast<double>(agree) / static_cast<double>(kl.n) : 0;
  r.worst = std::move(worst);
  return r;
}

}  // namespace paddock
