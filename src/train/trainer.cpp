#include "train/trainer.hpp"

#include <omp.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>

#include <cblas.h>

#include "core/log.hpp"
#include "io/sampler.hpp"
#include "io/synthetic.hpp"
#include "io/token_dataset.hpp"
#include "modules/gpt.hpp"
#include "modules/runner.hpp"
#include "optim/adamw.hpp"
#include "optim/clip.hpp"
#include "optim/loss_scaler.hpp"
#include "optim/lr_schedule.hpp"
#include "pipeline/executor.hpp"
#include "train/memory_estimate.hpp"
#include "train/checkpointing.hpp"
#include "train/fault_injection.hpp"
#include "train/metrics.hpp"
#include "zero/zero_engine.hpp"
#if ZT_HAVE_CUDA
#include "modules/cuda/adamw.cuh"
#include "runtime/cuda/cuda_device.hpp"
#endif

namespace zt {

int configure_threads(int local_ranks) {
  int threads = 0;
  if (const char* env = std::getenv("OMP_NUM_THREADS"); env != nullptr && std::atoi(env) > 0) {
    threads = std::atoi(env);
  } else {
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    threads = std::max(1, cores / std::max(1, local_ranks));
  }
  omp_set_num_threads(threads);
  // OpenBLAS runs single-threaded inside each rank: OpenMP threads spinning
  // after a parallel region starve its own pool (measured 2.5x slower).
  openblas_set_num_threads(1);
  return threads;
}

namespace {

// SIGTERM or SIGUSR1 (what SLURM sends before a time limit or preemption):
// finish the step, save a checkpoint, exit 0.
std::atomic<int> g_stop_signal{0};
extern "C" void on_stop_signal(int sig) { g_stop_signal.store(sig); }

double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

std::string format_duration(double s) {
  const long t = static_cast<long>(s + 0.5);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else
    std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  return buf;
}

}  // namespace

struct Trainer::Impl {
  const Config& cfg;
  Topology& topo;
  Device& dev;
  GptConfig gpt;
  std::vector<std::unique_ptr<Unit>> units_owned;
  std::vector<const Unit*> units;
  Kernels& kernels;
  Communicator& tensor_dp;  // moves device tensors over the data-parallel group
  Communicator* tensor_pp;  // ... over the pipeline group (pipeline runs)
  Communicator* tensor_tie;  // ... between the two copies of the tied embedding
  // Pipeline: P stages of V chunks each; this rank's engine holds its chunks'
  // units, and the last stage a copy of the unit its head ties to (`mirror`).
  int P = 1, V = 1;
  ScheduleKind schedule_kind = ScheduleKind::one_f_one_b;
  std::vector<UnitRange> chunks;
  std::vector<bool> local;
  int mirror = -1;
  std::unique_ptr<PipelineExecutor> pipe;
  PipelineTiming pipe_timing;
  std::unique_ptr<ZeroEngine> zero;
  std::unique_ptr<UnitRunner> runner;
  std::unique_ptr<MicroBatchState> mb;
  std::unique_ptr<TokenDataset> train_data, val_data;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<ValidationSampler> val_sampler;
  std::unique_ptr<LrSchedule> schedule;
  AdamWParams adamw;
  DType param_dtype = DType::f32;
  DType act_dtype = DType::f32;
  int64_t B = 0, T = 0, accum = 1, global_batch = 0;
  int64_t step = 0;     // iterations taken (each consumes one global batch)
  int64_t applied = 0;  // optimizer updates made (fp16 skips some): drives the LR schedule and Adam
  std::unique_ptr<LossScaler> scaler;  // fp16 only
  Buffer tokens, targets, dloss;  // (B, T) i32, i32, f32 on the device
  std::vector<int32_t> host_tokens, host_targets;  // (B, T) filled by the sampler
  std::vector<float> host_loss, host_dloss;        // (B, T)
  Buffer norm_acc;     // (1) f64 on the device
  Buffer overflow;     // (units) i32 on the device
  MetricsWriter metrics;
  std::unique_ptr<Checkpointer> ckpt;
  InjectedFault fault;  // fault tests (train/fault_injection.hpp)

  Impl(const Config& c, Topology& t, Device& d, Kernels& k, Communicator& tdp, Communicator* tpp, Communicator* ttie)
      : cfg(c), topo(t), dev(d), kernels(k), tensor_dp(tdp), tensor_pp(tpp), tensor_tie(ttie) {}

