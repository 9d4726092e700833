// Communicators on device memory (CUDA build only): the DeviceCommunicator
// interface shared by NcclCommunicator and StagedMpiCommunicator, the
// GPU-ordered handle they return, GPU selection by node-local rank, and the
// factory that picks a backend by name.
//
// [Note: stream ordering] A device communicator is bound to the caller's
// compute stream (set_compute_stream). A call orders itself after the work
// already queued on that stream, and its handle's wait() makes the compute
// stream wait for the result without blocking the host: kernels queued after
// wait() see the result, the host does not. wait_host() blocks the host
// (for logging, checkpoints, tests). A handle must not outlive its
// communicator.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "comm/mpi_communicator.hpp"
#include "runtime/device.hpp"

namespace zt {

// A handle whose completion can also be awaited on the host.
class DeviceCommHandle : public CommHandle {
 public:
  virtual void wait_host() = 0;
};

// wait_host() on a device handle, wait() on any other; resets `r`.
void wait_host(CommRequest& r);

class DeviceCommunicator : public Communicator {
 public:
  // The stream whose work calls are ordered after, and that handles' wait()
  // makes wait (null: the legacy default stream).
  void set_compute_stream(cudaStream_t s) { compute_ = s; }
  cudaStream_t compute_stream() const { return compute_; }
  // Bracket point-to-point calls that must be issued together (a send and a
  // recv to the same peer, a ring exchange). NCCL needs it to avoid deadlock;
  // MPI's non-blocking p2p does not, so the staged backend ignores it.
  void group_start() override = 0;
  void group_end() override = 0;
  // Blocks the host until every call issued so far has completed.
  virtual void synchronize() = 0;
  virtual const char* backend() const = 0;

 protected:
  cudaStream_t compute_ = nullptr;
};

// True when two members of `group` use the same GPU (compared by UUID).
// Collective over the group. NCCL refuses such a group.
bool group_shares_a_gpu(MpiCommunicator& group);

// backend: "nccl" (NcclCommunicator), "mpi" (StagedMpiCommunicator) or "auto"
// ("nccl" unless two members of the group share a GPU). Collective over the
// group; call select_cuda_device (runtime/cuda/cuda_device.hpp) first. `group` must outlive the result.
// `staging_memory` (optional, "mpi" only) allocates the pinned staging slots,
// so they are accounted under MemTag::comm: pass a PinnedHostDevice.
std::unique_ptr<DeviceCommunicator> make_device_communicator(MpiCommunicator& group, const std::string& backend,
                                                             cudaStream_t compute, Device* staging_memory = nullptr);

}  // namespace zt
