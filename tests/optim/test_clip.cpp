// Global norm, clipping coefficient and overflow detection.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/rng.hpp"
#include "optim/clip.hpp"

namespace zt {
namespace {

std::vector<float> random_vector(int64_t n, uint64_t seed) {
  CounterRng rng{rng_key(seed)};
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<float>(rng.normal(i));
  return x;
}

TEST(Clip, SumSquaresMatchesNaiveSum) {
  EXPECT_EQ(sum_squares(nullptr, 0), 0.0);
  const float small[] = {3.0f, -4.0f};
  EXPECT_EQ(sum_squares(small, 2), 25.0);
  for (int64_t n : {1, 4095, 4096, 4097, 100003}) {
    const std::vector<float> g = random_vector(n, static_cast<uint64_t>(n));
    double naive = 0.0;
    for (float x : g) naive += static_cast<double>(x) * x;
    EXPECT_NEAR(sum_squares(g.data(), n), naive, 1e-12 * naive) << n;
  }
}

TEST(Clip, SumSquaresIsDeterministic) {
  const int64_t n = 1000003;
  const std::vector<float> g = random_vector(n, 9);
  const double first = sum_squares(g.data(), n);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(sum_squares(g.data(), n), first);
}

TEST(Clip, Coefficient) {
  EXPECT_EQ(clip_coefficient(123.0, 0.0), 1.0f);   // gradient_clipping 0: off
  EXPECT_EQ(clip_coefficient(123.0, -1.0), 1.0f);
  EXPECT_EQ(clip_coefficient(0.5, 1.0), 1.0f);     // below the threshold: untouched
  EXPECT_EQ(clip_coefficient(0.0, 1.0), 1.0f);
  EXPECT_EQ(clip_coefficient(4.0, 1.0), static_cast<float>(1.0 / (4.0 + 1e-6)));
  // At norm == max_norm the 1e-6 makes the coefficient just below 1, so
  // DeepSpeed and PyTorch apply it.
  EXPECT_EQ(clip_coefficient(1.0, 1.0), static_cast<float>(1.0 / (1.0 + 1e-6)));
  EXPECT_LT(clip_coefficient(1.0, 1.0), 1.0f);
  EXPECT_EQ(clip_coefficient(std::numeric_limits<double>::infinity(), 1.0), 0.0f);
  EXPECT_TRUE(std::isnan(clip_coefficient(std::nan(""), 1.0)));
}

TEST(Clip, InfOrNan) {
  const int64_t n = 70001;
  std::vector<float> g = random_vector(n, 10);
  EXPECT_FALSE(has_inf_or_nan(g.data(), n));
  EXPECT_FALSE(has_inf_or_nan(nullptr, 0));
  g[n - 1] = std::numeric_limits<float>::max();
  g[0] = -std::numeric_limits<float>::denorm_min();
  EXPECT_FALSE(has_inf_or_nan(g.data(), n));
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
      std::vector<float> h = g;
      h[static_cast<size_t>(at)] = bad;
      EXPECT_TRUE(has_inf_or_nan(h.data(), n)) << bad << " at " << at;
    }
  }
}

}  // namespace
}  // namespace zt
