// NcclCommunicator: the Communicator over NCCL, on device memory, with its own
// high-priority non-blocking stream. Every call follows [Note: stream
// ordering] in device_comm.hpp:
//
//   compute stream --record--> input_ready_ --wait--> comm stream: NCCL op
//   comm stream --record--> completion event; handle.wait(): compute stream waits on it
//
// Tensors on the host fall through to the MPI group the communicator was made
// from, so scalars (loss, overflow flags, norms) can be reduced with the same
// object. send/recv have no tags in NCCL: messages to one peer match in issue
// order, and a send and a recv that must overlap go inside group_start() /
// group_end().
#pragma once

#include <nccl.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/device_comm.hpp"
#include "comm/flight_recorder.hpp"
#include "runtime/cuda/cuda_handles.hpp"

namespace zt {

struct NcclCompletion;  // an event on the comm stream, recorded once the call (or its group) is issued

class NcclCommunicator final : public DeviceCommunicator {
 public:
  // Collective over `group`: rank 0 makes the unique id, MPI broadcasts it and
  // every member joins with ncclCommInitRank on its current GPU (see
  // select_cuda_device). Throws a UserError when members share a GPU. `group`
  // must outlive this object.
  NcclCommunicator(MpiCommunicator& group, cudaStream_t compute = nullptr);
  // [Note: NCCL teardown] Drains the comm stream and destroys the NCCL
  // communicator (every member must do the same). When an asynchronous error is
  // pending or the drain times out, it calls ncclCommAbort instead. While an
  // exception unwinds, it leaks the communicator: peers may never reach the
  // matching destroy, the process is about to abort the job (abort_job), and
  // both destroy and abort could block on those peers.
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& group_name() const override { return name_; }
  const char* backend() const override { return "nccl"; }
  // [Note: one-rank group] (nccl_communicator.cpp): one rank's collectives
  // are local copies on the compute stream.
  bool graph_safe() const override { return size_ == 1 && one_rank_copies_; }
  // Tests: false sends a one-rank group's collectives to NCCL like any
  // other group's (on its stream, timed, recorded), so one GPU exercises
  // that path. True by default.
  void set_one_rank_copies(bool on) { one_rank_copies_ = on; }

  CommRequest all_reduce(Tensor buf, ReduceOp op) override;
  CommRequest reduce_scatter(Tensor in, Tensor out, ReduceOp op) override;
  CommRequest all_gather(Tensor in, Tensor out) override;
  CommRequest broadcast(Tensor buf, int root) override;
  CommRequest send(Tensor buf, int peer, int tag) override;  // tag ignored (NCCL has none)
  CommRequest recv(Tensor buf, int peer, int tag) override;  // tag ignored
  // An MPI barrier over the group (host-side; queued GPU work is not awaited).
  void barrier() override;

  // ncclGroupStart / ncclGroupEnd; they nest. Handles of calls inside a group
  // complete together at the outermost group_end(); waiting on one earlier is
  // an error.
  void group_start() override;
  void group_end() override;
  void synchronize() override;

  // Aborts the NCCL communicator now (ncclCommAbort); later calls throw.
  void abort() noexcept;
  // Throws when NCCL reports an asynchronous error (and aborts the communicator).
  void check_async_error();

  ncclComm_t nccl_comm() const { return comm_; }
  cudaStream_t comm_stream() const { return stream_; }
  int cuda_device() const { return device_; }
  // Seconds the destructor waits for queued work before it aborts (default 300).
  void set_teardown_timeout(double seconds) { teardown_timeout_s_ = seconds; }

  // [Note: communication time] (communicator.hpp): with timing on, each call
  // outside a group is timed on the communicator's stream, and each handle's
  // wait() on the compute stream; add_device_times() reads them.
  void set_timing(bool on) override;
  void reset_counters() override;
  void add_device_times(CommCounters& into) override;
  void hold_device_times() override;
  // Makes the compute stream wait for `done` (a call of kind `op`), timing
  // the wait when timing is on. For handles.
  void compute_waits_for(cudaEvent_t done, CommOp op);

 private:
  // Orders the comm stream after the compute stream; returns the completion
  // the call's handle waits on (shared by every call of an open group).
  std::shared_ptr<NcclCompletion> begin_call();
  // [Note: one-rank group]: `in` copied to `out` on the compute stream.
  CommRequest local_copy(const Tensor& in, const Tensor& out);
  bool local() const { return size_ == 1 && group_depth_ == 0 && one_rank_copies_; }
  CommRequest end_call(std::shared_ptr<NcclCompletion> done, CommOp op);
  void drop_timing();
  // Polls the comm stream until it is idle (true), or an asynchronous error
  // or the timeout comes first (false).
  bool drain(double timeout_s) noexcept;

  MpiCommunicator& group_;
  std::string name_;
  int rank_ = 0;
  int size_ = 1;
  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  CudaEvent input_ready_ = CudaEvent::create();
  int group_depth_ = 0;
  std::shared_ptr<NcclCompletion> group_done_;
  double teardown_timeout_s_ = 300.0;
  std::unique_ptr<FlightRecorder> recorder_;
  // [Note: communication time]: the timed calls and waits since the last
  // reset_counters(); wait k's events are wait_events_[2k] and [2k + 1].
  struct TimedCall {
    CommOp op;
    std::shared_ptr<NcclCompletion> done;
  };
  bool timing_ = false;
  bool one_rank_copies_ = true;
  std::vector<TimedCall> timed_;
  std::vector<CudaEvent> wait_events_;
  std::vector<CommOp> wait_ops_;
  // hold_device_times(): how many of each add_device_times() reads.
  bool held_ = false;
  size_t held_calls_ = 0, held_waits_ = 0;
};

}  // namespace zt
