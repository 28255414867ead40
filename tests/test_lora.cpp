// LoRA adapters at run time (model/lora.h): equal to the adapter merged into the weights, batch
// invariant with different adapters in one step, the fast product equal to the scalar
// reference, and adapters that do not fit refused naming the tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/cpu.h"
#include "base/thread_pool.h"
#include "cpu/transformer.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "kernels/kernels.h"
#include "kv/kv_manager.h"
#include "model/lora.h"
#include "paddock/error.h"
#include "synth/synth.h"
#include "test_forward.h"
#include "test_util.h"

namespace paddock {
namespace {

// A small F32 model (so merging is exact up to rounding), written once.
std::string BaseModel() {
  static const std::string path = [] {
    SynthSpec spec;
    spec.type = GgmlType::kF32;
    spec.context = 128;
    GgufWriter w;
    BuildSyntheticModel(spec, &w);
    const std::string p = test::TempPath("lora_base.gguf");
    w.Write(p);
    return p;
  }();
  return path;
}

std::string Adapter(int rank, uint64_t seed) {
  const std::string p =
      test::TempPath("lora_r" + std::to_string(rank) + "_s" + std::to_string(seed) + ".gguf");
  WriteSyntheticLora(BaseModel(), rank, seed, p);
  return p;
}

// The base model with the adapter merged into its weights: W += s * B A, in a copy of the
// file's bytes (the reference run-time application must equal).
std::string Merged(const std::string& adapter, float scale) {
  std::ifstream in(BaseModel(), std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  const GgufFile base = GgufFile::Parse(bytes.data(), bytes.size());
  const GgufFile lora = GgufFile::Open(adapter);
  const double alpha = lora.GetFloat("adapter.lora.alpha").value_or(0);
  for (const GgufTensor& ta : lora.tensors()) {
    if (ta.name.size() < 7 || ta.name.compare(ta.name.size() - 7, 7, ".lora_a") != 0) continue;
    const std::string target = ta.name.substr(0, ta.name.size() - 7);
    const GgufTensor* tb = lora.FindTensor(target + ".lora_b");
    const GgufTensor* tw = base.FindTensor(target);
    EXPECT_TRUE(tb != nullptr && tw != nullptr && tw->type == GgmlType::kF32) << target;
    const int64_t in_dim = ta.ne[0], rank = ta.ne[1], out = tb->ne[1];
    const float s = static_cast<float>(scale * alpha / static_cast<double>(rank));
    const float* a = reinterpret_cast<const float*>(ta.data);
    const float* b = reinterpret_cast<const float*>(tb->data);
    float* w = reinterpret_cast<float*>(const_cast<uint8_t*>(tw->data));  // (our copy)
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in_dim; ++i) {
        float d = 0;
        for (int64_t r = 0; r < rank; ++r) d += b[o * rank + r] * a[r * in_dim + i];
        w[o * in_dim + i] += s * d;
      }
  }
  const std::string p = test::TempPath("lora_merged.gguf");
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  return p;
}

KvCacheOptions F32Kv() {
  KvCacheOptions o;
  o.k_type = KvDtype::kF32;
  o.v_type = KvDtype::kF32;
  return o;
}

struct Runner {
  std::unique_ptr<LoadedModel> model;
  ThreadPool pool{2};
  std::unique_ptr<Transformer> tf;
  std::unique_ptr<KvManager> kv;
  explicit Runner(const std::string& path) : model(LoadModel(path)) {
    tf = std::make_unique<Transformer>(*model, GetKernels(DetectIsa()), pool, 64,
                                       ForwardOptions{.int8_activations = false});
    kv = std::make_unique<KvManager>(model->config, F32Kv(), model->config.context_length);
  }
  // The logits after `toks`, fed in one step (batched) or token by token.
  std::vector<float> Logits(const std::vector<int32_t>& toks, bool batched) {
    const KvManager::SeqId seq = kv->Create(model->config.context_length);
    const float* l = test::FeedTokens(*tf, *kv, seq, toks, batched);
    std::vector<float> out(l, l + model->config.n_vocab);
    kv->Free(seq);
    return out;
  }
  std::vector<int32_t> Greedy(std::vector<int32_t> toks, int n) {
    for (int k = 0; k < n; ++k) {
      const std::vector<float> l = Logits(toks, true);
      toks.push_back(static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin()));
    }
    return toks;
  }
};

using test::RelErr;

std::vector<int32_t> Prompt(int n, int seed) {
  std::vector<int32_t> t = {1};
  for (int i = 1; i < n; ++i) t.push_back(3 + (seed * 31 + i * 17) % 200);
  return t;
}

TEST(Lora, RunTimeEqualsTheAdapterMergedIntoTheWeights) {
  const std::string adapter = Adapter(8, 3);
  Runner base(BaseModel()), merged(Merged(adapter, 0.7f));
  const auto lora = LoraAdapter::Load(adapter, *base.model, 0.7f);
  EXPECT_EQ(lora->n_pairs(), 7 * base.model->config.n_layers);
  base.tf->SetDefaultLora(lora.get());
  const std::vector<int32_t> p = Prompt(12, 1);
  for (bool batched : {false, true})
    EXPECT_LT(RelErr(base.Logits(p, batched), merged.Logits(p, batched)), 1e-4) << batched;
  EXPECT_EQ(base.Greedy(p, 12), merged.Greedy(p, 12));
  // And it changes the model: without it the logits differ.
  base.tf->SetDefaultLora(nullptr);
  EXPECT_GT(RelErr(base.Logits(p, true), merged.Logits(p, true)), 1e-3);
}

// Two adapters and none, in one step: each sequence's logits as when it runs alone.
TEST(Lora, DifferentAdaptersInOneStepEqualEachAlone) {
  Runner r(BaseModel());
  const auto a = LoraAdapter::Load(Adapter(4, 5), *r.model, 1.0f);
  const auto b = LoraAdapter::Load(Adapter(16, 6), *r.model, 0.5f);
  const LoraAdapter* which[3] = {a.get(), nullptr, b.get()};
  std::vector<std::vector<int32_t>> prompts = {Prompt(7, 1), Prompt(5, 2), Prompt(9, 3)};
  std::vector<std::vector<float>> alone(3);
  for (int s = 0; s < 3; ++s) {
    r.tf->SetDefaultLora(which[s]);
    alone[s] = r.Logits(prompts[s], true);
  }
  r.tf->SetDefaultLora(nullptr);
  std::vector<KvManager::SeqId> ids(3);
  std::vector<KvView> views(3);
  std::vector<Transformer::BatchItem> items(3);
  for (int s = 0; s < 3; ++s) {
    ids[s] = r.kv->Create(64);
    ASSERT_TRUE(r.kv->Reserve(ids[s], static_cast<int>(prompts[s].size())));
    views[s] = r.kv->View(ids[s]);
    items[s] = {prompts[s].data(), static_cast<int>(prompts[s].size()), 0, &views[s]};
    items[s].lora = which[s];
  }
  std::vector<const float*> logits(3);
  r.tf->ForwardBatch(items.data(), 3, logits.data());
  const int V = r.model->config.n_vocab;
  for (int s = 0; s < 3; ++s)
    EXPECT_LT(RelErr(std::vector<float>(logits[s], logits[s] + V), alone[s]), 1e-5) << s;
  for (auto id : ids) r.kv->Free(id);
}

// The product with the kernel table's dot product equals the scalar reference.
TEST(Lora, FastProductEqualsTheScalarReference) {
  Runner r(BaseModel());
  const auto a = LoraAdapter::Load(Adapter(16, 7), *r.model, 1.0f);
  // (down: 172 inputs, 64 outputs; up: 64 inputs, 172 outputs: every vector path and tail)
  for (const WeightTensor* w :
       {&r.model->weights.layers[0].w_down, &r.model->weights.layers[0].w_up}) {
    ASSERT_NE(a->For(w), nullptr);
    const LoraPair& p = *a->For(w);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> x(static_cast<size_t>(3 * p.in)), y0(static_cast<size_t>(3 * p.out)),
        tmp(static_cast<size_t>(p.rank));
    for (float& v : x) v = u(rng);
    for (float& v : y0) v = u(rng);
    std::vector<float> ref = y0, fast = y0;
    a->Apply(w, x.data(), 3, ref.data(), tmp.data());
    for (Isa isa : RunnableIsas()) {
      fast = y0;
      a->Apply(w, x.data(), 3, fast.data(), tmp.data(), GetKernels(isa).dot);
      EXPECT_LT(RelErr(fast, ref), 1e-5) << static_cast<int>(isa);
      // The kernel table's halves (what the forward pass runs), a row at a time: rank vectors,
      // then the outputs in blocks of 48.
      const KernelTable& kt = GetKernels(isa);
      fast = y0;
      for (int j = 0; j < 3; ++j) {
        kt.lora_down(p.a.data(), p.rank, p.in, p.s, x.data() + j * p.in, 1, tmp.data(), p.rank);
        for (int o0 = 0; o0 < p.out; o0 += 48)
          kt.lora_up(p.bt.data(), p.rank, p.out, tmp.data(), fast.data() + j * p.out, o0,
                     std::min(p.out, o0 + 48));
      }
      EXPECT_LT(RelErr(fast, ref), 1e-5) << static_cast<int>(isa);
      // 3 rows at once down (the 4-row block and the tail), outputs in blocks of 80 (the
      // 64-wide, 16-wide and scalar paths).
      std::vector<float> t3(static_cast<size_t>(3 * kMaxLoraRank));
      for (int rows : {3, 1}) {
        fast = y0;
        for (int j0 = 0; j0 < 3; j0 += rows)
          kt.lora_down(p.a.data(), p.rank, p.in, p.s, x.data() + j0 * p.in, rows,
                       t3.data() + j0 * kMaxLoraRank, kMaxLoraRank);
        for (int j = 0; j < 3; ++j)
          for (int o0 = 0; o0 < p.out; o0 += 80)
            kt.lora_up(p.bt.data(), p.rank, p.out, t3.data() + j * kMaxLoraRank,
                       fast.data() + j * p.out, o0, std::min(p.out, o0 + 80));
        EXPECT_LT(RelErr(fast, ref), 1e-5) << static_cast<int>(isa) << " rows " << rows;
      }
    }
  }
}

TEST(Lora, AdaptersThatDoNotFitAreRefusedNamingTheTensor) {
  auto error = [](const std::string& adapter, const LoadedModel& m) {
    try {
      LoraAdapter::Load(adapter, m, 1.0f);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const auto model = LoadModel(BaseModel());
  // For another model: stories260K's shapes (its FFN is wider; attention the same).
  const std::string other = test::TempPath("lora_other.gguf");
  WriteSyntheticLora(test::ModelPath("stories260K.gguf"), 4, 1, other);
  EXPECT_NE(error(other, *model).find("'blk.0.ffn_gate.weight' does not fit its base matrix"),
            std::string::npos)
      << error(other, *model);
  // A model is not an adapter.
  EXPECT_NE(error(BaseModel(), *model).find("not a LoRA adapter"), std::string::npos);
  // A pair for a matrix adapters may not change, and a lora_a without its lora_b.
  auto write = [](const std::vector<std::string>& names, const std::string& p) {
    GgufWriter w;
    w.SetString("general.type", "adapter");
    w.SetString("adapter.type", "lora");
    w.SetF32("adapter.lora.alpha", 4);
    std::vector<float> z(64 * 4, 0.f);
    for (const std::string& n : names)
      w.AddTensor(n, {64, 4}, GgmlType::kF32, z.data(), z.size() * 4);
    w.Write(p);
    return p;
  };
  const std::string embd = write({"token_embd.weight.lora_a", "token_embd.weight.lora_b"},
                                 test::TempPath("lora_embd.gguf"));
  EXPECT_NE(error(embd, *model).find("'token_embd.weight' names no matrix"), std::string::npos)
      << error(embd, *model);
  const std::string half = write({"blk.0.attn_q.weight.lora_a"}, test::TempPath("lora_half.gguf"));
  EXPECT_NE(error(half, *model).find("has no lora_b"), std::string::npos) << error(half, *model);
}

}  // namespace
}  // namespace paddock
