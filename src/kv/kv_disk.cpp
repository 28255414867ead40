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
  // (The directory given may be a link; below it, nothing is followed.)
  retry_seconds_ = o.retry_seconds;
  dir_fd_ = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir_fd_ < 0)
    Fail("--kv-disk %s: cannot open %s as a directory (not a link): %s", root_.c_str(),
         dir_.c_str(), std::strerror(errno));
  // A file written and removed now: an unwritable directory is an error at start, not later.
  const std::string probe = dir_ + StrFormat("/.tmp.%d.probe", static_cast<int>(getpid()));
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || close(fd) != 0)
    Fail("--kv-disk %s: the directory is not writable: %s", root_.c_str(), std::strerror(errno));
  unlink(probe.c_str());
  // The default: 10 GiB, at most half the file system's free space. A budget given is kept
  // as given, with a line saying so when it is over the free space (the writes stop when the
  // disk fills: serving goes on).
  budget_ = o.budget_bytes > 0 ? o.budget_bytes : uint64_t{10} << 30;
  struct statvfs vs {};
  if (statvfs(root_.c_str(), &vs) == 0) {
    const uint64_t free_bytes = static_cast<uint64_t>(vs.f_bavail) * vs.f_frsize;
    if (o.budget_bytes == 0) budget_ = std::min(budget_, free_bytes / 2);
    if (o.budget_bytes > free_bytes)
      std::fprintf(stderr,
                   "paddock: kv-disk: --kv-disk-budget %s is over the %s free under %s: block "
                   "files are written until the disk fills, then writes stop\n",
                   FormatBytes(o.budget_bytes).c_str(), FormatBytes(free_bytes).c_str(),
                   root_.c_str());
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
  if (dir_fd_ >= 0) close(dir_fd_);
  for (int fd : retired_fds_) close(fd);
}

