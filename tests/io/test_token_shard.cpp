// Token shards and datasets: round trip, every malformed-file class, vocab
// checks, windows across shard boundaries.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/loss_mask.hpp"
#include "io/token_dataset.hpp"
#include "io/token_shard.hpp"
#include "temp_dir.hpp"

using zt::TokenDataset;
using zt::TokenShard;
using zt::test::TempDir;

namespace {

std::vector<uint16_t> ramp(int64_t n, int64_t offset = 0) {
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<uint16_t>((i + offset) * 7 % 1000);
  return v;
}

// Raw shard bytes with an arbitrary header, for the malformed cases.
std::string raw_shard(int32_t magic, int32_t version, int32_t count, int64_t token_bytes) {
  std::string bytes(static_cast<size_t>(zt::kTokenShardHeaderBytes + token_bytes), '\0');
  const int32_t head[3] = {magic, version, count};
  std::memcpy(bytes.data(), head, sizeof(head));
  return bytes;
}

// Expects a UserError whose message contains every fragment.
template <typename F>
void expect_user_error(F&& f, const std::vector<std::string>& fragments) {
  try {
    f();
    ADD_FAILURE() << "no UserError thrown";
  } catch (const zt::UserError& e) {
    const std::string msg = e.what();
    for (const auto& frag : fragments) EXPECT_NE(msg.find(frag), std::string::npos) << "'" << frag << "' not in: " << msg;
  }
}

}  // namespace

TEST(TokenShard, WriteThenReadRoundTrips) {
  TempDir dir;
  const auto tokens = ramp(12345);
  zt::write_token_shard(dir / "a.bin", tokens);
  EXPECT_FALSE(std::filesystem::exists(dir / "a.bin.tmp"));
  EXPECT_EQ(std::filesystem::file_size(dir / "a.bin"), 1024u + 2u * tokens.size());
  const TokenShard shard(dir / "a.bin");
  ASSERT_EQ(shard.size(), 12345);
  EXPECT_EQ(std::vector<uint16_t>(shard.tokens(), shard.tokens() + shard.size()), tokens);
  EXPECT_EQ(shard.max_token(), 999);
  // The header is llm.c's: magic, version, count, zeros.
  const std::string raw = zt::test::read_bytes(dir / "a.bin");
  int32_t head[256];
  std::memcpy(head, raw.data(), sizeof(head));
  EXPECT_EQ(head[0], 20240520);
  EXPECT_EQ(head[1], 1);
  EXPECT_EQ(head[2], 12345);
  for (int i = 3; i < 256; ++i) EXPECT_EQ(head[i], 0);
}

TEST(TokenShard, EmptyShardAndMoves) {
  TempDir dir;
  zt::write_token_shard(dir / "e.bin", {});
  TokenShard a(dir / "e.bin");
  EXPECT_EQ(a.size(), 0);
  EXPECT_EQ(a.max_token(), -1);
  zt::write_token_shard(dir / "b.bin", {5, 6, 7});
  TokenShard b(dir / "b.bin");
  a = std::move(b);
  EXPECT_EQ(a.size(), 3);
  EXPECT_EQ(a.tokens()[2], 7);
  TokenShard c(std::move(a));
  EXPECT_EQ(c.tokens()[0], 5);
}

TEST(TokenShard, MissingFileNamesIt) {
  TempDir dir;
  expect_user_error([&] { TokenShard s(dir / "nope.bin"); }, {dir / "nope.bin", "cannot open"});
}

TEST(TokenShard, ShortHeaderNamesFileAndSizes) {
  TempDir dir;
  zt::test::write_bytes(dir / "short.bin", std::string(100, '\0'));
  expect_user_error([&] { TokenShard s(dir / "short.bin"); }, {dir / "short.bin", "100 bytes", "1024-byte header"});
}

TEST(TokenShard, WrongMagicNamesExpectedValue) {
  TempDir dir;
  zt::test::write_bytes(dir / "magic.bin", raw_shard(12345, 1, 4, 8));
  expect_user_error([&] { TokenShard s(dir / "magic.bin"); }, {dir / "magic.bin", "magic", "12345", "20240520"});
}

TEST(TokenShard, WrongVersionNamesExpectedValue) {
  TempDir dir;
  zt::test::write_bytes(dir / "ver.bin", raw_shard(20240520, 2, 4, 8));
  expect_user_error([&] { TokenShard s(dir / "ver.bin"); }, {dir / "ver.bin", "version 2", "expected 1"});
}

