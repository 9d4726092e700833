// Where the GPU idles between its operations ([Note: GPU timeline]).
//
// [Note: GPU timeline] ZTRAIN_GPU_TIMELINE=1 records the start and end of
// every kernel, copy and memset the device runs during the training steps
// after the first (on CUDA: CUPTI's activity records, libcupti loaded at run
// time), without adding work to the streams as `--profile`'s events do. The
// summary merges them (operations of concurrent streams overlap) and splits
// what is left of the span from the first operation to the last into gaps by
// length: gaps of a few microseconds are the device starting one queued
// operation after another, which a CUDA graph shortens; long ones are the
// device waiting for the host (a read of the loss, the host's step-to-step
// work, a launch that came late). The sum of the gaps bounds what launching
// the step as one graph could win.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zt {

struct DeviceSpan {
  enum class Kind { kernel, copy, memset };
  uint64_t start = 0, end = 0;  // nanoseconds, one clock
  Kind kind = Kind::kernel;
};

struct TimelineSummary {
  // Upper bounds of the gap classes in nanoseconds; the last class is open.
  static constexpr uint64_t kBounds[] = {2'000, 10'000, 100'000};
  static constexpr int kClasses = 4;
  int64_t kernels = 0, copies = 0, memsets = 0;
  uint64_t kernel_ns = 0, copy_ns = 0, memset_ns = 0;  // each kind's own time, overlaps counted twice
  uint64_t span_ns = 0;  // first start to last end
  uint64_t busy_ns = 0;  // covered by at least one operation
  int64_t gaps[kClasses] = {};
  uint64_t gap_ns[kClasses] = {};
  uint64_t idle_ns() const { return span_ns - busy_ns; }
};

// Sorts `spans` and merges them. An operation that ends before it starts
// (a record the tracer could not complete) is an error.
TimelineSummary summarize_timeline(std::vector<DeviceSpan> spans);

// A few lines, per step over `steps` steps.
std::string describe_timeline(const TimelineSummary& s, int64_t steps);

}  // namespace zt
