// ZeroEngine: the ParamProvider and GradSink of the parameter seam, and the
// owner of every model-state buffer of one rank (working parameters, fp32
// master weights, Adam moments, gradients), for ZeRO stages 0-3.
//
// [Note: ZeRO stages] Every unit's flat buffer is padded to dp*S elements and
// rank r owns [r*S, (r+1)*S) of it (FlatLayout). What each stage keeps:
//
//   stage | working params      | gradients                          | master, m, v
//   0     | full, replicated    | full fp32, all-reduced at the step | full
//   1     | full, replicated    | full fp32, reduce-scattered at the | owned shard
//         |                     | step into the owned shard          |
//   2     | full, replicated    | per unit, reduce-scattered as soon | owned shard
//         |                     | as its backward is done; only the  |
//         |                     | owned fp32 shard is kept           |
//   3     | owned shard; a unit | as stage 2                         | owned shard
//         | is all-gathered     |                                    |
//         | before it runs      |                                    |
//
// After the optimizer updates the owned shards, publish_params() refreshes
// the working copy: stage 0 casts, stages 1-2 cast the shard and all-gather it
// (in buckets of allgather_bucket_size), stage 3 casts into the working shard
// and drops every gathered copy (now stale). In stage 3, units smaller than
// stage3_param_persistence_threshold are kept whole like stage 1-2 units.
//
// [Note: working copy from the update] Where the placement keeps its states
// on the device and refreshes_working_copy() (DeviceAdamW), each owned shard
// that has a separate 16-bit working copy (stage 0 in bf16/f16: the slice
// of the full working buffer; stage 3: the slice of the working shard) hands
// it to the update as OwnedShard::param, which the update writes in the same
// pass as the master (2 bytes written per element, instead of a cast that
// reads the 4-byte master again). publish_params then skips that cast if the
// last thing to change the master was apply_optimizer: the flag it sets is
// cleared by publish_params, so a skipped step or states written by
// write_state (checkpoints, init_from) between two publishes get the cast
// as before. Stages 1-2 still cast each shard into the gather's send buffer.
//
// [Note: gradients written, not zeroed] At stages 0-1 every step's gradients
// sum into one full fp32 buffer, which zero_grads cleared whole before the
// step (5.25 GB written at 1.3B). Most of it belongs to parameters whose
// gradient the backward writes in one product (ParamSpec::
// grad_overwritten: GPT-2's four block weights). zero_grads now clears only
// the rest (the biases, the norms, the embeddings, the padding; spans built
// once, the small ones in one zero_spans launch), and each unit's first
// backward of the step is told so (grads_fresh, UnitContext::grads_fresh)
// and writes those gradients instead of adding into them; later micro-
// batches add. Sums of zero and a product are the product's bits (but for
// the sign of a zero), so the step's numbers are those of the cleared
// buffer. Stages 2-3 keep clearing their per-unit buffers.
//
// The optimizer does not know how shards are made: apply_optimizer hands each
// shard this rank owns to an OptimizerPlacement (optimizer_placement.hpp).
// When the placement keeps the optimizer's states off the device (offload),
// the engine allocates no master or moments; it keeps, for stages 1-3, the
// working shard in the param dtype, which the placement refreshes, and
// publish_params all-gathers from it.
//
// [Note: parameter offload] With offload_params (stage 3, offloaded
// optimizer), the working shards are in host memory (pinned unless
// param_pin_memory is false): the placement writes each updated shard there,
// and start_gather uploads a unit's shard into a buffer of the upload pool
// (on the transfer queue's host-to-device stream) before its all-gather, so
// the prefetch of stage 3 (prefetch_bucket_size ahead) moves the upload ahead
// of use too. The device then holds only gathered units and the pool. A unit
// whose shard exceeds param_buffer_size is refused by name; with every pool
// buffer in flight, the oldest gather is completed first.
//
// With offload_param "nvme" ([Note: parameter offload to NVMe] in
// param_swap.hpp) the working shards live in a swap file instead (a
// ParamSwap; the first max_in_cpu elements stay in host memory as above):
// start_gather reads a unit's shard into a pinned buffer, uploads it from
// there, and the prefetch also issues the reads of the units after the ones
// it gathers (as many as there are free read buffers), so the reads run
// while earlier units compute. The placement hands the new parameters to
// the swap (OwnedShard::param_sink), which writes each shard once it is
// complete; publish_params waits for those writes before anything is read.
//
// [Note: parameters from the master] With param_from_master (offload.
// param_from_master: offload_param "cpu", the optimizer on the host) no
// working shard is kept at all: a gather uploads the shard's fp32 master
// from the placement's host memory (OptimizerPlacement::host_master) into
// one of two fp32 staging buffers, and a cast on the device rounds it into
// the pool buffer, to nearest even as the host's AdamW would have written
// it, so the parameters are the same bits. The host keeps 2 bytes per
// parameter less (16 instead of 18 in bf16), the copy moves 4 bytes per
// parameter over PCIe instead of 2, and the host's AdamW writes no 16-bit
// copy. Uploads read the master that the next update rewrites: the
// delayed update is refused with it.
//
// When the placement asks for the gradients on the host
// (OptimizerPlacement::host_gradient_buffers, [Note: gradients on the
// host]), the owned gradient shards are host memory and every reduced piece
// lands there through a GradLanding as its reduction ends.
//
// [Note: norm on the device] The global norm then needs each shard's sum of
// squares, which the host would compute by reading every gradient once
// more after the backward (5 GB for 1.3B parameters, on the step's critical
// path). When a unit's gradient lands once a step (no accumulation, a
// breadth-first run of all the micro-batches, or the last micro-batch with
// offload.grad_accumulation "device") in one piece (reduce_bucket_size at
// least the shard), the device adds the piece's sum of squares into a slot
// of its own before the piece leaves, with the kernel the device path uses
// on its own gradient shard; GradientFinalizer reads the slots once and
// adds them in shard order, as the device path's accumulator does, so the
// norm has the bits of the run without offload. A unit whose gradient lands
// more than once a step in one piece (gradient accumulation without one
// breadth-first run of every micro-batch) is added on the host from its
// second landing on; each such add also sums the squares of the values it
// leaves ([Note: host sums of squares] in modules/cpu_kernels.hpp, the bits
// of the host's sum over the shard), so the last one's sum is the shard's,
// taken beside the backward instead of in another pass after it. Other
// shards (in several pieces) are summed on the host after the backward.
//
// [Note: streamed update] (optim/offload_adamw.hpp) With the states off the
// device, publish_params only marks the units kept whole as stale: each is
// gathered again at its next acquire (publish_unit), after the placement's
// await_shard; a stage 3 gather awaits its shard likewise, and the first
// gradient of a backward awaits them all.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "comm/communicator.hpp"
#include "runtime/device.hpp"
#include "runtime/transfer.hpp"
#include "zero/buckets.hpp"
#include "zero/flat_layout.hpp"
#include "zero/grad_landing.hpp"
#include "zero/optimizer_placement.hpp"
#include "zero/owned_shard.hpp"
#include "zero/param_swap.hpp"

