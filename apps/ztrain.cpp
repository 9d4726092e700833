// ztrain: train a transformer from a DeepSpeed-style JSON config.
//   mpirun -np N ztrain CONFIG.json [--set key.path=VALUE]... [--steps N]
//          [--device cpu|cuda|auto] [--log-dir DIR] [--dry-run]
#include <boost/program_options.hpp>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "comm/topology.hpp"
#include "comm/watchdog.hpp"
#include "core/config.hpp"
#include "core/log.hpp"
#include "modules/cpu_kernels.hpp"
#include "optim/offload_adamw.hpp"
#if ZT_HAVE_CUDA
#include "modules/cuda/cuda_kernels.hpp"
#include "modules/cuda/kernel_profile.hpp"
#include "runtime/cuda/cuda_device.hpp"
#include "runtime/cuda/gpu_timeline_cupti.hpp"
#include "runtime/cuda/host_calls_cupti.hpp"
#endif
#if ZT_HAVE_NCCL
#include "comm/device_bundle.hpp"
#include "comm/device_comm.hpp"
#endif
#include "train/memory_estimate.hpp"
#include "train/threads.hpp"
#include "train/trainer.hpp"

namespace po = boost::program_options;
using namespace zt;

namespace {


struct Args {
  std::string config;
  std::vector<std::string> sets;
  std::optional<int64_t> steps;
  std::string device = "auto";
  std::optional<std::string> log_dir;
  bool dry_run = false;
  bool estimate_memory = false;
  bool profile = false;
  std::string resume;
  int world = 0;
};

// Runs `fn` on every rank, then agrees: when any rank failed, the lowest
// failing rank prints its message once and every rank returns its exit code.
// For phases with no collective inside `fn` (reading the config and the data,
// building the trainer), so that every rank reaches the agreement.
template <typename Fn>
std::optional<int> agree(Fn&& fn) {
  std::string msg;
  int code = 0;
  try {
    fn();
  } catch (const UserError& e) {
    msg = e.what();
    code = kExitBadInput;
  } catch (const std::exception& e) {
    msg = e.what();
    code = 1;
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int mine = code != 0 ? rank : INT_MAX, first = INT_MAX;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first == INT_MAX) return std::nullopt;
  int agreed_code = code;
  MPI_Bcast(&agreed_code, 1, MPI_INT, first, MPI_COMM_WORLD);
  if (rank == first) {
    if (size > 1)
      std::fprintf(stderr, "ztrain: error on rank %d: %s\n", rank, msg.c_str());
    else
      std::fprintf(stderr, "ztrain: error: %s\n", msg.c_str());
    std::fflush(stderr);
  }
  return agreed_code;
}

// Runs a phase with collectives inside (connecting the GPUs' communicators,
// initialising or loading the parameters, training). A CollectiveError was
// raised by every rank at the same point after they agreed on it: rank 0
// prints it and every rank returns its code. Any other error may leave peers
// waiting inside a collective: it is printed from its rank and ends the job.
template <typename Fn>
std::optional<int> collective_phase(int world_rank, Fn&& fn) {
  try {
    fn();
  } catch (const CollectiveError& e) {
    if (world_rank == 0) std::fprintf(stderr, "ztrain: error: %s\n", e.what());
    std::fflush(stderr);
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ztrain: error on rank %d: %s\n", world_rank, e.what());
    std::fflush(stderr);
    remove_nvme_swap_files_now();  // no destructor runs past abort_job
    const int code = dynamic_cast<const UserError*>(&e) ? kExitBadInput : 1;
    // Every rank's flight recorder, for `zdiag flight` (a desynchronised
    // collective often ends here, with an MPI error on one rank).
    flight_dump_job(std::string("error: ") + e.what(), code);
    abort_job(code);
  }
  return std::nullopt;
}

// An environment switch: 0 is off, 1 is on, unset or empty is `unset`,
// anything else is refused by name.
bool env_switch(const char* name, bool unset = false) {
  const char* v = std::getenv(name);
  if (v == nullptr || std::string(v).empty()) return unset;
  if (std::string(v) != "0" && std::string(v) != "1") ZT_USER_ERROR(name, " must be 0 or 1, got \"", v, "\"");
  return std::string(v) == "1";
}

// ZTRAIN_COUNT_HOST_CALLS=1: count the step's host round trips
// ([Note: host round trips] in runtime/host_calls.hpp).
bool count_host_calls_requested() { return env_switch("ZTRAIN_COUNT_HOST_CALLS"); }

// ZTRAIN_GPU_TIMELINE=1: where the GPU idles between its operations during
// the steps after the first ([Note: GPU timeline] in runtime/gpu_timeline.hpp).
bool gpu_timeline_requested() { return env_switch("ZTRAIN_GPU_TIMELINE"); }

// ZTRAIN_MEMORY_PEAKS=1: the live buffers at each memory tag's peak, device
// and host ([Note: memory peaks] in runtime/device.hpp), printed at the end.
bool memory_peaks_requested() { return env_switch("ZTRAIN_MEMORY_PEAKS"); }

// ZTRAIN_CUDA_GRAPH: unset, empty or 1 records each step after the first as
// CUDA graphs where the layout allows ([Note: step graph] in
// runtime/device.hpp); 0 runs every step operation by operation.
bool cuda_graph_requested() { return env_switch("ZTRAIN_CUDA_GRAPH", true); }

bool cuda_available() {
#if ZT_HAVE_CUDA
  return cuda_device_count() > 0;
#else
  return false;
#endif
}

// Whether the run takes the GPU: --device cuda, or auto where a GPU is
// visible (also what --estimate-memory and --dry-run estimate for).
bool runs_on_gpu(const std::string& device) { return device == "cuda" || (device == "auto" && cuda_available()); }

// The GPU backend: the GPU of this rank's node-local index and its kernels.
// profile: the kernels wrapped in ProfiledKernels ([Note: kernel profile]).
// peak_flops: the device's measured bf16 peak (0 when it could not be
// measured), for the MFU of the step line.
// classifier_chunk_mib: train.classifier_chunk_mib (0: the kernels' defaults).
void make_cuda_backend(Topology& topo, std::unique_ptr<Device>& device, std::unique_ptr<Kernels>& kernels,
                       bool profile, double classifier_chunk_mib, double& peak_flops) {
#if ZT_HAVE_CUDA && ZT_HAVE_NCCL
  const int ordinal = select_cuda_device(topo.local_rank());
  auto cuda = std::make_unique<CudaDevice>(ordinal);
  CudaKernelsOptions opts;
  if (classifier_chunk_mib > 0)
    opts.classifier_chunk_bytes = opts.classifier_one_pass_chunk_bytes =
        static_cast<size_t>(classifier_chunk_bytes(classifier_chunk_mib));
  kernels = std::make_unique<CudaKernels>(*cuda, opts);
  peak_flops = measure_bf16_peak_flops(*cuda, *kernels, cuda->stream());
  if (count_host_calls_requested()) host_calls::install(make_cupti_probe());  // [Note: host round trips]
  if (profile) kernels = std::make_unique<ProfiledKernels>(std::move(kernels), cuda->stream());
  device = std::move(cuda);
#else
  (void)topo, (void)device, (void)kernels, (void)profile, (void)classifier_chunk_mib, (void)peak_flops;
  ZT_USER_ERROR("--device cuda: this build of ztrain has no CUDA backend (configure with -DZT_CUDA=ON)");
#endif
}

// train.device_memory_cap_gib: the device refuses to hold more ([Note: memory
// cap] in runtime/device.hpp), so a large GPU behaves like a smaller one. Its
// out-of-memory error quotes the estimator's device figure for this rank's
// pipeline stage, which tells a wrong estimate from a config that cannot fit.
void apply_memory_cap(const Config& cfg, const Topology& topo, Device& device) {
  const double gib = cfg.train.device_memory_cap_gib;
  if (gib <= 0) return;
  const double bytes = gib * 1073741824.0;
  const size_t cap = bytes >= 1.8e19 ? SIZE_MAX : std::max<size_t>(1, static_cast<size_t>(bytes));
  const MemoryEstimateRow row = estimate_memory(cfg, topo.dp_size(), device.kind() == DeviceKind::cuda)
                                    .stages.at(static_cast<size_t>(topo.pp_rank()));
  const std::string estimate =
      row.supported ? "the estimator predicts " + human_bytes(static_cast<size_t>(row.total())) +
                          " on the device for this rank"
                    : "the estimator has no figure for this combination (" + row.note + ")";
  device.set_memory_cap(cap, "cap from train.device_memory_cap_gib = " + detail::concat(gib) + "; " + estimate +
                                 " (ztrain --estimate-memory " + cfg.source + ")");
  log_info("device memory capped at ", gib, " GiB per rank (train.device_memory_cap_gib); ", estimate,
           topo.pp_size() > 1 ? " (rank 0, pipeline stage 0)" : "");
}

// Offload's host memory, checked before anything is allocated: the
// estimator's pinned and pageable bytes for this rank, times the ranks of
// this node, against the node's available memory (MemAvailable). Page-locked
// memory from the GPU driver is not bounded by RLIMIT_MEMLOCK, so `ulimit -l`
// is not the limit here; available memory is.
void check_host_memory(const Config& cfg, const Topology& topo) {
  if (cfg.zero.offload_optimizer.device == "none" && cfg.zero.offload_param.device == "none" &&
      !cfg.activation_checkpointing.cpu_checkpointing)
    return;
  const MemoryEstimateRow row = estimate_memory(cfg, topo.dp_size()).stages.at(static_cast<size_t>(topo.pp_rank()));
  if (!row.supported) return;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = -1;
  while (meminfo >> key) {
    if (key == "MemAvailable:") {
      meminfo >> kib;
      break;
    }
    meminfo.ignore(1 << 10, '\n');
  }
  if (kib < 0) return;  // not Linux: nothing to compare with
  const double need = static_cast<double>(row.host()) * topo.local_size();
  const double avail = static_cast<double>(kib) * 1024.0;
  if (need > avail)
    ZT_USER_ERROR(cfg.source,
                  ": zero_optimization.offload_optimizer/offload_param, activation_checkpointing.cpu_checkpointing: "
                  "offload needs ",
                  human_bytes(static_cast<size_t>(row.host())), " of host memory per rank (",
                  human_bytes(static_cast<size_t>(row.host_pinned)), " pinned, ",
                  human_bytes(static_cast<size_t>(row.host_pageable)), " pageable) x ", topo.local_size(),
                  " ranks on this node = ", human_bytes(static_cast<size_t>(need)), ", but the node has ",
                  human_bytes(static_cast<size_t>(avail)),
                  " available (MemAvailable); ",
                  cfg.activation_checkpointing.cpu_checkpointing
                      ? "leave activation_checkpointing.cpu_checkpointing false or use a smaller micro-batch, or "
                      : "",
                  "use NVMe offload, more nodes, or fewer ranks per node");
}

Args parse_args(int argc, char** argv, bool& exit_now) {
  Args a;
  po::options_description opts("Options");
  opts.add_options()
      ("help,h", "print this help")
      ("version", "print the version")
      ("set", po::value<std::vector<std::string>>(&a.sets)->composing(),
       "override a config key: --set zero_optimization.stage=0 (dotted JSON path, JSON value; repeatable)")
      ("steps", po::value<int64_t>(), "number of optimizer steps (overrides train.steps)")
      ("device", po::value<std::string>(&a.device)->default_value("auto"), "cpu, cuda or auto")
      ("log-dir", po::value<std::string>(), "directory for metrics.jsonl (overrides log.dir)")
      ("dry-run", po::bool_switch(&a.dry_run), "validate the config and data, print the resolved config and a memory estimate, and exit")
      ("resume", po::value<std::string>(&a.resume),
       "resume from a checkpoint: auto (the newest complete one under checkpoint.dir) or a step directory")
      ("estimate-memory", po::bool_switch(&a.estimate_memory),
       "print the per-rank memory estimate for ZeRO stages 0-3 x offload none/cpu/nvme, and exit")
      ("world", po::value<int>(&a.world)->default_value(0), "ranks assumed by --estimate-memory (default: the mpirun size)")
      ("profile", po::bool_switch(&a.profile),
       "CUDA: time every kernel operation on the device and print, at the end, the time per step of each kernel "
       "class with its TFLOP/s or GB/s (docs/perf.md)");
  po::options_description hidden;
  hidden.add_options()("config", po::value<std::string>(&a.config));
  po::options_description all;
  all.add(opts).add(hidden);
  po::positional_options_description pos;
  pos.add("config", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    ZT_USER_ERROR("command line: ", e.what(), " (see ztrain --help)");
  }
  if (vm.count("help")) {
    if (process_rank() <= 0)
      std::cout << "usage: mpirun -np N ztrain CONFIG.json [options]\n\n"
                << "Trains a GPT model from a DeepSpeed-style JSON config (see README.md).\n\n"
                << opts << std::flush;
    exit_now = true;
    return a;
  }
  if (vm.count("version")) {
    if (process_rank() <= 0) std::cout << "ztrain " << ZT_VERSION << std::endl;
    exit_now = true;
    return a;
  }
  if (a.config.empty()) ZT_USER_ERROR("command line: no config file given (usage: ztrain CONFIG.json [options])");
  if (vm.count("world") && !vm["world"].defaulted()) {
    if (!a.estimate_memory) ZT_USER_ERROR("command line: --world is for --estimate-memory only");
    if (a.world < 1) ZT_USER_ERROR("command line: --world: expected a number of ranks >= 1, found ", a.world);
  }
  // The flags' own checks, so that a bad value is named by its flag rather
  // than by the config key it overrides.
  if (vm.count("steps")) {
    a.steps = vm["steps"].as<int64_t>();
    if (*a.steps < 1) ZT_USER_ERROR("command line: --steps: expected a number of steps >= 1, found ", *a.steps);
  }
  if (vm.count("log-dir")) {
    a.log_dir = vm["log-dir"].as<std::string>();
    if (a.log_dir->empty()) ZT_USER_ERROR("command line: --log-dir: expected a directory name, found \"\"");
  }
  if (vm.count("resume") && a.resume.empty())
    ZT_USER_ERROR("command line: --resume: expected auto or a checkpoint's step directory, found \"\" (an unset "
                  "variable?); leave --resume out to start from scratch");
  if (a.dry_run && a.estimate_memory)
    ZT_USER_ERROR("command line: --dry-run and --estimate-memory both print an estimate and exit: give one "
                  "(--dry-run: this run's config, data and estimate; --estimate-memory: every ZeRO stage and "
                  "offload)");
  if (a.device != "cpu" && a.device != "cuda" && a.device != "auto")
    ZT_USER_ERROR("command line: --device: expected cpu, cuda or auto, found '", a.device, "'");
  return a;
}

// What the run refuses before its first step, for --dry-run and the run
// alike: the CUDA-only switches without a GPU, and --resume without a
// checkpoint directory or with a step directory that is not there.
void check_run_options(const Args& a, const Config& cfg) {
  if (!runs_on_gpu(a.device)) {
    if (a.profile) ZT_USER_ERROR("--profile times CUDA kernels: run it with --device cuda");
    if (count_host_calls_requested())
      ZT_USER_ERROR("ZTRAIN_COUNT_HOST_CALLS counts CUDA calls: run it with --device cuda");
    if (gpu_timeline_requested())
      ZT_USER_ERROR("ZTRAIN_GPU_TIMELINE records a GPU's operations: run it with --device cuda");
  }
  if (a.resume.empty()) return;
  if (cfg.checkpoint.dir.empty()) ZT_USER_ERROR("--resume needs checkpoint.dir in the config");
  if (a.resume != "auto" && !std::filesystem::is_directory(a.resume))
    ZT_USER_ERROR("--resume ", a.resume, ": no such checkpoint directory");
}

}  // namespace

