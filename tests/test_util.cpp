#include "test_util.h"

#include <unistd.h>

#include <atomic>
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

std::string ModelPath(const std::string& name) { return ModelsDir() + "/" + name; }

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
  std::string path = std::string(tmp != nullptr ? tmp : "/tmp") + "/paddock_test_" + std::to_string(getpid()) +
                     "_" + std::to_string(counter++) + "_" + stem;
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

}  // namespace paddock::test
