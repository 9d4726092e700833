// Llama, described only: its units, tensors (with Hugging Face names) and
// activations as the memory estimator needs them (docs/memory.md's
// Llama-2 70B table). ztrain has no Llama units yet; build_model refuses it.
#pragma once

#include "modules/model_desc.hpp"

namespace zt {

// Llama-2 70B: 80 layers, C 8192, 64 heads, 8 KV heads, F 28672, V 32000,
// T 4096.
ModelShape llama2_70b_shape();

// Embedding (embed_tokens), n_layer blocks (RMSNorm, grouped-query attention
// with rotary positions, SwiGLU MLP), head (final RMSNorm and an untied
// lm_head); no biases.
ModelDesc describe_llama(const ModelShape& s);

}  // namespace zt