int main(int argc, char** argv) {
  MpiSession mpi(&argc, &argv);
  Args args;
  Config cfg;
  bool exit_now = false;
  std::unique_ptr<Topology> topo;

  if (auto code = agree([&] {
        args = parse_args(argc, argv, exit_now);
        if (exit_now) return;
        std::vector<std::string> overrides = args.sets;
        // --steps and --log-dir are the last word over the file and --set.
        if (args.steps) overrides.push_back("train.steps=" + std::to_string(*args.steps));
        if (args.log_dir) overrides.push_back("log.dir=" + nlohmann::json(*args.log_dir).dump());
        cfg = load_config(args.config, overrides);
        if (args.estimate_memory) {
          if (mpi.world_rank() == 0) {
            for (const std::string& w : cfg.warnings) log_warn(w);
            std::cout << format_estimate_table(cfg, args.world > 0 ? args.world : mpi.world_size(),
                                               runs_on_gpu(args.device))
                      << std::flush;
          }
          exit_now = true;
          return;
        }
        const int pp = cfg.pipeline.parallel_size;
        if (mpi.world_size() % pp != 0)
          ZT_USER_ERROR(args.config, ": pipeline.parallel_size (", pp, ") must divide the number of ranks (",
                        mpi.world_size(), ")");
        resolve_batch(cfg, mpi.world_size() / pp);
        check_run_options(args, cfg);
      }))
    return *code;
  if (exit_now) return 0;

  // Every rank reads the same config: its warnings are printed once.
  if (mpi.world_rank() == 0)
    for (const std::string& w : cfg.warnings) log_warn(w);

  FlightRecorder::set_default_capacity(static_cast<size_t>(cfg.comm.flight_recorder_size));
  topo = std::make_unique<Topology>(cfg.pipeline.parallel_size, cfg.pipeline.rank_order);
  const int threads = configure_threads(topo->local_size());

  if (args.dry_run) {
    if (auto code = agree([&] {
          validate_data_files(cfg);
          if (mpi.world_rank() == 0) {
            std::cout << resolved_json(cfg).dump(2) << "\n";
            std::cout << format_memory_estimate(estimate_memory(cfg, topo->dp_size(), runs_on_gpu(args.device)))
                      << std::flush;
          }
        }))
      return *code;
    return 0;
  }

  // Hangs become failures from here on ([Note: watchdog] in comm/watchdog.hpp).
  WatchdogScope watchdog;
  start_watchdog(topo->world_mpi(), WatchdogOptions{cfg.comm.timeout, cfg.log.dir + "/flight"});
  if (mpi.world_rank() == 0)
    for (const char* v : {"NCCL_IB_TIMEOUT", "NCCL_IB_RETRY_CNT"})
      if (const char* value = std::getenv(v))
        log_info(v, "=", value, " is passed to NCCL (InfiniBand retransmission; it bounds no collective: ",
                 "comm.timeout does, ", cfg.comm.timeout, " s)");

  // The device: the CPU, or the GPU of this rank's node-local index.
  std::unique_ptr<Device> device;
  std::unique_ptr<Kernels> kernels;
  double peak_flops = 0;  // the device's measured bf16 peak (CUDA)
  CommBundle comms(*topo);
  std::unique_ptr<Trainer> trainer;
  if (auto code = agree([&] {
        (void)cuda_graph_requested();  // its value checked before the first step
        if (runs_on_gpu(args.device)) {  // the switches needing CUDA were checked with the options
          make_cuda_backend(*topo, device, kernels, args.profile, cfg.train.classifier_chunk_mib, peak_flops);
        } else {
          device = std::make_unique<CpuDevice>();
          kernels = cfg.train.classifier_chunk_mib > 0
                        ? std::make_unique<CpuKernels>(
                              static_cast<size_t>(classifier_chunk_bytes(cfg.train.classifier_chunk_mib)))
                        : std::make_unique<CpuKernels>();
        }
        if (memory_peaks_requested()) device->record_peak_detail();
        apply_memory_cap(cfg, *topo, *device);
        check_host_memory(cfg, *topo);
      }))
    return *code;
  // On GPUs each axis moves the device's tensors through NCCL (or MPI staged
  // through host memory where ranks share a GPU).
#if ZT_HAVE_NCCL
  if (device->kind() == DeviceKind::cuda)
    if (auto code = collective_phase(mpi.world_rank(), [&] {
          attach_device_communicators(comms, "auto", static_cast<CudaDevice&>(*device).stream());
        }))
      return *code;
#endif
  if (auto code = agree([&] { trainer = std::make_unique<Trainer>(cfg, comms, *device, *kernels); })) return *code;
  // MFU in the step line, against each rank's own device's measured peak.
  trainer->set_peak_flops(peak_flops);
  if (device->kind() == DeviceKind::cuda && cuda_graph_requested()) {
    const std::string why_not =
        args.profile ? "--profile (its events around each kernel call)" : trainer->enable_step_graph();
    if (mpi.world_rank() == 0)
      log_info(why_not.empty() ? std::string("each step after the first runs as CUDA graphs (ZTRAIN_CUDA_GRAPH=0: "
                                             "operation by operation)")
                               : "the steps run without a CUDA graph: " + why_not);
  }
  if (mpi.world_rank() == 0 && peak_flops > 0)
    log_info("bf16 GEMM peak measured on this device: ", static_cast<int>(peak_flops / 1e12), " TFLOP/s");
  log_info("ztrain ", ZT_VERSION, ": ", mpi.world_size(), " ranks (dp ", topo->dp_size(), " x pp ",
           topo->pp_size(), "), ", threads, " threads per rank, device ", device->name(),
           comms.data().tensors != comms.data().host ? ", data-parallel communicator " + comms.data().tensors->group_name()
                                                     : std::string());
  // Initial parameters, or the checkpoint of --resume (its errors, a corrupt
  // file given by PATH or a model that does not match, are agreed on by the
  // checkpointer), then the run.
  int64_t first_step = 0;
  double seconds = 0;
  auto t0 = std::chrono::steady_clock::now();
#if ZT_HAVE_CUDA
  // The profile and the GPU timeline leave out the run's first step (cuBLASLt
  // plans and cuDNN graphs are built there) when the run has more than one;
  // the timeline also leaves out the validation after the last step.
  auto* prof = dynamic_cast<ProfiledKernels*>(kernels.get());
  std::unique_ptr<GpuTimelineRecorder> timeline;
  if (device->kind() == DeviceKind::cuda && gpu_timeline_requested()) timeline = make_cupti_timeline();
  bool prof_started = false;
  int64_t timeline_steps = 0;  // recorded, once the last step is done
  std::vector<DeviceSpan> spans;
  if (prof || timeline)
    trainer->set_step_hook([&](int64_t step) {
      if (timeline && prof_started && timeline_steps == 0 && step >= cfg.train.steps) {
        spans = timeline->stop();
        timeline_steps = step - first_step;
      }
      if (prof_started || step >= cfg.train.steps) return;
      prof_started = true;
      if (prof) prof->reset();
      if (timeline) timeline->start();
      first_step = step;
      t0 = std::chrono::steady_clock::now();
    });
#endif
  if (auto code = collective_phase(mpi.world_rank(), [&] {
        trainer->start(args.resume);
        first_step = trainer->step();
        t0 = std::chrono::steady_clock::now();
        trainer->run();
        seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }))
    return *code;
  if (mpi.world_rank() == 0 && !trainer->step_graph_summary().empty())
    log_info("CUDA graph of the step: ", trainer->step_graph_summary());
  if (memory_peaks_requested() && mpi.world_rank() == 0) {
    std::string out = "live buffers at the memory peaks of rank 0 (ZTRAIN_MEMORY_PEAKS), device:\n" +
                      device->describe_peak_detail();
    for (bool pinned : {true, false})
      if (device->host_memory_stats(pinned) != nullptr)
        out += std::string(pinned ? "pinned" : "pageable") + " host memory:\n" +
               device->host_memory(pinned).describe_peak_detail();
    std::cout << out << std::flush;
  }
#if ZT_HAVE_CUDA
  if (prof && mpi.world_rank() == 0) std::cout << prof->report(trainer->step() - first_step, seconds) << std::flush;
  if (timeline && mpi.world_rank() == 0) {
    if (timeline_steps > 0)
      std::cout << describe_timeline(summarize_timeline(std::move(spans)), timeline_steps) << std::flush;
    else
      log_warn("ZTRAIN_GPU_TIMELINE: the run ended before a step after its first finished; nothing recorded");
  }
#endif
  return 0;
}
