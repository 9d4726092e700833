#include "train/prometheus_export.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/log.hpp"
#include "train/checkpointing.hpp"
#include "train/nvml.hpp"
#include "train/step_report.hpp"

#if ZT_HAVE_PROMETHEUS
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <CivetServer.h>
#include <dlfcn.h>
#include <pthread.h>
#endif

#if ZT_HAVE_PROMETHEUS
// [Note: civetweb's thread stacks] civetweb (under prometheus-cpp's
// Exposer) starts its threads with a fixed stack of about 100 KB. glibc counts
// the static thread-local storage of every loaded library inside a thread's
// stack, and refuses (EINVAL) a stack smaller than it: with cuBLASLt (94 KB of
// TLS), OpenBLAS and NCCL loaded, the CUDA build's total is larger, so
// /metrics could not start ("Cannot create threads: error 22"). This
// definition of pthread_attr_setstacksize, found before libc's, raises any
// requested stack below 1 MiB to 1 MiB and passes the call on.
extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t size) {
  using Fn = int (*)(pthread_attr_t*, size_t);
  static const Fn next = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  constexpr size_t kMinStack = size_t{1} << 20;
  return next(attr, size < kMinStack ? kMinStack : size);
}
#endif

namespace zt {

#if ZT_HAVE_PROMETHEUS

namespace {

namespace prom = prometheus;

// civetweb's own account of why it could not start (it only says "null
// context" otherwise): its log_message callback, kept for the error.
std::string& civetweb_message() {
  static std::string m;
  return m;
}
int keep_civetweb_message(const struct mg_connection*, const char* message) {
  civetweb_message() = message != nullptr ? message : "";
  return 1;
}

// The collectives whose bytes the step report counts (comm_volume_psi).
constexpr CommOp kCommOps[] = {CommOp::all_reduce, CommOp::reduce_scatter, CommOp::all_gather};
constexpr int kNumExportedOps = 3;
const char* const kPhases[] = {"forward", "backward", "reduce", "optimizer", "p2p_wait"};
constexpr int kNumPhases = 5;

// One rank's values in the all-gather ([Note: Prometheus export]), in this
// order; NaN = not exported for that rank.
enum Slot : int {
  kDpRank,
  kPpRank,
  kDevCurrent,                                // kNumMemTags values
  kDevPeak = kDevCurrent + kNumMemTags,       // kNumMemTags values
  kHostCurrent = kDevPeak + kNumMemTags,      // pinned, pageable
  kHostPeak = kHostCurrent + 2,               // pinned, pageable
  kNvme = kHostPeak + 2,
  kComm = kNvme + 1,                          // kNumExportedOps cumulative bytes
  kPhase = kComm + kNumExportedOps,           // kNumPhases seconds of the last step
  kHidden = kPhase + kNumPhases,              // offload: the delayed update's hidden fraction
  kCommSeconds = kHidden + 1,                 // kNumExportedOps: the last step's collectives' time
  kCommWaited = kCommSeconds + kNumExportedOps,  // kNumExportedOps: the time waited for them
  kCommHidden = kCommWaited + kNumExportedOps,   // 1 - waited / time over them
  kGpuUtil = kCommHidden + 1,
  kGpuMemUsed,
  kGpuMemTotal,
  kGpuPower,
  kNumSlots
};

// ZT_NVML_LIBRARY: the NVML library to load instead of libnvidia-ml.so.1 (a
// driver installed elsewhere; the tests' fake NVML, which on a CPU run is
// asked for the GPU at bus id "cpu"). Null when unset or empty.
const char* nvml_library_override() {
  const char* env = std::getenv("ZT_NVML_LIBRARY");
  return env != nullptr && env[0] != '\0' ? env : nullptr;
}

}  // namespace

struct PrometheusExporter::Impl {
  PrometheusConfig cfg;
  Topology& topo;
  const Device& dev;
  RunFacts facts;
  bool root = false;
  std::unique_ptr<Nvml> nvml;  // this rank's GPU; null when not exported
  double comm_total[kNumExportedOps] = {};
  StepStats last_copy;  // the last step added: its per-rank values at the run's end

