#include "zplan_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "modules/model_desc.hpp"
#include "train/memory_estimate.hpp"

namespace zt::plan {

// [Note: plan time model]
// One optimizer step of one rank, from the model description and the
// device's measured figures (data/plan/figures.json; where each comes from is
// in its "source"):
//
//   compute   per token: the block products' 6·N_blocks FLOPs at the GEMM
//             rate for the model's width, attention's 12·L·C·T model FLOPs at
//             the attention rate for the sequence, the classifier's 6·C·V at
//             its rate, and the memory-bound work (norms, activations,
//             residuals, bias gradients) in proportion to the bytes the blocks
//             save for the backward (the estimator's per-token activation
//             facts), less what products write in their epilogues (GPT-2's
//             kept GELU output). Activation checkpointing adds the blocks' forward once
//             more (a third of their products and attention, half of the
//             memory-bound work). A pipeline stage runs 1/P of the blocks
//             plus the classifier (the last stage, the slowest), for M + (P-1)/V
//             micro-batch slots (the schedule's bubble).
//   comm      ring collectives at the bus bandwidth (zbench's busbw: an
//             all-reduce of S bytes takes 2(n-1)/n·S/busbw, a reduce-scatter
//             or all-gather (n-1)/n·S/busbw), inside a node or between nodes.
//             Stages 0-1 reduce fp32 gradients at the step (exposed);
//             stage 2 reduce-scatters each micro-batch's gradients (hidden
//             under the backward with overlap_comm, exposed without);
//             stage 3 also gathers the 16-bit parameters (once a step while
//             they fit in stage3_max_live_parameters, else before every
//             forward and backward), prefetched under the compute. Stages 1-2 all-gather
//             the updated 16-bit parameters after the step (exposed).
//   optimizer on the device: 30 bytes per owned parameter (master, m, v read
//             and written, the fp32 gradient read, the 16-bit copy written) at
//             the device's AdamW bandwidth. On the host: the owned parameters
//             at the host AdamW's rate (the node's cores shared by its ranks);
//             exact, after the last backward, with the next step's first
//             forward (of a whole breadth-first group) under it (the update
//             is streamed unit by unit into that forward; not with the
//             optimizer on NVMe, whose update ends before the step does);
//             delayed, beside the next step's compute, so the step is the
//             longer of the two.
//   offload   per breadth-first group (every micro-batch with groups of 1)
//             the device's compute runs beside the host traffic: the
//             gradient shard copied to the host once (4 bytes per owned
//             parameter over PCIe, 2 with offload.grad_dtype "bf16"),
//             added into the host shard from the second group on (12 bytes
//             of host memory traffic), and with parameter offload the shard
//             uploaded for the forward and again for the backward (2 bytes
//             per parameter each time, 4 with offload.param_from_master);
//             a group takes the longest of its compute, PCIe and
//             host-memory time.
//   overhead  a fraction of the step outside kernels (launch gaps, host
//             work), from the profile's wall time against its kernel time.
//
// Memory is not modelled here: every layout's bytes are the estimator's row
// (train/memory_estimate.hpp), the figures `ztrain --estimate-memory` prints.

namespace {

double num(const nlohmann::json& j, const char* key, const std::string& where, bool required = true) {
  if (!j.contains(key)) {
    if (required) ZT_USER_ERROR(where, ": '", key, "' is missing");
    return 0;
  }
  if (!j[key].is_number()) ZT_USER_ERROR(where, ".", key, ": expected a number");
  return j[key].get<double>();
}

Curve curve(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) ZT_USER_ERROR(where, ": '", key, "' is missing");
  const nlohmann::json& c = j[key];
  Curve r;
  if (c.is_number()) {
    r.points = {{1.0, c.get<double>()}};
    if (!(r.points[0].second > 0)) ZT_USER_ERROR(where, ".", key, ": the rate must be > 0");
    return r;
  }
  const char* form = ": expected a number or [[x0, rate0], [x1, rate1], ...] with 0 < x0 < x1 < ... and rates > 0";
  if (!c.is_array() || c.empty()) ZT_USER_ERROR(where, ".", key, form);
  for (const nlohmann::json& pt : c) {
    if (!pt.is_array() || pt.size() != 2 || !pt[0].is_number() || !pt[1].is_number())
      ZT_USER_ERROR(where, ".", key, form);
    const double x = pt[0].get<double>(), y = pt[1].get<double>();
    if (!(x > 0 && y > 0) || (!r.points.empty() && !(x > r.points.back().first))) ZT_USER_ERROR(where, ".", key, form);
    r.points.emplace_back(x, y);
  }
  return r;
}

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

// Per token of one micro-batch, for the whole model.
struct Work {
  double gemm_flops = 0;     // blocks' products, forward + backward
  double attn_flops = 0;     // attention, model FLOPs
  double cls_flops = 0;      // classifier
  double act_kib = 0;        // blocks' saved activations (output + stash), KiB
  int64_t params = 0;
  int64_t n_layer = 0, d_model = 0, seq_len = 0;
};

Work model_work(const ModelDesc& m, int64_t act_size) {
  Work w;
  const ModelShape& s = m.shape;
  w.n_layer = s.n_layer;
  w.d_model = s.d_model;
  w.seq_len = s.seq_len;
  w.params = m.num_params();
  int64_t block_params = 0;
  int64_t act = 0;
  for (const UnitDesc& u : m.units) {
    if (u.kind != UnitKind::block) continue;
    int64_t matrices = 0;  // the products' weights: 2-D tensors
    for (const TensorDesc& t : u.tensors)
      if (t.shape.rank() == 2) matrices += t.shape.numel();
    block_params += matrices;
    act += u.act.output.bytes(act_size) + u.act.stash.bytes(act_size) - u.act.stash_from_products.bytes(act_size);
  }
  w.gemm_flops = 6.0 * static_cast<double>(block_params);
  w.attn_flops = 12.0 * static_cast<double>(s.n_layer * s.d_model * s.seq_len);
  w.cls_flops = 6.0 * static_cast<double>(s.d_model * s.vocab);
  w.act_kib = static_cast<double>(act) / 1024.0;
  return w;
}

// Ring collectives: seconds for S bytes over n ranks at busbw.
double all_reduce_s(double bytes, int n, double busbw_gbs) {
  return n <= 1 ? 0.0 : 2.0 * (n - 1) / n * bytes / (busbw_gbs * 1e9);
}
double scatter_gather_s(double bytes, int n, double busbw_gbs) {
  return n <= 1 ? 0.0 : static_cast<double>(n - 1) / n * bytes / (busbw_gbs * 1e9);
}

}  // namespace

