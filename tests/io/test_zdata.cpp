// End-to-end: runs the built zdata binary (path in ZDATA_BIN) and reads back
// what it wrote.
#include <chrono>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "io/byte_tokenizer.hpp"
#include "io/loss_mask.hpp"
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

// [Note: no empty shards]: nothing is written from an empty input or for
// --train-tokens 0; an empty val split writes no val.bin; a markov corpus too
// large for one shard is refused before it is generated.
TEST(Zdata, NoUnusableShards) {
  TempDir dir;
  zt::test::write_bytes(dir / "empty.txt", "");
  Result r = zdata(dir, "text --out " + (dir / "e") + " " + (dir / "empty.txt"));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "text: the input files hold no tokens (empty input): nothing written")) << r.err;
  EXPECT_FALSE(std::ifstream(dir / "e/train.bin").good());

  zt::test::write_bytes(dir / "a.txt", "hello, world\n");
  r = zdata(dir, "text --out " + (dir / "n") + " --val-fraction 0 " + (dir / "a.txt"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(read_shard(dir / "n/train.bin").size(), 13u);
  EXPECT_FALSE(std::ifstream(dir / "n/val.bin").good()) << "no val.bin for --val-fraction 0";
  EXPECT_TRUE(contains(r.out, "val.bin: not written")) << r.out;
  r = zdata(dir, "text --out " + (dir / "s") + " --val-fraction 0.01 " + (dir / "a.txt"));  // 0.13 tokens: none
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "no val.bin written")) << r.err;
  EXPECT_FALSE(std::ifstream(dir / "s/val.bin").good());
  zt::test::write_bytes(dir / "one.txt", "x");
  r = zdata(dir, "text --out " + (dir / "o") + " --val-fraction 0.9 " + (dir / "one.txt"));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "leaves none for train.bin")) << r.err;

  r = zdata(dir, "markov --out " + (dir / "m") + " --train-tokens 0");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.err, "--train-tokens must be > 0")) << r.err;
  r = zdata(dir, "markov --out " + (dir / "m") + " --train-tokens 1000 --val-tokens 0");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(std::ifstream(dir / "m/val.bin").good());
  const auto t0 = std::chrono::steady_clock::now();
  r = zdata(dir, "markov --out " + (dir / "big") + " --train-tokens 3000000000");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.err, "--train-tokens 3000000000: one shard holds at most 2147483647 tokens")) << r.err;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

// zdata tokenize: ids of the Python packages (tests/io/data/tok_expected.json),
// the same bytes for any thread count, BOS/EOS, uint32 shards.
namespace {

std::vector<uint32_t> read_ids(const std::string& path) {
  const zt::TokenShard s(path);
  std::vector<uint32_t> v;
  for (int64_t i = 0; i < s.size(); ++i) v.push_back(s.token(i));
  return v;
}

const nlohmann::json& tok_expected() {
  static const nlohmann::json j =
      nlohmann::json::parse(zt::test::read_bytes(std::string(ZT_TOKENIZER_DATA) + "/tok_expected.json"));
  return j;
}

std::vector<uint32_t> expected_ids(const std::string& name, size_t text) {
  return tok_expected()["cases"][name][text].get<std::vector<uint32_t>>();
}

const std::string kSample = std::string(ZT_TOKENIZER_DATA) + "/tokenizer_sample.txt";

}  // namespace

TEST(Zdata, TokenizeMatchesTokenizersOnAnyThreadCount) {
  TempDir dir;
  const std::string tok = std::string(ZT_TOKENIZER_DATA) + "/tok_llama3.json";
  std::string first;
  for (const char* threads : {"1", "3"}) {
    // --item-mb 0.00005: 50-byte work items, so the sample is cut in many places.
    const std::string out = dir / (std::string("t") + threads);
    const Result r = zdata(dir, "tokenize --tokenizer " + tok + " --bos none --val-fraction 0 --item-mb 0.00005 --threads " +
                                    threads + " --out " + out + " " + kSample);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(read_ids(out + "/train.bin"), expected_ids("llama3", 0)) << threads << " threads";
    EXPECT_TRUE(contains(r.out, "MB/s")) << r.out;
    EXPECT_TRUE(contains(r.out, "tokens/s")) << r.out;
    const std::string bytes = zt::test::read_bytes(out + "/train.bin");
    if (first.empty()) first = bytes;
    EXPECT_EQ(bytes, first);
  }
}

