#include "io/packing.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "io/sampler.hpp"
#include "io/token_dataset.hpp"

namespace zt {
namespace {
// Keys the packing order apart from the per-epoch row orders (rng_key(seed, e)).
constexpr uint64_t kPackingStream = 0x7061636b696e67ull;  // "packing"
}  // namespace

PackedRows::PackedRows(const TokenDataset& data, int64_t seq_len, uint64_t seed, bool shuffle, const char* what)
    : data_(data), T_(seq_len), seed_(seed) {
  if (!data.has_examples()) {
    ZT_USER_ERROR(what, " '", data.describe(), "' has no example boundaries to pack (data.packing needs loss ",
                  "masks that record where examples start: version 2, as zdata finetune writes them)");
  }
  ZT_CHECK(seq_len >= 1, "packing: sequence length ", seq_len);
  const int64_t n = static_cast<int64_t>(data.example_starts().size());
  if (n == 0) ZT_USER_ERROR(what, " '", data.describe(), "' holds no examples to pack");
  order_.resize(static_cast<size_t>(n));
  if (shuffle) {
    const FeistelPermutation perm(n, rng_key(seed, kPackingStream));
    for (int64_t k = 0; k < n; ++k) order_[static_cast<size_t>(k)] = perm(k);
  } else {
    for (int64_t k = 0; k < n; ++k) order_[static_cast<size_t>(k)] = k;
  }
  // Next-fit into rows of T + 1 tokens; a row also closes when its T input
  // positions are full (an example starting at position T would add nothing).
  const int64_t cap = T_ + 1;
  int64_t used = 0;
  row_begin_.push_back(0);
  for (int64_t k = 0; k < n; ++k) {
    const int64_t len = std::min(length(order_[static_cast<size_t>(k)]), cap);
    if (len < length(order_[static_cast<size_t>(k)])) ++truncated_;
    if (used > 0 && (used + len > cap || used >= T_)) {
      row_begin_.push_back(k);
      padding_ += std::max<int64_t>(T_ - used, 0);
      used = 0;
    }
    used += len;
  }
  row_begin_.push_back(n);
  padding_ += std::max<int64_t>(T_ - used, 0);
  // The counted targets of every row, for the loss weights ([Note: masked
  // targets] in train/data_feed.hpp): one pass over the data.
  std::vector<int32_t> x(static_cast<size_t>(T_)), y(x.size()), d(x.size());
  counted_.resize(static_cast<size_t>(num_rows()));
  for (int64_t r = 0; r < num_rows(); ++r) {
    fill(r, x.data(), y.data(), d.data());
    int64_t c = 0;
    for (int32_t t : y) c += t >= 0;
    counted_[static_cast<size_t>(r)] = c;
  }
}

int64_t PackedRows::length(int64_t example) const {
  const std::vector<int64_t>& s = data_.example_starts();
  const size_t k = static_cast<size_t>(example);
  return (k + 1 < s.size() ? s[k + 1] : data_.size()) - s[k];
}

int64_t PackedRows::train_row(int64_t step, int64_t index_in_global_batch, int64_t global_batch) const {
  ZT_CHECK(step >= 0 && global_batch >= 1 && index_in_global_batch >= 0 && index_in_global_batch < global_batch,
           "packed sample (step ", step, ", index ", index_in_global_batch, ") of a global batch of ", global_batch);
  const int64_t R = num_rows();
  const int64_t g = step * global_batch + index_in_global_batch;
  return FeistelPermutation(R, rng_key(seed_, static_cast<uint64_t>(g / R)))(g % R);
}

int64_t PackedRows::val_row(int64_t batch, int64_t index_in_batch, int64_t batch_size) const {
  ZT_CHECK(batch >= 0 && batch_size >= 1 && index_in_batch >= 0 && index_in_batch < batch_size,
           "packed validation sample (batch ", batch, ", index ", index_in_batch, ") of batches of ", batch_size);
  return (batch * batch_size + index_in_batch) % num_rows();
}

void PackedRows::fill(int64_t row, int32_t* inputs, int32_t* targets, int32_t* doc_start) const {
  ZT_CHECK(row >= 0 && row < num_rows(), "packed row ", row, " of ", num_rows());
  const std::vector<int64_t>& starts = data_.example_starts();
  std::vector<uint8_t> mask(static_cast<size_t>(T_));
  int64_t pos = 0;  // the example's first position in the row
  for (int64_t k = row_begin_[static_cast<size_t>(row)]; k < row_begin_[static_cast<size_t>(row) + 1]; ++k) {
    const int64_t e = order_[static_cast<size_t>(k)];
    const int64_t s = starts[static_cast<size_t>(e)];
    const int64_t len = std::min(length(e), T_ + 1);
    const int64_t n_in = std::min(len, T_ - pos);  // its input positions (the last may be a target only)
    data_.copy_window(s, n_in, inputs + pos);
    // Targets inside the example: tokens s+1 .. s+len-1, for the inputs
    // before its last token; the loss bits decide which count.
    const int64_t n_tg = std::min(len - 1, T_ - pos);
    data_.copy_window(s + 1, n_tg, targets + pos);
    data_.copy_mask(s + 1, n_tg, mask.data());
    for (int64_t i = 0; i < n_tg; ++i)
      if (mask[static_cast<size_t>(i)] == 0) targets[pos + i] = -1;
    // The example's last token would predict the next example's first.
    if (pos + len - 1 < T_) targets[pos + len - 1] = -1;
    std::fill(doc_start + pos, doc_start + pos + n_in, static_cast<int32_t>(pos));
    pos += len;
  }
  if (pos < T_) {  // padding: one document of its own, predicting nothing
    std::fill(inputs + pos, inputs + T_, 0);
    std::fill(targets + pos, targets + T_, -1);
    std::fill(doc_start + pos, doc_start + T_, static_cast<int32_t>(pos));
  }
}

}  // namespace zt
