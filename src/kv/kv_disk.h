// kv/kv_disk.h: the KV cache's disk tier. Full prefix-cache blocks are saved to files in a
// directory and read back by a later prefix lookup (this process or another, after a restart),
// instead of being computed again.
//
// A block's file is content-addressed: DIR/<identity>/<hh>/<hash>.kv, where identity names the
// model file's content, the tokenizer, the switches and kernels that shape the KV values, and
// hash is the prefix cache's chained block hash (the KV types, block size and every earlier
// token are in it). The file holds a header (identity, hash, parent hash, sizes), the block's
// tokens and its bytes (KvStore::ReadBlock's layout), with a checksum over all of it; a read
// compares everything and removes a file that does not match (torn, truncated, flipped), so a
// block is either exactly what was computed or recomputed.
//
// Writes run on the tier's own thread from a bounded queue: Offer() never waits (a full queue
// drops the block, counted); the writer reads the block's bytes from the store while the KV
// manager holds a reference to it, writes a temporary file and renames it (concurrent writers,
// other replicas on the same directory included, never expose a partial file), then hands the
// block back (TakeWritten). When the directory's files pass the byte budget the least recently
// used (file times: a read touches its file) are removed. A full disk or an unwritable file stops
// the writes with one log line; reads and serving go on.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace paddock {

class KvStore;

struct KvDiskOptions {
  std::string dir;
  uint64_t budget_bytes = 0;  // 0: 10 GiB, at most half the free space at start
  // Writes stopped by an error (a full disk, the directory deleted) are tried again this often
  // (the directory made again, a file written, the files counted again).
  double retry_seconds = 30;
};

struct KvDiskStats {
  uint64_t hits = 0, misses = 0;  // blocks read back; lookups that found no file
  uint64_t corrupt = 0;           // files that failed a check (removed)
  uint64_t refused = 0;           // entries not regular files (FIFOs, links, devices): never opened
  uint64_t blocks_written = 0, bytes_written = 0, bytes_read = 0;
  uint64_t dropped_writes = 0;  // blocks not saved: the queue was full or writes stopped
  uint64_t write_errors = 0;    // failed writes (the first stops the writes)
  uint64_t evicted = 0;         // files removed to keep the budget
  uint64_t bytes_on_disk = 0, budget_bytes = 0;
  double read_seconds = 0;
  bool writes_stopped = false;
};

class KvDiskTier {
 public:
  // Creates DIR/<identity> (Error naming the directory and the reason when it cannot be
  // created or written). `queue_blocks`: blocks waiting to be written at most.
  KvDiskTier(const KvDiskOptions& o, uint64_t identity, int block_size, const KvStore* store,
             int queue_blocks);
  // Writes what is queued, then stops.
  ~KvDiskTier();
  KvDiskTier(const KvDiskTier&) = delete;
  KvDiskTier& operator=(const KvDiskTier&) = delete;

  size_t block_bytes() const { return block_bytes_; }
  // The block with this content into dst (block_bytes()); false when there is no such file or
  // it fails a check (then it is removed). Called by the KV manager's thread.
  bool Read(uint64_t hash, uint64_t parent, const int32_t* tokens, uint8_t* dst);
  // Queues `block` (full, referenced by the caller until TakeWritten returns it) for writing;
  // false when it is not taken (queue full or writes stopped): the caller keeps its reference.
  bool Offer(int32_t block, uint64_t hash, uint64_t parent, const int32_t* tokens);
  // A hybrid model's recurrent-state snapshot after the block `hash` (parent, tokens: that
  // block's), n bytes copied now: a file of its own beside the block's (<hash>.st, the same
  // header and checks). ReadState: false when none is there or it fails a check.
  bool OfferState(uint64_t hash, uint64_t parent, const int32_t* tokens, const uint8_t* state,
                  size_t n);
  bool ReadState(uint64_t hash, uint64_t parent, const int32_t* tokens, uint8_t* dst, size_t n);
  // True when blocks are waiting to be handed back (cheap: no lock).
  bool has_written() const { return written_ready_.load(std::memory_order_acquire); }
  // Appends the blocks whose writes finished (or were skipped) since the last call.
  void TakeWritten(std::vector<int32_t>* out);
  // Memory pressure: takes back the queued blocks not being written yet (appended to out; their
  // writes are dropped, counted), so the pool can reuse them now.
  void CancelQueued(std::vector<int32_t>* out);
  // Waits until the queue is empty (paddock cache warm; tests).
  void Flush();
  KvDiskStats stats() const;
  const std::string& dir() const { return dir_; }