  // Units and chunks of the pipeline; validates (P, V, M) for the schedule.
  void plan_pipeline() {
    P = topo.pp_size();
    local.assign(units.size(), P == 1);
    if (P == 1) return;
    V = cfg.pipeline.num_chunks;
    schedule_kind = schedule_kind_from_name(cfg.pipeline.pipe_schedule_name);
    validate_schedule(schedule_kind, P, V, static_cast<int>(accum));
    std::vector<int64_t> params;
    for (const Unit* u : units) {
      int64_t n = 0;
      for (const ParamSpec& p : u->params()) n += p.shape.numel();
      params.push_back(n);
    }
    chunks = partition_units(params, P * V, partition_kind_from_name(cfg.pipeline.partition));
    for (int c = 0; c < V; ++c)
      for (int u = chunks[c * P + topo.pp_rank()].first; u < chunks[c * P + topo.pp_rank()].last; ++u) local[u] = true;
    for (int u = 0; u < static_cast<int>(units.size()); ++u)
      for (const TiedParam& t : units[u]->tied())
        if (local[u] && !local[t.unit]) {
          local[t.unit] = true;
          mirror = t.unit;
        }
    ZT_CHECK(tensor_pp != nullptr, "pipeline run without a pipeline communicator");
  }

  // Sums the gradient of the tied unit's two copies (first and last stage,
  // same shard), so both apply the same update and stay equal.
  void reduce_tied_copies() {
    if (tensor_tie == nullptr) return;
    const int tied = mirror >= 0 ? mirror : 0;
    for (const OwnedShard& sh : zero->owned_shards())
      if (sh.unit == tied) all_reduce_sync(*tensor_tie, Tensor(sh.grad, DType::f32, Shape{sh.numel()}, dev.kind()));
  }

  // wall_clock_breakdown with a pipeline: per-stage forward, backward, p2p
  // wait and idle time of the last step, and the measured bubble (idle over
  // compute, averaged over stages) beside the schedule's (P-1)/(V*M).
  void report_pipeline_timing(nlohmann::json& rec) {
    std::vector<double> t(static_cast<size_t>(4 * P), 0.0);
    if (topo.dp_rank() == 0) {
      const size_t o = static_cast<size_t>(4 * topo.pp_rank());
      t[o] = pipe_timing.forward_s;
      t[o + 1] = pipe_timing.backward_s;
      t[o + 2] = pipe_timing.p2p_wait_s;
      t[o + 3] = pipe_timing.total_s;
    }
    all_reduce_sync(topo.world(), Tensor(t.data(), DType::f64, Shape{4 * P}));
    nlohmann::json stages = nlohmann::json::array();
    double bubble = 0;
    for (int p = 0; p < P; ++p) {
      const double* x = &t[static_cast<size_t>(4 * p)];
      const double busy = x[0] + x[1], idle = x[3] - busy;
      bubble += busy > 0 ? idle / busy / P : 0;
      stages.push_back({{"forward_s", x[0]}, {"backward_s", x[1]}, {"p2p_wait_s", x[2]}, {"idle_s", idle}});
      char line[200];
      std::snprintf(line, sizeof line, "  stage %d: forward %.1f ms, backward %.1f ms, p2p wait %.1f ms, idle %.1f ms", p,
                    x[0] * 1e3, x[1] * 1e3, x[2] * 1e3, idle * 1e3);
      log_info(line);
    }
    const double ideal = ideal_bubble(schedule_kind, P, V, static_cast<int>(accum));
    char line[160];
    std::snprintf(line, sizeof line, "  pipeline bubble: measured %.1f%%, schedule (P-1)/(V*M) = %.1f%%", bubble * 100,
                  ideal * 100);
    log_info(line);
    rec["pipeline"] = stages;
    rec["bubble_measured"] = bubble;
    rec["bubble_schedule"] = ideal;
  }

  // The forward-only instruction list of an evaluation: micro-batches in
  // order, each through this stage's chunks in order (no cycle can form: a
  // chunk waits only on an earlier (micro-batch, chunk) pair).
  void load_data() {
    const int64_t window = T + 1;
    if (cfg.data.embedded) {
      EmbeddedCorpus corpus = make_embedded_corpus();
      log_info("data: embedded synthetic corpus (Markov source, entropy ", corpus.entropy_nats, " nats/token)");
      train_data = std::make_unique<TokenDataset>(TokenDataset::from_tokens(std::move(corpus.train), "<embedded train>"));
      val_data = std::make_unique<TokenDataset>(TokenDataset::from_tokens(std::move(corpus.val), "<embedded val>"));
    } else {
      train_data = std::make_unique<TokenDataset>(TokenDataset::open_list(cfg.data.train));
      if (!cfg.data.val.empty()) val_data = std::make_unique<TokenDataset>(TokenDataset::open_list(cfg.data.val));
    }
    train_data->validate_vocab(gpt.vocab_size);
    if (train_data->size() < window)
      ZT_USER_ERROR("data.train: ", train_data->size(), " tokens cannot fill one sequence of ", window);
    sampler = std::make_unique<Sampler>(train_data->size(), T, cfg.train.seed);
    if (val_data) {
      val_data->validate_vocab(gpt.vocab_size);
      if (val_data->size() < window)
        ZT_USER_ERROR("data.val: ", val_data->size(), " tokens cannot fill one sequence of ", window);
      val_sampler = std::make_unique<ValidationSampler>(val_data->size(), T);
    }
  }