namespace zt {

struct ZeroOptions {
  int stage = 0;
  int64_t reduce_bucket_size = 500000000;     // elements, as in DeepSpeed
  int64_t allgather_bucket_size = 500000000;  // elements
  bool overlap_comm = false;
  int64_t prefetch_bucket_size = 50000000;    // stage 3: elements gathered ahead
  int64_t param_persistence_threshold = 100000;
  int64_t max_live_parameters = 1000000000;
  int64_t max_reuse_distance = 1000000000;
  DType param_dtype = DType::f32;  // storage of the working parameters
  // [Note: parameter offload] Stage 3 with offloaded optimizer states: the
  // working shards live in host memory and are uploaded through a pool of
  // param_buffer_count device buffers of up to param_buffer_size elements.
  bool offload_params = false;
  bool param_pin_memory = true;
  int param_buffer_count = 5;
  int64_t param_buffer_size = 100000000;
  // offload_param "nvme": the working shards in a swap file (param_swap.hpp).
  bool param_nvme = false;
  // [Note: parameters from the master]: with offload_params, no host copy
  // of the working shards; uploads are made from the fp32 master.
  bool param_from_master = false;
  ParamSwapOptions param_swap;
  // [Note: gradients on the host]: the host gradient shards page-locked
  // (offload_optimizer.pin_memory).
  bool grad_pin_memory = true;
  // offload.grad_accumulation "device" ([Note: gradients on the host]):
  // micro-batches 1..M-1 of a step add their reduced gradients into a device
  // accumulator, and the M-th lands the sum on the host.
  bool grad_accumulate_on_device = false;
  int64_t micro_batches = 1;  // per step, per unit (gradient accumulation)
  // offload.grad_dtype ([Note: bf16 gradients on the host] in
  // grad_landing.hpp): the dtype of the host gradient shards, f32 or bf16.
  // bf16 needs the gradients on the host and each element landing once a
  // step.
  DType host_grad_dtype = DType::f32;
};

class ZeroEngine final : public ParamProvider, public GradSink {
 public:
  // `dp` moves tensors on `dev` (NCCL or host-staged MPI for a GPU, MPI on
  // the CPU); `host_dp` reduces host scalars over the same ranks. Element
  // operations on the buffers run through `kernels`, on the device.
  // `local` marks the units this rank holds (a pipeline stage's chunks, plus
  // a copy of a unit its units tie to); empty = all.
  // `placement` updates the owned shards and holds or reaches their states
  // (it outlives the engine).
  ZeroEngine(const std::vector<const Unit*>& units, const ZeroOptions& opts, Device& dev, Kernels& kernels,
             Communicator& dp, Communicator& host_dp, OptimizerPlacement& placement, std::vector<bool> local = {});
  bool is_local(int u) const { return local_[static_cast<size_t>(u)]; }
  ~ZeroEngine() override;

