// kv/kv_disk.cpp: the KV disk tier (kv_disk.h).
#include "kv/kv_disk.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "base/hash64.h"
#include "base/strings.h"
#include "base/timer.h"
#include "model/backend.h"

namespace paddock {

namespace {

constexpr char kMagic[8] = {'P', 'D', 'K', 'V', 'B', 'L', 'K', '1'};

struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t block_size;
  uint64_t identity;
  uint64_t hash;
  uint64_t parent;
  uint64_t payload_bytes;
  uint64_t checksum;  // over the header (this field zero), the tokens and the payload
};
static_assert(sizeof(FileHeader) == 56, "FileHeader is written as it is laid out");

int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t MtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

// pread/pwrite of exactly n bytes (false on an error or a short file).
bool ReadAll(int fd, void* dst, size_t n, off_t at) {
  uint8_t* p = static_cast<uint8_t*>(dst);
  while (n > 0) {
    const ssize_t r = pread(fd, p, n, at);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
    at += r;
  }
  return true;
}

bool WriteAll(int fd, const void* src, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(src);
  while (n > 0) {
    const ssize_t r = write(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

void MakeDirs(const std::string& dir, const char* what) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) Fail("%s %s: cannot create the directory: %s", what, dir.c_str(), ec.message().c_str());
}

// A temporary file's owner is gone (a process killed while writing): ".tmp.<pid>.<n>".
bool StaleTemp(const std::string& name) {
  if (name.rfind(".tmp.", 0) != 0) return false;
  const long pid = std::strtol(name.c_str() + 5, nullptr, 10);
  return pid > 0 && pid != getpid() && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

}  // namespace

KvDiskTier::KvDiskTier(const KvDiskOptions& o, uint64_t identity, int block_size,
                       const KvStore* store, int queue_blocks)
    : root_(o.dir),
      identity_(identity),
      block_size_(block_size),
      store_(store),
      block_bytes_(store->block_bytes()) {
  if (o.dir.empty()) Fail("--kv-disk: no directory given");
  dir_ = root_ + StrFormat("/%016" PRIx64, identity);
  MakeDirs(dir_, "--kv-disk");
  // A file written and removed now: an unwritable directory is an error at start, not later.
  const std::string probe = dir_ + StrFormat("/.tmp.%d.probe", static_cast<int>(getpid()));
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || close(fd) != 0)
    Fail("--kv-disk %s: the directory is not writable: %s", root_.c_str(), std::strerror(errno));
  unlink(probe.c_str());
  budget_ = o.budget_bytes;
  if (budget_ == 0) {
    struct statvfs vs {};
    budget_ = uint64_t{10} << 30;
    if (statvfs(root_.c_str(), &vs) == 0)
      budget_ = std::min<uint64_t>(budget_, static_cast<uint64_t>(vs.f_bavail) * vs.f_frsize / 2);
  }
  stats_.budget_bytes = budget_;
  ring_.resize(static_cast<size_t>(std::max(1, queue_blocks)));
  for (Item& it : ring_) it.tokens.resize(static_cast<size_t>(block_size));
  write_buf_.resize(sizeof(FileHeader) + static_cast<size_t>(block_size) * 4 + block_bytes_);
  read_tokens_.resize(static_cast<size_t>(block_size));
  writer_ = std::thread([this] { WriterLoop(); });
}

KvDiskTier::~KvDiskTier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  writer_.join();
}

std::string KvDiskTier::PathOf(uint64_t hash) const {
  return dir_ + StrFormat("/%02x/%016" PRIx64 ".kv", static_cast<unsigned>(hash >> 56), hash);
}

uint64_t KvDiskTier::Checksum(const uint8_t* header, const int32_t* tokens,
                              const uint8_t* payload) const {
  FileHeader h;
  std::memcpy(&h, header, sizeof h);
  h.checksum = 0;
  Hash64 x(HashBytes(&h, sizeof h, identity_));
  x.Update(tokens, static_cast<size_t>(block_size_) * 4);  // a multiple of 32 bytes or last
  const uint64_t t = x.Digest();
  return HashBytes(payload, block_bytes_, t);
}

