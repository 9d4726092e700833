#include "train/data_feed.hpp"

#include "core/log.hpp"
#include "io/synthetic.hpp"

namespace zt {

DataFeed::DataFeed(const Config& cfg, int64_t B, int64_t T, int64_t global_batch, int dp_rank, int dp_size,
                   Device& dev)
    : B_(B), T_(T), global_batch_(global_batch), dp_rank_(dp_rank), dp_size_(dp_size), dev_(dev),
      host_tokens_(static_cast<size_t>(B * T)), host_targets_(static_cast<size_t>(B * T)) {
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

void DataFeed::load_train(int64_t step, int mb, const Tensor& tokens, const Tensor& targets) {
  for (int64_t b = 0; b < B_; ++b)
    sampler_->fill(step, global_index(mb, b), global_batch_, host_tokens_.data() + b * T_,
                   host_targets_.data() + b * T_, *train_);
  upload(tokens, targets);
}

void DataFeed::load_val(int64_t batch, int mb, const Tensor& tokens, const Tensor& targets) {
  ZT_CHECK(val_sampler_ != nullptr, "validation batch asked of a run without validation data");
  for (int64_t b = 0; b < B_; ++b)
    val_sampler_->fill(batch, global_index(mb, b), global_batch_, host_tokens_.data() + b * T_,
                       host_targets_.data() + b * T_, *val_);
  upload(tokens, targets);
}

void DataFeed::upload(const Tensor& tokens, const Tensor& targets) {
  ZT_CHECK(tokens.numel() == B_ * T_ && targets.numel() == B_ * T_, "tokens and targets must be (B, T) = (", B_,
           ", ", T_, ")");
  dev_.copy_from_host(tokens.data, host_tokens_.data(), tokens.bytes());
  dev_.copy_from_host(targets.data, host_targets_.data(), targets.bytes());
}

}  // namespace zt