TEST(TokenShard, Uint32ShardsRoundTrip) {
  // Llama 3's vocabulary: ids above 65535 need llm.c's uint32 format.
  TempDir dir;
  const std::vector<uint32_t> t = {0, 65535, 65536, 128255, 7};
  zt::write_token_shard(dir / "w.bin", t, 128256);
  EXPECT_EQ(zt::test::read_bytes(dir / "w.bin").size(), 1024u + 4 * t.size());
  const std::string bytes = zt::test::read_bytes(dir / "w.bin");
  int32_t head[3];
  std::memcpy(head, bytes.data(), sizeof(head));
  EXPECT_EQ(head[0], 20240801);  // llm.c's "llama-3" header
  EXPECT_EQ(head[1], 7);
  EXPECT_EQ(head[2], 5);
  const TokenShard s(dir / "w.bin");
  EXPECT_EQ(s.token_bytes(), 4);
  EXPECT_EQ(std::vector<uint32_t>(s.tokens32(), s.tokens32() + s.size()), t);
  EXPECT_EQ(s.max_token(), 128255);
  EXPECT_THROW(s.tokens(), zt::Error);  // no uint16 view of uint32 ids
  expect_user_error([&] { s.validate_vocab(100000); }, {"token 128255", "position 3"});
  // A vocabulary that fits 16 bits keeps the small format.
  zt::write_token_shard(dir / "n.bin", std::vector<uint32_t>{1, 65535}, 65536);
  const TokenShard n(dir / "n.bin");
  EXPECT_EQ(n.token_bytes(), 2);
  EXPECT_EQ(n.tokens()[1], 65535);
  expect_user_error([&] { zt::write_token_shard(dir / "x.bin", std::vector<uint32_t>{1, 70000}, 65536); },
                    {dir / "x.bin", "token 70000", "position 1", "65536"});
  zt::test::write_bytes(dir / "v.bin", raw_shard(20240801, 1, 4, 16));
  expect_user_error([&] { TokenShard x(dir / "v.bin"); }, {dir / "v.bin", "version 1", "expected 7"});
  zt::test::write_bytes(dir / "short.bin", raw_shard(20240801, 7, 4, 8));  // 4 tokens need 16 bytes
  expect_user_error([&] { TokenShard x(dir / "short.bin"); }, {"4 tokens of 4 bytes", "truncated"});
}

TEST(TokenShard, TruncatedNamesCountAndSizes) {
  TempDir dir;
  zt::test::write_bytes(dir / "trunc.bin", raw_shard(20240520, 1, 100, 150));
  expect_user_error([&] { TokenShard s(dir / "trunc.bin"); },
                    {dir / "trunc.bin", "100 tokens", "1224 bytes", "1174", "truncated"});
  zt::test::write_bytes(dir / "long.bin", raw_shard(20240520, 1, 10, 30));
  expect_user_error([&] { TokenShard s(dir / "long.bin"); }, {dir / "long.bin", "trailing bytes"});
  zt::test::write_bytes(dir / "neg.bin", raw_shard(20240520, 1, -3, 0));
  expect_user_error([&] { TokenShard s(dir / "neg.bin"); }, {dir / "neg.bin", "negative"});
}

TEST(TokenShard, DirectoryIsNotAShard) {
  TempDir dir;
  expect_user_error([&] { TokenShard s(dir.path()); }, {dir.path(), "not a regular file"});
}

TEST(TokenShard, WriteToMissingDirectoryIsUserError) {
  TempDir dir;
  expect_user_error([&] { zt::write_token_shard(dir / "no/such/dir.bin", {1}); }, {dir / "no/such/dir.bin"});
}

TEST(TokenShard, VocabValidationNamesFirstOffender) {
  TempDir dir;
  std::vector<uint16_t> t(1000, 3);
  t[417] = 300;
  t[900] = 500;
  zt::write_token_shard(dir / "v.bin", t);
  const TokenShard shard(dir / "v.bin");
  EXPECT_NO_THROW(shard.validate_vocab(501));
  expect_user_error([&] { shard.validate_vocab(256); }, {dir / "v.bin", "token 300", "position 417", "vocab_size 256"});
  expect_user_error([&] { shard.validate_vocab(400); }, {"token 500", "position 900"});
}