double Curve::at(double x) const {
  ZT_CHECK(!points.empty(), "a rate curve without points");
  if (x <= points.front().first) return points.front().second;
  if (x >= points.back().first) return points.back().second;
  size_t i = 1;
  while (points[i].first < x) ++i;
  const auto [x0, y0] = points[i - 1];
  const auto [x1, y1] = points[i];
  const double t = (std::log(x) - std::log(x0)) / (std::log(x1) - std::log(x0));
  return std::exp(std::log(y0) + t * (std::log(y1) - std::log(y0)));
}

const DeviceFigures& Figures::device(const std::string& key) const {
  for (const DeviceFigures& d : devices)
    if (d.key == key) return d;
  std::string known;
  for (const DeviceFigures& d : devices) known += (known.empty() ? "" : ", ") + d.key;
  ZT_USER_ERROR("unknown GPU preset '", key, "' (known: ", known, "; figures in ", path, ")");
}

Figures load_figures(const std::string& path) {
  std::ifstream in(path);
  if (!in) ZT_USER_ERROR(path, ": cannot open the figures file");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in, nullptr, true, true);
  } catch (const nlohmann::json::exception& e) {
    ZT_USER_ERROR(path, ": not valid JSON (", e.what(), ")");
  }
  Figures f;
  f.path = path;
  if (!j.contains("devices") || !j["devices"].is_object()) ZT_USER_ERROR(path, ": no \"devices\" object");
  // A device either has its own measured figures, or is scaled from a
  // measured one ("scale_from"): rates by the bf16 peaks, memory-bound work
  // and the optimizer by the memory bandwidths, links given.
  std::vector<std::pair<std::string, nlohmann::json>> scaled;
  for (auto it = j["devices"].begin(); it != j["devices"].end(); ++it) {
    const std::string where = path + ": devices." + it.key();
    const nlohmann::json& d = it.value();
    if (d.contains("scale_from")) {
      scaled.emplace_back(it.key(), d);
      continue;
    }
    DeviceFigures x;
    x.key = it.key();
    x.label = d.value("label", it.key());
    x.memory_gib = num(d, "memory_gib", where);
    x.bf16_tflops = num(d, "bf16_tflops", where);
    x.hbm_gbs = num(d, "hbm_gbs", where);
    x.gemm_tflops = curve(d, "gemm_tflops", where);
    x.attention_tflops = curve(d, "attention_tflops", where);
    if (d.contains("flash_attention_tflops")) x.flash_attention_tflops = curve(d, "flash_attention_tflops", where);
    x.classifier_tflops = curve(d, "classifier_tflops", where);
    x.membound_ns_per_kib = num(d, "membound_ns_per_kib", where);
    x.optimizer_gbs = num(d, "optimizer_gbs", where);
    x.intra_busbw_gbs = num(d, "intra_busbw_gbs", where);
    x.inter_busbw_gbs = num(d, "inter_busbw_gbs", where);
    x.gpus_per_node = static_cast<int>(num(d, "gpus_per_node", where));
    x.pcie_gbs = num(d, "pcie_gbs", where);
    x.host_adam_gparams = num(d, "host_adam_gparams", where);
    x.host_mem_gbs = num(d, "host_mem_gbs", where);
    x.nvme_gbs = num(d, "nvme_gbs", where);
    x.step_overhead = num(d, "step_overhead", where);
    x.price_per_hour = num(d, "price_per_hour", where);
    x.spot_price_per_hour = num(d, "spot_price_per_hour", where, false);
    x.price_note = d.value("price_note", "");
    x.source = d.value("source", "");
    f.devices.push_back(x);
  }
  for (const auto& [key, d] : scaled) {
    const std::string where = path + ": devices." + key;
    const std::string from = d["scale_from"].get<std::string>();
    DeviceFigures x = f.device(from);
    const double flop = num(d, "bf16_tflops", where) / x.bf16_tflops;
    const double bw = num(d, "hbm_gbs", where) / x.hbm_gbs;
    x.hbm_gbs = num(d, "hbm_gbs", where);
    x.key = key;
    x.label = d.value("label", key);
    x.memory_gib = num(d, "memory_gib", where);
    x.bf16_tflops *= flop;
    for (Curve* c : {&x.gemm_tflops, &x.attention_tflops, &x.flash_attention_tflops, &x.classifier_tflops})
      c->scale(flop);
    x.membound_ns_per_kib /= bw;
    x.optimizer_gbs *= bw;
    x.intra_busbw_gbs = num(d, "intra_busbw_gbs", where);
    x.inter_busbw_gbs = num(d, "inter_busbw_gbs", where);
    x.gpus_per_node = static_cast<int>(num(d, "gpus_per_node", where));
    x.pcie_gbs = num(d, "pcie_gbs", where);
    if (d.contains("host_adam_gparams")) x.host_adam_gparams = num(d, "host_adam_gparams", where);
    if (d.contains("host_mem_gbs")) x.host_mem_gbs = num(d, "host_mem_gbs", where);
    if (d.contains("nvme_gbs")) x.nvme_gbs = num(d, "nvme_gbs", where);
    x.price_per_hour = num(d, "price_per_hour", where);
    x.spot_price_per_hour = num(d, "spot_price_per_hour", where, false);
    x.price_note = d.value("price_note", "");
    x.source = d.value("source", "") + " (scaled from " + from + ")";
    f.devices.push_back(x);
  }
  f.runs = j.value("runs", nlohmann::json::array());
  return f;
}