bool KvDiskTier::Read(uint64_t hash, uint64_t parent, const int32_t* tokens, uint8_t* dst) {
  const double t0 = NowSeconds();
  const std::string path = PathOf(hash);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.misses++;
    return false;
  }
  const size_t tok_bytes = static_cast<size_t>(block_size_) * 4;
  const size_t want = sizeof(FileHeader) + tok_bytes + block_bytes_;
  struct stat st {};
  FileHeader h{};
  std::vector<int32_t>& toks = read_tokens_;  // (sized at construction: no allocation per read)
  bool ok = fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == want &&
            ReadAll(fd, &h, sizeof h, 0) && std::memcmp(h.magic, kMagic, 8) == 0 &&
            h.version == 1 && h.block_size == static_cast<uint32_t>(block_size_) &&
            h.identity == identity_ && h.hash == hash && h.parent == parent &&
            h.payload_bytes == block_bytes_ &&
            ReadAll(fd, toks.data(), tok_bytes, static_cast<off_t>(sizeof h)) &&
            std::memcmp(toks.data(), tokens, tok_bytes) == 0 &&
            ReadAll(fd, dst, block_bytes_, static_cast<off_t>(sizeof h + tok_bytes));
  ok = ok && Checksum(reinterpret_cast<const uint8_t*>(&h), toks.data(), dst) == h.checksum;
  if (ok) futimens(fd, nullptr);  // last use: the least recently used go first
  close(fd);
  std::lock_guard<std::mutex> lock(mu_);
  if (!ok) {
    // Torn, truncated, flipped or not this content: removed, so it is computed and saved again.
    unlink(path.c_str());
    if (auto it = index_.find(path); it != index_.end()) {
      stats_.bytes_on_disk -= std::min(stats_.bytes_on_disk, it->second.bytes);
      index_.erase(it);
    }
    stats_.corrupt++;
    std::fprintf(stderr, "paddock: kv-disk: %s failed its check; removed (recomputed)\n",
                 path.c_str());
    return false;
  }
  if (auto [it, fresh] = index_.try_emplace(path, FileInfo{want, NowNs()}); !fresh)
    it->second.time = NowNs();
  else
    stats_.bytes_on_disk += want;  // (saved by another process sharing the directory)
  stats_.hits++;
  stats_.bytes_read += want;
  stats_.read_seconds += NowSeconds() - t0;
  return true;
}

bool KvDiskTier::Offer(int32_t block, uint64_t hash, uint64_t parent, const int32_t* tokens) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (writes_stopped_.load(std::memory_order_relaxed) || count_ == ring_.size() || stop_) {
      stats_.dropped_writes++;
      return false;
    }
    Item& it = ring_[(head_ + count_) % ring_.size()];
    it.block = block;
    it.hash = hash;
    it.parent = parent;
    std::copy(tokens, tokens + block_size_, it.tokens.begin());
    count_++;
  }
  cv_.notify_one();
  return true;
}

void KvDiskTier::TakeWritten(std::vector<int32_t>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  out->insert(out->end(), written_.begin(), written_.end());
  written_.clear();
  written_ready_.store(false, std::memory_order_release);
}

void KvDiskTier::CancelQueued(std::vector<int32_t>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t keep = busy_ ? 1 : 0;  // the head is being written: it stays
  while (count_ > keep) {
    out->push_back(ring_[(head_ + count_ - 1) % ring_.size()].block);
    count_--;
    stats_.dropped_writes++;
  }
}

void KvDiskTier::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return scanned_ && count_ == 0 && !busy_; });
}

KvDiskStats KvDiskTier::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  KvDiskStats s = stats_;
  s.writes_stopped = writes_stopped_.load();
  return s;
}

void KvDiskTier::StopWrites(const std::string& why) {
  if (writes_stopped_.exchange(true)) return;
  std::fprintf(stderr,
               "paddock: kv-disk: writes stopped (%s); blocks already saved are still read\n",
               why.c_str());
}

void KvDiskTier::Scan() {
  std::error_code ec;
  std::unordered_map<std::string, FileInfo> found;
  uint64_t total = 0;
  for (auto it = std::filesystem::recursive_directory_iterator(
           root_, std::filesystem::directory_options::skip_permission_denied, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const std::string name = it->path().filename().string();
    const std::string path = it->path().string();
    if (StaleTemp(name)) {
      unlink(path.c_str());  // a writer killed mid-file: never renamed, never read
      continue;
    }
    if (name.size() < 3 || name.compare(name.size() - 3, 3, ".kv") != 0) continue;
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) continue;
    found[path] = {static_cast<uint64_t>(st.st_size), MtimeNs(st)};
    total += static_cast<uint64_t>(st.st_size);
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [path, info] : found) {  // (reads since start may have indexed some already)
    if (index_.emplace(path, info).second) stats_.bytes_on_disk += info.bytes;
  }
  Evict();
  scanned_ = true;
}

void KvDiskTier::Evict() {
  if (stats_.bytes_on_disk <= budget_) return;
  std::vector<std::pair<int64_t, std::string>> order;
  order.reserve(index_.size());
  for (const auto& [path, info] : index_) order.emplace_back(info.time, path);
  std::sort(order.begin(), order.end());
  const uint64_t target = budget_ - budget_ / 10;  // a tenth of room, so eviction is rare
  for (const auto& [time, path] : order) {
    if (stats_.bytes_on_disk <= target) break;
    auto it = index_.find(path);
    unlink(path.c_str());
    stats_.bytes_on_disk -= std::min(stats_.bytes_on_disk, it->second.bytes);
    index_.erase(it);
    stats_.evicted++;
  }
}

