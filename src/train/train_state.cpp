#include "train/train_state.hpp"

#include <algorithm>

#include "core/log.hpp"
#include "modules/model_desc.hpp"

namespace zt {

nlohmann::json state_json(const TrainState& s, const Config& cfg, const SavedLayout& layout,
                          const LrSchedule& schedule, const LossScaler* scaler) {
  nlohmann::json j = {{"step", s.step},
                      {"applied_steps", s.applied},
                      {"sampler", {{"seed", cfg.train.seed}, {"step", s.step}}},
                      {"lr", schedule.lr_at(s.applied)},
                      {"topology",
                       {{"world", layout.world},
                        {"pp", layout.pp},
                        {"num_chunks", layout.num_chunks},
                        {"dp", layout.dp},
                        {"zero_stage", cfg.zero.stage}}},
                      {"config", resolved_json(cfg)},
                      {"model", model_record(cfg.model)}};
  if (scaler) {
    const LossScalerState ls = scaler->state();
    j["loss_scaler"] = {{"scale", ls.scale},
                        {"iteration", ls.iteration},
                        {"last_overflow_iteration", ls.last_overflow_iteration},
                        {"hysteresis_left", ls.hysteresis_left}};
  }
  return j;
}

nlohmann::json model_record(const ModelConfig& model) {
  Config c;
  c.model = model;
  nlohmann::json hp = resolved_json(c)["model"];
  for (const char* k : {"activation_checkpointing", "recompute_layers", "preset", "init_from"}) hp.erase(k);
  nlohmann::json tensors = nlohmann::json::array();
  for (const UnitDesc& u : describe_model(model).units)
    for (const TensorDesc& t : u.tensors) {
      std::vector<int64_t> shape;
      for (int d = 0; d < t.shape.rank(); ++d) shape.push_back(t.shape[d]);
      tensors.push_back({u.name + "/" + t.name, shape});
    }
  return {{"hyperparameters", hp}, {"tensors", tensors}};
}

std::string model_record_difference(const nlohmann::json& manifest, const nlohmann::json& mine) {
  nlohmann::json saved;
  if (manifest.contains("model")) {
    saved = manifest["model"];
  } else if (manifest.contains("config") && manifest["config"].contains("model")) {
    nlohmann::json section = manifest["config"]["model"];
    section.erase("init_from");
    try {
      saved = model_record(parse_config(nlohmann::json{{"model", section}}, "the checkpoint's config.model").model);
    } catch (const std::exception& e) {
      return std::string("its config.model does not describe a model this version knows: ") + e.what();
    }
  } else {
    return "its manifest describes no model (no \"model\", no config.model)";
  }
  const nlohmann::json& a = saved.value("hyperparameters", nlohmann::json::object());
  const nlohmann::json& b = mine["hyperparameters"];
  if (a.value("arch", "") != b.value("arch", ""))
    return "model.arch is " + a.value("arch", nlohmann::json()).dump() + " there, " + b["arch"].dump() + " in this run";
  const nlohmann::json ta = saved.value("tensors", nlohmann::json::array());
  const nlohmann::json& tb = mine["tensors"];
  for (size_t i = 0; i < std::max(ta.size(), tb.size()); ++i) {
    if (i >= ta.size()) return "tensor " + tb[i][0].get<std::string>() + " of this run is not there";
    if (i >= tb.size()) return "its tensor " + ta[i][0].dump() + " is not in this run's model";
    if (ta[i] != tb[i])
      return "tensor " + std::to_string(i) + " is " + ta[i][0].dump() + " of shape " + ta[i][1].dump() +
             " there, " + tb[i][0].dump() + " of shape " + tb[i][1].dump() + " in this run";
  }
  for (const auto& [key, value] : b.items())
    if (!a.contains(key) || a[key] != value)
      return "model." + key + " is " + (a.contains(key) ? a[key].dump() : std::string("absent")) + " there, " +
             value.dump() + " in this run";
  for (const auto& [key, value] : a.items())
    if (!b.contains(key)) return "model." + key + " is " + value.dump() + " there, absent in this run";
  return "";
}

TrainState load_state(const nlohmann::json& st, const Config& cfg, LossScaler* scaler) {
  TrainState s;
  s.step = st.at("step").get<int64_t>();
  s.applied = st.at("applied_steps").get<int64_t>();
  const uint64_t seed = st.at("sampler").at("seed").get<uint64_t>();
  if (seed != cfg.train.seed)
    log_warn("resuming with train.seed ", cfg.train.seed, " where the checkpoint used ", seed,
             ": the data order changes");
  if (scaler && st.contains("loss_scaler")) {
    const nlohmann::json& l = st.at("loss_scaler");
    scaler->load_state(LossScalerState{l.at("scale").get<double>(), l.at("iteration").get<int64_t>(),
                                       l.at("last_overflow_iteration").get<int64_t>(),
                                       l.at("hysteresis_left").get<int>()});
  }
  return s;
}

}  // namespace zt
