// engine/request_stream.h: the state a RequestStream shares with the engine thread (private
// to the engine layer): the engine thread appends text and sets the result, the caller waits.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "paddock/service.h"

namespace paddock {

struct RequestStream::State {
  std::mutex mu;
  std::condition_variable cv;
  std::string pending;  // produced, not yet read
  std::vector<TokenLogprob> pending_logprobs;
  bool done = false;
  GenerateResult result;
  double queue_seconds = 0;
  uint64_t admission = 0;  // Sequence::admission
  std::atomic<bool> cancel{false};
  // Shared so the engine thread takes a reference under `mu` (no allocation) and calls it
  // after unlocking: the reader's side may hold its own lock while it calls Wait.
  std::shared_ptr<const std::function<void()>> on_ready;
  std::function<void()> wake_engine;

  // Engine thread: text that became final, and a token's log-probability (if any).
  void Append(std::string_view text, const TokenLogprob* logprob = nullptr);
  // Engine thread: the end, with the result, the time queued and the admission order.
  void Complete(GenerateResult result, double queue_seconds, uint64_t admission = 0);
};

}  // namespace paddock