DeviceFigures with_attention(DeviceFigures dev, const std::string& attention, const std::string& where) {
  if (attention == "cudnn") return dev;
  if (attention != "flash") ZT_USER_ERROR(where, ": expected cudnn or flash, found '", attention, "'");
  if (dev.flash_attention_tflops.points.empty())
    ZT_USER_ERROR(where, ": no flash_attention_tflops for '", dev.key, "' in the figures (the flash kernels were not ",
                  "measured on it)");
  dev.attention_tflops = dev.flash_attention_tflops;
  dev.label += ", flash attention";
  return dev;
}

std::string Layout::name() const {
  std::ostringstream os;
  os << "ZeRO-" << zero_stage;
  if (offload_optimizer != "none") os << " + " << offload_optimizer << " optimizer";
  if (offload_param != "none") os << " + " << offload_param << " params";
  if (param_from_master) os << " from the master";
  if (grad_bf16) os << ", bf16 gradients";
  if (delayed_update) os << " (delayed)";
  if (P > 1) os << ", P=" << P << " V=" << V;
  os << ", dp " << dp << ", micro " << micro_batch << " x " << accumulation;
  if (group > 1) os << " in groups of " << group;
  if (checkpointing) os << (cpu_checkpointing ? ", ckpt in host memory" : ", ckpt");
  return os.str();
}

