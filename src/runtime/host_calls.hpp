// Host round trips inside the training step, counted ([Note: host round
// trips]).
//
// [Note: host round trips] Between the first forward of a step and its
// optimizer step the host should only launch work: a synchronize, a blocking
// copy, a device-to-host copy or an allocation there makes the host wait for
// the device (or the driver), and the GPU idles while the host catches up.
// ZTRAIN_COUNT_HOST_CALLS=1 installs a probe (on CUDA: CUPTI's driver-API
// callbacks, loaded at run time) that sees every such call the step's thread
// makes — ztrain's own, cuBLAS', cuDNN's and NCCL's — and the trainer prints
// them per step for two windows: the walk (first forward to the gradient
// reduction) and the reduction (to the optimizer step). Calls of other
// threads (the delayed offload update, the checkpoint writer) are not the
// step's and are not counted.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace zt::host_calls {

struct Counts {
  int64_t syncs = 0;            // stream, event or context synchronize
  int64_t blocking_copies = 0;  // copies that return when done (cuMemcpy, cuMemcpyDtoH, ...)
  int64_t d2h_copies = 0;       // asynchronous device-to-host copies
  int64_t allocations = 0;      // device or page-locked allocations and frees
  std::string detail;           // "name xN, ..." of the calls counted
  int64_t total() const { return syncs + blocking_copies + d2h_copies + allocations; }
  std::string str() const;
};

class Probe {
 public:
  virtual ~Probe() = default;
  // Counts the calls of the calling thread from now on.
  virtual void begin() = 0;
  // Stops counting; what was counted since begin().
  virtual Counts end() = 0;
};

// The process's probe; none by default, and then begin/end do nothing.
void install(std::unique_ptr<Probe> probe);
bool active();
void begin();
Counts end();

}  // namespace zt::host_calls
