// LR schedules against values computed here from DeepSpeed's formulas
// (deepspeed/runtime/lr_schedules.py) at the points where they change shape,
// and the step mapping against a simulation of DeepSpeed's engine loop.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "core/error.hpp"
#include "optim/lr_schedule.hpp"

namespace zt {
namespace {

const double kPi = std::acos(-1.0);

// Values are compared to a relative 1e-12: the implementation follows
// DeepSpeed's operation order, the expectations here are written freely.
void expect_lr(double got, double want) {
  EXPECT_NEAR(got, want, 1e-12 * std::max(1e-3, std::fabs(want))) << "want " << want;
}

TEST(LrSchedule, WarmupLrLinear) {
  // min 1e-4, max 1e-3, W = 10: lr = min + (max-min) * it/10, then max.
  WarmupLr s(1e-4, 1e-3, 10, WarmupType::linear);
  EXPECT_EQ(s.name(), "WarmupLR");
  expect_lr(s.lr_at_iteration(-1), 1e-4);             // set at construction
  expect_lr(s.lr_at_iteration(0), 1e-4);              // step 0 of the formula
  expect_lr(s.lr_at_iteration(5), 1e-4 + 9e-4 * 0.5); // mid-warmup
  expect_lr(s.lr_at_iteration(9), 1e-4 + 9e-4 * 0.9); // last warmup iteration
  expect_lr(s.lr_at_iteration(10), 1e-3);             // end of warmup
  expect_lr(s.lr_at_iteration(100000), 1e-3);         // constant after
}

TEST(LrSchedule, WarmupLrLog) {
  // W = 100: gamma = log(it+1)/log(100); at it = 9, log(10)/log(100) = 1/2.
  WarmupLr s(0.0, 2e-3, 100, WarmupType::log);
  expect_lr(s.lr_at_iteration(-1), 0.0);
  expect_lr(s.lr_at_iteration(0), 0.0);          // log(1) = 0
  expect_lr(s.lr_at_iteration(9), 1e-3);         // mid-warmup in log terms
  expect_lr(s.lr_at_iteration(99), 2e-3);        // log(100)/log(100) = 1
  expect_lr(s.lr_at_iteration(100), 2e-3);
  expect_lr(s.lr_at_iteration(3), 2e-3 * std::log(4.0) / std::log(100.0));
}

TEST(LrSchedule, WarmupNumStepsClampedToTwo) {
  // DeepSpeed: warmup_num_steps = max(2, warmup_num_steps).
  WarmupLr s(0.0, 1.0, 0, WarmupType::linear);
  expect_lr(s.lr_at_iteration(0), 0.0);
  expect_lr(s.lr_at_iteration(1), 0.5);
  expect_lr(s.lr_at_iteration(2), 1.0);
  WarmupLr l(0.0, 1.0, 1, WarmupType::log);
  expect_lr(l.lr_at_iteration(1), 1.0);  // log(2)/log(2)
}

TEST(LrSchedule, WarmupDecayLr) {
  // min 1e-5, max 1e-3, W = 10, T = 110: after warmup
  // gamma = (T - it) / (T - W), lr = min + (max - min) * gamma, floored at min.
  WarmupLr s(1e-5, 1e-3, 10, WarmupType::linear, 110);
  EXPECT_EQ(s.name(), "WarmupDecayLR");
  const double d = 1e-3 - 1e-5;
  expect_lr(s.lr_at_iteration(0), 1e-5);
  expect_lr(s.lr_at_iteration(4), 1e-5 + d * 0.4);
  expect_lr(s.lr_at_iteration(10), 1e-3);           // end of warmup: gamma = 100/100
  expect_lr(s.lr_at_iteration(60), 1e-5 + d * 0.5); // mid-decay
  expect_lr(s.lr_at_iteration(109), 1e-5 + d * 0.01);
  expect_lr(s.lr_at_iteration(110), 1e-5);          // end: decays to warmup_min_lr
  expect_lr(s.lr_at_iteration(500), 1e-5);          // max(0, .) keeps it there
  // Log warmup in front of the same decay.
  WarmupLr g(0.0, 1e-3, 100, WarmupType::log, 300);
  expect_lr(g.lr_at_iteration(9), 0.5e-3);
  expect_lr(g.lr_at_iteration(99), 1e-3);
  expect_lr(g.lr_at_iteration(200), 0.5e-3);
  expect_lr(g.lr_at_iteration(300), 0.0);
}

TEST(LrSchedule, WarmupCosineLr) {
  // base 1e-3, T = 110, W = 10, warmup_min_ratio 0.2, cos_min_ratio 0.1.
  // Warmup: ratio = 0.2 + 0.8 * gamma. After: with k = it - W + 1,
  // ratio = 0.1 + 0.9 * (1 + cos(pi * k / 100)) / 2.
  WarmupCosineLr s(1e-3, 110, 0.2, 10, 0.1, WarmupType::linear);
  auto cosine = [](double k) { return 0.1 + 0.9 * (1 + std::cos(kPi * k / 100.0)) / 2; };
  expect_lr(s.lr_at_iteration(-1), 0.0);          // DeepSpeed's get_lr() before start
  expect_lr(s.lr_at_iteration(0), 1e-3 * 0.2);
  expect_lr(s.lr_at_iteration(5), 1e-3 * 0.6);    // mid-warmup
  expect_lr(s.lr_at_iteration(9), 1e-3 * 0.92);   // last warmup iteration
  expect_lr(s.lr_at_iteration(10), 1e-3 * cosine(1));  // end of warmup: k = 1
  expect_lr(s.lr_at_iteration(59), 1e-3 * 0.55);  // mid-decay: cos(pi/2) = 0
  expect_lr(s.lr_at_iteration(109), 1e-3 * 0.1);  // end: cos(pi) = -1
  expect_lr(s.lr_at_iteration(110), 1e-3 * cosine(101));  // not clamped past the end
  EXPECT_GT(s.lr_at_iteration(110), s.lr_at_iteration(109));
  // Log warmup: W = 100, gamma(9) = 1/2.
  WarmupCosineLr l(2.0, 1000, 0.0, 100, 1e-4, WarmupType::log);
  expect_lr(l.lr_at_iteration(0), 0.0);
  expect_lr(l.lr_at_iteration(9), 1.0);
  expect_lr(l.lr_at_iteration(99), 2.0);
  expect_lr(l.lr_at_iteration(549), 2.0 * (1e-4 + (1 - 1e-4) * 0.5));  // k = 450 of 900
  expect_lr(l.lr_at_iteration(999), 2.0 * 1e-4);
}

TEST(LrSchedule, CosineWithTotalNotAfterWarmupDoesNotDivideByZero) {
  WarmupCosineLr s(1.0, 10, 0.0, 10, 0.5, WarmupType::linear);
  const double lr = s.lr_at_iteration(10);  // span floored at 1: cos(pi * 1 / 1) = -1
  EXPECT_TRUE(std::isfinite(lr));
  expect_lr(lr, 0.5);
}

// DeepSpeed's engine: the scheduler is built with last_batch_iteration = -1
// and writes get_lr() into the optimizer; each applied optimizer step runs
// with the optimizer's current lr, then calls scheduler.step(). lr_at(s) must
// be the lr of applied step s.
TEST(LrSchedule, StepMappingFollowsDeepSpeedEngine) {
  const LrScheduleSpec base = [] {
    LrScheduleSpec p;
    p.base_lr = 3e-4;
    p.warmup_min_lr = 1e-5;
    p.warmup_max_lr = 3e-4;
    p.warmup_num_steps = 8;
    p.warmup_type = "linear";
    p.total_num_steps = 40;
    p.warmup_min_ratio = 0.1;
    p.cos_min_ratio = 0.01;
    return p;
  }();
  for (const char* type : {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"}) {
    LrScheduleSpec spec = base;
    spec.type = type;
    auto sched = make_lr_schedule(spec);
    const auto& ds = dynamic_cast<const DeepSpeedLrSchedule&>(*sched);
    int64_t last_batch_iteration = -1;
    double optimizer_lr = ds.lr_at_iteration(last_batch_iteration);  // constructor
    for (int64_t applied = 0; applied < 60; ++applied) {
      EXPECT_EQ(sched->lr_at(applied), optimizer_lr) << type << " step " << applied;
      ++last_batch_iteration;  // scheduler.step() after the optimizer step
      optimizer_lr = ds.lr_at_iteration(last_batch_iteration);
    }
  }
  // The documented consequences for the first steps.
  LrScheduleSpec cos = base;
  cos.type = "WarmupCosineLR";
  EXPECT_EQ(make_lr_schedule(cos)->lr_at(0), 0.0);
  expect_lr(make_lr_schedule(cos)->lr_at(1), 3e-4 * 0.1);
  LrScheduleSpec warm = base;
  warm.type = "WarmupLR";
  expect_lr(make_lr_schedule(warm)->lr_at(0), 1e-5);
  expect_lr(make_lr_schedule(warm)->lr_at(1), 1e-5);
  expect_lr(make_lr_schedule(warm)->lr_at(2), 1e-5 + (3e-4 - 1e-5) / 8);
}

TEST(LrSchedule, FactoryAndErrors) {
  LrScheduleSpec spec;
  spec.base_lr = 6e-4;
  auto constant = make_lr_schedule(spec);  // no scheduler section
  EXPECT_EQ(constant->name(), "constant");
  EXPECT_EQ(constant->lr_at(0), 6e-4);
  EXPECT_EQ(constant->lr_at(123456), 6e-4);
  spec.type = "constant";
  EXPECT_EQ(make_lr_schedule(spec)->lr_at(7), 6e-4);

  spec.type = "WarmupCosineLR";
  spec.total_num_steps = 0;
  EXPECT_THROW(make_lr_schedule(spec), UserError);
  spec.type = "WarmupDecayLR";
  EXPECT_THROW(make_lr_schedule(spec), UserError);
  spec.total_num_steps = 100;
  EXPECT_EQ(make_lr_schedule(spec)->name(), "WarmupDecayLR");
  spec.warmup_type = "exp";
  EXPECT_THROW(make_lr_schedule(spec), UserError);
  spec.warmup_type = "linear";
  spec.type = "OneCycle";
  EXPECT_THROW(make_lr_schedule(spec), UserError);
}

}  // namespace
}  // namespace zt
