#include "train/data_feed.hpp"

#include "core/log.hpp"
#include "io/synthetic.hpp"

namespace zt {

DataFeed::DataFeed(const Config& cfg, int64_t B, int64_t T, int64_t global_batch, int64_t micro_batches, int dp_rank,
                   int dp_size, Device& dev)
    : B_(B), T_(T), global_batch_(global_batch), dp_rank_(dp_rank), dp_size_(dp_size), dev_(dev),
      staging_(dev.make_upload_staging(static_cast<size_t>(2 * B * T) * sizeof(int32_t),
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
  if (train_->size() < window)
    ZT_USER_ERROR("data.train: ", train_->size(), " tokens cannot fill one sequence of ", window);
  sampler_ = std::make_unique<Sampler>(train_->size(), T, cfg.train.seed);
  if (val_) {
    val_->validate_vocab(cfg.model.vocab_size);
    if (val_->size() < window) ZT_USER_ERROR("data.val: ", val_->size(), " tokens cannot fill one sequence of ", window);
    val_sampler_ = std::make_unique<ValidationSampler>(val_->size(), T);
  }
}

std::pair<int32_t*, int32_t*> DataFeed::next_slot() {
  int32_t* slot = static_cast<int32_t*>(staging_->next());
  return {slot, slot + B_ * T_};
}

void DataFeed::load_train(int64_t step, int mb, const Tensor& tokens, const Tensor& targets) {
  const auto [x, y] = next_slot();
  for (int64_t b = 0; b < B_; ++b) sampler_->fill(step, global_index(mb, b), global_batch_, x + b * T_, y + b * T_, *train_);
  upload(tokens, targets);
}

void DataFeed::load_val(int64_t batch, int mb, const Tensor& tokens, const Tensor& targets) {
  ZT_CHECK(val_sampler_ != nullptr, "validation batch asked of a run without validation data");
  const auto [x, y] = next_slot();
  for (int64_t b = 0; b < B_; ++b)
    val_sampler_->fill(batch, global_index(mb, b), global_batch_, x + b * T_, y + b * T_, *val_);
  upload(tokens, targets);
}

// No host synchronisation: the copies are queued ([Note: upload staging]).
void DataFeed::upload(const Tensor& tokens, const Tensor& targets) {
  ZT_CHECK(tokens.numel() == B_ * T_ && targets.numel() == B_ * T_ && tokens.dtype == DType::i32 &&
               targets.dtype == DType::i32,
           "tokens and targets must be (B, T) = (", B_, ", ", T_, ") i32");
  staging_->upload(tokens.data, 0, tokens.bytes());
  staging_->upload(targets.data, tokens.bytes(), targets.bytes());
}

}  // namespace zt
