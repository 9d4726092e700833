// Tokenizers (src/io/tokenizer.hpp) against the ids the Python packages
// `tokenizers` and `sentencepiece` gave for the multilingual sample
// (tests/io/make_tokenizer_refs.py wrote tests/io/data/tok_*), the parallel
// text pipeline (tokenize_text.hpp), and the refusal of unsupported
// tokenizer.json fields.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"
#include "io/tokenize_text.hpp"
#include "io/tokenizer.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const std::string kData = ZT_TOKENIZER_DATA;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const json& expected() {
  static const json j = json::parse(slurp(kData + "/tok_expected.json"));
  return j;
}

std::vector<std::string> texts() { return expected()["texts"].get<std::vector<std::string>>(); }

std::vector<uint32_t> encode(const zt::Tokenizer& t, const std::string& text) {
  std::vector<uint32_t> ids;
  t.encode(text, ids);
  return ids;
}

void expect_case(const zt::Tokenizer& tok, const std::string& name, bool with_template = false) {
  const auto& want = expected()["cases"][name];
  const auto all = texts();
  ASSERT_EQ(want.size(), all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    std::vector<uint32_t> got;
    if (with_template) {
      const auto& bpe = dynamic_cast<const zt::BpeTokenizer&>(tok);
      got = bpe.template_prefix();
      tok.encode(all[i], got);
      got.insert(got.end(), bpe.template_suffix().begin(), bpe.template_suffix().end());
    } else {
      got = encode(tok, all[i]);
    }
    EXPECT_EQ(got, want[i].get<std::vector<uint32_t>>()) << name << ", text " << i << ": " << all[i];
  }
}

std::string user_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const zt::UserError& e) {
    return e.what();
  }
  return "<no UserError>";
}

}  // namespace

TEST(Tokenizers, SampleIsTheShippedFile) {
  // The expected ids belong to this exact file (whole, then line by line).
  EXPECT_EQ(texts().at(0), slurp(kData + "/tokenizer_sample.txt"));
  EXPECT_GT(texts().size(), 10u);
}

TEST(Tokenizers, Gpt2StyleMatchesTokenizers) {
  const auto tok = zt::load_tokenizer(kData + "/tok_gpt2.json");
  expect_case(*tok, "gpt2");
  EXPECT_EQ(tok->vocab_size(), expected()["vocab_size"]["gpt2"].get<int64_t>());
  EXPECT_EQ(tok->default_eos(), expected()["eos"]["gpt2"].get<uint32_t>());
  EXPECT_FALSE(tok->default_bos().has_value());  // GPT-2 puts no BOS
  EXPECT_TRUE(tok->splits_at_lines());
}

TEST(Tokenizers, AddPrefixSpaceAndOlderMergeFormat) {
  // add_prefix_space = true: a space before every piece between added tokens
  // that lacks one (the script makes the same edit for the expected ids).
  // Merges written as "a b" strings (older files, GPT-2's own) instead of
  // ["a", "b"] pairs must give the same ids.
  zt::test::TempDir dir;
  json j = json::parse(slurp(kData + "/tok_gpt2.json"));
  j["pre_tokenizer"]["add_prefix_space"] = true;
  std::ofstream(dir / "prefix.json") << j.dump();
  const auto prefix = zt::load_tokenizer(dir / "prefix.json");
  expect_case(*prefix, "gpt2_prefix_space");
  EXPECT_FALSE(prefix->splits_at_lines());  // not proven safe with the prefix
  j["pre_tokenizer"]["add_prefix_space"] = false;
  ASSERT_TRUE(j["model"]["merges"][0].is_array());
  for (auto& m : j["model"]["merges"]) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  std::ofstream(dir / "strings.json") << j.dump();
  expect_case(*zt::load_tokenizer(dir / "strings.json"), "gpt2");
}

