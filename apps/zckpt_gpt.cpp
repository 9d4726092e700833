#include "zckpt_gpt.hpp"

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace zckpt {
namespace {

int64_t model_int(const nlohmann::json& model, const char* key) {
  if (!model.contains(key) || !model[key].is_number_integer() || model[key].get<int64_t>() <= 0)
    throw zt::UserError(std::string("checkpoint manifest: config.model.") + key + " missing or not a positive integer");
  return model[key].get<int64_t>();
}

}  // namespace

GptLayout gpt_layout(const zt::CheckpointReader& reader) {
  const nlohmann::json& m = reader.manifest();
  if (!m.contains("config") || !m["config"].contains("model"))
    throw zt::UserError("checkpoint manifest has no config.model: not a ztrain GPT checkpoint");
  const nlohmann::json& cm = m["config"]["model"];
  GptLayout md{model_int(cm, "n_layer"), model_int(cm, "n_head"), model_int(cm, "d_model"), model_int(cm, "seq_len"),
           model_int(cm, "vocab_size"), {}};
  const int64_t C = md.C;
  md.units.push_back({{"wte.weight", {md.V, C}, false}, {"wpe.weight", {md.T, C}, false}});
  for (int64_t i = 0; i < md.L; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    md.units.push_back({{h + "ln_1.weight", {C}, false},
                        {h + "ln_1.bias", {C}, false},
                        {h + "attn.c_attn.weight", {3 * C, C}, true},
                        {h + "attn.c_attn.bias", {3 * C}, false},
                        {h + "attn.c_proj.weight", {C, C}, true},
                        {h + "attn.c_proj.bias", {C}, false},
                        {h + "ln_2.weight", {C}, false},
                        {h + "ln_2.bias", {C}, false},
                        {h + "mlp.c_fc.weight", {4 * C, C}, true},
                        {h + "mlp.c_fc.bias", {4 * C}, false},
                        {h + "mlp.c_proj.weight", {C, 4 * C}, true},
                        {h + "mlp.c_proj.bias", {C}, false}});
  }
  md.units.push_back({{"ln_f.weight", {C}, false}, {"ln_f.bias", {C}, false}});
  const std::vector<int> have = reader.units();
  if (have.size() != md.units.size())
    throw zt::UserError("checkpoint has " + std::to_string(have.size()) + " units, a GPT with n_layer " +
                        std::to_string(md.L) + " has " + std::to_string(md.units.size()));
  for (size_t u = 0; u < md.units.size(); ++u) {
    int64_t n = 0;
    for (const HfParam& p : md.units[u]) n += p.numel();
    if (have[u] != static_cast<int>(u) || reader.unit_numel(static_cast<int>(u)) != n)
      throw zt::UserError("checkpoint unit " + std::to_string(u) + " (" + reader.unit_name(static_cast<int>(u)) +
                          ") has " + std::to_string(reader.unit_numel(static_cast<int>(u))) +
                          " elements, the GPT config gives " + std::to_string(n));
  }
  return md;
}

}  // namespace zckpt