bool KvDiskTier::TryResume() {
  stopped_at_ = NowSeconds();  // (the next try after another interval)
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return false;
  const int fd = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  // A file of a block's size written and removed: room for one at least.
  const std::string probe = StrFormat(".tmp.%d.probe", static_cast<int>(getpid()));
  const int pf =
      openat(fd, probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  bool ok = pf >= 0 && WriteAll(pf, write_buf_.data(), write_buf_.size());
  if (pf >= 0) ok = close(pf) == 0 && ok;
  unlinkat(fd, probe.c_str(), 0);
  if (!ok) {
    close(fd);
    return false;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    retired_fds_.push_back(dir_fd_.exchange(fd));
  }
  Rescan();
  writes_stopped_.store(false);
  std::fprintf(stderr, "paddock: kv-disk: writes resumed (%s takes files again)\n", dir_.c_str());
  return true;
}

void KvDiskTier::Rescan() {
  std::unordered_map<std::string, FileInfo> found;
  const uint64_t total = Walk(&found);
  std::lock_guard<std::mutex> lock(mu_);
  index_ = std::move(found);
  stats_.bytes_on_disk = total;
}

int KvDiskTier::OpenSub(uint64_t hash, bool create) {
  const std::string sub = StrFormat("%02x", static_cast<unsigned>(hash >> 56));
  const int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  int fd = openat(dir_fd_, sub.c_str(), flags);
  if (fd < 0 && errno == ENOENT && create && mkdirat(dir_fd_, sub.c_str(), 0755) == 0)
    fd = openat(dir_fd_, sub.c_str(), flags);
  const int e = errno;
  if (fd < 0 && (e == ELOOP || e == ENOTDIR)) {  // a link, a file, a FIFO where it goes
    std::lock_guard<std::mutex> lock(mu_);
    Refuse(dir_ + "/" + sub);
  }
  errno = e;
  return fd;
}

void KvDiskTier::Refuse(const std::string& what) {
  stats_.refused++;
  if (refusal_logged_) return;
  refusal_logged_ = true;
  std::fprintf(stderr,
               "paddock: kv-disk: %s is not a regular file or directory: refused (not read, not "
               "followed; counted in paddock_kv_disk_refused_total)\n",
               what.c_str());
}

std::string KvDiskTier::PathOf(uint64_t hash, bool state) const {
  return dir_ + StrFormat("/%02x/%016" PRIx64 ".%s", static_cast<unsigned>(hash >> 56), hash,
                          state ? "st" : "kv");
}

uint64_t KvDiskTier::Checksum(const uint8_t* header, const int32_t* tokens, const uint8_t* payload,
                              size_t payload_bytes) const {
  FileHeader h;
  std::memcpy(&h, header, sizeof h);
  h.checksum = 0;
  Hash64 x(HashBytes(&h, sizeof h, identity_));
  x.Update(tokens, static_cast<size_t>(block_size_) * 4);  // a multiple of 32 bytes or last
  const uint64_t t = x.Digest();
  return HashBytes(payload, payload_bytes, t);
}

bool KvDiskTier::Read(uint64_t hash, uint64_t parent, const int32_t* tokens, uint8_t* dst) {
  return ReadFile(hash, parent, tokens, dst, block_bytes_, false);
}

bool KvDiskTier::ReadState(uint64_t hash, uint64_t parent, const int32_t* tokens, uint8_t* dst,
                           size_t n) {
  return ReadFile(hash, parent, tokens, dst, n, true);
}

bool KvDiskTier::ReadFile(uint64_t hash, uint64_t parent, const int32_t* tokens, uint8_t* dst,
                          size_t payload, bool state) {
  const double t0 = NowSeconds();
  const std::string path = PathOf(hash, state);
  const std::string name = path.substr(path.rfind('/') + 1);
  // Never through a link, never blocking (a FIFO opens at once and is refused).
  const int sub = OpenSub(hash, false);
  const int fd =
      sub < 0 ? -1 : openat(sub, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  const int open_errno = errno;
  struct stat st {};
  if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
    close(fd);
    unlinkat(sub, name.c_str(), 0);  // (the entry itself, not what it may point to)
    close(sub);
    std::lock_guard<std::mutex> lock(mu_);
    Refuse(path);
    stats_.misses++;
    return false;
  }
  if (fd < 0) {
    if (sub >= 0 && open_errno == ELOOP) {  // a symbolic link where a block file goes
      unlinkat(sub, name.c_str(), 0);
      std::lock_guard<std::mutex> lock(mu_);
      Refuse(path);
    }
    if (sub >= 0) close(sub);
    std::lock_guard<std::mutex> lock(mu_);
    stats_.misses++;
    return false;
  }
  close(sub);
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  const size_t tok_bytes = static_cast<size_t>(block_size_) * 4;
  const size_t want = sizeof(FileHeader) + tok_bytes + payload;
  FileHeader h{};
  std::vector<int32_t>& toks = read_tokens_;  // (sized at construction: no allocation per read)
  bool ok = static_cast<size_t>(st.st_size) == want && ReadAll(fd, &h, sizeof h, 0) &&
            std::memcmp(h.magic, kMagic, 8) == 0 && h.version == 1 &&
            h.block_size == static_cast<uint32_t>(block_size_) && h.identity == identity_ &&
            h.hash == hash && h.parent == parent && h.payload_bytes == payload &&
            ReadAll(fd, toks.data(), tok_bytes, static_cast<off_t>(sizeof h)) &&
            std::memcmp(toks.data(), tokens, tok_bytes) == 0 &&
            ReadAll(fd, dst, payload, static_cast<off_t>(sizeof h + tok_bytes));
  ok =
      ok && Checksum(reinterpret_cast<const uint8_t*>(&h), toks.data(), dst, payload) == h.checksum;
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
  return Enqueue(block, hash, parent, tokens, nullptr, 0);
}

bool KvDiskTier::OfferState(uint64_t hash, uint64_t parent, const int32_t* tokens,
                            const uint8_t* state, size_t n) {
  return Enqueue(-1, hash, parent, tokens, state, n);
}

bool KvDiskTier::Enqueue(int32_t block, uint64_t hash, uint64_t parent, const int32_t* tokens,
                         const uint8_t* state, size_t n) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // (Writes stopped: a block is still queued once the retry interval is over, so the writer
    // tries the directory again.)
    const bool retry = NowSeconds() - stopped_at_.load() >= retry_seconds_;
    if ((writes_stopped_.load(std::memory_order_relaxed) && !retry) || count_ == ring_.size() ||
        stop_) {
      stats_.dropped_writes++;
      return false;
    }
    Item& it = ring_[(head_ + count_) % ring_.size()];
    it.block = block;
    it.hash = hash;
    it.parent = parent;
    std::copy(tokens, tokens + block_size_, it.tokens.begin());
    it.state.assign(state, state + n);  // (a snapshot's bytes: the slot may be reused meanwhile)
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
    const int32_t b = ring_[(head_ + count_ - 1) % ring_.size()].block;
    if (b >= 0) out->push_back(b);  // (a snapshot holds no block)
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
  stopped_at_ = NowSeconds();
  if (writes_stopped_.exchange(true)) return;
  std::fprintf(stderr,
               "paddock: kv-disk: writes stopped (%s); blocks already saved are still read\n",
               why.c_str());
}