TEST(Tokenizers, Llama3StyleMatchesTokenizers) {
  const auto tok = zt::load_bpe_tokenizer(kData + "/tok_llama3.json");
  expect_case(*tok, "llama3");
  expect_case(*tok, "llama3_template", true);
  EXPECT_EQ(tok->vocab_size(), expected()["vocab_size"]["llama3"].get<int64_t>());
  EXPECT_EQ(tok->default_bos(), expected()["bos"]["llama3"].get<uint32_t>());
  EXPECT_EQ(tok->default_eos(), expected()["eos"]["llama3"].get<uint32_t>());
}

TEST(Tokenizers, IgnoreMergesTakesVocabularyWordsWhole) {
  // "zq" added to the vocabulary without a merge that makes it: with
  // ignore_merges the piece is taken whole, without it merges decide
  // (tokenizers 0.23 gives [1501] and [id of z, id of q]).
  zt::test::TempDir dir;
  json j = json::parse(slurp(kData + "/tok_llama3.json"));
  const uint32_t z = j["model"]["vocab"]["z"], q = j["model"]["vocab"]["q"];
  ASSERT_FALSE(j["model"]["vocab"].contains("zq"));
  j["model"]["vocab"]["zq"] = 1501;
  ASSERT_EQ(j["added_tokens"].back()["id"], 1500);
  j["added_tokens"].back()["id"] = 1502;
  ASSERT_TRUE(j["model"]["ignore_merges"].get<bool>());
  std::ofstream(dir / "a.json") << j.dump();
  j["model"]["ignore_merges"] = false;
  std::ofstream(dir / "b.json") << j.dump();
  EXPECT_EQ(encode(*zt::load_tokenizer(dir / "a.json"), "zq"), (std::vector<uint32_t>{1501}));
  EXPECT_EQ(encode(*zt::load_tokenizer(dir / "b.json"), "zq"), (std::vector<uint32_t>{z, q}));
}

TEST(Tokenizers, SplitSpecialTokenisesSpecialTokensAsText) {
  const auto tok = zt::load_tokenizer(kData + "/tok_llama3.json", /*split_special=*/true);
  expect_case(*tok, "llama3_split_special");
  // The sample does quote special tokens, so the two cases must differ.
  EXPECT_NE(expected()["cases"]["llama3"], expected()["cases"]["llama3_split_special"]);
}

TEST(Tokenizers, SentencePieceMatchesSentencepiece) {
  const auto tok = zt::load_tokenizer(kData + "/tok_sp.model");
  expect_case(*tok, "sp");
  EXPECT_EQ(tok->vocab_size(), expected()["vocab_size"]["sp"].get<int64_t>());
  EXPECT_EQ(tok->default_bos(), expected()["bos"]["sp"].get<uint32_t>());
  EXPECT_EQ(tok->default_eos(), expected()["eos"]["sp"].get<uint32_t>());
  EXPECT_FALSE(tok->splits_at_lines());
  EXPECT_EQ(tok->decode(encode(*tok, "Zürich 😀 123")), "Zürich 😀 123");
}

TEST(Tokenizers, BpeDecodeRoundTrips) {
  for (const char* f : {"/tok_gpt2.json", "/tok_llama3.json"}) {
    const auto tok = zt::load_tokenizer(kData + f);
    for (const auto& t : texts()) EXPECT_EQ(tok->decode(encode(*tok, t)), t) << f;
  }
}

TEST(Tokenizers, InvalidUtf8IsAnErrorWithItsOffset) {
  const auto tok = zt::load_tokenizer(kData + "/tok_gpt2.json");
  EXPECT_NE(user_error([&] { encode(*tok, std::string("ab\xff" "cd")); }).find("not valid UTF-8 at byte 2"),
            std::string::npos);
}

