#include "train/grad_finalize.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "core/log.hpp"
#include "optim/clip.hpp"
#include "optim/clip_math.hpp"
#include "optim/step_verdict.hpp"

namespace zt {

GradientFinalizer::GradientFinalizer(ZeroEngine& zero, Kernels& kernels, Device& dev, CommBundle& comms,
                                     const std::vector<const Unit*>& units, int mirror, const RunOptions& opts,
                                     InjectedFault fault)
    : zero_(zero), kernels_(kernels), dev_(dev), comms_(comms), units_(units), mirror_(mirror),
      clip_(opts.gradient_clipping), fault_(fault) {
  if (opts.loss_scaler) scaler_ = std::make_unique<LossScaler>(*opts.loss_scaler);
  const int64_t shards = std::max<int64_t>(1, static_cast<int64_t>(zero.owned_shards().size()));
  if (zero.grads_on_host()) {
    host_norm_acc_.assign(1, 0.0);
    host_overflow_.assign(static_cast<size_t>(shards), 0);
  } else {
    norm_acc_ = Buffer(dev, DType::f64, Shape{1}, MemTag::workspace);
    overflow_ = Buffer(dev, DType::i32, Shape{shards}, MemTag::workspace);
  }
  // [Note: verdict on the device]
  const char* env = std::getenv("ZTRAIN_VERDICT");
  const std::string mode = env != nullptr ? env : "";
  ZT_CHECK(mode.empty() || mode == "host" || mode == "device", "ZTRAIN_VERDICT=\"", mode,
           "\": \"host\" (the verdict read by the host before the update) or \"device\" (the default where it "
           "applies)");
  on_device_ = mode != "host" && !scaler_ && !zero.grads_on_host() && zero.placement().states_on_device();
  if (on_device_) {
    verdict_ = Buffer(dev, DType::f64, Shape{kVerdictLength}, MemTag::workspace);
    verdict_host_ = Buffer(dev.host_memory(true), DType::f64, Shape{kVerdictLength}, MemTag::workspace);
    copies_ = dev.make_transfer_queue();
  }
}

void GradientFinalizer::inject_overflow(int64_t step) {
  if (!fault_.at(InjectedFault::Kind::overflow, comms_.topology().world_rank(), step)) return;
  for (OwnedShard& sh : zero_.owned_shards())
    if (sh.unit == fault_.unit) {
      const float inf = std::numeric_limits<float>::infinity();
      zero_.forget_landed_sq(sh.unit);
      if (sh.grad_on_host && sh.grad_dtype == DType::bf16)
        *static_cast<bf16*>(sh.grad) = from_f32<bf16>(inf);
      else if (sh.grad_on_host)
        *sh.grad_f32() = inf;
      else
        dev_.copy_from_host(sh.grad, &inf, sizeof inf);
    }
}

GradientVerdict GradientFinalizer::finalize_on_device(int64_t step, bool stop_requested, const Tensor& loss_sum) {
  ZT_CHECK(on_device_, "the step's verdict on the device does not apply to this run");
  ZT_CHECK(loss_sum.dtype == DType::f64 && loss_sum.numel() == 1, "the step's summed loss: one f64");
  GradientVerdict v;
  complete_gradients(step);
  double* d = static_cast<double*>(verdict_.data());
  const Tensor sums = verdict_.tensor().slice1d(0, 2);  // sum of squares, not-finite flag
  kernels_.zero(sums);
  add_owned_squares(kernels_, verdict_.tensor().slice1d(kVerdictSumSq, 1));
  step_verdict_flag(dev_, d, static_cast<const double*>(loss_sum.data));
  // Reduced as finalize() reduces its triple ([Note: stop agreement]), on the
  // device's communicators, which order the compute stream after them.
  reduce_verdict_sums(sums, true);
  step_verdict_finish(dev_, d, clip_, 1.0);  // no loss scaler here
  verdict_ready_ = copies_->mark_compute();
  // The stop signal, agreed over every rank on the host.
  v.stop = stop_requested;
  if (comms_.world().size() > 1)
    v.stop = all_reduce_scalar(comms_.world(), stop_requested ? 1.0 : 0.0, ReduceOp::max) != 0;
  v.device_verdict = d;
  return v;
}

void GradientFinalizer::resolve(GradientVerdict& v) {
  if (v.device_verdict == nullptr) return;
  double* h = static_cast<double*>(verdict_host_.data());
  const TransferTicket t = copies_->to_host(h, verdict_.data(), verdict_.bytes(), verdict_ready_);
  copies_->wait(t);
  v.grad_norm = h[kVerdictNorm];
  v.grad_scale = static_cast<float>(h[kVerdictGradScale]);
  v.skipped = v.nonfinite = h[kVerdictSkip] != 0;
  v.device_verdict = nullptr;
}

GradientVerdict GradientFinalizer::finalize(int64_t step, bool stop_requested, bool loss_finite) {
  GradientVerdict v;
  complete_gradients(step);
  v.loss_scale = loss_scale();
  if (scaler_) v.skipped = check_overflow(step);

  // [Note: stop agreement] A stop signal (SIGTERM, SIGUSR1) reaches ranks at
  // different moments, yet all must stop after the same step. The flag rides
  // on the gradient-norm reduction the step does anyway: the pair (sum of
  // squares, stop) is reduced over the data axis (summed over the shards;
  // at ZeRO stage 0 every rank holds the whole reduced gradient and so the
  // same sum, and the max keeps it), then summed over the pipeline axis
  // (each stage holds other units). The two axes together span every rank.
  // A third element flags a non-finite loss or gradient on some rank: a flag
  // rather than the NaN itself, which a max reduction may drop.
  const double sq = owned_grad_sq();
  double pair[3] = {sq, stop_requested ? 1.0 : 0.0, std::isfinite(sq) && loss_finite ? 0.0 : 1.0};
  reduce_verdict_sums(Tensor(pair, DType::f64, Shape{3}), false);
  // Every element is owned by exactly one rank (padding has zero gradient),
  // so the norm counts no parameter twice.
  v.grad_norm = std::sqrt(pair[0]) / v.loss_scale;
  v.grad_scale = static_cast<float>(clip_coefficient(v.grad_norm, clip_) / v.loss_scale);
  v.stop = pair[1] != 0;
  // [Note: non-finite steps] A non-finite loss or gradient norm that the
  // fp16 loss scaler has not already dealt with (its overflow skips are part
  // of finding the scale) would write NaN into the master weights: the update
  // is skipped and the trainer counts the step against
  // train.nonfinite_tolerance. Every rank holds the same reduced flag.
  if (pair[2] != 0 && !v.skipped) {
    v.skipped = true;
    v.nonfinite = true;
  }
  return v;
}

void GradientFinalizer::complete_gradients(int64_t step) {
  // The tie copy never runs a backward of its own; its gradient (from the
  // head's) is complete once every micro-batch has gone back.
  if (mirror_ >= 0) zero_.done(mirror_);
  zero_.reduce_gradients();
  reduce_tied_copies();
  inject_overflow(step);
}

void GradientFinalizer::add_owned_squares(Kernels& k, const Tensor& acc) {
  for (const OwnedShard& sh : zero_.owned_shards())
    if (sh.unit != mirror_) k.sum_squares(grad_of(sh), acc);
}

void GradientFinalizer::reduce_verdict_sums(const Tensor& sums, bool on_device) {
  const ReduceOp data_op = zero_.options().stage == 0 ? ReduceOp::max : ReduceOp::sum;
  if (comms_.data().size() > 1)
    all_reduce_sync(on_device ? *comms_.data().tensors : *comms_.data().host, sums, data_op);
  if (comms_.pipeline().size() > 1)
    all_reduce_sync(on_device ? *comms_.pipeline().tensors : *comms_.pipeline().host, sums, ReduceOp::sum);
}

void GradientFinalizer::reduce_tied_copies() {
  const CommAxis& tie = comms_.tie();
  if (!tie.present()) return;
  // The pipeline's tie group exists whenever P > 1; a model without tied
  // parameters (Llama's untied lm_head) has nothing to sum over it.
  if (std::none_of(units_.begin(), units_.end(), [](const Unit* u) { return !u->tied().empty(); })) return;
  const int tied = mirror_ >= 0 ? mirror_ : 0;
  for (const OwnedShard& sh : zero_.owned_shards()) {
    if (sh.unit != tied) continue;
    zero_.forget_landed_sq(sh.unit);
    ZT_CHECK(sh.grad_dtype == DType::f32, "the tied copies' gradients are summed in fp32; unit ", sh.unit, " has ",
             dtype_name(sh.grad_dtype), " gradients");
    if (!sh.grad_on_host || dev_.kind() == DeviceKind::cpu) {
      all_reduce_sync(*tie.tensors, Tensor(sh.grad, DType::f32, Shape{sh.numel()}, dev_.kind()));
      continue;
    }
    // A host gradient goes through the device for the device communicator.
    Buffer b(dev_, DType::f32, Shape{sh.numel()}, MemTag::comm);
    dev_.copy_from_host(b.data(), sh.grad, b.bytes());
    all_reduce_sync(*tie.tensors, b.tensor());
    dev_.copy_to_host(sh.grad, b.data(), b.bytes());
  }
}

Tensor GradientFinalizer::norm_acc() {
  if (norm_acc_.empty()) return Tensor(host_norm_acc_.data(), DType::f64, Shape{1}, DeviceKind::cpu);
  return norm_acc_.tensor();
}

Tensor GradientFinalizer::overflow() {
  if (overflow_.empty())
    return Tensor(host_overflow_.data(), DType::i32, Shape{static_cast<int64_t>(host_overflow_.size())}, DeviceKind::cpu);
  return overflow_.tensor();
}

Tensor GradientFinalizer::grad_of(const OwnedShard& sh) const {
  return Tensor(sh.grad, sh.grad_dtype, Shape{sh.numel()}, sh.grad_on_host ? DeviceKind::cpu : dev_.kind());
}

double GradientFinalizer::owned_grad_sq() {
  Kernels& k = grad_kernels();
  if (zero_.grads_on_host()) {
    // [Note: norm on the device] (zero_engine.hpp): the device's sums of
    // the shards that landed whole, the host's of the others, added in shard
    // order as the accumulator below adds them.
    std::vector<double> dev_sq;
    std::vector<bool> have;
    zero_.landed_shard_sq(dev_sq, have);
    double sq = 0;
    for (const OwnedShard& sh : zero_.owned_shards()) {
      if (sh.unit == mirror_) continue;
      if (have[static_cast<size_t>(sh.index)]) {
        sq += dev_sq[static_cast<size_t>(sh.index)];
        continue;
      }
      host_norm_acc_[0] = 0;
      k.sum_squares(grad_of(sh), norm_acc());
      sq += host_norm_acc_[0];
    }
    return sq;
  }
  k.zero(norm_acc());
  add_owned_squares(k, norm_acc());
  double sq = 0;
  if (norm_acc_.empty())
    sq = host_norm_acc_[0];
  else
    dev_.copy_to_host(&sq, norm_acc_.data(), sizeof sq);  // the step's one read of the gradients
  return sq;
}

// fp16: agrees over all ranks whether any gradient overflowed, updates the
// loss scale and returns whether to skip the step. An overflow at the
// minimum scale ends the run, naming the unit where it first appears in
// backward order (the highest unit whose gradient is not finite).
bool GradientFinalizer::check_overflow(int64_t step) {
  const std::vector<OwnedShard>& shards = zero_.owned_shards();
  std::vector<double> bad(units_.size(), 0.0);  // by unit: the same length on every rank
  std::vector<int32_t> flags(shards.size(), 0);
  Kernels& k = grad_kernels();
  k.zero(overflow());
  for (size_t i = 0; i < shards.size(); ++i)
    k.check_overflow(grad_of(shards[i]), overflow().slice1d(static_cast<int64_t>(i), 1));
  if (overflow_.empty())
    std::copy_n(host_overflow_.begin(), flags.size(), flags.begin());
  else
    dev_.copy_to_host(flags.data(), overflow_.data(), flags.size() * sizeof(int32_t));
  bool any = false;
  for (size_t i = 0; i < shards.size(); ++i) {
    if (flags[i] != 0) bad[static_cast<size_t>(shards[i].unit)] = 1;
    any = any || flags[i] != 0;
  }
  Communicator& world = comms_.world();
  any = all_reduce_scalar(world, any ? 1.0 : 0.0, ReduceOp::max) != 0;
  const bool skip = scaler_->update(any);
  if (!any) return skip;
  all_reduce_sync(world, Tensor(bad.data(), DType::f64, Shape{static_cast<int64_t>(bad.size())}), ReduceOp::max);
  std::string where = "?";
  for (size_t i = bad.size(); i-- > 0;)
    if (bad[i] != 0) {
      where = units_[i]->name();
      break;
    }
  if (scaler_->overflow_at_min_scale()) {
    throw CollectiveError(detail::concat(
        "fp16: gradients overflow at the minimum loss scale (", scaler_->scale(), ", fp16.min_loss_scale) at step ",
        step, "; the overflow first appears in unit '", where,
        "' (backward order). The run cannot continue: lower the learning rate, use bf16, or check the data."));
  }
  log_info("step ", step, ": fp16 gradient overflow (first in unit '", where, "'), step skipped, loss scale ",
           scaler_->scale());
  return skip;
}

}  // namespace zt
