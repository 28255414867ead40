// server/response_store.cpp: the stored Responses API responses (response_store.h).
#include "server/response_store.h"

#include <sqlite3.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <vector>

#include "base/strings.h"
#include "base/timer.h"

namespace paddock::server {

namespace {

// A prepared statement, finalized when it goes.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) {
    ok_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr) == SQLITE_OK;
  }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  Stmt& Text(int i, const std::string& v) {
    ok_ = ok_ && sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_STATIC) ==
                     SQLITE_OK;
    return *this;
  }
  Stmt& Real(int i, double v) {
    ok_ = ok_ && sqlite3_bind_double(s_, i, v) == SQLITE_OK;
    return *this;
  }
  Stmt& Int(int i, int64_t v) {
    ok_ = ok_ && sqlite3_bind_int64(s_, i, v) == SQLITE_OK;
    return *this;
  }
  // SQLITE_ROW, SQLITE_DONE, or an error code.
  int Step() { return ok_ ? sqlite3_step(s_) : SQLITE_ERROR; }
  std::string Column(int i) const {
    const auto* p = static_cast<const char*>(sqlite3_column_blob(s_, i));
    return std::string(p != nullptr ? p : "", static_cast<size_t>(sqlite3_column_bytes(s_, i)));
  }
  int64_t ColumnInt(int i) const { return sqlite3_column_int64(s_, i); }

 private:
  sqlite3_stmt* s_ = nullptr;
  bool ok_ = false;
};

}  // namespace

std::string DefaultDataDir() {
  if (const char* x = std::getenv("XDG_DATA_HOME"); x != nullptr && x[0] == '/')
    return std::string(x) + "/paddock";
  if (const char* h = std::getenv("HOME"); h != nullptr && h[0] != '\0')
    return std::string(h) + "/.local/share/paddock";
  return "";
}

