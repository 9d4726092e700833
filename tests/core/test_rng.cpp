// The counter-based RNG: values are pure functions of (key, counter), so any
// order or split of the draws gives the same numbers; and the distributions
// are roughly right.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.hpp"

namespace zt {
namespace {

TEST(CounterRng, Deterministic) {
  const CounterRng a{rng_key(1234, 5, 6)};
  const CounterRng b{rng_key(1234, 5, 6)};
  for (uint64_t c = 0; c < 1000; ++c) {
    EXPECT_EQ(a.bits(c), b.bits(c));
    EXPECT_EQ(a.uniform(c), b.uniform(c));
  }
  // Drawing in reverse (as another rank layout might) gives the same values.
  std::vector<uint64_t> forward, backward(100);
  for (uint64_t c = 0; c < 100; ++c) forward.push_back(a.bits(c));
  for (uint64_t c = 100; c-- > 0;) backward[c] = a.bits(c);
  EXPECT_EQ(forward, backward);
}

TEST(CounterRng, KeysSeparateStreams) {
  EXPECT_NE(rng_key(1, 2), rng_key(2, 1));  // the order of key parts matters
  EXPECT_NE(rng_key(1, 2, 3), rng_key(1, 2, 4));
  EXPECT_NE(rng_key(0), rng_key(1));
  const CounterRng a{rng_key(1, 0)}, b{rng_key(1, 1)};
  int equal = 0;
  for (uint64_t c = 0; c < 1000; ++c) equal += a.bits(c) == b.bits(c);
  EXPECT_EQ(equal, 0);
}

TEST(CounterRng, UniformMeanAndVariance) {
  const CounterRng rng{rng_key(42)};
  const int n = 1000000;
  double sum = 0, sum_sq = 0, lo = 1, hi = 0;
  for (int i = 0; i < n; ++i) {
    const double u = rng.uniform(static_cast<uint64_t>(i));
    sum += u;
    sum_sq += u * u;
    lo = std::min(lo, u);
    hi = std::max(hi, u);
  }
  const double mean = sum / n;
  const double var = sum_sq / n - mean * mean;
  // Standard error of the mean is sqrt(1/12 / n) ~ 2.9e-4; allow ~7 sigma.
  EXPECT_NEAR(mean, 0.5, 2e-3);
  EXPECT_NEAR(var, 1.0 / 12.0, 2e-3);
  EXPECT_GE(lo, 0.0);
  EXPECT_LT(hi, 1.0);
}

TEST(CounterRng, NormalMeanAndVariance) {
  const CounterRng rng{rng_key(7, 7)};
  const int n = 200000;
  double sum = 0, sum_sq = 0;
  for (int i = 0; i < n; ++i) {
    const double x = rng.normal(static_cast<uint64_t>(i));
    ASSERT_TRUE(std::isfinite(x));
    sum += x;
    sum_sq += x * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.02);
  EXPECT_NEAR(sum_sq / n, 1.0, 0.02);
}

TEST(CounterRng, BelowIsInRangeAndEven) {
  const CounterRng rng{rng_key(3)};
  const uint64_t buckets = 10;
  std::vector<int> count(buckets, 0);
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const uint64_t v = rng.below(static_cast<uint64_t>(i), buckets);
    ASSERT_LT(v, buckets);
    ++count[v];
  }
  for (int c : count) EXPECT_NEAR(c, n / 10, 600);  // sd ~95
}

}  // namespace
}  // namespace zt
