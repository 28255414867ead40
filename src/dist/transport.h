// dist/transport.h: MPI with a deadline (internal to dist/): nothing here blocks without
// watching the peers' heartbeats. The start-up messages' encoding (Writer, Reader), the
// heartbeat thread, a receive that fails when a peer goes silent, and sends whose buffers are
// reused. Not here: what the messages mean (stage.h, pipeline.cpp).
#pragma once

#define OMPI_SKIP_MPICXX 1  // the C API only (no libmpi_cxx)
#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/strings.h"
#include "base/timer.h"

namespace paddock::dist::detail {

enum Tag : int { kHello = 1, kPlan = 2, kReady = 3, kData = 4, kResult = 5, kBeat = 6 };
constexpr double kBeatSeconds = 0.2;

// ---- start-up messages: strings and integers in one byte string --------------------------

class Writer {
 public:
  void Int(int64_t v) { bytes_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void Str(const std::string& s) {
    Int(static_cast<int64_t>(s.size()));
    bytes_ += s;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

class Reader {
 public:
  explicit Reader(std::string b) : b_(std::move(b)) {}
  int64_t Int() {
    int64_t v;
    Need(sizeof v);
    std::memcpy(&v, b_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  std::string Str() {
    const int64_t n = Int();
    if (n < 0) Fail("pipeline: a start-up message is corrupt");
    Need(static_cast<size_t>(n));
    std::string s = b_.substr(at_, static_cast<size_t>(n));
    at_ += static_cast<size_t>(n);
    return s;
  }

 private:
  void Need(size_t n) const {
    if (at_ + n > b_.size()) Fail("pipeline: a start-up message is truncated");
  }
  std::string b_;
  size_t at_ = 0;
};

std::string HostName();
// Resident memory of this process: its own (anonymous) pages and the model file's pages
// mapped in (RssAnon, RssFile), in bytes.
void ResidentBytes(uint64_t* anon, uint64_t* file);
int EnvInt(const char* name, int dflt);

class Heartbeats;

// Waits for a message (source, tag) while `hb` says the peers are there; its bytes into *into
// (whose capacity is reused: no allocation per step once it has grown).
void ReceiveBytes(int source, int tag, const Heartbeats& hb, std::string* into,
                  int* from = nullptr);
std::string ReceiveBytes(int source, int tag, const Heartbeats& hb, int* from = nullptr);

// Every process: a thread that sends a heartbeat every kBeatSeconds to its peers (the head to
// every stage, a stage to the head) and reads theirs; it also drives MPI's progress for the
// sends in flight while the compute thread runs (Open MPI has no progress thread of its own).
class Heartbeats {
 public:
  Heartbeats(int rank, int size, double timeout)
      : rank_(rank), seen_(static_cast<size_t>(size)), timeout_(timeout) {
    const double now = NowSeconds();
    for (auto& s : seen_) s.store(now);
    thread_ = std::thread([this] { Run(); });
  }
  ~Heartbeats() { Stop(); }
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  // The first peer (rank) silent for longer than the timeout, or -1.
  int Silent() const {
    const double now = NowSeconds();
    for (size_t r = 0; r < seen_.size(); ++r) {
      if (static_cast<int>(r) == rank_ || (rank_ != 0 && r != 0)) continue;
      if (now - seen_[r].load() > timeout_) return static_cast<int>(r);
    }
    return -1;
  }
  double SilentFor(int r) const { return NowSeconds() - seen_[static_cast<size_t>(r)].load(); }

 private:
  void Run();

  int rank_;
  std::vector<std::atomic<double>> seen_;
  double timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// Sends in flight, each with its buffer (kept until MPI is done with it, then reused: a step
// allocates nothing once the buffers have grown).
class Outbox {
 public:
  // A buffer of n bytes for the next Send (contents unspecified).
  std::vector<char> Buffer(size_t n) {
    Reap();
    std::vector<char> b;
    if (!free_.empty()) {
      b = std::move(free_.back());
      free_.pop_back();
    }
    b.resize(n);
    return b;
  }
  void Send(std::vector<char>&& bytes, int dest, int tag) {
    Reap();
    slots_.push_back({std::move(bytes), MPI_REQUEST_NULL});
    Slot& s = slots_.back();
    MPI_Isend(s.bytes.data(), static_cast<int>(s.bytes.size()), MPI_BYTE, dest, tag, MPI_COMM_WORLD,
              &s.req);
  }
  // Waits for every send (false: `hb` says a peer is lost first).
  bool Drain(const Heartbeats& hb);

 private:
  struct Slot {
    std::vector<char> bytes;
    MPI_Request req;
  };
  void Reap();
  std::vector<Slot> slots_;
  std::vector<std::vector<char>> free_;
};

}  // namespace paddock::dist::detail
