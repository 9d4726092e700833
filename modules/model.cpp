#include "modules/model.hpp"

#include "core/error.hpp"
#include "modules/gpt.hpp"

namespace zt {

Model::Model(ModelDesc desc, std::vector<std::unique_ptr<Unit>> units)
    : desc_(std::move(desc)), units_(std::move(units)) {
  for (const auto& u : units_) views_.push_back(u.get());
}

Model build_model(const ModelDesc& desc) {
  if (desc.arch() != "gpt2")
    ZT_USER_ERROR("model ", desc.shape.name, ": architecture \"", desc.arch(),
                  "\" is described (for the memory estimate) but ztrain cannot build it; it builds \"gpt2\"");
  return Model(desc, gpt2_units(desc));
}

}  // namespace zt
