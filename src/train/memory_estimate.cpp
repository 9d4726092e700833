#include "train/memory_estimate.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/error.hpp"
#include "io/token_dataset.hpp"
#include "modules/kernels.hpp"
#include "pipeline/partition.hpp"
#include "pipeline/schedule.hpp"
#include "runtime/aio/aio.hpp"

namespace zt {

int64_t classifier_chunk_bytes(double mib) {
  ZT_CHECK(mib > 0, "classifier_chunk_bytes: ", mib, " MiB");
  return std::max<int64_t>(1, static_cast<int64_t>(std::min(mib * 1048576.0, 9.0e18)));
}

namespace {

// Each pipeline stage as the trainer runs it: the units of its chunks and the
// tie mirror from plan_stage, the pairs in flight from the schedule. One
// stage (P = 1) holds the whole model and one micro-batch at a time, or a
// breadth-first group of them ([Note: breadth-first walk]).
std::vector<StageContents> pipeline_stages(const ModelDesc& m, const PipelineConfig& p, int P, int M, int group) {
  if (P == 1) {
    StageContents sc = whole_model(m);
    sc.in_flight = group;
    return {sc};
  }
  const ScheduleKind schedule = schedule_kind_from_name(p.pipe_schedule_name);
  const PartitionKind partition = partition_kind_from_name(p.partition);
  const int V = p.num_chunks;
  const std::vector<int64_t> numels = m.unit_numels();
  const std::vector<std::vector<int>> ties = m.unit_ties();
  std::vector<StageContents> stages;
  for (int s = 0; s < P; ++s) {
    const StagePlan plan = plan_stage(numels, ties, P, V, partition, s);
    StageContents sc;
    for (int c = 0; c < V; ++c) {
      const UnitRange r = plan.chunks[static_cast<size_t>(c * P + s)];
      sc.chunks.emplace_back();
      for (int u = r.first; u < r.last; ++u) sc.chunks.back().push_back(u);
    }
    sc.mirror = plan.mirror;
    sc.in_flight = max_in_flight(schedule, P, V, M, s);
    stages.push_back(std::move(sc));
  }
  return stages;
}

// "0-6 12-17 (+ tie copy of 0)": a stage's chunks as unit ranges.
std::string stage_units(const StageContents& sc) {
  std::ostringstream os;
  for (const std::vector<int>& chunk : sc.chunks) {
    if (os.tellp() > 0) os << " ";
    os << chunk.front();
    if (chunk.size() > 1) os << "-" << chunk.back();
  }
  if (sc.mirror >= 0) os << " (+ tie copy of " << sc.mirror << ")";
  return os.str();
}

// The direct-I/O alignment of an NVMe swap directory that exists (the one
// its files will be padded to); 4096 otherwise.
int64_t nvme_alignment(const OffloadConfig& o) {
  struct stat st {};
  if (o.device != "nvme" || o.nvme_path.empty() || ::stat(o.nvme_path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return 4096;
  return static_cast<int64_t>(direct_io_alignment(o.nvme_path));
}

}  // namespace

EstimateInput estimate_input(const Config& cfg, int world, bool gpu) {
  const int pp = cfg.pipeline.parallel_size;
  if (world < 1 || world % pp != 0)
    ZT_USER_ERROR("memory estimate: pipeline.parallel_size (", pp, ") must divide the number of ranks (", world, ")");
  Config c = cfg;
  resolve_batch(c, world / pp);
  const ModelConfig& m = c.model;
  const ZeroConfig& z = c.zero;
  EstimateInput in;
  in.model = describe_model(m);
  in.stages = pipeline_stages(in.model, c.pipeline, pp, static_cast<int>(c.batch.grad_accum),
                              c.train.breadth_first_group);
  in.world = world;
  in.pp = pp;
  in.dp = world / pp;
  in.zero_stage = z.stage;
  in.offload_optimizer = z.offload_optimizer.device;
  in.offload_param = z.offload_param.device;
  in.param_dtype = c.bf16.enabled ? DType::bf16 : c.fp16.enabled ? DType::f16 : DType::f32;
  in.micro_batch = c.batch.micro_batch;
  in.micro_batches_per_step = c.batch.grad_accum;
  in.activation_checkpointing = m.activation_checkpointing;
  in.recompute_layers = m.recompute_layers;
  in.cpu_checkpointing = c.activation_checkpointing.cpu_checkpointing;
  // overlap_comm's default depends on the stage: keep it unset unless the
  // config gives it, so that the table's other stages get their own default.
  const auto& raw = c.raw;
  if (raw.is_object() && raw.contains("zero_optimization") && raw["zero_optimization"].is_object() &&
      raw["zero_optimization"].contains("overlap_comm"))
    in.overlap_comm = z.overlap_comm;
  in.reduce_bucket_size = z.reduce_bucket_size;
  in.allgather_bucket_size = z.allgather_bucket_size;
  in.stage3_prefetch_bucket_size = z.stage3_prefetch_bucket_size;
  in.stage3_max_live_parameters = z.stage3_max_live_parameters;
  in.stage3_param_persistence_threshold = z.stage3_param_persistence_threshold;
  in.stage3_max_reuse_distance = z.stage3_max_reuse_distance;
  in.sub_group_size = z.sub_group_size;
  in.optimizer_buffer_count = z.offload_optimizer.buffer_count;
  in.param_buffer_count = z.offload_param.buffer_count;
  in.param_buffer_size = z.offload_param.buffer_size;
  in.param_max_in_cpu = z.offload_param.max_in_cpu;
  in.nvme_alignment = nvme_alignment(z.offload_optimizer);
  in.param_nvme_alignment = nvme_alignment(z.offload_param);
  in.optimizer_pin_memory = z.offload_optimizer.pin_memory;
  in.param_pin_memory = z.offload_param.pin_memory;
  in.offload_ratio = z.offload_optimizer.ratio;
  in.delayed_update = c.offload.delayed_update;
  in.grad_accumulation_on_device = c.offload.grad_accumulation == "device";
  in.param_from_master = c.offload.param_from_master;
  in.host_grad_bytes = c.offload.grad_dtype == "bf16" ? 2 : 4;
  if (const double mib = c.train.classifier_chunk_mib; mib > 0)  // the same bound for every path
    in.classifier_chunk_bytes = in.cuda_one_pass_chunk_bytes = in.cuda_separate_chunk_bytes =
        classifier_chunk_bytes(mib);
  if (gpu) {
    // The CUDA classifier's path, as CudaKernels::classifier_fwd_bwd reads it.
    const Kernels::ClassifierPath path = Kernels::classifier_path_from_env();
    in.classifier = path == Kernels::ClassifierPath::separate ? EstimateInput::Classifier::cuda_separate
                                                              : EstimateInput::Classifier::cuda_one_pass;
    in.cuda_logits_f32 = path == Kernels::ClassifierPath::one_pass_f32;
  }
  return in;
}

MemoryEstimate estimate_memory(const Config& cfg, int dp_size, bool gpu) {
  MemoryEstimate e;
  e.input = estimate_input(cfg, dp_size * cfg.pipeline.parallel_size, gpu);
  e.stages = estimate_stages(e.input);
  e.row = estimate(e.input);
  return e;
}

std::string format_memory_estimate(const MemoryEstimate& e) {
  const MemoryEstimateRow& r = e.row;
  std::ostringstream os;
  auto line = [&](const char* what, int64_t bytes) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "  %-34s %12.2f MiB\n", what, static_cast<double>(bytes) / 1048576.0);
    os << buf;
  };
  os << "memory estimate per rank (" << r.num_params << " parameters; ZeRO stage " << r.zero_stage
     << ", offload optimizer " << r.offload_optimizer << ", parameters " << r.offload_param << "; dp "
     << e.input.dp << " x pp " << e.input.pp << "):\n";
  if (!r.supported) {
    os << "  not a valid combination: " << r.note << "\n";
    return os.str();
  }
  line("parameters (working copy)", r.params);
  line("gradients (fp32)", r.grads);
  line("optimizer (master, Adam m, v)", r.optimizer);
  line("activations", r.activations);
  line("communication buckets", r.comm);
  line("workspace", r.workspace);
  line("device total", r.total());
  if (!r.device_peak_at.empty()) os << "    (the step's peak, at " << r.device_peak_at << ")\n";
  if (r.host_pinned > 0) line("pinned host memory (offload)", r.host_pinned);
  if (r.host_pageable > 0) line("pageable host memory (offload)", r.host_pageable);
  if (r.nvme > 0) line("NVMe (offload)", r.nvme);
  if (e.input.pp > 1) {
    os << "  per pipeline stage (units; micro-batch x chunk pairs in flight; device total):\n";
    for (size_t st = 0; st < e.stages.size(); ++st) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "; %d in flight; %.2f MiB\n", e.input.stages[st].in_flight,
                    static_cast<double>(e.stages[st].total()) / 1048576.0);
      os << "    stage " << st << ": units " << stage_units(e.input.stages[st]) << buf;
    }
  }
  os << "  (ztrain --estimate-memory CONFIG prints every stage and offload; see docs/memory.md)\n";
  return os.str();
}

std::string format_estimate_table(const Config& cfg, int world, bool gpu) {
  const EstimateInput in = estimate_input(cfg, world, gpu);
  return format_estimate_table(in, estimate_table(in));
}

void validate_data_files(const Config& cfg) {
  if (cfg.data.embedded) return;
  for (const std::string* path : {&cfg.data.train, &cfg.data.val}) {
    if (path->empty()) continue;
    TokenDataset::open_list(*path).validate_vocab(cfg.model.vocab_size);
  }
}

}  // namespace zt
