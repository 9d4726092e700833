// Loss masks with example starts (version 2, [Note: loss mask file]) and the
// rows that pack whole examples ([Note: packed rows] in io/packing.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/loss_mask.hpp"
#include "io/packing.hpp"
#include "io/token_dataset.hpp"
#include "io/token_shard.hpp"
#include "temp_dir.hpp"

using zt::PackedRows;
using zt::TokenDataset;
using zt::test::TempDir;

namespace {

template <typename F>
void expect_user_error(F&& f, const std::vector<std::string>& fragments) {
  try {
    f();
    ADD_FAILURE() << "no UserError";
  } catch (const zt::UserError& e) {
    for (const auto& s : fragments) EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what();
  }
}

// A shard of examples of the given lengths: tokens first + 0, 1, ...; the
// first token of each example does not count, the others do, except every
// token whose value is a multiple of 5.
void write_examples(const TempDir& dir, const std::string& name, const std::vector<int64_t>& lens, uint16_t first,
                    bool with_starts = true) {
  std::vector<uint16_t> tokens;
  std::vector<uint8_t> mask;
  std::vector<int64_t> starts;
  for (int64_t len : lens) {
    starts.push_back(static_cast<int64_t>(tokens.size()));
    for (int64_t i = 0; i < len; ++i) {
      const auto t = static_cast<uint16_t>(first + tokens.size());
      tokens.push_back(t);
      mask.push_back(i > 0 && t % 5 != 0 ? 1 : 0);
    }
  }
  zt::write_token_shard(dir / (name + ".bin"), tokens);
  if (with_starts)
    zt::write_loss_mask(dir / (name + ".mask"), mask, starts);
  else
    zt::write_loss_mask(dir / (name + ".mask"), mask);
}

TEST(LossMaskV2, ExampleStartsRoundTripAndVersion1StillReads) {
  TempDir dir;
  const std::vector<uint8_t> mask = {0, 1, 1, 0, 1, 0, 1};
  zt::write_loss_mask(dir / "a.mask", mask, {0, 3, 5});
  const zt::LossMaskFile f = zt::read_loss_mask_file(dir / "a.mask");
  EXPECT_TRUE(f.has_examples);
  EXPECT_EQ(f.counts, mask);
  EXPECT_EQ(f.example_starts, (std::vector<int64_t>{0, 3, 5}));
  EXPECT_EQ(zt::read_loss_mask(dir / "a.mask"), mask);  // the loss bits only
  const std::string bytes = zt::test::read_bytes(dir / "a.mask");
  int32_t version = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  EXPECT_EQ(version, 2);
  EXPECT_EQ(bytes.substr(24), std::string("\x02\x01\x01\x02\x01\x02\x01", 7));  // bit 1: an example starts
  // Version 1 (the loss bit only) reads as before, without examples.
  zt::write_loss_mask(dir / "v1.mask", mask);
  const zt::LossMaskFile v1 = zt::read_loss_mask_file(dir / "v1.mask");
  EXPECT_FALSE(v1.has_examples);
  EXPECT_EQ(v1.counts, mask);
  // Bad version-2 files and arguments.
  std::string no_start = bytes;
  no_start[24] = 0;
  zt::test::write_bytes(dir / "nostart.mask", no_start);
  expect_user_error([&] { zt::read_loss_mask(dir / "nostart.mask"); }, {"nostart.mask", "entry 0 does not start"});
  std::string bad = bytes;
  bad[26] = 5;
  zt::test::write_bytes(dir / "bad.mask", bad);
  expect_user_error([&] { zt::read_loss_mask(dir / "bad.mask"); }, {"bad.mask", "entry 2 is 5"});
  std::string v1_with_bit = zt::test::read_bytes(dir / "v1.mask");
  v1_with_bit[24] = 2;  // bit 1 means nothing in version 1
  zt::test::write_bytes(dir / "v1bad.mask", v1_with_bit);
  expect_user_error([&] { zt::read_loss_mask(dir / "v1bad.mask"); }, {"entry 0 is 2"});
  expect_user_error([&] { zt::write_loss_mask(dir / "x.mask", mask, {1, 3}); }, {"start at token 0"});
  expect_user_error([&] { zt::write_loss_mask(dir / "x.mask", mask, {0, 3, 3}); }, {"not increasing"});
}

TEST(LossMaskV2, DatasetExampleStartsAcrossShards) {
  TempDir dir;
  write_examples(dir, "a", {3, 2}, 10);
  write_examples(dir, "b", {4}, 30);
  write_examples(dir, "c", {2, 2}, 50, /*with_starts=*/false);
  const TokenDataset ab = TokenDataset::open({dir / "a.bin", dir / "b.bin"});
  EXPECT_TRUE(ab.has_examples());
  EXPECT_EQ(ab.example_starts(), (std::vector<int64_t>{0, 3, 5}));
  // A version-1 shard has no boundaries: the dataset has none to pack.
  const TokenDataset abc = TokenDataset::open({dir / "a.bin", dir / "c.bin"});
  EXPECT_TRUE(abc.has_mask());
  EXPECT_FALSE(abc.has_examples());
  EXPECT_TRUE(abc.example_starts().empty());
  expect_user_error([&] { PackedRows(abc, 4, 1, true, "data.packing: data.train"); },
                    {"data.packing: data.train", "c.bin", "no example boundaries"});
  // An empty split (zdata finetune --val-fraction of too few examples).
  write_examples(dir, "e", {}, 0);
  const TokenDataset e = TokenDataset::open({dir / "e.bin"});
  EXPECT_TRUE(e.has_examples());
  expect_user_error([&] { PackedRows(e, 4, 1, false, "data.packing: data.val"); },
                    {"data.packing: data.val", "e.bin", "holds no examples"});
}

// T = 6 (rows of 7 tokens), examples of 3, 2, 8, 1 tokens in shard a and 4, 3
// in shard b, in corpus order: next-fit gives rows {3, 2} + 1 padding, {8
// truncated to 7}, {1, 4} + 1 padding, {3} + 3 padding.
TEST(PackedRows, CorpusOrderLayoutTargetsAndDocuments) {
  TempDir dir;
  write_examples(dir, "a", {3, 2, 8, 1}, 10);
  write_examples(dir, "b", {4, 3}, 40);
  const TokenDataset ds = TokenDataset::open({dir / "a.bin", dir / "b.bin"});
  const PackedRows rows(ds, 6, 7, /*shuffle=*/false, "data.val");
  ASSERT_EQ(rows.num_rows(), 4);
  EXPECT_EQ(rows.num_examples(), 6);
  EXPECT_EQ(rows.truncated(), 1);
  EXPECT_EQ(rows.padding(), 1 + 0 + 1 + 3);
  std::vector<int32_t> x(6), y(6), d(6);
  using V = std::vector<int32_t>;
  // Row 0: tokens 10 11 12 | 13 14 | pad. 15 (a multiple of 5) and the
  // example ends predict nothing.
  rows.fill(0, x.data(), y.data(), d.data());
  EXPECT_EQ(x, (V{10, 11, 12, 13, 14, 0}));
  EXPECT_EQ(y, (V{11, 12, -1, 14, -1, -1}));
  EXPECT_EQ(d, (V{0, 0, 0, 3, 3, 5}));
  EXPECT_EQ(rows.counted_targets(0), 3);
  // Row 1: the 8-token example 15..22 truncated to 15..21; its 7th token is
  // the last target, and 20 does not count.
  rows.fill(1, x.data(), y.data(), d.data());
  EXPECT_EQ(x, (V{15, 16, 17, 18, 19, 20}));
  EXPECT_EQ(y, (V{16, 17, 18, 19, -1, 21}));
  EXPECT_EQ(d, (V{0, 0, 0, 0, 0, 0}));
  // Row 2: a one-token example (23), then 40..43, then padding.
  rows.fill(2, x.data(), y.data(), d.data());
  EXPECT_EQ(x, (V{23, 40, 41, 42, 43, 0}));
  EXPECT_EQ(y, (V{-1, 41, 42, 43, -1, -1}));
  EXPECT_EQ(d, (V{0, 1, 1, 1, 1, 5}));
  rows.fill(3, x.data(), y.data(), d.data());
  EXPECT_EQ(x, (V{44, 45, 46, 0, 0, 0}));
  EXPECT_EQ(y, (V{-1, 46, -1, -1, -1, -1}));
  EXPECT_EQ(d, (V{0, 0, 0, 3, 3, 3}));
  // Validation rows in order, wrapping around.
  EXPECT_EQ(rows.val_row(0, 1, 3), 1);
  EXPECT_EQ(rows.val_row(1, 1, 3), 0);
}

// Seeded order: the same examples, whole (the counted targets do not depend
// on the order), a fresh bijection of the rows each epoch, and a pure
// function of (seed, step, index): any layout reads the same rows.
TEST(PackedRows, SeededOrderKeepsEveryExampleWhole) {
  TempDir dir;
  std::vector<int64_t> lens;
  for (int i = 0; i < 40; ++i) lens.push_back(1 + (i * 7) % 9);
  write_examples(dir, "a", lens, 100);
  const TokenDataset ds = TokenDataset::open({dir / "a.bin"});
  const PackedRows plain(ds, 12, 5, false, "data.val");
  const PackedRows a(ds, 12, 5, true, "data.train"), b(ds, 12, 5, true, "data.train"),
      other(ds, 12, 6, true, "data.train");
  EXPECT_EQ(a.truncated(), 0);
  int64_t sum_plain = 0, sum_a = 0;
  for (int64_t r = 0; r < plain.num_rows(); ++r) sum_plain += plain.counted_targets(r);
  for (int64_t r = 0; r < a.num_rows(); ++r) sum_a += a.counted_targets(r);
  EXPECT_EQ(sum_a, sum_plain);
  // Rows describe documents, and every example's tokens appear once.
  std::multiset<int32_t> seen;
  std::vector<int32_t> x(12), y(12), d(12), x2(12), y2(12), d2(12);
  bool order_differs = false;
  for (int64_t r = 0; r < a.num_rows(); ++r) {
    a.fill(r, x.data(), y.data(), d.data());
    for (int64_t t = 0; t < 12; ++t) {
      if (t == 0 || d[static_cast<size_t>(t)] != d[static_cast<size_t>(t) - 1]) {
        EXPECT_EQ(d[static_cast<size_t>(t)], t);
      } else {
        EXPECT_EQ(d[static_cast<size_t>(t)], d[static_cast<size_t>(t) - 1]);
      }
      if (x[static_cast<size_t>(t)] != 0) seen.insert(x[static_cast<size_t>(t)]);
    }
    b.fill(r, x2.data(), y2.data(), d2.data());
    EXPECT_EQ(x, x2);
    EXPECT_EQ(y, y2);
    EXPECT_EQ(d, d2);
    if (r < other.num_rows()) {
      other.fill(r, x2.data(), y2.data(), d2.data());
      order_differs = order_differs || x != x2;
    }
  }
  EXPECT_TRUE(order_differs) << "another seed packs another order";
  // No token twice; the only ones missing as inputs are last tokens of
  // examples ending at the row's position T (targets only): one a row at most.
  EXPECT_EQ(std::set<int32_t>(seen.begin(), seen.end()).size(), seen.size());
  EXPECT_LE(static_cast<int64_t>(seen.size()), ds.size());
  EXPECT_GE(static_cast<int64_t>(seen.size()), ds.size() - a.num_rows());
  // Each epoch reads every row once; global batches of 3 or of R rows see
  // the same sample sequence.
  const int64_t R = a.num_rows();
  std::set<int64_t> epoch0, epoch1;
  for (int64_t i = 0; i < R; ++i) {
    epoch0.insert(a.train_row(0, i, R));
    epoch1.insert(a.train_row(1, i, R));
  }
  EXPECT_EQ(static_cast<int64_t>(epoch0.size()), R);
  EXPECT_EQ(static_cast<int64_t>(epoch1.size()), R);
  for (int64_t g = 0; g < 2 * R; ++g) EXPECT_EQ(a.train_row(g / 3, g % 3, 3), a.train_row(g / R, g % R, R));
}

}  // namespace
