#include "base/thread_pool.h"

#include <string>

#include "base/timer.h"
#include "base/trace.h"

namespace paddock {

namespace {
// About 100-200 us of spinning: long enough to bridge the gaps between the parallel sections
// of one decode step, short enough not to steal a core that another process needs.
constexpr int kSpinIterations = 1 << 12;
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { WorkerLoop(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::RunShare(int thread_id) {
  const int64_t begin = n_ * thread_id / n_threads_;
  const int64_t end = n_ * (thread_id + 1) / n_threads_;
  if (begin >= end) return;
  // Workers' shares are traced; the calling thread's time is its caller's span.
  if (tracer_ != nullptr && thread_id > 0) {
    const double t0 = NowSeconds();
    fn_(ctx_, begin, end, thread_id);
    tracer_->Span(label_, "op", t0, NowSeconds());
    return;
  }
  fn_(ctx_, begin, end, thread_id);
}

void ThreadPool::Run(int64_t n, Fn fn, void* ctx) {
  if (n <= 0) return;
  if (n_threads_ == 1) {
    fn(ctx, 0, n, 0);
    return;
  }
  fn_ = fn;
  ctx_ = ctx;
  n_ = n;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  cv_.notify_all();
  RunShare(0);
  for (int i = 0; pending_.load(std::memory_order_acquire) != 0; ++i) {
    if (i < kSpinIterations) {
      CpuRelax();
    } else {
      std::this_thread::yield();  // a worker was descheduled: let it run
    }
  }
}

void ThreadPool::WorkerLoop(int thread_id) {
  uint64_t seen = 0;
  bool named = false;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int i = 0; gen == seen && i < kSpinIterations; ++i) {
      CpuRelax();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;
    if (tracer_ != nullptr && !named) {
      tracer_->NameThread("worker " + std::to_string(thread_id));
      named = true;
    }
    RunShare(thread_id);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace paddock
