// Which tokens each sample of training reads.
//
// [Note: sample order] The corpus of N tokens is cut into W = (N - 1) / T
// windows of T + 1 tokens; window w starts at token w*T, its inputs are
// tokens [w*T, w*T + T) and its targets [w*T + 1, w*T + T + 1). Consecutive
// windows share one token (the last target of one window is the first input
// of the next), as llm.c's loader does, so every token but the first is a
// target exactly once per epoch. Tokens after W*T + 1 are unused.
//
// Training samples are numbered globally: sample g = step * global_batch + i,
// where i in [0, global_batch) is the sample's index in its global batch. It
// reads window permute_e(g mod W) of epoch e = g / W, where permute_e is a
// bijection of [0, W) keyed by rng_key(seed, e). Consequences:
//  - the samples of a step depend only on (seed, step, global_batch), never on
//    how the batch is split into ranks and micro-batches, so every parallel
//    layout trains on the same data (the equivalence tests rely on it);
//  - within an epoch no window repeats, and each epoch has a fresh order;
//  - the whole state to checkpoint is (seed, next step).
// The bijection is a balanced Feistel network on the smallest even-bit domain
// holding [0, W), with cycle walking to stay inside [0, W); it needs no
// memory and costs O(1) per sample whatever W is.
#pragma once

#include <cstdint>

#include <nlohmann/json_fwd.hpp>

namespace zt {

class TokenDataset;

// A seeded bijection of [0, n), n >= 1 (see [Note: sample order]).
class FeistelPermutation {
 public:
  FeistelPermutation(int64_t n, uint64_t key);
  int64_t size() const { return n_; }
  int64_t operator()(int64_t x) const;

 private:
  static constexpr int kRounds = 6;
  uint64_t encrypt(uint64_t x) const;  // bijection of [0, 2^(2*half_bits_))
  int64_t n_;
  int half_bits_;
  uint64_t half_mask_;
  uint64_t round_keys_[kRounds];
};

// The checkpointed part of the sampler: the seed and the next step to run.
struct SamplerState {
  uint64_t seed = 0;
  int64_t step = 0;
};
bool operator==(const SamplerState& a, const SamplerState& b);
// {"seed": S, "step": N}; from_json throws UserError for a missing or
// ill-typed key, naming it.
void to_json(nlohmann::json& j, const SamplerState& s);
void from_json(const nlohmann::json& j, SamplerState& s);

// Training sampler, see [Note: sample order]. Pure: every method is const.
class Sampler {
 public:
  // Throws UserError when the corpus cannot fill one window (num_tokens < T + 1).
  Sampler(int64_t num_tokens, int64_t seq_len, uint64_t seed);

  int64_t num_tokens() const { return num_tokens_; }
  int64_t seq_len() const { return seq_len_; }
  uint64_t seed() const { return seed_; }
  int64_t num_windows() const { return num_windows_; }

  // Epoch of sample (step, index): (step * global_batch + index) / W.
  int64_t epoch(int64_t step, int64_t index_in_global_batch, int64_t global_batch) const;
  // Window number in [0, W) and its first token, of sample (step, index).
  int64_t window(int64_t step, int64_t index_in_global_batch, int64_t global_batch) const;
  int64_t window_start(int64_t step, int64_t index_in_global_batch, int64_t global_batch) const;

  // inputs[0..T) and targets[0..T) of sample (step, index). The dataset must
  // be the one of num_tokens() tokens the sampler was made for.
  void fill(int64_t step, int64_t index_in_global_batch, int64_t global_batch, int32_t* inputs,
            int32_t* targets, const TokenDataset& data) const;

  SamplerState state(int64_t next_step) const { return {seed_, next_step}; }

 private:
  int64_t num_tokens_;
  int64_t seq_len_;
  uint64_t seed_;
  int64_t num_windows_;
};

// Validation sampler: batch b of batch_size samples reads windows
// b*batch_size .. b*batch_size + batch_size - 1 in corpus order (modulo W), so
// every evaluation sees the same tokens whatever the step or the layout.
class ValidationSampler {
 public:
  ValidationSampler(int64_t num_tokens, int64_t seq_len);

  int64_t num_tokens() const { return num_tokens_; }
  int64_t seq_len() const { return seq_len_; }
  int64_t num_windows() const { return num_windows_; }
  // Batches that fit without wrapping around (at least 1).
  int64_t max_batches(int64_t batch_size) const;

  int64_t window_start(int64_t batch, int64_t index_in_batch, int64_t batch_size) const;
  void fill(int64_t batch, int64_t index_in_batch, int64_t batch_size, int32_t* inputs, int32_t* targets,
            const TokenDataset& data) const;

 private:
  int64_t num_tokens_;
  int64_t seq_len_;
  int64_t num_windows_;
};

}  // namespace zt
