// A synthetic corpus of known entropy: a seeded first-order Markov source.
//
// Each state i in [0, K) (token i) has `successors` likely next states, with
// weights drawn uniformly in [0.5, 1.5), holding 1 - background of the mass;
// the remaining `background` is spread evenly over all K states, so every
// transition is possible (the chain is ergodic and aperiodic) while the
// entropy rate stays far below log K. The stationary distribution pi comes
// from power iteration and the entropy rate is exact:
//
//   H = sum_i pi_i * H(P_i) = - sum_i pi_i sum_j P_ij log P_ij   (nats/token)
//
// which is the lowest cross-entropy loss any model can reach on long
// sequences; a bigram table reaches it, so a tiny transformer learns it in
// minutes. End-to-end tests train on it and compare the loss with H.
//
// Generation and the matrix use only +, *, / and comparisons on doubles (no
// libm), so the tokens are the same on every IEEE machine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zt {

struct MarkovSpec {
  int states = 64;           // K, the vocabulary: tokens 0..K-1
  int successors = 4;        // likely next states per state
  double background = 0.1;   // probability mass spread over all K states
  uint64_t seed = 1234;
};

class MarkovSource {
 public:
  // Throws UserError for parameters out of range (2 <= K <= 1024,
  // 1 <= successors <= K, 0 < background <= 1).
  explicit MarkovSource(const MarkovSpec& spec);

  const MarkovSpec& spec() const { return spec_; }
  int states() const { return spec_.states; }
  double prob(int from, int to) const { return p_[static_cast<size_t>(from) * spec_.states + to]; }
  const std::vector<double>& transition() const { return p_; }  // (K, K) row-major, rows sum to 1
  const std::vector<double>& stationary() const { return pi_; }  // (K)
  double entropy_rate() const { return entropy_; }                // nats per token

  // n tokens of the chain: x_0 ~ pi, x_t ~ P[x_{t-1}]. Deterministic in
  // (spec, stream); different streams are independent runs of the same chain.
  std::vector<uint16_t> generate(int64_t n, uint64_t stream) const;

 private:
  MarkovSpec spec_;
  std::vector<double> p_;    // (K, K)
  std::vector<double> cdf_;  // (K, K) running sums of each row, last = 1
  std::vector<double> pi_;   // (K)
  std::vector<double> pi_cdf_;
  double entropy_ = 0.0;
};

// Streams of the corpus made by `zdata markov` and embedded in the trainer.
constexpr uint64_t kMarkovTrainStream = 1;
constexpr uint64_t kMarkovValStream = 2;
constexpr int64_t kEmbeddedTrainTokens = 2000000;
constexpr int64_t kEmbeddedValTokens = 200000;

struct EmbeddedCorpus {
  MarkovSpec spec;
  std::vector<uint16_t> train;  // kEmbeddedTrainTokens tokens, stream kMarkovTrainStream
  std::vector<uint16_t> val;    // kEmbeddedValTokens tokens, stream kMarkovValStream
  double entropy_nats = 0.0;    // the ideal loss
  int vocab_size = 0;           // spec.states
};

// The default corpus (MarkovSpec{} and the sizes above), used by the trainer
// when a config has no "data" section. `zdata markov` with its defaults writes
// exactly these tokens to data/markov/.
EmbeddedCorpus make_embedded_corpus();

}  // namespace zt
