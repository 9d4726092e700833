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

struct CommCounters {
  uint64_t bytes[kNumCommOps] = {};
  uint64_t calls[kNumCommOps] = {};
};

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
  void reset_counters() { counters_ = CommCounters{}; }

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
