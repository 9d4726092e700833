// The GPT-2 parameter layout of a ztrain checkpoint, shared by zckpt export
// (Hugging Face names and Conv1D transposes) and zckpt logits (the model's
// sizes).
//
// Units: 0 = embedding (wte.weight (V, C), wpe.weight (T, C)), 1..L = blocks
// h.<i> (params in BlockUnit::params() order), L+1 = head (ln_f.weight,
// ln_f.bias; the LM head is the tied wte). A unit's flat buffer is its params
// concatenated. HF's Conv1D stores weights as (in, out) while ztrain's linear
// weights are (out, in), so the four 2-D block weights are transposed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/checkpoint.hpp"

namespace zckpt {

constexpr double kLayerNormEps = 1e-5;  // modules/cpu_kernels_norm.cpp and the CUDA LayerNorm

struct HfParam {
  std::string hf_name;
  std::vector<int64_t> shape;  // ztrain's (rows, cols) or (n)
  bool transpose;              // Conv1D weight: exported as (cols, rows)
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  std::vector<int64_t> hf_shape() const { return transpose ? std::vector<int64_t>{shape[1], shape[0]} : shape; }
};

struct GptLayout {
  int64_t L, NH, C, T, V;
  std::vector<std::vector<HfParam>> units;  // per checkpoint unit
};

// The layout from the manifest's config.model, checked against the units and
// sizes the checkpoint holds; UserError naming what disagrees.
GptLayout gpt_layout(const zt::CheckpointReader& reader);

}  // namespace zckpt
