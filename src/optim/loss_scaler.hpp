// Loss scaling for fp16 training: DeepSpeed's DynamicLossScaler
// (deepspeed/runtime/fp16/loss_scaler.py) and its static LossScaler, as pure
// CPU logic. The caller finds overflow (has_inf_or_nan on its gradient shards,
// then a logical OR across all ranks so that every rank takes the same
// decision), calls update() once per optimizer step, and skips the step when
// it returns true.
//
// Config keys are DeepSpeed's "fp16" section: loss_scale (0 = dynamic),
// initial_scale_power, loss_scale_window, hysteresis, consecutive_hysteresis,
// min_loss_scale. The scale factor is 2, as DeepSpeed fixes it.
//
// [Note: dynamic loss scale] On an overflow the step is always skipped. The
// scale is halved (never below min_loss_scale) only when the hysteresis budget
// is spent: with hysteresis h, the first h-1 overflows only decrement the
// budget. The budget is not refilled by the decrease itself: it comes back to
// h when the scale grows again (after loss_scale_window clean steps counted
// from the last overflow, and every window after that), or on every clean step
// when consecutive_hysteresis is set. An overflow that would lower a scale
// already at min_loss_scale is where DeepSpeed raises "Current loss scale
// already at minimum"; here it sets overflow_at_min_scale() and leaves the
// choice (diagnose and abort, or go on) to the trainer.
#pragma once

#include <cstdint>

namespace zt {

struct LossScalerConfig {
  double loss_scale = 0.0;  // > 0: fixed scale; 0: dynamic
  int initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1.0;
};

// Everything a checkpoint needs to resume the scaler bit-exactly
// (DeepSpeed's cur_scale, cur_iter, last_overflow_iter, cur_hysteresis).
struct LossScalerState {
  double scale = 1.0;
  int64_t iteration = 0;           // update() calls so far
  int64_t last_overflow_iteration = -1;
  int hysteresis_left = 1;
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerConfig& config);

  // The current loss scale: multiply the loss by it, divide gradients by it.
  double scale() const { return state_.scale; }
  bool dynamic() const { return dynamic_; }

  // Records one optimizer step's overflow verdict and returns whether the step
  // must be skipped (true exactly when overflow is true, fixed scale or not,
  // as DeepSpeed's fp16 optimizers skip on overflow with a static scale too).
  bool update(bool overflow);

  // True when the last update() saw an overflow that called for a decrease
  // while the scale was already at min_loss_scale.
  bool overflow_at_min_scale() const { return overflow_at_min_; }

  LossScalerState state() const { return state_; }
  void load_state(const LossScalerState& state);

 private:
  LossScalerConfig config_;
  bool dynamic_;
  LossScalerState state_;
  bool overflow_at_min_ = false;
};

}  // namespace zt
