// Memory estimate per rank from the config alone (no allocation): the
// config's model description, each pipeline stage's units and micro-batches
// in flight as the trainer's partitioner and schedule make them, handed to
// the ZeRO memory estimator (zero/estimator.hpp, docs/memory.md), for ztrain
// --dry-run and --estimate-memory.
#pragma once

#include <string>
#include <vector>

#include "core/config.hpp"
#include "zero/estimator.hpp"

namespace zt {

// The estimator's input for the config's model, dtype, micro-batch, ZeRO
// stage, buckets and offload on `world` ranks (dp = world / pipeline size),
// with one StageContents per pipeline stage (plan_stage of
// pipeline.num_chunks and pipeline.partition; max_in_flight of
// pipeline.pipe_schedule_name with the resolved gradient accumulation steps
// as micro-batches). The batch triplet is resolved again for that dp on a
// copy (UserError when it cannot be, when the pipeline size does not divide
// `world`, or when the schedule refuses the micro-batches).
// `gpu`: the classifier's workspace is that of the CUDA kernels
// (ZTRAIN_CLASSIFIER's path, EstimateInput::Classifier), else CpuKernels'.
EstimateInput estimate_input(const Config& cfg, int world, bool gpu = false);

// train.classifier_chunk_mib (> 0) in bytes, at least one: the bound the
// kernels (CpuKernels, CudaKernelsOptions) and the estimator are given.
int64_t classifier_chunk_bytes(double mib);

struct MemoryEstimate {
  EstimateInput input;
  MemoryEstimateRow row;                  // the config's own stage and offload, on the stage needing most
  std::vector<MemoryEstimateRow> stages;  // the same, per pipeline stage
};

// The config as it will run with `dp_size` data-parallel ranks per stage.
MemoryEstimate estimate_memory(const Config& cfg, int dp_size, bool gpu = false);
// The row's figures; with a pipeline also each stage's units, pairs in
// flight and device total.
std::string format_memory_estimate(const MemoryEstimate& e);

// ztrain --estimate-memory: the table for ZeRO stages 0-3 x offload
// none/cpu/nvme, per rank, for the config's model and batch on `world` ranks.
std::string format_estimate_table(const Config& cfg, int world, bool gpu = false);

// Opens every data file named by the config and checks its format and token
// range against the model's vocabulary (throws UserError naming the file).
void validate_data_files(const Config& cfg);

}  // namespace zt
