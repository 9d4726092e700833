// DataFeed: the token stream of a run. Opens the train (and validation) data
// of the config, or the embedded corpus, checks it against the model's
// vocabulary and sequence length, and fills a micro-batch's tokens and
// targets on the device.
//
// Row b of micro-batch m on data-parallel rank r is sample (m*dp + r)*B + b
// of the global batch, so every layout of the same global batch trains on
// the same samples (the samplers are pure functions of the step and index).
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "core/config.hpp"
#include "io/sampler.hpp"
#include "io/token_dataset.hpp"
#include "runtime/device.hpp"

namespace zt {

class DataFeed {
 public:
  // B, T: micro-batch and sequence length; global_batch: sequences per step;
  // micro_batches: per step (the upload staging keeps one slot more,
  // [Note: upload staging] in runtime/device.hpp).
  DataFeed(const Config& cfg, int64_t B, int64_t T, int64_t global_batch, int64_t micro_batches, int dp_rank,
           int dp_size, Device& dev);
  bool has_val() const { return val_sampler_ != nullptr; }
  // Micro-batch `mb` of training step `step` (0-based): (B, T) i32 tokens
  // and next-token targets, copied to `dev`.
  void load_train(int64_t step, int mb, const Tensor& tokens, const Tensor& targets);
  // Micro-batch `mb` of validation batch `batch`.
  void load_val(int64_t batch, int mb, const Tensor& tokens, const Tensor& targets);

 private:
  int64_t global_index(int mb, int64_t b) const { return (mb * dp_size_ + dp_rank_) * B_ + b; }
  // The host (B, T) tokens and targets of the next staging slot.
  std::pair<int32_t*, int32_t*> next_slot();
  void upload(const Tensor& tokens, const Tensor& targets);

  int64_t B_, T_, global_batch_;
  int dp_rank_, dp_size_;
  Device& dev_;
  std::unique_ptr<TokenDataset> train_, val_;
  std::unique_ptr<Sampler> sampler_;
  std::unique_ptr<ValidationSampler> val_sampler_;
  std::unique_ptr<UploadStaging> staging_;  // slots of (B, T) tokens then (B, T) targets, i32
};

}  // namespace zt