TEST(Zdata, TokenizeSentencePieceLinesWithBosAndEos) {
  // Llama 2: <s> before every document (the default), </s> when asked.
  TempDir dir;
  const Result r = zdata(dir, "tokenize --tokenizer " + std::string(ZT_TOKENIZER_DATA) + "/tok_sp.model" +
                                  " --docs line --eos auto --val-fraction 0 --threads 2 --out " + (dir / "s") + " " +
                                  kSample);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto texts = tok_expected()["texts"].get<std::vector<std::string>>();
  std::vector<uint32_t> want;
  for (size_t i = 1; i < texts.size(); ++i) {  // texts[1..] are the lines
    if (texts[i].empty()) continue;               // empty lines are no documents
    want.push_back(1);
    const auto ids = expected_ids("sp", i);
    want.insert(want.end(), ids.begin(), ids.end());
    want.push_back(2);
  }
  EXPECT_EQ(read_ids(dir / "s/train.bin"), want);
}

TEST(Zdata, TokenizeWritesUint32ShardsForLargeVocabularies) {
  // tok_llama3.json with one more special token at id 128255 (Llama 3's last):
  // vocab_size 128,256 needs the uint32 format.
  TempDir dir;
  auto j = nlohmann::json::parse(zt::test::read_bytes(std::string(ZT_TOKENIZER_DATA) + "/tok_llama3.json"));
  j["added_tokens"].push_back({{"id", 128255}, {"content", "<|reserved_special_token_250|>"}, {"single_word", false},
                               {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"special", true}});
  zt::test::write_bytes(dir / "big.json", j.dump());
  zt::test::write_bytes(dir / "in.txt", "Hello<|reserved_special_token_250|> world");
  const Result r = zdata(dir, "tokenize --tokenizer " + (dir / "big.json") + " --val-fraction 0 --out " + (dir / "o") +
                                  " " + (dir / "in.txt"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "vocab_size: 128256 (uint32 ids)")) << r.out;
  const zt::TokenShard s(dir / "o/train.bin");
  EXPECT_EQ(s.token_bytes(), 4);
  const auto ids = read_ids(dir / "o/train.bin");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), tok_expected()["bos"]["llama3"].get<uint32_t>());  // the template's BOS, by default
  EXPECT_NE(std::find(ids.begin(), ids.end(), 128255u), ids.end());
  const Result i = zdata(dir, "inspect " + (dir / "o/train.bin"));
  EXPECT_TRUE(contains(i.out, "magic: 20240801, version: 7 (uint32 tokens)")) << i.out;
  EXPECT_TRUE(contains(i.out, "max token: 128255")) << i.out;
}

TEST(Zdata, TokenizeProgressBarWhenAsked) {
  TempDir dir;
  const Result r = zdata(dir, "tokenize --tokenizer " + std::string(ZT_TOKENIZER_DATA) + "/tok_gpt2.json" +
                                  " --progress --out " + (dir / "p") + " " + kSample);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "100.0%")) << r.err;
  const Result q = zdata(dir, "tokenize --tokenizer " + std::string(ZT_TOKENIZER_DATA) + "/tok_gpt2.json" +
                                  " --out " + (dir / "p") + " " + kSample);
  EXPECT_FALSE(contains(q.err, "%")) << q.err;  // stderr is a file here: no bar unless asked
}

