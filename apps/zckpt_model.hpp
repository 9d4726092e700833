// The model of a ztrain checkpoint, shared by zckpt export (Hugging Face
// names and layouts) and zckpt logits (the model, built): the description
// (modules/model_desc.hpp) of the manifest's config.model, checked against
// the units the checkpoint holds. A unit's flat buffer is its description's
// tensors concatenated.
#pragma once

#include <string>

#include "io/checkpoint.hpp"
#include "modules/model_desc.hpp"

namespace zckpt {

// config.model's arch (a manifest without one is "gpt2", written before the
// key existed) and sizes, described; UserError naming the manifest key, or
// the unit whose name or element count disagrees with the checkpoint.
zt::ModelDesc checkpoint_model(const zt::CheckpointReader& reader);

// The checkpoint's files must match the SHA-256s its manifest lists (and the
// manifest its own, [Note: manifest checksum]) before a command reads it:
// zt::UserError with the first problem otherwise. HDF5 checks each dataset's
// Fletcher32 as it is read.
void require_verified(const std::string& step_dir);

}  // namespace zckpt