TEST(TokenDataset, WindowsSpanShardBoundaries) {
  TempDir dir;
  const auto a = ramp(100), b = ramp(0), c = ramp(57, 100), d = ramp(200, 157);
  zt::write_token_shard(dir / "a.bin", a);
  zt::write_token_shard(dir / "b.bin", b);  // empty shards are skipped
  zt::write_token_shard(dir / "c.bin", c);
  zt::write_token_shard(dir / "d.bin", d);
  const TokenDataset ds = TokenDataset::open_list(dir / "a.bin," + dir / "b.bin, " + dir / "c.bin," + dir / "d.bin");
  ASSERT_EQ(ds.size(), 357);
  const auto all = ramp(357);
  for (int64_t start : {0, 50, 99, 100, 140, 156, 157, 300}) {
    for (int64_t len : {0, 1, 10, 57, 58}) {
      if (start + len > ds.size()) continue;
      std::vector<int32_t> out(static_cast<size_t>(len) + 1, -1);
      ds.copy_window(start, len, out.data());
      for (int64_t i = 0; i < len; ++i) ASSERT_EQ(out[static_cast<size_t>(i)], all[static_cast<size_t>(start + i)]);
      EXPECT_EQ(out.back(), -1);  // nothing written past len
    }
  }
  std::vector<int32_t> whole(357);
  ds.copy_window(0, 357, whole.data());
  EXPECT_EQ(whole[356], all[356]);
  EXPECT_THROW(ds.copy_window(300, 58, whole.data()), zt::Error);
  EXPECT_EQ(ds.describe(), dir / "a.bin," + dir / "b.bin," + dir / "c.bin," + dir / "d.bin");
}

TEST(TokenDataset, MixesUint16AndUint32Shards) {
  TempDir dir;
  zt::write_token_shard(dir / "a.bin", std::vector<uint16_t>{1, 2, 3});
  zt::write_token_shard(dir / "b.bin", std::vector<uint32_t>{100000, 128255, 4}, 128256);
  const TokenDataset ds = TokenDataset::open({dir / "a.bin", dir / "b.bin"});
  EXPECT_EQ(ds.max_token(), 128255);
  std::vector<int32_t> out(4);
  ds.copy_window(1, 4, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{2, 3, 100000, 128255}));
  EXPECT_NO_THROW(ds.validate_vocab(128256));
  expect_user_error([&] { ds.validate_vocab(65536); }, {dir / "b.bin", "token 100000", "position 0"});
}

TEST(TokenDataset, VocabValidationNamesTheShard) {
  TempDir dir;
  zt::write_token_shard(dir / "ok.bin", {1, 2, 3});
  zt::write_token_shard(dir / "bad.bin", {1, 2, 70, 80});
  const TokenDataset ds = TokenDataset::open({dir / "ok.bin", dir / "bad.bin"});
  EXPECT_EQ(ds.max_token(), 80);
  EXPECT_NO_THROW(ds.validate_vocab(81));
  expect_user_error([&] { ds.validate_vocab(64); }, {dir / "bad.bin", "token 70", "position 2"});
}

TEST(TokenDataset, BadFileInListIsUserError) {
  TempDir dir;
  zt::write_token_shard(dir / "ok.bin", {1, 2, 3});
  expect_user_error([&] { TokenDataset::open({dir / "ok.bin", dir / "gone.bin"}); }, {dir / "gone.bin"});
  expect_user_error([&] { TokenDataset::open_list(" , "); }, {"no files"});
}

TEST(TokenDataset, InMemoryCorpusSurvivesMoves) {
  TokenDataset ds = TokenDataset::from_tokens({4, 5, 6, 7, 300}, "<test corpus>");
  TokenDataset moved = std::move(ds);
  std::vector<int32_t> out(3);
  moved.copy_window(2, 3, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{6, 7, 300}));
  EXPECT_EQ(moved.describe(), "<test corpus>");
  expect_user_error([&] { moved.validate_vocab(256); }, {"<test corpus>", "token 300", "position 4"});
}

TEST(TokenDataset, UnigramEntropy) {
  const std::vector<uint16_t> uniform = {0, 1, 2, 3, 0, 1, 2, 3};
  EXPECT_NEAR(zt::unigram_entropy_nats(uniform.data(), 8), std::log(4.0), 1e-12);
  const std::vector<uint16_t> constant(10, 9);
  EXPECT_EQ(zt::unigram_entropy_nats(constant.data(), 10), 0.0);
  EXPECT_EQ(zt::unigram_entropy_nats(static_cast<const uint16_t*>(nullptr), 0), 0.0);
  const std::vector<uint32_t> wide = {0, 200000, 0, 200000};
  EXPECT_NEAR(zt::unigram_entropy_nats(wide.data(), 4), std::log(2.0), 1e-12);
}

// ---- loss masks ([Note: loss mask file]) ----

TEST(LossMask, PathBesideTheShard) {
  EXPECT_EQ(zt::mask_path_for("d/train.bin"), "d/train.mask");
  EXPECT_EQ(zt::mask_path_for("d/tokens"), "d/tokens.mask");
}