TEST(Zdata, BadUsageExitsTwo) {
  TempDir dir;
  const std::string gpt2 = std::string(ZT_TOKENIZER_DATA) + "/tok_gpt2.json";
  for (const std::string& args : std::vector<std::string>{
           "", "frobnicate", "markov", "markov --out x --states 1", "markov --out x --seed -3", "markov --out x --bogus",
           "text --out x", "text --out x --val-fraction 1.5 f", "inspect", "markov --out x --train-tokens -1",
           "tokenize --out x f", "tokenize --tokenizer " + gpt2 + " --out x",
           "tokenize --tokenizer " + gpt2 + " --out x --docs pages " + kSample,
           "tokenize --tokenizer " + gpt2 + " --out x --bos '<s>' " + kSample,
           "tokenize --tokenizer " + gpt2 + " --out x --threads -1 " + kSample}) {
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

// A run without a validation split into a directory holding an earlier
// run's val.bin is refused before it writes (the old validation tokens would
// be in the new train.bin); a seed past 64 bits is named.
TEST(Zdata, StaleValidationShardIsRefused) {
  TempDir dir;
  const std::string out = dir / "d";
  ASSERT_EQ(zdata(dir, "markov --out " + out + " --train-tokens 1000 --val-tokens 100").code, 0);
  const std::vector<uint16_t> train_before = read_shard(out + "/train.bin");
  Result r = zdata(dir, "markov --out " + out + " --train-tokens 2000 --val-tokens 0");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, out + "/val.bin is left from an earlier run, and this run writes no validation split"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "--val-tokens > 0")) << r.err;
  EXPECT_EQ(read_shard(out + "/train.bin"), train_before);  // nothing written
  zt::test::write_bytes(dir / "t.txt", std::string(4000, 'a'));
  r = zdata(dir, "text --out " + out + " --val-fraction 0 " + (dir / "t.txt"));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--val-fraction > 0")) << r.err;
  std::filesystem::remove(out + "/val.bin");
  r = zdata(dir, "text --out " + out + " --val-fraction 0 " + (dir / "t.txt"));
  EXPECT_EQ(r.code, 0) << r.err;

  r = zdata(dir, "markov --out " + out + " --seed 99999999999999999999");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.err, "--seed must be an unsigned 64-bit integer")) << r.err;
}

// ---- zdata finetune ([Note: fine-tuning examples]) ----
namespace {

// Ids of `text` by `zdata tokenize` (no BOS/EOS): the tokenizers themselves
// are checked against the Python packages' ids above.
std::vector<uint32_t> ids_of(const TempDir& dir, const std::string& tok, const std::string& text) {
  static int n = 0;
  const std::string name = "piece" + std::to_string(n++);
  zt::test::write_bytes(dir / (name + ".txt"), text);
  const Result r = zdata(dir, "tokenize --tokenizer " + tok + " --bos none --eos none --val-fraction 0 --threads 1 --out " +
                                  (dir / name) + " " + (dir / (name + ".txt")));
  EXPECT_EQ(r.code, 0) << r.err;
  return read_ids(dir / (name + "/train.bin"));
}

uint32_t added_token(const std::string& tok, const std::string& content) {
  const auto j = nlohmann::json::parse(zt::test::read_bytes(tok));
  for (const auto& t : j.at("added_tokens"))
    if (t.at("content") == content) return t.at("id").get<uint32_t>();
  ADD_FAILURE() << content << " not in " << tok;
  return 0;
}

// Appends `ids` to the expected tokens with mask value m.
void expect_piece(std::vector<uint32_t>& ids, std::vector<uint8_t>& mask, const std::vector<uint32_t>& piece, uint8_t m) {
  ids.insert(ids.end(), piece.begin(), piece.end());
  mask.insert(mask.end(), piece.size(), m);
}

}  // namespace

