// The optimizer placement seam (DESIGN.md, "Optimizer placement"). ZeRO
// decides which shards this rank owns; an OptimizerPlacement decides where
// their update runs and where its bytes live. ZeroEngine::apply_optimizer
// hands it every owned shard of the step, one at a time, and then asks it to
// finish. The placement today is the device (optim/device_adamw.hpp: CUDA
// kernels on the GPU's stream, threads on the CPU); host and NVMe placements
// implement the same two calls.
#pragma once

#include <cstdint>

#include "zero/owned_shard.hpp"

namespace zt {

// The per-step scalars of an update, whatever the optimizer.
struct OptimizerStepScalars {
  int64_t step = 0;      // 1-based count of applied updates (Adam's bias correction)
  double lr = 0;         // this step's learning rate
  float grad_scale = 1;  // multiplies every gradient first: clip coefficient / loss scale
};

class OptimizerPlacement {
 public:
  virtual ~OptimizerPlacement() = default;
  virtual const char* name() const = 0;
  // Updates shard.master, shard.exp_avg and shard.exp_avg_sq in place from
  // shard.grad (weight decay per shard.spans). May return before the update
  // is done (a GPU stream, host threads): finish() completes it.
  virtual void update(const OwnedShard& shard, const OptimizerStepScalars& s) = 0;
  // Every update issued since the last finish() is complete, or ordered
  // before any later work on the device's stream.
  virtual void finish() {}
};

}  // namespace zt
