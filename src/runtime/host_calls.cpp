#include "runtime/host_calls.hpp"

#include <sstream>

namespace zt::host_calls {
namespace {
std::unique_ptr<Probe>& probe() {
  static std::unique_ptr<Probe> p;
  return p;
}
}  // namespace

std::string Counts::str() const {
  std::ostringstream o;
  o << syncs << " syncs, " << blocking_copies << " blocking copies, " << d2h_copies << " device-to-host copies, "
    << allocations << " allocations";
  if (!detail.empty()) o << " (" << detail << ")";
  return o.str();
}

void install(std::unique_ptr<Probe> p) { probe() = std::move(p); }
bool active() { return probe() != nullptr; }
void begin() {
  if (probe()) probe()->begin();
}
Counts end() { return probe() ? probe()->end() : Counts{}; }

}  // namespace zt::host_calls
