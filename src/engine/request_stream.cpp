// engine/request_stream.cpp: one request's output, written by the engine thread and read by
// the caller (paddock/service.h).
#include "engine/request_stream.h"

#include <algorithm>
#include <chrono>
#include <iterator>

namespace paddock {

void RequestStream::State::Append(std::string_view text, const TokenLogprob* logprob) {
  if (text.empty() && logprob == nullptr) return;
  std::shared_ptr<const std::function<void()>> ready;
  {
    std::lock_guard<std::mutex> lock(mu);
    pending.append(text);
    if (logprob != nullptr) pending_logprobs.push_back(*logprob);
    ready = on_ready;
  }
  cv.notify_all();
  if (ready) (*ready)();
}

void RequestStream::State::Complete(GenerateResult r, double queue, uint64_t admitted) {
  std::shared_ptr<const std::function<void()>> ready;
  {
    std::lock_guard<std::mutex> lock(mu);
    result = std::move(r);
    queue_seconds = queue;
    admission = admitted;
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

RequestStream::Status RequestStream::Wait(std::string* out, double timeout_seconds,
                                          std::vector<TokenLogprob>* logprobs) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  auto ready = [&] { return !s.pending.empty() || !s.pending_logprobs.empty(); };
  s.cv.wait_for(lock, std::chrono::duration<double>(std::max(0.0, timeout_seconds)),
                [&] { return ready() || s.done; });
  if (ready()) {
    out->append(s.pending);
    s.pending.clear();
    if (logprobs != nullptr)
      logprobs->insert(logprobs->end(), std::make_move_iterator(s.pending_logprobs.begin()),
                       std::make_move_iterator(s.pending_logprobs.end()));
    s.pending_logprobs.clear();
    return Status::kText;
  }
  if (s.done) {
    result_ = s.result;
    queue_seconds_ = s.queue_seconds;
    admission_ = s.admission;
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
