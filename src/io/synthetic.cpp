#include "io/synthetic.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace zt {
namespace {

// Key tags: the matrix and each generated stream draw from unrelated keys.
constexpr uint64_t kMatrixTag = 0x6d61747269780000ull;  // "matrix"
constexpr uint64_t kStreamTag = 0x73747265616d0000ull;  // "stream"

// Index of the first entry of cdf[0..k) greater than u (u in [0, 1)); the
// last entry is exactly 1, so the result is always < k.
int sample_cdf(const double* cdf, int k, double u) {
  const double* it = std::upper_bound(cdf, cdf + k, u);
  return static_cast<int>(std::min<std::ptrdiff_t>(it - cdf, k - 1));
}

void running_sum(const double* p, int k, double* cdf) {
  double acc = 0.0;
  for (int j = 0; j < k; ++j) cdf[j] = (acc += p[j]);
  cdf[k - 1] = 1.0;  // absorb rounding so sampling never falls off the end
}

}  // namespace

MarkovSource::MarkovSource(const MarkovSpec& spec) : spec_(spec) {
  const int k = spec.states;
  // The dense (K, K) matrix and its power iteration bound K; 1024 is ample
  // for a synthetic corpus.
  if (k < 2 || k > 1024) ZT_USER_ERROR("markov source: states must be in [2, 1024], got ", k);
  if (spec.successors < 1 || spec.successors > k)
    ZT_USER_ERROR("markov source: successors must be in [1, states = ", k, "], got ", spec.successors);
  if (!(spec.background > 0.0 && spec.background <= 1.0))
    ZT_USER_ERROR("markov source: background must be in (0, 1], got ", spec.background);

  const size_t kk = static_cast<size_t>(k);
  p_.assign(kk * kk, spec.background / k);
  cdf_.resize(kk * kk);
  const CounterRng rng{rng_key(spec.seed, kMatrixTag)};
  std::vector<int> chosen;
  for (int i = 0; i < k; ++i) {
    // Distinct successors by rejection; counters are private to row i.
    uint64_t counter = static_cast<uint64_t>(i) << 32;
    chosen.clear();
    while (static_cast<int>(chosen.size()) < spec.successors) {
      const int j = static_cast<int>(rng.below(counter++, static_cast<uint64_t>(k)));
      if (std::find(chosen.begin(), chosen.end(), j) == chosen.end()) chosen.push_back(j);
    }
    std::vector<double> w(chosen.size());
    double total = 0.0;
    for (auto& x : w) total += (x = 0.5 + rng.uniform(counter++));
    double* row = &p_[static_cast<size_t>(i) * kk];
    for (size_t s = 0; s < chosen.size(); ++s) row[chosen[s]] += (1.0 - spec.background) * w[s] / total;
    running_sum(row, k, &cdf_[static_cast<size_t>(i) * kk]);
  }

  // Stationary distribution: pi <- pi P from uniform. The background mass
  // makes P a contraction in L1 by (1 - background) per step, so this
  // converges geometrically; stop at rounding level.
  pi_.assign(kk, 1.0 / k);
  std::vector<double> next(kk);
  for (int iter = 0; iter < 10000; ++iter) {
    std::fill(next.begin(), next.end(), 0.0);
    for (int i = 0; i < k; ++i) {
      const double* row = &p_[static_cast<size_t>(i) * kk];
      for (int j = 0; j < k; ++j) next[j] += pi_[i] * row[j];
    }
    double sum = 0.0, change = 0.0;
    for (double x : next) sum += x;
    for (int j = 0; j < k; ++j) {
      next[j] /= sum;
      change += std::fabs(next[j] - pi_[j]);
    }
    pi_.swap(next);
    if (change < 1e-14) break;
  }
  pi_cdf_.resize(kk);
  running_sum(pi_.data(), k, pi_cdf_.data());

  entropy_ = 0.0;
  for (int i = 0; i < k; ++i) {
    double h = 0.0;
    for (int j = 0; j < k; ++j) {
      const double p = prob(i, j);
      if (p > 0.0) h -= p * std::log(p);
    }
    entropy_ += pi_[i] * h;
  }
}

std::vector<uint16_t> MarkovSource::generate(int64_t n, uint64_t stream) const {
  ZT_CHECK(n >= 0, "markov source: ", n, " tokens");
  std::vector<uint16_t> out(static_cast<size_t>(n));
  if (n == 0) return out;
  const int k = spec_.states;
  const CounterRng rng{rng_key(spec_.seed, kStreamTag, stream)};
  int x = sample_cdf(pi_cdf_.data(), k, rng.uniform(0));
  out[0] = static_cast<uint16_t>(x);
  for (int64_t t = 1; t < n; ++t) {
    x = sample_cdf(&cdf_[static_cast<size_t>(x) * k], k, rng.uniform(static_cast<uint64_t>(t)));
    out[static_cast<size_t>(t)] = static_cast<uint16_t>(x);
  }
  return out;
}

EmbeddedCorpus make_embedded_corpus() {
  EmbeddedCorpus c;
  const MarkovSource source(c.spec);
  c.train = source.generate(kEmbeddedTrainTokens, kMarkovTrainStream);
  c.val = source.generate(kEmbeddedValTokens, kMarkovValStream);
  c.entropy_nats = source.entropy_rate();
  c.vocab_size = source.states();
  return c;
}

}  // namespace zt