  const FlatLayout& layout() const { return layout_; }
  const ZeroOptions& options() const { return opts_; }

  // Initial values from each unit's init_param (a pure function of the seed
  // and element index, so every rank and every layout agrees).
  void init_params(uint64_t seed);

  // ParamProvider / GradSink.
  std::vector<Tensor> acquire(int unit, Phase phase) override;
  void release(int unit, Phase phase) override;
  std::vector<Tensor> grads(int unit) override;
  bool grads_fresh(int unit) override;
  void done(int unit) override;
  // [Note: breadth-first walk] (pipeline/executor.hpp): ParamProvider's and
  // GradSink's hint. Within a run of n, a unit released in a phase before
  // its n-th use of it stays gathered, and done() reduces a unit's gradient
  // only after its n-th backward, the buffer summing the run's micro-batches
  // (a stage 2-3 gradient is then reduced, and lands on the host, once per
  // run instead of once per micro-batch).
  void set_run_length(int n) override;

  void zero_grads();
  // Completes the gradient reduction of the step: stage 0 all-reduces, stage
  // 1 reduce-scatters, stages 2-3 wait for the reductions issued in backward
  // (and, with the gradients on the host, for their copies there).
  void reduce_gradients();
  // [Note: gradients on the host]: whether the owned gradient shards are in
  // host memory, and the step's copies there (null when not).
  bool grads_on_host() const { return landing_ != nullptr; }
  const GradLandingTimes* grad_landing_times() const { return landing_ ? &landing_->times() : nullptr; }
  // [Note: norm on the device] With the gradients on the host: each owned
  // shard's sum of squares (by shard index) where the device computed it
  // from the piece that landed, which is then the shard's whole gradient of
  // the step, or the landing's last host add did; have[i] false where
  // neither did (the host sums that shard). Returns whether any shard has
  // one. One read of the device; after reduce_gradients().
  bool landed_shard_sq(std::vector<double>& sq, std::vector<bool>& have);
  // The unit's host gradient changed after it landed (a tie reduction, a
  // test's injected fault): its landed sum no longer holds.
  void forget_landed_sq(int unit);
  std::vector<OwnedShard>& owned_shards() { return owned_; }
  OptimizerPlacement& placement() { return placement_; }
  // The optimizer step: every owned shard through the placement, then finish().
  void apply_optimizer(const OptimizerStepScalars& s);
  // Sum over the data-parallel group of a per-rank partial sum over owned
  // shards (identity when the shards are not partitioned).
  double reduce_owned_sum(double local);
  void publish_params();

