#include "io/sampler.hpp"

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "io/token_dataset.hpp"

namespace zt {
namespace {

int64_t count_windows(int64_t num_tokens, int64_t seq_len, const char* what) {
  if (seq_len < 1) ZT_USER_ERROR(what, ": sequence length must be at least 1, got ", seq_len);
  if (num_tokens < seq_len + 1) {
    ZT_USER_ERROR(what, ": the corpus has ", num_tokens, " tokens, fewer than one window of seq_len + 1 = ",
                  seq_len + 1, " tokens; use more data or a shorter sequence length");
  }
  return (num_tokens - 1) / seq_len;
}

// Inputs are window[0..T), targets window[1..T+1): two copies of T tokens
// straight into the caller's buffers, no staging.
void fill_window(int64_t start, int64_t seq_len, int64_t num_tokens, int32_t* inputs, int32_t* targets,
                 const TokenDataset& data) {
  ZT_CHECK(data.size() == num_tokens, "sampler made for ", num_tokens, " tokens used with a dataset of ",
           data.size());
  data.copy_window(start, seq_len, inputs);
  data.copy_window(start + 1, seq_len, targets);
}

}  // namespace

FeistelPermutation::FeistelPermutation(int64_t n, uint64_t key) : n_(n) {
  ZT_CHECK(n >= 1, "permutation of ", n, " elements");
  int bits = 0;  // bits needed to write n - 1
  while (bits < 63 && (static_cast<uint64_t>(n - 1) >> bits) != 0) ++bits;
  // Domain 2^(2h) >= n and < 4n, so cycle walking takes < 4 rounds on average.
  half_bits_ = bits <= 2 ? 1 : (bits + 1) / 2;
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
  for (int r = 0; r < kRounds; ++r) round_keys_[r] = rng_key(key, static_cast<uint64_t>(r));
}

uint64_t FeistelPermutation::encrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_;
  uint64_t right = x & half_mask_;
  for (int r = 0; r < kRounds; ++r) {
    const uint64_t f = CounterRng{round_keys_[r]}.bits(right) & half_mask_;
    const uint64_t next_right = left ^ f;
    left = right;
    right = next_right;
  }
  return (left << half_bits_) | right;
}

int64_t FeistelPermutation::operator()(int64_t x) const {
  ZT_CHECK(x >= 0 && x < n_, "permutation input ", x, " outside [0, ", n_, ")");
  // Cycle walking: the orbit of x under encrypt returns to x, which is < n,
  // so this ends, and the restriction to [0, n) stays a bijection.
  uint64_t y = static_cast<uint64_t>(x);
  do {
    y = encrypt(y);
  } while (y >= static_cast<uint64_t>(n_));
  return static_cast<int64_t>(y);
}

bool operator==(const SamplerState& a, const SamplerState& b) { return a.seed == b.seed && a.step == b.step; }

void to_json(nlohmann::json& j, const SamplerState& s) { j = nlohmann::json{{"seed", s.seed}, {"step", s.step}}; }

void from_json(const nlohmann::json& j, SamplerState& s) {
  if (!j.is_object()) ZT_USER_ERROR("sampler state: expected an object {\"seed\", \"step\"}, found ", j.dump());
  // A seed written from a signed integer is stored as number_integer.
  const auto non_negative = [&](const char* key) {
    return j.contains(key) && j.at(key).is_number_integer() &&
           (j.at(key).is_number_unsigned() || j.at(key).get<int64_t>() >= 0);
  };
  if (!non_negative("seed"))
    ZT_USER_ERROR("sampler state: 'seed' must be a non-negative integer, found ", j.value("seed", nlohmann::json()).dump());
  if (!non_negative("step") || j.at("step").get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    ZT_USER_ERROR("sampler state: 'step' must be a non-negative integer, found ", j.value("step", nlohmann::json()).dump());
  s.seed = j.at("seed").get<uint64_t>();
  s.step = j.at("step").get<int64_t>();
}

Sampler::Sampler(int64_t num_tokens, int64_t seq_len, uint64_t seed)
    : num_tokens_(num_tokens),
      seq_len_(seq_len),
      seed_(seed),
      num_windows_(count_windows(num_tokens, seq_len, "training data")) {}

int64_t Sampler::epoch(int64_t step, int64_t index_in_global_batch, int64_t global_batch) const {
  ZT_CHECK(step >= 0 && global_batch >= 1 && index_in_global_batch >= 0 && index_in_global_batch < global_batch,
           "sample (step ", step, ", index ", index_in_global_batch, ") of a global batch of ", global_batch);
  return (step * global_batch + index_in_global_batch) / num_windows_;
}

int64_t Sampler::window(int64_t step, int64_t index_in_global_batch, int64_t global_batch) const {
  const int64_t e = epoch(step, index_in_global_batch, global_batch);
  const int64_t g = step * global_batch + index_in_global_batch;
  // Built per call: six hashes, far cheaper than copying the window.
  return FeistelPermutation(num_windows_, rng_key(seed_, static_cast<uint64_t>(e)))(g % num_windows_);
}

int64_t Sampler::window_start(int64_t step, int64_t index_in_global_batch, int64_t global_batch) const {
  return window(step, index_in_global_batch, global_batch) * seq_len_;
}

void Sampler::fill(int64_t step, int64_t index_in_global_batch, int64_t global_batch, int32_t* inputs,
                   int32_t* targets, const TokenDataset& data) const {
  fill_window(window_start(step, index_in_global_batch, global_batch), seq_len_, num_tokens_, inputs, targets,
              data);
}

ValidationSampler::ValidationSampler(int64_t num_tokens, int64_t seq_len)
    : num_tokens_(num_tokens), seq_len_(seq_len), num_windows_(count_windows(num_tokens, seq_len, "validation data")) {}

int64_t ValidationSampler::max_batches(int64_t batch_size) const {
  ZT_CHECK(batch_size >= 1, "validation batch size ", batch_size);
  return num_windows_ >= batch_size ? num_windows_ / batch_size : 1;
}

int64_t ValidationSampler::window_start(int64_t batch, int64_t index_in_batch, int64_t batch_size) const {
  ZT_CHECK(batch >= 0 && batch_size >= 1 && index_in_batch >= 0 && index_in_batch < batch_size,
           "validation sample (batch ", batch, ", index ", index_in_batch, ") of batches of ", batch_size);
  return ((batch * batch_size + index_in_batch) % num_windows_) * seq_len_;
}

void ValidationSampler::fill(int64_t batch, int64_t index_in_batch, int64_t batch_size, int32_t* inputs,
                             int32_t* targets, const TokenDataset& data) const {
  fill_window(window_start(batch, index_in_batch, batch_size), seq_len_, num_tokens_, inputs, targets, data);
}

}  // namespace zt
