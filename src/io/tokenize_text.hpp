// Tokenising text corpora on several threads (zdata tokenize).
//
// [Note: deterministic parallel tokenisation] The input is cut into work
// items that depend only on the text and `item_bytes`, never on the thread
// count: whole documents, grouped until an item reaches item_bytes, and a
// document longer than that cut only at the line boundaries where the
// tokenizer's ids provably do not change (Tokenizer::splits_at_lines; never
// for SentencePiece). Threads take items in any order; the ids are
// concatenated in item order. The output is therefore the same bytes for
// any thread count, and equal to encoding each document whole.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "io/tokenizer.hpp"

namespace zt {

enum class DocMode {
  kFile,       // each input file is one document
  kLine,       // each line is a document (its "\n" is dropped; empty lines are skipped)
  kBlankLine,  // documents are separated by blank lines (separators dropped)
};
DocMode parse_doc_mode(const std::string& name);  // "file", "line", "blank-line"

struct TokenizeOptions {
  DocMode docs = DocMode::kFile;
  std::optional<uint32_t> bos;  // put before every document
  std::optional<uint32_t> eos;  // put after every document
  int threads = 1;
  int64_t item_bytes = int64_t{1} << 20;
  // Called from one thread now and then with the bytes done so far and the
  // total (for a progress bar); may be empty.
  std::function<void(int64_t done, int64_t total)> progress;
};

// Documents of `text` under `mode`, as views into it.
std::vector<std::string_view> split_documents(std::string_view text, DocMode mode);

// Cuts `doc` into pieces of about `item_bytes` at the safe line boundaries of
// Tokenizer::splits_at_lines (right after "\n" that follows a printable ASCII
// byte and precedes an ASCII letter); one piece when there is none.
std::vector<std::string_view> split_long_document(std::string_view doc, int64_t item_bytes);

// The ids of the documents of `texts` (the files' contents, in order), with
// BOS/EOS as the options say.
std::vector<uint32_t> tokenize_texts(const Tokenizer& tok, const std::vector<std::string_view>& texts,
                                     const TokenizeOptions& opts);

}  // namespace zt
