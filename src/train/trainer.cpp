#include "train/trainer.hpp"

#include <algorithm>
#include <cmath>

#include "comm/flight_recorder.hpp"
#include "core/clock.hpp"
#include "core/log.hpp"
#include "modules/model.hpp"
#include "modules/runner.hpp"
#include "optim/device_adamw.hpp"
#include "optim/offload_adamw.hpp"
#include "runtime/host_wait.hpp"
#include "train/checkpointing.hpp"
#include "train/data_feed.hpp"
#include "train/fault_injection.hpp"
#include "train/grad_finalize.hpp"
#include "train/init_from.hpp"
#include "train/memory_estimate.hpp"
#include "train/run_control.hpp"
#include "train/run_options.hpp"
#include "train/step_walk.hpp"
#include "train/train_state.hpp"
#include "zero/zero_engine.hpp"
#if ZT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "runtime/cuda/cuda_device.hpp"
#endif

namespace zt {
namespace {
// What the start line says of offload: "" without any, else where the
// optimizer and the parameters live and in which dtype the gradients land.
std::string offload_description(const Config& cfg) {
  const OffloadConfig& oo = cfg.zero.offload_optimizer;
  const OffloadConfig& op = cfg.zero.offload_param;
  std::string out;
  if (oo.device != "none") {
    out += ", optimizer on " + oo.device;
    if (oo.ratio < 1.0) out += " (ratio " + detail::concat(oo.ratio) + ")";
    if (cfg.offload.delayed_update) out += ", delayed update";
  }
  if (op.device != "none") out += ", parameters on " + op.device + (cfg.offload.param_from_master ? " (from the master)" : "");
  if (oo.device != "none" && cfg.offload.grad_dtype != "fp32") out += ", gradients to the host in " + cfg.offload.grad_dtype;
  return out;
}

// Where the optimizer runs and keeps its states: zero_optimization's
// offload_optimizer.device (docs/offload.md).
std::unique_ptr<OptimizerPlacement> make_placement(const Config& cfg, Device& dev, const AdamWParams& hp) {
  const OffloadConfig& oo = cfg.zero.offload_optimizer;
  const int64_t delay_after = cfg.offload.delayed_update ? cfg.offload.delayed_update_warmup : -1;
  if (oo.device == "cpu") {
    HostOffloadOptions ho;
    ho.pin_memory = oo.pin_memory;
    ho.ratio = oo.ratio;
    ho.delay_after = delay_after;
    return make_host_offload_adamw(dev, hp, ho);
  }
  if (oo.device == "nvme") {
    // ZeRO-Infinity ([Note: NVMe optimizer step] in optim/offload_adamw.hpp).
    const int rank = std::max(0, process_rank());
    NvmeOffloadOptions no;
    no.nvme_path = oo.nvme_path;
    no.run_id = nvme_run_id();
    no.rank = rank;
    no.sub_group_size = cfg.zero.sub_group_size;
    no.buffer_count = oo.buffer_count;
    no.pipeline_read = oo.pipeline_read;
    no.pipeline_write = oo.pipeline_write;
    no.pin_memory = oo.pin_memory;
    aio_settings(cfg, no.aio, no.backend);
    no.delay_after = delay_after;
    const InjectedFault fault = injected_fault();
    if (fault.kind == InjectedFault::Kind::nvme_write_error && fault.rank == rank) no.fail_write_at_step = fault.step;
    return make_nvme_offload_adamw(dev, hp, no);
  }
  ZT_CHECK(oo.device == "none", "offload_optimizer.device \"", oo.device, "\"");
  return make_device_adamw(dev, hp);
}
}  // namespace

struct Trainer::Impl {
  std::function<void(int64_t)> step_hook;  // set_step_hook
  // The trainer's own copy: the data feed, the reporter and the checkpointer
  // keep references to it, so a caller's temporary Config is safe to pass.
  const Config cfg;
  CommBundle& comms;
  Topology& topo;
  Device& dev;
  Kernels& kernels;
  RunOptions opts;
  InjectedFault fault = injected_fault();  // fault tests (train/fault_injection.hpp)
  std::unique_ptr<DataFeed> data;
  std::unique_ptr<Model> model;
  StagePlan plan;  // this rank's pipeline stage
  std::unique_ptr<OptimizerPlacement> placement;  // outlives zero, which uses it
  std::unique_ptr<ZeroEngine> zero;
  std::unique_ptr<LrSchedule> schedule;
  std::unique_ptr<ActivationOffload> act_offload;  // outlives the walk's micro-batch states
  std::unique_ptr<UnitRunner> runner;
  std::unique_ptr<GradientFinalizer> finalizer;
  std::unique_ptr<StepWalk> walk;
  std::unique_ptr<StepReporter> reporter;
  std::unique_ptr<Checkpointer> ckpt;
  TrainState state;
  bool stopped = false;  // all ranks agreed to stop after the last step
  int nonfinite_streak = 0;  // consecutive steps with a non-finite loss or gradient norm

