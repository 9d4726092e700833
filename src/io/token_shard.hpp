// Token shards in llm.c's format (llm.c dev/data/data_common.py, version 1):
//
//   int32 header[256]   header[0] = 20240520 (magic), header[1] = 1 (version),
//                       header[2] = number of tokens N, the rest zero
//   uint16 tokens[N]    little-endian GPT-2-style token ids
//
// so shards made by llm.c's scripts and by `zdata` are interchangeable. A
// shard is opened read-only through mmap: the trainer touches only the
// windows it samples, and the page cache is shared by the ranks of a node.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zt {

constexpr int32_t kTokenShardMagic = 20240520;
constexpr int32_t kTokenShardVersion = 1;
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
  const uint16_t* tokens() const { return tokens_; }   // size() tokens
  int max_token() const { return max_token_; }         // -1 when empty

  // Throws UserError naming the file, the position and the value of the first
  // token >= vocab_size. O(1) when every token fits (the maximum is known).
  void validate_vocab(int vocab_size) const;

 private:
  std::string path_;
  void* map_ = nullptr;  // whole file, header included
  int64_t map_bytes_ = 0;
  const uint16_t* tokens_ = nullptr;
  int64_t num_tokens_ = 0;
  int max_token_ = -1;
};

// Writes `tokens` as a shard at `path`: to `path.tmp` first, then renamed, so a
// reader never sees a half-written shard. Throws UserError when the file cannot
// be written or the tokens exceed the header's int32 count.
void write_token_shard(const std::string& path, const std::vector<uint16_t>& tokens);

}  // namespace zt
