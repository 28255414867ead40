// Pipeline stages in one process (model/stage_link.h): a head running the first layers and
// stages running the rest (each with its own layers' KV, mirroring the head's blocks and
// copy-on-write copies) give the whole model's logits, for any split and micro-batch count,
// with sequences of different lengths in one step and a forked sequence. The MPI transport
// around this is tests/pipeline_test.sh's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "base/cpu.h"
#include "base/thread_pool.h"
#include "cpu/pipeline_head.h"
#include "cpu/transformer.h"
#include "kernels/kernels.h"
#include "kv/kv_manager.h"
#include "model/stage_link.h"
#include "model/weights.h"
#include "paddock/engine.h"
#include "paddock/error.h"
#include "paddock/service.h"
#include "test_util.h"

namespace paddock {
namespace {

constexpr int kBlocks = 64;

KvCacheOptions KvOptions(int begin, int end) {
  KvCacheOptions o;
  o.num_blocks = kBlocks;
  o.layer_begin = begin;
  o.layer_end = end;
  return o;
}

// The stages after the head, in this process: each micro-batch runs through them at once and
// its result rows wait for Receive.
class LocalLink : public StageLink {
 public:
  LocalLink(const LoadedModel& m, ThreadPool& pool, const std::vector<int>& begin, int mbs)
      : begin_(begin), mbs_(mbs) {
    for (size_t s = 1; s + 1 < begin.size(); ++s) {
      auto tf = std::make_unique<Transformer>(m, GetKernels(DetectIsa()), pool, 64);
      tf->SetLayers(begin[s], begin[s + 1]);
      stages_.push_back(std::move(tf));
      kv_.push_back(std::make_unique<KvManager>(m.config, KvOptions(begin[s], begin[s + 1]), 0));
    }
  }
  int head_layers() const override { return begin_[1]; }
  int micro_batches() const override { return mbs_; }
  int lanes() const override { return static_cast<int>(begin_.size()) - 1; }
  void Send(int mb, const StepItem* items, int n_items, const float* x, int n, int rows,
            bool hidden_out) override {
    std::vector<float> cur(x, x + static_cast<size_t>(n) * stages_[0]->config().dim);
    for (size_t s = 0; s < stages_.size(); ++s) {
      for (auto [from, to] : copies_) kv_[s]->CopyBlock(from, to);
      // The same items over this stage's KV storage (the head's block tables).
      std::vector<KvView> views(static_cast<size_t>(n_items));
      std::vector<StepItem> its(items, items + n_items);
      for (int i = 0; i < n_items; ++i) {
        views[static_cast<size_t>(i)] = *items[i].kv;
        views[static_cast<size_t>(i)].layers = kv_[s]->layer_views();
        its[static_cast<size_t>(i)].kv = &views[static_cast<size_t>(i)];
      }
      int out_rows = 0;
      const float* y =
          stages_[s]->ForwardStage(its.data(), n_items, cur.data(), hidden_out, &out_rows);
      const bool last = s + 1 == stages_.size();
      const size_t width =
          last && !hidden_out ? stages_[s]->config().n_vocab : stages_[s]->config().dim;
      if (last) EXPECT_EQ(out_rows, rows);
      cur.assign(y, y + static_cast<size_t>(out_rows) * width);
    }
    copies_.clear();
    results_.emplace_back(mb, std::move(cur));
  }
  void Receive(int mb, float* out, int rows, size_t row_floats) override {
    ASSERT_FALSE(results_.empty());
    const auto [id, r] = std::move(results_.front());  // in the order sent
    results_.pop_front();
    ASSERT_EQ(id, mb);
    ASSERT_EQ(r.size(), static_cast<size_t>(rows) * row_floats);
    std::memcpy(out, r.data(), r.size() * sizeof(float));
  }
  void CopyBlock(int32_t from, int32_t to) override { copies_.emplace_back(from, to); }
  std::string Lost() const override { return ""; }

