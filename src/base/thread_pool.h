// base/thread_pool.h: a fixed pool of worker threads for data-parallel kernels.
//
// Run() splits [0, n) into one contiguous range per thread (the caller is thread 0) and
// returns when all ranges are done. Workers spin briefly before sleeping so that the many
// short parallel sections of one decode step do not pay a futex wake-up each. Run() never
// allocates. Not re-entrant: one Run() at a time, from one owner thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace paddock {

// A spin-wait's hint to the core (x86 pause, Arm yield; nothing elsewhere): the sibling thread
// or the memory system gets the cycles while a worker polls.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

class Tracer;

class ThreadPool {
 public:
  using Fn = void (*)(void* ctx, int64_t begin, int64_t end, int thread_id);

  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  void Run(int64_t n, Fn fn, void* ctx);

  // Tracing (--trace): each worker's share of the following Runs is recorded as a span named
  // `label` (set by the thread that calls Run, before it). Null: nothing recorded.
  void SetTrace(Tracer* tracer) { tracer_ = tracer; }
  void SetTraceLabel(const char* label) { label_ = label; }

  // f(begin, end, thread_id) for each thread's share of [0, n).
  template <class F>
  void ParallelFor(int64_t n, F&& f) {
    using T = std::remove_reference_t<F>;
    Run(
        n, [](void* c, int64_t b, int64_t e, int t) { (*static_cast<T*>(c))(b, e, t); },
        const_cast<void*>(static_cast<const void*>(&f)));
  }

 private:
  void WorkerLoop(int thread_id);
  void RunShare(int thread_id);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  Fn fn_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_ = 0;
  Tracer* tracer_ = nullptr;
  const char* label_ = "other";
};

}  // namespace paddock
