// Proves the steady-state decode loop performs no heap allocation per token: every operator
// new in this binary is counted, and the count must not move between two tokens mid-stream.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "paddock/error.h"
#include "paddock/paddock.h"
#include "synth/synth.h"
#include "test_util.h"

namespace {
std::atomic<long> g_allocations{0};
}

void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  return operator new(n);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}

namespace paddock {
namespace {

void ExpectNoAllocationPerToken(Engine& e, const GenerateOptions& o) {
  std::vector<long> at_token;
  at_token.reserve(1024);
  GenerateResult r = e.Generate("Once upon a time", o, [&](std::string_view) {
    at_token.push_back(g_allocations.load());
    return true;
  });
  ASSERT_GE(at_token.size(), 60u);
  // Skip the first few tokens (lazy one-time set-up anywhere below is allowed there).
  for (size_t i = 5; i < at_token.size(); ++i) {
    ASSERT_EQ(at_token[i], at_token[4]) << "heap allocation between tokens 4 and " << i;
  }
}

TEST(Allocations, NonePerTokenInSteadyStateDecode) {
  EngineOptions eo;
  eo.model_path = test::ModelPath("stories260K.bin");
  eo.tokenizer_path = test::ModelPath("tok512.bin");
  eo.threads = 2;
  auto e = Engine::Create(eo);
  GenerateOptions o;
  o.max_tokens = 120;
  o.ignore_eos = true;
  o.sampling.temperature = 0.9f;  // exercise the full sampling chain
  o.sampling.top_k = 40;
  o.sampling.top_p = 0.9f;
  o.sampling.min_p = 0.01f;
  o.sampling.repeat_penalty = 1.1f;
  o.sampling.frequency_penalty = 0.1f;
  o.stop = {"zzzz-never"};
  ExpectNoAllocationPerToken(*e, o);
}

TEST(Allocations, NonePerTokenOnQuantizedWeights) {
  SynthSpec s;
  s.type = GgmlType::kQ4_0;
  s.context = 512;
  const std::string path = test::TempPath("alloc_q4.gguf");
  WriteSyntheticModel(s, path);
  EngineOptions eo;
  eo.model_path = path;
  eo.threads = 2;
  auto e = Engine::Create(eo);
  GenerateOptions o;
  o.max_tokens = 80;
  o.ignore_eos = true;
  o.sampling.temperature = 0;
  ExpectNoAllocationPerToken(*e, o);
}

}  // namespace
}  // namespace paddock
