// PrometheusExporter: the "prometheus" section (docs/monitoring.md). Rank 0
// holds a prometheus-cpp registry of the run's metrics, serves it at
// http://HOST:port/metrics (prometheus-cpp's embedded civetweb) and/or writes
// it to textfile_dir/ztrain.prom in node-exporter's textfile format, written
// to a temporary file and renamed so a collector never reads half of it.
//
// [Note: Prometheus export] Run-wide values (tokens, samples, steps and
// skipped steps as counters; loss, learning rate, loss scale, gradient norm,
// step time) are the same on every rank and rank 0 sets them. Per-rank values
// (memory per tag on the device, in host memory and on NVMe; bytes passed to
// the data-parallel collectives; phase times; the offloaded update's hidden
// fraction; the GPU's utilisation, memory and power through NVML) are
// gathered to rank 0 with one all-gather over the world at each printed step
// and exported with the labels rank, dp_rank and pp_rank. The counters count
// from the start of this process (a resumed run starts them again at 0, which
// Prometheus's rate() reads as a counter reset).
#pragma once

#include <cstdint>
#include <memory>

#include "comm/topology.hpp"
#include "core/config.hpp"
#include "runtime/device.hpp"

namespace zt {

struct StepStats;
struct CheckpointsSaved;

// What the export says about the run once.
struct RunFacts {
  int64_t num_params = 0;
  double flops_per_token = 0;  // training FLOPs per token (model FLOP/s = rate(tokens) x this)
  int64_t samples_per_step = 0;
  int64_t steps = 0;           // train.steps
  bool loss_scaler = false;    // fp16: ztrain_loss_scale is exported
};

class PrometheusExporter {
 public:
  // Every rank constructs one. UserError when the build has no prometheus-cpp,
  // and on rank 0 when the port cannot be served (naming it) or textfile_dir
  // cannot be created. `dev`: this rank's device (memory per tag, and its PCI
  // bus id for NVML).
  PrometheusExporter(const PrometheusConfig& cfg, Topology& topo, const Device& dev, const RunFacts& facts);
  ~PrometheusExporter();
  PrometheusExporter(const PrometheusExporter&) = delete;
  PrometheusExporter& operator=(const PrometheusExporter&) = delete;

  // Every step, every rank: the counters.
  void add(const StepStats& st);
  // A printed step (or the run's end), collective over the world: gathers the
  // per-rank values to rank 0, sets the gauges and rewrites the textfile.
  // `val`: validation loss, NaN when none ran; `tokens_per_s` and
  // `step_seconds` over the window since the last printed step (0 = none);
  // `ckpt`: the checkpoints committed so far (null without checkpoint.dir).
  void update(const StepStats* st, double val, double tokens_per_s, double step_seconds,
              const CheckpointsSaved* ckpt);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zt