  // [Note: non-finite steps] (grad_finalize.cpp): each such step is skipped
  // with a warning; one more than train.nonfinite_tolerance in a row ends
  // the run before anything of it is saved. fp16's overflow skips are
  // neither counted nor break a streak. Every rank decides alike (the
  // verdict is reduced), so the error is collective.
  void count_nonfinite(const StepStats& st) {
    if (!st.nonfinite) {
      if (!st.skipped) nonfinite_streak = 0;
      return;
    }
    ++nonfinite_streak;
    const double loss = walk->read_loss();  // collective, like the verdict
    const int tolerance = cfg.train.nonfinite_tolerance;
    if (nonfinite_streak > tolerance)
      throw CollectiveError(detail::concat(
          "step ", st.step, ": the loss (", loss, ") or the gradient norm (", st.grad_norm, ") is not finite in ",
          nonfinite_streak, " consecutive step(s), more than train.nonfinite_tolerance (", tolerance,
          "): the run diverged and stops; no update of those steps was applied or saved. Lower the learning "
          "rate, clip gradients (gradient_clipping) or check the data, then resume from the last checkpoint"));
    log_warn("step ", st.step, ": the loss (", loss, ") or the gradient norm (", st.grad_norm,
             ") is not finite: update skipped (", nonfinite_streak, " in a row of train.nonfinite_tolerance ",
             tolerance, ")");
  }

  Impl(const Config& c, CommBundle& cb, Device& d, Kernels& k)
      : cfg(c), comms(cb), topo(cb.topology()), dev(d), kernels(k),
        opts(run_options(c, cb.topology().dp_size(), cb.topology().pp_size())) {}

