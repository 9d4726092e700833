#include "zckpt_model.hpp"

#include <nlohmann/json.hpp>
#include <string>

#include "core/config.hpp"
#include "core/error.hpp"
#include "io/checkpoint.hpp"

namespace zckpt {
namespace {

// The manifest's config.model read by the config layer itself (a document
// with only a model section: presets, arch and sizes checked as in a config
// file). A manifest written before model.arch existed has none: gpt2.
zt::ModelConfig manifest_model(const nlohmann::json& m, const std::string& source) {
  if (!m.contains("config") || !m["config"].is_object() || !m["config"].contains("model"))
    throw zt::UserError("checkpoint manifest has no config.model: not a ztrain checkpoint");
  return zt::parse_config(nlohmann::json{{"model", m["config"]["model"]}}, source).model;
}

}  // namespace

zt::ModelDesc checkpoint_model(const zt::CheckpointReader& reader) {
  const zt::ModelConfig mc = manifest_model(reader.manifest(), "checkpoint manifest's config");
  const zt::ModelDesc desc = zt::describe_model(mc);
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

void require_verified(const std::string& step_dir) {
  const std::vector<std::string> problems = zt::verify_checkpoint(step_dir, /*read_data=*/false);
  if (problems.empty()) return;
  std::string msg = "checkpoint " + step_dir + " does not verify: " + problems.front();
  if (problems.size() > 1) msg += " (and " + std::to_string(problems.size() - 1) + " more; zckpt verify lists them)";
  throw zt::UserError(msg);
}

}  // namespace zckpt
