// The CUDA recorder of [Note: GPU timeline] (runtime/gpu_timeline.hpp):
// CUPTI's activity records of kernels, copies and memsets, with libcupti
// loaded at run time as for [Note: host round trips].
#pragma once

#include <memory>
#include <vector>

#include "runtime/gpu_timeline.hpp"

namespace zt {

class GpuTimelineRecorder {
 public:
  virtual ~GpuTimelineRecorder() = default;
  // Records the operations launched from now on.
  virtual void start() = 0;
  // Waits for the device, collects what was recorded since start() and stops.
  virtual std::vector<DeviceSpan> stop() = 0;
};

// One per process at a time. A missing libcupti is a UserError naming it.
std::unique_ptr<GpuTimelineRecorder> make_cupti_timeline();

}  // namespace zt
