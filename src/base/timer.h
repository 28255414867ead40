// base/timer.h: monotonic seconds (intervals) and seconds since the Unix epoch (timestamps).
#pragma once

#include <chrono>

namespace paddock {

inline double NowSeconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// Seconds since the Unix epoch: times that outlive the process (stored, shown to users).
inline double EpochSeconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

}  // namespace paddock
