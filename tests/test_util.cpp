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

}  // namespace paddock::test
