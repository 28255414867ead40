// server/lora_registry.cpp: the served LoRA adapters (lora_registry.h).
#include "server/lora_registry.h"

namespace paddock::server {

std::shared_ptr<const LoraAdapter> LoraRegistry::Find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Entry& e : entries_)
    if (e.name == name) return e.adapter;
  return nullptr;
}

std::vector<LoraRegistry::Entry> LoraRegistry::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_;
}

bool LoraRegistry::Add(Entry e) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Entry& x : entries_)
    if (x.name == e.name) return false;
  entries_.push_back(std::move(e));
  return true;
}

bool LoraRegistry::Remove(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->name == name) {
      entries_.erase(it);
      return true;
    }
  }
  return false;
}

}  // namespace paddock::server
