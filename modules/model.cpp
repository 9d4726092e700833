#include "modules/model.hpp"

#include "core/error.hpp"
#include "modules/gpt.hpp"
#include "modules/llama.hpp"

namespace zt {

Model::Model(ModelDesc desc, std::vector<std::unique_ptr<Unit>> units)
    : desc_(std::move(desc)), units_(std::move(units)) {
  for (const auto& u : units_) views_.push_back(u.get());
}

Model build_model(const ModelDesc& desc) {
  if (desc.arch() == "gpt2") return Model(desc, gpt2_units(desc));
  if (desc.arch() == "llama") return Model(desc, llama_units(desc));
  ZT_USER_ERROR("model ", desc.shape.name, ": ztrain cannot build architecture \"", desc.arch(),
                "\"; it builds \"gpt2\" and \"llama\"");
}

}  // namespace zt
