// resolve_batch: DeepSpeed's rules for the batch triplet over several
// data-parallel sizes, with "auto" and absent members derived.
#include "config_test_util.hpp"

namespace zt::test {
namespace {

struct Triplet {
  int64_t train, micro, accum;
};

Triplet resolve(const std::string& text, int dp) {
  Config cfg = parse(text);
  resolve_batch(cfg, dp);
  return {cfg.batch.train_batch_size, cfg.batch.micro_batch, cfg.batch.grad_accum};
}

void expect_triplet(const std::string& text, int dp, Triplet want) {
  const Triplet got = resolve(text, dp);
  EXPECT_EQ(got.train, want.train) << text << " dp=" << dp;
  EXPECT_EQ(got.micro, want.micro) << text << " dp=" << dp;
  EXPECT_EQ(got.accum, want.accum) << text << " dp=" << dp;
}

TEST(ConfigBatch, NothingGivenUsesDefaultMicroBatch) {
  for (int dp : {1, 2, 3, 8}) expect_triplet("{}", dp, {kDefaultMicroBatch * dp, kDefaultMicroBatch, 1});
  // "auto" is the same as absent.
  expect_triplet(R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                     "gradient_accumulation_steps": "AUTO"})",
                 2, {8, 4, 1});
}

TEST(ConfigBatch, OneGiven) {
  expect_triplet(R"({"train_batch_size": 32})", 4, {32, 8, 1});
  expect_triplet(R"({"train_batch_size": 32})", 1, {32, 32, 1});
  expect_triplet(R"({"train_micro_batch_size_per_gpu": 2})", 8, {16, 2, 1});
  expect_triplet(R"({"gradient_accumulation_steps": 4})", 2, {32, 4, 4});
}

TEST(ConfigBatch, TwoGiven) {
  expect_triplet(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4})", 2, {64, 4, 8});
  expect_triplet(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": "auto",
                     "gradient_accumulation_steps": 4})",
                 4, {64, 4, 4});
  expect_triplet(R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 8})", 3, {48, 2, 8});
}

TEST(ConfigBatch, AllThreeConsistent) {
  expect_triplet(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
                     "gradient_accumulation_steps": 2})",
                 4, {32, 4, 2});
}

TEST(ConfigBatch, InvariantOverDataParallelSizes) {
  const std::vector<std::string> configs = {
      "{}",
      R"({"train_batch_size": 48})",
      R"({"train_micro_batch_size_per_gpu": 3})",
      R"({"gradient_accumulation_steps": 2})",
      R"({"train_batch_size": 48, "train_micro_batch_size_per_gpu": 2})",
      R"({"train_batch_size": 48, "gradient_accumulation_steps": 2})",
      R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 3})",
  };
  for (const std::string& text : configs) {
    for (int dp : {1, 2, 3, 4, 6, 8}) {
      Config cfg = parse(text);
      const BatchConfig given = cfg.batch;
      resolve_batch(cfg, dp);
      const BatchConfig& b = cfg.batch;
      EXPECT_EQ(b.train_batch_size, b.micro_batch * b.grad_accum * dp) << text << " dp=" << dp;
      // What the config gave is kept.
      if (!given.train_auto) {
        EXPECT_EQ(b.train_batch_size, given.train_batch_size);
      }
      if (!given.micro_auto) {
        EXPECT_EQ(b.micro_batch, given.micro_batch);
      }
      if (!given.accum_auto) {
        EXPECT_EQ(b.grad_accum, given.grad_accum);
      }
    }
  }
}

TEST(ConfigBatch, ResolvingAgainStartsFromWhatWasGiven) {
  Config cfg = parse(R"({"train_batch_size": 32})");
  resolve_batch(cfg, 2);
  EXPECT_EQ(cfg.batch.micro_batch, 16);
  resolve_batch(cfg, 4);  // e.g. resumed on another data-parallel size
  EXPECT_EQ(cfg.batch.micro_batch, 8);
  EXPECT_EQ(cfg.batch.train_batch_size, 32);
}

TEST(ConfigBatch, IntegralFloatsAreIntegers) {
  expect_triplet(R"({"train_batch_size": 3.2e1, "gradient_accumulation_steps": 2.0})", 2, {32, 8, 2});
}

}  // namespace
}  // namespace zt::test
