// Packed rows: whole fine-tuning examples laid end to end in the rows of a
// batch (data.packing).
//
// [Note: packed rows] A dataset whose loss masks record where its examples
// start ([Note: loss mask file] in io/loss_mask.hpp, zdata finetune) can be
// read as rows of whole examples instead of windows of the token stream:
//  - Layout, fixed for the run: the examples are taken in a seeded order (a
//    FeistelPermutation of their numbers keyed by the seed; validation data
//    keeps corpus order) and packed next-fit into rows of T + 1 tokens: an
//    example joins the open row when it fits in what is left of it, else it
//    opens the next row. An example longer than T + 1 tokens is truncated to
//    its first T + 1 (the rest is dropped, never carried into another row);
//    an example never spans two rows.
//  - A row: inputs are its first T tokens and targets the next token, as in
//    a window ([Note: sample order] in io/sampler.hpp), except that the
//    target of an example's last token (the next example's first token) is
//    -1, a target whose loss bit is clear is -1, and the tail after the last
//    example is padding (token 0, target -1, one document of its own).
//    doc_start[t] is the row position of the first token of t's example
//    ([Note: document masking] in modules/kernels.hpp), so attention and
//    positions restart at every example, as if each ran alone.
//  - Order: the R rows are read as the windows are: training sample g =
//    step * global_batch + i reads row permute_e(g mod R) of epoch e = g / R,
//    the bijection keyed by rng_key(seed, e); validation batch b reads rows
//    b * batch_size + i (mod R) in order. The data of a step depends on
//    (seed, step, global_batch) only, never on the parallel layout, and the
//    checkpointed sampler state (seed, step) is all a resume needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zt {

class TokenDataset;

class PackedRows {
 public:
  // The rows of `data` (which must outlive this and have has_examples();
  // UserError naming `what` otherwise) for sequences of seq_len tokens.
  // shuffle: take the examples in the order keyed by `seed` (training),
  // else in corpus order (validation).
  PackedRows(const TokenDataset& data, int64_t seq_len, uint64_t seed, bool shuffle, const char* what);

  int64_t seq_len() const { return T_; }
  int64_t num_rows() const { return static_cast<int64_t>(row_begin_.size()) - 1; }
  int64_t num_examples() const { return static_cast<int64_t>(order_.size()); }
  int64_t truncated() const { return truncated_; }      // examples cut to T + 1 tokens
  int64_t padding() const { return padding_; }          // input positions of padding, all rows
  int64_t counted_targets(int64_t row) const { return counted_[static_cast<size_t>(row)]; }

  // Row of training sample (step, index) of a global batch, and of
  // validation sample (batch, index) of batches of batch_size.
  int64_t train_row(int64_t step, int64_t index_in_global_batch, int64_t global_batch) const;
  int64_t val_row(int64_t batch, int64_t index_in_batch, int64_t batch_size) const;

  // inputs, targets and doc_start (T each) of `row`.
  void fill(int64_t row, int32_t* inputs, int32_t* targets, int32_t* doc_start) const;

 private:
  int64_t length(int64_t example) const;  // tokens, before truncation

  const TokenDataset& data_;
  int64_t T_;
  uint64_t seed_;
  std::vector<int64_t> order_;      // example numbers in packing order
  std::vector<int64_t> row_begin_;  // R + 1 offsets into order_
  std::vector<int64_t> counted_;    // per row: targets that count
  int64_t truncated_ = 0, padding_ = 0;
};

}  // namespace zt
