// server/response_store.cpp: the stored Responses API responses (response_store.h).
#include "server/response_store.h"

#include <iterator>

namespace paddock::server {

ResponseStore::List::iterator ResponseStore::Find(const std::string& id) {
  const auto it = index_.find(id);
  if (it == index_.end()) return lru_.end();
  lru_.splice(lru_.begin(), lru_, it->second);
  return lru_.begin();
}

void ResponseStore::Drop(List::iterator it) {
  bytes_ -= it->response.size() + it->conversation.size();
  index_.erase(it->id);
  lru_.erase(it);
}

void ResponseStore::Put(const std::string& id, std::string response, std::string conversation) {
  const size_t size = response.size() + conversation.size();
  if (size > max_bytes_ || max_entries_ == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (const auto old = Find(id); old != lru_.end()) Drop(old);
  while (!lru_.empty() && (lru_.size() >= max_entries_ || bytes_ + size > max_bytes_))
    Drop(std::prev(lru_.end()));
  lru_.push_front({id, std::move(response), std::move(conversation)});
  index_[id] = lru_.begin();
  bytes_ += size;
}

bool ResponseStore::Response(const std::string& id, std::string* out) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = Find(id);
  if (it == lru_.end()) return false;
  *out = it->response;
  return true;
}

bool ResponseStore::Conversation(const std::string& id, std::string* out) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = Find(id);
  if (it == lru_.end()) return false;
  *out = it->conversation;
  return true;
}

bool ResponseStore::Erase(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = Find(id);
  if (it == lru_.end()) return false;
  Drop(it);
  return true;
}

}  // namespace paddock::server