 private:
  struct Item {
    int32_t block = -1;  // -1: a state snapshot (its bytes in `state`)
    uint64_t hash = 0, parent = 0;
    std::vector<int32_t> tokens;
    std::vector<uint8_t> state;
  };
  bool Enqueue(int32_t block, uint64_t hash, uint64_t parent, const int32_t* tokens,
               const uint8_t* state, size_t n);
  bool ReadFile(uint64_t hash, uint64_t parent, const int32_t* tokens, uint8_t* dst, size_t payload,
                bool state);
  struct FileInfo {
    uint64_t bytes = 0;
    int64_t time = 0;  // last use, nanoseconds
  };
  std::string PathOf(uint64_t hash, bool state = false) const;
  void WriterLoop();
  void Scan();  // the directory's files into index_ (the writer thread, at start)
  bool WriteOne(const Item& it);
  void Evict();  // (under mu_) least recently used files out until under the budget
  void StopWrites(const std::string& why);
  uint64_t Checksum(const uint8_t* header, const int32_t* tokens, const uint8_t* payload,
                    size_t payload_bytes) const;

  std::string root_, dir_;        // the directory given; its identity's subdirectory
  std::atomic<int> dir_fd_{-1};   // dir_: every block file is reached from it, never a link
  std::vector<int> retired_fds_;  // earlier dir_fd_s (closed at the end: a read may hold one)
  double retry_seconds_ = 30;
  std::atomic<double> stopped_at_{0};  // when the writes stopped (or were last tried)
  // The writer, writes stopped: the directory made again and tried; resumes if it takes a file.
  bool TryResume();
  // The files under the directory counted again, the index replaced (the writer's).
  void Rescan();
  // The block files under the directory given (every identity's: the budget is the
  // directory's), with their sizes and times, stale temporaries removed; their bytes.
  uint64_t Walk(std::unordered_map<std::string, FileInfo>* found);
  // A block file's subdirectory (the hash's first byte) from dir_fd_, never through a link;
  // created when asked. -1: none (a link or another entry there: refused and counted).
  int OpenSub(uint64_t hash, bool create);
  // A name in dir_fd_'s tree that is not a regular file or directory: removed, counted, logged
  // once. (Under mu_.)
  void Refuse(const std::string& what);
  bool refusal_logged_ = false;
  uint64_t identity_;
  int block_size_;
  const KvStore* store_;
  size_t block_bytes_;
  uint64_t budget_;

  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::vector<Item> ring_;
  size_t head_ = 0, count_ = 0;
  bool busy_ = false, stop_ = false, scanned_ = false;
  std::vector<int32_t> written_;
  std::atomic<bool> written_ready_{false};
  std::atomic<bool> writes_stopped_{false};
  std::unordered_map<std::string, FileInfo> index_;  // path -> size, last use
  KvDiskStats stats_;
  std::vector<uint8_t> write_buf_;    // the writer thread's
  std::vector<int32_t> read_tokens_;  // Read's (the KV manager's thread)
  uint64_t tmp_counter_ = 0;
  std::thread writer_;
};

// A 64-bit identity of a file's content (a hash of every byte), remembered under
// DIR/.identities by (device, inode, size, modification and status-change times) with a hash
// of 257 pages sampled over the file, checked at every use: only the first start after a file
// changes reads it whole, and a rewrite in place (its times put back) is read again.
uint64_t FileContentIdentity(const std::string& path, const std::string& dir);

}  // namespace paddock
