// The training and validation samplers ([Note: sample order] in sampler.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "io/sampler.hpp"
#include "io/token_dataset.hpp"

using zt::FeistelPermutation;
using zt::Sampler;

TEST(FeistelPermutation, IsABijectionForManySizes) {
  for (int64_t n : {1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 63, 64, 100, 127, 128, 129, 1000, 4097, 65537}) {
    for (uint64_t key : {0ull, 1ull, 0xdeadbeefull}) {
      const FeistelPermutation perm(n, key);
      std::vector<char> seen(static_cast<size_t>(n), 0);
      for (int64_t x = 0; x < n; ++x) {
        const int64_t y = perm(x);
        ASSERT_GE(y, 0);
        ASSERT_LT(y, n);
        ASSERT_FALSE(seen[static_cast<size_t>(y)]) << "n=" << n << " key=" << key << " y=" << y;
        seen[static_cast<size_t>(y)] = 1;
      }
    }
  }
}

TEST(FeistelPermutation, ShufflesAndDependsOnTheKey) {
  const int64_t n = 1000;
  const FeistelPermutation a(n, 1), b(n, 2);
  int fixed_points = 0, same = 0;
  for (int64_t x = 0; x < n; ++x) {
    fixed_points += a(x) == x;
    same += a(x) == b(x);
  }
  // A random permutation has about 1 fixed point and 1 agreement.
  EXPECT_LT(fixed_points, 10);
  EXPECT_LT(same, 10);
}

TEST(Sampler, WindowCount) {
  // W = (N - 1) / T; the last window ends at W*T + 1 <= N.
  EXPECT_EQ(Sampler(65, 64, 0).num_windows(), 1);
  EXPECT_EQ(Sampler(128, 64, 0).num_windows(), 1);
  EXPECT_EQ(Sampler(129, 64, 0).num_windows(), 2);
  EXPECT_EQ(Sampler(1000, 7, 0).num_windows(), 142);
  EXPECT_THROW(Sampler(64, 64, 0), zt::UserError);
  EXPECT_THROW(Sampler(100, 0, 0), zt::UserError);
}

TEST(Sampler, EveryWindowOncePerEpoch) {
  for (int64_t windows : {1, 2, 3, 5, 16, 31, 100, 257}) {
    const int64_t seq = 4;
    const Sampler s(windows * seq + 1 + 2, seq, 42);  // 2 spare tokens: unused
    ASSERT_EQ(s.num_windows(), windows);
    for (int64_t global_batch : {1, 3, 8}) {
      // Walk three epochs sample by sample; each epoch must cover every window once.
      std::vector<std::set<int64_t>> epochs(3);
      for (int64_t g = 0; g < 3 * windows; ++g) {
        const int64_t step = g / global_batch, idx = g % global_batch;
        const int64_t e = s.epoch(step, idx, global_batch);
        ASSERT_EQ(e, g / windows);
        const int64_t start = s.window_start(step, idx, global_batch);
        ASSERT_EQ(start % seq, 0);
        ASSERT_LE(start + seq + 1, s.num_tokens());
        EXPECT_TRUE(epochs[static_cast<size_t>(e)].insert(start / seq).second);
      }
      for (const auto& ep : epochs) EXPECT_EQ(static_cast<int64_t>(ep.size()), windows);
    }
  }
}

TEST(Sampler, EpochsHaveDifferentOrders) {
  const Sampler s(64 * 100 + 1, 64, 7);
  std::vector<int64_t> e0, e1;
  for (int64_t i = 0; i < 100; ++i) {
    e0.push_back(s.window(0, i, 100));
    e1.push_back(s.window(1, i, 100));
  }
  EXPECT_NE(e0, e1);
}

TEST(Sampler, DeterministicAndSeedDependent) {
  const Sampler a(100000, 64, 3), b(100000, 64, 3), c(100000, 64, 4);
  int differ = 0;
  for (int64_t step = 0; step < 50; ++step) {
    for (int64_t i = 0; i < 16; ++i) {
      EXPECT_EQ(a.window_start(step, i, 16), b.window_start(step, i, 16));
      differ += a.window_start(step, i, 16) != c.window_start(step, i, 16);
    }
  }
  EXPECT_GT(differ, 700);
  // Pinned values: a change here changes the data order of every run and
  // makes old checkpoints resume on different samples.
  const std::vector<int64_t> pinned = {99136, 71872, 62592, 18368, 84096, 17728,
                                       75392, 96256, 76672, 10816, 83904, 33472};
  std::vector<int64_t> got;
  for (int64_t step : {0, 1, 1000})
    for (int64_t i = 0; i < 4; ++i) got.push_back(a.window_start(step, i, 16));
  EXPECT_EQ(got, pinned);
}

