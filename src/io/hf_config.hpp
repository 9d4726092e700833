// A Hugging Face model's config.json, read as ztrain's "model" config section
// (the import of `zckpt import` and of `model.init_from`; docs/checkpoints.md,
// "Hugging Face import").
//
// [Note: Hugging Face config] Only what ztrain computes the same way is
// accepted; every field that would make the weights mean something else is a
// UserError naming config.json and the field. GPT-2 ("gpt2"): n_embd,
// n_layer, n_head, n_positions, vocab_size; the MLP width must be 4 * n_embd
// (n_inner null), the activation the tanh GELU ("gelu_new"), the LayerNorm
// epsilon ztrain's 1e-5, the head tied. Llama ("llama"): hidden_size,
// num_hidden_layers, num_attention_heads, num_key_value_heads,
// intermediate_size, rms_norm_eps, vocab_size, max_position_embeddings (the
// section's seq_len), tie_word_embeddings, and the rotary frequencies in
// either form transformers has written: rope_theta with rope_scaling
// (transformers 4) or rope_parameters {rope_type, rope_theta, ...}
// (transformers 5); rope types "default" and "llama3" only. Biases
// (attention_bias, mlp_bias), another activation than SiLU or a head_dim
// other than hidden_size / num_attention_heads are refused.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace zt {

// The "model" section ({"arch": ..., sizes and architecture keys}) that
// describes `hf` (the parsed config.json at `path`, named in errors).
nlohmann::json hf_model_section(const nlohmann::json& hf, const std::string& path);

// Reads DIR/config.json (UserError if absent or not JSON).
nlohmann::json read_hf_config(const std::string& dir);

}  // namespace zt