nlohmann::json layout_config(const nlohmann::json& model, const std::string& dtype, const Layout& l) {
  nlohmann::json c;
  c["train_batch_size"] = l.micro_batch * l.accumulation * l.dp;
  c["train_micro_batch_size_per_gpu"] = l.micro_batch;
  c["gradient_accumulation_steps"] = l.accumulation;
  c["bf16"] = {{"enabled", dtype == "bf16"}};
  c["model"] = model;
  c["model"]["activation_checkpointing"] = l.checkpointing;
  if (l.cpu_checkpointing) c["activation_checkpointing"] = {{"cpu_checkpointing", true}};
  nlohmann::json z = {{"stage", l.zero_stage}};
  if (l.offload_optimizer != "none") {
    z["offload_optimizer"] = {{"device", l.offload_optimizer}, {"pin_memory", true}};
    if (l.offload_optimizer == "nvme") z["offload_optimizer"]["nvme_path"] = "/local_nvme";
  }
  if (l.offload_param != "none") z["offload_param"] = {{"device", l.offload_param}, {"pin_memory", true}};
  c["zero_optimization"] = z;
  if (l.delayed_update) c["offload"]["delayed_update"] = true;
  if (l.param_from_master) c["offload"]["param_from_master"] = true;
  if (l.grad_bf16) c["offload"]["grad_dtype"] = "bf16";
  c["pipeline"] = {{"parallel_size", l.P}, {"num_chunks", l.V},
                   {"pipe_schedule_name", l.V > 1 ? "interleaved" : "1f1b"}};
  if (l.group > 1) c["train"] = {{"breadth_first_group", l.group}};
  return c;
}

