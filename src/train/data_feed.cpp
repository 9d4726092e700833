#include "train/data_feed.hpp"

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "io/synthetic.hpp"

namespace zt {

DataFeed::DataFeed(const Config& cfg, int64_t B, int64_t T, int64_t global_batch, int64_t micro_batches, int dp_rank,
                   int dp_size, Device& dev)
    : B_(B), T_(T), global_batch_(global_batch), dp_rank_(dp_rank), dp_size_(dp_size), dev_(dev),
      staging_(dev.make_upload_staging(static_cast<size_t>((cfg.data.packing ? 3 : 2) * B * T) * sizeof(int32_t),
                                       static_cast<int>(micro_batches) + 1)) {
  if (cfg.data.embedded) {
    EmbeddedCorpus corpus = make_embedded_corpus();
    log_info("data: embedded synthetic corpus (Markov source, entropy ", corpus.entropy_nats, " nats/token)");
    train_ = std::make_unique<TokenDataset>(TokenDataset::from_tokens(std::move(corpus.train), "<embedded train>"));
    val_ = std::make_unique<TokenDataset>(TokenDataset::from_tokens(std::move(corpus.val), "<embedded val>"));
  } else {
    train_ = std::make_unique<TokenDataset>(TokenDataset::open_list(cfg.data.train));
    if (!cfg.data.val.empty()) val_ = std::make_unique<TokenDataset>(TokenDataset::open_list(cfg.data.val));
  }
  const int64_t window = T + 1;
  train_->validate_vocab(cfg.model.vocab_size);
  mask_row_.resize(static_cast<size_t>(T));
  if (train_->has_mask()) log_info("data: loss masks found: only the targets they mark count in the loss");
  if (val_) val_->validate_vocab(cfg.model.vocab_size);
  if (cfg.data.packing) {
    // [Note: packed rows]: rows of whole examples, padded; no windows.
    packed_train_ = std::make_unique<PackedRows>(*train_, T, cfg.train.seed, true, "data.packing: data.train");
    log_info("data: packing ", packed_train_->num_examples(), " examples into ", packed_train_->num_rows(),
             " rows of ", window, " tokens (", packed_train_->padding(), " of ", packed_train_->num_rows() * T,
             " input positions are padding; ", packed_train_->truncated(), " examples longer than ", window,
             " tokens truncated)");
    if (val_) packed_val_ = std::make_unique<PackedRows>(*val_, T, cfg.train.seed, false, "data.packing: data.val");
    return;
  }
  if (train_->size() < window)
    ZT_USER_ERROR("data.train: ", train_->size(), " tokens cannot fill one sequence of ", window);
  sampler_ = std::make_unique<Sampler>(train_->size(), T, cfg.train.seed);
  if (val_) {
    if (val_->size() < window) ZT_USER_ERROR("data.val: ", val_->size(), " tokens cannot fill one sequence of ", window);
    val_sampler_ = std::make_unique<ValidationSampler>(val_->size(), T);
  }
  warn_about_sizes(cfg);
}

// [Note: data the run would use unevenly] Sizes that train or validate on
// repeated samples are legal (a tiny corpus for a test) but change what the
// numbers mean, so rank 0 names them once: a training set of fewer
// sequences than one global batch (each step repeats samples), a validation
// set smaller than train.eval_steps batches (the ValidationSampler wraps
// around, so some sequences count more often than others), and a validation
// set that is the training set.
void DataFeed::warn_about_sizes(const Config& cfg) const {
  if (process_rank() > 0) return;
  const int64_t train_windows = sampler_->num_windows();
  if (train_windows < global_batch_)
    log_warn("data.train: ", train_windows, " sequences of ", T_ + 1, " tokens, fewer than the global batch of ",
             global_batch_, ": every step repeats sequences");
  if (!val_sampler_) return;
  const int64_t val_windows = val_sampler_->num_windows();
  if (cfg.train.eval_steps * global_batch_ > val_windows) {
    const int64_t fit = val_windows / global_batch_;
    log_warn("data.val: ", val_windows, " sequences of ", T_ + 1, " tokens hold ", fit, " validation batches of ",
             global_batch_, ", but train.eval_steps is ", cfg.train.eval_steps,
             ": the validation wraps around and counts some sequences more often than others; ",
             fit > 0 ? "set train.eval_steps to at most " + std::to_string(fit)
                     : std::string("give more validation data or a smaller batch"));
  }
  for (const std::string& v : val_->paths())
    for (const std::string& t : train_->paths()) {
      std::error_code ec;
      if (std::filesystem::equivalent(t, v, ec)) {
        log_warn("data.val's shard ", v, " is data.train's ", t, ": the validation loss is measured on training data");
        return;
      }
    }
}

template <typename RowOf>
void DataFeed::fill_packed(const PackedRows& rows, int mb, int32_t* x, int32_t* y, RowOf row_of) {
  int32_t* d = y + B_ * T_;  // the slot's third part
  for (int64_t b = 0; b < B_; ++b) rows.fill(row_of(global_index(mb, b)), x + b * T_, y + b * T_, d + b * T_);
}

std::pair<int32_t*, int32_t*> DataFeed::next_slot() {
  int32_t* slot = static_cast<int32_t*>(staging_->next());
  return {slot, slot + B_ * T_};
}

void DataFeed::load_train(int64_t step, int mb, const Tensor& tokens, const Tensor& targets,
                          const Tensor& doc_start) {
  const auto [x, y] = next_slot();
  if (packing()) {
    fill_packed(*packed_train_, mb, x, y,
                [&](int64_t i) { return packed_train_->train_row(step, i, global_batch_); });
    upload(tokens, targets, doc_start);
    return;
  }
  for (int64_t b = 0; b < B_; ++b) {
    const int64_t i = global_index(mb, b);
    sampler_->fill(step, i, global_batch_, x + b * T_, y + b * T_, *train_);
    if (train_->has_mask()) mask_targets(*train_, sampler_->window_start(step, i, global_batch_), y + b * T_);
  }
  upload(tokens, targets, doc_start);
}

void DataFeed::load_val(int64_t batch, int mb, const Tensor& tokens, const Tensor& targets,
                        const Tensor& doc_start) {
  ZT_CHECK(val_ != nullptr, "validation batch asked of a run without validation data");
  const auto [x, y] = next_slot();
  if (packing()) {
    fill_packed(*packed_val_, mb, x, y,
                [&](int64_t i) { return packed_val_->val_row(batch, i, global_batch_); });
    upload(tokens, targets, doc_start);
    return;
  }
  for (int64_t b = 0; b < B_; ++b) {
    const int64_t i = global_index(mb, b);
    val_sampler_->fill(batch, i, global_batch_, x + b * T_, y + b * T_, *val_);
    if (val_->has_mask()) mask_targets(*val_, val_sampler_->window_start(batch, i, global_batch_), y + b * T_);
  }
  upload(tokens, targets, doc_start);
}

void DataFeed::mask_targets(const TokenDataset& data, int64_t start, int32_t* targets) {
  // Targets are tokens [start + 1, start + T + 1) ([Note: sample order]).
  data.copy_mask(start + 1, T_, mask_row_.data());
  for (int64_t t = 0; t < T_; ++t)
    if (mask_row_[static_cast<size_t>(t)] == 0) targets[t] = -1;
}

namespace {
int64_t count_ones(const TokenDataset& data, int64_t start, int64_t len, std::vector<uint8_t>& row) {
  data.copy_mask(start, len, row.data());
  int64_t n = 0;
  for (int64_t t = 0; t < len; ++t) n += row[static_cast<size_t>(t)];
  return n;
}
}  // namespace

int64_t DataFeed::train_targets(int64_t step) const {
  if (packing()) {  // counted per row when the rows were laid out
    int64_t n = 0;
    for (int64_t i = 0; i < global_batch_; ++i)
      n += packed_train_->counted_targets(packed_train_->train_row(step, i, global_batch_));
    return n;
  }
  if (!train_->has_mask()) return global_batch_ * T_;
  std::vector<uint8_t> row(static_cast<size_t>(T_));
  int64_t n = 0;
  for (int64_t i = 0; i < global_batch_; ++i)
    n += count_ones(*train_, sampler_->window_start(step, i, global_batch_) + 1, T_, row);
  return n;
}

int64_t DataFeed::val_targets(int64_t batches) const {
  ZT_CHECK(val_ != nullptr, "validation targets asked of a run without validation data");
  if (packing()) {
    int64_t n = 0;
    for (int64_t e = 0; e < batches; ++e)
      for (int64_t i = 0; i < global_batch_; ++i)
        n += packed_val_->counted_targets(packed_val_->val_row(e, i, global_batch_));
    return n;
  }
  if (!val_->has_mask()) return batches * global_batch_ * T_;
  std::vector<uint8_t> row(static_cast<size_t>(T_));
  int64_t n = 0;
  for (int64_t e = 0; e < batches; ++e)
    for (int64_t i = 0; i < global_batch_; ++i)
      n += count_ones(*val_, val_sampler_->window_start(e, i, global_batch_) + 1, T_, row);
  return n;
}

// No host synchronisation: the copies are queued ([Note: upload staging]).
void DataFeed::upload(const Tensor& tokens, const Tensor& targets, const Tensor& doc_start) {
  ZT_CHECK(tokens.numel() == B_ * T_ && targets.numel() == B_ * T_ && tokens.dtype == DType::i32 &&
               targets.dtype == DType::i32,
           "tokens and targets must be (B, T) = (", B_, ", ", T_, ") i32");
  ZT_CHECK(doc_start.defined() == packing(), packing() ? "packed rows need a doc_start tensor"
                                                       : "doc_start given for rows that are not packed");
  staging_->upload(tokens.data, 0, tokens.bytes());
  staging_->upload(targets.data, tokens.bytes(), targets.bytes());
  if (doc_start.defined()) {
    ZT_CHECK(doc_start.numel() == B_ * T_ && doc_start.dtype == DType::i32, "doc_start must be (B, T) i32");
    staging_->upload(doc_start.data, 2 * tokens.bytes(), doc_start.bytes());
  }
}

}  // namespace zt
