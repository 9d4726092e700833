// Weights to start from: a Hugging Face model directory (config.json +
// safetensors) or a ztrain checkpoint, served as ranges of a unit's flat fp32
// buffer in ztrain's layout, so that a rank reads only the slices it owns.
// Used by `model.init_from` (a fine-tuning start: these weights, fresh
// optimizer state, step 0) and by `zckpt import`.
//
// [Note: Hugging Face tensor mapping] The model description names every
// tensor's Hugging Face name and layout (modules/model_desc.hpp). A name is
// looked up as written and with the prefix of the LM-head class that
// save_pretrained adds or drops ("transformer." for GPT-2, "model." for
// Llama). A `transposed` tensor (GPT-2's Conv1D, stored (in, out)) is read
// element by element through the transposition; the others are contiguous
// ranges. Llama's q_proj and k_proj need no permutation: ztrain's RoPE
// (modules/rope.hpp) pairs dimension i of a head with i + head_dim/2, the
// "rotate half" convention of transformers' LlamaAttention, so the rows are
// in the order Hugging Face stores them. Tensors of the files that the
// description does not read are an error (a feature ztrain would silently
// drop), except buffers that are not parameters (GPT-2's attn.bias and
// attn.masked_bias masks, rotary inv_freq) and an lm_head.weight equal by
// construction to a tied embedding.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "comm/topology.hpp"
#include "modules/model_desc.hpp"
#include "zero/zero_engine.hpp"

namespace zt {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // Fills out[0, end - begin) with elements [begin, end) of unit `unit`'s flat
  // fp32 buffer in ztrain's layout; elements at or past the unit's numel
  // (ZeRO padding) are 0.
  virtual void read(int unit, int64_t begin, int64_t end, float* out) = 0;
  virtual std::string describe() const = 0;
  virtual int64_t bytes_read() const = 0;
  // What the source says about itself for a checkpoint manifest: the
  // Hugging Face config.json, or the checkpoint's manifest config.
  virtual nlohmann::json origin() const = 0;
};

// Whether PATH is a Hugging Face model directory (config.json, no manifest.json).
bool is_hf_model_dir(const std::string& path);

// The "model" config section of PATH's model: a Hugging Face directory's
// config.json (src/io/hf_config.hpp) or a ztrain checkpoint's manifest.
nlohmann::json source_model_section(const std::string& path);

// Opens PATH (a Hugging Face directory, a committed step directory, or a
// checkpoint.dir whose newest complete step is used) for a model described by
// `want`; UserError naming the tensor (and the file) whose name or shape the
// source does not have, or the source's tensor that `want` cannot hold.
std::unique_ptr<WeightSource> open_weight_source(const std::string& path, const ModelDesc& want);

// Collective over the world: every rank reads its owned shards' master
// weights from `path` (only those slices), the moments stay zero, and the
// working parameters are published. An error on any rank (logged there) is a
// CollectiveError with exit code kExitBadInput on all.
void init_weights_from(const std::string& path, const ModelDesc& desc, ZeroEngine& zero, Topology& topo);

}  // namespace zt