uint64_t KvDiskTier::Walk(std::unordered_map<std::string, FileInfo>* found) {
  std::error_code ec;
  uint64_t total = 0;
  for (auto it = std::filesystem::recursive_directory_iterator(
           root_, std::filesystem::directory_options::skip_permission_denied, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->symlink_status(ec).type() != std::filesystem::file_type::regular) continue;
    const std::string name = it->path().filename().string();
    const std::string path = it->path().string();
    if (StaleTemp(name)) {
      unlink(path.c_str());  // a writer killed mid-file: never renamed, never read
      continue;
    }
    if (name.size() < 3 || (name.compare(name.size() - 3, 3, ".kv") != 0 &&
                            name.compare(name.size() - 3, 3, ".st") != 0))
      continue;
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0) continue;
    (*found)[path] = {static_cast<uint64_t>(st.st_size), MtimeNs(st)};
    total += static_cast<uint64_t>(st.st_size);
  }
  return total;
}

void KvDiskTier::Scan() {
  std::unordered_map<std::string, FileInfo> found;
  Walk(&found);
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
  const bool state = it.block < 0;
  const std::string path = PathOf(it.hash, state);
  const std::string name = path.substr(path.rfind('/') + 1);
  const int sub = OpenSub(it.hash, true);
  if (sub < 0) {  // refused (a link where the subdirectory goes) or not creatable
    const int e = errno;
    std::lock_guard<std::mutex> lock(mu_);
    stats_.dropped_writes++;
    if (e != ELOOP && e != ENOTDIR)  // the directory gone, the disk full, ...
      StopWrites(StrFormat("a subdirectory of %s: %s", dir_.c_str(), std::strerror(e)));
    return false;
  }
  struct SubFd {
    int fd;
    ~SubFd() { close(fd); }
  } sub_fd{sub};
  // saved already (here or by a replica): an entry of any kind is left to Read to judge
  if (faccessat(sub, name.c_str(), F_OK, AT_SYMLINK_NOFOLLOW) == 0) return true;
  const size_t tok_bytes = static_cast<size_t>(block_size_) * 4;
  FileHeader h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = 1;
  h.block_size = static_cast<uint32_t>(block_size_);
  h.identity = identity_;
  h.hash = it.hash;
  h.parent = it.parent;
  h.payload_bytes = state ? it.state.size() : block_bytes_;
  write_buf_.resize(sizeof h + tok_bytes + h.payload_bytes);  // (a snapshot's may be larger)
  uint8_t* payload = write_buf_.data() + sizeof h + tok_bytes;
  if (state) {
    std::memcpy(payload, it.state.data(), it.state.size());
  } else {
    store_->ReadBlock(it.block, payload);
  }
  h.checksum =
      Checksum(reinterpret_cast<const uint8_t*>(&h), it.tokens.data(), payload, h.payload_bytes);
  std::memcpy(write_buf_.data(), &h, sizeof h);
  std::memcpy(write_buf_.data() + sizeof h, it.tokens.data(), tok_bytes);
  const std::string tmp_name =
      StrFormat(".tmp.%d.%" PRIu64, static_cast<int>(getpid()), tmp_counter_++);
  const std::string tmp = path.substr(0, path.rfind('/') + 1) + tmp_name;
  const int fd =
      openat(sub, tmp_name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  bool ok = fd >= 0 && WriteAll(fd, write_buf_.data(), write_buf_.size());
  const int err = errno;
  if (fd >= 0) ok = close(fd) == 0 && ok;
  // rename() replaces atomically: a reader sees the old file, the new one, or none.
  ok = ok && renameat(sub, tmp_name.c_str(), sub, name.c_str()) == 0;
  if (!ok) {
    const int e = errno != 0 ? errno : err;
    unlinkat(sub, tmp_name.c_str(), 0);
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
    if (writes_stopped_.load() && NowSeconds() - stopped_at_.load() >= retry_seconds_) TryResume();
    if (!writes_stopped_.load() && !WriteOne(it) && writes_stopped_.load()) {
      stopped_at_ = NowSeconds();
      Rescan();  // (the directory deleted: its files are gone from the count too)
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      const int32_t block = it.block;
      std::swap(it, ring_[head_]);  // the slot keeps its token buffer
      head_ = (head_ + 1) % ring_.size();
      count_--;
      busy_ = false;
      if (block >= 0) {  // (a snapshot holds no block to hand back)
        written_.push_back(block);
        written_ready_.store(true, std::memory_order_release);
      }
      std::vector<uint8_t>().swap(ring_[(head_ + ring_.size() - 1) % ring_.size()].state);
    }
    idle_cv_.notify_all();
  }
}

namespace {

// A regular file's whole contents, never through a link, never blocking on a FIFO; false if
// it is not one or cannot be read.
bool ReadSmallFile(const std::string& path, std::string* out) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return false;
  struct stat st {};
  char buf[256];
  const bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size < 256;
  const ssize_t n = ok ? pread(fd, buf, sizeof buf, 0) : -1;
  close(fd);
  if (n < 0) return false;
  out->assign(buf, static_cast<size_t>(n));
  return true;
}

// kSamples pages of 4 KiB spread evenly over the file (and its last), hashed: what an
// in-place rewrite changes even when the file's times are put back. ~1 MiB read whatever the
// file's size.
constexpr int kSamples = 256;
uint64_t SampleHash(int fd, uint64_t size, const std::string& path) {
  std::vector<uint8_t> page(4096);
  Hash64 h(size);
  for (int i = 0; i <= kSamples; ++i) {
    const uint64_t at = i == kSamples ? (size > page.size() ? size - page.size() : 0)
                                      : size / kSamples * static_cast<uint64_t>(i);
    const ssize_t r = pread(fd, page.data(), page.size(), static_cast<off_t>(at));
    if (r < 0) Fail("%s: %s", path.c_str(), std::strerror(errno));
    std::fill(page.begin() + r, page.end(), 0);
    h.Update(page.data(), page.size());
  }
  return h.Digest();
}

uint64_t WholeHash(int fd, uint64_t size, const std::string& path) {
  std::vector<uint8_t> buf(size_t{4} << 20);  // a multiple of 32: one stream over the file
  Hash64 h(size);
  for (bool eof = false; !eof;) {
    size_t got = 0;  // fill the buffer whole, so every piece but the last is a multiple of 32
    while (got < buf.size()) {
      const ssize_t r = read(fd, buf.data() + got, buf.size() - got);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) Fail("%s: %s", path.c_str(), std::strerror(errno));
      if (r == 0) {
        eof = true;
        break;
      }
      got += static_cast<size_t>(r);
    }
    h.Update(buf.data(), got);
  }
  return h.Digest();
}

}  // namespace

