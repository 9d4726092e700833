// Tokenizers of published models, for `zdata tokenize`:
//
//   BpeTokenizer  a Hugging Face `tokenizer.json` with a byte-level BPE model
//                 (GPT-2, Llama 3 and models trained like them): added and
//                 special tokens, the pre-tokeniser's split pattern (PCRE2
//                 with UTF and Unicode properties), merges by rank, the
//                 byte-to-unicode alphabet, `ignore_merges`.
//   SpTokenizer   a SentencePiece `.model` file (Llama 2), through the
//                 sentencepiece library.
//
// Both give the ids the `tokenizers` / `sentencepiece` Python packages give:
// tests/io/test_tokenizers.cpp checks them against ids those packages wrote
// (tests/io/make_tokenizer_refs.py). Every feature of a tokenizer.json that is
// not implemented is refused at load time by a UserError naming the field, so
// a file is never half understood.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zt {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // "byte-level BPE (tokenizer.json)" or "SentencePiece (.model)", for logs.
  virtual std::string kind() const = 0;
  // One more than the largest id (the model's vocab_size must be at least this).
  virtual int64_t vocab_size() const = 0;
  // Appends the ids of `text` to `out`, without the BOS/EOS a sequence gets
  // (tokenizers: encode(text, add_special_tokens=False); sentencepiece:
  // encode(text)). Thread-safe: zdata calls it from several threads.
  virtual void encode(std::string_view text, std::vector<uint32_t>& out) const = 0;
  virtual std::string decode(const std::vector<uint32_t>& ids) const = 0;
  // The id of a token given by its text (an added token, or a vocabulary
  // entry), if any.
  virtual std::optional<uint32_t> token_id(const std::string& token) const = 0;
  // The BOS the format puts before each sequence (Llama 2's <s>; the special
  // token before $A in a TemplateProcessing post-processor, Llama 3's
  // <|begin_of_text|>); none when the format adds none (GPT-2).
  virtual std::optional<uint32_t> default_bos() const = 0;
  // The end-of-sequence token, when the tokenizer knows one (SentencePiece's
  // eos_id; for tokenizer.json the first of <|endoftext|>, <|end_of_text|>,
  // </s>, <|eot_id|> that exists).
  virtual std::optional<uint32_t> default_eos() const = 0;
  // True when cutting a text right after a "\n" that follows a printable
  // ASCII character and precedes an ASCII letter gives the same ids as
  // encoding it whole (true for the GPT-2 and Llama 3 split patterns, which
  // never put such a "\n" and letter in one piece nor look across it; false
  // for SentencePiece, whose dummy prefix depends on where a text starts).
  // zdata splits long documents only there.
  virtual bool splits_at_lines() const = 0;
};

// By file: "*.json" is a tokenizer.json, "*.model" a SentencePiece model.
// Throws UserError naming the file for anything else or any unsupported field.
// `split_special` (tokenizer.json only): special added tokens are not
// recognised in the text but tokenised as ordinary text (tokenizers'
// encode_special_tokens = True), for corpora that quote them literally.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path, bool split_special = false);

class BpeTokenizer;
std::unique_ptr<BpeTokenizer> load_bpe_tokenizer(const std::string& path, bool split_special = false);
std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::string& path);

class BpeTokenizer : public Tokenizer {
 public:
  // The ids of the TemplateProcessing post-processor around a single sequence
  // (empty without one): encode(text, add_special_tokens=True) is
  // template_prefix() + encode(text) + template_suffix().
  virtual const std::vector<uint32_t>& template_prefix() const = 0;
  virtual const std::vector<uint32_t>& template_suffix() const = 0;
};

}  // namespace zt
