// A token corpus: the concatenation of one or more llm.c token shards (uint16
// or uint32 ids, mixed freely), or an
// in-memory vector (the embedded corpus). The sampler sees one stream of
// size() tokens; a window may span the boundary between two shards, which is
// harmless for training and keeps the sampler independent of how the data
// was split into files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/token_shard.hpp"

namespace zt {

class TokenDataset {
 public:
  // Shards in the given order. Throws UserError for an empty list or any bad
  // file (see TokenShard). A shard's loss mask (mask_path_for, [Note: loss
  // mask file]) is read when it exists; either every shard has one or none
  // does (UserError naming the first shard without one otherwise).
  static TokenDataset open(const std::vector<std::string>& paths);
  // "a.bin,b.bin,c.bin" (no globbing; empty items are ignored).
  static TokenDataset open_list(const std::string& comma_separated_paths);
  // Owns `tokens`; `name` stands in for a file name in error messages.
  static TokenDataset from_tokens(std::vector<uint16_t> tokens, std::string name = "<embedded corpus>");

  TokenDataset(TokenDataset&&) noexcept = default;
  TokenDataset& operator=(TokenDataset&&) noexcept = default;
  TokenDataset(const TokenDataset&) = delete;
  TokenDataset& operator=(const TokenDataset&) = delete;

  int64_t size() const { return total_; }  // tokens
  int64_t max_token() const;               // -1 when empty
  // File names joined by ',' (or the in-memory name), for logs.
  std::string describe() const;
  // The shards' file names in order (none for an in-memory dataset).
  std::vector<std::string> paths() const;

  // out[0..len) = tokens[start..start+len) as int32. Requires
  // 0 <= start, 0 <= len, start + len <= size() (internal error otherwise).
  void copy_window(int64_t start, int64_t len, int32_t* out) const;

  // True when the data came with loss masks (fine-tuning data).
  bool has_mask() const { return has_mask_; }
  // out[0..len) = mask[start..start+len), 1 for a stream without masks.
  // Same bounds as copy_window.
  void copy_mask(int64_t start, int64_t len, uint8_t* out) const;
  // True when every shard's loss mask records where its examples start
  // (version 2, [Note: loss mask file]): the data can be packed.
  bool has_examples() const { return has_examples_; }
  // Stream positions of the examples' first tokens, increasing, the first 0;
  // example k spans [starts[k], starts[k+1]) (the last one up to size()).
  // Empty unless has_examples().
  const std::vector<int64_t>& example_starts() const { return example_starts_; }

  // Throws UserError naming the file, the position in that file and the value
  // of the first token >= vocab_size. Free when all tokens fit (the maximum
  // is computed when the data is opened).
  void validate_vocab(int vocab_size) const;

 private:
  struct Segment {
    const void* data;
    int width;  // bytes per token: 2 or 4
    int64_t size;
    int64_t begin;  // offset of data[0] in the concatenated stream
    const uint8_t* mask;  // size entries, or nullptr without masks
  };
  TokenDataset() = default;
  void add_segment(const void* data, int width, int64_t size, const uint8_t* mask = nullptr);
  // The segment holding stream position `pos` (0 <= pos < size()).
  std::vector<Segment>::const_iterator segment_at(int64_t pos) const;

  std::vector<TokenShard> shards_;     // empty for an in-memory corpus
  std::vector<std::vector<uint8_t>> masks_;  // per shard, when has_mask_
  bool has_mask_ = false;
  bool has_examples_ = false;
  std::vector<int64_t> example_starts_;
  std::vector<uint16_t> memory_;       // the in-memory corpus
  std::string memory_name_;
  std::vector<Segment> segments_;      // non-empty pieces only, in stream order
  int64_t total_ = 0;
  int64_t max_token_ = -1;
};

// Unigram (order-0) entropy of the token frequencies, in nats: the loss of a
// model that ignores context, a baseline every trained model should beat.
double unigram_entropy_nats(const uint16_t* tokens, int64_t n);
double unigram_entropy_nats(const uint32_t* tokens, int64_t n);

}  // namespace zt