// The mask file records where each example starts (version 2), for packing.
TEST(Zdata, FinetuneRecordsExampleStarts) {
  TempDir dir;
  const std::string tok = std::string(ZT_TOKENIZER_DATA) + "/tok_gpt2.json";
  zt::test::write_bytes(dir / "a.jsonl",
                        "{\"prompt\": \"A:\", \"completion\": \" one\"}\n"
                        "{\"prompt\": \"Longer prompt here:\", \"completion\": \" two words\"}\n"
                        "{\"prompt\": \"C\", \"completion\": \"!\"}\n");
  const Result r = zdata(dir, "finetune --tokenizer " + tok + " --format prompt_completion --out " + (dir / "o") + " " +
                                  (dir / "a.jsonl"));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto len = [&](const std::string& p, const std::string& c) {
    return static_cast<int64_t>(ids_of(dir, tok, p).size() + ids_of(dir, tok, c).size() + 1);  // + EOS
  };
  const int64_t a = len("A:", " one"), b = len("Longer prompt here:", " two words");
  const zt::LossMaskFile f = zt::read_loss_mask_file(dir / "o/train.mask");
  EXPECT_TRUE(f.has_examples);
  EXPECT_EQ(f.example_starts, (std::vector<int64_t>{0, a, a + b}));
  const Result i = zdata(dir, "inspect " + (dir / "o/train.bin"));
  ASSERT_EQ(i.code, 0) << i.err;
  EXPECT_TRUE(contains(i.out, "examples: 3")) << i.out;
}

TEST(Zdata, FinetunePromptCompletionMasksThePrompt) {
  TempDir dir;
  const std::string tok = std::string(ZT_TOKENIZER_DATA) + "/tok_gpt2.json";
  zt::test::write_bytes(dir / "a.jsonl",
                        "{\"prompt\": \"What is 2+2?\\nAnswer:\", \"completion\": \" four.\"}\n\n"
                        "{\"completion\": \" Hello there, friend!\", \"prompt\": \"Greet me:\"}\n");
  const Result r = zdata(dir, "finetune --tokenizer " + tok + " --format prompt_completion --val-fraction 0.5 --out " +
                                  (dir / "o") + " " + (dir / "a.jsonl"));
  ASSERT_EQ(r.code, 0) << r.err;
  const uint32_t eos = added_token(tok, "<|endoftext|>");
  std::vector<uint32_t> want;
  std::vector<uint8_t> mask;
  expect_piece(want, mask, ids_of(dir, tok, "What is 2+2?\nAnswer:"), 0);
  expect_piece(want, mask, ids_of(dir, tok, " four."), 1);
  expect_piece(want, mask, {eos}, 1);
  EXPECT_EQ(read_ids(dir / "o/train.bin"), want);
  EXPECT_EQ(zt::read_loss_mask(dir / "o/train.mask"), mask);
  // The second example went to val whole (GPT-2 has no BOS).
  want.clear();
  mask.clear();
  expect_piece(want, mask, ids_of(dir, tok, "Greet me:"), 0);
  expect_piece(want, mask, ids_of(dir, tok, " Hello there, friend!"), 1);
  expect_piece(want, mask, {eos}, 1);
  EXPECT_EQ(read_ids(dir / "o/val.bin"), want);
  EXPECT_EQ(zt::read_loss_mask(dir / "o/val.mask"), mask);
  EXPECT_TRUE(contains(r.out, "targets count in the loss")) << r.out;
  const Result i = zdata(dir, "inspect " + (dir / "o/val.bin"));
  ASSERT_EQ(i.code, 0) << i.err;
  int64_t counted = 0;
  for (uint8_t m : mask) counted += m;
  EXPECT_TRUE(contains(i.out, "loss mask: " + (dir / "o/val.mask") + ": " + std::to_string(counted) + " of " +
                                  std::to_string(mask.size())))
      << i.out;
}