TEST(Sampler, LayoutIndependence) {
  // The same global batch split over ranks x micro-batches in several ways:
  // sample index i = (rank * micro_batches + micro) * micro_batch_size + j
  // (any fixed split rule works; this is the trainer's). The multiset of
  // windows each step is the same whatever the split, because window_start
  // depends only on (step, i, global_batch).
  const Sampler s(50000, 16, 11);
  const int64_t global_batch = 24;
  for (int64_t step : {0, 1, 7, 130, 5000}) {
    std::vector<int64_t> reference;
    for (int64_t i = 0; i < global_batch; ++i) reference.push_back(s.window_start(step, i, global_batch));
    for (auto [ranks, micro_batches] : {std::pair{1, 24}, {2, 3}, {3, 8}, {4, 2}, {24, 1}, {6, 4}}) {
      const int64_t mbs = global_batch / (ranks * micro_batches);
      std::vector<int64_t> got;
      for (int64_t r = 0; r < ranks; ++r)
        for (int64_t m = 0; m < micro_batches; ++m)
          for (int64_t j = 0; j < mbs; ++j)
            got.push_back(s.window_start(step, (r * micro_batches + m) * mbs + j, global_batch));
      EXPECT_EQ(got, reference) << ranks << " ranks x " << micro_batches << " micro-batches";
    }
  }
}

TEST(Sampler, EpochRollover) {
  // 10 windows, global batch 4: step 2 holds samples 8..11 = epoch 0 windows
  // 8, 9 then epoch 1 windows 0, 1 of its own permutation.
  const Sampler s(10 * 8 + 1, 8, 5);
  ASSERT_EQ(s.num_windows(), 10);
  EXPECT_EQ(s.epoch(2, 1, 4), 0);
  EXPECT_EQ(s.epoch(2, 2, 4), 1);
  EXPECT_EQ(s.epoch(4, 3, 4), 1);
  EXPECT_EQ(s.epoch(5, 0, 4), 2);
  const FeistelPermutation p0(10, zt::rng_key(5, 0)), p1(10, zt::rng_key(5, 1));
  EXPECT_EQ(s.window(2, 1, 4), p0(9));
  EXPECT_EQ(s.window(2, 2, 4), p1(0));
  EXPECT_EQ(s.window(2, 3, 4), p1(1));
}

TEST(Sampler, FillCopiesShiftedInputsAndTargets) {
  std::vector<uint16_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i);
  const auto data = zt::TokenDataset::from_tokens(tokens);
  const Sampler s(1000, 32, 9);
  std::vector<int32_t> in(32), tgt(32);
  for (int64_t i = 0; i < 8; ++i) {
    s.fill(3, i, 8, in.data(), tgt.data(), data);
    const int64_t start = s.window_start(3, i, 8);
    for (int t = 0; t < 32; ++t) {
      EXPECT_EQ(in[t], start + t);
      EXPECT_EQ(tgt[t], start + t + 1);
    }
  }
  const auto other = zt::TokenDataset::from_tokens(std::vector<uint16_t>(999));
  EXPECT_THROW(s.fill(0, 0, 1, in.data(), tgt.data(), other), zt::Error);
  EXPECT_THROW(s.window_start(0, 8, 8), zt::Error);
  EXPECT_THROW(s.window_start(-1, 0, 8), zt::Error);
}

TEST(ValidationSampler, WindowsInOrderEveryTime) {
  const zt::ValidationSampler v(10 * 16 + 5, 16);
  ASSERT_EQ(v.num_windows(), 10);
  EXPECT_EQ(v.max_batches(4), 2);
  EXPECT_EQ(v.max_batches(20), 1);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(v.window_start(b, i, 4), (b * 4 + i) * 16);
  EXPECT_EQ(v.window_start(2, 2, 4), 0);  // wraps around
  std::vector<uint16_t> tokens(165);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i);
  const auto data = zt::TokenDataset::from_tokens(tokens);
  std::vector<int32_t> in(16), tgt(16);
  v.fill(1, 3, 4, in.data(), tgt.data(), data);
  EXPECT_EQ(in[0], 112);
  EXPECT_EQ(tgt[15], 128);
  EXPECT_THROW(zt::ValidationSampler(16, 16), zt::UserError);
}

TEST(SamplerState, JsonRoundTrip) {
  const zt::SamplerState st = Sampler(1000, 8, 0xfedcba9876543210ull).state(4242);
  const nlohmann::json j = st;
  EXPECT_EQ(j.at("seed").get<uint64_t>(), 0xfedcba9876543210ull);
  EXPECT_EQ(j.at("step").get<int64_t>(), 4242);
  const auto back = nlohmann::json::parse(j.dump()).get<zt::SamplerState>();
  EXPECT_EQ(back, st);
  const zt::SamplerState signed_seed = nlohmann::json({{"seed", int64_t{5}}, {"step", int64_t{3}}}).get<zt::SamplerState>();
  EXPECT_EQ(signed_seed, (zt::SamplerState{5, 3}));
  EXPECT_THROW(nlohmann::json({{"seed", 1}}).get<zt::SamplerState>(), zt::UserError);
  EXPECT_THROW(nlohmann::json({{"seed", -1}, {"step", 2}}).get<zt::SamplerState>(), zt::UserError);
  EXPECT_THROW(nlohmann::json({{"seed", 1}, {"step", -2}}).get<zt::SamplerState>(), zt::UserError);
  EXPECT_THROW(nlohmann::json({{"seed", "x"}, {"step", 2}}).get<zt::SamplerState>(), zt::UserError);
  EXPECT_THROW(nlohmann::json(3).get<zt::SamplerState>(), zt::UserError);
}
