// GradLanding: where reduced gradient pieces leave the device when the
// optimizer runs on the host (offload with ratio 1).
//
// [Note: gradients on the host] With the optimizer's states off the device,
// the owned fp32 gradient shard lives in host memory too, so the device
// holds no gradient shard at all (4 bytes per owned parameter less). Each
// unit's reduce-scatter output (a staging buffer on the device) is handed
// here as soon as its reduction is issued, and copied to the host on the
// transfer queue's device-to-host stream while the backward goes on:
//
//   compute stream   | backward u | backward u-1 | backward u-2 | ...
//   reduction        |            | reduce u     | reduce u-1   | ...
//   copy stream D2H  |            |              | grad u       | grad u-1 ...
//
// The first piece that lands on an element in a step is copied straight into
// the host shard (the shard needs no zeroing); a later one (gradient
// accumulation, pipeline micro-batches) goes to a pinned slot and is added
// on the host (float adds, in the order the device would add them, so the
// bits equal those of the device path), on the landing's own thread while
// the main thread goes on queueing the backward. With offload.grad_accumulation
// "device" the engine instead adds the micro-batches before the last into a
// device accumulator and lands the sum with the last one, so every element
// lands once a step (ZeroEngine::done). At most `max_in_flight` pieces are
// in flight: before another is taken, the oldest is waited for (issued that
// many units earlier, so normally done) and its staging buffer freed. drain()
// completes every piece; the host shard is then the step's gradient.
//
// [Note: bf16 gradients on the host] With offload.grad_dtype "bf16" the host
// shards are bf16: each reduced fp32 piece is rounded to nearest even on the
// device (the cast kernel) and the rounded piece is copied, 2 bytes per
// element instead of 4 over PCIe and in host memory, and 2 fewer for the
// host AdamW to read. The device's sum of squares for the norm is taken of
// the rounded values, so clipping scales what is applied. The rounding
// happens once, after the fp32 reduction and accumulation: a run of it is
// bit-identical across ZeRO stages, data-parallel sizes and offload devices
// (as fp32 runs are), and differs from fp32 by the rounding of the step's
// gradient, a relative 2^-8 at most per element, as when DeepSpeed moves a
// bf16 model's gradients to its CPU optimizer. Rounded values cannot be
// added again without rounding twice, so every element must land once a
// step: no gradient accumulation, all of a step's micro-batches in one
// breadth-first group, or offload.grad_accumulation "device" (checked by
// the configuration; land() refuses a second piece).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "runtime/device.hpp"
#include "runtime/job_thread.hpp"
#include "runtime/transfer.hpp"

namespace zt {

struct GradLandingTimes {
  double bytes = 0;     // device-to-host gradient bytes this step
  double wait_s = 0;    // main-thread time spent waiting for those copies and adds (not hidden)
  double add_s = 0;     // the landing thread's time adding accumulated pieces
};

class GradLanding {
 public:
  // `copies` moves the pieces; slots come from `pinned` (page-locked host memory).
  static constexpr int kDefaultInFlight = 4;
  GradLanding(TransferQueue& copies, Device& pinned, int max_in_flight = kDefaultInFlight);
  ~GradLanding();
  GradLanding(const GradLanding&) = delete;
  GradLanding& operator=(const GradLanding&) = delete;

  // A new step: every element's next piece is its first.
  void begin_step();
  // Lands `count` floats of device memory `staging` (owned from now on) on
  // host memory `host_dst`: copied there if no piece landed on it this step,
  // else added. A piece lands on the same host_dst every micro-batch.
  // `sq_into` (only for a piece that is added): host memory that receives
  // the sum of squares of host_dst's count values after the add, computed in
  // the add's pass, with the bits CpuKernels::sum_squares gives in
  // `sq_parts` parts ([Note: host sums of squares] in
  // modules/cpu_kernels.hpp); written by the landing's thread, so read only
  // after drain().
  // A staging buffer in bf16 ([Note: bf16 gradients on the host]) must be
  // the element's only piece of the step: it is copied, never added.
  void land(void* host_dst, Buffer staging, int64_t count, double* sq_into = nullptr, int sq_parts = 1);
  // Every landed piece is in host memory.
  void drain();
  // Elements landed for the first time this step (each host element once).
  int64_t first_landed() const { return first_landed_; }
  const GradLandingTimes& times() const { return times_; }

 private:
  struct InFlight {
    TransferTicket ticket;
    Buffer staging;
    int slot = -1;  // >= 0: added from slots_[slot]
    void* dst = nullptr;
    int64_t count = 0;
    double* sq_into = nullptr;  // with slot >= 0: the sum of squares after the add
    int sq_parts = 1;
  };
  void retire_oldest();
  int take_slot();  // a slot no add reads, waiting for one if need be

  TransferQueue& copies_;
  Device& pinned_;
  int max_in_flight_;
  std::deque<InFlight> queue_;
  std::vector<Buffer> slots_;
  std::vector<bool> slot_busy_;  // under mu_: a copy or an add uses the slot
  std::mutex mu_;
  std::condition_variable cv_;
  double add_s_ = 0;  // under mu_
  std::unordered_set<const void*> seen_;
  int64_t first_landed_ = 0;
  GradLandingTimes times_;
  JobThread adder_;  // last: it stops first, its adds read the members above
};

}  // namespace zt