TEST(LossMask, WriteThenReadRoundTrips) {
  TempDir dir;
  const std::vector<uint8_t> mask = {0, 1, 1, 0, 0, 1, 0};
  zt::write_loss_mask(dir / "a.mask", mask);
  EXPECT_EQ(zt::read_loss_mask(dir / "a.mask"), mask);
  // The documented layout, byte for byte.
  const std::string bytes = zt::test::read_bytes(dir / "a.mask");
  ASSERT_EQ(bytes.size(), 24u + mask.size());
  EXPECT_EQ(bytes.substr(0, 8), std::string("ZTLMASK\0", 8));
  int32_t version = 0;
  int64_t count = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&count, bytes.data() + 16, 8);
  EXPECT_EQ(version, 1);
  EXPECT_EQ(count, 7);
  zt::write_loss_mask(dir / "empty.mask", {});
  EXPECT_TRUE(zt::read_loss_mask(dir / "empty.mask").empty());
}

TEST(LossMask, BadFilesNameTheProblem) {
  TempDir dir;
  expect_user_error([&] { zt::write_loss_mask(dir / "x.mask", {0, 2}); }, {"entry 1", "2"});
  zt::write_loss_mask(dir / "a.mask", {1, 0, 1});
  std::string bytes = zt::test::read_bytes(dir / "a.mask");
  zt::test::write_bytes(dir / "short.mask", bytes.substr(0, bytes.size() - 1));
  expect_user_error([&] { zt::read_loss_mask(dir / "short.mask"); }, {dir / "short.mask", "3 entries", "26"});
  std::string bad_value = bytes;
  bad_value[25] = 7;
  zt::test::write_bytes(dir / "value.mask", bad_value);
  expect_user_error([&] { zt::read_loss_mask(dir / "value.mask"); }, {dir / "value.mask", "entry 1 is 7"});
  std::string bad_magic = bytes;
  bad_magic[0] = 'X';
  zt::test::write_bytes(dir / "magic.mask", bad_magic);
  expect_user_error([&] { zt::read_loss_mask(dir / "magic.mask"); }, {dir / "magic.mask", "magic"});
}

TEST(LossMask, DatasetReadsMasksAcrossShards) {
  TempDir dir;
  zt::write_token_shard(dir / "a.bin", ramp(5));
  zt::write_token_shard(dir / "b.bin", ramp(4, 5));
  zt::write_loss_mask(dir / "a.mask", {0, 0, 1, 1, 0});
  zt::write_loss_mask(dir / "b.mask", {1, 0, 1, 1});
  const TokenDataset ds = TokenDataset::open({dir / "a.bin", dir / "b.bin"});
  ASSERT_TRUE(ds.has_mask());
  std::vector<uint8_t> out(6);
  ds.copy_mask(2, 6, out.data());  // spans the boundary
  EXPECT_EQ(out, (std::vector<uint8_t>{1, 1, 0, 1, 0, 1}));

  // Without mask files every target counts.
  zt::write_token_shard(dir / "c.bin", ramp(3));
  const TokenDataset c = TokenDataset::open({dir / "c.bin"});
  EXPECT_FALSE(c.has_mask());
  std::vector<uint8_t> ones(3, 7);
  c.copy_mask(0, 3, ones.data());
  EXPECT_EQ(ones, (std::vector<uint8_t>{1, 1, 1}));

  // Masked and plain shards do not mix; a mask of the wrong length is refused.
  expect_user_error([&] { TokenDataset::open({dir / "a.bin", dir / "c.bin"}); },
                    {dir / "c.bin", "has no loss mask"});
  expect_user_error([&] { TokenDataset::open({dir / "c.bin", dir / "a.bin"}); },
                    {dir / "c.bin", "has no loss mask"});
  zt::write_loss_mask(dir / "c.mask", {1, 1});
  expect_user_error([&] { TokenDataset::open({dir / "c.bin"}); }, {dir / "c.mask", "2 entries", "3 tokens"});

  // A mask entry that is a directory or a link to nothing is named, never
  // taken for "no mask" (every target would count).
  zt::write_token_shard(dir / "d.bin", ramp(3));
  std::filesystem::create_directory(dir / "d.mask");
  expect_user_error([&] { TokenDataset::open({dir / "d.bin"}); }, {dir / "d.mask", "is not a regular file"});
  zt::write_token_shard(dir / "e.bin", ramp(3));
  std::filesystem::create_symlink(dir / "gone.mask", dir / "e.mask");
  expect_user_error([&] { TokenDataset::open({dir / "e.bin"}); }, {dir / "e.mask", "is a link to nothing"});
}
