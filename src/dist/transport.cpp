// dist/transport.cpp: the heartbeats, the watched receive and the reused send buffers.
#include "dist/transport.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "base/timer.h"

namespace paddock::dist::detail {

std::string HostName() {
  char h[256] = {0};
  gethostname(h, sizeof h - 1);
  return h;
}

int EnvInt(const char* name, int dflt) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : dflt;
}

// Resident memory of this process: its own (anonymous) pages and the model file's pages
// mapped in (RssAnon, RssFile), in bytes.
void ResidentBytes(uint64_t* anon, uint64_t* file) {
  *anon = *file = 0;
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return;
  char line[256];
  unsigned long kb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "RssAnon: %lu kB", &kb) == 1) *anon = kb * 1024ull;
    if (std::sscanf(line, "RssFile: %lu kB", &kb) == 1) *file = kb * 1024ull;
  }
  std::fclose(f);
}

std::string ReceiveBytes(int source, int tag, const Heartbeats& hb, int* from) {
  std::string b;
  ReceiveBytes(source, tag, hb, &b, from);
  return b;
}

void Heartbeats::Run() {
  static const int32_t beat = 0;
  std::unique_lock<std::mutex> lock(mu_);
  double next = 0;
  while (!stop_) {
    const double now = NowSeconds();
    if (now >= next) {
      for (size_t r = 0; r < seen_.size(); ++r) {
        if (static_cast<int>(r) == rank_ || (rank_ != 0 && r != 0)) continue;
        if (now - seen_[r].load() > timeout_) continue;  // lost: no more sends that never end
        MPI_Request req;
        MPI_Isend(&beat, 1, MPI_INT32_T, static_cast<int>(r), kBeat, MPI_COMM_WORLD, &req);
        MPI_Request_free(&req);
      }
      next = now + kBeatSeconds;
    }
    for (;;) {
      int flag = 0;
      MPI_Status st;
      MPI_Iprobe(MPI_ANY_SOURCE, kBeat, MPI_COMM_WORLD, &flag, &st);
      if (!flag) break;
      int32_t v;
      MPI_Recv(&v, 1, MPI_INT32_T, st.MPI_SOURCE, kBeat, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      seen_[static_cast<size_t>(st.MPI_SOURCE)].store(NowSeconds());
    }
    cv_.wait_for(lock, std::chrono::milliseconds(2));
  }
}

namespace {

// Polls with a short sleep growing to 1 ms while nothing comes: the latency of a message is a
// few microseconds under load, and an idle process does not spin a core.
class Backoff {
 public:
  void Wait() {
    if (++spins_ < 64) {
      std::this_thread::yield();
      return;
    }
    usleep(spins_ < 2000 ? 20 : 1000);
  }

 private:
  int spins_ = 0;
};

}  // namespace

void ReceiveBytes(int source, int tag, const Heartbeats& hb, std::string* into, int* from) {
  Backoff wait;
  for (;;) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(source, tag, MPI_COMM_WORLD, &flag, &st);
    if (flag) {
      int count = 0;
      MPI_Get_count(&st, MPI_BYTE, &count);
      into->resize(static_cast<size_t>(count));
      MPI_Recv(into->data(), count, MPI_BYTE, st.MPI_SOURCE, tag, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
      if (from != nullptr) *from = st.MPI_SOURCE;
      return;
    }
    if (const int r = hb.Silent(); r >= 0)
      Fail("pipeline: rank %d stopped answering (no heartbeat for %.1f s)", r, hb.SilentFor(r));
    wait.Wait();
  }
}

void Outbox::Reap() {
  while (!slots_.empty()) {
    int done = 0;
    MPI_Test(&slots_.front().req, &done, MPI_STATUS_IGNORE);
    if (!done) break;
    if (free_.size() < 8) free_.push_back(std::move(slots_.front().bytes));
    slots_.erase(slots_.begin());
  }
}

bool Outbox::Drain(const Heartbeats& hb) {
  Backoff wait;
  while (Reap(), !slots_.empty()) {
    if (hb.Silent() >= 0) return false;
    wait.Wait();
  }
  return true;
}

}  // namespace paddock::dist::detail
