#include "io/byte_tokenizer.hpp"

#include "core/error.hpp"

namespace zt {

std::vector<uint16_t> encode_bytes(std::string_view text) {
  std::vector<uint16_t> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  return out;
}

std::string decode_bytes(const std::vector<uint16_t>& tokens) {
  std::string out(tokens.size(), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= kByteVocabSize)
      ZT_USER_ERROR("byte tokenizer: token ", tokens[i], " at position ", i, " is not a byte (vocab_size 256)");
    out[i] = static_cast<char>(static_cast<unsigned char>(tokens[i]));
  }
  return out;
}

}  // namespace zt
