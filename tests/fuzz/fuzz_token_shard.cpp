// Token shards in llm.c's format (io/token_shard.hpp): the whole input is the
// file. A shard that opens is read to its end and checked against a
// vocabulary size taken from its length.
#include <cstddef>
#include <cstdint>

#include "core/error.hpp"
#include "fuzz_util.hpp"
#include "io/token_shard.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      zt::fuzz::write_file("shard.bin", std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    zt::TokenShard shard(path);
    uint64_t sum = 0;
    for (int64_t i = 0; i < shard.size(); ++i) sum += shard.token(i);
    if (shard.size() > 0 && sum == 0 && shard.max_token() != 0) __builtin_trap();  // max of zeros is 0
    shard.validate_vocab(1 + static_cast<int>(size % 70000));
  } catch (const zt::UserError&) {
  }
  return 0;
}