TEST(Tokenizers, UnsupportedFieldsAreNamed) {
  zt::test::TempDir dir;
  const json base = json::parse(slurp(kData + "/tok_llama3.json"));
  auto refused = [&](const std::function<void(json&)>& edit) {
    json j = base;
    edit(j);
    const std::string path = dir / "t.json";
    std::ofstream(path) << j.dump();
    return user_error([&] { zt::load_tokenizer(path); });
  };
  auto contains = [](const std::string& s, const std::string& part) {
    return s.find(part) != std::string::npos ? ::testing::AssertionSuccess()
                                             : ::testing::AssertionFailure() << "'" << s << "' lacks '" << part << "'";
  };
  EXPECT_TRUE(contains(refused([](json& j) { j["normalizer"] = {{"type", "NFC"}}; }), "normalizer.type"));
  EXPECT_TRUE(contains(refused([](json& j) { j["model"]["type"] = "WordPiece"; }), "model.type"));
  EXPECT_TRUE(contains(refused([](json& j) { j["model"]["max_input_chars_per_word"] = 100; }),
                       "model.max_input_chars_per_word: unknown field"));
  EXPECT_TRUE(contains(refused([](json& j) { j["pre_tokenizer"]["pretokenizers"][1]["prepend_scheme"] = "first"; }),
                       "pre_tokenizer.pretokenizers[1].prepend_scheme: unknown field"));
  EXPECT_TRUE(contains(refused([](json& j) { j["chat_template"] = "x"; }), "chat_template: unknown field"));
  EXPECT_TRUE(contains(refused([](json& j) { j["model"]["dropout"] = 0.1; }), "model.dropout"));
  EXPECT_TRUE(contains(refused([](json& j) { j["model"]["byte_fallback"] = true; }), "model.byte_fallback"));
  EXPECT_TRUE(contains(refused([](json& j) { j["truncation"] = {{"max_length", 8}}; }), "truncation"));
  EXPECT_TRUE(contains(refused([](json& j) { j["added_tokens"][0]["lstrip"] = true; }), "added_tokens[0].lstrip"));
  EXPECT_TRUE(contains(refused([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; }),
                       "pre_tokenizer.pretokenizers[0].behavior"));
  EXPECT_TRUE(contains(refused([](json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }),
                       "pre_tokenizer.type"));
  EXPECT_TRUE(contains(refused([](json& j) { j["post_processor"] = {{"type", "BertProcessing"}}; }),
                       "post_processor.type"));
  EXPECT_TRUE(contains(refused([](json& j) { j["decoder"] = {{"type", "Metaspace"}}; }), "decoder.type"));
  EXPECT_TRUE(contains(refused([](json& j) { j["model"]["merges"][3] = "zzzq qqqz"; }), "model.merges[3]"));
  // Values of another JSON type than the reader expects, and ids past the
  // largest vocabulary (whose id table took 64 GiB): the file and the field,
  // no escaping json::type_error or bad_alloc (found by
  // tests/fuzz/fuzz_bpe_tokenizer).
  EXPECT_TRUE(contains(refused([](json& j) { j["added_tokens"][0]["lstrip"] = "yes"; }),
                       "added_tokens[0]: a value of an unexpected JSON type"));
  EXPECT_TRUE(contains(refused([](json& j) {
                         j["post_processor"]["processors"][1]["single"][0]["SpecialToken"]["id"] = 5;
                       }),
                       "post_processor.processors[1].single[0]: a value of an unexpected JSON type"));
  EXPECT_TRUE(contains(refused([](json& j) { j["pre_tokenizer"]["pretokenizers"][0] = 3; }),
                       "pre_tokenizer.pretokenizers[0]: a value of an unexpected JSON type"));
  EXPECT_TRUE(contains(refused([](json& j) { j["model"]["vocab"]["!"] = 2000000000; }),
                       "model.vocab: id of '!' is not an id in 0..16777215"));
  EXPECT_TRUE(contains(refused([](json& j) { j["added_tokens"][0]["id"] = 1u << 24; }),
                       "added_tokens[0].id: 16777216 is not an id in 0..16777215"));
  EXPECT_TRUE(contains(refused([](json& j) {
                         j["post_processor"]["processors"][1]["special_tokens"]["<|begin_of_text|>"]["ids"] = {-1};
                       }),
                       "special token '<|begin_of_text|>': ids must be ids in 0..16777215, found -1"));
  EXPECT_TRUE(contains(user_error([&] { zt::load_tokenizer(kData + "/tokenizer_sample.txt"); }), "unknown kind"));
  EXPECT_TRUE(contains(user_error([&] { zt::load_tokenizer(kData + "/tok_sp.model", true); }), "split_special"));
}

