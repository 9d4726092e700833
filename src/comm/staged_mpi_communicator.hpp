// StagedMpiCommunicator: device memory through an MpiCommunicator, staged in
// pinned host buffers. It is the backend for ranks that share a GPU (NCCL
// refuses them), for testing several ranks on one GPU, and for machines
// without NCCL. A call:
//
//   1. copies its device input to a pinned staging slot on the compute stream
//      and synchronises that stream (the input is final once queued work ran);
//   2. starts the non-blocking MPI call on the staged copy;
//   3. on wait() (or a test() that finds it done) copies the result back to
//      device memory on the compute stream, without blocking the host.
//
// bf16 and f16 reductions are widened to f32 in the staging slot (MPI has no
// 16-bit float types), reduced in f32 and rounded once on the way back.
// Staging slots are pinned (cudaHostAlloc), one per call in flight, grown on
// demand and kept; staging_bytes() says how much is held, and a staging
// Device (a PinnedHostDevice) accounts them under MemTag::comm. Host tensors go
// straight to the MPI group. Handles must not outlive the communicator.
#pragma once

#include <vector>

#include "comm/device_comm.hpp"
#include "runtime/cuda/cuda_handles.hpp"

namespace zt {

class StagedMpiCommunicator final : public DeviceCommunicator {
 public:
  // `group` (and `staging_memory`) must outlive this object. Not collective.
  // staging_memory: allocates the pinned slots with tag MemTag::comm (a
  // PinnedHostDevice); null: cudaHostAlloc, not accounted.
  explicit StagedMpiCommunicator(MpiCommunicator& group, cudaStream_t compute = nullptr,
                                 Device* staging_memory = nullptr);
  ~StagedMpiCommunicator() override;
  StagedMpiCommunicator(const StagedMpiCommunicator&) = delete;
  StagedMpiCommunicator& operator=(const StagedMpiCommunicator&) = delete;

  int rank() const override { return group_.rank(); }
  int size() const override { return group_.size(); }
  const std::string& group_name() const override { return group_.group_name(); }
  const char* backend() const override { return "mpi"; }

  CommRequest all_reduce(Tensor buf, ReduceOp op) override;
  CommRequest reduce_scatter(Tensor in, Tensor out, ReduceOp op) override;
  CommRequest all_gather(Tensor in, Tensor out) override;
  CommRequest broadcast(Tensor buf, int root) override;
  CommRequest send(Tensor buf, int peer, int tag) override;
  CommRequest recv(Tensor buf, int peer, int tag) override;
  void barrier() override;

  // MPI point-to-point never blocks when issued, so grouping is not needed.
  void group_start() override {}
  void group_end() override {}
  // Waits for every copy back issued so far (MPI parts complete in wait()).
  void synchronize() override;

  size_t staging_bytes() const;  // pinned host bytes held

  // Used by the handles: a pinned slot of at least `bytes` that no call in
  // flight uses, and its return once the copy back is queued on `stream`.
  void* acquire_slot(size_t bytes, size_t* slot);
  void release_slot(size_t slot, cudaStream_t stream);

 private:
  struct Slot {
    void* host = nullptr;
    size_t bytes = 0;
    CudaEvent copied_back = CudaEvent::create();  // recorded after the last copy out of this slot
    bool busy = false;
  };
  void* allocate_pinned(size_t bytes);
  void free_pinned(void* p, size_t bytes) noexcept;

  MpiCommunicator& group_;
  Device* staging_memory_;
  std::vector<Slot> slots_;
};

}  // namespace zt
