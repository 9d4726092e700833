// Trainer: the story of a run. It derives the run's options, builds the model
// and this rank's pipeline stage, ZeRO's engine and the optimizer placement,
// then steps: walk the schedule (StepWalk), save, validate, report, until the
// last step or an agreed stop. Each of those is its own file in src/train;
// docs/architecture.md follows one step from batch to optimizer.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "comm/comm_bundle.hpp"
#include "core/config.hpp"
#include "modules/kernels.hpp"
#include "runtime/device.hpp"
#include "train/step_report.hpp"

namespace zt {

class Trainer {
 public:
  // `kernels` run on `dev`; `comms` moves `dev`'s tensors and host scalars
  // over each axis of the rank grid. Runs no collective: errors here (bad
  // data, a layout the model cannot take) can be agreed on by the caller.
  Trainer(const Config& cfg, CommBundle& comms, Device& dev, Kernels& kernels);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Collective: the initial parameters (from train.seed), then, when
  // `resume` is not empty, the checkpoint it names: "auto" (the newest
  // complete one under checkpoint.dir, if any) or a step directory. Returns
  // whether a checkpoint was loaded. Errors that every rank agreed on are
  // CollectiveErrors.
  bool start(const std::string& resume = "");
  // Runs cfg.train.steps steps with printing, validation, checkpoints and
  // metrics.
  void run();
  // One optimizer step over one global batch; the loss is read when
  // `read_loss` (a collective host read), NaN otherwise, and then, where
  // phases are reported (reports_phase_times), the phase times from the
  // device's clock ([Note: phase clock]; the host's own times otherwise)
  // and the data-parallel collectives' device times ([Note: communication
  // time] in comm/communicator.hpp).
  StepStats train_step(bool read_loss = true);
  // Replaces the clock the reported phases are timed with (tests).
  void set_phase_clock(std::unique_ptr<PhaseClock> clock);
  // Mean validation loss over train.eval_steps global batches of the val
  // split (NaN when there is none).
  double evaluate();
  int64_t step() const;
  // The training state saved in a checkpoint's manifest.
  nlohmann::json state_json() const;
  int64_t num_params() const;
  // The device's measured dense bf16 peak in FLOP/s (0: unknown), for the
  // MFU of the step line and metrics.
  void set_peak_flops(double peak);
  // Called after each step of run() with the step just taken (the kernel
  // profile starts after the first: `ztrain --profile`).
  void set_step_hook(std::function<void(int64_t)> hook);
  // Records each step after the first as graphs on the device and launches
  // them ([Note: step graph] in runtime/device.hpp) where the layout allows:
  // one rank, no offload, any ZeRO stage whose communicator a graph may
  // record (Communicator::graph_safe), the step's verdict on the device, no
  // packed documents, no device memory cap, no injected fault. Returns ""
  // when it will, else why not. `graph`: the graph to record into (tests);
  // null: the device's.
  std::string enable_step_graph(std::unique_ptr<StepGraph> graph = nullptr);
  // "" without the graph.
  std::string step_graph_summary() const;

 private:
  void inject_hang(int64_t step);
  // A read step's phase times and device-timed communication, into `st`.
  void read_step_times(StepStats& st);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zt
