// OffloadAdamW: the optimizer placement of ZeRO-Offload. The fp32 master
// weights and Adam moments of the rank's owned shards live off the device (in
// host memory, or a `ratio` of them on the device and the rest on the host);
// the update runs on the host's cores (adamw.hpp: vectorised, all threads)
// and leaves the device's working copy of every shard fresh.
//
// [Note: offload step] finish() runs the step as a pipeline of tiles of
// `tile_elements`, each tile's work on a different resource at once:
//
//   copy stream D2H   | grad t+1 | grad t+2 | grad t+3 | ...
//   host cores        |  AdamW t | AdamW t+1| AdamW t+2| ...
//   copy stream H2D   |          | param t  | param t+1| ...
//
// A tile's fp32 gradient goes to a pinned slot (a ring of `slots`), the
// host updates master, m and v in place and writes the new parameter in the
// working dtype into a pinned out slot in the same pass, and the out slot is
// copied into the shard's working copy on the device. The step costs about
// the slowest of the three streams plus one tile of each of the others; the
// host holds 12 bytes per owned parameter plus the slots. The arithmetic is
// adamw.hpp's, so the master weights follow the same bits as on the device.
//
// [Note: delayed parameter update] With delay_after = W >= 0, the updates
// after the first W run delayed, as in the ZeRO-Offload paper: finish() of
// step N copies the step's gradients to the host and returns while a host
// thread updates the states; step N+1's forward and backward run meanwhile on
// the parameters of update N-1, and its finish() waits for update N, uploads
// its parameters (used from step N+2 on) and starts update N+1. The step then
// costs about max(device compute, host update) instead of their sum. Every
// gradient is applied, each one step late: the parameters a step computes
// with lack the latest update (staleness one step). The moments and master
// weights follow exactly the arithmetic of the exact update; only the point
// at which the device sees them moves. A checkpoint saves the latest master,
// so a resumed run starts one update fresher than the continuing run would
// have been. Extra host memory: the gradients (4 bytes per owned element)
// and, for 16-bit working parameters, their copy (2 bytes).
#pragma once

#include <cstdint>
#include <memory>

#include "optim/adamw_math.hpp"
#include "runtime/device.hpp"
#include "zero/optimizer_placement.hpp"

namespace zt {

struct HostOffloadOptions {
  bool pin_memory = true;   // states in page-locked host memory
  double ratio = 1.0;       // fraction of the owned elements whose states go to the host
  int64_t tile_elements = int64_t{1} << 22;
  int slots = 4;            // pinned gradient and parameter slots in flight
  // [Note: delayed parameter update]: updates after the first delay_after
  // run delayed; -1 = never.
  int64_t delay_after = -1;
};

// The last step's offload phases: bytes copied each way, the host's AdamW
// time, and the time the host waited for copies (what the pipeline did not
// hide behind the host's compute).
struct OffloadStepTimes {
  double d2h_bytes = 0;
  double h2d_bytes = 0;
  double d2h_wait_s = 0;
  double h2d_wait_s = 0;
  double cpu_s = 0;    // host AdamW, all tiles (delayed: the update that finished during this step)
  double total_s = 0;  // the whole of finish()
  double delayed_wait_s = 0;  // delayed: finish() waited for the previous update (not hidden)
  bool delayed = false;
};

class OffloadAdamW : public OptimizerPlacement {
 public:
  virtual const OffloadStepTimes& last_times() const = 0;
};

// `hp.lr` is replaced by each step's learning rate.
std::unique_ptr<OffloadAdamW> make_host_offload_adamw(Device& dev, const AdamWParams& hp,
                                                      const HostOffloadOptions& opts);

}  // namespace zt
