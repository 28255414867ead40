#include "test_util.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

namespace paddock::test {

std::string ModelsDir() {
  const char* env = std::getenv("PADDOCK_MODELS");
  return env != nullptr && *env != '\0' ? env : PADDOCK_MODELS_DEFAULT;
}

std::string ModelPath(const std::string& name) {
  return ModelsDir() + "/" + name;
}

namespace {
// Every temporary path handed out, removed when the test process exits.
std::mutex g_temp_mu;
std::vector<std::string>* g_temp_paths = nullptr;
void RemoveTempPaths() {
  std::lock_guard<std::mutex> lock(g_temp_mu);
  for (const auto& p : *g_temp_paths) std::remove(p.c_str());
}
}  // namespace

std::string TempPath(const std::string& stem) {
  static std::atomic<int> counter{0};
  const char* tmp = std::getenv("TMPDIR");
  std::string path = std::string(tmp != nullptr ? tmp : "/tmp") + "/paddock_test_" +
                     std::to_string(getpid()) + "_" + std::to_string(counter++) + "_" + stem;
  std::lock_guard<std::mutex> lock(g_temp_mu);
  if (g_temp_paths == nullptr) {
    g_temp_paths = new std::vector<std::string>();
    std::atexit(RemoveTempPaths);
  }
  g_temp_paths->push_back(path);
  return path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

ModelConfig TinyKvConfig(int layers, int kv_heads, int head_dim) {
  ModelConfig c;
  c.arch = "llama";
  c.dim = kv_heads * head_dim;
  c.n_layers = layers;
  c.n_heads = kv_heads;
  c.n_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.ffn_dim = 8;
  c.n_vocab = 100;
  c.context_length = 1 << 16;
  c.rope_dim = head_dim;
  return c;
}

KvCacheOptions TinyKvOptions(int block_size, size_t blocks, const ModelConfig& c) {
  KvCacheOptions o;
  o.block_size = block_size;
  o.k_type = o.v_type = KvDtype::kF32;
  o.memory_bytes =
      (blocks + 1) * static_cast<size_t>(block_size) * KvBytesPerToken(c, o);  // + null
  return o;
}

GenerateOptions Greedy(int max_tokens, bool ignore_eos) {
  GenerateOptions o;
  o.max_tokens = max_tokens;
  o.sampling.temperature = 0;
  o.ignore_eos = ignore_eos;
  return o;
}

double RelErr(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, static_cast<double>(std::fabs(a[i] - b[i])));
    den = std::max(den, static_cast<double>(std::fabs(b[i])));
  }
  return num / (den + 1e-12);
}

std::vector<SynthVariant> DenseVariants() {
  std::vector<SynthVariant> v;
  SynthSpec base;  // llama, GQA 4 heads / 2 KV heads
  v.push_back({"llama_gqa_f32", base});
  SynthSpec mha = base;
  mha.n_kv_heads = 4;
  v.push_back({"llama_mha", mha});
  SynthSpec mqa = base;
  mqa.n_kv_heads = 1;
  v.push_back({"llama_mqa", mqa});
  SynthSpec tied = base;
  tied.tied_embeddings = true;
  v.push_back({"llama_tied", tied});
  SynthSpec mistral = base;
  mistral.sliding_window = 5;
  v.push_back({"mistral_window", mistral});
  SynthSpec qwen2 = base;
  qwen2.arch = "qwen2";
  qwen2.qkv_bias = true;
  qwen2.rope_base = 1e6f;
  v.push_back({"qwen2_bias", qwen2});
  SynthSpec qwen3 = base;
  qwen3.arch = "qwen3";
  qwen3.qk_norm = true;
  qwen3.head_dim = 32;
  v.push_back({"qwen3_qknorm", qwen3});
  SynthSpec phi3 = base;
  phi3.arch = "phi3";
  v.push_back({"phi3_fused", phi3});
  SynthSpec gemma = base;
  gemma.arch = "gemma";
  gemma.tied_embeddings = true;
  v.push_back({"gemma_geglu", gemma});
  SynthSpec gemma2 = gemma;
  gemma2.arch = "gemma2";
  gemma2.sliding_window = 4;
  gemma2.attn_softcap = 1.5f;
  gemma2.final_softcap = 3.0f;
  gemma2.n_layers = 3;
  v.push_back({"gemma2_softcap", gemma2});
  SynthSpec gemma3 = gemma;
  gemma3.arch = "gemma3";
  gemma3.qk_norm = true;
  gemma3.sliding_window = 4;
  gemma3.rope_base = 1e6f;  // the global layers'; the local ones use 10000
  gemma3.n_layers = 7;      // local 0-4, global 5, local 6
  v.push_back({"gemma3_local_global", gemma3});
  return v;
}

}  // namespace paddock::test
