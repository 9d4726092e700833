// The settings of one run that the config and the world's layout fix at
// start-up, derived once and in one place: the batch split, the storage
// dtypes, the pipeline shape and schedule, ZeRO's options, AdamW's
// hyper-parameters, the learning-rate schedule and the fp16 loss scaler.
#pragma once

#include <cstdint>
#include <optional>

#include "core/config.hpp"
#include "core/dtype.hpp"
#include "optim/adamw.hpp"
#include "optim/loss_scaler.hpp"
#include "optim/lr_schedule.hpp"
#include "pipeline/partition.hpp"
#include "pipeline/schedule.hpp"
#include "runtime/aio/aio.hpp"
#include "zero/zero_engine.hpp"

namespace zt {

struct RunOptions {
  int64_t B = 0;             // micro-batch: sequences per rank per micro-batch
  int64_t T = 0;             // sequence length
  int64_t accum = 1;         // micro-batches per step (M of the pipeline schedule)
  int64_t global_batch = 0;  // sequences per step over all ranks = B * accum * dp
  DType param_dtype = DType::f32;  // storage of the working parameters
  DType act_dtype = DType::f32;    // storage of activations
  int P = 1;  // pipeline stages
  int V = 1;  // chunks per stage
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  int group = 1;  // train.breadth_first_group ([Note: breadth-first walk] in pipeline/executor.hpp)
  PartitionKind partition = PartitionKind::parameters;
  ZeroOptions zero;
  AdamWParams adamw;
  LrScheduleSpec lr;
  std::optional<LossScalerConfig> loss_scaler;  // fp16 only
  double gradient_clipping = 0;  // max global norm; 0 = off

  int64_t tokens_per_step() const { return global_batch * T; }
};

// The options of `cfg` (batch triplet resolved) on a grid of `pp` stages of
// `dp` data-parallel ranks. Throws UserError when the schedule cannot take
// the micro-batch count.
RunOptions run_options(const Config& cfg, int dp, int pp);
// DeepSpeed's aio section and offload.aio_backend, as the NVMe swap files
// (optimizer and parameters) take them.
void aio_settings(const Config& cfg, AioOptions& aio, AioBackend& backend);

}  // namespace zt