TEST(Zdata, FinetuneChatLlama3CountsOnlyTheAssistant) {
  TempDir dir;
  const std::string tok = std::string(ZT_TOKENIZER_DATA) + "/tok_llama3.json";
  zt::test::write_bytes(dir / "c.jsonl",
                        "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
                        "{\"role\": \"user\", \"content\": \"Capital of France?\"}, "
                        "{\"role\": \"assistant\", \"content\": \"Paris.\"}]}\n");
  const Result r = zdata(dir, "finetune --tokenizer " + tok + " --format chat --chat-template llama3 --out " +
                                  (dir / "o") + " " + (dir / "c.jsonl"));
  ASSERT_EQ(r.code, 0) << r.err;
  const uint32_t sh = added_token(tok, "<|start_header_id|>"), eh = added_token(tok, "<|end_header_id|>"),
                 eot = added_token(tok, "<|eot_id|>");
  std::vector<uint32_t> want;
  std::vector<uint8_t> mask;
  expect_piece(want, mask, {added_token(tok, "<|begin_of_text|>")}, 0);
  for (const auto& [role, content] : std::vector<std::pair<std::string, std::string>>{
           {"system", "Be brief."}, {"user", "Capital of France?"}, {"assistant", "Paris."}}) {
    const uint8_t m = role == "assistant";
    expect_piece(want, mask, {sh}, 0);
    expect_piece(want, mask, ids_of(dir, tok, role), 0);
    expect_piece(want, mask, {eh}, 0);
    expect_piece(want, mask, ids_of(dir, tok, "\n\n"), 0);
    expect_piece(want, mask, ids_of(dir, tok, content), m);
    expect_piece(want, mask, {eot}, m);
  }
  expect_piece(want, mask, {added_token(tok, "<|end_of_text|>")}, 1);  // the tokenizer's EOS ends the example
  EXPECT_EQ(read_ids(dir / "o/train.bin"), want);
  EXPECT_EQ(zt::read_loss_mask(dir / "o/train.mask"), mask);
  EXPECT_FALSE(std::ifstream(dir / "o/val.bin").good()) << "no val files without --val-fraction";
}

TEST(Zdata, FinetuneErrorsNameFileAndLine) {
  TempDir dir;
  const std::string gpt2 = std::string(ZT_TOKENIZER_DATA) + "/tok_gpt2.json";
  const std::string good = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, "
                           "{\"role\": \"assistant\", \"content\": \"hello\"}]}\n";
  auto run = [&](const std::string& lines, const std::string& args) {
    zt::test::write_bytes(dir / "x.jsonl", lines);
    return zdata(dir, "finetune --tokenizer " + gpt2 + " --out " + (dir / "o") + " " + args + " " + (dir / "x.jsonl"));
  };
  // The plain template works with any tokenizer.
  Result r = run(good, "--format chat --chat-template plain");
  EXPECT_EQ(r.code, 0) << r.err;
  std::vector<uint32_t> want;
  std::vector<uint8_t> mask;
  expect_piece(want, mask, ids_of(dir, gpt2, "user: "), 0);
  expect_piece(want, mask, ids_of(dir, gpt2, "hi\n"), 0);
  expect_piece(want, mask, ids_of(dir, gpt2, "assistant: "), 0);
  expect_piece(want, mask, ids_of(dir, gpt2, "hello\n"), 1);
  expect_piece(want, mask, {added_token(gpt2, "<|endoftext|>")}, 1);
  EXPECT_EQ(read_ids(dir / "o/train.bin"), want);
  EXPECT_EQ(zt::read_loss_mask(dir / "o/train.mask"), mask);

  r = run(good + "{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}\n", "--format chat --chat-template plain");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, dir / "x.jsonl:2: message 0: unknown role 'robot'")) << r.err;
  r = run(good + "\n{not json\n", "--format chat --chat-template plain");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, dir / "x.jsonl:3: not valid JSON")) << r.err;
  r = run("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}\n", "--format chat --chat-template plain");
  EXPECT_TRUE(contains(r.err, ":1: no assistant message")) << r.err;
  r = run("{\"prompt\": \"a\", \"completion\": \"b\", \"extra\": 1}\n", "--format prompt_completion");
  EXPECT_TRUE(contains(r.err, ":1: unknown key \"extra\"")) << r.err;
  // Bad usage: exit 2.
  r = run(good, "--format chat");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.err, "--chat-template")) << r.err;
  r = run(good, "--format chat --chat-template chatml");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.err, "unknown --chat-template 'chatml'")) << r.err;
  r = run(good, "--format alpaca");
  EXPECT_EQ(r.code, 2);
  // llama3 needs its header tokens, which GPT-2's tokenizer lacks.
  r = run(good, "--format chat --chat-template llama3");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "<|start_header_id|>")) << r.err;
}