TEST(TokenizeText, DocumentModes) {
  using zt::DocMode;
  const std::string t = "a\nb\n\n  \nc d\n\n\ne\n";
  auto docs = [&](DocMode m) {
    std::vector<std::string> out;
    for (auto v : zt::split_documents(t, m)) out.emplace_back(v);
    return out;
  };
  EXPECT_EQ(docs(DocMode::kFile), std::vector<std::string>{t});
  EXPECT_EQ(docs(DocMode::kLine), (std::vector<std::string>{"a", "b", "  ", "c d", "e"}));
  EXPECT_EQ(docs(DocMode::kBlankLine), (std::vector<std::string>{"a\nb", "c d", "e"}));
}

TEST(TokenizeText, LongDocumentsCutOnlyWhereIdsDoNotChange) {
  // Whole-sample ids from tokenizers, reproduced with the sample cut into
  // items of 40 bytes (several cuts) on 1 and 3 threads.
  for (const char* name : {"gpt2", "llama3"}) {
    const auto tok = zt::load_tokenizer(kData + "/tok_" + name + ".json");
    const std::string whole = texts()[0];
    EXPECT_GT(zt::split_long_document(whole, 40).size(), 3u);
    for (int threads : {1, 3}) {
      zt::TokenizeOptions o;
      o.threads = threads;
      o.item_bytes = 40;
      EXPECT_EQ(zt::tokenize_texts(*tok, {whole}, o), expected()["cases"][name][0].get<std::vector<uint32_t>>())
          << name << " threads " << threads;
    }
  }
  // A cut is made only after "\n" preceded by printable ASCII, before a letter.
  const auto parts = zt::split_long_document("aaaa \nbbbb\n\ncccc.\ndddd\n 7", 2);
  std::vector<std::string> got(parts.begin(), parts.end());
  EXPECT_EQ(got, (std::vector<std::string>{"aaaa \nbbbb\n\ncccc.\n", "dddd\n 7"}));
}

TEST(TokenizeText, SameIdsForAnyThreadCountWithBosAndEos) {
  const auto tok = zt::load_tokenizer(kData + "/tok_sp.model");
  const auto all = texts();
  std::string corpus;
  for (int rep = 0; rep < 20; ++rep) corpus += all[0];
  zt::TokenizeOptions o;
  o.docs = zt::DocMode::kLine;
  o.bos = 1;
  o.eos = 2;
  o.item_bytes = 100;
  std::vector<uint32_t> want;
  for (auto doc : zt::split_documents(corpus, zt::DocMode::kLine)) {
    want.push_back(1);
    tok->encode(doc, want);
    want.push_back(2);
  }
  for (int threads : {1, 2, 5}) {
    o.threads = threads;
    int64_t last_done = -1, last_total = -1;
    o.progress = [&](int64_t done, int64_t total) { last_done = done, last_total = total; };
    EXPECT_EQ(zt::tokenize_texts(*tok, {corpus}, o), want) << threads << " threads";
    EXPECT_EQ(last_done, last_total);  // the final report covers everything
    EXPECT_GT(last_total, 0);
  }
}

// The live comparison: when `tokenizers` and `sentencepiece` are installed,
// the script recomputes the ids from the committed tokenizer files.
TEST(Tokenizers, LivePythonPackagesAgree) {
  if (std::system("python3 -c 'import tokenizers, sentencepiece' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 with tokenizers and sentencepiece is not installed: live comparison skipped";
  const std::string cmd = "python3 " + std::string(ZT_TOKENIZER_SCRIPT) + " --check";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}
