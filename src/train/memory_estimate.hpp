// Memory estimate per rank from the config alone (no allocation): a thin
// adapter from Config to the ZeRO memory estimator (zero/estimator.hpp,
// docs/memory.md), for ztrain --dry-run and --estimate-memory.
#pragma once

#include <string>

#include "core/config.hpp"
#include "zero/estimator.hpp"

namespace zt {

// The estimator's input for the config's model, dtype, micro-batch, ZeRO
// stage, buckets and offload on `world` ranks (dp = world / pipeline size).
// The batch triplet is resolved again for that dp on a copy (UserError when
// it cannot be, or when the pipeline size does not divide `world`).
EstimateInput estimate_input(const Config& cfg, int world);

struct MemoryEstimate {
  EstimateInput input;
  MemoryEstimateRow row;  // the config's own stage and offload
};

// The config as it will run with `dp_size` data-parallel ranks per stage.
MemoryEstimate estimate_memory(const Config& cfg, int dp_size);
std::string format_memory_estimate(const MemoryEstimate& e);

// ztrain --estimate-memory: the table for ZeRO stages 0-3 x offload
// none/cpu/nvme, per rank, for the config's model and batch on `world` ranks.
std::string format_estimate_table(const Config& cfg, int world);

// Opens every data file named by the config and checks its format and token
// range against the model's vocabulary (throws UserError naming the file).
void validate_data_files(const Config& cfg);

}  // namespace zt
