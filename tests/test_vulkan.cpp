// Tests of the Vulkan backend (src/vulkan/) on whatever Vulkan device the machine has (in CI:
// Mesa's lavapipe, a CPU device): every matmul shader against the scalar reference (each
// weight type, row and token tails), whole models against the CPU path (the stories260K
// golden; synthetic files of each type and architecture, greedy tokens and perplexity),
// continuous batching, the prefix cache, and the refusals. Without a device the tests skip,
// unless PADDOCK_REQUIRE_VULKAN is set (the suite sets it: a stage that ran none has failed).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "formats/ggml_types.h"
#include "model/backend.h"
#include "model/weights.h"
#include "paddock/engine.h"
#include "paddock/eval.h"
#include "paddock/service.h"
#include "synth/synth.h"
#include "test_util.h"
#include "vulkan/backend.h"
#include "vulkan/device.h"

namespace paddock {
namespace {

bool HaveDevice() {
  for (const VulkanDeviceInfo& d : ListVulkanDevices())
    if (d.usable) return true;
  return false;
}

#define REQUIRE_VULKAN()                                                   \
  do {                                                                     \
    if (!HaveDevice()) {                                                   \
      if (std::getenv("PADDOCK_REQUIRE_VULKAN") != nullptr)                \
        FAIL() << "no usable Vulkan device (install mesa-vulkan-drivers)"; \
      GTEST_SKIP() << "no Vulkan device";                                  \
    }                                                                      \
  } while (0)

// y = W x for `tokens` rows of x, on the device, by one of the type's matrix shaders.
std::vector<float> DeviceMatmul(vk::Device& dev, vk::MatKind kind, GgmlType type,
                                const std::vector<uint8_t>& w, int rows, int cols,
                                const std::vector<float>& x, int tokens,
                                const std::vector<float>* bias) {
  const GgmlType types[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ8_0,
                            GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};
  int ti = -1;
  for (int i = 0; i < vk::kWeightTypes; ++i)
    if (types[i] == type) ti = i;
  vk::Buffer bw = dev.Alloc(w.size() + 16, false, "w");
  vk::Buffer bx = dev.Alloc(x.size() * 4, false, "x");
  vk::Buffer by = dev.Alloc(static_cast<size_t>(rows) * tokens * 4, true, "y");
  vk::Buffer bb = dev.Alloc(static_cast<size_t>(rows) * 4, false, "b");
  dev.Upload(bw, 0, w.data(), w.size());
  dev.Upload(bx, 0, x.data(), x.size() * 4);
  if (bias != nullptr) dev.Upload(bb, 0, bias->data(), bias->size() * 4);
  const size_t row_bytes = w.size() / static_cast<size_t>(rows);
  vk::MatmulPush p{bw.addr,
                   bx.addr,
                   by.addr,
                   bias != nullptr ? bb.addr : 0,
                   static_cast<uint32_t>(rows),
                   static_cast<uint32_t>(cols),
                   static_cast<uint32_t>(tokens),
                   static_cast<uint32_t>(row_bytes),
                   static_cast<uint32_t>(cols),
                   static_cast<uint32_t>(rows)};
  dev.OneShot([&](VkCommandBuffer cb) {
    // (The matrix-vector shaders on fewer workgroups than rows: each loops over several.)
    const uint32_t gx = kind == vk::MatKind::kTiled ? static_cast<uint32_t>((rows + 31) / 32)
                                                    : static_cast<uint32_t>(std::min(rows, 3));
    const uint32_t gy =
        static_cast<uint32_t>(kind == vk::MatKind::kTiled ? (tokens + 31) / 32 : (tokens + 7) / 8);
    dev.Dispatch(cb, vk::MatShader(kind, ti), &p, sizeof(p), gx, gy);
    dev.Barrier(cb);
  });
  std::vector<float> y(static_cast<size_t>(rows) * tokens);
  std::memcpy(y.data(), by.map, y.size() * 4);
  for (vk::Buffer* b : {&bw, &bx, &by, &bb}) dev.Free(b);
  return y;
}

TEST(Vulkan, MatmulShadersMatchTheScalarReference) {
  REQUIRE_VULKAN();
  vk::Device dev(0);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  struct Case {
    GgmlType type;
    int cols;
  };
  // Float types with a row tail (cols not a multiple of 32); the block types at their blocks.
  const Case cases[] = {{GgmlType::kF32, 100},  {GgmlType::kF16, 72},   {GgmlType::kBF16, 40},
                        {GgmlType::kQ8_0, 96},  {GgmlType::kQ4_0, 160}, {GgmlType::kQ4_K, 512},
                        {GgmlType::kQ5_K, 256}, {GgmlType::kQ6_K, 512}};
  for (const Case& c : cases) {
    const TypeTraits& tr = Traits(c.type);
    ASSERT_NE(tr.from_float, nullptr) << tr.name;
    for (int rows : {1, 13, 37}) {
      for (int tokens : {1, 3, 8, 11, 40}) {  // one, partial and full tiles, tails
        const std::vector<vk::MatKind> kinds =
            tokens > 8 ? std::vector<vk::MatKind>{vk::MatKind::kTiled}
            : dev.subgroup_arith()
                ? std::vector<vk::MatKind>{vk::MatKind::kMatvec, vk::MatKind::kMatvecShared,
                                           vk::MatKind::kTiled}
                : std::vector<vk::MatKind>{vk::MatKind::kMatvecShared, vk::MatKind::kTiled};
        std::vector<float> wf(static_cast<size_t>(rows) * c.cols),
            x(static_cast<size_t>(tokens) * c.cols);
        for (float& v : wf) v = u(rng);
        for (float& v : x) v = u(rng);
        const size_t row_bytes = static_cast<size_t>(c.cols) / tr.block_size * tr.type_size;
        std::vector<uint8_t> w(row_bytes * rows);
        for (int r = 0; r < rows; ++r)
          tr.from_float(wf.data() + static_cast<size_t>(r) * c.cols, w.data() + r * row_bytes,
                        c.cols);
        std::vector<float> deq(wf.size()), bias(static_cast<size_t>(rows));
        for (float& v : bias) v = u(rng);
        for (int r = 0; r < rows; ++r)
          tr.to_float(w.data() + r * row_bytes, deq.data() + static_cast<size_t>(r) * c.cols,
                      c.cols);
        for (vk::MatKind kind : kinds) {
          const std::vector<float> y =
              DeviceMatmul(dev, kind, c.type, w, rows, c.cols, x, tokens, &bias);
          for (int t = 0; t < tokens; ++t) {
            for (int r = 0; r < rows; ++r) {
              double ref = bias[static_cast<size_t>(r)], mag = 0;
              for (int k = 0; k < c.cols; ++k) {
                const double a = deq[static_cast<size_t>(r) * c.cols + k],
                             b = x[static_cast<size_t>(t) * c.cols + k];
                ref += a * b;
                mag += std::fabs(a * b);
              }
              EXPECT_NEAR(y[static_cast<size_t>(t) * rows + r], ref, 1e-5 * (mag + 1))
                  << tr.name << " shader " << static_cast<int>(kind) << " rows " << rows
                  << " tokens " << tokens << " at (" << t << ", " << r << ")";
            }
          }
        }
      }
    }
  }
}

TEST(Vulkan, Stories260KGoldenGreedyOutput) {
  REQUIRE_VULKAN();
  EngineOptions eo;
  eo.model_path = test::ModelPath("stories260K.bin");
  eo.tokenizer_path = test::ModelPath("tok512.bin");
  eo.device = "vulkan";
  auto e = Engine::Create(eo);
  EXPECT_EQ(e->info().device, "vulkan:0");
  std::string g = test::ReadFile(test::ModelPath("stories260K.expected_t0.txt"));
  if (!g.empty() && g.back() == '\n') g.pop_back();
  const GenerateResult r = e->Generate("", test::Greedy(256));
  EXPECT_EQ(r.text, g);
  EXPECT_EQ(r.generated_tokens, 256);
}

std::unique_ptr<Engine> Load(const std::string& path, const std::string& device,
                             int gpu_layers = -1) {
  EngineOptions eo;
  eo.model_path = path;
  eo.threads = 2;
  eo.device = device;
  eo.gpu_layers = gpu_layers;
  eo.forward.int8_activations = false;  // the CPU's float path: the device's arithmetic
  eo.forward.bf16_dot = false;
  return Engine::Create(eo);
}

int Argmax(const float* v, int n) {
  return static_cast<int>(std::max_element(v, v + n) - v);
}

// The largest |a - b| over n logits, and their scale (the largest |a|, at least 1).
float MaxDiff(const float* a, const float* b, int n, float* scale) {
  float diff = 0;
  *scale = 1;
  for (int k = 0; k < n; ++k) {
    *scale = std::max(*scale, std::fabs(a[k]));
    diff = std::max(diff, std::fabs(a[k] - b[k]));
  }
  return diff;
}

// The CPU's greedy continuation of a prompt, then the device fed the same tokens, all at once
// (prefill) and one at a time (decode): the same argmax at every position, unless the CPU's
// top two are within the logits' agreement (a near-tie, named); perplexity within 0.1%.
void CompareWithCpu(const std::string& name, const std::string& path) {
  auto cpu = Load(path, "cpu");
  auto dev = Load(path, "vulkan");
  const int V = cpu->info().n_vocab;
  std::vector<int32_t> seq = {1, 17, 42, 99, 5, 230, 7};
  for (int i = 0; i < 12; ++i) {
    const float* l = cpu->Evaluate(seq, 0);
    seq.push_back(Argmax(l, V));
  }
  const std::vector<int32_t> in(seq.begin(), seq.end() - 1);
  std::vector<float> ref(cpu->EvaluateAll(in, 0), cpu->EvaluateAll(in, 0) + in.size() * V);
  const float* all = dev->EvaluateAll(in, 0);
  std::vector<float> got(all, all + in.size() * V);
  double nll_cpu = 0, nll_dev = 0;
  for (size_t p = 0; p < in.size(); ++p) {
    const float* a = ref.data() + p * V;
    const float* b = got.data() + p * V;
    float scale = 1;
    EXPECT_LE(MaxDiff(a, b, V, &scale), 2e-3f * scale) << name << " position " << p;
    const int ta = Argmax(a, V), tb = Argmax(b, V);
    if (ta != tb) {
      std::vector<float> s(a, a + V);
      std::nth_element(s.begin(), s.begin() + 1, s.end(), std::greater<float>());
      EXPECT_LT(s[0] - s[1], 4e-3f * scale)
          << name << " position " << p << ": " << ta << " vs " << tb << " is not a near-tie";
      std::printf("[ near-tie ] %s position %zu: cpu %d, vulkan %d (gap %g)\n", name.c_str(), p, ta,
                  tb, static_cast<double>(s[0] - s[1]));
    }
    auto nll = [&](const float* l) {
      double m = l[0], z = 0;
      for (int k = 0; k < V; ++k) m = std::max(m, static_cast<double>(l[k]));
      for (int k = 0; k < V; ++k) z += std::exp(l[k] - m);
      return -(l[seq[p + 1]] - m - std::log(z));
    };
    nll_cpu += nll(a);
    nll_dev += nll(b);
  }
  const double ppl_cpu = std::exp(nll_cpu / in.size()), ppl_dev = std::exp(nll_dev / in.size());
  EXPECT_NEAR(ppl_dev / ppl_cpu, 1.0, 1e-3) << name;
  // Decode: one token per step, each the device's own step of one row.
  for (size_t p = 0; p < in.size(); ++p) {
    const float* l = dev->Evaluate({in[p]}, static_cast<int>(p));
    const float* a = ref.data() + p * V;
    float scale = 1;
    EXPECT_LE(MaxDiff(a, l, V, &scale), 2e-3f * scale) << name << " decode position " << p;
  }
}

std::vector<test::SynthVariant> Variants() {
  std::vector<test::SynthVariant> v = test::DenseVariants();
  const SynthSpec base;
  // Each weight type; rows of 256 for the k-quants' blocks.
  for (GgmlType t : {GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0, GgmlType::kQ4_0,
                     GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    SynthSpec s = base;
    s.type = t;
    if (Traits(t).block_size == 256) {
      s.dim = 256;
      s.ffn_dim = 256;
    }
    v.push_back({std::string("llama_") + Traits(t).name, s});
  }
  SynthSpec q4km = base;  // llama.cpp's Q4_K_M mix: Q4_K with Q6_K rows
  q4km.dim = 256;
  q4km.ffn_dim = 512;
  q4km.q4_k_m = true;
  v.push_back({"llama_q4_k_m", q4km});
  return v;
}

TEST(Vulkan, SyntheticModelsOfEachTypeAndArchitectureMatchTheCpu) {
  REQUIRE_VULKAN();
  for (const test::SynthVariant& v : Variants()) {
    const std::string path = test::TempPath("vk-" + v.name + ".gguf");
    WriteSyntheticModel(v.spec, path);
    CompareWithCpu(v.name, path);
  }
}

// Partial offload: the first layers on the device, the rest and the output head on the CPU
// (their KV in host memory): the logits of all on the device, the CPU's, and the same text.
TEST(Vulkan, HalfTheLayersOffloadedEqualAllOfThem) {
  REQUIRE_VULKAN();
  SynthSpec q4k;
  q4k.dim = 256;
  q4k.ffn_dim = 256;
  q4k.n_layers = 4;
  q4k.type = GgmlType::kQ4_K;
  const std::string synth = test::TempPath("vk-offload-q4k.gguf");
  WriteSyntheticModel(q4k, synth);
  for (const std::string& path : {test::ModelPath("stories260K.gguf"), synth}) {
    auto all = Load(path, "vulkan");
    const int layers = all->info().n_layers, V = all->info().n_vocab;
    auto half = Load(path, "vulkan", layers / 2);
    auto cpu = Load(path, "cpu");
    const std::vector<int32_t> seq = all->Tokenize("Once upon a time, a little dog", true);
    std::vector<float> a(all->EvaluateAll(seq, 0), all->EvaluateAll(seq, 0) + seq.size() * V);
    const float* h = half->EvaluateAll(seq, 0);
    const float* c = cpu->EvaluateAll(seq, 0);
    for (size_t i = 0; i < seq.size() * V; ++i) {
      const float scale = std::max(1.0f, std::fabs(c[i]));
      ASSERT_NEAR(h[i], a[i], 2e-3f * scale) << path << " row " << i / V;
      ASSERT_NEAR(h[i], c[i], 2e-3f * scale) << path << " row " << i / V;
    }
    const GenerateResult ra = all->Generate("Once upon a time", test::Greedy(48));
    const GenerateResult rh = half->Generate("Once upon a time", test::Greedy(48));
    EXPECT_EQ(rh.text, ra.text) << path;
  }
}

TEST(Vulkan, PerplexityWithinATenthOfAPercentOfTheCpu) {
  REQUIRE_VULKAN();
  const std::string text = test::ReadFile(test::ModelPath("stories260K.expected_t0.txt"));
  EvalOptions o;
  o.ctx = 64;
  auto cpu = Load(test::ModelPath("stories260K.gguf"), "cpu");
  auto dev = Load(test::ModelPath("stories260K.gguf"), "vulkan");
  const double a = Perplexity(*cpu, text, o).ppl, b = Perplexity(*dev, text, o).ppl;
  EXPECT_NEAR(b / a, 1.0, 1e-3) << "cpu " << a << " vulkan " << b;
}

// Continuous batching on the device: 8 requests at once, each equal to itself alone; the
// second run of a prompt takes its KV from the prefix cache and says the same.
TEST(Vulkan, ConcurrentRequestsEqualAloneAndThePrefixCacheHits) {
  REQUIRE_VULKAN();
  EngineOptions eo;
  eo.model_path = test::ModelPath("stories260K.gguf");
  eo.device = "vulkan";
  eo.max_batch = 64;
  auto svc = Service::Create(Engine::Create(eo), {});
  const char* seeds[] = {
      "Once upon a time", "Lily and Tom went to the park",
      "The sun was hot.", "A little dog",
      "Mom said",         "One day, a big bird flew over the tree and saw a cat.",
      "Tim had",          "The cat and the dog were friends. They"};
  RequestOptions ro;
  ro.generate.max_tokens = 40;
  ro.generate.sampling.temperature = 0;
  auto run = [&](const std::vector<int>& which) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i : which) {
      std::shared_ptr<RequestStream> st;
      EXPECT_EQ(svc->Submit(svc->engine().Tokenize(seeds[i], true), ro, &st),
                SubmitStatus::kAccepted);
      streams.push_back(st);
    }
    std::vector<std::string> out;
    for (auto& st : streams) {
      std::string text;
      while (st->Wait(&text, 60) != RequestStream::Status::kDone) {
      }
      out.push_back(st->result().text);
    }
    return out;
  };
  std::vector<std::string> alone;
  for (int i = 0; i < 8; ++i) alone.push_back(run({i})[0]);
  const std::vector<std::string> together = run({0, 1, 2, 3, 4, 5, 6, 7});
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(together[static_cast<size_t>(i)], alone[static_cast<size_t>(i)]) << i;
  const ServiceStats st = svc->Stats();
  EXPECT_GT(st.prefix_hits, 0u);  // (every prompt ran before)
}

TEST(Vulkan, RefusesWhatItCannotRunByName) {
  REQUIRE_VULKAN();
  auto expect_error = [](const std::string& path, const std::string& device, uint64_t memory,
                         const std::string& needle) {
    EngineOptions eo;
    eo.model_path = path;
    eo.device = device;
    eo.device_memory = memory;
    try {
      Engine::Create(eo);
      ADD_FAILURE() << "no error for " << path << " (" << needle << ")";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  SynthSpec moe;
  moe.n_experts = 4;
  moe.n_experts_used = 2;
  const std::string moe_path = test::TempPath("vk-moe.gguf");
  WriteSyntheticModel(moe, moe_path);
  expect_error(moe_path, "vulkan", 0,
               "the vulkan backend has no moe (layer 0); --device cpu runs it");
  // The refusal is CheckSupport's against VulkanCaps(), word for word: the one place.
  {
    auto m = LoadModel(moe_path);
    std::string direct;
    try {
      CheckSupport(*m, VulkanCaps(), SupportQuery{});
    } catch (const Error& e) {
      direct = e.what();
    }
    EngineOptions eo;
    eo.model_path = moe_path;
    eo.device = "vulkan";
    try {
      Engine::Create(eo);
      ADD_FAILURE() << "a mixture of experts on the vulkan backend";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(direct), std::string::npos) << e.what();
    }
    EXPECT_FALSE(direct.empty());
  }
  SynthSpec q3;
  q3.dim = 256;
  q3.ffn_dim = 256;
  q3.type = GgmlType::kQ3_K;
  const std::string q3_path = test::TempPath("vk-q3k.gguf");
  WriteSyntheticModel(q3, q3_path);
  expect_error(q3_path, "vulkan", 0, "no shader for Q3_K weights");
  // Hybrid recurrent models: the recurrent op named (the attention layers alone would run).
  for (const char* preset : {"tiny-qwen35", "tiny-lfm2"}) {
    const std::string path = test::TempPath(std::string("vk-") + preset + ".gguf");
    WriteSyntheticModel(SynthPreset(preset), path);
    expect_error(path, "vulkan", 0,
                 std::string("the vulkan backend has no ") +
                     (std::string(preset) == "tiny-lfm2" ? "short_conv" : "delta_net") +
                     " (layer 0); --device cpu runs it");
  }
  expect_error(test::ModelPath("stories260K.gguf"), "vulkan", 100000, "exceed the Vulkan device");
  expect_error(test::ModelPath("stories260K.gguf"), "vulkan:7", 0, "no Vulkan device 7");
  expect_error(test::ModelPath("stories260K.gguf"), "gpu", 0, "unknown device 'gpu'");
}

}  // namespace
}  // namespace paddock
