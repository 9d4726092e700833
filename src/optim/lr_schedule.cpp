// The formulas of deepspeed/runtime/lr_schedules.py, evaluated in double with
// DeepSpeed's operation order (Python floats are doubles), so that lr_at
// matches DeepSpeed's values to the last bit, not only to a tolerance.
#include "optim/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace zt {
namespace {

constexpr double kPi = 3.141592653589793;  // math.pi

// DeepSpeed clamps warmup_num_steps to at least 2 (log(1) = 0 would divide by
// zero in the log warmup); the linear warmup uses the clamped value too.
int64_t clamp_warmup(int64_t warmup_num_steps) { return std::max<int64_t>(2, warmup_num_steps); }

// The warmup fraction at iteration it < warmup: DeepSpeed's _get_gamma.
// log:    (1 / log(W)) * log(it + 1)   (a product with the stored inverse)
// linear: it / W
double warmup_fraction(int64_t it, int64_t warmup, WarmupType type) {
  if (type == WarmupType::log) {
    const double inverse_log_warm_up = 1.0 / std::log(static_cast<double>(warmup));
    return inverse_log_warm_up * std::log(static_cast<double>(it + 1));
  }
  return static_cast<double>(it) / static_cast<double>(warmup);
}

}  // namespace

WarmupType warmup_type_from_name(const std::string& name) {
  if (name == "log") return WarmupType::log;
  if (name == "linear") return WarmupType::linear;
  ZT_USER_ERROR("scheduler.params.warmup_type: expected \"log\" or \"linear\", found \"", name,
                "\"");
}

WarmupLr::WarmupLr(double min_lr, double max_lr, int64_t warmup_num_steps, WarmupType type,
                   int64_t total_num_steps)
    : min_lr_(min_lr),
      max_lr_(max_lr),
      warmup_(clamp_warmup(warmup_num_steps)),
      type_(type),
      decay_(total_num_steps > 0),
      total_(total_num_steps) {}

double WarmupLr::warmup_gamma(int64_t it) const {
  if (it < warmup_) return warmup_fraction(it, warmup_, type_);
  if (!decay_) return 1.0;
  // WarmupDecayLR._get_gamma: max(0, (T - it) / max(1, T - W)).
  const double remaining = static_cast<double>(total_ - it);
  const double span = std::max(1.0, static_cast<double>(total_ - warmup_));
  return std::max(0.0, remaining / span);
}

double WarmupLr::lr_at_iteration(int64_t it) const {
  // Before the first scheduler step DeepSpeed's get_lr() returns min_lrs,
  // which its constructor writes into the optimizer.
  if (it < 0) return min_lr_;
  return min_lr_ + (max_lr_ - min_lr_) * warmup_gamma(it);
}

WarmupCosineLr::WarmupCosineLr(double base_lr, int64_t total_num_steps, double warmup_min_ratio,
                               int64_t warmup_num_steps, double cos_min_ratio, WarmupType type)
    : base_lr_(base_lr),
      total_(total_num_steps),
      warmup_min_ratio_(warmup_min_ratio),
      warmup_(clamp_warmup(warmup_num_steps)),
      cos_min_ratio_(cos_min_ratio),
      type_(type) {}

double WarmupCosineLr::ratio_at_iteration(int64_t it) const {
  if (it < 0) return 0.0;
  if (it < warmup_) {
    const double gamma = warmup_fraction(it, warmup_, type_);
    return warmup_min_ratio_ + gamma * (1.0 - warmup_min_ratio_);
  }
  // DeepSpeed counts the first post-warmup iteration as cosine step 1, so the
  // ratio is already below 1 there. The span is floored at 1 as in DeepSpeed's
  // fix for total_num_steps <= warmup_num_steps (PR #8142), which otherwise
  // divides by zero. Past total_num_steps the cosine is not clamped: it rises
  // again, exactly as DeepSpeed's does.
  const double real_last_step = static_cast<double>(it - warmup_ + 1);
  const double real_total_steps = static_cast<double>(std::max<int64_t>(1, total_ - warmup_));
  const double half_cos = (1.0 + std::cos(kPi * real_last_step / real_total_steps)) / 2.0;
  return std::max(0.0, cos_min_ratio_ + (1.0 - cos_min_ratio_) * half_cos);
}

double WarmupCosineLr::lr_at_iteration(int64_t it) const {
  // Before the first scheduler step DeepSpeed's WarmupCosineLR.get_lr()
  // returns [0.0] (not a ratio of the base lr): the first optimizer step of a
  // DeepSpeed run with this schedule has lr 0.
  if (it < 0) return 0.0;
  return base_lr_ * ratio_at_iteration(it);
}

std::unique_ptr<LrSchedule> make_lr_schedule(const LrScheduleSpec& spec) {
  const std::string& t = spec.type;
  if (t.empty() || t == "constant") return std::make_unique<ConstantLr>(spec.base_lr);
  if (t == "WarmupLR") {
    return std::make_unique<WarmupLr>(spec.warmup_min_lr, spec.warmup_max_lr,
                                      spec.warmup_num_steps,
                                      warmup_type_from_name(spec.warmup_type));
  }
  if (t == "WarmupDecayLR" || t == "WarmupCosineLR") {
    if (spec.total_num_steps <= 0) {
      ZT_USER_ERROR("scheduler.params.total_num_steps: ", t,
                    " needs a positive total_num_steps, found ", spec.total_num_steps);
    }
    if (t == "WarmupDecayLR") {
      return std::make_unique<WarmupLr>(spec.warmup_min_lr, spec.warmup_max_lr,
                                        spec.warmup_num_steps,
                                        warmup_type_from_name(spec.warmup_type),
                                        spec.total_num_steps);
    }
    return std::make_unique<WarmupCosineLr>(spec.base_lr, spec.total_num_steps,
                                            spec.warmup_min_ratio, spec.warmup_num_steps,
                                            spec.cos_min_ratio,
                                            warmup_type_from_name(spec.warmup_type));
  }
  ZT_USER_ERROR("scheduler.type: unknown schedule \"", t,
                "\" (ztrain implements WarmupLR, WarmupDecayLR, WarmupCosineLR)");
}

}  // namespace zt
