// Llama's description: its units, tensors (with Hugging Face names) and
// activations, what build_model builds (llama.hpp) and the memory estimator
// counts (docs/memory.md's Llama-2 70B table).
#pragma once

#include <cstdint>
#include <string>

#include "modules/model_desc.hpp"

namespace zt {

// A Llama of these sizes (the order of ModelShape's fields) with Llama 2's
// other settings: RMSNorm eps 1e-5, rotary positions with theta 10000 over
// head_dim = d_model / n_head and no scaling, lm_head untied.
ModelShape llama_shape(std::string name, int64_t n_layer, int64_t d_model, int64_t n_head, int64_t n_kv_head,
                       int64_t ffn_hidden, int64_t vocab, int64_t seq_len);

// Llama-2 70B: 80 layers, C 8192, 64 heads, 8 KV heads, F 28672, V 32000,
// T 4096.
ModelShape llama2_70b_shape();

// Embedding (embed_tokens), n_layer blocks (RMSNorm, grouped-query attention
// with rotary positions, SwiGLU MLP), head (final RMSNorm and lm_head, the
// head's own or, with tie_word_embeddings, the embedding's table); no biases.
ModelDesc describe_llama(const ModelShape& s);

}  // namespace zt
