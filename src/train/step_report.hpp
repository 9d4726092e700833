// StepReporter: the step report in one place. It keeps the tokens/s window
// between printed steps, prints the step line, writes metrics.jsonl records
// (with wall_clock_breakdown: phase times, bytes per collective kind, the
// ZeRO paper's volume in units of the parameter count, and per-stage pipeline
// timing with the measured bubble), and the end-of-run peak memory per tag.
#pragma once

#include <cmath>
#include <cstdint>

#include <nlohmann/json.hpp>

#include <optional>

#include "comm/comm_bundle.hpp"
#include "core/config.hpp"
#include "optim/offload_adamw.hpp"
#include "train/metrics.hpp"
#include "train/prometheus_export.hpp"
#include "train/run_options.hpp"
#include "train/step_walk.hpp"

namespace zt {

struct StepStats {
  int64_t step = 0;              // 1-based index of the step just taken
  double loss = std::nan("");    // mean over the global batch (read on printed steps only)
  double grad_norm = 0;          // before clipping
  int64_t tokens = 0;            // targets that counted in the loss (all of them without a loss mask)
  double lr = 0;
  double step_seconds = 0;
  bool skipped = false;          // fp16: the gradients overflowed, or `nonfinite`: no update was made
  bool nonfinite = false;        // the loss or gradient norm was not finite ([Note: non-finite steps])
  double loss_scale = 1;         // fp16: the scale used for this step
  StepTiming timing;
  // Bytes this rank passed to data-parallel collectives during the step, per
  // kind (CommOp order).
  CommCounters comm;
  // With an offloaded optimizer: its phases in this step (docs/offload.md).
  std::optional<OffloadStepTimes> offload;
  int64_t nvme_bytes = 0;  // ZeRO-Infinity: this rank's swap files on NVMe
};

// The ZeRO paper's communication volume of a step in units of the parameter
// count: gradients move in fp32 (an all-reduce counts twice: reduce-scatter +
// all-gather), parameters in their storage dtype.
double comm_volume_psi(const CommCounters& c, DType param_dtype, int64_t num_params);

// Whether printed steps report phase times: wall_clock_breakdown's line and
// records, or prometheus's ztrain_phase_seconds. Those runs time the phases
// with the device's clock ([Note: phase clock] in runtime/phase_clock.hpp).
inline bool reports_phase_times(const Config& cfg) { return cfg.wall_clock_breakdown || cfg.prometheus.enabled; }

class StepReporter {
 public:
  // `dev`: the device whose memory the Prometheus export reports (the
  // "prometheus" section needs it; UserError there when it is null).
  // `flops_per_token`: the model's training FLOPs per token.
  StepReporter(const Config& cfg, const RunOptions& opts, CommBundle& comms, int64_t num_params,
               const Device* dev = nullptr, double flops_per_token = 0);
  // The checkpoints committed so far, exported with "prometheus"; null =
  // none (no checkpoint.dir). Must outlive the reporter.
  void set_checkpoints(const CheckpointsSaved* saved) { checkpoints_ = saved; }
  // The device's measured dense bf16 peak (FLOP/s per rank's device; 0 =
  // unknown): the step line and metrics then add MFU to model TFLOP/s.
  void set_peak_flops(double peak) { peak_flops_ = peak; }
  ~StepReporter();
  // The run starts: fresh (metrics.jsonl truncated) or resumed at `step`
  // from checkpoint `from` (appended, the resume marked).
  void begin(bool resumed, int64_t step, const std::string& from) { metrics_.begin(resumed, step, from); }
  // Every step: adds it to the tokens/s window (and the Prometheus counters).
  void add(const StepStats& st);
  // A printed step: the line and its metrics record. `val`: the validation
  // loss, NaN when none was run. `elapsed`: seconds since the run started,
  // `steps_done`: steps this process took. Collective with
  // wall_clock_breakdown and a pipeline (per-stage timing), and with
  // prometheus.enabled (the per-rank values gathered to rank 0).
  void report(const StepStats& st, double val, double elapsed, int64_t steps_done);
  // The run's end: peak memory per tag (max over ranks) and the end event.
  // Collective.
  // `nvme_bytes`: this rank's NVMe swap files (optimizer and parameters).
  void report_end(const Device& dev, int64_t steps, double seconds, int64_t nvme_bytes = 0);

 private:
  double flops_per_token_ = 0;
  double peak_flops_ = 0;
  void report_pipeline(const PipelineTiming& t, nlohmann::json& rec);
  void report_offload(const OffloadStepTimes& o, nlohmann::json& rec);

  const Config& cfg_;
  const RunOptions& opts_;
  CommBundle& comms_;
  int64_t num_params_;
  MetricsWriter metrics_;
  std::unique_ptr<PrometheusExporter> prometheus_;  // null unless prometheus.enabled
  const CheckpointsSaved* checkpoints_ = nullptr;
  double window_s_ = 0;
  int64_t window_steps_ = 0;
  int64_t window_tokens_ = 0;
};

}  // namespace zt
