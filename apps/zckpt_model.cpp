#include "zckpt_model.hpp"

#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "core/config.hpp"
#include "core/error.hpp"

namespace zckpt {
namespace {

int model_int(const nlohmann::json& model, const char* key) {
  if (!model.contains(key) || !model[key].is_number_integer() || model[key].get<int64_t>() <= 0 ||
      model[key].get<int64_t>() > std::numeric_limits<int>::max())
    throw zt::UserError(std::string("checkpoint manifest: config.model.") + key + " missing or not a positive integer");
  return static_cast<int>(model[key].get<int64_t>());
}

// The manifest's config.model as the config layer would read it; the sizes
// are always written there (resolved_json), the preset only names the model.
zt::ModelConfig manifest_model(const nlohmann::json& m) {
  if (!m.contains("config") || !m["config"].contains("model"))
    throw zt::UserError("checkpoint manifest has no config.model: not a ztrain checkpoint");
  const nlohmann::json& cm = m["config"]["model"];
  zt::ModelConfig mc;
  mc.arch = "gpt2";
  if (cm.contains("arch")) {
    if (!cm["arch"].is_string()) throw zt::UserError("checkpoint manifest: config.model.arch is not a string");
    mc.arch = cm["arch"].get<std::string>();
  }
  mc.preset = cm.contains("preset") && cm["preset"].is_string() ? cm["preset"].get<std::string>() : "";
  mc.n_layer = model_int(cm, "n_layer");
  mc.n_head = model_int(cm, "n_head");
  mc.d_model = model_int(cm, "d_model");
  mc.seq_len = model_int(cm, "seq_len");
  mc.vocab_size = model_int(cm, "vocab_size");
  return mc;
}

}  // namespace

zt::ModelDesc checkpoint_model(const zt::CheckpointReader& reader) {
  const zt::ModelConfig mc = manifest_model(reader.manifest());
  zt::ModelDesc desc;
  try {
    desc = zt::describe_model(mc);
  } catch (const zt::UserError& e) {
    throw zt::UserError(std::string("checkpoint manifest: config.") + e.what());
  }
  const std::vector<int> have = reader.units();
  const std::string model = "a " + desc.arch() + " with n_layer " + std::to_string(mc.n_layer);
  if (static_cast<int>(have.size()) != desc.num_units())
    throw zt::UserError("checkpoint has " + std::to_string(have.size()) + " units, " + model + " has " +
                        std::to_string(desc.num_units()));
  for (int u = 0; u < desc.num_units(); ++u) {
    const zt::UnitDesc& d = desc.units[static_cast<size_t>(u)];
    if (reader.unit_numel(u) < 0)
      throw zt::UserError("checkpoint has no unit " + std::to_string(u) + ", " + model + " has unit " +
                          std::to_string(u) + " (" + d.name + ")");
    if (reader.unit_name(u) != d.name || reader.unit_numel(u) != d.numel())
      throw zt::UserError("checkpoint unit " + std::to_string(u) + " (" + reader.unit_name(u) + ") has " +
                          std::to_string(reader.unit_numel(u)) + " elements, " + model + " has unit " +
                          std::to_string(u) + " (" + d.name + ") of " + std::to_string(d.numel()));
  }
  return desc;
}

}  // namespace zckpt