 private:
  std::vector<int> begin_;
  int mbs_;
  std::vector<std::unique_ptr<Transformer>> stages_;
  std::vector<std::unique_ptr<KvManager>> kv_;
  std::vector<std::pair<int32_t, int32_t>> copies_;
  std::deque<std::pair<int, std::vector<float>>> results_;
};

// A model run whole, or as a head and stages split at `begin`: the same calls either way.
struct Runner {
  std::unique_ptr<LoadedModel> model = LoadModel(test::ModelPath("stories260K.gguf"));
  ThreadPool pool{2};
  std::unique_ptr<LocalLink> link;
  Transformer* tf = nullptr;    // the whole model, or the head's layers
  std::unique_ptr<Backend> be;  // tf, or a pipeline head over it
  std::unique_ptr<KvManager> kv;
  explicit Runner(const std::vector<int>& begin = {}, int mbs = 1) {
    auto cpu = std::make_unique<Transformer>(*model, GetKernels(DetectIsa()), pool, 64);
    tf = cpu.get();
    const int head = begin.empty() ? model->config.n_layers : begin[1];
    if (begin.empty()) {
      be = std::move(cpu);
    } else {
      link = std::make_unique<LocalLink>(*model, pool, begin, mbs);
      be = std::make_unique<PipelineHead>(std::move(cpu), link.get());
    }
    kv = std::make_unique<KvManager>(model->config, KvOptions(0, head), 0, be.get());
    if (!begin.empty()) {
      LocalLink* l = link.get();
      kv->SetCopyListener([l](int32_t from, int32_t to) { l->CopyBlock(from, to); });
    }
  }
  // One step: each sequence's tokens; its last row of logits.
  std::vector<std::vector<float>> Step(const std::vector<KvManager::SeqId>& seqs,
                                       const std::vector<std::vector<int32_t>>& toks) {
    const size_t n = seqs.size();
    std::vector<KvView> views(n);
    std::vector<StepItem> items(n);
    for (size_t i = 0; i < n; ++i) {
      const int len = kv->Length(seqs[i]);
      EXPECT_TRUE(kv->Reserve(seqs[i], len + static_cast<int>(toks[i].size())));
      views[i] = kv->View(seqs[i]);
      items[i] = {toks[i].data(), static_cast<int>(toks[i].size()), len, &views[i]};
    }
    std::vector<const float*> logits(n);
    be->Step(items.data(), static_cast<int>(n), StepOutput::kLogits, logits.data());
    std::vector<std::vector<float>> out(n);
    const int V = model->config.n_vocab;
    for (size_t i = 0; i < n; ++i) {
      out[i].assign(logits[i], logits[i] + V);
      kv->Commit(seqs[i], toks[i].data(), static_cast<int>(toks[i].size()));
    }
    return out;
  }
};

// Three prompts of different lengths in one step, then a fork of the first (its partial last
// block shared, copied on write), then decode steps of all four.
std::vector<std::vector<float>> Conversation(Runner& r) {
  std::vector<std::vector<int32_t>> prompts(3);
  const int sizes[3] = {20, 3, 7};  // 20: a full block and a partial one (16-token blocks)
  for (int p = 0; p < 3; ++p)
    for (int t = 0; t < sizes[p]; ++t)
      prompts[p].push_back(t == 0 ? 1 : (37 * t + 101 * p) % 500 + 5);
  std::vector<KvManager::SeqId> seqs;
  for (size_t i = 0; i < prompts.size(); ++i) seqs.push_back(r.kv->Create(256));
  std::vector<std::vector<float>> all = r.Step(seqs, prompts);
  seqs.push_back(r.kv->Fork(seqs[0]));
  for (int t = 0; t < 6; ++t) {
    std::vector<std::vector<int32_t>> next;
    for (size_t i = 0; i < seqs.size(); ++i)
      next.push_back({static_cast<int32_t>((100 + 37 * t + 11 * i) % 500)});
    for (auto& l : r.Step(seqs, next)) all.push_back(std::move(l));
  }
  return all;
}

TEST(Pipeline, StagesGiveTheWholeModelsLogits) {
  Runner whole;
  const std::vector<std::vector<float>> ref = Conversation(whole);
  const int L = whole.model->config.n_layers;  // 5
  struct Case {
    std::vector<int> begin;
    int mbs;
  } cases[] = {{{0, 2, L}, 1}, {{0, 3, L}, 2}, {{0, 1, 3, L}, 3}, {{0, 1, 2, 3, 4, L}, 4}};
  for (const Case& c : cases) {
    Runner split(c.begin, c.mbs);
    const std::vector<std::vector<float>> got = Conversation(split);
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i)
      EXPECT_LT(test::RelErr(got[i], ref[i]), 1e-5)
          << "stages " << c.begin.size() - 1 << ", micro-batches " << c.mbs << ", row " << i;
  }
}

// A LocalLink with its own copy of the model and threads (an engine's EngineOptions::stages).
class OwnedLocalLink : public StageLink {
 public:
  OwnedLocalLink(const std::string& path, const std::vector<int>& begin, int mbs)
      : model_(LoadModel(path)), link_(*model_, pool_, begin, mbs) {}
  int head_layers() const override { return link_.head_layers(); }
  int micro_batches() const override { return link_.micro_batches(); }
  int lanes() const override { return link_.lanes(); }
  void Send(int mb, const StepItem* items, int n_items, const float* x, int n, int rows,
            bool hidden_out) override {
    link_.Send(mb, items, n_items, x, n, rows, hidden_out);
  }
  void Receive(int mb, float* out, int rows, size_t row_floats) override {
    link_.Receive(mb, out, rows, row_floats);
  }
  void CopyBlock(int32_t from, int32_t to) override { link_.CopyBlock(from, to); }
  std::string Lost() const override { return ""; }