std::vector<std::string> Layout::sets() const {
  std::vector<std::string> s;
  const nlohmann::json c = layout_config(nlohmann::json::object(), "bf16", *this);
  for (const char* k : {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"})
    s.push_back(std::string(k) + "=" + c[k].dump());
  s.push_back("model.activation_checkpointing=" + std::string(checkpointing ? "true" : "false"));
  if (cpu_checkpointing) s.push_back("activation_checkpointing.cpu_checkpointing=true");
  s.push_back("zero_optimization.stage=" + std::to_string(zero_stage));
  if (offload_optimizer != "none")
    s.push_back("zero_optimization.offload_optimizer=" + c["zero_optimization"]["offload_optimizer"].dump());
  if (offload_param != "none")
    s.push_back("zero_optimization.offload_param=" + c["zero_optimization"]["offload_param"].dump());
  if (delayed_update) s.push_back("offload.delayed_update=true");
  if (param_from_master) s.push_back("offload.param_from_master=true");
  if (grad_bf16) s.push_back("offload.grad_dtype=\"bf16\"");
  s.push_back("pipeline.parallel_size=" + std::to_string(P));
  s.push_back("pipeline.num_chunks=" + std::to_string(V));
  s.push_back(std::string("pipeline.pipe_schedule_name=") + (V > 1 ? "interleaved" : "1f1b"));
  if (group > 1) s.push_back("train.breadth_first_group=" + std::to_string(group));
  return s;
}

Config parse_layout(const nlohmann::json& model, const std::string& dtype, const Layout& l) {
  return parse_config(layout_config(model, dtype, l), "zplan layout (" + l.name() + ")");
}

TimeBreakdown step_time(const Config& cfg, const DeviceFigures& dev, const Layout& l, int gpus_per_node) {
  const ModelDesc desc = describe_model(cfg.model);
  const int64_t act_size = cfg.bf16.enabled || cfg.fp16.enabled ? 2 : 4;
  const Work w = model_work(desc, act_size);
  const double tokens_mb = static_cast<double>(l.micro_batch * w.seq_len);
  const double L = static_cast<double>(w.n_layer);
  // Seconds per token of the blocks (split over the pipeline stages) and of the classifier.
  const double gemm_s = w.gemm_flops / (dev.gemm_tflops.at(static_cast<double>(w.d_model)) * 1e12);
  const double attn_s = w.attn_flops / (dev.attention_tflops.at(static_cast<double>(w.seq_len)) * 1e12);
  const double mem_s = w.act_kib * dev.membound_ns_per_kib * 1e-9;
  const double cls_s = w.cls_flops / (dev.classifier_tflops.at(static_cast<double>(w.d_model)) * 1e12);
  double blocks_s = gemm_s + attn_s + mem_s;
  if (l.checkpointing) blocks_s += (gemm_s + attn_s) / 3.0 + mem_s / 2.0;
  const double stage_share = std::ceil(L / l.P) / L;  // the largest stage's blocks
  const double mb_compute = tokens_mb * (blocks_s * stage_share + cls_s);
  const double M = static_cast<double>(l.accumulation);
  const double slots = M + (l.P > 1 ? static_cast<double>(l.P - 1) / l.V : 0.0);

  TimeBreakdown t;
  const int dp = l.dp;
  const bool across_nodes = l.gpus > gpus_per_node;
  // The data-parallel group spans nodes when the pipeline does not fill a node.
  const double busbw = (across_nodes && dp > gpus_per_node / std::max(1, std::min(l.P, gpus_per_node)))
                           ? dev.inter_busbw_gbs
                           : dev.intra_busbw_gbs;
  const double psi = static_cast<double>(w.params) * stage_share;  // a stage's parameters (about)
  const double owned = l.zero_stage >= 1 ? psi / dp : psi;
  const double p16 = static_cast<double>(act_size);
  const bool overlap = l.zero_stage == 3;  // DeepSpeed's default overlap_comm
  double exposed = 0, hidden_window = 0;
  double hideable = 0;
  if (l.zero_stage <= 1) {
    exposed += l.zero_stage == 0 ? all_reduce_s(4 * psi, dp, busbw) : scatter_gather_s(4 * psi, dp, busbw);
  } else {
    const double rs = M * scatter_gather_s(4 * psi, dp, busbw);
    (overlap ? hideable : exposed) += rs;
  }
  if (l.zero_stage == 1 || l.zero_stage == 2) exposed += scatter_gather_s(p16 * psi, dp, busbw);
  // Stage 3 keeps gathered units while the live parameters stay under
  // stage3_max_live_parameters (DeepSpeed's 1e9): a model below it is
  // gathered once a step, a larger one before each forward and backward.
  const double gathers = psi <= static_cast<double>(cfg.zero.stage3_max_live_parameters) ? 1.0 : 2.0 * M;
  if (l.zero_stage == 3) hideable += gathers * scatter_gather_s(p16 * psi, dp, busbw);
  hidden_window = slots * mb_compute;
  t.comm = exposed + std::max(0.0, hideable - hidden_window);

  // Offload: per micro-batch the longest of compute, PCIe and host memory.
  const int ranks_on_node = std::min(l.gpus, gpus_per_node);
  double per_mb_total = 0;
  if (l.offload_optimizer == "none") {
    t.compute = slots * mb_compute;
    t.optimizer = 30.0 * owned / (dev.optimizer_gbs * 1e9);
  } else {
    const double host_bw = dev.host_mem_gbs * 1e9 / ranks_on_node;
    // Gradients land in fp32, or bf16 (offload.grad_dtype); uploads carry
    // the 16-bit parameters, or the fp32 master (offload.param_from_master).
    const double grad_bytes = l.grad_bf16 ? 2.0 : 4.0;
    const double grad_copy = grad_bytes * owned / (dev.pcie_gbs * 1e9);
    const double uploads = l.offload_param != "none" ? 2.0 * (l.param_from_master ? 4.0 : p16) * owned : 0.0;
    // activation_checkpointing.cpu_checkpointing: each recomputed block's
    // input goes to the host in the forward and comes back for the
    // backward, a d_model row per token in the activation dtype.
    const double ckpt_bytes =
        l.cpu_checkpointing ? 2.0 * tokens_mb * static_cast<double>(w.d_model) * p16 * std::max(0.0, std::ceil(L / l.P) - 1)
                            : 0.0;
    // A breadth-first group uploads each unit once for its forward and
    // once for its backward, and lands each unit's gradient once, all
    // spread over the group's compute; its landing after the first is
    // added on the host.
    const int64_t G = std::max<int64_t>(1, std::min(l.group, l.accumulation));
    for (int64_t first = 0; first < l.accumulation; first += G) {
      const double n = static_cast<double>(std::min(G, l.accumulation - first));
      const double pcie = grad_copy + (uploads + n * ckpt_bytes) / (dev.pcie_gbs * 1e9);
      const double host = (grad_bytes * owned + uploads + n * ckpt_bytes + (first > 0 ? 12.0 * owned : 0.0)) / host_bw;
      per_mb_total += std::max({n * mb_compute, pcie, host});
    }
    per_mb_total += (slots - M) * mb_compute;
    t.compute = slots * mb_compute;
    t.offload = per_mb_total - t.compute;
    double adam = owned / (dev.host_adam_gparams * 1e9 / ranks_on_node);
    // NVMe: master, m and v read and written back, 24 bytes per owned parameter.
    if (l.offload_optimizer == "nvme") adam += 24.0 * owned / (dev.nvme_gbs * 1e9 / ranks_on_node);
    if (l.delayed_update) {
      // The update of step N beside step N+1's compute: the longer of the
      // two (the gradients landed during step N's backward).
      t.optimizer = std::max(0.0, adam - per_mb_total);
    } else if (l.offload_optimizer == "cpu") {
      // Streamed: the next step's first forward runs under the update, unit
      // by unit; a breadth-first group takes each unit through the group's
      // micro-batches before the next unit, so the whole group's forward
      // does. A forward is a third of a micro-batch's compute (a quarter
      // with checkpointing, whose backward recomputes it).
      const double forward = static_cast<double>(G) * mb_compute / (l.checkpointing ? 4.0 : 3.0);
      t.optimizer = std::max(0.0, adam - forward);
    } else {
      t.optimizer = adam;
    }
  }
  const double busy = t.compute + t.offload + t.comm + t.optimizer;
  t.overhead = busy * dev.step_overhead;
  t.step = busy + t.overhead;
  t.tokens_per_s = tokens_mb * M * dp / t.step;
  return t;
}

// The variants of an offload layout the search tries:
//  - train.breadth_first_group 1, and with offload on a single stage
//    (breadth-first walks are refused with a pipeline) 2, 4, 8 ... below
//    the step's micro-batches and all of them, where each unit is uploaded,
//    gathered and lands once a group;
//  - offload.param_from_master with both offloaded to the CPU (not with the
//    delayed update): 2 bytes per parameter less host memory;
//  - offload.grad_dtype "bf16" where every gradient lands once a step (one
//    stage; stage 1, one micro-batch, or one group of all of them): 2 bytes
//    per owned parameter less host memory;
//  - activation_checkpointing.cpu_checkpointing with checkpointing and the
//    optimizer offloaded: the checkpoints in host memory, so that larger
//    groups fit the device.
std::vector<Layout> offload_variants(const Layout& base) {
  std::vector<Layout> out;
  std::vector<int64_t> groups{1};
  if (base.offload_optimizer != "none" && base.P == 1) {
    for (int64_t k = 2; k < base.accumulation; k *= 2) groups.push_back(k);
    if (base.accumulation > 1) groups.push_back(base.accumulation);
  }
  const bool pfm_ok = base.offload_optimizer == "cpu" && base.offload_param == "cpu" && !base.delayed_update;
  for (const int64_t g : groups)
    for (const bool pfm : {false, true}) {
      if (pfm && !pfm_ok) continue;
      for (const bool bf16 : {false, true}) {
        const bool once = base.zero_stage == 1 || base.accumulation == 1 || g == base.accumulation;
        if (bf16 && (base.offload_optimizer == "none" || base.P > 1 || !once)) continue;
        for (const bool host_ckpt : {false, true}) {
          if (host_ckpt && (!base.checkpointing || base.offload_optimizer == "none")) continue;
          Layout l = base;
          l.group = g;
          l.param_from_master = pfm;
          l.grad_bf16 = bf16;
          l.cpu_checkpointing = host_ckpt;
          out.push_back(l);
        }
      }
    }
  return out;
}

std::vector<PlanRow> plan(const PlanInput& in, std::string* notes) {
  if (in.gpus < 1) ZT_USER_ERROR("--gpus: expected at least one GPU, found ", in.gpus);
  const DeviceFigures& dev = in.device;
  const int per_node = in.gpus_per_node > 0 ? in.gpus_per_node : dev.gpus_per_node;
  const double price = in.price_per_hour >= 0 ? in.price_per_hour : dev.price_per_hour;
  // The model, once, to know its layers (pipeline sizes) and to refuse a bad model early.
  const Config base = parse_layout(in.model, in.dtype, Layout{});
  const int64_t n_layer = base.model.n_layer;
  const double device_bytes = dev.memory_gib * 1073741824.0 * (1.0 - in.device_headroom);
  const double host_bytes = in.host_mem_gib * 1073741824.0;
  const double nvme_bytes = in.nvme_gib * 1073741824.0;
  std::vector<PlanRow> rows;
  int64_t tried = 0, refused = 0;
  struct Off {
    std::string opt, param;
    bool delayed;
  };
  const std::vector<Off> offloads = {{"none", "none", false}, {"cpu", "none", false}, {"cpu", "none", true},
                                     {"cpu", "cpu", false},   {"nvme", "none", false}, {"nvme", "cpu", false}};
  // One layout: kept when the estimator puts it within the device's (less
  // the headroom for the estimator's error), the host's and the NVMe's memory.
  auto consider = [&](const Layout& l) {
    ++tried;
    MemoryEstimate e;
    Config cfg;
    try {
      cfg = parse_layout(in.model, in.dtype, l);
      e = estimate_memory(cfg, l.dp, /*gpu=*/true);
    } catch (const UserError&) {
      ++refused;  // the config layer or the schedule refuses it (e.g. too few micro-batches)
      return;
    }
    if (!e.row.supported) return;
    const double host_node = static_cast<double>(e.row.host()) * std::min(in.gpus, per_node);
    const double nvme_node = static_cast<double>(e.row.nvme) * std::min(in.gpus, per_node);
    if (static_cast<double>(e.row.total()) > device_bytes) return;
    if (host_node > host_bytes && e.row.host() > 0) return;
    if (nvme_node > nvme_bytes && e.row.nvme > 0) return;
    PlanRow r;
    r.layout = l;
    r.memory = e.row;
    r.host_gib_per_node = host_node / 1073741824.0;
    r.nvme_gib_per_node = nvme_node / 1073741824.0;
    r.time = step_time(cfg, dev, l, per_node);
    r.cost_per_btok = price * in.gpus / 3600.0 * 1e9 / r.time.tokens_per_s;
    rows.push_back(r);
  };
  // The same global batch for every layout: given, or about 2^19 tokens.
  const int64_t global =
      in.global_batch > 0 ? in.global_batch : std::max<int64_t>(1, (int64_t{1} << 19) / base.model.seq_len);
  for (int P = 1; P <= std::min<int64_t>(in.gpus, n_layer); ++P) {
    if (in.gpus % P) continue;
    const int dp = in.gpus / P;
    if (global % dp) continue;
    const int64_t per_rank = global / dp;
    for (int V : {1, 2}) {
      if (V > 1 && (P == 1 || n_layer % (P * V))) continue;
      for (int stage = 0; stage <= 3; ++stage) {
        for (const Off& o : offloads) {
          if (o.opt != "none" && stage == 0) continue;
          if (o.param != "none" && stage != 3) continue;
          if (o.opt == "cpu" && host_bytes <= 0) continue;
          if (o.opt == "nvme" && (nvme_bytes <= 0 || host_bytes <= 0)) continue;
          for (int64_t micro : {1, 2, 4, 8, 16, 32}) {
            if (per_rank % micro || per_rank < micro) continue;
            for (bool ckpt : {false, true}) {
              Layout l;
              l.gpus = in.gpus;
              l.P = P;
              l.V = V;
              l.dp = dp;
              l.zero_stage = stage;
              l.offload_optimizer = o.opt;
              l.offload_param = o.param;
              l.delayed_update = o.delayed;
              l.micro_batch = micro;
              l.checkpointing = ckpt;
              l.accumulation = per_rank / micro;
              for (const Layout& v : offload_variants(l)) consider(v);
            }
          }
        }
      }
    }
  }
  // Fastest first; among layouts the model cannot tell apart (the same
  // tokens of the same work), the one needing least device memory.
  std::stable_sort(rows.begin(), rows.end(), [](const PlanRow& a, const PlanRow& b) {
    const double ta = a.time.tokens_per_s, tb = b.time.tokens_per_s;
    if (std::fabs(ta - tb) > 1e-9 * std::max(ta, tb)) return ta > tb;
    return a.memory.total() < b.memory.total();
  });
  if (notes)
    *notes = std::to_string(tried) + " layouts tried, " + std::to_string(refused) + " refused by the config layer, " +
             std::to_string(rows.size()) + " fit";
  return rows;
}

std::vector<ValidationRow> validate(const Figures& f) {
  std::vector<ValidationRow> out;
  for (const nlohmann::json& r : f.runs) {
    const std::string where = f.path + ": runs." + r.value("id", std::string("?"));
    ValidationRow v;
    v.id = r.value("id", "");
    v.source = r.value("source", "");
    v.what = r.value("what", "");
    v.device = r.value("device", "");
    v.miss_reason = r.value("miss_reason", "");
    if (r.contains("superseded_by")) {
      const std::string later = r.value("superseded_by", "");
      for (const nlohmann::json& o : f.runs)
        if (o.value("id", "") == later) v.superseded_by = o.value("what", later);
      if (v.superseded_by.empty()) ZT_USER_ERROR(where, ".superseded_by: no run has the id '", later, "'");
    }
    // The host of a run, where it differs from the preset's (the H200 runs'
    // host was a 16-core share of a node).
    DeviceFigures dev = with_attention(f.device(v.device), r.value("attention", std::string("cudnn")),
                                       where + ".attention");
    if (r.contains("host_adam_gparams")) dev.host_adam_gparams = num(r, "host_adam_gparams", where);
    if (r.contains("host_mem_gbs")) dev.host_mem_gbs = num(r, "host_mem_gbs", where);
    Layout l;
    l.gpus = static_cast<int>(num(r, "gpus", where));
    l.P = r.value("P", 1);
    l.V = r.value("V", 1);
    l.dp = l.gpus / l.P;
    l.zero_stage = r.value("zero_stage", 0);
    l.offload_optimizer = r.value("offload_optimizer", "none");
    l.offload_param = r.value("offload_param", "none");
    l.delayed_update = r.value("delayed_update", false);
    l.param_from_master = r.value("param_from_master", false);
    l.grad_bf16 = r.value("grad_dtype", std::string("fp32")) == "bf16";
    l.micro_batch = r.value("micro_batch", 1);
    l.accumulation = r.value("accumulation", 1);
    l.checkpointing = r.value("checkpointing", false);
    l.cpu_checkpointing = r.value("cpu_checkpointing", false);
    l.group = r.value("breadth_first_group", int64_t{1});
    const Config cfg = parse_layout(r.at("model"), r.value("dtype", "bf16"), l);
    const TimeBreakdown t = step_time(cfg, dev, l, r.value("gpus_per_node", dev.gpus_per_node));
    const double tokens = static_cast<double>(l.micro_batch * l.accumulation * l.dp * cfg.model.seq_len);
    if (r.contains("step_s"))
      v.measured_step = num(r, "step_s", where);
    else
      v.measured_step = tokens / num(r, "tokens_per_s", where);
    v.predicted_step = t.step;
    out.push_back(v);
  }
  return out;
}

std::string format_validation(const std::vector<ValidationRow>& rows) {
  std::ostringstream os;
  os << "| run | source | device | measured step | predicted | error | within 15% |\n"
     << "| --- | --- | --- | ---: | ---: | ---: | --- |\n";
  int within = 0, counted = 0;
  for (const ValidationRow& r : rows) {
    const bool ok = std::fabs(r.error()) <= 0.15;
    const bool current = r.superseded_by.empty();
    within += ok && current;
    counted += current;
    const std::string verdict = !current ? "not counted: superseded by \"" + r.superseded_by + "\""
                                : ok     ? "yes"
                                         : "no: " + r.miss_reason;
    os << "| " << r.what << " | " << r.source << " | " << r.device << " | " << fmt("%.4g s", r.measured_step) << " | "
       << fmt("%.4g s", r.predicted_step) << " | " << fmt("%+.1f%%", 100.0 * r.error()) << " | " << verdict << " |\n";
  }
  os << "\n" << within << " of " << counted << " runs within 15%";
  if (counted < static_cast<int>(rows.size()))
    os << " (" << rows.size() - static_cast<size_t>(counted)
       << " more listed, measured on an earlier ztrain and measured again since)";
  os << ".\n";
  return os.str();
}

}  // namespace zt::plan
