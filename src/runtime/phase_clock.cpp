#include "runtime/phase_clock.hpp"

#include <chrono>

namespace zt {

void HostPhaseClock::record(int index) {
  if (static_cast<size_t>(index) >= t_.size()) t_.resize(static_cast<size_t>(index) + 1);
  t_[static_cast<size_t>(index)] =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double HostPhaseClock::seconds(int from, int to) const {
  return t_[static_cast<size_t>(to)] - t_[static_cast<size_t>(from)];
}

}  // namespace zt
