// ZeroEngine: the ParamProvider and GradSink of the parameter seam, and the
// owner of every model-state buffer of one rank (working parameters, fp32
// master weights, Adam moments, gradients).
//
// Stage 0 (this file's scope today): parameters and gradients are replicated;
// after the last micro-batch of a step, gradients are all-reduced across the
// data-parallel group in buckets of `reduce_bucket_size` elements; every rank
// then updates the whole model identically.
//
// The optimizer lives in a lower layer (optim) and does not know how shards
// are made: the engine exposes the shards this rank owns (master, grad, m, v
// and their weight-decay spans); the caller updates them and then calls
// publish_params() to refresh the working copy.
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.hpp"
#include "runtime/device.hpp"
#include "zero/flat_layout.hpp"

namespace zt {

struct ZeroOptions {
  int stage = 0;
  int64_t reduce_bucket_size = 500000000;  // elements, as in DeepSpeed
  DType param_dtype = DType::f32;          // storage of the working parameters
};

// The slice of one unit that this rank owns, with its optimizer state.
struct OwnedShard {
  int unit = 0;
  int64_t begin = 0;  // unit-local element range
  int64_t end = 0;
  float* master = nullptr;  // fp32 master weights
  float* grad = nullptr;    // fp32 gradient, reduced across data parallel
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  std::vector<DecaySpan> spans;  // unit-local, covering [begin, end)
  int64_t numel() const { return end - begin; }
};

class ZeroEngine final : public ParamProvider, public GradSink {
 public:
  ZeroEngine(const std::vector<const Unit*>& units, const ZeroOptions& opts, Device& dev, Communicator& dp);

  const FlatLayout& layout() const { return layout_; }
  const ZeroOptions& options() const { return opts_; }

  // Initial values from each unit's init_param (a pure function of the seed
  // and element index, so every rank and every layout agrees).
  void init_params(uint64_t seed);

  // ParamProvider / GradSink.
  std::vector<Tensor> acquire(int unit, Phase phase) override;
  void release(int unit, Phase phase) override {}
  std::vector<Tensor> grads(int unit) override;
  void done(int unit) override {}

  void zero_grads();
  // Sum gradients over the data-parallel group (bucketed, non-blocking calls
  // issued back to back, then waited on).
  void reduce_gradients();
  // The shards whose update this rank performs.
  std::vector<OwnedShard>& owned_shards() { return owned_; }
  // Sum over the data-parallel group of a per-rank partial sum over owned
  // shards (identity when the shards are not partitioned).
  double reduce_owned_sum(double local);
  // Refresh the working parameters from the fp32 master weights.
  void publish_params();

  // fp32 copy of unit u's whole flat parameter buffer (numel elements).
  void copy_unit_params(int u, float* out) const;

 private:
  struct UnitViews {
    std::vector<Tensor> params;  // own then tied, working dtype
    std::vector<Tensor> grads;   // own then tied, fp32
  };
  void build_views(const std::vector<const Unit*>& units);

  std::vector<const Unit*> units_;
  FlatLayout layout_;
  ZeroOptions opts_;
  Device& dev_;
  Communicator& dp_;
  Buffer working_;  // all units, padded, param_dtype
  Buffer master_;   // fp32; empty when the working copy is fp32 (it is the master)
  Buffer grads_;    // fp32, all units, padded
  Buffer exp_avg_, exp_avg_sq_;
  std::vector<UnitViews> views_;
  std::vector<OwnedShard> owned_;
};

}  // namespace zt