  // Rank 0 only.
  std::shared_ptr<prom::Registry> registry;
  std::unique_ptr<prom::Exposer> exposer;
  prom::Family<prom::Counter>* steps = nullptr;
  prom::Family<prom::Counter>* tokens = nullptr;
  prom::Family<prom::Counter>* samples = nullptr;
  prom::Family<prom::Counter>* skipped = nullptr;
  prom::Family<prom::Counter>* comm_bytes = nullptr;
  prom::Family<prom::Counter>* checkpoints = nullptr;
  std::map<std::string, prom::Family<prom::Gauge>*> gauges;
  std::map<std::string, double> counted;  // per (rank, op): bytes already added to comm_bytes
  int64_t checkpoints_counted = 0;
  bool textfile_warned = false;

  Impl(const PrometheusConfig& c, Topology& t, const Device& d, const RunFacts& f)
      : cfg(c), topo(t), dev(d), facts(f), root(t.world_rank() == 0) {}

  prom::Family<prom::Gauge>& gauge(const std::string& name, const std::string& help) {
    auto it = gauges.find(name);
    if (it != gauges.end()) return *it->second;
    prom::Family<prom::Gauge>& f = prom::BuildGauge().Name(name).Help(help).Register(*registry);
    gauges[name] = &f;
    return f;
  }
  void set(const std::string& name, const std::string& help, double v, const prom::Labels& labels = {}) {
    if (!std::isnan(v)) gauge(name, help).Add(labels).Set(v);
  }

