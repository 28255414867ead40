// Shared helpers for the tests: where the shared test models live, temp files.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "kv/kv_manager.h"
#include "paddock/engine.h"
#include "synth/synth.h"

namespace paddock::test {

// True in the sanitizer builds, where the exhaustive tests walk fewer steps (they run 10-20x
// slower there and the Release stage runs them in full).
// (GCC defines __SANITIZE_*; clang answers __has_feature.)
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

// $PADDOCK_MODELS, else ../shared/models beside the repository.
std::string ModelsDir();
std::string ModelPath(const std::string& name);
// A fresh path under the system temp directory (removed by the OS, not by the test).
std::string TempPath(const std::string& stem);
std::string ReadFile(const std::string& path);

// A model configuration with tiny attention shapes: enough for the KV cache and the
// scheduler, no weights.
ModelConfig TinyKvConfig(int layers = 2, int kv_heads = 1, int head_dim = 4);
// F32 K/V in blocks of block_size tokens, room for exactly `blocks` blocks (+ the null block).
KvCacheOptions TinyKvOptions(int block_size, size_t blocks, const ModelConfig& c);

// Greedy generation of up to `max_tokens` tokens.
GenerateOptions Greedy(int max_tokens, bool ignore_eos = false);

// max |a - b| relative to max |b| (logits of two runs).
double RelErr(const std::vector<float>& a, const std::vector<float>& b);

// A synthetic model of a dense architecture variant (what each backend is checked on).
struct SynthVariant {
  std::string name;
  SynthSpec spec;
};
// Llama (GQA, MHA, MQA, tied), Mistral's window, Qwen2's biases, Qwen3's QK-norm, Phi-3's fused
// tensors, Gemma's GeGLU, Gemma 2's soft-caps and post-norms, Gemma 3's local/global layers;
// F32, small.
std::vector<SynthVariant> DenseVariants();

}  // namespace paddock::test
