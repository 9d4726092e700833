// Fine-tuning data: JSONL examples to tokens plus a loss mask (zdata
// finetune; the mask file is [Note: loss mask file] in loss_mask.hpp).
//
// [Note: fine-tuning examples] Each non-blank line of a JSONL file is one
// example, an object of exactly one of these forms:
//   prompt_completion: {"prompt": STRING, "completion": STRING}
//   chat:              {"messages": [{"role": R, "content": STRING}, ...]}
//                      R in system, user, assistant; at least one assistant
// An example becomes [BOS] + its tokens + EOS. Mask 1 (the target counts):
// the completion's tokens, an assistant message's content and its turn end,
// and the final EOS when the example ends with a completion / assistant
// message; mask 0: BOS, the prompt, system and user messages, the template's
// headers. Each piece is encoded on its own (prompt, completion, header,
// content), so a BPE merge never crosses the line between what counts and
// what does not.
//
// Chat templates (by name; others are refused):
//   llama3: <|start_header_id|>ROLE<|end_header_id|>"\n\n"CONTENT<|eot_id|>
//           per message (Llama 3 Instruct's layout, without its stripping of
//           the content or its system-date preamble); the tokenizer must have
//           those three tokens.
//   plain:  "ROLE: " then CONTENT"\n" per message, for tokenizers without
//           chat tokens (GPT-2).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/tokenizer.hpp"

namespace zt {

enum class FinetuneFormat { prompt_completion, chat };
// "prompt_completion" or "chat"; UserError naming the value otherwise.
FinetuneFormat parse_finetune_format(const std::string& name);
// The chat template names ("llama3", "plain"), for usage text.
const std::vector<std::string>& chat_template_names();

struct FinetuneOptions {
  FinetuneFormat format = FinetuneFormat::prompt_completion;
  std::string chat_template;    // chat only: a name of chat_template_names()
  std::optional<uint32_t> bos;  // before each example, when set
  uint32_t eos = 0;             // after each example
};

// Tokens and their loss mask (same length), examples concatenated.
struct MaskedTokens {
  std::vector<uint32_t> tokens;
  std::vector<uint8_t> mask;
  std::vector<size_t> example_begin;  // index of each example's first token
};

class FinetuneEncoder {
 public:
  // UserError for an unknown template, or a template whose tokens the
  // tokenizer lacks (naming them).
  FinetuneEncoder(const Tokenizer& tok, FinetuneOptions opts);
  // Appends the example of one JSONL line (already without its newline);
  // blank lines are skipped. Errors are UserErrors of the form
  // "FILE:LINE: what is wrong".
  void add_line(const std::string& line, const std::string& file, int64_t line_number, MaskedTokens& out) const;
  // Every line of `path`.
  void add_file(const std::string& path, MaskedTokens& out) const;

 private:
  void piece(const std::string& text, uint8_t counted, MaskedTokens& out) const;
  void token(uint32_t id, uint8_t counted, MaskedTokens& out) const;

  const Tokenizer& tok_;
  FinetuneOptions opts_;
  uint32_t start_header_ = 0, end_header_ = 0, eot_ = 0;  // llama3
};

}  // namespace zt
