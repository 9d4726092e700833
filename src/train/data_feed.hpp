// DataFeed: the token stream of a run. Opens the train (and validation) data
// of the config, or the embedded corpus, checks it against the model's
// vocabulary and sequence length, and fills a micro-batch's tokens and
// targets (and, with data.packing, its doc_start) on the device.
//
// Row b of micro-batch m on data-parallel rank r is sample (m*dp + r)*B + b
// of the global batch, so every layout of the same global batch trains on
// the same samples (the samplers are pure functions of the step and index).
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "core/config.hpp"
#include "io/packing.hpp"
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
  bool has_val() const { return val_ != nullptr; }
  // [Note: masked targets] Fine-tuning data carries a loss mask ([Note: loss
  // mask file] in io/loss_mask.hpp): a target whose mask is 0 reaches the
  // device as -1, which the classifier kernels ignore (loss 0, no gradient).
  // The loss is then a mean over the counted targets of the global batch, and
  // every rank needs that count to weigh each token by 1/count: it is
  // computed here from the sampler, which every rank can evaluate for every
  // sample of the global batch (G * T mask bytes, no communication; with
  // packing, the packed rows' counts), so all ranks and layouts agree on it
  // bit for bit. Without a mask the count is global_batch * T and nothing
  // changes.
  //
  // Targets that count in the loss in training step `step` (0-based), over
  // the whole global batch.
  int64_t train_targets(int64_t step) const;
  // The same over validation batches 0..batches-1.
  int64_t val_targets(int64_t batches) const;
  // Micro-batch `mb` of training step `step` (0-based): (B, T) i32 tokens
  // and next-token targets, copied to `dev`; with packing() also the rows'
  // (B, T) i32 doc_start (which must be undefined without packing).
  void load_train(int64_t step, int mb, const Tensor& tokens, const Tensor& targets,
                  const Tensor& doc_start = Tensor());
  // Micro-batch `mb` of validation batch `batch`.
  void load_val(int64_t batch, int mb, const Tensor& tokens, const Tensor& targets,
                const Tensor& doc_start = Tensor());
  // data.packing: rows of whole examples ([Note: packed rows] in
  // io/packing.hpp) instead of windows of the token stream.
  bool packing() const { return packed_train_ != nullptr; }

 private:
  int64_t global_index(int mb, int64_t b) const { return (mb * dp_size_ + dp_rank_) * B_ + b; }
  // The host (B, T) tokens and targets of the next staging slot.
  std::pair<int32_t*, int32_t*> next_slot();
  void upload(const Tensor& tokens, const Tensor& targets, const Tensor& doc_start);
  // Row b of micro-batch mb's slot (x, y, then doc_start after y) from
  // packed row row_of(global sample index).
  template <typename RowOf>
  void fill_packed(const PackedRows& rows, int mb, int32_t* x, int32_t* y, RowOf row_of);
  // Sets the targets (T) of the sample whose window starts at `start` to -1
  // where `data`'s mask is 0.
  void mask_targets(const TokenDataset& data, int64_t start, int32_t* targets);
  void warn_about_sizes(const Config& cfg) const;  // [Note: data the run would use unevenly]

  int64_t B_, T_, global_batch_;
  int dp_rank_, dp_size_;
  Device& dev_;
  std::unique_ptr<TokenDataset> train_, val_;
  std::unique_ptr<Sampler> sampler_;
  std::unique_ptr<ValidationSampler> val_sampler_;
  std::unique_ptr<PackedRows> packed_train_, packed_val_;  // data.packing only
  std::vector<uint8_t> mask_row_;  // (T) scratch for mask_targets
  // Slots of (B, T) tokens, (B, T) targets and, with packing, (B, T)
  // doc_start, i32.
  std::unique_ptr<UploadStaging> staging_;
};

}  // namespace zt
