#include "train/step_report.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

#include "core/log.hpp"

namespace zt {
namespace {

std::string format_duration(double s) {
  const long t = static_cast<long>(s + 0.5);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else
    std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  return buf;
}

uint64_t bytes_of(const CommCounters& c, CommOp op) { return c.bytes[static_cast<int>(op)]; }

}  // namespace

double comm_volume_psi(const CommCounters& c, DType param_dtype, int64_t num_params) {
  const double grad_elems = static_cast<double>(bytes_of(c, CommOp::all_reduce)) * 2 / 4 +
                            static_cast<double>(bytes_of(c, CommOp::reduce_scatter)) / 4;
  const double param_elems =
      static_cast<double>(bytes_of(c, CommOp::all_gather)) / static_cast<double>(dtype_size(param_dtype));
  return (grad_elems + param_elems) / static_cast<double>(num_params);
}

StepReporter::StepReporter(const Config& cfg, const RunOptions& opts, CommBundle& comms, int64_t num_params,
                           const Device* dev, double flops_per_token)
    : flops_per_token_(flops_per_token), cfg_(cfg), opts_(opts), comms_(comms), num_params_(num_params),
      metrics_(cfg.log.dir, comms.topology().world_rank() == 0) {
  metrics_.enable_csv(cfg.csv_monitor, opts.global_batch);
  if (cfg.prometheus.enabled) {
    ZT_CHECK(dev != nullptr, "prometheus: the step report was given no device");
    RunFacts facts;
    facts.num_params = num_params;
    facts.flops_per_token = flops_per_token;
    facts.samples_per_step = opts.global_batch;
    facts.steps = cfg.train.steps;
    facts.loss_scaler = opts.loss_scaler.has_value();
    prometheus_ = std::make_unique<PrometheusExporter>(cfg.prometheus, comms.topology(), *dev, facts);
  }
}

StepReporter::~StepReporter() = default;

void StepReporter::add(const StepStats& st) {
  window_s_ += st.step_seconds;
  window_tokens_ += st.tokens;
  ++window_steps_;
  if (prometheus_) prometheus_->add(st);
}

void StepReporter::report(const StepStats& st, double val, double elapsed, int64_t steps_done) {
  const bool validated = !std::isnan(val);
  // Tokens that counted in the loss: with a loss mask, the unmasked targets.
  const double tok_s = window_steps_ > 0 ? static_cast<double>(window_tokens_) / window_s_ : 0;
  const double eta = elapsed / static_cast<double>(steps_done) * static_cast<double>(cfg_.train.steps - st.step);
  // Model TFLOP/s per rank (as Megatron-LM and llm.c print them): the
  // model's training FLOPs of the counted tokens, over the ranks; MFU
  // against the device's measured bf16 peak where it is known.
  const double tflops = tok_s * flops_per_token_ / static_cast<double>(comms_.topology().world_size()) / 1e12;
  const double mfu = peak_flops_ > 0 ? tflops * 1e12 / peak_flops_ : std::nan("");
  char eff[64] = "";
  if (flops_per_token_ > 0) {
    if (std::isnan(mfu))
      std::snprintf(eff, sizeof eff, " | %.3g TFLOP/s", tflops);
    else
      std::snprintf(eff, sizeof eff, " | %.3g TFLOP/s, MFU %.1f%%", tflops, 100 * mfu);
  }
  char line[320];
  std::snprintf(line, sizeof line,
                "step %6lld/%lld | loss %.4f | lr %.3e | grad norm %.4f | %.0f tok/s%s | %s elapsed, ETA %s",
                static_cast<long long>(st.step), static_cast<long long>(cfg_.train.steps), st.loss, st.lr,
                st.grad_norm, tok_s, eff, format_duration(elapsed).c_str(), format_duration(eta).c_str());
  std::string msg = line;
  if (validated) {
    char v[48];
    std::snprintf(v, sizeof v, " | val loss %.4f", val);
    msg += v;
  }
  log_info(msg);
  nlohmann::json rec = {{"step", st.step},         {"loss", st.loss},         {"lr", st.lr},
                        {"grad_norm", st.grad_norm}, {"tokens_per_s", tok_s}, {"time_s", elapsed}};
  if (validated) rec["val_loss"] = val;
  if (flops_per_token_ > 0) rec["model_tflops"] = tflops;
  if (!std::isnan(mfu)) rec["mfu"] = mfu;
  if (opts_.loss_scaler) {
    rec["loss_scale"] = st.loss_scale;
    rec["skipped"] = st.skipped;
  }
  if (cfg_.wall_clock_breakdown) {
    const double volume = comm_volume_psi(st.comm, opts_.param_dtype, num_params_);
    nlohmann::json bytes = nlohmann::json::object();
    for (CommOp op : {CommOp::all_reduce, CommOp::reduce_scatter, CommOp::all_gather})
      bytes[comm_op_name(op)] = bytes_of(st.comm, op);
    rec["comm_bytes"] = bytes;
    rec["comm_volume_psi"] = volume;
    // [Note: communication time] in comm/communicator.hpp.
    nlohmann::json secs = nlohmann::json::object(), waited = nlohmann::json::object();
    for (CommOp op : {CommOp::all_reduce, CommOp::reduce_scatter, CommOp::all_gather}) {
      secs[comm_op_name(op)] = st.comm.seconds[static_cast<int>(op)];
      waited[comm_op_name(op)] = st.comm.waited[static_cast<int>(op)];
    }
    rec["comm_seconds"] = secs;
    rec["comm_waited_s"] = waited;
    const CollectiveTime ct = collective_time(st.comm, comms_.data().tensors->size());
    const bool timed = !std::isnan(ct.hidden_fraction);
    if (timed) rec["comm_hidden_fraction"] = ct.hidden_fraction;
    const StepTiming& t = st.timing;
    rec["time_breakdown_s"] = {{"forward", t.walk.forward_s},
                               {"backward", t.walk.backward_s},
                               {"reduce", t.reduce_s},
                               {"optimizer", t.optimizer_s},
                               {"step", st.step_seconds}};
    char bd[320];
    std::snprintf(bd, sizeof bd,
                  "  time: forward %.1f ms, backward %.1f ms, reduce %.1f ms, optimizer %.1f ms | comm per rank: "
                  "all_reduce %.2f MB, reduce_scatter %.2f MB, all_gather %.2f MB = %.2f x params",
                  t.walk.forward_s * 1e3, t.walk.backward_s * 1e3, t.reduce_s * 1e3, t.optimizer_s * 1e3,
                  bytes_of(st.comm, CommOp::all_reduce) / 1e6, bytes_of(st.comm, CommOp::reduce_scatter) / 1e6,
                  bytes_of(st.comm, CommOp::all_gather) / 1e6, volume);
    std::string line = bd;
    if (timed) {
      std::snprintf(bd, sizeof bd, " | collectives %.1f ms, waited %.1f ms, %.0f%% hidden", ct.seconds * 1e3,
                    ct.waited * 1e3, 100 * ct.hidden_fraction);
      line += bd;
    }
    log_info(line);
    if (st.offload) report_offload(*st.offload, rec);
    if (opts_.P > 1) report_pipeline(t.walk, rec);
  }
  metrics_.write(rec);
  if (prometheus_)
    prometheus_->update(&st, val, tok_s, window_steps_ > 0 ? window_s_ / static_cast<double>(window_steps_) : 0,
                        checkpoints_);
  window_s_ = 0;
  window_steps_ = 0;
  window_tokens_ = 0;
}

// The offloaded optimizer's phases: bytes each way, the host's AdamW, and
// what the host waited for (the part the overlap did not hide).
void StepReporter::report_offload(const OffloadStepTimes& o, nlohmann::json& rec) {
  rec["offload"] = {{"d2h_bytes", o.d2h_bytes},   {"h2d_bytes", o.h2d_bytes},   {"d2h_wait_s", o.d2h_wait_s},
                    {"h2d_wait_s", o.h2d_wait_s}, {"host_adamw_s", o.cpu_s},    {"total_s", o.total_s},
                    {"delayed", o.delayed},       {"delayed_wait_s", o.delayed_wait_s},
                    {"streamed", o.streamed},     {"await_s", o.await_s},
                    {"grads_landed_bytes", o.grads_landed_bytes}, {"grads_landed_wait_s", o.grads_landed_wait_s},
                    {"grads_add_s", o.grads_add_s},
                    {"nvme_read_bytes", o.nvme_read_bytes}, {"nvme_write_bytes", o.nvme_write_bytes},
                    {"nvme_read_wait_s", o.nvme_read_wait_s}, {"nvme_write_wait_s", o.nvme_write_wait_s},
                    {"param_read_bytes", o.param_read_bytes}, {"param_write_bytes", o.param_write_bytes},
                    {"param_read_wait_s", o.param_read_wait_s}, {"param_write_wait_s", o.param_write_wait_s}};
  char line[320];
  if (o.delayed) {
    const double hidden = o.cpu_s > 0 ? std::max(0.0, 1.0 - o.delayed_wait_s / o.cpu_s) : 1.0;
    std::snprintf(line, sizeof line,
                  "  offload (delayed update): host AdamW %.1f ms, %.0f%% hidden behind the step (waited %.1f ms); "
                  "D2H %.1f MB (waited %.1f ms), H2D %.1f MB (waited %.1f ms)",
                  o.cpu_s * 1e3, hidden * 100, o.delayed_wait_s * 1e3, o.d2h_bytes / 1e6, o.d2h_wait_s * 1e3,
                  o.h2d_bytes / 1e6, o.h2d_wait_s * 1e3);
  } else if (o.streamed) {
    // [Note: streamed update]: the last step's update, beside this forward.
    // The host's wait for its shards is not the device's: the host queues a
    // unit's forward and waits for the next shard while the device runs it.
    std::snprintf(line, sizeof line,
                  "  offload: host AdamW %.1f ms streamed under the forward (the host waited %.1f ms for its "
                  "shards); D2H %.1f MB (waited %.1f ms), H2D %.1f MB (waited %.1f ms)",
                  o.cpu_s * 1e3, o.await_s * 1e3, o.d2h_bytes / 1e6, o.d2h_wait_s * 1e3, o.h2d_bytes / 1e6,
                  o.h2d_wait_s * 1e3);
  } else {
    std::snprintf(line, sizeof line,
                  "  offload: host AdamW %.1f ms; D2H %.1f MB (waited %.1f ms), H2D %.1f MB (waited %.1f ms); "
                  "optimizer step %.1f ms",
                  o.cpu_s * 1e3, o.d2h_bytes / 1e6, o.d2h_wait_s * 1e3, o.h2d_bytes / 1e6, o.h2d_wait_s * 1e3,
                  o.total_s * 1e3);
  }
  log_info(line);
  // NVMe ([Note: NVMe optimizer step], [Note: parameter offload to NVMe]):
  // the swap files' bytes this step and what the host waited for them.
  if (o.nvme_read_bytes + o.nvme_write_bytes + o.param_read_bytes + o.param_write_bytes > 0) {
    std::snprintf(line, sizeof line,
                  "  offload NVMe: optimizer read %.2f MB (waited %.1f ms), written %.2f MB (waited %.1f ms); "
                  "parameters read %.2f MB (waited %.1f ms), written %.2f MB (waited %.1f ms)",
                  o.nvme_read_bytes / 1e6, o.nvme_read_wait_s * 1e3, o.nvme_write_bytes / 1e6,
                  o.nvme_write_wait_s * 1e3, o.param_read_bytes / 1e6, o.param_read_wait_s * 1e3,
                  o.param_write_bytes / 1e6, o.param_write_wait_s * 1e3);
    log_info(line);
  }
  if (o.grads_landed_bytes > 0) {
    std::snprintf(line, sizeof line,
                  "  offload: gradients to the host during the backward %.1f MB (host waited %.1f ms, added "
                  "accumulated pieces %.1f ms)",
                  o.grads_landed_bytes / 1e6, o.grads_landed_wait_s * 1e3, o.grads_add_s * 1e3);
    log_info(line);
  }
}

// Per-stage forward, backward, p2p wait and idle time of the step, and the
// measured bubble (idle over compute, averaged over stages) beside the
// schedule's (P-1)/(V*M). Collective over all ranks.
void StepReporter::report_pipeline(const PipelineTiming& pt, nlohmann::json& rec) {
  const int P = opts_.P;
  Topology& topo = comms_.topology();
  std::vector<double> t(static_cast<size_t>(4 * P), 0.0);
  if (topo.dp_rank() == 0) {
    const size_t o = static_cast<size_t>(4 * topo.pp_rank());
    t[o] = pt.forward_s;
    t[o + 1] = pt.backward_s;
    t[o + 2] = pt.p2p_wait_s;
    t[o + 3] = pt.total_s;
  }
  all_reduce_sync(comms_.world(), Tensor(t.data(), DType::f64, Shape{4 * P}));
  nlohmann::json stages = nlohmann::json::array();
  double bubble = 0;
  for (int p = 0; p < P; ++p) {
    const double* x = &t[static_cast<size_t>(4 * p)];
    const double busy = x[0] + x[1], idle = x[3] - busy;
    bubble += busy > 0 ? idle / busy / P : 0;
    stages.push_back({{"forward_s", x[0]}, {"backward_s", x[1]}, {"p2p_wait_s", x[2]}, {"idle_s", idle}});
    char line[200];
    std::snprintf(line, sizeof line, "  stage %d: forward %.1f ms, backward %.1f ms, p2p wait %.1f ms, idle %.1f ms",
                  p, x[0] * 1e3, x[1] * 1e3, x[2] * 1e3, idle * 1e3);
    log_info(line);
  }
  const double ideal = ideal_bubble(opts_.schedule, P, opts_.V, static_cast<int>(opts_.accum));
  char line[160];
  std::snprintf(line, sizeof line, "  pipeline bubble: measured %.1f%%, schedule (P-1)/(V*M) = %.1f%%", bubble * 100,
                ideal * 100);
  log_info(line);
  rec["pipeline"] = stages;
  rec["bubble_measured"] = bubble;
  rec["bubble_schedule"] = ideal;
}

void StepReporter::report_end(const Device& dev, int64_t steps, double seconds, int64_t nvme_bytes) {
  const MemoryStats& ms = dev.stats();
  Communicator& world = comms_.world();
  nlohmann::json peak = nlohmann::json::object();
  std::string table = "peak memory per rank (max over ranks):";
  for (int t = 0; t < kNumMemTags; ++t) {
    const double v = all_reduce_scalar(world, static_cast<double>(ms.peak[t]), ReduceOp::max);
    peak[mem_tag_name(static_cast<MemTag>(t))] = static_cast<int64_t>(v);
    char buf[64];
    std::snprintf(buf, sizeof buf, " %s %.2f MiB", mem_tag_name(static_cast<MemTag>(t)), v / 1048576.0);
    table += buf;
  }
  const double total = all_reduce_scalar(world, static_cast<double>(ms.peak_total), ReduceOp::max);
  peak["total"] = static_cast<int64_t>(total);
  char buf[64];
  std::snprintf(buf, sizeof buf, "; total %.2f MiB", total / 1048576.0);
  log_info(table, buf);
  // Offloaded state in host memory, pinned and pageable (zero without
  // offload), beside the estimator's host column (docs/memory.md).
  nlohmann::json host = nlohmann::json::object();
  std::string line = "peak host memory per rank (max over ranks):";
  for (bool pinned : {true, false}) {
    const MemoryStats* hs = dev.host_memory_stats(pinned);
    const double v = all_reduce_scalar(world, hs ? static_cast<double>(hs->peak_total) : 0.0, ReduceOp::max);
    host[pinned ? "pinned" : "pageable"] = static_cast<int64_t>(v);
    std::snprintf(buf, sizeof buf, " %s %.2f MiB", pinned ? "pinned" : "pageable", v / 1048576.0);
    line += buf;
  }
  if (host["pinned"].get<int64_t>() + host["pageable"].get<int64_t>() > 0) log_info(line);
  // The swap files of NVMe offload (optimizer and parameters), beside the
  // estimator's nvme column.
  const auto nvme = static_cast<int64_t>(all_reduce_scalar(world, static_cast<double>(nvme_bytes), ReduceOp::max));
  if (nvme > 0) {
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(nvme) / 1048576.0);
    log_info("NVMe swap files per rank (max over ranks): ", buf);
  }
  if (prometheus_) prometheus_->update(nullptr, std::nan(""), 0, 0, checkpoints_);  // the final saves and peaks
  metrics_.write({{"event", "end"}, {"peak_bytes", peak}, {"peak_host_bytes", host}, {"nvme_bytes", nvme}, {"steps", steps},
                  {"time_s", seconds}});
}

}  // namespace zt
