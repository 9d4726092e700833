// StepWalk: one training step or one evaluation, for every layout, through
// the pipeline executor (a single process walks the list of a one-stage
// pipeline). It binds the executor's StepHooks to the trainer's parts: the
// data feed loads micro-batches, ReduceGrads is the GradientFinalizer, and
// OptimizerStep applies the optimizer placement to ZeRO's owned shards and
// publishes the new parameters.
//
// The per-token losses are summed on the device ([Note: loss on the
// device]); read_loss() is the only host read of them, called on the steps
// that are printed.
#pragma once

#include <memory>
#include <vector>

#include "pipeline/executor.hpp"
#include "runtime/host_calls.hpp"
#include "train/data_feed.hpp"
#include "train/grad_finalize.hpp"
#include "train/train_state.hpp"
#include "zero/optimizer_placement.hpp"

namespace zt {

struct StepTiming {
  PipelineTiming walk;  // forward, backward, p2p wait, and the walk up to ReduceGrads
  double reduce_s = 0;     // ReduceGrads: reduction, overflow, norm
  double optimizer_s = 0;  // OptimizerStep: update and publish
};

class StepWalk final : private StepHooks, private ParamProvider {
 public:
  StepWalk(const RunOptions& opts, const StagePlan& plan, int stage, UnitRunner& runner, Device& dev,
           Kernels& kernels, CommBundle& comms, ZeroEngine& zero,
           GradientFinalizer& finalizer, const LrSchedule& schedule, DataFeed& data, ArenaChunks arena_chunks);
  ~StepWalk() override;

  // Takes step state.step + 1: walks the schedule, reduces, updates; advances
  // `state`. `stop_requested`: this rank saw a stop signal.
  GradientVerdict train(TrainState& state, bool stop_requested, StepTiming* timing = nullptr);
  // Mean per-token loss of the last train() over the targets of the global
  // batch that count ([Note: masked targets] in data_feed.hpp; all of them
  // without a loss mask); NaN when none counted. Collective (over the ranks
  // that hold the loss); one host read.
  double read_loss();
  // Targets that counted in the last train(), over the global batch.
  int64_t last_targets() const { return last_targets_; }
  // With a host-call probe installed ([Note: host round trips]): the calls
  // of the last train()'s walk (first forward to ReduceGrads) and of its
  // reduction (ReduceGrads to OptimizerStep).
  const host_calls::Counts& walk_calls() const { return walk_calls_; }
  const host_calls::Counts& reduce_calls() const { return reduce_calls_; }
  // Record each train() after the first, from its first forward to the end
  // of its gradient reduction, as graphs on the device and launch them
  // ([Note: step graph] in runtime/device.hpp). The caller has checked that
  // the layout's step queues nothing a graph cannot hold.
  void set_step_graph(std::unique_ptr<StepGraph> graph) { graph_ = std::move(graph); }
  // Where phases are reported (reports_phase_times): each train()'s as
  // spans on `clock`, in the device's order of work ([Note: phase clock]).
  void set_phase_clock(std::unique_ptr<PhaseClock> clock);
  // The last train()'s forward, backward, walk, reduction and optimizer
  // times from the clock into `t` (nothing without one). Waits for the
  // device to finish that step's update; call it only for steps that are
  // reported, and before the next train().
  void read_phase_times(StepTiming& t);
  const StepGraph* step_graph() const { return graph_.get(); }
  // Mean validation loss over `batches` global batches of the val split.
  // Collective.
  double evaluate(int64_t batches);

 private:
  void load_batch(int mb, const Tensor& tokens, const Tensor& targets, const Tensor& doc_start) override;
  bool packed() const override { return data_.packing(); }
  void reduce_grads() override;
  void optimizer_step() override;
  double reduce_loss(const Buffer& acc, double tokens);
  // ParamProvider: ZeRO's, cutting the step's graph before the 2nd, 3rd,
  // 5th, 9th, ... unit while it is recorded ([Note: step graph]).
  std::vector<Tensor> acquire(int unit, Phase phase) override;
  void release(int unit, Phase phase) override;
  void set_run_length(int n) override;
  void set_loss_weight(double w);

  const RunOptions& opts_;
  Device& dev_;
  Kernels& kernels_;
  CommBundle& comms_;
  ZeroEngine& zero_;
  GradientFinalizer& finalizer_;
  const LrSchedule& schedule_;
  DataFeed& data_;
  std::unique_ptr<PipelineExecutor> executor_;
  std::vector<PipeInstr> train_program_, eval_program_;
  Buffer dloss_;             // (B, T) math dtype: each token's loss weight
  double dloss_weight_ = -1;  // its current value
  int64_t last_targets_ = 0;  // counted targets of the last train()
  Buffer loss_sum_, val_sum_;  // (1) f64: the step's and the evaluation's summed losses
  // The walk in progress.
  TrainState* state_ = nullptr;
  bool stop_requested_ = false;
  bool evaluating_ = false;
  int64_t val_batch_ = 0;
  GradientVerdict verdict_;
  StepTiming timing_;
  host_calls::Counts walk_calls_, reduce_calls_;
  std::unique_ptr<StepGraph> graph_;  // set_step_graph
  std::unique_ptr<PhaseClock> clock_;  // set_phase_clock
  bool recording_ = false;  // the graph of this train() is being recorded
  int unit_pieces_ = 0;     // units acquired while recording this train()
  int64_t trained_ = 0;  // train() calls so far
};

}  // namespace zt
