// A SentencePiece .model file (io/tokenizer.hpp, load_sentencepiece_tokenizer,
// through libsentencepiece): the whole input is the file. A model that loads
// encodes and decodes a fixed text.
#include <cstddef>
#include <cstdint>

#include "core/error.hpp"
#include "fuzz_util.hpp"
#include "io/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      zt::fuzz::write_file("tokenizer.model", std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    const std::unique_ptr<zt::Tokenizer> tok = zt::load_sentencepiece_tokenizer(path);
    std::vector<uint32_t> ids;
    tok->encode("Hello world, \xc3\xa9t\xc3\xa9 123", ids);
    (void)tok->decode(ids);
    (void)tok->token_id("<s>");
    (void)tok->default_bos();
    (void)tok->default_eos();
    (void)tok->vocab_size();
  } catch (const zt::UserError&) {
  }
  return 0;
}
