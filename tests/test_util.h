// Shared helpers for the tests: where the shared test models live, temp files.
#pragma once

#include <string>

namespace paddock::test {

// $PADDOCK_MODELS, else ../shared/models beside the repository.
std::string ModelsDir();
std::string ModelPath(const std::string& name);
// A fresh path under the system temp directory (removed by the OS, not by the test).
std::string TempPath(const std::string& stem);
std::string ReadFile(const std::string& path);

}  // namespace paddock::test
