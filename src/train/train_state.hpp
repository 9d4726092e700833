// The training state a checkpoint carries beside the shards: step counters,
// the sampler's key, the learning-rate position, the fp16 loss scaler, and
// the layout and config it was written with (the manifest's "state").
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "core/config.hpp"
#include "optim/loss_scaler.hpp"
#include "optim/lr_schedule.hpp"

namespace zt {

struct TrainState {
  int64_t step = 0;     // iterations taken (each consumes one global batch)
  int64_t applied = 0;  // optimizer updates made (fp16 skips some): drives the LR schedule and Adam
};

// The layout a state was saved under, for the manifest.
struct SavedLayout {
  int world = 1, pp = 1, num_chunks = 1, dp = 1;
};

nlohmann::json state_json(const TrainState& s, const Config& cfg, const SavedLayout& layout,
                          const LrSchedule& schedule, const LossScaler* scaler);

// [Note: model record] What a checkpoint's weights are: the model's
// hyperparameters (model.arch, n_layer, n_head, d_model, seq_len,
// vocab_size and the architecture's own; not activation_checkpointing,
// recompute_layers, preset or init_from) and every tensor with its shape, in the order of the
// units' flat buffers. Element counts per unit alone would let another model
// load (another n_head; vocab_size and seq_len traded so the embedding keeps
// its size).
nlohmann::json model_record(const ModelConfig& model);
// The first difference between a checkpoint's record and this run's, as a
// sentence ("" when they agree). A manifest written before the record
// ("model" absent) is compared through its config.model.
std::string model_record_difference(const nlohmann::json& manifest, const nlohmann::json& mine);

// Restores counters and the loss scaler from a checkpoint's state; warns
// when the data order will differ (another train.seed).
TrainState load_state(const nlohmann::json& state, const Config& cfg, LossScaler* scaler);

}  // namespace zt