  SavedLayout layout() const { return {topo.world_size(), opts.P, opts.V, topo.dp_size()}; }
};

Trainer::Trainer(const Config& config, CommBundle& comms, Device& dev, Kernels& kernels)
    : impl_(std::make_unique<Impl>(config, comms, dev, kernels)) {
  Impl& s = *impl_;
  const Config& cfg = s.cfg;  // everything built here refers to the copy
  const RunOptions& o = s.opts;
  Topology& topo = s.topo;
  s.data = std::make_unique<DataFeed>(cfg, o.B, o.T, o.global_batch, o.accum, topo.dp_rank(), topo.dp_size(), dev);

  // The model from its description; this rank's stage of it.
  s.model = std::make_unique<Model>(build_model(describe_model(cfg.model)));
  const ModelDesc& desc = s.model->desc();
  const std::vector<const Unit*>& units = s.model->units();
  s.plan = plan_stage(desc.unit_numels(), desc.unit_ties(), o.P, o.V, o.partition, topo.pp_rank());

  s.placement = make_placement(cfg, dev, o.adamw);
  ZeroOptions zo = o.zero;
  zo.param_swap.run_id = nvme_run_id();  // [Note: parameter offload to NVMe]
  zo.param_swap.rank = std::max(0, process_rank());
  s.zero = std::make_unique<ZeroEngine>(units, zo, dev, kernels, *comms.data().tensors, *comms.data().host,
                                        *s.placement, s.plan.local);
  s.schedule = make_lr_schedule(o.lr);
  {
    // [Note: partial recomputation]: per chunk, as the estimator counts it.
    std::vector<bool> checkpointable;
    for (const UnitDesc& u : desc.units) checkpointable.push_back(u.checkpointable);
    std::vector<std::vector<int>> chunks;
    for (const UnitRange& r : s.plan.chunks) {
      chunks.emplace_back();
      for (int u = r.first; u < r.last; ++u) chunks.back().push_back(u);
    }
    s.runner = std::make_unique<UnitRunner>(
        units, kernels, dev, o.param_dtype, o.act_dtype,
        recomputed_units(checkpointable, chunks, cfg.model.activation_checkpointing, cfg.model.recompute_layers));
    // [Note: activation offload] (activation_checkpointing.cpu_checkpointing).
    if (cfg.activation_checkpointing.cpu_checkpointing) {
      std::vector<bool> chunk_last(units.size(), false);
      for (const UnitRange& r : s.plan.chunks) chunk_last[static_cast<size_t>(r.last - 1)] = true;
      s.act_offload = std::make_unique<ActivationOffload>(dev);
      s.runner->set_activation_offload(s.act_offload.get(), std::move(chunk_last));
    }
  }
  s.finalizer = std::make_unique<GradientFinalizer>(*s.zero, kernels, dev, comms, units, s.plan.mirror, o, s.fault);
  // Each micro-batch's saved-activation arena starts with one chunk of the
  // estimator's figure for one micro-batch on this rank's stage, and the
  // shared scratch arena with the stage's workspace column (which is that
  // chunk already); arena_chunk_bytes adds 5%, so one chunk usually holds it
  // all and the peak bytes reported are what the step really keeps; an arena
  // grows by such chunks if the estimate was short.
  const MemoryEstimateRow row = estimate_memory(cfg, topo.dp_size(), dev.kind() == DeviceKind::cuda)
                                    .stages.at(static_cast<size_t>(topo.pp_rank()));
  s.walk = std::make_unique<StepWalk>(
      o, s.plan, topo.pp_rank(), *s.runner, dev, kernels, comms, *s.zero, *s.finalizer, *s.schedule, *s.data,
      ArenaChunks{static_cast<size_t>(arena_chunk_bytes(row.micro_batch_activations)),
                  static_cast<size_t>(row.workspace)});
  // [Note: phase clock]: reported phases in the device's time.
  // [Note: communication time] in comm/communicator.hpp: so is the data-parallel collectives' time.
  if (reports_phase_times(cfg)) {
    s.walk->set_phase_clock(dev.make_phase_clock());
    comms.data().tensors->set_timing(true);
  }
  s.reporter = std::make_unique<StepReporter>(cfg, o, comms, num_params(), &dev, s.model->flops_per_token());
  if (!cfg.checkpoint.dir.empty()) {
    s.ckpt = std::make_unique<Checkpointer>(cfg, topo, *s.zero, dev, units, s.plan.mirror);
    s.reporter->set_checkpoints(&s.ckpt->saved());
  }
}

Trainer::~Trainer() = default;

int64_t Trainer::step() const { return impl_->state.step; }
void Trainer::set_peak_flops(double peak) { impl_->reporter->set_peak_flops(peak); }
void Trainer::set_phase_clock(std::unique_ptr<PhaseClock> clock) { impl_->walk->set_phase_clock(std::move(clock)); }
void Trainer::set_step_hook(std::function<void(int64_t)> hook) { impl_->step_hook = std::move(hook); }

std::string Trainer::enable_step_graph(std::unique_ptr<StepGraph> graph) {
  Impl& s = *impl_;
  // [Note: step graph]: what each condition keeps out of the recording.
  if (s.topo.world_size() > 1) return "more than one rank (the communicators' streams and host reductions)";
  if (s.cfg.zero.offload_optimizer.device != "none" || s.cfg.zero.offload_param.device != "none")
    return "offload (the copy streams and the host's update)";
  if (s.act_offload) return "activation_checkpointing.cpu_checkpointing (the copy streams)";
  if (s.cfg.zero.stage != 0 && !s.comms.data().tensors->graph_safe())
    return "ZeRO stage " + std::to_string(s.cfg.zero.stage) + " (its reductions and gathers go through the " +
           s.comms.data().tensors->group_name() + " group's communicator, whose calls the graph does not record)";
  if (!s.finalizer->verdict_on_device()) return "the step's verdict read by the host (fp16 loss scaling or ZTRAIN_VERDICT=host)";
  if (s.data->packing()) return "packed documents";
  if (s.cfg.train.device_memory_cap_gib > 0)
    return "a device memory cap (train.device_memory_cap_gib: the cache release it may need synchronizes the device)";
  if (s.fault.kind != InjectedFault::Kind::none) return "an injected fault (ZT_INJECT_FAULT)";
  std::unique_ptr<StepGraph> g = graph ? std::move(graph) : s.dev.make_step_graph();
  if (!g) return "a device without graphs";
  s.walk->set_step_graph(std::move(g));
  return "";
}

std::string Trainer::step_graph_summary() const {
  const StepGraph* g = impl_->walk->step_graph();
  return g ? g->summary() : "";
}

int64_t Trainer::num_params() const { return impl_->zero->layout().total_numel(); }

nlohmann::json Trainer::state_json() const {
  const Impl& s = *impl_;
  return zt::state_json(s.state, s.cfg, s.layout(), *s.schedule, s.finalizer->scaler());
}

bool Trainer::start(const std::string& resume) {
  PhaseScope phase(RunPhase::init);
  Impl& s = *impl_;
  // checkpoint.dir is checked before the first step (a fresh run: after
  // model.init_from, whose errors come first).
  if (s.ckpt && !resume.empty()) s.ckpt->check_dir(true);
  s.zero->init_params(s.cfg.train.seed);
  // model.init_from: a fresh start (no --resume, or auto found nothing)
  // begins from those weights (train/init_from.hpp).
  const auto fresh_start = [&s] {
    if (!s.cfg.model.init_from.empty()) init_weights_from(s.cfg.model.init_from, s.model->desc(), *s.zero, s.topo);
    return false;
  };
  if (resume.empty()) {
    fresh_start();
    if (s.ckpt) s.ckpt->check_dir(false);
    s.reporter->begin(false, 0, "");
    return false;
  }
  if (!s.ckpt) throw CollectiveError("--resume needs checkpoint.dir in the config", kExitBadInput);
  std::string dir;
  for (;;) {
    dir = s.ckpt->resolve(resume);
    if (dir.empty()) {
      log_info("--resume auto: no checkpoint under ", s.cfg.checkpoint.dir, "; starting from scratch");
      s.reporter->begin(false, 0, "");
      return fresh_start();
    }
    try {
      s.state = load_state(s.ckpt->load(dir), s.cfg, s.finalizer->scaler());
      break;
    } catch (const CheckpointDataError&) {
      // Damage the SHA-256 did not see (Fletcher32): like damage it does
      // see, --resume auto falls back to the checkpoint before.
      if (resume != "auto") throw;
      log_warn("--resume auto: ", dir, " cannot be read; trying the checkpoint before it");
      s.ckpt->exclude(dir);
    }
  }
  // A checkpoint past train.steps would train nothing and say nothing.
  if (s.state.step > s.cfg.train.steps)
    throw CollectiveError(detail::concat("--resume: checkpoint ", dir, " is at step ", s.state.step,
                                         ", past train.steps = ", s.cfg.train.steps,
                                         " (--steps): nothing to train; ask for more steps than ", s.state.step),
                          kExitBadInput);
  s.ckpt->set_aside_damaged();
  log_info("resumed from ", dir, " at step ", s.state.step);
  if (s.state.step == s.cfg.train.steps)
    log_info("the checkpoint is at train.steps = ", s.cfg.train.steps, " already: nothing to train (a finished run)");
  s.reporter->begin(true, s.state.step, dir);
  return true;
}

// The watchdog's fault tests (train/fault_injection.hpp): a rank that stops,
// one whose collectives stop matching the others', a stream that stalls.
void Trainer::inject_hang(int64_t step) {
  Impl& s = *impl_;
  const int rank = s.topo.world_rank();
  if (s.fault.at(InjectedFault::Kind::hang, rank, step)) {
    log_warn("injected fault (ZT_INJECT_FAULT): rank ", rank, " stops at step ", step);
    hang_forever();
  }
  if (s.fault.at(InjectedFault::Kind::desync, rank, step)) {
    log_warn("injected fault (ZT_INJECT_FAULT): rank ", rank, " issues an extra all-reduce at step ", step);
    // One f64 is the call the others see, but a mismatched MPI collective
    // may write as much as the peer's matching call sends into this buffer;
    // no call of the step sends more than the model in f32 (a gradient
    // all-reduce at most), so room for that keeps the fault a desync for
    // the watchdog to name, not a stack overflow (AddressSanitizer found
    // one with a one-double buffer).
    std::vector<double> x(static_cast<size_t>(num_params() / 2 + 1), 1.0);
    CommRequest r = s.comms.data().host->all_reduce(Tensor(x.data(), DType::f64, Shape{1}), ReduceOp::sum);
    wait(r);
  }
  if (s.fault.at(InjectedFault::Kind::stall_stream, rank, step)) {
#if ZT_HAVE_CUDA
    if (auto* cuda = dynamic_cast<CudaDevice*>(&s.dev)) {
      log_warn("injected fault (ZT_INJECT_FAULT): rank ", rank, "'s compute stream stalls at step ", step);
      ZT_CUDA_CHECK(cudaLaunchHostFunc(cuda->stream(), [](void*) { hang_forever(); }, nullptr));
      return;
    }
#endif
    // The CPU device runs its work on the calling thread and cannot stall
    // behind the host's back: this rank waits, through the same watched wait
    // as a CUDA synchronize ([Note: watched host waits]), for a device that
    // never finishes.
    log_warn("injected fault (ZT_INJECT_FAULT): rank ", rank, " waits for a stuck device from step ", step);
    host_wait::Scope wait("a simulated stuck device (ZT_INJECT_FAULT=stall-stream)", [] { return false; });
    hang_forever();
  }
}

StepStats Trainer::train_step(bool read_loss) {
  Impl& s = *impl_;
  if (s.fault.at(InjectedFault::Kind::throw_at_step, s.topo.world_rank(), s.state.step + 1))
    ZT_THROW("injected fault (ZT_INJECT_FAULT) at step ", s.fault.step);
  set_op_step(s.state.step + 1);  // [Note: op context]
  set_op_phase(RunPhase::forward);
  inject_hang(s.state.step + 1);
  StepStats st;
  const double t0 = now_s();
  s.zero->take_param_swap_stats();  // drops the reads of the validation since the last step
  // The communicator ZeRO moves tensors through: its counters are the step's volume.
  Communicator& dp = *s.comms.data().tensors;
  dp.reset_counters();
  st.lr = s.schedule->lr_at(s.state.applied);
  const GradientVerdict v = s.walk->train(s.state, stop_signal_received(), &st.timing);
  st.step = s.state.step;
  st.grad_norm = v.grad_norm;
  st.tokens = s.walk->last_targets();
  st.skipped = v.skipped;
  st.nonfinite = v.nonfinite;
  st.loss_scale = v.loss_scale;
  st.comm = dp.counters();
  dp.hold_device_times();  // a validation or a save before the read is not the step's
  if (const auto* off = dynamic_cast<const OffloadAdamW*>(s.placement.get())) {
    st.offload = off->last_times();
    st.nvme_bytes = off->nvme_bytes() + s.zero->param_nvme_bytes();
    const ParamSwapStats ps = s.zero->take_param_swap_stats();  // [Note: parameter offload to NVMe]
    st.offload->param_read_bytes = ps.read_bytes;
    st.offload->param_write_bytes = ps.write_bytes;
    st.offload->param_read_wait_s = ps.read_wait_s;
    st.offload->param_write_wait_s = ps.write_wait_s;
    if (const GradLandingTimes* g = s.zero->grad_landing_times()) {  // [Note: gradients on the host]
      st.offload->grads_landed_bytes = g->bytes;
      st.offload->grads_landed_wait_s = g->wait_s;
      st.offload->grads_add_s = g->add_s;
    }
  }
  st.step_seconds = now_s() - t0;
  if (host_calls::active() && s.topo.world_rank() == 0)  // [Note: host round trips]
    log_info("host calls in step ", st.step, ": walk: ", s.walk->walk_calls().str(),
             "; reduction: ", s.walk->reduce_calls().str());
  s.stopped = v.stop;
  if (read_loss) {
    st.loss = s.walk->read_loss();
    read_step_times(st);
  }
  return st;
}

void Trainer::read_step_times(StepStats& st) {
  Impl& s = *impl_;
  s.walk->read_phase_times(st.timing);
  s.comms.data().tensors->add_device_times(st.comm);
}

double Trainer::evaluate() {
  Impl& s = *impl_;
  return s.data->has_val() ? s.walk->evaluate(s.cfg.train.eval_steps) : std::nan("");
}

void Trainer::run() {
  Impl& s = *impl_;
  const Config& cfg = s.cfg;
  log_info("model: ", s.model->arch(), ", ", cfg.model.n_layer, " layers, d_model ", cfg.model.d_model, ", ",
           cfg.model.n_head, " heads, seq ", s.opts.T, ", vocab ", cfg.model.vocab_size, ": ", num_params(),
           " parameters");
  log_info("batch: ", s.opts.global_batch, " sequences (", s.opts.tokens_per_step(), " tokens) = micro ", s.opts.B,
           " x accum ", s.opts.accum, " x dp ", s.topo.dp_size(), "; ZeRO stage ", cfg.zero.stage,
           offload_description(cfg), "; ",
           dtype_name(s.opts.param_dtype), " parameters; activation checkpointing ",
           recompute_description(cfg.model.activation_checkpointing, cfg.model.recompute_layers),
           cfg.activation_checkpointing.cpu_checkpointing ? ", checkpoints in host memory (cpu_checkpointing)" : "");
  install_stop_handlers();
  const double start = now_s();
  const int64_t first_step = s.state.step;
  for (bool last = s.state.step >= cfg.train.steps; !last;) {
    StepStats st = train_step(false);
    s.count_nonfinite(st);
    s.reporter->add(st);
    if (s.step_hook) s.step_hook(st.step);
    const AfterStep after = after_step(cfg, st.step, s.stopped, st.skipped, s.ckpt != nullptr, s.data->has_val());
    last = after.last;
    // The save at the end never replaces a checkpoint of an earlier run
    // (same directory, no --resume): that one is kept, with a warning.
    if (after.save && after.save_at_end_only && s.ckpt->exists(st.step))
      log_warn("checkpoint.dir ", cfg.checkpoint.dir, " already holds step_", st.step,
               " (an earlier run's; --resume auto continues one): kept, the end of this run is not saved");
    else if (after.save) {
      PhaseScope phase(RunPhase::checkpoint);
      s.ckpt->save(st.step, state_json());
    }
    if (s.stopped)
      log_info("stop signal received: ",
               s.ckpt ? "checkpoint saved at step " + std::to_string(st.step) + ", "
                      : std::string("no checkpoint.dir, nothing saved; "),
               "exiting");
    set_op_phase(RunPhase::validate);
    const double val = after.validate ? evaluate() : std::nan("");
    set_op_phase(RunPhase::report);
    if (!after.print) continue;
    st.loss = s.walk->read_loss();
    read_step_times(st);
    s.reporter->report(st, val, now_s() - start, st.step - first_step);
  }
  if (s.ckpt) {
    PhaseScope phase(RunPhase::checkpoint);
    s.ckpt->finish();
  }
  const auto* off = dynamic_cast<const OffloadAdamW*>(s.placement.get());
  s.reporter->report_end(s.dev, s.state.step, now_s() - start,
                         (off ? off->nvme_bytes() : 0) + s.zero->param_nvme_bytes());
}

}  // namespace zt