  void open_nvml();
  void start_root();
  std::vector<double> mine(const StepStats& st) const;
  void publish(const std::vector<double>& all, int world);
  void write_textfile();
};

void PrometheusExporter::Impl::open_nvml() {
  const char* named = nvml_library_override();
  std::string bus = dev.pci_bus_id();
  std::string why;
  if (bus.empty() && named == nullptr) {
    why = "the run is on the CPU";
  } else {
    if (bus.empty()) bus = "cpu";
    nvml = Nvml::open(named != nullptr ? named : "libnvidia-ml.so.1", why);
    if (nvml && !nvml->select(bus, why)) nvml.reset();
  }
  // Said once, by rank 0, for its own GPU; other ranks whose NVML fails
  // simply have no ztrain_gpu_* series.
  if (!nvml) log_info("prometheus: GPU series (ztrain_gpu_*) not exported: ", why);
}

void PrometheusExporter::Impl::start_root() {
  registry = std::make_shared<prom::Registry>();
  const auto counter = [this](const char* name, const char* help) {
    return &prom::BuildCounter().Name(name).Help(help).Register(*registry);
  };
  steps = counter("ztrain_steps_total", "Optimizer steps taken by this process, skipped fp16 steps included");
  tokens = counter("ztrain_tokens_total", "Tokens trained on over all ranks (the targets that counted in the loss)");
  samples = counter("ztrain_samples_total", "Sequences trained on over all ranks");
  skipped = counter("ztrain_skipped_steps_total", "fp16 steps skipped because the gradients overflowed");
  comm_bytes = counter("ztrain_comm_bytes_total", "Bytes this rank passed to data-parallel collectives, by kind");
  checkpoints = counter("ztrain_checkpoints_total", "Checkpoints committed by this process");
  for (auto* f : {steps, tokens, samples, skipped, checkpoints}) f->Add({});
  set("ztrain_model_parameters", "Parameters of the model", static_cast<double>(facts.num_params));
  set("ztrain_model_flops_per_token", "Training FLOPs (forward and backward) per token, as docs/perf.md counts them",
      facts.flops_per_token);
  set("ztrain_target_steps", "train.steps: the step the run ends at", static_cast<double>(facts.steps));
  set("ztrain_world_size", "MPI ranks of the run", topo.world_size());

  if (!cfg.textfile_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(cfg.textfile_dir, ec);
    if (ec) ZT_USER_ERROR("prometheus.textfile_dir '", cfg.textfile_dir, "': cannot create directory: ", ec.message());
  }
  if (cfg.port != 0) {
    try {
      static CivetCallbacks callbacks;
      callbacks.log_message = keep_civetweb_message;
      exposer = std::make_unique<prom::Exposer>(std::to_string(cfg.port), 2, &callbacks);
    } catch (const std::exception& e) {
      ZT_USER_ERROR("prometheus.port ", cfg.port, ": cannot serve /metrics on port ", cfg.port, " (", e.what(),
                    civetweb_message().empty() ? "" : "; civetweb: " + civetweb_message(),
                    "); another process (another ztrain on this node?) may hold it: choose another port, or 0 "
                    "with prometheus.textfile_dir");
    }
    exposer->RegisterCollectable(registry);
    log_info("prometheus: serving /metrics on port ", cfg.port);
  }
  if (!cfg.textfile_dir.empty())
    log_info("prometheus: writing ", (std::filesystem::path(cfg.textfile_dir) / "ztrain.prom").string(),
             " at every printed step");
}

std::vector<double> PrometheusExporter::Impl::mine(const StepStats& st) const {
  std::vector<double> v(kNumSlots, std::nan(""));
  v[kDpRank] = topo.dp_rank();
  v[kPpRank] = topo.pp_rank();
  const MemoryStats& ms = dev.stats();
  for (int t = 0; t < kNumMemTags; ++t) {
    v[kDevCurrent + t] = static_cast<double>(ms.current[static_cast<size_t>(t)]);
    v[kDevPeak + t] = static_cast<double>(ms.peak[static_cast<size_t>(t)]);
  }
  for (int pinned = 0; pinned < 2; ++pinned)
    if (const MemoryStats* hs = dev.host_memory_stats(pinned == 0)) {  // slot 0 pinned, 1 pageable
      v[kHostCurrent + pinned] = static_cast<double>(hs->current_total);
      v[kHostPeak + pinned] = static_cast<double>(hs->peak_total);
    }
  if (st.nvme_bytes > 0) v[kNvme] = static_cast<double>(st.nvme_bytes);
  for (int i = 0; i < kNumExportedOps; ++i) v[kComm + i] = comm_total[i];
  const StepTiming& t = st.timing;
  const double phases[kNumPhases] = {t.walk.forward_s, t.walk.backward_s, t.reduce_s, t.optimizer_s,
                                     t.walk.p2p_wait_s};
  for (int i = 0; i < kNumPhases; ++i) v[kPhase + i] = phases[i];
  // [Note: communication time] in comm/communicator.hpp.
  const CollectiveTime ct = collective_time(st.comm, topo.dp_size());
  if (!std::isnan(ct.hidden_fraction)) {
    for (int i = 0; i < kNumExportedOps; ++i) {
      v[kCommSeconds + i] = st.comm.seconds[static_cast<int>(kCommOps[i])];
      v[kCommWaited + i] = st.comm.waited[static_cast<int>(kCommOps[i])];
    }
    v[kCommHidden] = ct.hidden_fraction;
  }
  if (st.offload && st.offload->delayed) {
    const OffloadStepTimes& o = *st.offload;
    v[kHidden] = o.cpu_s > 0 ? std::max(0.0, 1.0 - o.delayed_wait_s / o.cpu_s) : 1.0;
  }
  if (nvml)
    if (const std::optional<GpuSample> g = nvml->sample()) {
      v[kGpuUtil] = g->utilization;
      v[kGpuMemUsed] = g->memory_used;
      v[kGpuMemTotal] = g->memory_total;
      v[kGpuPower] = g->power_w;
    }
  return v;
}

void PrometheusExporter::Impl::publish(const std::vector<double>& all, int world) {
  for (int r = 0; r < world; ++r) {
    const double* v = &all[static_cast<size_t>(r) * kNumSlots];
    const std::string rank = std::to_string(r);
    const prom::Labels who = {{"rank", rank},
                              {"dp_rank", std::to_string(static_cast<int>(v[kDpRank]))},
                              {"pp_rank", std::to_string(static_cast<int>(v[kPpRank]))}};
    const auto with = [&who](std::initializer_list<std::pair<const std::string, std::string>> more) {
      prom::Labels l = who;
      l.insert(more);
      return l;
    };
    const char* const mem_help = "Bytes this rank holds now, by memory space (device, host, nvme) and tag";
    const char* const peak_help = "Most bytes this rank has held, by memory space (device, host, nvme) and tag";
    for (int t = 0; t < kNumMemTags; ++t) {
      const std::string tag = mem_tag_name(static_cast<MemTag>(t));
      set("ztrain_memory_bytes", mem_help, v[kDevCurrent + t], with({{"space", "device"}, {"tag", tag}}));
      set("ztrain_memory_peak_bytes", peak_help, v[kDevPeak + t], with({{"space", "device"}, {"tag", tag}}));
    }
    for (int i = 0; i < 2; ++i) {
      const char* tag = i == 0 ? "pinned" : "pageable";
      set("ztrain_memory_bytes", mem_help, v[kHostCurrent + i], with({{"space", "host"}, {"tag", tag}}));
      set("ztrain_memory_peak_bytes", peak_help, v[kHostPeak + i], with({{"space", "host"}, {"tag", tag}}));
    }
    set("ztrain_memory_bytes", mem_help, v[kNvme], with({{"space", "nvme"}, {"tag", "optimizer"}}));
    for (int i = 0; i < kNumExportedOps; ++i) {
      const char* op = comm_op_name(kCommOps[i]);
      double& seen = counted[rank + "/" + op];
      prom::Counter& c = comm_bytes->Add(with({{"op", op}}));
      if (v[kComm + i] > seen) c.Increment(v[kComm + i] - seen);
      seen = std::max(seen, v[kComm + i]);
    }
    for (int i = 0; i < kNumExportedOps; ++i) {
      const char* op = comm_op_name(kCommOps[i]);
      set("ztrain_comm_seconds",
          "This rank's data-parallel collectives in the last printed step: the time from each call to its "
          "completion (on a GPU, the time it ran on the communication stream), by kind",
          v[kCommSeconds + i], with({{"op", op}}));
      set("ztrain_comm_wait_seconds",
          "The part of ztrain_comm_seconds this rank waited for (on a GPU, the compute stream stood still)",
          v[kCommWaited + i], with({{"op", op}}));
    }
    set("ztrain_comm_hidden_ratio",
        "Fraction of this rank's data-parallel collectives' time in the last printed step hidden behind its work: "
        "1 - waited / time",
        v[kCommHidden], who);
    for (int i = 0; i < kNumPhases; ++i)
      set("ztrain_phase_seconds", "This rank's time in each phase of the last printed step", v[kPhase + i],
          with({{"phase", kPhases[i]}}));
    set("ztrain_offload_update_hidden_ratio",
        "Offloaded optimizer with the delayed update: fraction of the host's update hidden behind the step",
        v[kHidden], who);
    set("ztrain_gpu_utilization_ratio", "Fraction of the last sample period a kernel ran on this rank's GPU (NVML)",
        v[kGpuUtil], who);
    set("ztrain_gpu_memory_used_bytes", "Memory used on this rank's GPU, every process (NVML)", v[kGpuMemUsed], who);
    set("ztrain_gpu_memory_total_bytes", "Memory of this rank's GPU (NVML)", v[kGpuMemTotal], who);
    set("ztrain_gpu_power_watts", "Power drawn by this rank's GPU (NVML)", v[kGpuPower], who);
  }
}

void PrometheusExporter::Impl::write_textfile() {
  if (cfg.textfile_dir.empty()) return;
  const std::filesystem::path dir(cfg.textfile_dir);
  const std::string path = (dir / "ztrain.prom").string(), tmp = (dir / "ztrain.prom.tmp").string();
  std::ostringstream text;
  prom::TextSerializer().Serialize(text, registry->Collect());
  const std::string s = text.str();
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  bool ok = f != nullptr && std::fwrite(s.data(), 1, s.size(), f) == s.size();
  if (f != nullptr) ok = std::fclose(f) == 0 && ok;
  ok = ok && std::rename(tmp.c_str(), path.c_str()) == 0;
  // A full disk must not end the run: the export warns (once) and goes on.
  if (!ok && !textfile_warned) {
    log_warn("prometheus.textfile_dir: writing ", path, " failed: ", std::strerror(errno),
             " (training goes on; the textfile is not updated while this lasts)");
    textfile_warned = true;
  }
}

PrometheusExporter::PrometheusExporter(const PrometheusConfig& cfg, Topology& topo, const Device& dev,
                                       const RunFacts& facts)
    : impl_(std::make_unique<Impl>(cfg, topo, dev, facts)) {
  if (impl_->root) impl_->start_root();
  impl_->open_nvml();
}

PrometheusExporter::~PrometheusExporter() = default;

void PrometheusExporter::add(const StepStats& st) {
  Impl& s = *impl_;
  for (int i = 0; i < kNumExportedOps; ++i)
    s.comm_total[i] += static_cast<double>(st.comm.bytes[static_cast<int>(kCommOps[i])]);
  s.last_copy = st;
  if (!s.root) return;
  s.steps->Add({}).Increment();
  s.tokens->Add({}).Increment(static_cast<double>(st.tokens));
  s.samples->Add({}).Increment(static_cast<double>(s.facts.samples_per_step));
  if (st.skipped) s.skipped->Add({}).Increment();
}

void PrometheusExporter::update(const StepStats* st, double val, double tokens_per_s, double step_seconds,
                                const CheckpointsSaved* ckpt) {
  Impl& s = *impl_;
  // A printed step's times as read (the device's phase and communication
  // times: [Note: phase clock]), which add() saw before the read; the run's
  // end exports this copy again.
  if (st != nullptr) s.last_copy = *st;
  const StepStats& per_rank = s.last_copy;
  std::vector<double> v = s.mine(per_rank);
  const int world = s.topo.world_size();
  std::vector<double> all(static_cast<size_t>(world) * kNumSlots);
  CommRequest r = s.topo.world().all_gather(Tensor(v.data(), DType::f64, Shape{kNumSlots}),
                                            Tensor(all.data(), DType::f64, Shape{world * kNumSlots}));
  wait(r);
  if (!s.root) return;
  s.publish(all, world);
  if (st != nullptr) {
    s.set("ztrain_step", "The last step taken", static_cast<double>(st->step));
    s.set("ztrain_loss", "Training loss of the last printed step (mean over the global batch)", st->loss);
    s.set("ztrain_val_loss", "Validation loss of the last validation", val);
    s.set("ztrain_learning_rate", "Learning rate of the last printed step", st->lr);
    s.set("ztrain_grad_norm", "Global gradient norm of the last printed step, before clipping", st->grad_norm);
    if (s.facts.loss_scaler)
      s.set("ztrain_loss_scale", "fp16 dynamic loss scale of the last printed step", st->loss_scale);
  }
  if (step_seconds > 0) {
    s.set("ztrain_step_seconds", "Mean step time since the previous printed step", step_seconds);
    s.set("ztrain_tokens_per_second", "Tokens per second since the previous printed step", tokens_per_s);
  }
  if (ckpt != nullptr && ckpt->count > s.checkpoints_counted) {
    s.checkpoints->Add({}).Increment(static_cast<double>(ckpt->count - s.checkpoints_counted));
    s.checkpoints_counted = ckpt->count;
    s.set("ztrain_checkpoint_duration_seconds", "Duration of the last checkpoint save, copy to commit", ckpt->seconds);
    s.set("ztrain_checkpoint_size_bytes", "Bytes of the last checkpoint over all ranks (the shards)", ckpt->bytes);
    s.set("ztrain_checkpoint_step", "Step of the last checkpoint", static_cast<double>(ckpt->step));
  }
  s.write_textfile();
}

#else  // no prometheus-cpp in this build

struct PrometheusExporter::Impl {};

PrometheusExporter::PrometheusExporter(const PrometheusConfig&, Topology&, const Device&, const RunFacts&) {
  ZT_USER_ERROR("prometheus.enabled: this build of ztrain has no Prometheus export (prometheus-cpp was not found "
                "when it was configured): install prometheus-cpp-dev (jobs/setup.sh does) and configure again");
}

PrometheusExporter::~PrometheusExporter() = default;
void PrometheusExporter::add(const StepStats&) {}
void PrometheusExporter::update(const StepStats*, double, double, double, const CheckpointsSaved*) {}

#endif

}  // namespace zt
