// The DeepSpeed sections: top-level scalars, fp16, bf16, optimizer, scheduler,
// zero_optimization (with offload), aio, activation_checkpointing, pipeline.
// Defaults are DeepSpeed's, taken from the member initialisers in config.hpp.
#include "core/config_reader.hpp"

namespace zt::config_detail {

namespace {

void parse_fp16(const SectionReader& top, Config& cfg) {
  const SectionReader r = top.section("fp16", "fp16");
  const Fp16Config d;
  Fp16Config& f = cfg.fp16;
  f.enabled = r.boolean("enabled", d.enabled);
  f.loss_scale = r.number("loss_scale", d.loss_scale, at_least(0));
  // The initial scale 2^power must be a finite fp32.
  f.initial_scale_power = static_cast<int>(r.integer("initial_scale_power", d.initial_scale_power, 0, 127));
  f.loss_scale_window = static_cast<int>(r.integer("loss_scale_window", d.loss_scale_window, 1, kIntMax));
  f.hysteresis = static_cast<int>(r.integer("hysteresis", d.hysteresis, 1, kIntMax));
  f.consecutive_hysteresis = r.boolean("consecutive_hysteresis", d.consecutive_hysteresis);
  f.min_loss_scale = r.number("min_loss_scale", d.min_loss_scale, above(0));
}

void parse_bf16(const SectionReader& top, Config& cfg) {
  // "bfloat16" is DeepSpeed's older name for the section.
  const std::string name = top.pick_alias({"bf16", "bfloat16"});
  const SectionReader r = top.section(name, "bf16");
  cfg.bf16.enabled = r.boolean("enabled", Bf16Config{}.enabled);
}

void parse_optimizer(const SectionReader& top, Config& cfg) {
  const SectionReader r = top.section("optimizer", "optimizer");
  const OptimizerConfig d;
  OptimizerConfig& o = cfg.optimizer;
  // DeepSpeed lower-cases the type name; "Adam" with its default adam_w_mode
  // true is AdamW (FusedAdam in decoupled weight-decay mode).
  std::string type = d.type;
  if (const json* t = r.find("type")) {
    const std::string given = t->is_string() ? to_lower(t->get<std::string>()) : "";
    if (given != "adamw" && given != "adam")
      r.fail("type", "expected \"AdamW\" or \"Adam\" (ztrain implements AdamW only), found " + show(*t));
    type = given == "adam" ? "Adam" : "AdamW";
  }
  o.type = "AdamW";

  const SectionReader p = r.section("params", "optimizer.params");
  o.lr = p.number("lr", d.lr, above(0));
  if (const json* betas = p.find("betas")) {
    const NumberRange beta_range = in_half_open(0, 1);
    if (!betas->is_array() || betas->size() != 2 || !(*betas)[0].is_number() || !(*betas)[1].is_number())
      p.fail("betas", "expected an array of two numbers in [0, 1), found " + show(*betas));
    for (size_t i = 0; i < 2; ++i) {
      const double b = (*betas)[i].get<double>();
      if (!beta_range.contains(b))
        p.fail("betas", "betas[" + std::to_string(i) + "]: expected " + beta_range.describe() + ", found " +
                            show((*betas)[i]));
    }
    o.beta1 = (*betas)[0].get<double>();
    o.beta2 = (*betas)[1].get<double>();
  }
  o.eps = p.number("eps", d.eps, above(0));
  o.weight_decay = p.number("weight_decay", d.weight_decay, at_least(0));
  // torch_adam chooses DeepSpeed's implementation (PyTorch's or its fused
  // one), not the math; ztrain has one.
  if (p.boolean("torch_adam", false))
    p.warn("torch_adam", "true picks PyTorch's Adam over DeepSpeed's fused one; ztrain has one AdamW, the same "
                         "arithmetic; ignored");
  const bool adam_w_mode = p.boolean("adam_w_mode", true);
  if (!adam_w_mode && type == "Adam")
    p.fail("adam_w_mode", "false (Adam with L2 regularisation) is not supported; ztrain implements AdamW only");
  if (!adam_w_mode) p.warn("adam_w_mode", "false has no effect with type AdamW (as in DeepSpeed)");
  if (!p.boolean("bias_correction", true))
    p.fail("bias_correction", "false is not supported; ztrain's AdamW always applies bias correction");
  if (p.boolean("amsgrad", false)) p.fail("amsgrad", "true is not supported; ztrain implements AdamW without AMSGrad");
}

void parse_scheduler(const SectionReader& top, Config& cfg) {
  const SectionReader r = top.section("scheduler", "scheduler");
  SchedulerConfig& s = cfg.scheduler;
  const SchedulerConfig d;
  s = d;
  if (!r.present()) return;  // constant learning rate

  const std::vector<std::string> types = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"};
  const json* t = r.find("type");
  if (!t) r.fail("type", "missing; expected one of \"WarmupLR\", \"WarmupDecayLR\", \"WarmupCosineLR\"");
  if (t->is_string() && (t->get<std::string>() == "OneCycle" || t->get<std::string>() == "LRRangeTest"))
    r.fail("type", "\"" + t->get<std::string>() +
                       "\" is a DeepSpeed scheduler that ztrain does not implement; expected one of "
                       "\"WarmupLR\", \"WarmupDecayLR\", \"WarmupCosineLR\"");
  s.type = r.choice("type", "", types);

  const SectionReader p = r.section("params", "scheduler.params/" + s.type);
  s.warmup_num_steps = p.integer("warmup_num_steps", d.warmup_num_steps, 0, kInt64Max);
  s.warmup_type = p.choice("warmup_type", d.warmup_type, {"log", "linear"});
  if (s.type == "WarmupLR" || s.type == "WarmupDecayLR") {
    s.warmup_min_lr = p.number("warmup_min_lr", d.warmup_min_lr, at_least(0));
    s.warmup_max_lr = p.number("warmup_max_lr", d.warmup_max_lr, at_least(0));
  }
  if (s.type == "WarmupCosineLR") {
    s.warmup_min_ratio = p.number("warmup_min_ratio", d.warmup_min_ratio, in_closed(0, 1));
    s.cos_min_ratio = p.number("cos_min_ratio", d.cos_min_ratio, in_closed(0, 1));
  }
  if (s.type == "WarmupDecayLR" || s.type == "WarmupCosineLR") {
    if (!p.has("total_num_steps")) p.fail("total_num_steps", "required by scheduler type " + s.type);
    s.total_num_steps = p.integer("total_num_steps", 0, 1, kInt64Max);
    if (s.total_num_steps < s.warmup_num_steps)  // DeepSpeed warns too
      p.warn("total_num_steps", "smaller than warmup_num_steps (" + std::to_string(s.warmup_num_steps) +
                                    "): the learning rate never finishes warming up");
  }
}

OffloadConfig parse_offload(const SectionReader& r, bool for_params, const OffloadConfig& d) {
  OffloadConfig o = d;
  o.device = r.choice("device", d.device, {"none", "cpu", "nvme"});
  o.nvme_path = r.string("nvme_path", d.nvme_path);
  o.pin_memory = r.boolean("pin_memory", d.pin_memory);
  o.buffer_count = static_cast<int>(r.integer("buffer_count", d.buffer_count, 0, kIntMax));
  if (for_params) {
    o.buffer_size = r.integer("buffer_size", d.buffer_size, 0, kInt64Max);
    o.max_in_cpu = r.integer("max_in_cpu", d.max_in_cpu, 0, kInt64Max);
  } else {
    o.fast_init = r.boolean("fast_init", d.fast_init);
    // DeepSpeed's fast_init skips writing the initial states to the NVMe
    // files; ztrain never writes them before the first step, so true asks
    // for what is done anyway (and false, DeepSpeed's default, needs no word).
    if (o.fast_init)
      r.warn("fast_init", "true skips writing the initial optimizer states to NVMe; ztrain never writes them before "
                          "the first step, so there is nothing to skip; ignored");
    o.ratio = r.number("ratio", d.ratio, in_closed(0, 1));
    o.pipeline_read = r.boolean("pipeline_read", d.pipeline_read);
    o.pipeline_write = r.boolean("pipeline_write", d.pipeline_write);
  }
  if (o.device == "nvme" && o.nvme_path.empty()) r.fail("nvme_path", "required when device is \"nvme\"");
  // Keys that act only on NVMe: given with another device, say that they do
  // nothing rather than accept them silently.
  const char* nvme_only = for_params ? "max_in_cpu" : "buffer_count";
  if (o.device != "nvme" && r.has(nvme_only))
    r.warn(nvme_only, std::string("acts on device \"nvme\" only; ignored with device \"") + o.device + "\"");
  if (for_params) return o;
  // The NVMe optimizer ([Note: NVMe optimizer step] in optim/offload_adamw.hpp):
  // each sub-group in flight takes 3 buffers (master, exp_avg, exp_avg_sq);
  // overlapping reads or writes with the compute takes two such sets.
  const bool pipelined = o.pipeline_read || o.pipeline_write;
  if (o.device != "nvme") {
    for (const char* key : {"pipeline_read", "pipeline_write"})
      if (r.boolean(key, false))
        r.fail(key, "true overlaps the NVMe reads and writes of the optimizer states, but device is \"" + o.device +
                        "\", not \"nvme\"; remove it or set device to \"nvme\"");
    return o;
  }
  if (o.buffer_count < 3)
    r.fail("buffer_count", std::to_string(o.buffer_count) +
                               " is too few for device \"nvme\": each optimizer sub-group in flight needs 3 "
                               "buffers (master, exp_avg, exp_avg_sq); give at least 3");
  if (pipelined && o.buffer_count < 6)
    r.fail("buffer_count",
           std::to_string(o.buffer_count) + " buffers hold one sub-group in flight (3 buffers each), but " +
               (o.pipeline_read && o.pipeline_write ? "pipeline_read and pipeline_write are"
                : o.pipeline_read                   ? "pipeline_read is"
                                                    : "pipeline_write is") +
               " true, which needs two (buffer_count >= 6); raise buffer_count or set pipeline_read and "
               "pipeline_write to false");
  if (o.ratio < 1.0)
    r.fail("ratio", "partial offload (ratio " + show(json(o.ratio)) +
                        " < 1) keeps part of the states on the device and the rest in host memory: it needs device "
                        "\"cpu\", found \"nvme\"");
  return o;
}

void parse_zero(const SectionReader& top, Config& cfg) {
  ZeroConfig& z = cfg.zero;
  const ZeroConfig d;
  z = d;
  // DeepSpeed's oldest format: "zero_optimization": true means stage 1.
  if (const json* old = top.find("zero_optimization"); old && old->is_boolean()) {
    z.stage = old->get<bool>() ? 1 : 0;
    top.warn("zero_optimization", "a boolean is DeepSpeed's deprecated form; use {\"stage\": N}");
    return;
  }
  const SectionReader r = top.section("zero_optimization", "zero_optimization");
  z.stage = static_cast<int>(r.integer("stage", d.stage, 0, 3));
  z.overlap_comm = r.boolean("overlap_comm", z.stage == 3);  // DeepSpeed's default depends on the stage
  z.contiguous_gradients = r.boolean("contiguous_gradients", d.contiguous_gradients);
  z.reduce_scatter = r.boolean("reduce_scatter", d.reduce_scatter);
  z.allgather_partitions = r.boolean("allgather_partitions", d.allgather_partitions);
  z.round_robin_gradients = r.boolean("round_robin_gradients", d.round_robin_gradients);
  z.elastic_checkpoint = r.boolean("elastic_checkpoint", d.elastic_checkpoint);
  z.reduce_bucket_size = r.integer("reduce_bucket_size", d.reduce_bucket_size, 1, kInt64Max);
  z.allgather_bucket_size = r.integer("allgather_bucket_size", d.allgather_bucket_size, 1, kInt64Max);
  z.sub_group_size = r.integer("sub_group_size", d.sub_group_size, 0, kInt64Max);
  auto aliased_count = [&](const std::string& documented, const std::string& field, int64_t def) {
    return r.integer(r.pick_alias({documented, field}), def, 0, kInt64Max);
  };
  z.stage3_prefetch_bucket_size =
      aliased_count("stage3_prefetch_bucket_size", "prefetch_bucket_size", d.stage3_prefetch_bucket_size);
  z.stage3_param_persistence_threshold = aliased_count(
      "stage3_param_persistence_threshold", "param_persistence_threshold", d.stage3_param_persistence_threshold);
  z.stage3_max_live_parameters =
      aliased_count("stage3_max_live_parameters", "max_live_parameters", d.stage3_max_live_parameters);
  z.stage3_max_reuse_distance =
      aliased_count("stage3_max_reuse_distance", "max_reuse_distance", d.stage3_max_reuse_distance);
  z.stage3_gather_16bit_weights_on_model_save = r.boolean(
      r.pick_alias({"stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save",
                    "stage3_gather_fp16_weights_on_model_save"}),
      d.stage3_gather_16bit_weights_on_model_save);

  z.offload_optimizer =
      parse_offload(r.section("offload_optimizer", "zero_optimization.offload_optimizer"), false, d.offload_optimizer);
  z.offload_param = parse_offload(r.section("offload_param", "zero_optimization.offload_param"), true, d.offload_param);

  // Deprecated switches from before the offload sections; DeepSpeed maps them
  // to device "cpu".
  auto deprecated_cpu = [&](const std::string& key, const std::string& section, OffloadConfig& target) {
    if (!r.has(key)) return;
    if (r.has(section)) r.fail(key, "deprecated form of '" + section + "'; give only one of them");
    r.warn(key, "deprecated; use " + section + ".device");
    if (r.boolean(key, false)) target.device = "cpu";
  };
  deprecated_cpu("cpu_offload", "offload_optimizer", z.offload_optimizer);
  deprecated_cpu("cpu_offload_param", "offload_param", z.offload_param);
  if (r.has("cpu_offload_use_pin_memory")) {
    r.warn("cpu_offload_use_pin_memory", "deprecated; use offload_optimizer.pin_memory / offload_param.pin_memory");
    const bool pin = r.boolean("cpu_offload_use_pin_memory", false);
    if (!r.has("offload_optimizer")) z.offload_optimizer.pin_memory = pin;
    if (!r.has("offload_param")) z.offload_param.pin_memory = pin;
  }

  if (z.offload_optimizer.device == "nvme" && z.sub_group_size < 1)
    r.fail("sub_group_size", "0 elements: device \"nvme\" of offload_optimizer reads, updates and writes the "
                             "optimizer states in sub-groups of sub_group_size elements; give at least 1 (DeepSpeed's "
                             "default is 1e9)");
  if (z.offload_optimizer.ratio < 1.0 && z.stage != 3)  // as DeepSpeed asserts
    r.fail("offload_optimizer", "ratio < 1 (partial offload) needs stage 3, found stage " + std::to_string(z.stage));
  // Offload with a stage that has nothing of that kind to offload: DeepSpeed
  // accepts offload_param in stages 1-2 and ignores it, which reads as if the
  // parameters were offloaded; ztrain refuses both, naming the key given.
  const std::string stage = std::to_string(z.stage);
  auto given = [&](const std::string& deprecated, const std::string& section) {
    return r.has(deprecated) ? deprecated : section + ".device";
  };
  if (z.offload_param.device != "none" && z.stage != 3)
    r.fail(given("cpu_offload_param", "offload_param"),
           "\"" + z.offload_param.device + "\" needs ZeRO stage 3 (only stage 3 partitions the parameters), found "
           "stage " + stage + "; set zero_optimization.stage to 3 or offload_param.device to \"none\"");
  if (z.offload_optimizer.device != "none" && z.stage == 0)
    r.fail(given("cpu_offload", "offload_optimizer"),
           "\"" + z.offload_optimizer.device + "\" needs ZeRO stage 1, 2 or 3 (the offloaded optimizer works on "
           "the rank's partition), found stage 0; set zero_optimization.stage or offload_optimizer.device to "
           "\"none\"");
}

void parse_aio(const SectionReader& top, Config& cfg) {
  const SectionReader r = top.section("aio", "aio");
  const AioConfig d;
  AioConfig& a = cfg.aio;
  a.block_size = r.integer("block_size", d.block_size, 1, kInt64Max);
  a.queue_depth = static_cast<int>(r.integer("queue_depth", d.queue_depth, 1, kIntMax));
  a.thread_count =
      static_cast<int>(r.integer(r.pick_alias({"thread_count", "intra_op_parallelism"}), d.thread_count, 1, kIntMax));
  a.single_submit = r.boolean("single_submit", d.single_submit);
  a.overlap_events = r.boolean("overlap_events", d.overlap_events);
}

void parse_activation_checkpointing(const SectionReader& top, Config& cfg) {
  const SectionReader r = top.section("activation_checkpointing", "activation_checkpointing");
  ActivationCheckpointingConfig& a = cfg.activation_checkpointing;
  // These configure DeepSpeed's checkpointing API for model code; ztrain keeps
  // them for the record and warns, so nobody believes they took effect.
  auto flag = [&](const std::string& key, bool& field) {
    field = r.boolean(key, false);
    if (field)
      r.warn(key, "true is a DeepSpeed option that ztrain does not implement; ignored "
                  "(ztrain's recompute switch is model.activation_checkpointing)");
  };
  flag("partition_activations", a.partition_activations);
  // [Note: activation offload] (modules/activation_offload.hpp); checked
  // against model.activation_checkpointing and the pipeline in config.cpp.
  a.cpu_checkpointing = r.boolean("cpu_checkpointing", false);
  flag("contiguous_memory_optimization", a.contiguous_memory_optimization);
  flag("synchronize_checkpoint_boundary", a.synchronize_checkpoint_boundary);
  flag("profile", a.profile);
  a.number_checkpoints = static_cast<int>(r.integer("number_checkpoints", 0, 1, kIntMax));
  if (a.number_checkpoints > 0)
    r.warn("number_checkpoints", "DeepSpeed option that ztrain does not implement; ignored "
                                 "(ztrain checkpoints every block when model.activation_checkpointing is true)");
}

void parse_pipeline(const SectionReader& top, Config& cfg) {
  const SectionReader r = top.section("pipeline", "pipeline");
  const PipelineConfig d;
  PipelineConfig& p = cfg.pipeline;
  p.parallel_size = static_cast<int>(r.integer("parallel_size", d.parallel_size, 1, kIntMax));
  p.pipe_schedule_name = r.choice("pipe_schedule_name", d.pipe_schedule_name, {"1f1b", "interleaved", "gpipe"});
  p.num_chunks = static_cast<int>(r.integer("num_chunks", d.num_chunks, 1, kIntMax));
  p.partition = r.choice("partition", d.partition, {"uniform", "parameters"});
  p.rank_order = r.choice("rank_order", d.rank_order, {"dp-pp", "pp-dp"});
  // Several chunks per rank only make sense interleaved, and interleaving one
  // chunk is plain 1F1B: reject both rather than guess which was meant.
  if (p.num_chunks > 1 && p.pipe_schedule_name != "interleaved")
    r.fail("num_chunks", std::to_string(p.num_chunks) + " chunks per rank need pipe_schedule_name \"interleaved\"");
  if (p.pipe_schedule_name == "interleaved" && p.num_chunks < 2)
    r.fail("num_chunks", "pipe_schedule_name \"interleaved\" needs num_chunks >= 2, found " +
                             std::to_string(p.num_chunks));
}

}  // namespace

void parse_deepspeed_sections(const SectionReader& top, Config& cfg) {
  cfg.gradient_clipping = top.number("gradient_clipping", 0.0, at_least(0));
  cfg.steps_per_print = top.integer("steps_per_print", 10, 1, kInt64Max);
  cfg.wall_clock_breakdown = top.boolean("wall_clock_breakdown", false);
  parse_fp16(top, cfg);
  parse_bf16(top, cfg);
  parse_optimizer(top, cfg);
  parse_scheduler(top, cfg);
  parse_zero(top, cfg);
  parse_aio(top, cfg);
  parse_activation_checkpointing(top, cfg);
  parse_pipeline(top, cfg);
}

}  // namespace zt::config_detail
