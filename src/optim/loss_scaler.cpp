#include "optim/loss_scaler.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace zt {
namespace {
constexpr double kScaleFactor = 2.0;  // DeepSpeed's scale_factor, not configurable there
}

LossScaler::LossScaler(const LossScalerConfig& config)
    : config_(config), dynamic_(config.loss_scale <= 0.0) {
  if (config.loss_scale < 0.0) ZT_USER_ERROR("fp16.loss_scale must be >= 0, found ", config.loss_scale);
  if (dynamic_) {
    if (config.loss_scale_window < 1) {
      ZT_USER_ERROR("fp16.loss_scale_window must be >= 1, found ", config.loss_scale_window);
    }
    if (config.hysteresis < 1) ZT_USER_ERROR("fp16.hysteresis must be >= 1, found ", config.hysteresis);
    if (!(config.min_loss_scale > 0.0)) {
      ZT_USER_ERROR("fp16.min_loss_scale must be > 0, found ", config.min_loss_scale);
    }
    state_.scale = std::ldexp(1.0, config.initial_scale_power);  // 2**initial_scale_power
  } else {
    state_.scale = config.loss_scale;
  }
  state_.hysteresis_left = config.hysteresis;  // DeepSpeed: cur_hysteresis = delayed_shift
}

bool LossScaler::update(bool overflow) {
  overflow_at_min_ = false;
  if (!dynamic_) return overflow;  // static LossScaler.update_scale does nothing
  LossScalerState& s = state_;
  if (overflow) {
    if (config_.hysteresis == 1 || s.hysteresis_left == 1) {
      if (s.scale == config_.min_loss_scale) {
        overflow_at_min_ = true;  // DeepSpeed raises here (raise_error_at_min_scale)
      } else {
        s.scale = std::max(s.scale / kScaleFactor, config_.min_loss_scale);
      }
    } else {
      --s.hysteresis_left;
    }
    s.last_overflow_iteration = s.iteration;
  } else {
    if (config_.consecutive_hysteresis) s.hysteresis_left = config_.hysteresis;
    // Grows at every multiple of the window counted from the last overflow (or
    // from iteration -1 when there was none): the window-th clean step after it.
    if ((s.iteration - s.last_overflow_iteration) % config_.loss_scale_window == 0) {
      if (!config_.consecutive_hysteresis) s.hysteresis_left = config_.hysteresis;
      s.scale *= kScaleFactor;
    }
  }
  ++s.iteration;
  return overflow;
}

void LossScaler::load_state(const LossScalerState& state) {
  ZT_CHECK(state.scale > 0.0 && std::isfinite(state.scale), "bad loss scale in checkpoint: ",
           state.scale);
  ZT_CHECK(state.hysteresis_left >= 1 || !dynamic_, "bad hysteresis in checkpoint: ",
           state.hysteresis_left);
  state_ = state;
  overflow_at_min_ = false;
}

}  // namespace zt
