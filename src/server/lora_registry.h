// server/lora_registry.h: the LoRA adapters a server serves, each as a model id of its own on
// the base model (`serve --lora NAME=FILE[:SCALE]`, and at run time vLLM's
// /v1/load_lora_adapter and /v1/unload_lora_adapter). A request holds its adapter while it
// runs, so an unload never pulls one from under a generation.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace paddock {
class LoraAdapter;
}

namespace paddock::server {

class LoraRegistry {
 public:
  struct Entry {
    std::string name, path;
    float scale = 1;
    std::shared_ptr<const LoraAdapter> adapter;
  };
  std::shared_ptr<const LoraAdapter> Find(const std::string& name) const;
  std::vector<Entry> List() const;
  // False when the name is taken.
  bool Add(Entry e);
  // False when no adapter has the name.
  bool Remove(const std::string& name);

 private:
  mutable std::mutex mu_;
  std::vector<Entry> entries_;
};

}  // namespace paddock::server
