// Host waits for the device, made visible to the watchdog.
//
// [Note: watched host waits] A rank whose GPU stops (a kernel that never
// ends, a stalled stream, a device that fell off the bus) blocks its host
// where the host waits for the device: an upload slot's event, the copy of
// the loss, a stream synchronize. If no collective was issued before that
// wait, no communicator has anything in flight and a single-rank job would
// hang silently. So every such wait in the device layer is announced here:
// the watchdog (comm/watchdog.hpp) installs a Watcher that records it in
// the rank's 'device' flight recorder with a probe that tells, without
// blocking, whether the device has got there (cudaEventQuery,
// cudaStreamQuery). The wait itself still blocks in the driver; the
// watchdog ends the job when one lasts longer than comm.timeout, like a
// collective. Without a watcher (tests, tools) a Scope costs a pointer load.
#pragma once

#include <cstdint>
#include <functional>

namespace zt::host_wait {

class Watcher {
 public:
  virtual ~Watcher() = default;
  // A wait begins; `done` may be called from any thread and must not block.
  // `what` is a string with static storage. Returns an id for end().
  virtual uint64_t begin(const char* what, std::function<bool()> done) = 0;
  virtual void end(uint64_t id) = 0;
};

// The process's watcher (null: none). It must outlive every wait begun
// through it; the watchdog's is never destroyed.
void install(Watcher* w);

// Announces a wait for its lifetime.
class Scope {
 public:
  Scope(const char* what, std::function<bool()> done);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  Watcher* w_;
  uint64_t id_ = 0;
};

}  // namespace zt::host_wait
