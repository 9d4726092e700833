// Byte-level tokenizer: one token per byte (vocab 256), lossless for any file,
// with no vocabulary to ship. Used by `zdata text` for small text corpora.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zt {

constexpr int kByteVocabSize = 256;

std::vector<uint16_t> encode_bytes(std::string_view text);
// Throws UserError naming the position and value of the first token > 255
// (e.g. a sample from a model whose vocabulary is larger than 256).
std::string decode_bytes(const std::vector<uint16_t>& tokens);

}  // namespace zt