uint64_t FileContentIdentity(const std::string& path, const std::string& dir) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) Fail("%s: %s", path.c_str(), std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st {};
  if (fstat(fd, &st) != 0) Fail("%s: %s", path.c_str(), std::strerror(errno));
  const auto size = static_cast<uint64_t>(st.st_size);
  // Remembered per file and state: device, inode, size, modification and status-change times
  // (a write restores no ctime), and checked against sampled pages at every use.
  const std::string ids = dir + "/.identities";
  const std::string key =
      ids + StrFormat("/%" PRIx64 "-%" PRIx64 "-%" PRIx64 "-%" PRIx64 "-%" PRIx64,
                      static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino), size,
                      static_cast<uint64_t>(MtimeNs(st)),
                      static_cast<uint64_t>(st.st_ctim.tv_sec) * 1000000000u +
                          static_cast<uint64_t>(st.st_ctim.tv_nsec));
  const uint64_t sample = SampleHash(fd, size, path);
  std::string known;
  uint64_t v = 0, s = 0;
  if (ReadSmallFile(key, &known) &&
      std::sscanf(known.c_str(), "%" SCNx64 " %" SCNx64, &v, &s) == 2 && s == sample)
    return v;
  v = WholeHash(fd, size, path);
  MakeDirs(ids, "--kv-disk");
  const std::string tmp = key + StrFormat(".tmp.%d", static_cast<int>(getpid()));
  const int out = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (out >= 0) {
    const std::string line = StrFormat("%016" PRIx64 " %016" PRIx64 "\n", v, sample);
    const bool ok = WriteAll(out, line.data(), line.size());
    if (close(out) == 0 && ok) rename(tmp.c_str(), key.c_str());
  }
  return v;
}

}  // namespace paddock