ResponseStore::ResponseStore(const ResponseStoreOptions& o) : opt_(o), where_("memory") {
  if (o.dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(o.dir, ec);
  if (ec)
    Fail("--data-dir %s: cannot create the directory: %s", o.dir.c_str(), ec.message().c_str());
  where_ = o.dir + "/responses.sqlite3";
  std::string why = Open();
  if (why.empty() && Healthy()) return;
  // Damaged: it opens and fails quick_check, or SQLite says it is no database or malformed
  // (anything else, as a file it may not read, is an error naming it).
  const bool damaged = why.empty() || why.find("not a database") != std::string::npos ||
                       why.find("malformed") != std::string::npos;
  if (why.empty()) why = "it fails SQLite's quick_check";
  if (!damaged) Fail("--data-dir: %s", why.c_str());
  if (o.refuse_damaged)
    Fail(
        "--data-dir: %s is damaged (%s); move it aside, or start without --responses-if-damaged "
        "refuse to have that done",
        where_.c_str(), why.c_str());
  if (!Recover(why.c_str())) Fail("--data-dir: cannot start a fresh %s", where_.c_str());
}

std::string ResponseStore::Open() {
  if (sqlite3_open_v2(where_.c_str(), &db_,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    const std::string why = db_ != nullptr ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    return StrFormat("cannot open %s: %s", where_.c_str(), why.c_str());
  }
  sqlite3_busy_timeout(db_, 5000);  // other servers on the same file: wait for their writes
  // Write-ahead log: a commit is one append (readers never block it), and a process killed at
  // any point leaves every committed response; synchronous=NORMAL syncs at checkpoints (a
  // power loss may lose the last commits, never corrupt the file).
  const char* setup =
      "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
      "CREATE TABLE IF NOT EXISTS responses(id TEXT PRIMARY KEY, created REAL NOT NULL,"
      " used INTEGER NOT NULL, bytes INTEGER NOT NULL, response BLOB NOT NULL,"
      " conversation BLOB NOT NULL);"
      "CREATE INDEX IF NOT EXISTS responses_used ON responses(used);"
      "CREATE INDEX IF NOT EXISTS responses_created ON responses(created);";
  char* err = nullptr;
  if (sqlite3_exec(db_, setup, nullptr, nullptr, &err) != SQLITE_OK) {
    const std::string why = err != nullptr ? err : "unknown error";
    sqlite3_free(err);
    sqlite3_close(db_);
    db_ = nullptr;
    return StrFormat("cannot use %s: %s", where_.c_str(), why.c_str());
  }
  return "";
}

bool ResponseStore::Healthy() {
  Stmt check(db_, "PRAGMA quick_check");
  return check.Step() == SQLITE_ROW && check.Column(0) == "ok";
}

bool ResponseStore::Damaged(int rc) {
  return (rc & 0xff) == SQLITE_CORRUPT || (rc & 0xff) == SQLITE_NOTADB;
}

bool ResponseStore::Recover(const char* what) {
  if (db_ != nullptr) sqlite3_close_v2(db_);  // (closed once its open statements finish)
  db_ = nullptr;
  const std::string aside =
      StrFormat("%s.damaged-%lld", where_.c_str(), static_cast<long long>(EpochSeconds()));
  std::error_code ec;
  std::filesystem::rename(where_, aside, ec);
  for (const char* tail : {"-wal", "-shm"}) {
    std::error_code ignored;
    std::filesystem::rename(where_ + tail, aside + tail, ignored);
  }
  std::fprintf(stderr,
               "paddock: response store %s is damaged (%s): moved aside to %s; a fresh one "
               "starts (the responses stored before are in the file moved aside)\n",
               where_.c_str(), what, aside.c_str());
  if (ec) {
    std::fprintf(stderr, "paddock: response store: cannot move %s aside: %s\n", where_.c_str(),
                 ec.message().c_str());
    return false;
  }
  const std::string why = Open();
  if (!why.empty()) {
    std::fprintf(stderr, "paddock: response store: %s\n", why.c_str());
    return false;
  }
  return true;
}

ResponseStore::~ResponseStore() {
  if (db_ != nullptr) sqlite3_close(db_);
}

void ResponseStore::LogOnce(const char* what) {
  if (logged_) return;
  logged_ = true;
  std::fprintf(stderr, "paddock: response store %s: %s failed: %s (serving goes on)\n",
               where_.c_str(), what, db_ != nullptr ? sqlite3_errmsg(db_) : "");
}

bool ResponseStore::Exec(const char* sql) {
  if (sqlite3_exec(db_, sql, nullptr, nullptr, nullptr) == SQLITE_OK) return true;
  LogOnce(sql);
  return false;
}

ResponseStore::List::iterator ResponseStore::Find(const std::string& id) {
  const auto it = index_.find(id);
  if (it == index_.end()) return lru_.end();
  if (opt_.max_age_seconds > 0 && it->second->created < EpochSeconds() - opt_.max_age_seconds) {
    Drop(it->second);
    return lru_.end();
  }
  lru_.splice(lru_.begin(), lru_, it->second);
  return lru_.begin();
}

void ResponseStore::Drop(List::iterator it) {
  bytes_ -= it->response.size() + it->conversation.size();
  index_.erase(it->id);
  lru_.erase(it);
}

void ResponseStore::Retain(double now) {
  if (opt_.max_age_seconds > 0)
    Stmt(db_, "DELETE FROM responses WHERE created < ?").Real(1, now - opt_.max_age_seconds).Step();
  Stmt total(db_, "SELECT count(*), sum(bytes) FROM responses");
  if (total.Step() != SQLITE_ROW) return;
  int64_t n = total.ColumnInt(0), bytes = total.ColumnInt(1);
  const auto max_n = static_cast<int64_t>(opt_.max_entries);
  const auto max_b = static_cast<int64_t>(opt_.max_bytes);
  if (n <= max_n && bytes <= max_b) return;
  std::vector<std::string> out;  // least recently used first, until within both limits
  Stmt order(db_, "SELECT id, bytes FROM responses ORDER BY used");
  while ((n > max_n || bytes > max_b) && order.Step() == SQLITE_ROW) {
    out.push_back(order.Column(0));
    n--;
    bytes -= order.ColumnInt(1);
  }
  for (const std::string& id : out)
    Stmt(db_, "DELETE FROM responses WHERE id = ?").Text(1, id).Step();
}

void ResponseStore::Put(const std::string& id, std::string response, std::string conversation) {
  const size_t size = response.size() + conversation.size();
  if (size > opt_.max_bytes || opt_.max_entries == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (db_ == nullptr) {
    if (const auto old = Find(id); old != lru_.end()) Drop(old);
    while (!lru_.empty() && (lru_.size() >= opt_.max_entries || bytes_ + size > opt_.max_bytes))
      Drop(std::prev(lru_.end()));
    lru_.push_front({id, std::move(response), std::move(conversation), EpochSeconds()});
    index_[id] = lru_.begin();
    bytes_ += size;
    return;
  }
  for (int attempt = 0; attempt < 2 && db_ != nullptr; ++attempt) {
    const int rc = Store(id, response, conversation, size);
    if (rc == SQLITE_DONE) return;
    if (!Damaged(rc) || attempt > 0 || !Recover("SQLite reported corruption while storing")) {
      LogOnce("storing a response");
      return;
    }
  }
}

int ResponseStore::Store(const std::string& id, const std::string& response,
                         const std::string& conversation, size_t size) {
  const double now = EpochSeconds();
  int rc = sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return rc;
  Stmt put(db_,
           "INSERT OR REPLACE INTO responses(id, created, used, bytes, response, conversation)"
           " VALUES(?, ?, (SELECT coalesce(max(used), 0) + 1 FROM responses), ?, ?, ?)");
  rc = put.Text(1, id)
           .Real(2, now)
           .Int(3, static_cast<int64_t>(size))
           .Text(4, response)
           .Text(5, conversation)
           .Step();
  if (rc != SQLITE_DONE) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return rc;
  }
  Retain(now);
  rc = sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return rc;
  }
  return SQLITE_DONE;
}

bool ResponseStore::Get(const std::string& id, bool conversation, std::string* out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (db_ == nullptr) {
    const auto it = Find(id);
    if (it == lru_.end()) return false;
    *out = conversation ? it->conversation : it->response;
    return true;
  }
  const double now = EpochSeconds();
  const double cutoff = opt_.max_age_seconds > 0 ? now - opt_.max_age_seconds : -1e300;
  Stmt get(db_, conversation ? "SELECT conversation FROM responses WHERE id = ? AND created >= ?"
                             : "SELECT response FROM responses WHERE id = ? AND created >= ?");
  const int rc = get.Text(1, id).Real(2, cutoff).Step();
  if (rc != SQLITE_ROW) {
    if (Damaged(rc)) {
      Recover("SQLite reported corruption while reading");
    } else if (rc != SQLITE_DONE) {
      LogOnce("reading a response");
    }
    return false;
  }
  *out = get.Column(0);
  // Most recently used now (a sequence number: no two uses tie, whatever the clock says).
  Stmt(db_, "UPDATE responses SET used = (SELECT max(used) + 1 FROM responses) WHERE id = ?")
      .Text(1, id)
      .Step();
  return true;
}

bool ResponseStore::Response(const std::string& id, std::string* out) {
  return Get(id, false, out);
}

bool ResponseStore::Conversation(const std::string& id, std::string* out) {
  return Get(id, true, out);
}

bool ResponseStore::Erase(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (db_ == nullptr) {
    const auto it = Find(id);
    if (it == lru_.end()) return false;
    Drop(it);
    return true;
  }
  Stmt del(db_, "DELETE FROM responses WHERE id = ?");
  if (const int rc = del.Text(1, id).Step(); rc != SQLITE_DONE) {
    if (Damaged(rc)) {
      Recover("SQLite reported corruption while deleting");
    } else {
      LogOnce("deleting a response");
    }
    return false;
  }
  return sqlite3_changes(db_) > 0;
}

}  // namespace paddock::server