  // Whole-model gather: calls fn(unit, full) for each local unit in order with the
  // unit's complete flat parameters (numel elements, fp32 master values, in
  // the engine's device memory), holding one unit at a time. Collective over
  // the data-parallel group.
  template <typename Fn>
  void for_each_full_unit(Fn&& fn) {
    Buffer full;
    for (int u = 0; u < layout_.num_units(); ++u) {
      if (!is_local(u)) continue;
      gather_master(u, full);
      fn(u, static_cast<const float*>(full.data()));
    }
  }
  // Elements of working parameters gathered right now (stage 3), and the peak.
  int64_t live_gathered() const { return live_; }
  int64_t peak_live_gathered() const { return peak_live_; }
  // offload_param "nvme": the swap file's bytes on NVMe (0 without it), and
  // the bytes read and written since the last call, with the waits.
  int64_t param_nvme_bytes() const { return swap_ ? swap_->file_bytes() : 0; }
  ParamSwapStats take_param_swap_stats() { return swap_ ? swap_->take_stats() : ParamSwapStats{}; }

 private:
  struct UnitState {
    int64_t full_offset = -1;         // offset in working_, -1 when partitioned (stage 3)
    Buffer gathered;                  // stage 3: full working params while gathered
    std::vector<PendingCollective> gather;  // gather in flight into `gathered`
    int refs = 0;                     // acquires not yet released (own and tied)
    Buffer grad;                      // stages 2-3: this micro-batch's full fp32 gradient
    std::vector<PendingCollective> reduce;  // reduce-scatters reading `grad`
    int upload = -1;                  // [Note: parameter offload]: pool buffer of the gather in flight
  };
  bool partitioned(int u) const;  // stage 3 and not persistent
  void gather_master(int u, Buffer& full);
  void* working_full(int u) const;  // full working params of unit u (must be available)
  void start_gather(int u);
  void wait_gather(int u);
  const void* upload_shard(int u, const void* host_shard, TransferTicket* uploaded = nullptr);
  // [Note: parameters from the master]: n fp32 host values into `dst` on
  // the device in the param dtype, through a staging buffer.
  void upload_rounded(void* dst, const float* host_src, int64_t n);
  const void* host_shard(int u);  // the shard a gather starts from ([Note: parameter offload])
  void read_ahead(int from, int step);
  void free_gathered(int u);
  void prefetch(int u, Phase phase);
  void ensure_grad_buffer(int u);
  void progress_reductions(bool wait_all);
  bool more_in_run(int unit, int kind);
  // [Note: streamed update] (optim/offload_adamw.hpp)
  bool lazy_publish() const;
  void await_update(int u);
  void publish_unit(int u);
  double* sq_slot(int u);
  void* shard_grad(int u);
  DType shard_grad_dtype() const;
  void note_sq(int u, bool summed, bool on_host = false);

