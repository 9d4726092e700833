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
// A tile's fp32 gradient is read where it is: in host memory when ZeRO
// keeps the gradients there ([Note: gradients on the host], ratio 1: the
// D2H row above is then empty, the copies ran during the backward), else
// copied to a pinned slot (a ring of `slots`). The host updates master, m
// and v in place and writes the new parameter in the
// working dtype into a pinned out slot in the same pass, and the out slot is
// copied into the shard's working copy on the device. The step costs about
// the slowest of the three streams plus one tile of each of the others; the
// host holds 12 bytes per owned parameter plus the slots (and ZeRO's 4
// of the gradient). The arithmetic is
// adamw.hpp's, so the master weights follow the same bits as on the device.
//
// [Note: streamed update] The exact update is not waited for either:
// finish() hands the tiles to a worker thread, which updates the shards in
// their order (the units' order, which is the forward's) and marks each one
// ready once its last tile is computed and its parameters' upload queued.
// The next step's forward starts at once; ZeroEngine calls await_shard()
// before it reads a shard's parameters (a gather, or the all-gather of a
// unit kept whole), which blocks the host until that shard is ready and
// makes the compute stream wait for its upload. The arithmetic and its
// order are those of the exact update, so the bits are too; only the unit
// at the front of the next forward waits for the update of the units before
// it. The step then costs about the backward + the host update + the forward
// of the last unit, instead of forward + backward + update, where the host
// update is at least as long as the forward. Everything else that reads the
// states (read_state, write_state, the next finish) joins the worker first;
// ZeroEngine awaits every shard before the next backward writes gradients,
// which the worker reads. With a parameter sink (offload_param "nvme"), or
// gradients fetched from the device (ratio < 1), finish() joins the worker
// before it returns. The delayed update's
// uploads go the same way: issued, not waited for, each awaited by the
// forward that needs it.
//
// [Note: delayed parameter update] With delay_after = W >= 0, the updates
// after the first W run delayed, as in the ZeRO-Offload paper: finish() of
// step N copies the step's gradients to the host and returns while a host
// thread updates the states (with the gradients on the host, straight from
// ZeRO's buffer of step N: step N+1 lands its gradients in the other one);
// step N+1's forward and backward run meanwhile on
// the parameters of update N-1, and its finish() waits for update N, uploads
// its parameters (used from step N+2 on) and starts update N+1. The step then
// costs about max(device compute, host update) instead of their sum. Every
// gradient is applied, each one step late: the parameters a step computes
// with lack the latest update (staleness one step). The moments and master
// weights follow exactly the arithmetic of the exact update; only the point
// at which the device sees them moves. A checkpoint saves the latest master,
// so a resumed run starts one update fresher than the continuing run would
// have been. Extra host memory: the gradients (4 bytes per owned element:
// ZeRO's second buffer, or the copy here) and, for 16-bit working
// parameters, their copy (2 bytes).
//
// [Note: NVMe optimizer step] With offload_optimizer.device "nvme"
// (ZeRO-Infinity, make_nvme_offload_adamw) the master weights and moments
// live in three swap files per rank under nvme_path (runtime/aio/aio.hpp's
// SwapDir: ztrain-<run id>-rank<R>-{master,exp_avg,exp_avg_sq}.swp; the run
// id is SLURM_JOB_ID or PBS_JOBID when set, then "p<pid>"). Each owned shard
// is cut into sub-groups of `sub_group_size` elements (the last of a shard
// may be shorter; none spans two shards); every sub-group has its own region
// of each file, padded to the directory's direct-I/O alignment, so every
// transfer is aligned. The moments start as zeros without being written (a
// state never written reads as zeros); the master comes from write_state.
//
// finish() walks the sub-groups in order. A sub-group in flight holds one
// set of three pool buffers (master, exp_avg, exp_avg_sq: `buffer_count`
// buffers make buffer_count / 3 sets, a remainder is not allocated), plus a
// pinned gradient slot and a parameter slot of the same length:
//
//   prepare(i)  read master, m, v of sub-group i into set i % K (NVMe), and
//               fetch its gradient from the device (copy stream)
//   compute(i)  wait for both, host AdamW (adamw.hpp, with the 16-bit copy),
//               upload the working parameters (OwnedShard::param)
//   store(i)    write master, m, v back (NVMe)
//
//   pipeline_read false:  prepare(i) after compute(i-1), waited at once
//   pipeline_read true:   prepare(i+1) is issued before compute(i)
//   pipeline_write false: store(i) is waited for right after it is issued
//   pipeline_write true:  store(i) is waited for when set i % K is prepared
//                         again, for sub-group i + K
//
// Either pipeline key needs two sets (buffer_count >= 6, checked by the
// config); sets beyond two let more writes stay in flight. The arithmetic
// is the host path's, so the master weights have the bits of the device's
// AdamW. Files and host buffers:
//   NVMe  3 x the owned elements' padded bytes (4 B each), checked against
//         the file system's free space when the placement attaches
//   host  per set, 3 x 4 bytes (the pool: page-locked when pin_memory is
//         true, else pageable; each rounded up to the alignment) + 4 + 4
//         bytes (the gradient and parameter slots, always page-locked), x
//         the largest sub-group (min(sub_group_size, largest owned shard));
//         floor(buffer_count / 3) sets
// The delayed update works as for the host path: the worker thread runs the
// sub-group loop from a host copy of the step's gradients (4 B per owned
// element, pinned) into a host copy of the working parameters (2 or 4 B),
// uploaded by the next finish().
//
// An error in a read or write (ENOSPC, EIO; the message names the file,
// the operation and the offset) stops the run: the placement waits for
// what is in flight, removes its swap files and rethrows; it refuses every
// later call. A clean destruction removes them too; the files of a killed
// process are removed by the next SwapDir on that directory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "optim/adamw_math.hpp"
#include "runtime/aio/aio.hpp"
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
  // [Note: streamed update]: the figures above (cpu_s, copies) are those of
  // the exact update that ran beside this step's forward, and await_s the
  // time the step waited for its shards (not hidden).
  bool streamed = false;
  double await_s = 0;
  // NVMe ([Note: NVMe optimizer step]): bytes read from and written to the
  // swap files, and the time the host waited for reads and for writes (what
  // the pipeline did not hide). Delayed: those of the update that finished
  // during this step. Zero for the host placement.
  double nvme_read_bytes = 0;
  double nvme_write_bytes = 0;
  double nvme_read_wait_s = 0;
  double nvme_write_wait_s = 0;
  // offload_param "nvme" ([Note: parameter offload to NVMe] in
  // zero/param_swap.hpp): the parameters' swap file, read by the step's
  // gathers (forward, recomputation, backward) and written by its update,
  // and the host's waits for those (what the prefetch did not hide).
  double param_read_bytes = 0;
  double param_write_bytes = 0;
  double param_read_wait_s = 0;
  double param_write_wait_s = 0;
  // [Note: gradients on the host]: the gradients ZeRO copied to the host
  // during the backward, the host's wait for those copies, and its adds of
  // accumulated pieces. Zero when the gradients stay on the device.
  double grads_landed_bytes = 0;
  double grads_landed_wait_s = 0;
  double grads_add_s = 0;
};

