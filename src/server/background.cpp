// server/background.cpp: the low-priority worker (background.h).
#include "server/background.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace paddock::server {

Background::Background(size_t max_queued, int nice) : max_queued_(max_queued), nice_(nice) {}

Background::~Background() {
  Stop();
}

bool Background::Submit(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || jobs_.size() >= max_queued_) return false;
    jobs_.push_back(std::move(job));
    // Started by the first job, from a thread of the server's, so it inherits their blocked
    // signals (SIGTERM must reach the server's waiter, not end the process here).
    if (!thread_.joinable()) thread_ = std::thread([this] { Loop(nice_); });
  }
  cv_.notify_one();
  return true;
}

void Background::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    jobs_.clear();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Background::Loop(int nice) {
  // Linux's nice is per thread: this one only, relative to the process's (lowering a priority
  // needs no privilege; failing leaves it as it was).
  errno = 0;
  const int base = getpriority(PRIO_PROCESS, 0);
  if (errno == 0)
    setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), std::min(19, base + nice));
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    try {
      job();
    } catch (...) {  // (jobs answer their own errors; nothing may end the thread)
    }
  }
}

}  // namespace paddock::server
