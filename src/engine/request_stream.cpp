// engine/request_stream.cpp: one request's output, written by the engine thread and read by
// the caller (paddock/service.h).
#include "engine/request_stream.h"

#include <algorithm>
#include <chrono>

namespace paddock {

void RequestStream::State::Append(std::string_view text) {
  if (text.empty()) return;
  std::shared_ptr<const std::function<void()>> ready;
  {
    std::lock_guard<std::mutex> lock(mu);
    pending.append(text);
    ready = on_ready;
  }
  cv.notify_all();
  if (ready) (*ready)();
}

void RequestStream::State::Complete(GenerateResult r, double queue) {
  std::shared_ptr<const std::function<void()>> ready;
  {
    std::lock_guard<std::mutex> lock(mu);
    result = std::move(r);
    queue_seconds = queue;
    done = true;
    ready = on_ready;
  }
  cv.notify_all();
  if (ready) (*ready)();
}

void RequestStream::SetOnReady(std::function<void()> fn) {
  auto f = std::make_shared<const std::function<void()>>(std::move(fn));
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->on_ready = std::move(f);
}

RequestStream::RequestStream(uint64_t id) : id_(id), state_(std::make_unique<State>()) {}
RequestStream::~RequestStream() = default;

RequestStream::Status RequestStream::Wait(std::string* out, double timeout_seconds) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  s.cv.wait_for(lock, std::chrono::duration<double>(std::max(0.0, timeout_seconds)),
                [&] { return !s.pending.empty() || s.done; });
  if (!s.pending.empty()) {
    out->append(s.pending);
    s.pending.clear();
    return Status::kText;
  }
  if (s.done) {
    result_ = s.result;
    queue_seconds_ = s.queue_seconds;
    return Status::kDone;
  }
  return Status::kTimeout;
}

void RequestStream::Cancel() {
  state_->cancel.store(true);
  if (state_->wake_engine) state_->wake_engine();
}

bool RequestStream::done() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

}  // namespace paddock
