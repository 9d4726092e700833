// The optimizer placement seam (DESIGN.md, "Optimizer placement"). ZeRO
// decides which shards this rank owns; an OptimizerPlacement decides where
// their update runs and where the optimizer's states (fp32 master weights,
// Adam moments) live: on the device (optim/device_adamw.hpp: CUDA kernels on
// the GPU's stream, threads on the CPU), in host memory or in NVMe files
// (optim/offload_adamw.hpp, docs/offload.md).
//
// ZeroEngine::apply_optimizer hands the placement every owned shard of the
// step, one at a time, then asks it to finish. Everything else that touches
// the states (initial values, checkpoints, exports) goes through
// read_state/write_state, so it works wherever they live.
#pragma once

#include <cstdint>
#include <vector>

#include "zero/owned_shard.hpp"

namespace zt {

// The per-step scalars of an update, whatever the optimizer.
struct OptimizerStepScalars {
  int64_t step = 0;      // 1-based count of applied updates (Adam's bias correction)
  double lr = 0;         // this step's learning rate
  float grad_scale = 1;  // multiplies every gradient first: clip coefficient / loss scale
  // [Note: verdict on the device] (train/grad_finalize.hpp): null, or the
  // step's verdict in the device's memory (optim/clip_math.hpp), which the
  // update reads in place of grad_scale and which may say that the update
  // changes nothing. Only a placement with states_on_device() is given one.
  const double* verdict = nullptr;
};

enum class OptimizerState : uint8_t { master, exp_avg, exp_avg_sq };
constexpr int kNumOptimizerStates = 3;
// "master", "exp_avg", "exp_avg_sq": the names checkpoints store them under.
const char* optimizer_state_name(OptimizerState s);

class OptimizerPlacement {
 public:
  virtual ~OptimizerPlacement() = default;
  virtual const char* name() const = 0;
  // True: the states are the device buffers ZeroEngine allocates (the
  // OwnedShard pointers), and ZeRO refreshes the working parameters from the
  // master itself. False: the placement keeps the states and leaves each
  // shard's `param` fresh after update() and write_state(master).
  virtual bool states_on_device() const = 0;
  // With the states on the device: whether update() also writes the shard's
  // working copy (OwnedShard::param, when ZeRO gives one) from the new
  // master, so that ZeRO need not cast it again ([Note: working copy from
  // the update] in zero/zero_engine.hpp).
  virtual bool refreshes_working_copy() const { return false; }
  // [Note: gradients on the host] 0: the gradient shards are device memory.
  // 1: ZeRO keeps them in host memory (the placement reads them there). 2:
  // in two host buffers that alternate by step (each zero_grads() moves
  // OwnedShard::grad to the other), so an update may still read step N's
  // gradients while step N+1's backward writes its own (delayed update).
  virtual int host_gradient_buffers() const { return 0; }
  // Called once by ZeroEngine with every owned shard, before any other call:
  // an offloading placement allocates its states here (moments zero).
  virtual void attach(const std::vector<OwnedShard>& shards) { (void)shards; }
  // Called by ZeroEngine's destructor, before the shards go: waits for work
  // still in flight that reads them (a delayed update's worker thread, which
  // read freed shards when the engine went first: ASan, ztrain_offload_nvme).
  // Errors of that work are dropped: the run is ending. Must not throw.
  virtual void detach() noexcept {}
  // Updates the shard's master weights and moments from shard.grad (weight
  // decay per shard.spans). May return before the update is done (a GPU
  // stream, host threads): finish() completes it.
  virtual void update(const OwnedShard& shard, const OptimizerStepScalars& s) = 0;
  // Every update issued since the last finish() is complete, or ordered
  // before any later work on the device's compute stream, or (a placement
  // whose update runs on its own threads: [Note: streamed update] in
  // optim/offload_adamw.hpp) completes shard by shard, each shard's new
  // parameters made visible by await_shard().
  virtual void finish() {}
  // [Note: streamed update] Blocks the host until the shard's latest update
  // has written its working parameters (in host memory: `param`, or the
  // master the parameters are made from) and orders later work on the
  // device's compute stream after their copy into the device's working
  // copy. ZeroEngine calls it before it reads a shard's parameters. Returns
  // at once for a placement that finishes every update inside finish().
  virtual void await_shard(const OwnedShard& shard) { (void)shard; }
  // The shard's fp32 master weights in host memory that stays put (ZeRO
  // uploads parameters from it: [Note: parameters from the master] in
  // zero_engine.hpp), or null when the placement keeps none there.
  virtual const float* host_master(const OwnedShard& shard) {
    (void)shard;
    return nullptr;
  }
  // Copies the shard's state to or from host memory (numel() floats). Not
  // during an update (between update() and finish()).
  virtual void read_state(const OwnedShard& shard, OptimizerState which, float* host_dst) = 0;
  virtual void write_state(const OwnedShard& shard, OptimizerState which, const float* host_src) = 0;
};

}  // namespace zt
