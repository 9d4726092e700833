// TransferQueue: copies between a device's memory and host memory that run
// beside the device's compute, for offloaded state.
//
// [Note: offload transfers] Offload moves gradients to the host and updated
// parameters back while the device computes. On a GPU a queue has two copy
// streams, one per direction, so a device-to-host and a host-to-device copy
// run at once on the two copy engines, neither behind the compute stream's
// kernels. Ordering is explicit:
//   - to_host() copies device memory as the compute stream will have left it
//     after the work queued so far (the copy stream waits for an event
//     recorded there), so a gradient is read once its reduction is done; given
//     a compute mark, as the compute stream left it at the mark (work queued
//     after the mark does not delay the copy);
//   - wait() blocks the host until a copy is done (the host may then read or
//     reuse its host buffer);
//   - compute_waits() makes work queued later on the compute stream start
//     after a copy (a parameter shard uploaded before the kernels that read it);
//   - mark_compute() names the compute stream's work queued so far, and a
//     to_device() given that mark starts after it (a device buffer is written
//     again only once the kernels that read it have run).
// Host buffers should be pinned (Device::host_memory(true)): pageable memory
// makes the copy synchronous. On the CPU backend a copy is a memcpy done at
// once: the host buffers are still distinct from the device buffers, so the
// offload paths run for real and are tested without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zt {

// Names one queued copy (or compute mark); 0 is "nothing" (waiting on it
// returns at once).
struct TransferTicket {
  uint64_t id = 0;
};

class TransferQueue {
 public:
  virtual ~TransferQueue() = default;
  virtual TransferTicket to_host(void* host_dst, const void* dev_src, size_t bytes,
                                 TransferTicket after_compute = {}) = 0;
  virtual TransferTicket to_device(void* dev_dst, const void* host_src, size_t bytes,
                                   TransferTicket after_compute = {}) = 0;
  virtual TransferTicket mark_compute() = 0;
  virtual void wait(TransferTicket t) = 0;
  virtual void compute_waits(TransferTicket t) = 0;
  // Host waits for every copy queued so far.
  virtual void wait_all() = 0;
};

}  // namespace zt