  std::vector<bool> local_;
  std::vector<const Unit*> units_;
  FlatLayout layout_;
  ZeroOptions opts_;
  Device& dev_;
  Kernels& kernels_;
  Communicator& dp_;
  Communicator& host_dp_;
  OptimizerPlacement& placement_;
  bool states_on_device_ = true;
  int rank_ = 0;
  // Model-wide buffers: units at layout offsets (full) or shard offsets.
  Buffer working_;        // full padded working params (stage 0-2; stage 3 persistent units)
  Buffer working_shard_;  // owned range of every unit, param dtype: stage 3, or offloaded states
  Buffer master_;         // fp32 master: full (stage 0) or shards; empty if working is the fp32 master
  Buffer grads_;          // fp32 full gradients (stages 0-1)
  Buffer grad_shard_;     // owned gradient shards (stages 1-3): fp32 on the device, fp32 or bf16 on the host
  Buffer grad_shard_alt_; // the other host buffer when the placement asks for two
  Buffer grad_acc_;       // offload.grad_accumulation "device": the device accumulator of grad_shard_
  // [Note: norm on the device]: f64 by unit, and whether this step's is set.
  Buffer shard_sq_;
  std::vector<bool> sq_on_device_;
  // The same summed by the landing's host add of a unit's last piece
  // ([Note: host sums of squares] in modules/cpu_kernels.hpp), by unit.
  std::vector<double> host_sq_;
  std::vector<bool> sq_on_host_;
  std::vector<bool> landed_;  // the unit's gradient landed this step
  // [Note: gradients written, not zeroed]: what zero_grads clears of grads_
  // (large spans one by one, the small ones in one call), and the units
  // whose backward already wrote this step.
  std::vector<Kernels::ZeroSpan> clear_large_, clear_small_;
  bool overwrite_first_ = false;
  std::vector<bool> grads_written_;
  std::vector<int64_t> micro_done_;  // with grad_acc_: micro-batches of this step each unit has reduced
  int64_t shard_elems_ = 0;
  Buffer exp_avg_, exp_avg_sq_;
  std::vector<int64_t> shard_offset_;  // element offset of unit u in the shard buffers
  std::vector<int64_t> grad_offset_;   // element offset of unit u in the full gradient buffer
  std::vector<UnitState> state_;
  std::vector<OwnedShard> owned_;
  std::vector<int> owned_index_;  // unit -> index in owned_, -1 when not local
  // [Note: parameter offload]
  std::unique_ptr<TransferQueue> copies_;
  std::vector<Buffer> upload_pool_;
  std::vector<int> upload_user_;  // unit whose gather uses pool buffer i, -1 = free
  std::vector<int> upload_order_; // units holding a pool buffer, oldest first
  int64_t upload_elems_ = 1;  // elements per pool buffer
  Buffer persistent_upload_;  // the shards of the units kept whole, on the device
  std::vector<int64_t> persist_at_;  // unit -> element offset in persistent_upload_
  // [Note: streamed update]: units kept whole whose working copy waits for
  // its next use to be gathered again, and whether this step's backward has
  // awaited the update.
  std::vector<bool> stale_;
  bool awaited_all_ = true;
  // [Note: working copy from the update]: apply_optimizer's update wrote the
  // working copies that publish_params would otherwise cast.
  bool working_fresh_ = false;
  std::vector<TransferTicket> upload_done_;  // compute mark after the last gather from buffer i
  // [Note: parameters from the master]: fp32 staging buffers, and the
  // compute mark after the cast that last read each.
  Buffer staging_[2];
  TransferTicket staging_done_[2];
  int next_staging_ = 0;
  // [Note: parameter offload to NVMe] After copies_, which it uses.
  std::unique_ptr<ParamSwap> swap_;
  std::vector<PendingCollective> pending_reduce_;
  static constexpr int kMaxReducing = 2;  // units with reductions in flight (overlap_comm)
  std::vector<int> reducing_;             // those units, oldest first
  int64_t live_ = 0, peak_live_ = 0;
  // [Note: breadth-first walk]: the run length, and per kind (the three
  // Phases' releases, then done()) and unit the uses seen in the run.
  static constexpr int kRunDone = 3;
  int run_length_ = 1;
  std::array<std::vector<int>, 4> run_seen_;
  // [Note: gradients on the host] Declared after copies_, which it uses, so
  // that it goes first (also when the constructor throws).
  std::unique_ptr<GradLanding> landing_;
};

}  // namespace zt
