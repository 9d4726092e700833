// The Communicator interface: collectives and point-to-point over one group of
// ranks. All calls are asynchronous and return a handle to wait on. ZeRO and
// the pipeline see only this interface; MpiCommunicator works on host memory,
// NcclCommunicator (CUDA build) on device memory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/tensor.hpp"

namespace zt {

enum class ReduceOp : uint8_t { sum, max, min };

// Bytes moved per collective kind, for the communication accounting printed
// with wall_clock_breakdown.
// device_wait: not communication but the host waiting for its own device
// ([Note: watched host waits]), followed by the watchdog like the others.
enum class CommOp : uint8_t { all_reduce, reduce_scatter, all_gather, broadcast, send, recv, barrier, device_wait };
constexpr int kNumCommOps = 8;
const char* comm_op_name(CommOp op);

class CommHandle {
 public:
  virtual ~CommHandle() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;  // true when complete
};
using CommRequest = std::unique_ptr<CommHandle>;

// Waits on a request if it is set (a null request is already complete).
inline void wait(CommRequest& r) {
  if (r) {
    r->wait();
    r.reset();
  }
}

// [Note: communication time] Besides bytes and calls, a communicator adds
// up, per kind, how long its calls took (`seconds`) and how much of that the
// caller spent waiting for them (`waited`); the rest was hidden behind the
// caller's own work. Each backend measures both where the waiting happens:
// - MPI (host memory) and the host-staged backend: the host's clock, from
//   the call to the completion the caller saw (a test() that returned true,
//   or the end of wait()); `waited` is the host's time blocked in wait().
//   The staged backend counts from its MPI call, after the blocking copy to
//   the host, which neither figure includes.
// - NCCL, with set_timing(true): the device's clock. `seconds` is the time
//   the call ran on the communicator's stream (from a timing event before
//   it to one after it); `waited` the time the compute stream stood still
//   in a handle's wait() (timing events on the compute stream before and
//   after the stream wait). Those events are read by add_device_times()
//   once the host has waited for the step (those of the calls made before
//   hold_device_times(), when it was called); reset_counters() drops the
//   ones of a step that was not read. Calls inside group_start()/group_end()
//   (the pipeline's exchanges) and one rank's local copies ([Note: one-rank
//   group]) are not timed.
struct CommCounters {
  uint64_t bytes[kNumCommOps] = {};
  uint64_t calls[kNumCommOps] = {};
  double seconds[kNumCommOps] = {};
  double waited[kNumCommOps] = {};
};

// The collectives (all_reduce, reduce_scatter, all_gather, broadcast) of `c`,
// counted by a communicator of `group_size` ranks: their time, the time
// waited for them, and 1 - waited / time clamped to [0, 1] (NaN when there
// is nothing to hide: one rank, or no time).
struct CollectiveTime {
  double seconds = 0;
  double waited = 0;
  double hidden_fraction = 0;
};
CollectiveTime collective_time(const CommCounters& c, int group_size);

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const std::string& group_name() const = 0;

  // In place over `buf`.
  virtual CommRequest all_reduce(Tensor buf, ReduceOp op) = 0;
  // `in` has size()*n elements, `out` has n: rank r receives the reduction of
  // block r.
  virtual CommRequest reduce_scatter(Tensor in, Tensor out, ReduceOp op) = 0;
  // `in` has n elements, `out` size()*n: block r of `out` is rank r's `in`.
  virtual CommRequest all_gather(Tensor in, Tensor out) = 0;
  virtual CommRequest broadcast(Tensor buf, int root) = 0;
  virtual CommRequest send(Tensor buf, int peer, int tag) = 0;
  virtual CommRequest recv(Tensor buf, int peer, int tag) = 0;
  virtual void barrier() = 0;

  // Bracket point-to-point calls that must be issued together (NCCL:
  // ncclGroupStart/End, which nest; see DeviceCommunicator). No-ops here: MPI's
  // non-blocking send/recv never block when issued, so MpiCommunicator needs
  // no grouping.
  virtual void group_start() {}
  virtual void group_end() {}

  // Whether every collective of this communicator is device work on the
  // caller's compute stream alone, which a CUDA graph of the step may
  // record ([Note: step graph] in runtime/device.hpp): NCCL within a group of
  // one rank ([Note: one-rank group] in nccl_communicator.cpp). False for
  // host communicators and those with streams or host stages of their own.
  virtual bool graph_safe() const { return false; }

  const CommCounters& counters() const { return counters_; }
  // Zeroes the counters (and, on the device, drops the unread timing events
  // of earlier calls: [Note: communication time]).
  virtual void reset_counters() { counters_ = CommCounters{}; }
  // Device-timed communicators (NCCL with set_timing(true)): the host waits
  // for the timing events of the calls since reset_counters() and adds their
  // times to `into`, then drops them. Host communicators time their calls as
  // they complete and add nothing here.
  virtual void add_device_times(CommCounters& /*into*/) {}
  // Device-timed communicators: the calls made so far are the ones
  // add_device_times() reads; later ones (a validation's, a checkpoint's)
  // are left out until reset_counters(). The trainer holds at each step's end.
  virtual void hold_device_times() {}
  // Whether the device's timing events are recorded (NCCL; the host's clock
  // is read in any case). Off by default.
  virtual void set_timing(bool /*on*/) {}
  // A call of kind `op` completed `seconds` after it was made, of which the
  // caller waited `waited` ([Note: communication time]); for handles.
  void add_time(CommOp op, double seconds, double waited) {
    counters_.seconds[static_cast<int>(op)] += seconds;
    counters_.waited[static_cast<int>(op)] += waited;
  }

 protected:
  void count(CommOp op, uint64_t bytes) {
    counters_.bytes[static_cast<int>(op)] += bytes;
    counters_.calls[static_cast<int>(op)] += 1;
  }

 private:
  CommCounters counters_;
};

// Blocking conveniences over the asynchronous calls.
inline void all_reduce_sync(Communicator& c, Tensor buf, ReduceOp op = ReduceOp::sum) {
  CommRequest r = c.all_reduce(buf, op);
  wait(r);
}
double all_reduce_scalar(Communicator& c, double v, ReduceOp op = ReduceOp::sum);

}  // namespace zt
