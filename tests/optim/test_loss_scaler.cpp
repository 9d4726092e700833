// DeepSpeed's DynamicLossScaler semantics, step by step, with the expected
// scales written out by hand from deepspeed/runtime/fp16/loss_scaler.py.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.hpp"
#include "optim/loss_scaler.hpp"

namespace zt {
namespace {

LossScalerConfig dynamic_config(int power, int64_t window, int hysteresis) {
  LossScalerConfig c;
  c.initial_scale_power = power;
  c.loss_scale_window = window;
  c.hysteresis = hysteresis;
  return c;
}

// Feeds a sequence of overflow verdicts; returns the scale after each update.
std::vector<double> run(LossScaler& s, const std::vector<bool>& overflows) {
  std::vector<double> scales;
  for (bool o : overflows) {
    EXPECT_EQ(s.update(o), o);  // skip exactly on overflow
    scales.push_back(s.scale());
  }
  return scales;
}

TEST(LossScaler, DeepSpeedDefaults) {
  LossScaler s{LossScalerConfig{}};
  EXPECT_TRUE(s.dynamic());
  EXPECT_EQ(s.scale(), 65536.0);  // 2**16
  for (int i = 0; i < 999; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 65536.0);
  s.update(false);  // the 1000th clean step
  EXPECT_EQ(s.scale(), 131072.0);
}

TEST(LossScaler, OverflowHalvesAndSkips) {
  LossScaler s{dynamic_config(10, 1000, 1)};
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 512.0);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 256.0);
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 256.0);
  EXPECT_FALSE(s.overflow_at_min_scale());
}

TEST(LossScaler, HysteresisDelaysTheDecrease) {
  LossScaler s{dynamic_config(10, 1000, 2)};
  // The first overflow spends the budget, the second halves; the budget is
  // not refilled by the decrease, so the third halves again.
  EXPECT_EQ(run(s, {true, true, true}), (std::vector<double>{1024, 512, 256}));
  EXPECT_EQ(s.state().hysteresis_left, 1);

  LossScaler t{dynamic_config(10, 1000, 3)};
  EXPECT_EQ(run(t, {true, false, true, true, true}),
            (std::vector<double>{1024, 1024, 1024, 512, 256}));
}

TEST(LossScaler, ConsecutiveHysteresisRefillsOnCleanSteps) {
  LossScalerConfig c = dynamic_config(10, 1000, 2);
  c.consecutive_hysteresis = true;
  LossScaler s{c};
  // Every clean step restores the budget: only two overflows in a row halve.
  EXPECT_EQ(run(s, {true, false, true, false, true, true}),
            (std::vector<double>{1024, 1024, 1024, 1024, 1024, 512}));
  // Without it the budget comes back only when the scale grows.
  LossScaler t{dynamic_config(10, 1000, 2)};
  EXPECT_EQ(run(t, {true, false, true}), (std::vector<double>{1024, 1024, 512}));
}

TEST(LossScaler, WindowOfCleanStepsDoubles) {
  LossScaler s{dynamic_config(4, 3, 1)};  // 16, window 3
  // From the start: the 3rd clean step doubles, then every 3rd.
  EXPECT_EQ(run(s, {false, false, false, false, false, false}),
            (std::vector<double>{16, 16, 32, 32, 32, 64}));
  // An overflow restarts the count: 3 clean steps after it, then every 3.
  EXPECT_EQ(run(s, {true, false, false, false, false, true, false, false, false}),
            (std::vector<double>{32, 32, 32, 64, 64, 32, 32, 32, 64}));
}

TEST(LossScaler, GrowthRefillsHysteresis) {
  LossScaler s{dynamic_config(4, 2, 2)};  // 16, window 2, hysteresis 2
  // overflow (budget 2->1), overflow (halve to 8), 2 clean (double to 16,
  // budget back to 2), overflow (budget 2->1, no halving).
  EXPECT_EQ(run(s, {true, true, false, false, true}), (std::vector<double>{16, 8, 8, 16, 16}));
  EXPECT_EQ(s.state().hysteresis_left, 1);
}

TEST(LossScaler, MinimumScaleFloorAndFlag) {
  LossScalerConfig c = dynamic_config(3, 1000, 1);  // 8
  c.min_loss_scale = 4;
  LossScaler s{c};
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 4.0);
  EXPECT_FALSE(s.overflow_at_min_scale());
  EXPECT_TRUE(s.update(true));  // would go below the minimum: DeepSpeed raises here
  EXPECT_EQ(s.scale(), 4.0);
  EXPECT_TRUE(s.overflow_at_min_scale());
  EXPECT_FALSE(s.update(false));
  EXPECT_FALSE(s.overflow_at_min_scale());

  // A minimum that is not a power-of-two step away is reached exactly.
  c.min_loss_scale = 3;
  LossScaler t{c};
  EXPECT_EQ(run(t, {true, true}), (std::vector<double>{4, 3}));
  EXPECT_FALSE(t.overflow_at_min_scale());
  t.update(true);
  EXPECT_TRUE(t.overflow_at_min_scale());

  // With hysteresis, an overflow at the minimum that only spends budget is
  // not flagged.
  LossScalerConfig h = dynamic_config(2, 1000, 2);
  h.min_loss_scale = 4;
  LossScaler u{h};
  u.update(true);
  EXPECT_FALSE(u.overflow_at_min_scale());
  u.update(true);
  EXPECT_TRUE(u.overflow_at_min_scale());
}

TEST(LossScaler, FixedScaleNeverChanges) {
  LossScalerConfig c;
  c.loss_scale = 128;
  LossScaler s{c};
  EXPECT_FALSE(s.dynamic());
  for (int i = 0; i < 3000; ++i) {
    const bool overflow = (i % 7) == 0;
    EXPECT_EQ(s.update(overflow), overflow);  // still skipped on overflow
    ASSERT_EQ(s.scale(), 128.0);
    ASSERT_FALSE(s.overflow_at_min_scale());
  }
}

TEST(LossScaler, StateRoundTripResumesIdentically) {
  LossScalerConfig c = dynamic_config(8, 5, 2);
  LossScaler a{c};
  const std::vector<bool> head = {false, true, false, false, true, true, false, false};
  const std::vector<bool> tail = {false, false, false, true, false, false, false, false, false};
  run(a, head);
  const LossScalerState saved = a.state();
  LossScaler b{c};
  b.load_state(saved);
  EXPECT_EQ(run(a, tail), run(b, tail));
  EXPECT_EQ(a.state().scale, b.state().scale);
  EXPECT_EQ(a.state().iteration, b.state().iteration);
  EXPECT_EQ(a.state().last_overflow_iteration, b.state().last_overflow_iteration);
  EXPECT_EQ(a.state().hysteresis_left, b.state().hysteresis_left);
}

TEST(LossScaler, RejectsBadConfig) {
  LossScalerConfig c;
  c.loss_scale_window = 0;
  EXPECT_THROW(LossScaler{c}, UserError);
  c = LossScalerConfig{};
  c.hysteresis = 0;
  EXPECT_THROW(LossScaler{c}, UserError);
  c = LossScalerConfig{};
  c.loss_scale = -1;
  EXPECT_THROW(LossScaler{c}, UserError);
}

}  // namespace
}  // namespace zt
