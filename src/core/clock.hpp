// The host's monotonic clock in seconds, for the timings the run reports.
#pragma once

#include <chrono>

namespace zt {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace zt
