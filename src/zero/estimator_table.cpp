// The estimator's table as `ztrain --estimate-memory` prints it: the rows of
// estimate_table() (estimator.cpp) in GiB or MiB, with the model and layout
// they describe.
#include <cstdio>
#include <sstream>

#include "core/error.hpp"
#include "modules/llama_desc.hpp"
#include "zero/estimator.hpp"

namespace zt {
namespace {

std::string format_count(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

std::string format_estimate_table(const EstimateInput& base, const std::vector<MemoryEstimateRow>& rows) {
  // GiB, or MiB when no device total reaches 1 GiB (small models).
  int64_t largest = 0;
  for (const MemoryEstimateRow& r : rows) largest = std::max(largest, r.total());
  const bool gib = largest >= (int64_t{1} << 30);
  const double unit = gib ? double(int64_t{1} << 30) : double(1 << 20);
  const ModelShape& s = base.model.shape;
  const int64_t n = base.model.num_params();
  std::ostringstream os;
  char buf[256];
  if (n >= 1000000000)
    std::snprintf(buf, sizeof buf, "%.2f B", static_cast<double>(n) / 1e9);
  else
    std::snprintf(buf, sizeof buf, "%.2f M", static_cast<double>(n) / 1e6);
  os << "memory per rank (" << (gib ? "GiB" : "MiB") << "): " << s.name << ", " << format_count(n) << " parameters ("
     << buf << "), " << s.n_layer << " layers, d_model " << s.d_model << ", " << s.n_head << " heads";
  if (s.n_kv_head != s.n_head) os << " (" << s.n_kv_head << " kv)";
  os << ", ffn " << s.ffn_hidden << ", vocab " << s.vocab << "\n"
     << "  " << base.world << " ranks = dp " << base.dp << " x pp " << base.pp << "; " << dtype_name(base.param_dtype)
     << " parameters and activations; micro-batch " << base.micro_batch << " x seq " << s.seq_len
     << "; activation checkpointing " << recompute_description(base.activation_checkpointing, base.recompute_layers)
     << (base.cpu_checkpointing ? ", checkpoints in host memory (cpu_checkpointing)" : "") << "\n";
  std::snprintf(buf, sizeof buf, "%-5s %-10s %8s %8s %8s %8s %8s %8s %8s %9s %9s %9s %9s\n", "stage", "offload",
                "params", "grads", "optim", "states", "activ", "comm", "work", "DEVICE", "pinned", "pageable", "nvme");
  os << buf;
  for (const MemoryEstimateRow& r : rows) {
    const std::string off = r.zero_stage == 3 ? r.offload_optimizer + "/" + r.offload_param : r.offload_optimizer;
    if (!r.supported) {
      std::snprintf(buf, sizeof buf, "%-5d %-10s   n/a: %s\n", r.zero_stage, off.c_str(), r.note.c_str());
      os << buf;
      continue;
    }
    auto g = [&](int64_t b) { return static_cast<double>(b) / unit; };
    std::snprintf(buf, sizeof buf, "%-5d %-10s %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %9.2f %9.2f %9.2f %9.2f",
                  r.zero_stage, off.c_str(), g(r.params), g(r.grads), g(r.optimizer), g(r.model_states()),
                  g(r.activations), g(r.comm), g(r.workspace), g(r.total()), g(r.host_pinned), g(r.host_pageable),
                  g(r.nvme));
    os << buf;
    if (base.pp > 1) os << "  (pipeline stage " << r.pp_stage << ")";
    os << "\n";
  }
  os << "  states = params + grads + optim; each column is at its own peak. DEVICE: the peak of their\n"
     << "  sum over the step, at most states + activ + comm + work (stages 2-3 without a pipeline follow\n"
     << "  the step). Pinned and pageable host memory and nvme are per rank (a node needs them times its\n"
     << "  ranks). Offload column: optimizer (stage 3: optimizer/parameters).\n";
  std::snprintf(buf, sizeof buf,
                "  buckets (elements): reduce %.3g, allgather %.3g; stage 3: prefetch %.3g, max live %.3g, "
                "reuse distance %.3g, persistence %.3g; overlap_comm %s\n",
                double(base.reduce_bucket_size), double(base.allgather_bucket_size),
                double(base.stage3_prefetch_bucket_size), double(base.stage3_max_live_parameters),
                double(base.stage3_max_reuse_distance), double(base.stage3_param_persistence_threshold),
                base.overlap_comm ? (*base.overlap_comm ? "on" : "off") : "stage 3 only (DeepSpeed's default)");
  os << buf;
  if (base.pp > 1)
    os << "  pipeline: the stage needing most is shown; its units and micro-batches in flight are the "
          "partitioner's and the schedule's\n";
  return os.str();
}

std::string llama2_70b_table(int world) {
  ZT_CHECK(world >= 1, "world ", world);
  EstimateInput in;
  in.model = describe_llama(llama2_70b_shape());
  in.world = in.dp = world;
  in.param_dtype = DType::bf16;
  in.micro_batch = 1;
  std::string out;
  for (bool ckpt : {false, true}) {
    in.activation_checkpointing = ckpt;
    out += format_estimate_table(in, estimate_table(in));
    if (!ckpt) out += "\n";
  }
  return out;
}

}  // namespace zt
