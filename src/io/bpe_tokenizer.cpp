// Byte-level BPE from a Hugging Face tokenizer.json (see tokenizer.hpp).
//
// [Note: byte-level BPE pipeline] tokenizers encodes a text in these steps,
// and so does this file:
//   1. added tokens: the text is cut at every occurrence of an added token's
//      content (leftmost, then longest); those pieces become their ids;
//   2. the normalizer (none is supported: GPT-2 and Llama 3 have none);
//   3. the pre-tokeniser splits the remaining pieces: a Split step cuts with a
//      regex, keeping both the matches and the text between them
//      ("Isolated"); ByteLevel prepends a space to each piece that lacks one
//      (add_prefix_space), splits with GPT-2's regex (use_regex), and maps
//      every byte to a printable unicode character (GPT-2's bytes_to_unicode);
//   4. each piece is merged by BPE: start from its characters, repeatedly
//      merge the adjacent pair of lowest merge rank (leftmost first), look
//      the final symbols up in the vocabulary. With ignore_merges, a piece
//      that is itself in the vocabulary is taken whole (Llama 3).
// The regexes use Unicode classes (\p{L}, \p{N}, \s); PCRE2 evaluates them
// with PCRE2_UTF | PCRE2_UCP and JIT. tokenizers uses Oniguruma; the two
// gave the same ids on the test sample (every script and whitespace kind in
// it) and on 8 MB of Python sources (docs/data.md). They could still differ
// on characters whose Unicode properties their tables disagree on (a newer
// Unicode version in one of them).
// 8-bit code units: the regexes run on UTF-8 bytes.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <fstream>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "core/error.hpp"
#include "io/tokenizer.hpp"

namespace zt {
namespace {

using json = nlohmann::json;

// The pre-tokeniser regex of GPT-2 (tokenizers' ByteLevel with use_regex).
const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama 3's Split pattern (also tiktoken's cl100k_base).
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Appends code point `cp` as UTF-8.
void put_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the
// other 68 bytes for U+0100.. in byte order, so every byte is one visible char.
std::vector<uint32_t> byte_to_codepoint() {
  std::vector<uint32_t> cp(256, 0);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    cp[b] = printable ? b : next++;
  }
  return cp;
}

// A compiled regex, shared by threads (match data is per call).
struct Regex {
  pcre2_code* code = nullptr;
  std::string pattern;
  Regex() = default;
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  ~Regex() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

std::unique_ptr<Regex> compile_regex(const std::string& pattern, const std::string& where) {
  auto re = std::make_unique<Regex>();
  re->pattern = pattern;
  int err = 0;
  PCRE2_SIZE offset = 0;
  re->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &err,
                           &offset, nullptr);
  if (re->code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    ZT_USER_ERROR(where, ": cannot compile the regex /", pattern, "/ at offset ", offset, ": ",
                  reinterpret_cast<const char*>(msg));
  }
  // JIT is an optimisation: without it (a build lacking JIT) matching is
  // slower but the same.
  pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE);
  return re;
}