  // Row b of micro-batch m on this rank is sample (m*dp + dp_rank)*B + b of
  // the global batch: every layout of the same global batch sees the same set.
  int64_t global_index(int64_t m, int64_t b) const { return (m * topo.dp_size() + topo.dp_rank()) * B + b; }

  void fill_batch(const Sampler& s, const TokenDataset& data, int64_t step_index, int64_t m) {
    int32_t* x = host_tokens.data();
    int32_t* y = host_targets.data();
    for (int64_t b = 0; b < B; ++b) s.fill(step_index, global_index(m, b), global_batch, x + b * T, y + b * T, data);
  }
  void fill_val_batch(int64_t e, int64_t m) {
    int32_t* x = host_tokens.data();
    int32_t* y = host_targets.data();
    for (int64_t b = 0; b < B; ++b)
      val_sampler->fill(e, global_index(m, b), global_batch, x + b * T, y + b * T, *val_data);
  }
  void upload_batch_to(const Tensor& x, const Tensor& y) {
    dev.copy_from_host(x.data, host_tokens.data(), x.bytes());
    dev.copy_from_host(y.data, host_targets.data(), y.bytes());
  }

  // AdamW on elements [off, off+n) of an owned shard, on the shard's device.
  void adamw_span(OwnedShard& sh, int64_t off, int64_t n, const AdamWParams& hp, float grad_scale, bool decay) {
#if ZT_HAVE_CUDA
    if (dev.kind() == DeviceKind::cuda) {
      adamw_update_cuda(sh.master + off, sh.grad + off, sh.exp_avg + off, sh.exp_avg_sq + off, n, hp, applied + 1,
                        grad_scale, decay, nullptr, DType::f32, static_cast<CudaDevice&>(dev).stream());
      return;
    }
#endif
    adamw_update(sh.master + off, sh.grad + off, sh.exp_avg + off, sh.exp_avg_sq + off, n, hp, applied + 1,
                 grad_scale, decay);
  }

  // sum of squares of every owned gradient shard (one host read per step).
  double owned_grad_sq() {
    kernels.zero(norm_acc.tensor());
    for (const OwnedShard& sh : zero->owned_shards())
      if (sh.unit != mirror)  // the tied copy is counted on the first stage
        kernels.sum_squares(Tensor(sh.grad, DType::f32, Shape{sh.numel()}, dev.kind()), norm_acc.tensor());
    double sq = 0;
    dev.copy_to_host(&sq, norm_acc.data(), sizeof sq);
    return sq;
  }

  // fp16: agrees over all ranks whether any gradient overflowed, updates the
  // loss scale and returns whether to skip the step. An overflow at the
  // minimum scale ends the run, naming the unit where it first appears in
  // backward order (the highest unit whose gradient is not finite).
  bool check_overflow() {
    const std::vector<OwnedShard>& shards = zero->owned_shards();
    std::vector<double> bad(units.size(), 0.0);  // by unit: the same length on every rank
    std::vector<int32_t> flags(shards.size(), 0);
    kernels.zero(overflow.tensor());
    for (size_t i = 0; i < shards.size(); ++i)
      kernels.check_overflow(Tensor(shards[i].grad, DType::f32, Shape{shards[i].numel()}, dev.kind()),
                             overflow.tensor().slice1d(static_cast<int64_t>(i), 1));
    dev.copy_to_host(flags.data(), overflow.data(), flags.size() * sizeof(int32_t));
    bool any = false;
    for (size_t i = 0; i < shards.size(); ++i) {
      if (flags[i] != 0) bad[static_cast<size_t>(shards[i].unit)] = 1;
      any = any || flags[i] != 0;
    }
    any = all_reduce_scalar(topo.world(), any ? 1.0 : 0.0, ReduceOp::max) != 0;
    const bool skip = scaler->update(any);
    if (any) {
      all_reduce_sync(topo.world(), Tensor(bad.data(), DType::f64, Shape{static_cast<int64_t>(bad.size())}),
                      ReduceOp::max);
      std::string where = "?";
      for (size_t i = bad.size(); i-- > 0;)
        if (bad[i] != 0) {
          where = units[i]->name();
          break;
        }
      if (scaler->overflow_at_min_scale()) {
        throw CollectiveError(detail::concat(
            "fp16: gradients overflow at the minimum loss scale (", scaler->scale(), ", fp16.min_loss_scale) at step ",
            step + 1, "; the overflow first appears in unit '", where,
            "' (backward order). The run cannot continue: lower the learning rate, use bf16, or check the data."));
      }
      log_info("step ", step + 1, ": fp16 gradient overflow (first in unit '", where, "'), step skipped, loss scale ",
               scaler->scale());
    }
    return skip;
  }

