// zplan's pieces: the device figures (data/plan/figures.json), the layouts
// of a model on a number of GPUs with their memory from the ZeRO memory
// estimator (src/zero/estimator.hpp through train/memory_estimate.hpp: the
// same figures as `ztrain --estimate-memory`, no second memory model), and a
// time model of one optimizer step built from measured kernel and link
// figures ([Note: plan time model] in zplan_model.cpp, docs/plan.md).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "zero/estimator.hpp"

namespace zt::plan {

// A rate that depends on a width (the model's d_model, or the sequence for
// attention): measured at one or more points (x increasing), interpolated in
// log-log between neighbours, held constant outside.
struct Curve {
  std::vector<std::pair<double, double>> points;  // (x, rate)
  double at(double x) const;
  void scale(double k) {
    for (auto& p : points) p.second *= k;
  }
};

struct DeviceFigures {
  std::string key;    // "h200"
  std::string label;  // "NVIDIA H200 141GB"
  double memory_gib = 0;       // device memory a process can allocate
  double bf16_tflops = 0;      // dense bf16 peak (datasheet, or measured)
  double hbm_gbs = 0;          // memory bandwidth (datasheet)
  Curve gemm_tflops;           // block products, against d_model
  Curve attention_tflops;      // attention forward + backward, model FLOPs, against seq_len
  // The same for ztrain's own flash kernels (ZTRAIN_ATTENTION=flash, and
  // every build without cuDNN's frontend); empty where not measured.
  Curve flash_attention_tflops;
  Curve classifier_tflops;     // fused classifier forward + backward, against d_model
  double membound_ns_per_kib = 0;  // memory-bound work per KiB of saved activations (see the Note)
  double optimizer_gbs = 0;        // device AdamW, bytes moved per second
  double intra_busbw_gbs = 0;      // all-reduce bus bandwidth inside a node (zbench)
  double inter_busbw_gbs = 0;      // between nodes
  int gpus_per_node = 8;
  double pcie_gbs = 0;             // host <-> device copies
  double host_adam_gparams = 0;    // host AdamW, G parameters per second per node
  double host_mem_gbs = 0;         // host memory bandwidth per node (adds, copies)
  double nvme_gbs = 0;             // NVMe read + write per node
  double step_overhead = 0;        // fraction of a step outside kernels (launch gaps, host work)
  double price_per_hour = 0;       // default price per GPU-hour, USD (on demand)
  double spot_price_per_hour = 0;  // 0: none known
  std::string price_note;
  std::string source;              // where the figures come from
};

struct Figures {
  std::vector<DeviceFigures> devices;
  nlohmann::json runs;  // the measured runs of the validation table
  std::string path;
  const DeviceFigures& device(const std::string& key) const;  // UserError naming the known ones
};

Figures load_figures(const std::string& path);

// The device's figures for an attention path: "cudnn" (the default, the
// figures as they are) or "flash" (attention priced at the flash kernels'
// rate). UserError naming `where` for another path or a device without a
// flash figure.
DeviceFigures with_attention(DeviceFigures dev, const std::string& attention, const std::string& where);

// One way to train: ZeRO stage, offload, pipeline, batch split, checkpointing.
struct Layout {
  int gpus = 1;
  int P = 1, V = 1;
  int dp = 1;
  int zero_stage = 0;
  std::string offload_optimizer = "none";  // none|cpu|nvme
  std::string offload_param = "none";      // none|cpu
  bool delayed_update = false;
  int64_t micro_batch = 1;
  int64_t accumulation = 1;
  bool checkpointing = false;
  // train.breadth_first_group: micro-batches that go through each unit
  // together (with offload, a unit's gradient lands once a group and its
  // parameters are uploaded once a group). The search tries groups with
  // offload on one stage (breadth_first_groups in zplan_model.cpp).
  int64_t group = 1;
  // offload.param_from_master (no 16-bit parameters in host memory; the
  // uploads carry the fp32 master) and offload.grad_dtype "bf16" (the
  // gradients land on the host in bf16: each must land once a step).
  bool param_from_master = false;
  bool grad_bf16 = false;
  // activation_checkpointing.cpu_checkpointing: with checkpointing, the
  // checkpoints wait in host memory between the forward and the backward.
  bool cpu_checkpointing = false;
  std::string name() const;  // "ZeRO-3 + cpu optimizer + cpu params, P=2 V=1, dp 4, micro 4 x 8, ckpt"
  // The --set overrides that make a config run this layout.
  std::vector<std::string> sets() const;
};

struct TimeBreakdown {
  double compute = 0;      // forward + backward (+ recompute) of every micro-batch, pipeline bubble included
  double comm = 0;         // data-parallel collectives not hidden under compute
  double optimizer = 0;    // device AdamW, or the host step's part not hidden
  double offload = 0;      // host traffic past the device's compute (gradients, uploads, adds)
  double overhead = 0;
  double step = 0;
  double tokens_per_s = 0;  // all GPUs
};

struct PlanInput {
  nlohmann::json model;  // the config's "model" section (a preset or sizes)
  std::string dtype = "bf16";  // bf16|f32
  DeviceFigures device;
  int gpus = 1;
  int gpus_per_node = 0;  // 0: the device's
  double host_mem_gib = 0;  // per node; 0: no host offload
  double nvme_gib = 0;      // per node; 0: no NVMe offload
  double device_headroom = 0.05;  // fraction of the device's memory a layout leaves free (the estimator's error)
  int64_t global_batch = 0;  // sequences, the same for every layout; 0: about 2^19 tokens
  double price_per_hour = -1;  // < 0: the device's default
};

struct PlanRow {
  Layout layout;
  MemoryEstimateRow memory;  // the estimator's row for this layout (the stage needing most)
  double host_gib_per_node = 0, nvme_gib_per_node = 0;
  TimeBreakdown time;
  double cost_per_btok = 0;  // USD per billion tokens
};

// The config document of a layout (model section, dtype, batch, ZeRO,
// offload, pipeline): what `ztrain` would run.
nlohmann::json layout_config(const nlohmann::json& model, const std::string& dtype, const Layout& l);
Config parse_layout(const nlohmann::json& model, const std::string& dtype, const Layout& l);

// The step time of a layout on a device.
TimeBreakdown step_time(const Config& cfg, const DeviceFigures& dev, const Layout& l, int gpus_per_node);

// Every layout that fits, fastest first. UserError for bad input.
std::vector<PlanRow> plan(const PlanInput& in, std::string* notes = nullptr);

// The validation table: every measured run of the figures against its
// prediction. Markdown when `markdown`.
struct ValidationRow {
  std::string id, source, what, device;
  double measured_step = 0, predicted_step = 0;
  double error() const { return predicted_step / measured_step - 1.0; }
  std::string miss_reason;  // from the figures: why a run misses 15%
  // A later measurement of the same configuration on a newer ztrain (its
  // `what`): this run is listed but not counted, since the model follows
  // the code as it is now.
  std::string superseded_by;
};
std::vector<ValidationRow> validate(const Figures& f);
std::string format_validation(const std::vector<ValidationRow>& rows);

}  // namespace zt::plan
