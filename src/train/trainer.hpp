// Trainer: the step loop that ties data, the model runner, ZeRO, the
// optimizer, validation and metrics together.
#pragma once

#include <memory>
#include <vector>

#include "comm/topology.hpp"
#include "core/config.hpp"
#include "modules/kernels.hpp"
#include "runtime/device.hpp"

namespace zt {

struct StepStats {
  int64_t step = 0;     // 1-based index of the step just taken
  double loss = 0;      // mean over every token of the global batch
  double grad_norm = 0; // before clipping
  double lr = 0;
  double step_seconds = 0;
  bool skipped = false;    // fp16: the gradients overflowed, no update was made
  double loss_scale = 1;   // fp16: the scale used for this step
  // wall_clock_breakdown: seconds in each phase of the step.
  double forward_s = 0, backward_s = 0, reduce_s = 0, optimizer_s = 0;
  // Bytes this rank passed to data-parallel collectives during the step, per
  // kind (CommOp order), and the ZeRO paper's communication volume in units of
  // the parameter count: all-reduce counts twice (reduce-scatter + all-gather).
  uint64_t comm_bytes[7] = {};
  double comm_volume_psi = 0;
};

class Trainer {
 public:
  // `kernels` run on `dev`; `tensor_dp` moves `dev`'s tensors over the
  // data-parallel group (topo.dp() itself on the CPU), `tensor_pp` over the
  // pipeline group and `tensor_tie` between the two copies of the tied
  // embedding (pipeline runs; null otherwise and off the first/last stage).
  Trainer(const Config& cfg, Topology& topo, Device& dev, Kernels& kernels, Communicator& tensor_dp,
          Communicator* tensor_pp = nullptr, Communicator* tensor_tie = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Runs cfg.train.steps steps with printing, validation and metrics.
  void run();
  // One optimizer step over one global batch.
  StepStats train_step();
  // Mean validation loss over eval_steps global batches of the val split
  // (NaN when there is no val split).
  double evaluate();
  int64_t step() const;
  // Loads a checkpoint before run(): "auto" (the newest complete one under
  // checkpoint.dir, if any) or a step directory. Returns whether one loaded.
  bool resume(const std::string& where);
  // The training state saved in a checkpoint's manifest.
  nlohmann::json state_json() const;
  int64_t num_params() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Threads per rank: OMP_NUM_THREADS when set, otherwise the cores of this node
// divided among its ranks. Applies to OpenMP and OpenBLAS.
int configure_threads(int local_ranks);

}  // namespace zt
