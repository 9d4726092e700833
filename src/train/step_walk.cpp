#include "train/step_walk.hpp"

#include <cmath>

#include "comm/flight_recorder.hpp"
#include "core/clock.hpp"

namespace zt {

StepWalk::StepWalk(const RunOptions& opts, const StagePlan& plan, int stage, UnitRunner& runner, Device& dev,
                   Kernels& kernels, CommBundle& comms, ZeroEngine& zero,
                   GradientFinalizer& finalizer, const LrSchedule& schedule, DataFeed& data,
                   ArenaChunks arena_chunks)
    : opts_(opts), dev_(dev), kernels_(kernels), comms_(comms), zero_(zero),
      finalizer_(finalizer), schedule_(schedule), data_(data) {
  const int M = static_cast<int>(opts.accum);
  executor_ = std::make_unique<PipelineExecutor>(plan.chunks, opts.P, opts.V, stage, runner, dev,
                                                 *comms.pipeline().tensors, opts.B, opts.T, arena_chunks);
  // [Note: breadth-first walk] in groups of opts.group (one stage only).
  train_program_ = opts.group > 1 ? make_breadth_first_schedule(M, opts.group)
                                  : make_schedule(opts.schedule, opts.P, opts.V, M, stage);
  eval_program_ = make_forward_schedule(opts.P, opts.V, M, stage);
  dloss_ = Buffer(dev, math_dtype(opts.act_dtype), Shape{opts.B, opts.T}, MemTag::activations);
  loss_sum_ = Buffer(dev, DType::f64, Shape{1}, MemTag::workspace);
  val_sum_ = Buffer(dev, DType::f64, Shape{1}, MemTag::workspace);
}

StepWalk::~StepWalk() = default;

// Each token's loss weighs 1/(counted targets in the global batch: every
// token without a loss mask, [Note: masked targets]), times the fp16
// loss scale: summing the gradients over micro-batches and ranks then gives
// the (scaled) gradient of the mean loss. Copied to the device only when the
// weight changes (the first step; fp16 scale changes; with a loss mask, most
// steps, whose counts differ: on CUDA that copy waits for the stream, a cost
// only masked runs pay).
void StepWalk::set_loss_weight(double w) {
  if (w == dloss_weight_) return;
  ZT_CHECK(dloss_.tensor().dtype == DType::f32, "loss weights are f32 outside the f64 tests");
  std::vector<float> host(static_cast<size_t>(opts_.B * opts_.T), static_cast<float>(w));
  dev_.copy_from_host(dloss_.data(), host.data(), dloss_.bytes());
  dloss_weight_ = w;
}

GradientVerdict StepWalk::train(TrainState& state, bool stop_requested, StepTiming* timing) {
  state_ = &state;
  stop_requested_ = stop_requested;
  evaluating_ = false;
  timing_ = StepTiming{};
  if (clock_) clock_->restart();
  // The same count on every rank (computed from the sampler, not reduced).
  // A batch without one counted target contributes no gradient.
  last_targets_ = data_.train_targets(state.step);
  set_loss_weight(last_targets_ > 0 ? finalizer_.loss_scale() / static_cast<double>(last_targets_) : 0.0);
  // [Note: step graph]: the first step builds plans and tunes products (host
  // waits), so the graph starts with the second; reduce_grads() launches it.
  if (graph_ && trained_ > 0) {
    graph_->begin();
    recording_ = true;
    unit_pieces_ = 0;
  }
  zero_.zero_grads();
  kernels_.zero(loss_sum_.tensor());
  WalkArgs args;
  args.params = this;  // ZeRO's, through acquire() below
  args.grads = &zero_;
  args.hooks = this;
  args.dloss = dloss_.tensor();
  args.loss_sum = loss_sum_.tensor();
  args.train = true;
  args.group = static_cast<int>(opts_.group);
  host_calls::begin();  // [Note: host round trips]
  try {
    executor_->run(train_program_, args, &timing_.walk);
  } catch (...) {
    if (recording_) graph_->abandon();
    recording_ = false;
    throw;
  }
  ZT_CHECK(!recording_, "the step's graph was not launched: the schedule has no gradient reduction");
  ++trained_;
  ++state.step;
  state_ = nullptr;
  if (timing) *timing = timing_;
  return verdict_;
}

// The pieces double in units (1, 1, 2, 4, 8, ...: cut before the 2nd, 3rd,
// 5th, 9th ... acquire): the first is recorded and running at once, and the
// host, which records several times faster than the GPU runs what it
// records, stays ahead with few boundaries between graphs.
std::vector<Tensor> StepWalk::acquire(int unit, Phase phase) {
  if (recording_) {
    const int k = unit_pieces_++;
    if (k > 0 && (k & (k - 1)) == 0) graph_->cut();
  }
  return zero_.acquire(unit, phase);
}
void StepWalk::release(int unit, Phase phase) { zero_.release(unit, phase); }
void StepWalk::set_run_length(int n) { zero_.set_run_length(n); }

void StepWalk::load_batch(int mb, const Tensor& tokens, const Tensor& targets, const Tensor& doc_start) {
  if (evaluating_)
    data_.load_val(val_batch_, mb, tokens, targets, doc_start);
  else
    data_.load_train(state_->step, mb, tokens, targets, doc_start);
}

void StepWalk::reduce_grads() {
  walk_calls_ = host_calls::end();
  host_calls::begin();
  const double t0 = now_s();
  const int m0 = clock_ ? clock_->mark() : -1;
  if (finalizer_.verdict_on_device()) {
    // [Note: verdict on the device]: the loss's finiteness too.
    verdict_ = finalizer_.finalize_on_device(state_->step + 1, stop_requested_, loss_sum_.tensor());
  } else {
    // This rank's share of the loss so far (zero on stages without the head);
    // the gradient-norm read just after waits for the device anyway.
    double loss = 0;
    dev_.copy_to_host(&loss, loss_sum_.data(), sizeof loss);
    verdict_ = finalizer_.finalize(state_->step + 1, stop_requested_, std::isfinite(loss));
  }
  if (recording_) {
    recording_ = false;
    graph_->end_and_launch();
  }
  if (clock_) clock_->span(StepPhase::reduce, m0, clock_->mark());
  timing_.reduce_s = now_s() - t0;
}

void StepWalk::optimizer_step() {
  reduce_calls_ = host_calls::end();
  const double t0 = now_s();
  const int m0 = clock_ ? clock_->mark() : -1;
  // A pending verdict ([Note: verdict on the device]) may still skip the
  // update on the device; `applied` counts it once resolved.
  if (!verdict_.skipped) {
    OptimizerStepScalars s;
    s.step = state_->applied + 1;
    s.lr = schedule_.lr_at(state_->applied);
    s.grad_scale = verdict_.grad_scale;
    s.verdict = verdict_.device_verdict;
    zero_.apply_optimizer(s);
  }
  {
    PhaseScope phase(RunPhase::gather);  // [Note: op context]
    zero_.publish_params();
  }
  finalizer_.resolve(verdict_);
  if (!verdict_.skipped) ++state_->applied;
  if (clock_) clock_->span(StepPhase::optimizer, m0, clock_->mark());
  timing_.optimizer_s = now_s() - t0;
}

void StepWalk::set_phase_clock(std::unique_ptr<PhaseClock> clock) {
  clock_ = std::move(clock);
  executor_->set_phase_clock(clock_.get());
}

void StepWalk::read_phase_times(StepTiming& t) {
  if (!clock_) return;
  const std::array<double, kNumStepPhases> s = clock_->totals();
  auto at = [&s](StepPhase p) { return s[static_cast<size_t>(p)]; };
  t.walk.forward_s = at(StepPhase::forward);
  t.walk.backward_s = at(StepPhase::backward);
  t.walk.total_s = at(StepPhase::walk);
  t.reduce_s = at(StepPhase::reduce);
  t.optimizer_s = at(StepPhase::optimizer);
}

// [Note: loss on the device] Each micro-batch's per-token losses are added
// to a device accumulator by the last chunk's stage (kernels' sum_into), so
// the step never waits for the device to report a loss. The sum is read when
// a step is printed: one copy to the host, then a sum over the ranks that
// hold losses (the data axis; every rank when pipelined, the other stages
// adding zero).
double StepWalk::reduce_loss(const Buffer& acc, double tokens) {
  double sum = 0;
  dev_.copy_to_host(&sum, acc.data(), sizeof sum);
  Communicator& over = opts_.P > 1 ? comms_.world() : *comms_.data().host;
  return all_reduce_scalar(over, sum) / tokens;
}

double StepWalk::read_loss() {
  const double loss = reduce_loss(loss_sum_, static_cast<double>(last_targets_));  // collective: every rank reads
  return last_targets_ > 0 ? loss : std::nan("");
}

double StepWalk::evaluate(int64_t batches) {
  evaluating_ = true;
  kernels_.zero(val_sum_.tensor());
  WalkArgs args;
  args.params = &zero_;
  args.hooks = this;
  args.loss_sum = val_sum_.tensor();
  args.train = false;
  for (int64_t e = 0; e < batches; ++e) {
    val_batch_ = e;
    executor_->run(eval_program_, args);
  }
  evaluating_ = false;
  const int64_t targets = data_.val_targets(batches);
  const double loss = reduce_loss(val_sum_, static_cast<double>(targets));
  return targets > 0 ? loss : std::nan("");
}

}  // namespace zt