 private:
  std::unique_ptr<LoadedModel> model_;
  ThreadPool pool_{1};
  LocalLink link_;
};

// A service over a pipelined head keeps a step in flight per lane (here 3, one per process):
// each request's greedy text is the one it gets from a whole-model service, whichever lane it
// joined and whatever ran beside it.
TEST(Pipeline, ServiceWithStepsInFlightGivesEachRequestsText) {
  const std::string path = test::ModelPath("stories260K.gguf");
  auto make = [&](bool split) {
    EngineOptions eo;
    eo.model_path = path;
    eo.threads = 1;
    eo.max_batch = 64;
    if (split) eo.stages = std::make_shared<OwnedLocalLink>(path, std::vector<int>{0, 2, 4, 5}, 1);
    return Service::Create(Engine::Create(eo), ServiceOptions{});
  };
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 9; ++i) {
    std::vector<int32_t> p = {1};
    for (int t = 0; t < 3 + 7 * i; ++t) p.push_back((29 * t + 53 * i) % 500 + 5);
    prompts.push_back(p);
  }
  RequestOptions o;
  o.generate.sampling.temperature = 0;
  o.generate.ignore_eos = true;
  auto texts = [&](Service& svc) {
    std::vector<std::shared_ptr<RequestStream>> streams(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      o.generate.max_tokens = 12 + 5 * static_cast<int>(i);
      EXPECT_EQ(svc.Submit(prompts[i], o, &streams[i]), SubmitStatus::kAccepted);
    }
    std::vector<std::string> out;
    for (auto& st : streams) {
      std::string text;
      while (st->Wait(&text, 60) != RequestStream::Status::kDone) {
      }
      EXPECT_TRUE(st->result().error.empty()) << st->result().error;
      out.push_back(st->result().text);
    }
    return out;
  };
  const std::vector<std::string> whole = texts(*make(false));
  auto svc = make(true);
  EXPECT_EQ(texts(*svc), whole);
  EXPECT_EQ(texts(*svc), whole);  // (again, with the prefix cache warm)
}

TEST(Pipeline, ALayerRangeOutsideTheModelIsRefused) {
  Runner whole;
  EXPECT_THROW(whole.tf->SetLayers(3, 9), Error);
  EXPECT_THROW(whole.tf->SetLayers(2, 2), Error);
  EXPECT_THROW(KvManager(whole.model->config, KvOptions(4, 2), 0), Error);
}

}  // namespace
}  // namespace paddock