class OffloadAdamW : public OptimizerPlacement {
 public:
  virtual const OffloadStepTimes& last_times() const = 0;
  // Bytes of this rank's swap files on NVMe (0 for the host placement).
  virtual int64_t nvme_bytes() const { return 0; }
};

// `hp.lr` is replaced by each step's learning rate.
std::unique_ptr<OffloadAdamW> make_host_offload_adamw(Device& dev, const AdamWParams& hp,
                                                      const HostOffloadOptions& opts);

// [Note: NVMe optimizer step]
struct NvmeOffloadOptions {
  std::string nvme_path;
  std::string key = "zero_optimization.offload_optimizer.nvme_path";  // names nvme_path in messages
  std::string run_id;  // SwapDir's run id (nvme_run_id())
  int rank = 0;        // in the file names
  int64_t sub_group_size = 1000000000;  // elements
  int buffer_count = 4;                 // pool buffers, 3 per sub-group in flight (>= 3)
  bool pipeline_read = false;           // needs buffer_count >= 6
  bool pipeline_write = false;          // needs buffer_count >= 6
  bool pin_memory = true;               // the pool page-locked (the gradient and parameter slots always are)
  AioOptions aio;
  AioBackend backend = AioBackend::automatic;
  // [Note: delayed parameter update]: updates after the first delay_after
  // run delayed; -1 = never.
  int64_t delay_after = -1;
  // Fault tests (ZT_INJECT_FAULT=nvme-write-error): the first swap-file
  // write of the update with this step count fails like a full disk; -1 =
  // never.
  int64_t fail_write_at_step = -1;
};

// The swap directory is opened (its checks: a directory on a mounted file
// system, writable; stale files of killed runs removed) here, the free space
// checked and the files made by attach(); all of them throw UserError naming
// the key. Bad options throw UserError naming the config key.
std::unique_ptr<OffloadAdamW> make_nvme_offload_adamw(Device& dev, const AdamWParams& hp,
                                                      const NvmeOffloadOptions& opts);

// For a process about to end without its destructors (an error on this
// rank: apps/ztrain.cpp prints it and calls abort_job, i.e. MPI_Abort):
// unlinks the swap files of every NVMe placement alive in this process, and
// of every parameter swap (offload_param "nvme", zero/param_swap.hpp; their
// locks are left; the next SwapDir on the directory removes them). The
// placement does this itself for its own I/O errors. Safe from any thread;
// the open files work on until the process ends, nameless.
void remove_nvme_swap_files_now() noexcept;

// A run id for SwapDir, unique per process: "<job>-p<pid>" with the job id
// of SLURM_JOB_ID or PBS_JOBID (characters SwapDir does not take become
// '_'), or "p<pid>" when neither is set.
std::string nvme_run_id();

}  // namespace zt
