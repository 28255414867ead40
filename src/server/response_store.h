// server/response_store.h: the Responses API's stored responses (store: true, OpenAI's
// default), so previous_response_id continues a conversation and GET / DELETE
// /v1/responses/{id} work. In memory only, bounded by count and bytes, least recently used
// first out; a restart forgets them (docs/api.md says so).
#pragma once

#include <cstddef>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>

namespace paddock::server {

class ResponseStore {
 public:
  ResponseStore(size_t max_entries, size_t max_bytes)
      : max_entries_(max_entries), max_bytes_(max_bytes) {}
  // Stores a response (its JSON object) and the conversation it ends (a JSON array of chat
  // messages); one larger than max_bytes alone is not stored.
  void Put(const std::string& id, std::string response, std::string conversation);
  // False when the id is not stored (never, evicted, deleted).
  bool Response(const std::string& id, std::string* out);
  bool Conversation(const std::string& id, std::string* out);
  bool Erase(const std::string& id);

 private:
  struct Entry {
    std::string id, response, conversation;
  };
  using List = std::list<Entry>;
  List::iterator Find(const std::string& id);  // (under mu_; end() if absent; most recent now)
  void Drop(List::iterator it);                // (under mu_)
  size_t max_entries_, max_bytes_;
  std::mutex mu_;
  List lru_;  // most recent first
  std::unordered_map<std::string, List::iterator> index_;
  size_t bytes_ = 0;
};

}  // namespace paddock::server
