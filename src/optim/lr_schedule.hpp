// Learning-rate schedules with DeepSpeed's names, parameters and values
// (deepspeed/runtime/lr_schedules.py: WarmupLR, WarmupDecayLR, WarmupCosineLR),
// plus the constant schedule used when a config has no "scheduler" section.
//
// [Note: schedule step count] DeepSpeed keeps `last_batch_iteration`, which
// starts at -1 when the scheduler is built; the constructor already writes
// get_lr() at -1 into the optimizer, and the engine calls scheduler.step()
// (last_batch_iteration += 1) *after* each optimizer step that was applied
// (engine._take_model_step skips it when the fp16 step overflowed). So the
// optimizer step with 0-based index s, counting applied steps only, runs with
// the value the schedule has at last_batch_iteration = s - 1:
//
//   lr_at(s) == lr_at_iteration(s - 1)
//
//   s = 0 (first step):  iteration -1, the value set at construction:
//                        warmup_min_lr for WarmupLR / WarmupDecayLR, and 0 for
//                        WarmupCosineLR (DeepSpeed's get_lr() returns [0.0]
//                        before the scheduler has started).
//   s = 1:               iteration 0, the first value of the warmup formula.
//
// ztrain reproduces this trajectory so that a DeepSpeed config gives the same
// learning rates, step for step, as DeepSpeed itself. The schedules are pure
// functions of the step, so their checkpoint state is the number of applied
// optimizer steps, which the trainer owns. AdamW's bias-correction step of the
// same update is s + 1.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace zt {

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  // Learning rate of the optimizer step with 0-based index `step` (applied
  // steps only); see [Note: schedule step count].
  virtual double lr_at(int64_t step) const = 0;
  // DeepSpeed's scheduler type ("WarmupLR", ...), or "constant".
  virtual std::string name() const = 0;
};

// Plain parameters, filled by the config layer with DeepSpeed's keys. The
// defaults are DeepSpeed's, except where DeepSpeed has none: base_lr is the
// optimizer's "lr" (used by "constant" and, as DeepSpeed's org_lrs, by
// WarmupCosineLR). Recent DeepSpeed WarmupLR takes warmup_max_lr from the
// optimizer's lr when the key is absent, WarmupDecayLR keeps 0.001: the config
// layer decides, this struct holds the result.
struct LrScheduleSpec {
  std::string type;  // "", "constant", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR"
  double base_lr = 1e-3;
  double warmup_min_lr = 0.0;
  double warmup_max_lr = 1e-3;
  int64_t warmup_num_steps = 1000;
  std::string warmup_type = "log";  // "log" | "linear"
  int64_t total_num_steps = 0;      // WarmupDecayLR, WarmupCosineLR
  double warmup_min_ratio = 0.0;    // WarmupCosineLR
  double cos_min_ratio = 1e-4;      // WarmupCosineLR
};

// Throws UserError on an unknown type or warmup_type (DeepSpeed's WarmupLR
// would fall back to "log" with a warning; a typo should not change the run),
// or on a non-positive total_num_steps where the schedule needs one.
std::unique_ptr<LrSchedule> make_lr_schedule(const LrScheduleSpec& spec);

class ConstantLr final : public LrSchedule {
 public:
  explicit ConstantLr(double lr) : lr_(lr) {}
  double lr_at(int64_t) const override { return lr_; }
  std::string name() const override { return "constant"; }

 private:
  double lr_;
};

// The DeepSpeed schedules answer both questions: lr_at(step) for the trainer,
// and lr_at_iteration(last_batch_iteration), DeepSpeed's get_lr() at that
// value of its counter, for tests and for reading DeepSpeed logs.
class DeepSpeedLrSchedule : public LrSchedule {
 public:
  double lr_at(int64_t step) const final { return lr_at_iteration(step - 1); }
  virtual double lr_at_iteration(int64_t last_batch_iteration) const = 0;
};

enum class WarmupType { log, linear };
WarmupType warmup_type_from_name(const std::string& name);  // throws UserError

// WarmupLR: from warmup_min_lr to warmup_max_lr over warmup_num_steps, then
// constant at warmup_max_lr. WarmupDecayLR (total_num_steps > 0): the same
// warmup, then a linear decay that reaches warmup_min_lr (not 0: DeepSpeed's
// lr is min_lr + (max_lr - min_lr) * gamma and gamma falls to 0) at
// total_num_steps, and stays there.
class WarmupLr final : public DeepSpeedLrSchedule {
 public:
  WarmupLr(double min_lr, double max_lr, int64_t warmup_num_steps, WarmupType type,
           int64_t total_num_steps = 0);
  double lr_at_iteration(int64_t last_batch_iteration) const override;
  std::string name() const override { return decay_ ? "WarmupDecayLR" : "WarmupLR"; }

 private:
  double warmup_gamma(int64_t it) const;
  double min_lr_, max_lr_;
  int64_t warmup_;  // max(2, warmup_num_steps), as DeepSpeed clamps it
  WarmupType type_;
  bool decay_;
  int64_t total_;
};

// WarmupCosineLR: base_lr times a ratio that warms up from warmup_min_ratio
// to 1 over warmup_num_steps, then follows a half cosine from 1 down to
// cos_min_ratio at total_num_steps.
class WarmupCosineLr final : public DeepSpeedLrSchedule {
 public:
  WarmupCosineLr(double base_lr, int64_t total_num_steps, double warmup_min_ratio,
                 int64_t warmup_num_steps, double cos_min_ratio, WarmupType type);
  double lr_at_iteration(int64_t last_batch_iteration) const override;
  double ratio_at_iteration(int64_t last_batch_iteration) const;
  std::string name() const override { return "WarmupCosineLR"; }

 private:
  double base_lr_;
  int64_t total_;
  double warmup_min_ratio_;
  int64_t warmup_;  // max(2, warmup_num_steps)
  double cos_min_ratio_;
  WarmupType type_;
};

}  // namespace zt
