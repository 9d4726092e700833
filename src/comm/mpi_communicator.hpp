// MpiCommunicator: the Communicator over an MPI communicator, on host memory,
// with non-blocking MPI collectives. Owns its MPI_Comm (freed on destruction
// unless it is MPI_COMM_WORLD). Every operation (the barrier too) is posted
// non-blocking, recorded in the communicator's flight recorder, and waited
// for in a loop of MPI_Test that marks it complete there ([Note: watchdog] in
// comm/watchdog.hpp): a blocking MPI call would hide a hang from the watchdog.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "comm/communicator.hpp"
#include "comm/flight_recorder.hpp"
#include "core/error.hpp"

namespace zt {

// MPI_Init_thread / MPI_Finalize for a process; sets the rank and host used in
// error messages. MPI_THREAD_FUNNELED is enough: only the main thread calls MPI
// (the watchdog thread only reads what the main thread recorded; its one MPI
// call is the MPI_Abort that ends a hung job).
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int world_rank() const { return rank_; }
  int world_size() const { return size_; }

 private:
  int rank_ = 0;
  int size_ = 1;
};

// Ends the whole job from any rank (MPI_Abort), so other ranks do not hang.
[[noreturn]] void abort_job(int exit_code);

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (unless it is MPI_COMM_WORLD).
  MpiCommunicator(MPI_Comm comm, std::string group_name);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& group_name() const override { return name_; }
  MPI_Comm comm() const { return comm_; }

  CommRequest all_reduce(Tensor buf, ReduceOp op) override;
  CommRequest reduce_scatter(Tensor in, Tensor out, ReduceOp op) override;
  CommRequest all_gather(Tensor in, Tensor out) override;
  CommRequest broadcast(Tensor buf, int root) override;
  CommRequest send(Tensor buf, int peer, int tag) override;
  CommRequest recv(Tensor buf, int peer, int tag) override;
  void barrier() override;

  FlightRecorder& recorder() { return *recorder_; }

 private:
  // The handle of request `r` (recorder entry `id`), a call of kind `op` made
  // at `issued` (now_s()).
  CommRequest post(CommOp op, double issued, uint64_t id, MPI_Request r);

  MPI_Comm comm_;
  std::string name_;
  int rank_ = 0;
  int size_ = 1;
  std::unique_ptr<FlightRecorder> recorder_;
};

}  // namespace zt
