// End-to-end: runs the built zdata binary (path in ZDATA_BIN) and reads back
// what it wrote.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "io/byte_tokenizer.hpp"
#include "io/synthetic.hpp"
#include "io/token_shard.hpp"
#include "temp_dir.hpp"

using zt::test::TempDir;

namespace {

struct Result {
  int code;
  std::string out, err;
};

// Runs `zdata ARGS` with stdout and stderr captured in files of `dir`.
Result zdata(const TempDir& dir, const std::string& args) {
  const std::string cmd =
      std::string(ZDATA_BIN) + " " + args + " >" + (dir / "stdout") + " 2>" + (dir / "stderr");
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, zt::test::read_bytes(dir / "stdout"),
          zt::test::read_bytes(dir / "stderr")};
}

std::vector<uint16_t> read_shard(const std::string& path) {
  const zt::TokenShard s(path);
  return std::vector<uint16_t>(s.tokens(), s.tokens() + s.size());
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace

TEST(Zdata, MarkovDefaultsEqualTheEmbeddedCorpus) {
  TempDir dir;
  const Result r = zdata(dir, "markov --out " + (dir / "m"));
  ASSERT_EQ(r.code, 0) << r.err;
  const zt::EmbeddedCorpus c = zt::make_embedded_corpus();
  EXPECT_EQ(read_shard(dir / "m/train.bin"), c.train);
  EXPECT_EQ(read_shard(dir / "m/val.bin"), c.val);
  const auto info = nlohmann::json::parse(zt::test::read_bytes(dir / "m/entropy.json"));
  EXPECT_DOUBLE_EQ(info.at("entropy_nats").get<double>(), c.entropy_nats);
  EXPECT_EQ(info.at("states").get<int>(), 64);
  EXPECT_EQ(info.at("seed").get<uint64_t>(), c.spec.seed);
  EXPECT_TRUE(contains(r.out, "ideal loss")) << r.out;
}

TEST(Zdata, MarkovOptions) {
  TempDir dir;
  const Result r = zdata(dir, "markov --out " + (dir / "m") +
                                  " --states 16 --train-tokens 5000 --val-tokens 700 --seed 8 --successors 2");
  ASSERT_EQ(r.code, 0) << r.err;
  const zt::MarkovSource src(zt::MarkovSpec{16, 2, 0.1, 8});
  EXPECT_EQ(read_shard(dir / "m/train.bin"), src.generate(5000, zt::kMarkovTrainStream));
  EXPECT_EQ(read_shard(dir / "m/val.bin").size(), 700u);
  const auto info = nlohmann::json::parse(zt::test::read_bytes(dir / "m/entropy.json"));
  EXPECT_DOUBLE_EQ(info.at("entropy_nats").get<double>(), src.entropy_rate());
  EXPECT_EQ(info.at("seed").get<uint64_t>(), 8u);
}

TEST(Zdata, TextTokenizesAndSplits) {
  TempDir dir;
  const std::string a = "The quick brown fox jumps over the lazy dog.\n";
  const std::string b = std::string(55, 'z') + "\xff\x01";
  zt::test::write_bytes(dir / "a.txt", a);
  zt::test::write_bytes(dir / "b.txt", b);
  const Result r = zdata(dir, "text --out " + (dir / "t") + " --val-fraction 0.25 " + (dir / "a.txt") + " " +
                                  (dir / "b.txt"));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string all = a + b;  // 102 bytes: 26 (rounded) to val
  const std::string train = zt::decode_bytes(read_shard(dir / "t/train.bin"));
  const std::string val = zt::decode_bytes(read_shard(dir / "t/val.bin"));
  EXPECT_EQ(val.size(), 26u);
  EXPECT_EQ(train + val, all);
  EXPECT_TRUE(contains(r.out, "unigram entropy")) << r.out;
}

TEST(Zdata, Inspect) {
  TempDir dir;
  zt::write_token_shard(dir / "s.bin", {3, 9, 3, 9});
  const Result r = zdata(dir, "inspect " + (dir / "s.bin"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "tokens: 4")) << r.out;
  EXPECT_TRUE(contains(r.out, "min token: 3")) << r.out;
  EXPECT_TRUE(contains(r.out, "max token: 9")) << r.out;
  EXPECT_TRUE(contains(r.out, "0.6931")) << r.out;  // log 2
}

TEST(Zdata, ErrorsNameTheFileAndExitOne) {
  TempDir dir;
  zt::test::write_bytes(dir / "bad.bin", std::string(2000, 'x'));
  Result r = zdata(dir, "inspect " + (dir / "bad.bin"));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "zdata: error:")) << r.err;
  EXPECT_TRUE(contains(r.err, dir / "bad.bin")) << r.err;
  EXPECT_TRUE(contains(r.err, "magic")) << r.err;
  r = zdata(dir, "text --out " + (dir / "t") + " " + (dir / "missing.txt"));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, dir / "missing.txt")) << r.err;
}

TEST(Zdata, BadUsageExitsTwo) {
  TempDir dir;
  for (const std::string args :
       {"", "frobnicate", "markov", "markov --out x --states 1", "markov --out x --seed -3", "markov --out x --bogus",
        "text --out x", "text --out x --val-fraction 1.5 f", "inspect", "markov --out x --train-tokens -1"}) {
    const Result r = zdata(dir, args);
    EXPECT_EQ(r.code, 2) << "zdata " << args << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "zdata: error:")) << r.err;
  }
  Result r = zdata(dir, "--help");
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(contains(r.out, "markov")) << r.out;
  r = zdata(dir, "markov --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(contains(r.out, "--states")) << r.out;
}
