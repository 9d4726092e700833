#include "train/memory_estimate.hpp"

#include <cstdio>
#include <sstream>

#include "io/token_dataset.hpp"

namespace zt {

EstimateInput estimate_input(const Config& cfg, int world) {
  const int pp = cfg.pipeline.parallel_size;
  if (world < 1 || world % pp != 0)
    ZT_USER_ERROR("memory estimate: pipeline.parallel_size (", pp, ") must divide the number of ranks (", world, ")");
  Config c = cfg;
  resolve_batch(c, world / pp);
  const ModelConfig& m = c.model;
  const ZeroConfig& z = c.zero;
  EstimateInput in;
  in.shape = gpt_shape(GptConfig{m.n_layer, m.n_head, m.d_model, m.seq_len, m.vocab_size});
  in.shape.name = m.preset.empty() ? "gpt2 (custom sizes)" : m.preset.rfind("gpt2", 0) == 0 ? m.preset : "gpt2 " + m.preset;
  in.world = world;
  in.pp = pp;
  in.dp = world / pp;
  in.zero_stage = z.stage;
  in.offload_optimizer = z.offload_optimizer.device;
  in.offload_param = z.offload_param.device;
  in.param_dtype = c.bf16.enabled ? DType::bf16 : c.fp16.enabled ? DType::f16 : DType::f32;
  in.micro_batch = c.batch.micro_batch;
  in.activation_checkpointing = m.activation_checkpointing;
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
  return in;
}

MemoryEstimate estimate_memory(const Config& cfg, int dp_size) {
  MemoryEstimate e;
  e.input = estimate_input(cfg, dp_size * cfg.pipeline.parallel_size);
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
  if (r.host > 0) line("host memory (offload)", r.host);
  if (r.nvme > 0) line("NVMe (offload)", r.nvme);
  os << "  (ztrain --estimate-memory CONFIG prints every stage and offload; see docs/memory.md)\n";
  return os.str();
}

std::string format_estimate_table(const Config& cfg, int world) {
  const EstimateInput in = estimate_input(cfg, world);
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
