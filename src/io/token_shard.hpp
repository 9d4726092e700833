// Token shards in llm.c's format (llm.c dev/data/data_common.py, HEADERS_INFO):
//
//   int32 header[256]   header[0] = magic, header[1] = version,
//                       header[2] = number of tokens N, the rest zero
//   tokens[N]           little-endian token ids:
//                         magic 20240520, version 1: uint16 ("gpt-2")
//                         magic 20240801, version 7: uint32 ("llama-3")
//
// so shards made by llm.c's scripts and by `zdata` are interchangeable. The
// reader accepts both; the writer picks uint16 when the vocabulary fits
// (<= 65536 ids) and uint32 otherwise (Llama 3's 128,256 ids), so byte-level
// and GPT-2 corpora keep their smaller files. A shard is opened read-only
// through mmap: the trainer touches only the windows it samples, and the page
// cache is shared by the ranks of a node.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zt {

constexpr int32_t kTokenShardMagic = 20240520;    // uint16 tokens
constexpr int32_t kTokenShardVersion = 1;
constexpr int32_t kTokenShardMagic32 = 20240801;  // uint32 tokens
constexpr int32_t kTokenShardVersion32 = 7;
// Largest vocabulary whose ids fit the uint16 format.
constexpr int64_t kTokenShardMaxVocab16 = 65536;
constexpr int64_t kTokenShardHeaderInts = 256;
constexpr int64_t kTokenShardHeaderBytes = kTokenShardHeaderInts * 4;  // 1024

// One memory-mapped shard. Opening validates the file completely (existence,
// header, size against the token count) and scans it once for its largest
// token, so that vocabulary checks later cost nothing. Every problem is a
// zt::UserError naming the file, what is wrong and what was expected.
// Move-only: it owns the mapping.
class TokenShard {
 public:
  explicit TokenShard(const std::string& path);
  ~TokenShard();
  TokenShard(TokenShard&& other) noexcept;
  TokenShard& operator=(TokenShard&& other) noexcept;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return num_tokens_; }         // tokens
  int token_bytes() const { return token_bytes_; }     // 2 (uint16) or 4 (uint32)
  // size() tokens; tokens() only for 2-byte shards, tokens32() only for 4-byte
  // ones (an internal error otherwise): callers branch on token_bytes().
  const uint16_t* tokens() const;
  const uint32_t* tokens32() const;
  uint32_t token(int64_t i) const {
    return token_bytes_ == 2 ? static_cast<const uint16_t*>(tokens_)[i] : static_cast<const uint32_t*>(tokens_)[i];
  }
  int64_t max_token() const { return max_token_; }     // -1 when empty

  // Throws UserError naming the file, the position and the value of the first
  // token >= vocab_size. O(1) when every token fits (the maximum is known).
  void validate_vocab(int vocab_size) const;

 private:
  std::string path_;
  void* map_ = nullptr;  // whole file, header included
  int64_t map_bytes_ = 0;
  const void* tokens_ = nullptr;
  int64_t num_tokens_ = 0;
  int token_bytes_ = 2;
  int64_t max_token_ = -1;
};

// Writes `tokens` as a shard at `path`: to `path.tmp` first, then renamed, so a
// reader never sees a half-written shard. Throws UserError when the file cannot
// be written or the tokens exceed the header's int32 count.
void write_token_shard(const std::string& path, const std::vector<uint16_t>& tokens);
// The same for ids of a vocabulary of `vocab_size`: the uint16 format when
// vocab_size <= 65536, the uint32 one otherwise. Every id must be below
// vocab_size (UserError naming the position otherwise).
void write_token_shard(const std::string& path, const std::vector<uint32_t>& tokens, int64_t vocab_size);

}  // namespace zt
