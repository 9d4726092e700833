// AdamW against a double-precision reference of the documented algorithm
// (torch.optim.AdamW), and the invariants the ZeRO layer relies on: sharding,
// grad_scale folding and the working copy change nothing in the fp32 result.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "optim/adamw.hpp"

namespace zt {
namespace {

struct State {
  std::vector<float> p, m, v;
};

std::vector<float> random_vector(int64_t n, uint64_t seed, double scale) {
  CounterRng rng{rng_key(seed)};
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<float>(scale * rng.normal(i));
  return x;
}

State random_state(int64_t n, uint64_t seed) {
  return State{random_vector(n, seed, 1.0), std::vector<float>(static_cast<size_t>(n), 0.0f),
               std::vector<float>(static_cast<size_t>(n), 0.0f)};
}

// The textbook algorithm in double, written from the PyTorch documentation:
// p -= lr*wd*p; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
// p -= lr * (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps).
struct Reference {
  std::vector<double> p, m, v;
  void step(const std::vector<float>& grad, const AdamWParams& hp, int64_t t, double grad_scale,
            bool decay) {
    for (size_t i = 0; i < p.size(); ++i) {
      const double g = static_cast<double>(grad[i]) * grad_scale;
      if (decay) p[i] -= hp.lr * hp.weight_decay * p[i];
      m[i] = hp.beta1 * m[i] + (1 - hp.beta1) * g;
      v[i] = hp.beta2 * v[i] + (1 - hp.beta2) * g * g;
      const double m_hat = m[i] / (1 - std::pow(hp.beta1, static_cast<double>(t)));
      const double v_hat = v[i] / (1 - std::pow(hp.beta2, static_cast<double>(t)));
      p[i] -= hp.lr * m_hat / (std::sqrt(v_hat) + hp.eps);
    }
  }
};

Reference reference_from(const State& s) {
  Reference r;
  r.p.assign(s.p.begin(), s.p.end());
  r.m.assign(s.m.begin(), s.m.end());
  r.v.assign(s.v.begin(), s.v.end());
  return r;
}

double max_abs(const std::vector<double>& x) {
  double a = 0.0;
  for (double e : x) a = std::max(a, std::fabs(e));
  return a;
}

// Moments are sums of terms that cancel, so their error is measured against
// the size of the whole array (a few fp32 ulps of the largest term), not
// element by element.
void expect_near_reference(const State& s, const Reference& r) {
  const double m_tol = 1e-6 * max_abs(r.m);
  const double v_tol = 1e-6 * max_abs(r.v);
  for (size_t i = 0; i < s.p.size(); ++i) {
    ASSERT_NEAR(s.p[i], r.p[i], 2e-6 * std::max(1.0, std::fabs(r.p[i]))) << "param " << i;
    ASSERT_NEAR(s.m[i], r.m[i], m_tol) << "m " << i;
    ASSERT_NEAR(s.v[i], r.v[i], v_tol) << "v " << i;
  }
}

AdamWParams test_params() {
  AdamWParams hp;
  hp.lr = 1e-2;
  hp.beta1 = 0.9;
  hp.beta2 = 0.95;
  hp.eps = 1e-8;
  hp.weight_decay = 0.1;
  return hp;
}

void run_against_reference(bool decay, float grad_scale) {
  const int64_t n = 1000;
  const AdamWParams hp = test_params();
  State s = random_state(n, 1);
  Reference r = reference_from(s);
  for (int64_t t = 1; t <= 6; ++t) {
    // Gradients vary in size per step and get the 1/loss_scale treatment.
    const std::vector<float> g = random_vector(n, 100 + static_cast<uint64_t>(t), 0.5 * t);
    adamw_update(s.p.data(), g.data(), s.m.data(), s.v.data(), n, hp, t, grad_scale, decay);
    r.step(g, hp, t, grad_scale, decay);
    expect_near_reference(s, r);
  }
}

TEST(AdamW, MatchesReferenceWithDecay) { run_against_reference(true, 1.0f); }
TEST(AdamW, MatchesReferenceWithoutDecay) { run_against_reference(false, 1.0f); }
TEST(AdamW, MatchesReferenceWithGradScale) { run_against_reference(true, 1.0f / 1024.0f); }

// Bias correction: at step 1 from zero moments, m_hat = g and v_hat = g^2, so
// every parameter moves by lr * g / (|g| + eps), about lr, whatever |g| is.
TEST(AdamW, FirstStepMovesByLearningRate) {
  const int64_t n = 64;
  AdamWParams hp = test_params();
  hp.weight_decay = 0.0;
  State s = random_state(n, 2);
  const std::vector<float> p0 = s.p;
  std::vector<float> g = random_vector(n, 3, 1e-3);
  adamw_update(s.p.data(), g.data(), s.m.data(), s.v.data(), n, hp, 1, 1.0f, true);
  for (int64_t i = 0; i < n; ++i) {
    const double gi = g[static_cast<size_t>(i)];
    const double expect = p0[static_cast<size_t>(i)] - hp.lr * gi / (std::fabs(gi) + hp.eps);
    EXPECT_NEAR(s.p[static_cast<size_t>(i)], expect, 1e-6) << i;
  }
}

// With a zero gradient only the decoupled decay acts: p * (1 - lr*wd), in fp32.
TEST(AdamW, ZeroGradientOnlyDecays) {
  const int64_t n = 32;
  const AdamWParams hp = test_params();
  State s = random_state(n, 4);
  const std::vector<float> p0 = s.p;
  const std::vector<float> g(static_cast<size_t>(n), 0.0f);
  adamw_update(s.p.data(), g.data(), s.m.data(), s.v.data(), n, hp, 1, 1.0f, true);
  const float factor = static_cast<float>(1.0 - hp.lr * hp.weight_decay);
  for (size_t i = 0; i < p0.size(); ++i) EXPECT_EQ(s.p[i], p0[i] * factor);
  State s2 = random_state(n, 4);
  adamw_update(s2.p.data(), g.data(), s2.m.data(), s2.v.data(), n, hp, 1, 1.0f, false);
  EXPECT_EQ(s2.p, p0);
}

// Folding the scale into the update equals scaling the gradient beforehand.
TEST(AdamW, GradScaleEqualsPrescaledGradient) {
  const int64_t n = 500;
  const AdamWParams hp = test_params();
  const float scale = 0.37f;
  State a = random_state(n, 5), b = random_state(n, 5);
  for (int64_t t = 1; t <= 3; ++t) {
    std::vector<float> g = random_vector(n, 50 + static_cast<uint64_t>(t), 2.0);
    adamw_update(a.p.data(), g.data(), a.m.data(), a.v.data(), n, hp, t, scale, true);
    for (float& x : g) x *= scale;
    adamw_update(b.p.data(), g.data(), b.m.data(), b.v.data(), n, hp, t, 1.0f, true);
  }
  EXPECT_EQ(a.p, b.p);
  EXPECT_EQ(a.m, b.m);
  EXPECT_EQ(a.v, b.v);
}

// The working copy is the rounding of the fp32 result, and writing it does
// not change the fp32 result.
TEST(AdamW, LowPrecisionCopyIsRoundedResult) {
  const int64_t n = 70000;  // past the parallel threshold
  const AdamWParams hp = test_params();
  State plain = random_state(n, 6), with_bf16 = random_state(n, 6), with_f16 = random_state(n, 6);
  std::vector<bf16> copy_bf16(static_cast<size_t>(n));
  std::vector<f16> copy_f16(static_cast<size_t>(n));
  for (int64_t t = 1; t <= 2; ++t) {
    const std::vector<float> g = random_vector(n, 60 + static_cast<uint64_t>(t), 1.0);
    adamw_update(plain.p.data(), g.data(), plain.m.data(), plain.v.data(), n, hp, t, 0.5f, true);
    adamw_update(with_bf16.p.data(), g.data(), with_bf16.m.data(), with_bf16.v.data(), n, hp, t,
                 0.5f, true, copy_bf16.data());
    adamw_update(with_f16.p.data(), g.data(), with_f16.m.data(), with_f16.v.data(), n, hp, t, 0.5f,
                 true, copy_f16.data());
  }
  EXPECT_EQ(with_bf16.p, plain.p);
  EXPECT_EQ(with_f16.p, plain.p);
  EXPECT_EQ(with_bf16.m, plain.m);
  EXPECT_EQ(with_bf16.v, plain.v);
  for (size_t i = 0; i < plain.p.size(); ++i) {
    ASSERT_EQ(copy_bf16[i].bits, f32_to_bf16(plain.p[i]).bits) << i;
    ASSERT_EQ(copy_f16[i].bits, f32_to_f16(plain.p[i]).bits) << i;
  }
}

// A shard updated in pieces (any cut, any decay pattern) equals the pieces
// updated one by one: what ZeRO's sharding relies on.
TEST(AdamW, RangesEqualPiecewiseUpdates) {
  const int64_t n = 100003;
  const AdamWParams hp = test_params();
  const std::vector<DecayRange> ranges = {
      {0, 7, false}, {7, 40000, true}, {40000, 40001, false}, {40001, 99000, true}, {99000, n, false}};
  State whole = random_state(n, 7), pieces = random_state(n, 7);
  std::vector<bf16> copy(static_cast<size_t>(n));
  for (int64_t t = 1; t <= 3; ++t) {
    const std::vector<float> g = random_vector(n, 70 + static_cast<uint64_t>(t), 1.0);
    adamw_update_ranges(whole.p.data(), g.data(), whole.m.data(), whole.v.data(), n, ranges, hp, t,
                        0.25f, copy.data());
    for (const DecayRange& r : ranges) {
      adamw_update(pieces.p.data() + r.begin, g.data() + r.begin, pieces.m.data() + r.begin,
                   pieces.v.data() + r.begin, r.end - r.begin, hp, t, 0.25f, r.decay);
    }
  }
  EXPECT_EQ(whole.p, pieces.p);
  EXPECT_EQ(whole.m, pieces.m);
  EXPECT_EQ(whole.v, pieces.v);
  for (size_t i = 0; i < whole.p.size(); ++i) ASSERT_EQ(copy[i].bits, f32_to_bf16(whole.p[i]).bits);
  // Without a copy pointer the fp32 result is the same.
  State no_copy = random_state(n, 7);
  for (int64_t t = 1; t <= 3; ++t) {
    const std::vector<float> g = random_vector(n, 70 + static_cast<uint64_t>(t), 1.0);
    adamw_update_ranges(no_copy.p.data(), g.data(), no_copy.m.data(), no_copy.v.data(), n, ranges,
                        hp, t, 0.25f);
  }
  EXPECT_EQ(no_copy.p, whole.p);
}

TEST(AdamW, RangesMustTileTheShard) {
  const int64_t n = 10;
  State s = random_state(n, 8);
  const std::vector<float> g(static_cast<size_t>(n), 1.0f);
  const AdamWParams hp = test_params();
  auto run = [&](const std::vector<DecayRange>& ranges) {
    adamw_update_ranges(s.p.data(), g.data(), s.m.data(), s.v.data(), n, ranges, hp, 1, 1.0f);
  };
  EXPECT_THROW(run({{0, 4, true}, {5, 10, false}}), Error);   // gap
  EXPECT_THROW(run({{0, 6, true}, {5, 10, false}}), Error);   // overlap
  EXPECT_THROW(run({{0, 4, true}}), Error);                   // short
  EXPECT_THROW(run({{0, 4, true}, {4, 11, false}}), Error);   // past the end
  EXPECT_THROW(adamw_update(s.p.data(), g.data(), s.m.data(), s.v.data(), n, hp, 0, 1.0f, true),
               Error);  // step is 1-based
  EXPECT_NO_THROW(run({{0, 4, true}, {4, 10, false}}));
}

// The scalars the CPU and the GPU share (adamw_math.hpp): each computed in
// double and rounded once to fp32; the lerp branch follows aten's |w| < 0.5.
TEST(AdamW, ScalarsAreRoundedOnceFromDouble) {
  AdamWParams hp;
  hp.lr = 3e-4;
  hp.beta1 = 0.9;
  hp.beta2 = 0.95;
  hp.eps = 1e-8;
  hp.weight_decay = 0.1;
  const int64_t t = 7;
  const AdamWScalars s = adamw_scalars(hp, t, 0.25f);
  EXPECT_EQ(s.grad_scale, 0.25f);
  EXPECT_EQ(s.decay_factor, static_cast<float>(1.0 - 3e-4 * 0.1));
  EXPECT_EQ(s.lerp_weight, static_cast<float>(1.0 - 0.9));
  EXPECT_EQ(s.lerp_rest, 1.0f - s.lerp_weight);
  EXPECT_TRUE(s.lerp_from_start);
  EXPECT_EQ(s.beta2, 0.95f);
  EXPECT_EQ(s.one_minus_beta2, static_cast<float>(1.0 - 0.95));
  EXPECT_EQ(s.bias_correction2_sqrt, static_cast<float>(std::sqrt(1.0 - std::pow(0.95, 7.0))));
  EXPECT_EQ(s.eps, 1e-8f);
  EXPECT_EQ(s.neg_step_size, static_cast<float>(-(3e-4 / (1.0 - std::pow(0.9, 7.0)))));
  hp.beta1 = 0.3;
  EXPECT_FALSE(adamw_scalars(hp, t, 1.0f).lerp_from_start);
  EXPECT_THROW(adamw_scalars(hp, 0, 1.0f), Error);
  hp.beta2 = 1.0;
  EXPECT_THROW(adamw_scalars(hp, 1, 1.0f), Error);
}

}  // namespace
}  // namespace zt
