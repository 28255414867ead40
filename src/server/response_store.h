// server/response_store.h: the Responses API's stored responses (store: true, OpenAI's
// default), so previous_response_id continues a conversation and GET / DELETE
// /v1/responses/{id} work.
//
// With a data directory the store is an SQLite database there (responses.sqlite3, write-ahead
// log): a response is committed before its last bytes go to the client, so a restart (or a
// kill -9) keeps every answered response; several servers may share the file. Without one
// (--data-dir none) it is in memory, gone at restart. Either way retention is by count, bytes
// and age, least recently used out first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>

struct sqlite3;
struct sqlite3_stmt;

namespace paddock::server {

struct ResponseStoreOptions {
  std::string dir;  // "": in memory
  size_t max_entries = 10000;
  size_t max_bytes = size_t{256} << 20;
  double max_age_seconds = 30 * 86400.0;  // 0: no limit
  // A damaged database (quick_check at start, or SQLite reporting corruption later): moved
  // aside as responses.sqlite3.damaged-<time> and a fresh one started (one log line naming
  // both), or, with refuse_damaged, an error at start.
  bool refuse_damaged = false;
};

class ResponseStore {
 public:
  // Opens (creates) DIR/responses.sqlite3; Error naming the path when it cannot.
  explicit ResponseStore(const ResponseStoreOptions& o = {});
  ~ResponseStore();
  ResponseStore(const ResponseStore&) = delete;
  ResponseStore& operator=(const ResponseStore&) = delete;

  // Stores a response (its JSON object) and the conversation it ends (a JSON array of chat
  // messages); one larger than max_bytes alone is not stored. A failed write (a full disk) is
  // logged once and the response is not kept; serving goes on.
  void Put(const std::string& id, std::string response, std::string conversation);
  // False when the id is not stored (never, evicted, expired, deleted).
  bool Response(const std::string& id, std::string* out);
  bool Conversation(const std::string& id, std::string* out);
  bool Erase(const std::string& id);
  // Where the responses are kept, for messages ("memory" or the database's path).
  const std::string& where() const { return where_; }
  const ResponseStoreOptions& options() const { return opt_; }

 private:
  struct Entry {
    std::string id, response, conversation;
    double created = 0;
  };
  using List = std::list<Entry>;
  List::iterator Find(const std::string& id);  // (under mu_; end() if absent; most recent now)
  void Drop(List::iterator it);                // (under mu_)
  bool Get(const std::string& id, bool conversation, std::string* out);
  // (SQLite) runs a statement; false (logged once) on an error.
  bool Exec(const char* sql);
  // (SQLite) opens where_ and sets up the table; "" or why it cannot.
  std::string Open();
  // (SQLite) whether the open database passes quick_check.
  bool Healthy();
  // (SQLite, under mu_) the damaged database moved aside, a fresh one opened; false (logged)
  // if even that fails (the store then keeps nothing).
  bool Recover(const char* what);
  // (SQLite) whether an SQLite result code says the file is damaged.
  static bool Damaged(int rc);
  // (SQLite, under mu_) one response in one transaction; SQLITE_DONE or the failing code.
  int Store(const std::string& id, const std::string& response, const std::string& conversation,
            size_t size);
  void Retain(double now);  // (SQLite, under mu_) drops the expired, then the least used over
  void LogOnce(const char* what);

  ResponseStoreOptions opt_;
  std::string where_;
  std::mutex mu_;
  List lru_;  // most recent first
  std::unordered_map<std::string, List::iterator> index_;
  size_t bytes_ = 0;
  sqlite3* db_ = nullptr;
  bool logged_ = false;
};

// $XDG_DATA_HOME/paddock, else $HOME/.local/share/paddock ("" when neither is set).
std::string DefaultDataDir();

}  // namespace paddock::server
