#include "test_util.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace paddock::test {

std::string ModelsDir() {
  const char* env = std::getenv("PADDOCK_MODELS");
  return env != nullptr && *env != '\0' ? env : PADDOCK_MODELS_DEFAULT;
}

std::string ModelPath(const std::string& name) { return ModelsDir() + "/" + name; }

std::string TempPath(const std::string& stem) {
  static std::atomic<int> counter{0};
  const char* tmp = std::getenv("TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/paddock_test_" + std::to_string(getpid()) +
         "_" + std::to_string(counter++) + "_" + stem;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace paddock::test
