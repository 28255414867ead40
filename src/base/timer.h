// base/timer.h: monotonic wall-clock seconds.
#pragma once

#include <chrono>

namespace paddock {

inline double NowSeconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace paddock
