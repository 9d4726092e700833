// A Hugging Face tokenizer.json (io/tokenizer.hpp, BpeTokenizer), as `zdata
// tokenize` and `zdata finetune` load it. Input: the file's text, then after
// a NUL byte a text to encode (with and without split_special). Ids that
// come out must be below vocab_size() and decode without error.
#include <cstddef>
#include <cstdint>

#include "core/error.hpp"
#include "fuzz_util.hpp"
#include "io/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto pieces = zt::fuzz::split_nul(data, size, 2);
  const std::string path = zt::fuzz::write_file("tokenizer.json", pieces[0]);
  const std::string_view text = pieces.size() > 1 ? pieces[1] : std::string_view("Hello world\n\nx  y 123 <|endoftext|>");
  for (const bool split_special : {false, true}) {
    try {
      const std::unique_ptr<zt::BpeTokenizer> tok = zt::load_bpe_tokenizer(path, split_special);
      std::vector<uint32_t> ids;
      tok->encode(text, ids);
      for (const uint32_t id : ids)
        if (static_cast<int64_t>(id) >= tok->vocab_size()) __builtin_trap();  // an id outside the vocabulary
      (void)tok->decode(ids);
      (void)tok->token_id("<|endoftext|>");
      (void)tok->default_bos();
      (void)tok->default_eos();
    } catch (const zt::UserError&) {
    }
  }
  return 0;
}
