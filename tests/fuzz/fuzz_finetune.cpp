// Fine-tuning JSONL (io/finetune_data.hpp), as `zdata finetune` reads it.
// Input: one byte that picks the format and the tokenizer (GPT-2 with the
// plain chat template, or Llama 3 with its own, both from tests/io/data),
// then the JSONL file. What comes out must be tokens and a mask of the same
// length, with example starts inside them.
#include <cstddef>
#include <cstdint>

#include "core/error.hpp"
#include "fuzz_util.hpp"
#include "io/finetune_data.hpp"
#include "io/tokenizer.hpp"

namespace {
const zt::Tokenizer& tokenizer(bool llama3) {
  static const std::unique_ptr<zt::Tokenizer> gpt2 = zt::load_tokenizer(ZT_FUZZ_DATA_DIR "/tok_gpt2.json");
  static const std::unique_ptr<zt::Tokenizer> l3 = zt::load_tokenizer(ZT_FUZZ_DATA_DIR "/tok_llama3.json");
  return llama3 ? *l3 : *gpt2;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const bool llama3 = (mode & 2) != 0;
  const zt::Tokenizer& tok = tokenizer(llama3);
  zt::FinetuneOptions opts;
  opts.format = (mode & 1) ? zt::FinetuneFormat::chat : zt::FinetuneFormat::prompt_completion;
  opts.chat_template = llama3 ? "llama3" : "plain";
  opts.bos = tok.default_bos();
  opts.eos = tok.default_eos().value_or(0);
  const std::string path =
      zt::fuzz::write_file("data.jsonl", std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  try {
    const zt::FinetuneEncoder enc(tok, opts);
    zt::MaskedTokens out;
    enc.add_file(path, out);
    if (out.tokens.size() != out.mask.size()) __builtin_trap();
    for (const size_t b : out.example_begin)
      if (b >= out.tokens.size()) __builtin_trap();
  } catch (const zt::UserError&) {
  }
  return 0;
}
