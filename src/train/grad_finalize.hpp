// GradientFinalizer: what ReduceGrads means for the trainer. It completes the
// step's gradient reduction and decides what the optimizer does with it:
//   1. ZeRO's reduction (reduce_gradients), then the tied embedding's two
//      copies (first and last pipeline stage) summed over the tie axis, so
//      that both apply the same update and stay equal;
//   2. fp16: whether any gradient overflowed, agreed over all ranks, and the
//      loss scaler's verdict (skip the step, new scale);
//   3. the global gradient norm over every owned shard of every stage, with
//      the stop signal riding on its reduction ([Note: stop agreement]);
//   4. the clipping coefficient, folded into AdamW's gradient scale.
// With the gradient shards in host memory ([Note: gradients on the host]),
// the norm and the overflow check run on the host's cores (CpuKernels: the
// same arithmetic as the CPU backend's device path), and the tied copies are
// summed through a device buffer.
//
// [Note: verdict on the device] Where the update runs on the device too (the
// states on the device, the gradients not on the host) and no loss scaler
// decides (not fp16), the verdict (2-4 above) is computed on the device and
// the host reads none of it before the update: the sum of squares and a
// not-finite flag (the loss's and the norm's) are reduced over the data and
// pipeline axes by the device's communicators, a one-thread kernel turns them
// into the clipping coefficient (optim/clip_math.hpp, the host's arithmetic),
// and every AdamW launch reads that coefficient, or skips, from device
// memory (OptimizerStepScalars::verdict). The stop signal is agreed on the
// host over the world instead of riding on the norm's reduction. The host
// learns the verdict after it has queued the update (resolve()), from a copy
// that starts once the verdict is computed, so the device goes from the
// reduction to the update without waiting for the host, and the step from its
// first forward to its update holds no device-to-host copy ([Note: host round
// trips]). The bits are the host path's: the same sums, reduced by the same
// communicator on the CPU backend, and the same fp32 coefficient.
// ZTRAIN_VERDICT=host keeps the host path for comparison.
#pragma once

#include <memory>
#include <vector>

#include "comm/comm_bundle.hpp"
#include "modules/cpu_kernels.hpp"
#include "modules/kernels.hpp"
#include "optim/loss_scaler.hpp"
#include "runtime/transfer.hpp"
#include "train/fault_injection.hpp"
#include "train/run_options.hpp"
#include "zero/zero_engine.hpp"

namespace zt {

struct GradientVerdict {
  double grad_norm = 0;   // global norm of the unscaled gradient, before clipping
  float grad_scale = 1;   // AdamW's gradient multiplier: clip coefficient / loss scale
  double loss_scale = 1;  // the scale this step's loss was multiplied by
  bool skipped = false;   // fp16 overflow, or `nonfinite`: the step makes no update
  // The loss or the gradient norm is not finite on some rank and the loss
  // scaler (fp16) did not already skip the step for it: the update is
  // skipped, and the trainer counts such steps (train.nonfinite_tolerance).
  bool nonfinite = false;
  bool stop = false;      // some rank received a stop signal: every rank stops after this step
  // [Note: verdict on the device]: when not null, grad_norm, grad_scale,
  // skipped and nonfinite are still here, in device memory, where an update
  // reads them; GradientFinalizer::resolve fills them and clears this.
  const double* device_verdict = nullptr;
};

class GradientFinalizer {
 public:
  // units: the whole model (for messages); mirror: the unit this stage holds
  // only as a copy of the tied embedding (-1: none).
  GradientFinalizer(ZeroEngine& zero, Kernels& kernels, Device& dev, CommBundle& comms,
                    const std::vector<const Unit*>& units, int mirror, const RunOptions& opts, InjectedFault fault);

  // The loss scale for the next step's loss (1 without fp16).
  double loss_scale() const { return scaler_ ? scaler_->scale() : 1.0; }
  LossScaler* scaler() { return scaler_.get(); }

  // Finishes step `step` (1-based, for messages); `stop_requested`: this
  // rank's stop signal; `loss_finite`: whether this rank's share of the
  // step's loss is finite. Collective over all ranks.
  GradientVerdict finalize(int64_t step, bool stop_requested, bool loss_finite = true);
  // Whether finalize_on_device() applies ([Note: verdict on the device]).
  bool verdict_on_device() const { return on_device_; }
  // The same on the device: `loss_sum` is this rank's summed loss of the
  // step (device memory, f64), whose finiteness the verdict includes. The
  // verdict returned is pending (its device_verdict set).
  GradientVerdict finalize_on_device(int64_t step, bool stop_requested, const Tensor& loss_sum);
  // Fills a pending verdict's fields once the device has computed them
  // (blocks the host until then); call after the update is queued.
  void resolve(GradientVerdict& v);

 private:
  // What both verdicts start from: the gradients reduced over the data axis
  // and the tie group, the step's injected fault applied.
  void complete_gradients(int64_t step);
  void inject_overflow(int64_t step);
  void reduce_tied_copies();
  bool check_overflow(int64_t step);
  double owned_grad_sq();
  // Adds the squares of every owned gradient shard into acc (one f64 where
  // the gradients are), the tied copy counted once, on the first stage.
  void add_owned_squares(Kernels& k, const Tensor& acc);
  // Reduces the verdict's sums over the data axis (max at stage 0, where
  // every rank holds the same reduced gradient; sum otherwise) and then
  // over the pipeline axis, through the host's or the device's communicators.
  void reduce_verdict_sums(const Tensor& sums, bool on_device);
  // The gradient shard of `sh` as a tensor where it lives, and the kernels
  // that run there.
  Tensor grad_of(const OwnedShard& sh) const;
  Kernels& grad_kernels() { return zero_.grads_on_host() ? host_kernels_ : kernels_; }

  ZeroEngine& zero_;
  Kernels& kernels_;
  Device& dev_;
  CommBundle& comms_;
  std::vector<const Unit*> units_;
  int mirror_;
  double clip_;
  std::unique_ptr<LossScaler> scaler_;  // fp16 only
  InjectedFault fault_;
  // Where the gradients are: on the device, or in host memory.
  Buffer norm_acc_;  // (1) f64
  Buffer overflow_;  // (owned shards) i32
  std::vector<double> host_norm_acc_;
  std::vector<int32_t> host_overflow_;
  Tensor norm_acc();
  Tensor overflow();
  CpuKernels host_kernels_;
  // [Note: verdict on the device]
  bool on_device_ = false;
  Buffer verdict_;       // (kVerdictLength) f64, device memory
  Buffer verdict_host_;  // (kVerdictLength) f64, pinned host memory
  std::unique_ptr<TransferQueue> copies_;
  TransferTicket verdict_ready_;  // compute mark after the verdict's last kernel
};

}  // namespace zt