bool KvDiskTier::WriteOne(const Item& it) {
  const std::string path = PathOf(it.hash);
  if (access(path.c_str(), F_OK) == 0) return true;  // saved already (here or by a replica)
  const size_t tok_bytes = static_cast<size_t>(block_size_) * 4;
  FileHeader h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = 1;
  h.block_size = static_cast<uint32_t>(block_size_);
  h.identity = identity_;
  h.hash = it.hash;
  h.parent = it.parent;
  h.payload_bytes = block_bytes_;
  uint8_t* payload = write_buf_.data() + sizeof h + tok_bytes;
  store_->ReadBlock(it.block, payload);
  h.checksum = Checksum(reinterpret_cast<const uint8_t*>(&h), it.tokens.data(), payload);
  std::memcpy(write_buf_.data(), &h, sizeof h);
  std::memcpy(write_buf_.data() + sizeof h, it.tokens.data(), tok_bytes);
  const std::string sub = path.substr(0, path.rfind('/'));
  const std::string tmp =
      sub + StrFormat("/.tmp.%d.%" PRIu64, static_cast<int>(getpid()), tmp_counter_++);
  mkdir(sub.c_str(), 0755);  // (EEXIST is the common case)
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  bool ok = fd >= 0 && WriteAll(fd, write_buf_.data(), write_buf_.size());
  const int err = errno;
  if (fd >= 0) ok = close(fd) == 0 && ok;
  // rename() replaces atomically: a reader sees the old file, the new one, or none.
  ok = ok && rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) {
    const int e = errno != 0 ? errno : err;
    unlink(tmp.c_str());
    std::lock_guard<std::mutex> lock(mu_);
    stats_.write_errors++;
    StopWrites(StrFormat("writing %s: %s", tmp.c_str(), std::strerror(e)));
    return false;
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.blocks_written++;
  stats_.bytes_written += write_buf_.size();
  if (index_.emplace(path, FileInfo{write_buf_.size(), NowNs()}).second)
    stats_.bytes_on_disk += write_buf_.size();
  Evict();
  return true;
}

void KvDiskTier::WriterLoop() {
  // Below the compute threads (nice +10, this thread only): on a machine with no spare core the
  // steps come first and the writes take what is left.
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
  Scan();
  idle_cv_.notify_all();
  for (;;) {
    Item it;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || count_ > 0; });
      if (count_ == 0) return;  // stopping with nothing queued
      std::swap(it, ring_[head_]);
      busy_ = true;
    }
    if (!writes_stopped_.load()) WriteOne(it);
    {
      std::lock_guard<std::mutex> lock(mu_);
      const int32_t block = it.block;
      std::swap(it, ring_[head_]);  // the slot keeps its token buffer
      head_ = (head_ + 1) % ring_.size();
      count_--;
      busy_ = false;
      written_.push_back(block);
      written_ready_.store(true, std::memory_order_release);
    }
    idle_cv_.notify_all();
  }
}

uint64_t FileContentIdentity(const std::string& path, const std::string& dir) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) Fail("%s: %s", path.c_str(), std::strerror(errno));
  const std::string ids = dir + "/.identities";
  const std::string key =
      ids + StrFormat("/%" PRIx64 "-%" PRIx64 "-%" PRIx64 "-%" PRIx64,
                      static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
                      static_cast<uint64_t>(st.st_size), static_cast<uint64_t>(MtimeNs(st)));
  if (FILE* f = std::fopen(key.c_str(), "r")) {
    uint64_t v = 0;
    const bool ok = std::fscanf(f, "%" SCNx64, &v) == 1;
    std::fclose(f);
    if (ok) return v;
  }
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) Fail("%s: %s", path.c_str(), std::strerror(errno));
  std::vector<uint8_t> buf(size_t{4} << 20);  // a multiple of 32: one stream over the file
  Hash64 h(static_cast<uint64_t>(st.st_size));
  for (bool eof = false; !eof;) {
    size_t got = 0;  // fill the buffer whole, so every piece but the last is a multiple of 32
    while (got < buf.size()) {
      const ssize_t r = read(fd, buf.data() + got, buf.size() - got);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        close(fd);
        Fail("%s: %s", path.c_str(), std::strerror(errno));
      }
      if (r == 0) {
        eof = true;
        break;
      }
      got += static_cast<size_t>(r);
    }
    h.Update(buf.data(), got);
  }
  close(fd);
  const uint64_t v = h.Digest();
  MakeDirs(ids, "--kv-disk");
  const std::string tmp = key + StrFormat(".tmp.%d", static_cast<int>(getpid()));
  if (FILE* f = std::fopen(tmp.c_str(), "w")) {
    std::fprintf(f, "%016" PRIx64 "\n", v);
    if (std::fclose(f) == 0) std::rename(tmp.c_str(), key.c_str());
  }
  return v;
}

}  // namespace paddock
