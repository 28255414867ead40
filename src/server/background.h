// server/background.h: one thread for the server's costly request work (a large body's parse,
// the grammar it asks for), run at a lower CPU priority than the engine's threads, so such a
// request neither holds an event thread nor takes the cores the engine steps on: on a 2-core
// machine, compiling one 30,000-value enum per request back to back beside 8 streams tripled
// their inter-token p99 when done on the event threads.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace paddock::server {

class Background {
 public:
  // At most max_queued jobs wait; the thread (started with the first job) runs at `nice`
  // (0..19, added to the process's).
  Background(size_t max_queued, int nice);
  ~Background();  // Stop()
  // Queues a job; false when the queue is full or stopped (the caller answers at once).
  bool Submit(std::function<void()> job);
  // Drops the queued jobs, lets the running one finish and ends the thread. Idempotent.
  void Stop();

 private:
  void Loop(int nice);
  size_t max_queued_;
  int nice_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace paddock::server
