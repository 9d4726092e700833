// SentencePiece models (Llama 2's tokenizer.model) through Debian's
// libsentencepiece, and load_tokenizer's choice by file name.
//
// Llama 2 (transformers' LlamaTokenizer: add_bos_token = True, add_eos_token
// = False) puts <s> before every sequence and no </s> after it; encode()
// gives the ids without either, default_bos() the <s> that zdata puts before
// each document.
#include <sentencepiece_processor.h>

#include "core/error.hpp"
#include "io/tokenizer.hpp"

namespace zt {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

class SpTokenizer final : public Tokenizer {
 public:
  explicit SpTokenizer(const std::string& path) : path_(path) {
    const auto status = sp_.Load(path);
    if (!status.ok()) ZT_USER_ERROR("tokenizer '", path, "': cannot load the SentencePiece model: ", status.ToString());
  }
  std::string kind() const override { return "SentencePiece (.model)"; }
  int64_t vocab_size() const override { return sp_.GetPieceSize(); }
  void encode(std::string_view text, std::vector<uint32_t>& out) const override {
    std::vector<int> ids;
    const auto status = sp_.Encode(text, &ids);
    if (!status.ok()) ZT_USER_ERROR("tokenizer '", path_, "': SentencePiece encode failed: ", status.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
  }
  std::string decode(const std::vector<uint32_t>& ids) const override {
    std::vector<int> v(ids.begin(), ids.end());
    std::string text;
    const auto status = sp_.Decode(v, &text);
    if (!status.ok()) ZT_USER_ERROR("tokenizer '", path_, "': SentencePiece decode failed: ", status.ToString());
    return text;
  }
  std::optional<uint32_t> token_id(const std::string& token) const override {
    const int id = sp_.PieceToId(token);
    // PieceToId answers unk_id for unknown pieces.
    if (id < 0 || (id == sp_.unk_id() && token != sp_.IdToPiece(sp_.unk_id()))) return std::nullopt;
    return static_cast<uint32_t>(id);
  }
  std::optional<uint32_t> default_bos() const override {
    if (sp_.bos_id() < 0) return std::nullopt;
    return static_cast<uint32_t>(sp_.bos_id());
  }
  std::optional<uint32_t> default_eos() const override {
    if (sp_.eos_id() < 0) return std::nullopt;
    return static_cast<uint32_t>(sp_.eos_id());
  }
  bool splits_at_lines() const override { return false; }

 private:
  std::string path_;
  sentencepiece::SentencePieceProcessor sp_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::string& path) {
  return std::make_unique<SpTokenizer>(path);
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path, bool split_special) {
  if (ends_with(path, ".json")) return load_bpe_tokenizer(path, split_special);
  if (ends_with(path, ".model")) {
    // sentencepiece never matches control pieces such as <s> in the text.
    if (split_special)
      ZT_USER_ERROR("tokenizer '", path, "': split_special applies to tokenizer.json files only (SentencePiece already "
                    "encodes <s> and </s> in the text as plain text)");
    return load_sentencepiece_tokenizer(path);
  }
  ZT_USER_ERROR("tokenizer '", path,
                "': unknown kind of file (expected a Hugging Face tokenizer.json, *.json, or a SentencePiece *.model)");
}

}  // namespace zt