  // Forward (and backward when `train`) of one micro-batch; returns the sum of
  // its per-token losses. Adds the phases' seconds to *fwd_s and *bwd_s.
  double run_micro_batch(bool train, double* fwd_s = nullptr, double* bwd_s = nullptr) {
    mb->reset();
    const Tensor x = tokens.tensor();
    const Tensor y = targets.tensor();
    const int L = static_cast<int>(units.size());
    const double t0 = now_seconds();
    Tensor loss = runner->forward(0, L, *mb, *zero, x, y);
    // The per-token losses come to the host for the step's mean loss.
    dev.copy_to_host(host_loss.data(), loss.data, host_loss.size() * sizeof(float));
    double sum = 0;
    for (float l : host_loss) sum += l;
    const double t1 = now_seconds();
    if (train) runner->backward(0, L, *mb, *zero, *zero, dloss.tensor());
    if (fwd_s) *fwd_s += t1 - t0;
    if (bwd_s) *bwd_s += now_seconds() - t1;
    return sum;
  }
};

Trainer::Trainer(const Config& cfg, Topology& topo, Device& dev, Kernels& kernels, Communicator& tensor_dp,
                 Communicator* tensor_pp, Communicator* tensor_tie)
    : impl_(std::make_unique<Impl>(cfg, topo, dev, kernels, tensor_dp, tensor_pp, tensor_tie)) {
  Impl& s = *impl_;
  s.gpt = GptConfig{cfg.model.n_layer, cfg.model.n_head, cfg.model.d_model, cfg.model.seq_len, cfg.model.vocab_size};
  s.B = cfg.batch.micro_batch;
  s.T = cfg.model.seq_len;
  s.accum = cfg.batch.grad_accum;
  s.global_batch = cfg.batch.train_batch_size;
  ZT_CHECK(s.global_batch == s.B * s.accum * topo.dp_size(), "batch triplet not resolved for this world");
  if (cfg.bf16.enabled) s.param_dtype = s.act_dtype = DType::bf16;
  if (cfg.fp16.enabled) {
    s.param_dtype = s.act_dtype = DType::f16;
    LossScalerConfig lc;
    lc.loss_scale = cfg.fp16.loss_scale;
    lc.initial_scale_power = cfg.fp16.initial_scale_power;
    lc.loss_scale_window = cfg.fp16.loss_scale_window;
    lc.hysteresis = cfg.fp16.hysteresis;
    lc.consecutive_hysteresis = cfg.fp16.consecutive_hysteresis;
    lc.min_loss_scale = cfg.fp16.min_loss_scale;
    s.scaler = std::make_unique<LossScaler>(lc);
  }

  s.metrics = MetricsWriter(cfg.log.dir, topo.world_rank() == 0);
  s.fault = injected_fault();
  s.load_data();
  s.units_owned = build_gpt(s.gpt);
  for (const auto& u : s.units_owned) s.units.push_back(u.get());

  ZeroOptions zo;
  zo.stage = cfg.zero.stage;
  zo.reduce_bucket_size = cfg.zero.reduce_bucket_size;
  zo.allgather_bucket_size = cfg.zero.allgather_bucket_size;
  zo.overlap_comm = cfg.zero.overlap_comm;
  zo.prefetch_bucket_size = cfg.zero.stage3_prefetch_bucket_size;
  zo.param_persistence_threshold = cfg.zero.stage3_param_persistence_threshold;
  zo.max_live_parameters = cfg.zero.stage3_max_live_parameters;
  zo.max_reuse_distance = cfg.zero.stage3_max_reuse_distance;
  zo.param_dtype = s.param_dtype;
  s.plan_pipeline();
  s.zero = std::make_unique<ZeroEngine>(s.units, zo, dev, kernels, tensor_dp, topo.dp(), s.local);
  s.zero->init_params(cfg.train.seed);

  s.runner = std::make_unique<UnitRunner>(s.units, s.kernels, dev, s.param_dtype, s.act_dtype,
                                          cfg.model.activation_checkpointing);
  // The saved-activations arena starts with one chunk of the estimator's
  // figure for a micro-batch (plus 5%), so one chunk usually holds it all and
  // the peak bytes reported are what a micro-batch really keeps; it grows by
  // such chunks if the estimate was short.
  const double estimate = estimate_memory(cfg, topo.dp_size()).row.activations;
  const size_t chunk = std::max<size_t>(size_t{1} << 16, static_cast<size_t>(estimate * 1.05));
  s.mb = std::make_unique<MicroBatchState>(dev, static_cast<int>(s.units.size()), chunk);
  if (s.P > 1)
    s.pipe = std::make_unique<PipelineExecutor>(s.chunks, s.P, s.V, topo.pp_rank(), *s.runner, dev, kernels,
                                                *tensor_pp, s.B, s.T, s.gpt.d_model, chunk);
  s.tokens = Buffer(dev, DType::i32, Shape{s.B, s.T}, MemTag::activations);
  s.targets = Buffer(dev, DType::i32, Shape{s.B, s.T}, MemTag::activations);
  s.dloss = Buffer(dev, DType::f32, Shape{s.B, s.T}, MemTag::activations);
  s.host_tokens.resize(static_cast<size_t>(s.B * s.T));
  s.host_targets.resize(static_cast<size_t>(s.B * s.T));
  s.host_loss.resize(static_cast<size_t>(s.B * s.T));
  s.host_dloss.resize(static_cast<size_t>(s.B * s.T));
  s.norm_acc = Buffer(dev, DType::f64, Shape{1}, MemTag::workspace);
  s.overflow = Buffer(dev, DType::i32, Shape{static_cast<int64_t>(s.units.size())}, MemTag::workspace);

  s.adamw = AdamWParams{cfg.optimizer.lr, cfg.optimizer.beta1, cfg.optimizer.beta2, cfg.optimizer.eps,
                        cfg.optimizer.weight_decay};
  LrScheduleSpec spec;
  spec.type = cfg.scheduler.type;
  spec.base_lr = cfg.optimizer.lr;
  spec.warmup_min_lr = cfg.scheduler.warmup_min_lr;
  spec.warmup_max_lr = cfg.scheduler.warmup_max_lr;
  spec.warmup_num_steps = cfg.scheduler.warmup_num_steps;
  spec.warmup_type = cfg.scheduler.warmup_type;
  spec.total_num_steps = cfg.scheduler.total_num_steps;
  spec.warmup_min_ratio = cfg.scheduler.warmup_min_ratio;
  spec.cos_min_ratio = cfg.scheduler.cos_min_ratio;
  s.schedule = make_lr_schedule(spec);
  if (!cfg.checkpoint.dir.empty())
    s.ckpt = std::make_unique<Checkpointer>(cfg, topo, *s.zero, dev, s.units, s.mirror);
}

nlohmann::json Trainer::state_json() const {
  const Impl& s = *impl_;
  nlohmann::json j = {{"step", s.step},
                      {"applied_steps", s.applied},
                      {"sampler", {{"seed", s.cfg.train.seed}, {"step", s.step}}},
                      {"lr", s.schedule->lr_at(s.applied)},
                      {"topology",
                       {{"world", s.topo.world_size()}, {"pp", s.P}, {"num_chunks", s.V}, {"dp", s.topo.dp_size()},
                        {"zero_stage", s.cfg.zero.stage}}},
                      {"config", resolved_json(s.cfg)}};
  if (s.scaler) {
    const LossScalerState ls = s.scaler->state();
    j["loss_scaler"] = {{"scale", ls.scale}, {"iteration", ls.iteration},
                        {"last_overflow_iteration", ls.last_overflow_iteration},
                        {"hysteresis_left", ls.hysteresis_left}};
  }
  return j;
}

bool Trainer::resume(const std::string& where) {
  Impl& s = *impl_;
  if (!s.ckpt) ZT_USER_ERROR("--resume needs checkpoint.dir in the config");
  const std::string dir = s.ckpt->resolve(where);
  if (dir.empty()) {
    log_info("--resume auto: no checkpoint under ", s.cfg.checkpoint.dir, "; starting from scratch");
    return false;
  }
  const nlohmann::json st = s.ckpt->load(dir);
  s.step = st.at("step").get<int64_t>();
  s.applied = st.at("applied_steps").get<int64_t>();
  if (st.at("sampler").at("seed").get<uint64_t>() != s.cfg.train.seed)
    log_warn("resuming with train.seed ", s.cfg.train.seed, " where the checkpoint used ",
             st.at("sampler").at("seed").get<uint64_t>(), ": the data order changes");
  if (s.scaler && st.contains("loss_scaler")) {
    const nlohmann::json& l = st.at("loss_scaler");
    s.scaler->load_state(LossScalerState{l.at("scale").get<double>(), l.at("iteration").get<int64_t>(),
                                         l.at("last_overflow_iteration").get<int64_t>(),
                                         l.at("hysteresis_left").get<int>()});
  }
  log_info("resumed from ", dir, " at step ", s.step);
  return true;
}

Trainer::~Trainer() = default;

int64_t Trainer::step() const { return impl_->step; }
int64_t Trainer::num_params() const { return impl_->zero->layout().total_numel(); }

StepStats Trainer::train_step() {
  Impl& s = *impl_;
  StepStats st;
  const double t0 = now_seconds();
  const int me = s.topo.world_rank();
  if (s.fault.at(InjectedFault::Kind::throw_at_step, me, s.step + 1))
    ZT_THROW("injected fault (ZT_INJECT_FAULT) at step ", s.fault.step);
  // The communicator ZeRO moves tensors through (NCCL or staged MPI on
  // GPUs, the MPI group on the CPU): its counters are the step's volume.
  Communicator& dp = s.tensor_dp;
  dp.reset_counters();
  s.zero->zero_grads();
  // Each token's loss weighs 1/(tokens in the global batch), times the fp16
  // loss scale: summing the gradients over micro-batches and ranks then gives
  // the (scaled) gradient of the mean loss.
  const double scale = s.scaler ? s.scaler->scale() : 1.0;
  const float w = static_cast<float>(scale / static_cast<double>(s.global_batch * s.T));
  std::fill(s.host_dloss.begin(), s.host_dloss.end(), w);
  s.dev.copy_from_host(s.dloss.data(), s.host_dloss.data(), s.dloss.bytes());
  double loss_sum = 0;
  if (s.pipe) {
    const auto load = [&](int m, const Tensor& x, const Tensor& y) {
      s.fill_batch(*s.sampler, *s.train_data, s.step, m);
      s.upload_batch_to(x, y);
    };
    const std::vector<PipeInstr> plan =
        make_schedule(s.schedule_kind, s.P, s.V, static_cast<int>(s.accum), s.topo.pp_rank());
    loss_sum = s.pipe->run(plan, *s.zero, *s.zero, load, s.dloss.tensor(), true, &s.pipe_timing);
    st.forward_s = s.pipe_timing.forward_s;
    st.backward_s = s.pipe_timing.backward_s;
    if (s.mirror >= 0) s.zero->done(s.mirror);  // the tie copy's accumulated gradient is complete
  } else {
    for (int64_t m = 0; m < s.accum; ++m) {
      s.fill_batch(*s.sampler, *s.train_data, s.step, m);
      s.upload_batch_to(s.tokens.tensor(), s.targets.tensor());
      loss_sum += s.run_micro_batch(true, &st.forward_s, &st.backward_s);
    }
  }
  const double t1 = now_seconds();
  s.zero->reduce_gradients();
  s.reduce_tied_copies();
  if (s.fault.at(InjectedFault::Kind::overflow, me, s.step + 1))
    for (OwnedShard& sh : s.zero->owned_shards())
      if (sh.unit == s.fault.unit) {
        const float inf = std::numeric_limits<float>::infinity();
        s.dev.copy_from_host(sh.grad, &inf, sizeof inf);
      }
  st.loss_scale = scale;
  if (s.scaler) st.skipped = s.check_overflow();

  // Every element is owned by exactly one rank (padding has zero gradient),
  // so the global norm counts no parameter twice.
  // Over this stage's data-parallel shards, then over the stages.
  double sq = s.zero->reduce_owned_sum(s.owned_grad_sq());
  if (s.P > 1) sq = all_reduce_scalar(s.topo.pp(), sq);
  const double grad_norm = std::sqrt(sq) / scale;
  const float coef = clip_coefficient(grad_norm, s.cfg.gradient_clipping);
  const double t2 = now_seconds();

  AdamWParams hp = s.adamw;
  hp.lr = s.schedule->lr_at(s.applied);
  if (!st.skipped) {
    const float grad_scale = static_cast<float>(coef / scale);
    for (OwnedShard& sh : s.zero->owned_shards()) {
      for (const DecaySpan& span : sh.spans) {
        const int64_t off = span.begin - sh.begin;
        s.adamw_span(sh, off, span.end - span.begin, hp, grad_scale, span.decay);
      }
    }
    ++s.applied;
  }
  s.zero->publish_params();
  ++s.step;
  const double t3 = now_seconds();

  for (int k = 0; k < kNumCommOps; ++k) st.comm_bytes[k] = dp.counters().bytes[k];
  // Gradients move in fp32, parameters in their storage dtype.
  const double grad_elems = static_cast<double>(st.comm_bytes[static_cast<int>(CommOp::all_reduce)]) * 2 / 4 +
                            static_cast<double>(st.comm_bytes[static_cast<int>(CommOp::reduce_scatter)]) / 4;
  const double param_elems = static_cast<double>(st.comm_bytes[static_cast<int>(CommOp::all_gather)]) /
                             static_cast<double>(dtype_size(s.param_dtype));
  st.comm_volume_psi = (grad_elems + param_elems) / static_cast<double>(num_params());
  st.reduce_s = t2 - t1;
  st.optimizer_s = t3 - t2;
  st.step = s.step;
  // The loss is computed on the last stage: the other stages add zeros.
  st.loss = all_reduce_scalar(s.P > 1 ? s.topo.world() : dp, loss_sum) / static_cast<double>(s.global_batch * s.T);
  st.grad_norm = grad_norm;
  st.lr = hp.lr;
  st.step_seconds = now_seconds() - t0;
  return st;
}

double Trainer::evaluate() {
  Impl& s = *impl_;
  if (!s.val_sampler) return std::nan("");
  // eval_steps global batches of validation windows, in order, split across
  // ranks and micro-batches exactly like training batches.
  double sum = 0;
  for (int64_t e = 0; e < s.cfg.train.eval_steps; ++e) {
    if (s.pipe) {
      const auto load = [&](int m, const Tensor& x, const Tensor& y) {
        s.fill_val_batch(e, m);
        s.upload_batch_to(x, y);
      };
      sum += s.pipe->run(make_forward_schedule(s.P, s.V, static_cast<int>(s.accum), s.topo.pp_rank()), *s.zero,
                         *s.zero, load, s.dloss.tensor(), false);
      continue;
    }
    for (int64_t m = 0; m < s.accum; ++m) {
      s.fill_val_batch(e, m);
      s.upload_batch_to(s.tokens.tensor(), s.targets.tensor());
      sum += s.run_micro_batch(false);
    }
  }
  sum = all_reduce_scalar(s.P > 1 ? s.topo.world() : s.topo.dp(), sum);
  return sum / static_cast<double>(s.cfg.train.eval_steps * s.global_batch * s.T);
}

void Trainer::run() {
  Impl& s = *impl_;
  const Config& cfg = s.cfg;
  MetricsWriter& metrics = s.metrics;
  const int64_t tokens_per_step = s.global_batch * s.T;
  log_info("model: GPT ", s.gpt.n_layer, " layers, d_model ", s.gpt.d_model, ", ", s.gpt.n_head, " heads, seq ",
           s.T, ", vocab ", s.gpt.vocab_size, ": ", num_params(), " parameters");
  log_info("batch: ", s.global_batch, " sequences (", tokens_per_step, " tokens) = micro ", s.B, " x accum ",
           s.accum, " x dp ", s.topo.dp_size(), "; ZeRO stage ", cfg.zero.stage, "; ",
           dtype_name(s.param_dtype), " parameters; activation checkpointing ",
           cfg.model.activation_checkpointing ? "on" : "off");
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
  const double start = now_seconds();
  const int64_t first_step = s.step;
  double window_time = 0;
  int64_t window_steps = 0;
  bool stopped = false;
  while (s.step < cfg.train.steps && !stopped) {
    const StepStats st = train_step();
    window_time += st.step_seconds;
    ++window_steps;
    // Every rank agrees on a stop signal received by any of them.
    stopped = all_reduce_scalar(s.topo.world(), g_stop_signal.load(), ReduceOp::max) != 0;
    const bool save = s.ckpt && (stopped || (cfg.checkpoint.interval > 0 && st.step % cfg.checkpoint.interval == 0));
    if (save) s.ckpt->save(st.step, state_json());
    if (stopped) {
      log_info("stop signal received: ", s.ckpt ? "checkpoint saved at step " + std::to_string(st.step) + ", "
                                                 : std::string("no checkpoint.dir, nothing saved; "),
               "exiting");
    }
    const bool last = st.step == cfg.train.steps || stopped;
    const bool validate = s.val_sampler && ((cfg.train.eval_interval > 0 && st.step % cfg.train.eval_interval == 0) || last);
    const bool print = st.step % cfg.steps_per_print == 0 || last || st.step == 1 || st.skipped;
    double val = std::nan("");
    if (validate) val = evaluate();
    if (!print && !validate) continue;
    const double elapsed = now_seconds() - start;
    const double tok_s = window_steps > 0 ? tokens_per_step * window_steps / window_time : 0;
    const double eta =
        elapsed / static_cast<double>(st.step - first_step) * static_cast<double>(cfg.train.steps - st.step);
    char line[256];
    std::snprintf(line, sizeof line, "step %6lld/%lld | loss %.4f | lr %.3e | grad norm %.4f | %.0f tok/s | %s elapsed, ETA %s",
                  static_cast<long long>(st.step), static_cast<long long>(cfg.train.steps), st.loss, st.lr,
                  st.grad_norm, tok_s, format_duration(elapsed).c_str(), format_duration(eta).c_str());
    std::string msg = line;
    if (validate) {
      char v[48];
      std::snprintf(v, sizeof v, " | val loss %.4f", val);
      msg += v;
    }
    log_info(msg);
    nlohmann::json rec = {{"step", st.step}, {"loss", st.loss}, {"lr", st.lr}, {"grad_norm", st.grad_norm},
                          {"tokens_per_s", tok_s}, {"time_s", elapsed}};
    if (validate) rec["val_loss"] = val;
    if (s.scaler) {
      rec["loss_scale"] = st.loss_scale;
      rec["skipped"] = st.skipped;
    }
    if (cfg.wall_clock_breakdown) {
      nlohmann::json bytes = nlohmann::json::object();
      for (CommOp op : {CommOp::all_reduce, CommOp::reduce_scatter, CommOp::all_gather})
        bytes[comm_op_name(op)] = st.comm_bytes[static_cast<int>(op)];
      rec["comm_bytes"] = bytes;
      rec["comm_volume_psi"] = st.comm_volume_psi;
      rec["time_breakdown_s"] = {{"forward", st.forward_s}, {"backward", st.backward_s},
                                 {"reduce", st.reduce_s}, {"optimizer", st.optimizer_s}, {"step", st.step_seconds}};
      char bd[320];
      std::snprintf(bd, sizeof bd,
                    "  time: forward %.1f ms, backward %.1f ms, reduce %.1f ms, optimizer %.1f ms | comm per rank: "
                    "all_reduce %.2f MB, reduce_scatter %.2f MB, all_gather %.2f MB = %.2f x params",
                    st.forward_s * 1e3, st.backward_s * 1e3, st.reduce_s * 1e3, st.optimizer_s * 1e3,
                    st.comm_bytes[static_cast<int>(CommOp::all_reduce)] / 1e6,
                    st.comm_bytes[static_cast<int>(CommOp::reduce_scatter)] / 1e6,
                    st.comm_bytes[static_cast<int>(CommOp::all_gather)] / 1e6, st.comm_volume_psi);
      log_info(bd);
      if (s.P > 1) s.report_pipeline_timing(rec);
    }
    metrics.write(rec);
    window_time = 0;
    window_steps = 0;
  }
  if (s.ckpt) s.ckpt->finish();
  // Peak memory per tag: the largest over all ranks.
  const MemoryStats& ms = s.dev.stats();
  nlohmann::json peak = nlohmann::json::object();
  std::string table = "peak memory per rank (max over ranks):";
  for (int t = 0; t < kNumMemTags; ++t) {
    const double v = all_reduce_scalar(s.topo.world(), static_cast<double>(ms.peak[t]), ReduceOp::max);
    peak[mem_tag_name(static_cast<MemTag>(t))] = static_cast<int64_t>(v);
    char buf[64];
    std::snprintf(buf, sizeof buf, " %s %.2f MiB", mem_tag_name(static_cast<MemTag>(t)), v / 1048576.0);
    table += buf;
  }
  const double total = all_reduce_scalar(s.topo.world(), static_cast<double>(ms.peak_total), ReduceOp::max);
  peak["total"] = static_cast<int64_t>(total);
  char buf[64];
  std::snprintf(buf, sizeof buf, "; total %.2f MiB", total / 1048576.0);
  log_info(table, buf);
  metrics.write({{"event", "end"}, {"peak_bytes", peak}, {"steps", s.step}, {"time_s", now_seconds() - start}});
}

}  // namespace zt
