// The synthetic Markov corpus: exact entropy rate against a Monte-Carlo
// estimate, stationary distribution, determinism, the embedded defaults.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <numeric>

#include "core/error.hpp"
#include "io/synthetic.hpp"

using zt::MarkovSource;
using zt::MarkovSpec;

namespace {

// -mean log P(x_t | x_{t-1}) over a generated sequence: the cross-entropy of
// the true model on its own samples, which converges to the entropy rate.
double monte_carlo_entropy(const MarkovSource& m, const std::vector<uint16_t>& x) {
  double sum = 0.0;
  for (size_t t = 1; t < x.size(); ++t) sum -= std::log(m.prob(x[t - 1], x[t]));
  return sum / static_cast<double>(x.size() - 1);
}

}  // namespace

TEST(MarkovSource, RowsAndStationaryDistributionAreDistributions) {
  for (MarkovSpec spec : {MarkovSpec{}, MarkovSpec{10, 2, 0.3, 5}, MarkovSpec{256, 8, 0.05, 9}}) {
    const MarkovSource m(spec);
    const int k = spec.states;
    for (int i = 0; i < k; ++i) {
      double row = 0.0;
      for (int j = 0; j < k; ++j) {
        EXPECT_GT(m.prob(i, j), 0.0);
        row += m.prob(i, j);
      }
      EXPECT_NEAR(row, 1.0, 1e-12);
    }
    const auto& pi = m.stationary();
    EXPECT_NEAR(std::accumulate(pi.begin(), pi.end(), 0.0), 1.0, 1e-12);
    // pi P = pi.
    for (int j = 0; j < k; ++j) {
      double v = 0.0;
      for (int i = 0; i < k; ++i) v += pi[i] * m.prob(i, j);
      EXPECT_NEAR(v, pi[j], 1e-12);
    }
    EXPECT_GT(m.entropy_rate(), 0.0);
    EXPECT_LT(m.entropy_rate(), std::log(static_cast<double>(k)));
  }
}

TEST(MarkovSource, EntropyRateMatchesMonteCarlo) {
  for (MarkovSpec spec : {MarkovSpec{}, MarkovSpec{10, 2, 0.3, 5}, MarkovSpec{256, 8, 0.05, 9}}) {
    const MarkovSource m(spec);
    const auto x = m.generate(2000000, 77);
    const double mc = monte_carlo_entropy(m, x);
    EXPECT_NEAR(mc, m.entropy_rate(), 0.01 * m.entropy_rate()) << "states " << spec.states;
  }
}

TEST(MarkovSource, GenerationIsDeterministicPerStream) {
  const MarkovSource a(MarkovSpec{}), b(MarkovSpec{});
  EXPECT_EQ(a.generate(10000, 1), b.generate(10000, 1));
  EXPECT_NE(a.generate(10000, 1), a.generate(10000, 2));
  // A prefix does not depend on the length asked for.
  const auto longer = a.generate(20000, 1);
  EXPECT_EQ(std::vector<uint16_t>(longer.begin(), longer.begin() + 10000), a.generate(10000, 1));
  MarkovSpec other;
  other.seed = 99;
  EXPECT_NE(MarkovSource(other).generate(1000, 1), a.generate(1000, 1));
  EXPECT_TRUE(a.generate(0, 1).empty());
}

TEST(MarkovSource, RejectsBadParameters) {
  EXPECT_THROW(MarkovSource(MarkovSpec{1, 1, 0.1, 0}), zt::UserError);
  EXPECT_THROW(MarkovSource(MarkovSpec{2000, 4, 0.1, 0}), zt::UserError);
  EXPECT_THROW(MarkovSource(MarkovSpec{8, 9, 0.1, 0}), zt::UserError);
  EXPECT_THROW(MarkovSource(MarkovSpec{8, 0, 0.1, 0}), zt::UserError);
  EXPECT_THROW(MarkovSource(MarkovSpec{8, 2, 0.0, 0}), zt::UserError);
  EXPECT_THROW(MarkovSource(MarkovSpec{8, 2, 1.5, 0}), zt::UserError);
}

TEST(EmbeddedCorpus, DefaultsAreFastAndWellBelowLogK) {
  const auto t0 = std::chrono::steady_clock::now();
  const zt::EmbeddedCorpus c = zt::make_embedded_corpus();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 1.0);
  EXPECT_EQ(c.vocab_size, 64);
  EXPECT_EQ(static_cast<int64_t>(c.train.size()), zt::kEmbeddedTrainTokens);
  EXPECT_EQ(static_cast<int64_t>(c.val.size()), zt::kEmbeddedValTokens);
  EXPECT_GT(c.entropy_nats, 1.5);
  EXPECT_LT(c.entropy_nats, 2.5);
  // Pinned: the trainer's default corpus and data/markov/ depend on these.
  EXPECT_NEAR(c.entropy_nats, 1.922302172271563, 1e-12);
  for (uint16_t t : c.train) ASSERT_LT(t, 64);
  EXPECT_EQ(c.train, MarkovSource(MarkovSpec{}).generate(zt::kEmbeddedTrainTokens, zt::kMarkovTrainStream));
}
