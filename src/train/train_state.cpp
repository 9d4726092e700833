#include "train/train_state.hpp"

#include "core/log.hpp"

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
                      {"config", resolved_json(cfg)}};
  if (scaler) {
    const LossScalerState ls = scaler->state();
    j["loss_scaler"] = {{"scale", ls.scale},
                        {"iteration", ls.iteration},
                        {"last_overflow_iteration", ls.last_overflow_iteration},
                        {"hysteresis_left", ls.hysteresis_left}};
  }
  return j;
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