// Per-thread PCRE2 match state: match data and a JIT stack large enough for
// long runs of whitespace.
struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  MatchState() {
    data = pcre2_match_data_create(4, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

// Splits `text` by `re` as tokenizers' Split with behavior "Isolated": every
// match is a piece, and so is every non-empty stretch between matches.
// `text` is valid UTF-8 (checked once per encode call).
void split_isolated(const Regex& re, std::string_view text, std::vector<std::string_view>& out) {
  MatchState& st = match_state();
  size_t pos = 0, last = 0;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  while (pos < text.size()) {
    const int rc = pcre2_match(re.code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, st.data, st.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof(msg));
      ZT_USER_ERROR("tokenizer: regex /", re.pattern, "/ failed at byte ", pos, ": ",
                    reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    const size_t b = ov[0], e = ov[1];
    if (b > last) out.push_back(text.substr(last, b - last));
    if (e > b) {
      out.push_back(text.substr(b, e - b));
      pos = e;
    } else {
      // An empty match: step over one character (UTF-8 lead byte and its tail).
      pos = b + 1;
      while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    last = e;
  }
  if (last < text.size()) out.push_back(text.substr(last));
}

// Index of the first invalid UTF-8 byte, or npos.
size_t invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len = 0;
    uint32_t cp = 0;
    if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07;
    else return i;
    if (i + static_cast<size_t>(len) > n) return i;
    for (int k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    const uint32_t min_cp = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += static_cast<size_t>(len);
  }
  return std::string_view::npos;
}

struct PreStep {
  enum Kind { kSplit, kByteLevel } kind;
  std::unique_ptr<Regex> regex;  // Split's pattern, or GPT-2's for ByteLevel with use_regex
  bool add_prefix_space = false;
};

struct AddedToken {
  std::string content;
  uint32_t id;
  bool special;
  bool normalized;  // matched after the normalizer (a second pass), as tokenizers does
};

// Added tokens by their first byte, longest first.
using AddedIndex = std::vector<std::vector<const AddedToken*>>;

struct MergeInfo {
  uint32_t rank;
  uint32_t merged;
};

// Cuts `text` at the tokens of `index`, leftmost first and longest at a
// position (tokenizers' leftmost-longest Aho-Corasick): appends their ids,
// and hands the text between them to `rest`.
template <typename Rest>
void split_added(std::string_view text, const AddedIndex& index, std::vector<uint32_t>& out, Rest&& rest) {
  size_t start = 0, i = 0;
  if (!index.empty()) {
    while (i < text.size()) {
      const AddedToken* hit = nullptr;
      for (const AddedToken* t : index[static_cast<unsigned char>(text[i])]) {
        if (text.compare(i, t->content.size(), t->content) == 0) {
          hit = t;
          break;
        }
      }
      if (hit == nullptr) {
        ++i;
        continue;
      }
      if (i > start) rest(text.substr(start, i - start));
      out.push_back(hit->id);
      i += hit->content.size();
      start = i;
    }
  }
  if (start < text.size()) rest(text.substr(start));
}

// Serial numbers of tokenizers: the per-thread piece cache is keyed by them,
// not by address, since a new tokenizer may be allocated where a destroyed
// one was.
std::atomic<uint64_t> next_serial{1};

class BpeTokenizerImpl final : public BpeTokenizer {
 public:
  BpeTokenizerImpl(const std::string& path, bool split_special);

  std::string kind() const override { return "byte-level BPE (tokenizer.json)"; }
  int64_t vocab_size() const override { return vocab_size_; }
  void encode(std::string_view text, std::vector<uint32_t>& out) const override;
  std::string decode(const std::vector<uint32_t>& ids) const override;
  std::optional<uint32_t> token_id(const std::string& token) const override;
  std::optional<uint32_t> default_bos() const override { return bos_; }
  std::optional<uint32_t> default_eos() const override { return eos_; }
  bool splits_at_lines() const override { return splits_at_lines_; }
  const std::vector<uint32_t>& template_prefix() const override { return prefix_; }
  const std::vector<uint32_t>& template_suffix() const override { return suffix_; }

 private:
  [[noreturn]] void fail(const std::string& field, const std::string& why) const {
    ZT_USER_ERROR("tokenizer '", path_, "': ", field, ": ", why);
  }
  // Refuses, by name, a field of `obj` outside `known`.
  void check_keys(const json& obj, const std::string& field, std::initializer_list<const char*> known) const {
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      if (std::find_if(known.begin(), known.end(), [&](const char* k) { return it.key() == k; }) == known.end())
        fail(field.empty() ? it.key() : field + "." + it.key(), "unknown field");
    }
  }
  void parse_model(const json& m);
  void parse_added(const json& a);
  void parse_pre_tokenizer(const json& p, const std::string& field);
  void parse_post_processor(const json& p, const std::string& field);
  void encode_ordinary(std::string_view text, std::vector<uint32_t>& out) const;
  void bpe_piece(std::string_view piece, std::vector<uint32_t>& out) const;

  std::string path_;
  std::string parsing_ = "top level";  // the field being read, for [Note: tokenizer.json types]
  bool split_special_ = false;
  std::unordered_map<std::string, uint32_t> vocab_;  // byte-level strings
  std::vector<std::string> id_to_token_;             // "" for unused ids
  std::unordered_map<uint64_t, MergeInfo> merges_;   // (left id << 32 | right id)
  bool ignore_merges_ = false;
  std::vector<AddedToken> added_;                    // longest first
  AddedIndex added_raw_, added_normalized_;          // the two passes of tokenizers' AddedVocabulary
  std::vector<PreStep> pre_;
  std::vector<uint32_t> cp_of_byte_;
  std::unordered_map<uint32_t, uint8_t> byte_of_cp_;
  std::vector<std::string> byte_str_;                // bytes_to_unicode of each byte, UTF-8
  std::vector<int64_t> byte_id_;                     // vocabulary id of each byte's char, -1 if none
  std::vector<uint32_t> prefix_, suffix_;
  std::optional<uint32_t> bos_, eos_;
  bool splits_at_lines_ = false;
  int64_t vocab_size_ = 0;
  uint64_t serial_;  // for the per-thread piece cache
};

// Ids at or above this are refused: 2^24, the largest model.vocab_size of the
// run config; the reader sizes its id tables by the largest id.
constexpr uint64_t kMaxTokenizerVocab = uint64_t{1} << 24;

const json* member(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

BpeTokenizerImpl::BpeTokenizerImpl(const std::string& path, bool split_special)
    : path_(path), split_special_(split_special), serial_(next_serial++) {
  std::ifstream in(path, std::ios::binary);
  if (!in) ZT_USER_ERROR("tokenizer '", path, "': cannot open for reading");
  json j;
  try {
    j = json::parse(in);
  } catch (const std::exception& e) {
    ZT_USER_ERROR("tokenizer '", path, "': not valid JSON: ", e.what());
  }
  if (!j.is_object()) fail("top level", "expected a JSON object");
  cp_of_byte_ = byte_to_codepoint();
  byte_str_.resize(256);
  for (uint32_t b = 0; b < 256; ++b) {
    byte_of_cp_[cp_of_byte_[b]] = static_cast<uint8_t>(b);
    put_utf8(cp_of_byte_[b], byte_str_[b]);
  }

  // Anything that changes the ids and is not implemented is refused by name,
  // and so is any field this reader does not know.
  // [Note: tokenizer.json types] The readers below check the types of what
  // they use; a value of another type that slips past them (nlohmann's
  // value() and get() throw json::type_error) is still a UserError naming
  // the file and the innermost field being read (parsing_).
  try {
    check_keys(j, "", {"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer", "model",
                        "post_processor", "decoder"});
    if (member(j, "truncation")) fail("truncation", "truncation is not supported (expected null)");
    if (member(j, "padding")) fail("padding", "padding is not supported (expected null)");
    parsing_ = "normalizer";
    if (const json* n = member(j, "normalizer"))
      fail("normalizer.type", "normalizer '" + n->value("type", std::string("?")) +
                                  "' is not supported (byte-level BPE files of GPT-2 and Llama 3 have none)");
    const json* model = member(j, "model");
    if (!model || !model->is_object()) fail("model", "missing");
    parse_model(*model);
    if (const json* a = member(j, "added_tokens")) parse_added(*a);
    const json* pre = member(j, "pre_tokenizer");
    if (!pre) fail("pre_tokenizer", "missing: a byte-level BPE needs a ByteLevel pre-tokenizer");
    parse_pre_tokenizer(*pre, "pre_tokenizer");
    if (pre_.empty() || pre_.back().kind != PreStep::kByteLevel)
      fail("pre_tokenizer", "the last step must be ByteLevel (only byte-level BPE is supported)");
    if (const json* p = member(j, "post_processor")) parse_post_processor(*p, "post_processor");
    parsing_ = "decoder";
    if (const json* d = member(j, "decoder")) {
      const std::string type = d->value("type", std::string("?"));
      if (type != "ByteLevel")
        fail("decoder.type", "decoder '" + type + "' is not supported (expected ByteLevel)");
    }
  } catch (const json::exception& e) {
    fail(parsing_, std::string("a value of an unexpected JSON type: ") + e.what());
  }

  // vocab_size: one more than the largest id of the vocabulary and added tokens.
  int64_t mx = -1;
  for (const auto& [s, id] : vocab_) mx = std::max<int64_t>(mx, id);
  for (const auto& a : added_) mx = std::max<int64_t>(mx, a.id);
  vocab_size_ = mx + 1;
  id_to_token_.assign(static_cast<size_t>(vocab_size_), std::string());
  for (const auto& [s, id] : vocab_) id_to_token_[id] = s;
  byte_id_.assign(256, -1);
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(byte_str_[static_cast<size_t>(b)]);
    if (it != vocab_.end()) byte_id_[static_cast<size_t>(b)] = it->second;
  }

  // Line splitting is proven safe for the two known patterns only, and only
  // when no added token contains a newline.
  bool known = true;
  for (const auto& s : pre_) {
    if (s.regex && s.regex->pattern != kGpt2Pattern && s.regex->pattern != kLlama3Pattern) known = false;
    if (s.kind == PreStep::kByteLevel && s.add_prefix_space) known = false;
  }
  for (const auto& a : added_)
    if (a.content.find('\n') != std::string::npos) known = false;
  splits_at_lines_ = known;

  for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<|eot_id|>"}) {
    if (auto id = token_id(name)) {
      eos_ = id;
      break;
    }
  }
}

void BpeTokenizerImpl::parse_model(const json& m) {
  parsing_ = "model";
  const std::string type = m.value("type", std::string());
  if (type != "BPE")
    fail("model.type", "model type '" + type + "' is not supported (only BPE; WordPiece, Unigram and WordLevel are not)");
  // unk_token and fuse_unk never act: every byte has a token (checked per byte).
  check_keys(m, "model", {"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk",
                          "byte_fallback", "ignore_merges", "vocab", "merges"});
  if (const json* d = member(m, "dropout")) {
    if (!d->is_number() || d->get<double>() != 0.0) fail("model.dropout", "BPE dropout is not supported (expected null)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const json* v = member(m, key)) {
      if (!v->is_string() || !v->get<std::string>().empty())
        fail(std::string("model.") + key, "is not supported with byte-level BPE (expected null)");
    }
  }
  if (const json* b = member(m, "byte_fallback")) {
    if (!b->is_boolean()) fail("model.byte_fallback", "expected a boolean");
    if (b->get<bool>()) fail("model.byte_fallback", "byte_fallback = true is not supported (byte-level BPE has every byte)");
  }
  if (const json* im = member(m, "ignore_merges")) {
    if (!im->is_boolean()) fail("model.ignore_merges", "expected a boolean");
    ignore_merges_ = im->get<bool>();
  }
  const json* v = member(m, "vocab");
  if (!v || !v->is_object()) fail("model.vocab", "missing or not an object");
  for (auto it = v->begin(); it != v->end(); ++it) {
    if (!it.value().is_number_unsigned() || it.value().get<uint64_t>() >= kMaxTokenizerVocab)
      fail("model.vocab", "id of '" + it.key() + "' is not an id in 0.." + std::to_string(kMaxTokenizerVocab - 1) +
                              " (the largest vocabulary a model may have)");
    vocab_[it.key()] = it.value().get<uint32_t>();
  }
  const json* mg = member(m, "merges");
  if (!mg || !mg->is_array()) fail("model.merges", "missing or not an array");
  uint32_t rank = 0;
  for (const json& e : *mg) {
    std::string a, b;
    if (e.is_string()) {  // "a b" (older files)
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        fail("model.merges[" + std::to_string(rank) + "]", "expected two tokens separated by one space, got '" + s + "'");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {  // ["a", "b"]
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      fail("model.merges[" + std::to_string(rank) + "]", "expected \"a b\" or [\"a\", \"b\"]");
    }
    auto ia = vocab_.find(a), ib = vocab_.find(b), im = vocab_.find(a + b);
    if (ia == vocab_.end() || ib == vocab_.end() || im == vocab_.end())
      fail("model.merges[" + std::to_string(rank) + "]", "'" + a + "' + '" + b + "': a part or the result is not in model.vocab");
    const uint64_t key = (uint64_t{ia->second} << 32) | ib->second;
    merges_.emplace(key, MergeInfo{rank, im->second});  // a repeated pair keeps its first (lowest) rank
    ++rank;
  }
}

void BpeTokenizerImpl::parse_added(const json& a) {
  if (!a.is_array()) fail("added_tokens", "expected an array");
  for (size_t i = 0; i < a.size(); ++i) {
    const json& t = a[i];
    const std::string field = "added_tokens[" + std::to_string(i) + "]";
    parsing_ = field;
    if (t.is_object())
      check_keys(t, field, {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"});
    if (!t.is_object() || !t.contains("id") || !t.contains("content") || !t["content"].is_string() ||
        !t["id"].is_number_unsigned())
      fail(field, "expected an object with an unsigned id and a string content");
    if (t["id"].get<uint64_t>() >= kMaxTokenizerVocab)
      fail(field + ".id", std::to_string(t["id"].get<uint64_t>()) + " is not an id in 0.." +
                              std::to_string(kMaxTokenizerVocab - 1) + " (the largest vocabulary a model may have)");
    for (const char* flag : {"single_word", "lstrip", "rstrip"}) {
      if (t.value(flag, false))
        fail(field + "." + flag, std::string(flag) + " = true is not supported (token '" +
                                     t["content"].get<std::string>() + "')");
    }
    const bool special = t.value("special", false);
    AddedToken tok{t["content"].get<std::string>(), t["id"].get<uint32_t>(), special, t.value("normalized", !special)};
    if (tok.content.empty()) fail(field + ".content", "empty");
    added_.push_back(tok);
  }
  std::stable_sort(added_.begin(), added_.end(),
                   [](const AddedToken& x, const AddedToken& y) { return x.content.size() > y.content.size(); });
  added_raw_.assign(256, {});
  added_normalized_.assign(256, {});
  for (const auto& t : added_) {
    if (split_special_ && t.special) continue;  // matched as plain text
    (t.normalized ? added_normalized_ : added_raw_)[static_cast<unsigned char>(t.content[0])].push_back(&t);
  }
}

void BpeTokenizerImpl::parse_pre_tokenizer(const json& p, const std::string& field) {
  parsing_ = field;
  const std::string type = p.value("type", std::string());
  if (type == "Sequence") {
    check_keys(p, field, {"type", "pretokenizers"});
    const json* list = member(p, "pretokenizers");
    if (!list || !list->is_array()) fail(field + ".pretokenizers", "expected an array");
    for (size_t i = 0; i < list->size(); ++i)
      parse_pre_tokenizer((*list)[i], field + ".pretokenizers[" + std::to_string(i) + "]");
    return;
  }
  if (!pre_.empty() && pre_.back().kind == PreStep::kByteLevel)
    fail(field, "a step after ByteLevel is not supported (ByteLevel must be last)");
  if (type == "Split") {
    check_keys(p, field, {"type", "pattern", "behavior", "invert"});
    const std::string behavior = p.value("behavior", std::string());
    if (behavior != "Isolated")
      fail(field + ".behavior", "Split behavior '" + behavior + "' is not supported (only Isolated)");
    if (p.value("invert", false)) fail(field + ".invert", "invert = true is not supported");
    const json* pat = member(p, "pattern");
    if (!pat || !pat->is_object()) fail(field + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
    std::string regex;
    if (pat->contains("Regex") && (*pat)["Regex"].is_string()) {
      regex = (*pat)["Regex"].get<std::string>();
    } else if (pat->contains("String") && (*pat)["String"].is_string()) {
      const std::string lit = (*pat)["String"].get<std::string>();
      if (lit.find("\\E") != std::string::npos) fail(field + ".pattern.String", "contains \\E");
      regex = "\\Q" + lit + "\\E";
    } else {
      fail(field + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
    }
    PreStep s{PreStep::kSplit, compile_regex(regex, "tokenizer '" + path_ + "': " + field + ".pattern"), false};
    pre_.push_back(std::move(s));
  } else if (type == "ByteLevel") {
    // trim_offsets changes only offsets, never ids.
    check_keys(p, field, {"type", "add_prefix_space", "trim_offsets", "use_regex"});
    PreStep s{PreStep::kByteLevel, nullptr, p.value("add_prefix_space", false)};
    if (p.value("use_regex", true)) s.regex = compile_regex(kGpt2Pattern, "ByteLevel");
    pre_.push_back(std::move(s));
  } else {
    fail(field + ".type", "pre-tokenizer '" + type + "' is not supported (Split, ByteLevel, Sequence of them)");
  }
}

void BpeTokenizerImpl::parse_post_processor(const json& p, const std::string& field) {
  parsing_ = field;
  const std::string type = p.value("type", std::string());
  if (type == "Sequence") {
    check_keys(p, field, {"type", "processors"});
    const json* list = member(p, "processors");
    if (!list || !list->is_array()) fail(field + ".processors", "expected an array");
    for (size_t i = 0; i < list->size(); ++i)
      parse_post_processor((*list)[i], field + ".processors[" + std::to_string(i) + "]");
  } else if (type == "ByteLevel") {
    // Changes only offsets (trim_offsets), never ids.
    check_keys(p, field, {"type", "add_prefix_space", "trim_offsets", "use_regex"});
  } else if (type == "TemplateProcessing") {
    // Only `single` matters: zdata never encodes pairs.
    check_keys(p, field, {"type", "single", "pair", "special_tokens"});
    const json* single = member(p, "single");
    const json* specials = member(p, "special_tokens");
    if (!single || !single->is_array()) fail(field + ".single", "expected an array");
    bool seen_a = false;
    for (size_t i = 0; i < single->size(); ++i) {
      const json& item = (*single)[i];
      const std::string f = field + ".single[" + std::to_string(i) + "]";
      parsing_ = f;
      if (item.contains("Sequence")) {
        if (item["Sequence"].value("id", std::string()) != "A" || seen_a) fail(f, "expected one Sequence A");
        seen_a = true;
      } else if (item.contains("SpecialToken")) {
        const std::string name = item["SpecialToken"].value("id", std::string());
        if (!specials || !specials->contains(name) || !(*specials)[name].contains("ids"))
          fail(f, "special token '" + name + "' is not in " + field + ".special_tokens");
        for (const json& id : (*specials)[name]["ids"]) {
          if (!id.is_number_unsigned() || id.get<uint64_t>() >= kMaxTokenizerVocab)
            fail(f, "special token '" + name + "': ids must be ids in 0.." + std::to_string(kMaxTokenizerVocab - 1) +
                        ", found " + id.dump());
          (seen_a ? suffix_ : prefix_).push_back(id.get<uint32_t>());
        }
      } else {
        fail(f, "expected Sequence or SpecialToken");
      }
    }
    if (!seen_a) fail(field + ".single", "no Sequence A");
    if (!prefix_.empty()) bos_ = prefix_.front();
  } else {
    fail(field + ".type", "post-processor '" + type + "' is not supported (ByteLevel, TemplateProcessing, Sequence)");
  }
}

std::optional<uint32_t> BpeTokenizerImpl::token_id(const std::string& token) const {
  for (const auto& a : added_)
    if (a.content == token) return a.id;
  auto it = vocab_.find(token);
  if (it != vocab_.end()) return it->second;
  return std::nullopt;
}

void BpeTokenizerImpl::encode(std::string_view text, std::vector<uint32_t>& out) const {
  const size_t bad = invalid_utf8(text);
  if (bad != std::string_view::npos)
    ZT_USER_ERROR("tokenizer: the text is not valid UTF-8 at byte ", bad, " (tokenizer.json tokenizers take Unicode text)");
  // Step 1: cut at added tokens: those with normalized = false on the raw
  // text, then (after the normalizer, none here) those with normalized = true.
  split_added(text, added_raw_, out, [&](std::string_view seg) {
    split_added(seg, added_normalized_, out, [&](std::string_view s2) { encode_ordinary(s2, out); });
  });
}

void BpeTokenizerImpl::encode_ordinary(std::string_view text, std::vector<uint32_t>& out) const {
  // Steps 3 and 4 (no normalizer).
  std::vector<std::string_view> pieces{text}, next;
  std::deque<std::string> owned;  // add_prefix_space copies (a deque keeps them in place)
  for (const PreStep& s : pre_) {
    if (s.kind == PreStep::kByteLevel && s.add_prefix_space) {
      // Per piece, as tokenizers does.
      for (auto& p : pieces) {
        if (!p.empty() && p[0] != ' ') {
          owned.push_back(" " + std::string(p));
          p = owned.back();
        }
      }
    }
    if (!s.regex) continue;
    next.clear();
    for (std::string_view p : pieces) split_isolated(*s.regex, p, next);
    pieces.swap(next);
  }
  for (std::string_view p : pieces) bpe_piece(p, out);
}

// Per-thread cache of piece -> ids; words repeat a lot in natural text.
struct PieceCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<uint32_t>> map;
};

void BpeTokenizerImpl::bpe_piece(std::string_view piece, std::vector<uint32_t>& out) const {
  if (piece.empty()) return;
  thread_local PieceCache cache;
  if (cache.owner != serial_) {
    cache.map.clear();
    cache.owner = serial_;
  }
  const bool cacheable = piece.size() <= 64;
  if (cacheable) {
    auto it = cache.map.find(std::string(piece));
    if (it != cache.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<uint32_t> syms;
  syms.reserve(piece.size());
  bool whole = false;
  if (ignore_merges_) {
    std::string mapped;
    for (char c : piece) mapped += byte_str_[static_cast<unsigned char>(c)];
    auto it = vocab_.find(mapped);
    if (it != vocab_.end()) {
      syms.push_back(it->second);
      whole = true;
    }
  }
  if (!whole) {
    for (char c : piece) {
      const int64_t id = byte_id_[static_cast<unsigned char>(c)];
      if (id < 0)
        ZT_USER_ERROR("tokenizer '", path_, "': byte ", static_cast<int>(static_cast<unsigned char>(c)),
                      " has no token in model.vocab (not a complete byte-level vocabulary)");
      syms.push_back(static_cast<uint32_t>(id));
    }
    // Merge the lowest-rank adjacent pair, leftmost on ties, until none is
    // left: the order of tokenizers' priority queue of (rank, position).
    while (syms.size() > 1) {
      uint32_t best_rank = std::numeric_limits<uint32_t>::max(), best_to = 0;
      size_t best = 0;
      for (size_t k = 0; k + 1 < syms.size(); ++k) {
        auto it = merges_.find((uint64_t{syms[k]} << 32) | syms[k + 1]);
        if (it != merges_.end() && it->second.rank < best_rank) {
          best_rank = it->second.rank;
          best_to = it->second.merged;
          best = k;
        }
      }
      if (best_rank == std::numeric_limits<uint32_t>::max()) break;
      syms[best] = best_to;
      syms.erase(syms.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    }
  }
  out.insert(out.end(), syms.begin(), syms.end());
  if (cacheable) {
    if (cache.map.size() > 200000) cache.map.clear();  // bounded memory on odd corpora
    cache.map.emplace(std::string(piece), std::move(syms));
  }
}

std::string BpeTokenizerImpl::decode(const std::vector<uint32_t>& ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t id = ids[i];
    const AddedToken* added = nullptr;
    for (const auto& a : added_)
      if (a.id == id) added = &a;
    if (added != nullptr) {
      out += added->content;
      continue;
    }
    if (id >= id_to_token_.size() || id_to_token_[id].empty())
      ZT_USER_ERROR("tokenizer '", path_, "': id ", id, " at position ", i, " is not in the vocabulary");
    // Map each code point of the byte-level string back to its byte.
    const std::string& s = id_to_token_[id];
    for (size_t k = 0; k < s.size();) {
      const auto c = static_cast<unsigned char>(s[k]);
      uint32_t cp;
      int len;
      if (c < 0x80) cp = c, len = 1;
      else if ((c & 0xE0) == 0xC0) cp = c & 0x1F, len = 2;
      else if ((c & 0xF0) == 0xE0) cp = c & 0x0F, len = 3;
      else cp = c & 0x07, len = 4;
      for (int m = 1; m < len && k + static_cast<size_t>(m) < s.size(); ++m)
        cp = (cp << 6) | (static_cast<unsigned char>(s[k + static_cast<size_t>(m)]) & 0x3F);
      k += static_cast<size_t>(len);
      auto it = byte_of_cp_.find(cp);
      if (it == byte_of_cp_.end())
        ZT_USER_ERROR("tokenizer '", path_, "': token ", id, " has a character outside the byte-level alphabet");
      out += static_cast<char>(it->second);
    }
  }
  return out;
}

}  // namespace

std::unique_ptr<BpeTokenizer> load_bpe_tokenizer(const std::string& path, bool split_special) {
  return std::make_unique<BpeTokenizerImpl>(path, split_special);
}

}  // namespace zt
