// Configs that must parse: DeepSpeed's defaults, presets, overrides, warnings
// for DeepSpeed keys ztrain does not implement, a realistic DeepSpeed config,
// and the resolved_json round trip.
#include <tuple>

#include "config_test_util.hpp"

namespace zt::test {
namespace {

// Field-by-field equality, so that the round trip catches a field that
// resolved_json forgets to write.
auto fields(const ModelConfig& m) {
  return std::tie(m.arch, m.preset, m.n_layer, m.n_head, m.d_model, m.seq_len, m.vocab_size,
                  m.activation_checkpointing, m.recompute_layers);
}
auto fields(const DataConfig& d) { return std::tie(d.train, d.val, d.embedded, d.packing); }
auto fields(const TrainConfig& t) {
  return std::tie(t.steps, t.seed, t.eval_interval, t.eval_steps, t.device_memory_cap_gib, t.nonfinite_tolerance,
                  t.breadth_first_group, t.classifier_chunk_mib);
}
auto fields(const OffloadOptions& o) {
  return std::tie(o.delayed_update, o.delayed_update_warmup, o.aio_backend, o.grad_accumulation, o.param_from_master);
}
auto fields(const OptimizerConfig& o) { return std::tie(o.type, o.lr, o.beta1, o.beta2, o.eps, o.weight_decay); }
auto fields(const SchedulerConfig& s) {
  return std::tie(s.type, s.warmup_min_lr, s.warmup_max_lr, s.warmup_num_steps, s.warmup_type, s.total_num_steps,
                  s.warmup_min_ratio, s.cos_min_ratio);
}
auto fields(const Fp16Config& f) {
  return std::tie(f.enabled, f.loss_scale, f.initial_scale_power, f.loss_scale_window, f.hysteresis,
                  f.consecutive_hysteresis, f.min_loss_scale);
}
auto fields(const OffloadConfig& o) {
  return std::tie(o.device, o.nvme_path, o.pin_memory, o.buffer_count, o.buffer_size, o.max_in_cpu, o.ratio,
                  o.fast_init, o.pipeline_read, o.pipeline_write);
}
auto fields(const ZeroConfig& z) {
  return std::tie(z.stage, z.overlap_comm, z.contiguous_gradients, z.reduce_scatter, z.allgather_partitions,
                  z.round_robin_gradients, z.elastic_checkpoint, z.reduce_bucket_size, z.allgather_bucket_size,
                  z.sub_group_size, z.stage3_prefetch_bucket_size, z.stage3_param_persistence_threshold,
                  z.stage3_max_live_parameters, z.stage3_max_reuse_distance,
                  z.stage3_gather_16bit_weights_on_model_save);
}
auto fields(const AioConfig& a) {
  return std::tie(a.block_size, a.queue_depth, a.thread_count, a.single_submit, a.overlap_events);
}
auto fields(const ActivationCheckpointingConfig& a) {
  return std::tie(a.partition_activations, a.cpu_checkpointing, a.contiguous_memory_optimization,
                  a.synchronize_checkpoint_boundary, a.profile, a.number_checkpoints);
}
auto fields(const PipelineConfig& p) { return std::tie(p.parallel_size, p.pipe_schedule_name, p.num_chunks, p.partition, p.rank_order); }
auto fields(const CheckpointConfig& c) { return std::tie(c.dir, c.interval, c.keep_last, c.async, c.tag_validation); }
auto fields(const BatchConfig& b) { return std::tie(b.train_batch_size, b.micro_batch, b.grad_accum); }

void expect_same_config(const Config& a, const Config& b) {
  EXPECT_TRUE(fields(a.model) == fields(b.model));
  EXPECT_TRUE(fields(a.data) == fields(b.data));
  EXPECT_TRUE(fields(a.train) == fields(b.train));
  EXPECT_EQ(a.log.dir, b.log.dir);
  EXPECT_EQ(std::tie(a.prometheus.enabled, a.prometheus.port, a.prometheus.textfile_dir),
            std::tie(b.prometheus.enabled, b.prometheus.port, b.prometheus.textfile_dir));
  EXPECT_TRUE(fields(a.optimizer) == fields(b.optimizer));
  EXPECT_TRUE(fields(a.scheduler) == fields(b.scheduler));
  EXPECT_TRUE(fields(a.fp16) == fields(b.fp16));
  EXPECT_EQ(a.bf16.enabled, b.bf16.enabled);
  EXPECT_TRUE(fields(a.zero) == fields(b.zero));
  EXPECT_TRUE(fields(a.zero.offload_optimizer) == fields(b.zero.offload_optimizer));
  EXPECT_TRUE(fields(a.zero.offload_param) == fields(b.zero.offload_param));
  EXPECT_TRUE(fields(a.aio) == fields(b.aio));
  EXPECT_TRUE(fields(a.offload) == fields(b.offload));
  EXPECT_TRUE(fields(a.activation_checkpointing) == fields(b.activation_checkpointing));
  EXPECT_TRUE(fields(a.pipeline) == fields(b.pipeline));
  EXPECT_TRUE(fields(a.checkpoint) == fields(b.checkpoint));
  EXPECT_TRUE(fields(a.batch) == fields(b.batch));
  EXPECT_EQ(a.gradient_clipping, b.gradient_clipping);
  EXPECT_EQ(a.steps_per_print, b.steps_per_print);
  EXPECT_EQ(a.wall_clock_breakdown, b.wall_clock_breakdown);
}

// A DeepSpeed config as users write them for ZeRO stage 0 (HF-style "auto"
// batch values, float bucket sizes, disabled monitors, DeepSpeed-only keys).
const char* const kDeepSpeedConfig = R"({
  "train_batch_size": "auto",
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 4,
  "gradient_clipping": 1.0,
  "steps_per_print": 100,
  "wall_clock_breakdown": false,
  "prescale_gradients": false,
  "zero_allow_untested_optimizer": true,
  "communication_data_type": null,
  "bf16": {"enabled": true},
  "fp16": {"enabled": false, "loss_scale": 0, "loss_scale_window": 500, "initial_scale_power": 12,
           "hysteresis": 2, "min_loss_scale": 1},
  "optimizer": {"type": "AdamW",
                "params": {"lr": 6e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
  "scheduler": {"type": "WarmupDecayLR",
                "params": {"warmup_min_lr": 0, "warmup_max_lr": 6e-4, "warmup_num_steps": 200,
                           "total_num_steps": 5000, "warmup_type": "linear"}},
  "zero_optimization": {
    "stage": 0,
    "allgather_partitions": true,
    "allgather_bucket_size": 2e8,
    "overlap_comm": true,
    "reduce_scatter": true,
    "reduce_bucket_size": 2e8,
    "contiguous_gradients": true,
    "round_robin_gradients": false,
    "load_from_fp32_weights": true,
    "offload_optimizer": {"device": "none", "pin_memory": true},
    "offload_param": {"device": "none", "nvme_path": null},
    "sub_group_size": 1e9,
    "stage3_prefetch_bucket_size": 5e7,
    "stage3_param_persistence_threshold": 1e6,
    "stage3_max_live_parameters": 1e9,
    "stage3_max_reuse_distance": 1e9,
    "stage3_gather_16bit_weights_on_model_save": true
  },
  "aio": {"block_size": 1048576, "queue_depth": 8, "thread_count": 1, "single_submit": false,
          "overlap_events": true},
  "activation_checkpointing": {"partition_activations": false, "cpu_checkpointing": false,
                               "contiguous_memory_optimization": false, "number_checkpoints": null,
                               "synchronize_checkpoint_boundary": false, "profile": false},
  "tensorboard": {"enabled": false, "output_path": "tb/", "job_name": "x"},
  "wandb": {"enabled": false},
  "flops_profiler": {"enabled": false, "profile_step": 1}
})";

TEST(ConfigParse, EmptyConfigGetsDeepSpeedDefaults) {
  const Config cfg = parse("{}");
  EXPECT_EQ(cfg.source, "config.json");
  EXPECT_EQ(cfg.gradient_clipping, 0.0);
  EXPECT_EQ(cfg.steps_per_print, 10);
  EXPECT_FALSE(cfg.wall_clock_breakdown);
  EXPECT_FALSE(cfg.fp16.enabled);
  EXPECT_EQ(cfg.fp16.loss_scale, 0.0);
  EXPECT_EQ(cfg.fp16.initial_scale_power, 16);
  EXPECT_EQ(cfg.fp16.loss_scale_window, 1000);
  EXPECT_EQ(cfg.fp16.hysteresis, 2);
  EXPECT_FALSE(cfg.fp16.consecutive_hysteresis);
  EXPECT_EQ(cfg.fp16.min_loss_scale, 1.0);
  EXPECT_FALSE(cfg.bf16.enabled);
  EXPECT_EQ(cfg.optimizer.type, "AdamW");
  EXPECT_EQ(cfg.optimizer.lr, 1e-3);
  EXPECT_EQ(cfg.optimizer.beta1, 0.9);
  EXPECT_EQ(cfg.optimizer.beta2, 0.999);
  EXPECT_EQ(cfg.optimizer.eps, 1e-8);
  EXPECT_EQ(cfg.optimizer.weight_decay, 0.0);
  EXPECT_EQ(cfg.scheduler.type, "");
  const ZeroConfig& z = cfg.zero;
  EXPECT_EQ(z.stage, 0);
  EXPECT_FALSE(z.overlap_comm);
  EXPECT_TRUE(z.contiguous_gradients);
  EXPECT_TRUE(z.reduce_scatter);
  EXPECT_TRUE(z.allgather_partitions);
  EXPECT_FALSE(z.round_robin_gradients);
  EXPECT_FALSE(z.elastic_checkpoint);
  EXPECT_EQ(z.reduce_bucket_size, 500000000);
  EXPECT_EQ(z.allgather_bucket_size, 500000000);
  EXPECT_EQ(z.sub_group_size, 1000000000);
  EXPECT_EQ(z.stage3_prefetch_bucket_size, 50000000);
  EXPECT_EQ(z.stage3_param_persistence_threshold, 100000);
  EXPECT_EQ(z.stage3_max_live_parameters, 1000000000);
  EXPECT_EQ(z.stage3_max_reuse_distance, 1000000000);
  EXPECT_FALSE(z.stage3_gather_16bit_weights_on_model_save);
  EXPECT_EQ(z.offload_optimizer.device, "none");
  EXPECT_EQ(z.offload_optimizer.buffer_count, 4);
  EXPECT_EQ(z.offload_optimizer.ratio, 1.0);
  EXPECT_FALSE(z.offload_optimizer.fast_init);
  EXPECT_EQ(z.offload_param.device, "none");
  EXPECT_EQ(z.offload_param.buffer_count, 5);
  EXPECT_EQ(z.offload_param.buffer_size, 100000000);
  EXPECT_EQ(z.offload_param.max_in_cpu, 1000000000);
  EXPECT_FALSE(z.offload_param.pin_memory);
  EXPECT_EQ(cfg.aio.block_size, 1048576);
  EXPECT_EQ(cfg.aio.queue_depth, 8);
  EXPECT_EQ(cfg.aio.thread_count, 1);
  EXPECT_FALSE(cfg.aio.single_submit);
  EXPECT_TRUE(cfg.aio.overlap_events);
  EXPECT_FALSE(cfg.activation_checkpointing.partition_activations);
  EXPECT_EQ(cfg.activation_checkpointing.number_checkpoints, 0);
  EXPECT_EQ(cfg.pipeline.parallel_size, 1);
  EXPECT_EQ(cfg.pipeline.pipe_schedule_name, "1f1b");
  EXPECT_EQ(cfg.pipeline.num_chunks, 1);
  EXPECT_EQ(cfg.pipeline.partition, "parameters");
  EXPECT_EQ(cfg.pipeline.rank_order, "dp-pp");
  // ztrain's own sections.
  EXPECT_EQ(cfg.model.preset, "tiny");
  EXPECT_EQ(cfg.model.n_layer, 2);
  EXPECT_EQ(cfg.model.vocab_size, 256);
  EXPECT_FALSE(cfg.model.activation_checkpointing);
  EXPECT_TRUE(cfg.data.embedded);
  EXPECT_EQ(cfg.train.steps, 200);
  EXPECT_EQ(cfg.train.seed, 1234u);
  EXPECT_EQ(cfg.train.eval_interval, 50);
  EXPECT_EQ(cfg.train.eval_steps, 10);
  EXPECT_EQ(cfg.train.device_memory_cap_gib, 0.0);  // no cap
  EXPECT_FALSE(cfg.offload.delayed_update);
  EXPECT_EQ(cfg.offload.delayed_update_warmup, 10);
  EXPECT_EQ(cfg.offload.aio_backend, "auto");
  EXPECT_EQ(cfg.log.dir, "runs/latest");
  EXPECT_EQ(cfg.checkpoint.dir, "");
  EXPECT_EQ(cfg.checkpoint.interval, 0);
  EXPECT_EQ(cfg.checkpoint.keep_last, 2);
  EXPECT_TRUE(cfg.checkpoint.tag_validation);
  EXPECT_TRUE(cfg.batch.train_auto && cfg.batch.micro_auto && cfg.batch.accum_auto);
  EXPECT_TRUE(cfg.warnings.empty());
}

TEST(ConfigParse, ModelPresets) {
  struct Expected {
    const char* preset;
    int n_layer, n_head, d_model, seq_len, vocab_size;
  };
  for (const Expected& e : {Expected{"tiny", 2, 4, 64, 64, 256}, Expected{"gpt2-124m", 12, 12, 768, 1024, 50257},
                            Expected{"gpt2-350m", 24, 16, 1024, 1024, 50257},
                            Expected{"gpt2-1.3b", 24, 32, 2048, 1024, 50257}}) {
    const Config cfg = parse(R"({"model": {"preset": ")" + std::string(e.preset) + R"("}})");
    EXPECT_EQ(cfg.model.preset, e.preset);
    EXPECT_EQ(cfg.model.arch, "gpt2") << e.preset;
    EXPECT_EQ(cfg.model.n_layer, e.n_layer) << e.preset;
    EXPECT_EQ(cfg.model.n_head, e.n_head) << e.preset;
    EXPECT_EQ(cfg.model.d_model, e.d_model) << e.preset;
    EXPECT_EQ(cfg.model.seq_len, e.seq_len) << e.preset;
    EXPECT_EQ(cfg.model.vocab_size, e.vocab_size) << e.preset;
  }
  // Explicit keys override the preset's values.
  Config cfg = parse(R"({"model": {"preset": "gpt2-124m", "n_layer": 6, "seq_len": 256}})");
  EXPECT_EQ(cfg.model.preset, "gpt2-124m");
  EXPECT_EQ(cfg.model.n_layer, 6);
  EXPECT_EQ(cfg.model.seq_len, 256);
  EXPECT_EQ(cfg.model.d_model, 768);
  // Sizes without a preset start from tiny.
  cfg = parse(R"({"model": {"n_layer": 3, "activation_checkpointing": true}})");
  EXPECT_EQ(cfg.model.preset, "");
  EXPECT_EQ(cfg.model.n_layer, 3);
  EXPECT_EQ(cfg.model.d_model, 64);
  EXPECT_TRUE(cfg.model.activation_checkpointing);
  EXPECT_EQ(cfg.model.recompute_layers, -1);
  cfg = parse(R"({"model": {"n_layer": 3, "activation_checkpointing": true, "recompute_layers": 2}})");
  EXPECT_EQ(cfg.model.recompute_layers, 2);
  EXPECT_EQ(parse(R"({"model": {}})").model.preset, "tiny");
}

TEST(ConfigParse, ModelArchitecture) {
  // Without the key, the preset's architecture (every preset is a GPT-2),
  // or tiny's when there is no preset.
  EXPECT_EQ(parse("{}").model.arch, "gpt2");
  EXPECT_EQ(parse(R"({"model": {"preset": "gpt2-350m"}})").model.arch, "gpt2");
  EXPECT_EQ(parse(R"({"model": {"n_layer": 3}})").model.arch, "gpt2");
  const Config cfg = parse(R"({"model": {"arch": "GPT2", "preset": "gpt2-124m"}})");
  EXPECT_EQ(cfg.model.arch, "gpt2");
  EXPECT_EQ(cfg.model.n_layer, 12);
  EXPECT_EQ(parse("{}", {"model.arch=gpt2"}).model.arch, "gpt2");
  // It goes into checkpoint manifests.
  EXPECT_EQ(resolved_json(cfg)["model"]["arch"], "gpt2");
}

TEST(ConfigParse, Schedulers) {
  Config cfg = parse(R"({"scheduler": {"type": "WarmupLR"}})");
  EXPECT_EQ(cfg.scheduler.type, "WarmupLR");
  EXPECT_EQ(cfg.scheduler.warmup_min_lr, 0.0);
  EXPECT_EQ(cfg.scheduler.warmup_max_lr, 0.001);
  EXPECT_EQ(cfg.scheduler.warmup_num_steps, 1000);
  EXPECT_EQ(cfg.scheduler.warmup_type, "log");
  cfg = parse(R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 2000}}})");
  EXPECT_EQ(cfg.scheduler.total_num_steps, 2000);
  EXPECT_EQ(cfg.scheduler.warmup_min_ratio, 0.0);
  EXPECT_EQ(cfg.scheduler.cos_min_ratio, 0.0001);
  EXPECT_EQ(cfg.scheduler.warmup_num_steps, 1000);
  cfg = parse(R"({"scheduler": {"type": "warmupdecaylr", "params": {"total_num_steps": 10, "warmup_num_steps": 20}}})");
  EXPECT_EQ(cfg.scheduler.type, "WarmupDecayLR");
  ASSERT_EQ(cfg.warnings.size(), 1u);  // total < warmup, as DeepSpeed warns
  EXPECT_CONTAINS(cfg.warnings[0], "scheduler.params.total_num_steps: smaller than warmup_num_steps");
}

TEST(ConfigParse, OverridesOfEachJsonType) {
  TempFile tokens("override_tokens.bin");
  const Config cfg = parse(R"({"zero_optimization": {"stage": 0}, "train": {"steps": 5}})",
                           {"train.steps=50", "optimizer.params.lr=3e-4", "optimizer.params.betas=[0.9,0.95]",
                            "wall_clock_breakdown=true", "data.train=" + tokens.path(),
                            "log.dir=\"runs/quoted\"", "model.preset=gpt2-124m", "zero_optimization.stage=0"});
  EXPECT_EQ(cfg.train.steps, 50);
  EXPECT_EQ(cfg.optimizer.lr, 3e-4);
  EXPECT_EQ(cfg.optimizer.beta2, 0.95);
  EXPECT_TRUE(cfg.wall_clock_breakdown);
  EXPECT_FALSE(cfg.data.embedded);
  EXPECT_FALSE(cfg.data.packing);  // off unless asked for
  EXPECT_EQ(cfg.data.train, tokens.path());
  EXPECT_EQ(cfg.log.dir, "runs/quoted");
  EXPECT_EQ(cfg.model.preset, "gpt2-124m");
  // raw holds the config after overrides, before defaults.
  EXPECT_EQ(cfg.raw["train"]["steps"], 50);
  EXPECT_FALSE(cfg.raw.contains("gradient_clipping"));

  nlohmann::json root = {{"gradient_clipping", 1.0}};
  apply_override(root, "zero_optimization.offload_optimizer.device=cpu");  // creates the objects on the way
  EXPECT_EQ(root["zero_optimization"]["offload_optimizer"]["device"], "cpu");
  apply_override(root, "zero_optimization.stage=2");
  EXPECT_TRUE(root["zero_optimization"]["stage"].is_number_integer());
  apply_override(root, "gradient_clipping=null");  // back to the default
  EXPECT_FALSE(root.contains("gradient_clipping"));
  apply_override(root, "fp16={\"enabled\": false}");
  EXPECT_TRUE(root["fp16"].is_object());
  apply_override(root, "name = not json at all");
  EXPECT_EQ(root["name"], " not json at all");
}

TEST(ConfigParse, WarningsForDeepSpeedKeysNotImplemented) {
  const Config cfg = parse(R"({
    "prescale_gradients": true,
    "tensorboard": {"enabled": true, "output_path": "tb/"},
    "wandb": {"enabled": false},
    "gradient_predivide_factor": 1.0,
    "fp16": {"auto_cast": true},
    "activation_checkpointing": {"partition_activations": true},
    "checkpoint": {"use_node_local_storage": true, "tag_validation": "Warn"},
    "zero_optimization": {"load_from_fp32_weights": true, "zero_quantized_weights": true},
    "pipeline": {"stages": 4}
  })");
  const std::vector<std::string> expected = {
      "config.json: prescale_gradients: DeepSpeed option that ztrain does not implement; ignored",
      "config.json: tensorboard: DeepSpeed option that ztrain does not implement; ignored",
      "config.json: fp16.auto_cast: DeepSpeed option that ztrain does not implement",
      "config.json: activation_checkpointing.partition_activations: true is a DeepSpeed option that ztrain does not "
      "implement",
      "config.json: checkpoint.use_node_local_storage: DeepSpeed option that ztrain does not implement",
      "config.json: zero_optimization.zero_quantized_weights: DeepSpeed option that ztrain does not implement",
      "config.json: pipeline.stages: DeepSpeed option that ztrain does not implement; ignored (use "
      "pipeline.parallel_size)",
  };
  std::string all;
  for (const std::string& w : cfg.warnings) all += w + "\n";
  for (const std::string& e : expected) EXPECT_CONTAINS(all, e);
  // Disabled features and DeepSpeed's default values need no warning.
  EXPECT_EQ(cfg.warnings.size(), expected.size()) << all;
  EXPECT_TRUE(cfg.checkpoint.tag_validation);
}

// Offload keys that act only on NVMe are named in a warning when given with
// another device, not accepted silently.
TEST(ConfigParse, NvmeOnlyOffloadKeysWarnWithTheCpu) {
  const Config cfg = parse(R"({"zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "cpu", "buffer_count": 8},
      "offload_param": {"device": "cpu", "max_in_cpu": 1000}}})");
  std::string all;
  for (const std::string& w : cfg.warnings) all += w + "\n";
  EXPECT_CONTAINS(all, "zero_optimization.offload_optimizer.buffer_count: acts on device \"nvme\" only; ignored with "
                       "device \"cpu\"");
  EXPECT_CONTAINS(all, "zero_optimization.offload_param.max_in_cpu: acts on device \"nvme\" only");
  EXPECT_EQ(cfg.warnings.size(), 2u) << all;
}

// fast_init: true asks to skip a write ztrain never does: named in a
// warning, not accepted silently; false (DeepSpeed's default) needs none.
TEST(ConfigParse, FastInitTrueIsNamedInAWarning) {
  const Config on = parse(R"({"zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme", "fast_init": true}}})");
  std::string all;
  for (const std::string& w : on.warnings) all += w + "\n";
  EXPECT_CONTAINS(all, "zero_optimization.offload_optimizer.fast_init: true skips writing the initial optimizer "
                       "states to NVMe; ztrain never writes them");
  EXPECT_EQ(on.warnings.size(), 1u) << all;
  const Config off = parse(R"({"zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme", "fast_init": false}}})");
  EXPECT_TRUE(off.warnings.empty());
}

// [Note: inert keys]: a key given a value where it does nothing is named in
// one warning saying what it would need; the same key where it acts, or in
// a section turned off by name, gives none.
TEST(ConfigParse, InertKeysAreNamedInWarnings) {
  struct Case {
    const char* config;
    const char* warning;  // nullptr: no warning
  };
  const Case cases[] = {
      {R"({"zero_optimization": {"stage": 2, "contiguous_gradients": false}})",
       "zero_optimization.contiguous_gradients: false is a DeepSpeed choice that ztrain does not offer"},
      {R"({"zero_optimization": {"stage": 2, "reduce_scatter": false}})",
       "zero_optimization.reduce_scatter: false is a DeepSpeed choice"},
      {R"({"zero_optimization": {"stage": 2, "allgather_partitions": false}})",
       "zero_optimization.allgather_partitions: false is a DeepSpeed choice"},
      {R"({"zero_optimization": {"stage": 2, "round_robin_gradients": true}})",
       "zero_optimization.round_robin_gradients: true is a DeepSpeed choice"},
      {R"({"zero_optimization": {"stage": 2, "elastic_checkpoint": true}})",
       "zero_optimization.elastic_checkpoint: true is a DeepSpeed choice"},
      {R"({"zero_optimization": {"stage": 1, "overlap_comm": true}})",
       "zero_optimization.overlap_comm: true overlaps the gradient reductions with the backward at stages 2 and 3"},
      {R"({"zero_optimization": {"stage": 2, "overlap_comm": true}})", nullptr},
      {R"({"zero_optimization": {"stage": 3, "sub_group_size": 1000, "offload_optimizer": {"device": "cpu"}}})",
       "zero_optimization.sub_group_size: sizes the sub-groups in which the NVMe optimizer"},
      {R"({"zero_optimization": {"stage": 3, "sub_group_size": 1000,
                                 "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme"}}})", nullptr},
      {R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "nvme_path": "/nvme"}}})",
       "zero_optimization.offload_optimizer.nvme_path: is the directory of the NVMe optimizer's files; device is "
       "\"cpu\""},
      {R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                 "offload_param": {"device": "cpu", "nvme_path": "/nvme"}}})",
       "zero_optimization.offload_param.nvme_path: is the directory of the parameters' swap file"},
      {R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"pin_memory": true}}})",
       "zero_optimization.offload_optimizer.pin_memory: true page-locks the offloaded optimizer's host memory; no "
       "device is given"},
      {R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "none", "pin_memory": true}}})", nullptr},
      {R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"ratio": 0.5}}})",
       "zero_optimization.offload_optimizer.ratio: is the fraction of the optimizer offloaded"},
      {R"({"zero_optimization": {"stage": 3, "offload_param": {"buffer_count": 2}}})",
       "zero_optimization.offload_param.buffer_count: counts the offloaded parameters' upload or read buffers"},
      {R"({"zero_optimization": {"stage": 3, "offload_param": {"buffer_size": 1000}}})",
       "zero_optimization.offload_param.buffer_size: sizes the offloaded parameters' buffers"},
      {R"({"zero_optimization": {"stage": 3, "offload_param": {"pin_memory": true}}})",
       "zero_optimization.offload_param.pin_memory: true page-locks the offloaded parameters' host memory"},
      {R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                 "offload_param": {"device": "cpu", "pin_memory": true}},
           "offload": {"param_from_master": true}})",
       "zero_optimization.offload_param.pin_memory: true page-locks the host copy of the 16-bit parameters, but "
       "offload.param_from_master"},
      {R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                 "offload_param": {"device": "cpu", "pin_memory": true}}})", nullptr},
      {R"({"fp16": {"loss_scale": 128}})",
       "fp16.loss_scale: sets fp16's loss scaling; fp16.enabled is not given, so fp16 is off"},
      {R"({"fp16": {"enabled": false, "loss_scale": 128, "hysteresis": 5}})", nullptr},
      {R"({"fp16": {"enabled": true, "loss_scale": 128, "loss_scale_window": 10}})",
       "fp16.loss_scale_window: tunes the dynamic loss scale; fp16.loss_scale 128"},
      {R"({"fp16": {"enabled": true, "loss_scale": 0, "loss_scale_window": 10}})", nullptr},
      {R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.5}},
           "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 0.001}}})",
       "optimizer.params.lr: 0.5 is not used: scheduler WarmupLR sets the learning rate"},
      {R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
           "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 0.001}}})", nullptr},
      {R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.5}},
           "scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 10, "total_num_steps": 100}}})",
       nullptr},
      {R"({"optimizer": {"type": "AdamW", "params": {"torch_adam": true}}})",
       "optimizer.params.torch_adam: true picks PyTorch's Adam"},
      {R"({"pipeline": {"pipe_schedule_name": "gpipe"}})",
       "pipeline.pipe_schedule_name: lays out a pipeline of several stages; pipeline.parallel_size is 1"},
      {R"({"pipeline": {"rank_order": "pp-dp"}})", "pipeline.rank_order: lays out a pipeline"},
      {R"({"pipeline": {"partition": "uniform"}})", "pipeline.partition: lays out a pipeline"},
      {R"({"pipeline": {"parallel_size": 2, "partition": "uniform"}})", nullptr},
      {R"({"checkpoint": {"keep_last": 5}})",
       "checkpoint.keep_last: acts on the checkpoints saved under checkpoint.dir, which is not set"},
      {R"({"checkpoint": {"async": true}})", "checkpoint.async: acts on the checkpoints"},
      {R"({"checkpoint": {"save_at_end": false}})", "checkpoint.save_at_end: acts on the checkpoints"},
      {R"({"checkpoint": {"tag_validation": false}})", "checkpoint.tag_validation: acts on the checkpoints"},
      {R"({"checkpoint": {"dir": "ck", "interval": 10, "keep_last": 5, "async": true}})", nullptr},
      {R"({"csv_monitor": {"output_path": "/tmp/q"}})",
       "csv_monitor.output_path: csv_monitor.enabled is not given, so no CSV is written"},
      {R"({"csv_monitor": {"job_name": "foo"}})", "csv_monitor.job_name: csv_monitor.enabled is not given"},
      {R"({"csv_monitor": {"enabled": false, "output_path": "/tmp/q"}})", nullptr},
      {R"({"prometheus": {"port": 1234}})", "prometheus.port: prometheus.enabled is not given, so nothing is served"},
      {R"({"prometheus": {"textfile_dir": "/tmp/q"}})",
       "prometheus.textfile_dir: prometheus.enabled is not given, so no textfile is written"},
      {R"({"prometheus": {"enabled": false, "port": 1234}})", nullptr},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.config);
    const Config cfg = parse(c.config);
    std::string all;
    for (const std::string& w : cfg.warnings) all += w + "\n";
    if (c.warning == nullptr) {
      EXPECT_TRUE(cfg.warnings.empty()) << all;
    } else {
      EXPECT_EQ(cfg.warnings.size(), 1u) << all;
      EXPECT_CONTAINS(all, c.warning);
    }
  }
}

TEST(ConfigParse, RealisticDeepSpeedConfig) {
  Config cfg = parse(kDeepSpeedConfig);
  // zero_allow_untested_optimizer: true is the only non-default DeepSpeed-only key.
  ASSERT_EQ(cfg.warnings.size(), 1u);
  EXPECT_CONTAINS(cfg.warnings[0], "zero_allow_untested_optimizer: DeepSpeed option that ztrain does not implement");
  EXPECT_TRUE(cfg.bf16.enabled);
  EXPECT_EQ(cfg.fp16.initial_scale_power, 12);
  EXPECT_EQ(cfg.optimizer.lr, 6e-4);
  EXPECT_EQ(cfg.optimizer.weight_decay, 0.1);
  EXPECT_EQ(cfg.scheduler.type, "WarmupDecayLR");
  EXPECT_EQ(cfg.scheduler.warmup_type, "linear");
  EXPECT_EQ(cfg.scheduler.total_num_steps, 5000);
  EXPECT_EQ(cfg.zero.allgather_bucket_size, 200000000);  // 2e8 given as a float
  EXPECT_EQ(cfg.zero.stage3_param_persistence_threshold, 1000000);
  EXPECT_TRUE(cfg.zero.overlap_comm);
  EXPECT_TRUE(cfg.zero.stage3_gather_16bit_weights_on_model_save);
  EXPECT_TRUE(cfg.zero.offload_optimizer.pin_memory);
  EXPECT_EQ(cfg.aio.queue_depth, 8);  // DeepSpeed's defaults, as copied into configs: accepted without NVMe
  EXPECT_EQ(cfg.gradient_clipping, 1.0);
  EXPECT_TRUE(cfg.data.embedded);
  resolve_batch(cfg, 8);
  EXPECT_EQ(cfg.batch.train_batch_size, 64);

  // DeepSpeed's aliases and older names.
  cfg = parse(R"({"bfloat16": {"enabled": true}, "optimizer": {"type": "adam", "params": {"torch_adam": true}},
                  "zero_optimization": {"gather_16bit_weights_on_model_save": true, "prefetch_bucket_size": 7,
                                        "stage": 1, "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme"}},
                  "aio": {"intra_op_parallelism": 4}, "checkpoint": {"tag_validation": "Ignore"},
                  "train": {"seed": 1e3}})");
  EXPECT_TRUE(cfg.bf16.enabled);
  EXPECT_EQ(cfg.optimizer.type, "AdamW");
  EXPECT_TRUE(cfg.zero.stage3_gather_16bit_weights_on_model_save);
  EXPECT_EQ(cfg.zero.stage3_prefetch_bucket_size, 7);
  EXPECT_EQ(cfg.aio.thread_count, 4);
  EXPECT_FALSE(cfg.checkpoint.tag_validation);
  EXPECT_EQ(cfg.train.seed, 1000u);
  cfg = parse(R"({"zero_optimization": {"stage3_gather_fp16_weights_on_model_save": true, "cpu_offload": false}})");
  EXPECT_TRUE(cfg.zero.stage3_gather_16bit_weights_on_model_save);
  ASSERT_EQ(cfg.warnings.size(), 1u);
  EXPECT_CONTAINS(cfg.warnings[0], "zero_optimization.cpu_offload: deprecated; use offload_optimizer.device");
}

TEST(ConfigParse, DeviceMemoryCap) {
  EXPECT_EQ(parse(R"({"train": {"device_memory_cap_gib": 24}})").train.device_memory_cap_gib, 24.0);
  EXPECT_EQ(parse(R"({"train": {"device_memory_cap_gib": 0.0001}})").train.device_memory_cap_gib, 0.0001);
  EXPECT_EQ(parse("{}", {"train.device_memory_cap_gib=40"}).train.device_memory_cap_gib, 40.0);
  // null is the default: no cap.
  EXPECT_EQ(parse(R"({"train": {"device_memory_cap_gib": null}})").train.device_memory_cap_gib, 0.0);
  EXPECT_EQ(parse(R"({"train": {"device_memory_cap_gib": 24}})", {"train.device_memory_cap_gib=null"})
                .train.device_memory_cap_gib,
            0.0);
}

TEST(ConfigParse, ClassifierChunk) {
  EXPECT_EQ(parse("{}").train.classifier_chunk_mib, 0.0);  // the backend's default
  EXPECT_EQ(parse(R"({"train": {"classifier_chunk_mib": 512}})").train.classifier_chunk_mib, 512.0);
  EXPECT_EQ(parse(R"({"train": {"classifier_chunk_mib": 0.5}})").train.classifier_chunk_mib, 0.5);
  EXPECT_EQ(parse("{}", {"train.classifier_chunk_mib=2048"}).train.classifier_chunk_mib, 2048.0);
  EXPECT_EQ(parse(R"({"train": {"classifier_chunk_mib": null}})").train.classifier_chunk_mib, 0.0);
}

// Accepted by the config's own rules; until offload and the delayed update
// land, their rows of the features table ([Note: features not available
// yet]) may still refuse the config, and nothing else may.
void expect_offload_accepted(const std::string& text) {
  SCOPED_TRACE(text);
  try {
    parse(text);
  } catch (const UserError& e) {
    EXPECT_CONTAINS(e.what(), "is not available yet");
  }
}

TEST(ConfigParse, OffloadSection) {
  Config cfg = parse(R"({"offload": {"delayed_update": false, "delayed_update_warmup": 0, "aio_backend": "AUTO"}})");
  EXPECT_FALSE(cfg.offload.delayed_update);
  EXPECT_EQ(cfg.offload.delayed_update_warmup, 0);
  EXPECT_EQ(cfg.offload.aio_backend, "auto");  // matched case-insensitively, kept in its spelling
  EXPECT_TRUE(cfg.warnings.empty());  // delayed_update off by name: its warm-up is idle, visibly
  cfg = parse(R"({"offload": {"delayed_update_warmup": 1e3}})");
  EXPECT_EQ(cfg.offload.delayed_update_warmup, 1000);
  ASSERT_EQ(cfg.warnings.size(), 1u);  // [Note: inert keys]
  EXPECT_CONTAINS(cfg.warnings[0], "offload.delayed_update_warmup: counts the exact steps before the delayed update");

  // The combinations the cross-section rules accept.
  expect_offload_accepted(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
                              "offload": {"delayed_update": true, "delayed_update_warmup": 5}})");
  expect_offload_accepted(R"({"zero_optimization": {"stage": 1, "offload_optimizer": {"device": "nvme",
                                                                                      "nvme_path": "/nvme"}},
                              "offload": {"delayed_update": true, "aio_backend": "io_uring"}})");
  expect_offload_accepted(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme",
                                                                                  "nvme_path": "/nvme"}},
                              "offload": {"aio_backend": "threads"}})");
}

// ZeRO-Infinity's optimizer offload as DeepSpeed documents it, with the
// pipeline keys and the aio section.
TEST(ConfigParse, NvmeOptimizerOffload) {
  Config cfg = parse(R"({"zero_optimization": {"stage": 3, "sub_group_size": 1e8,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme", "pin_memory": true, "buffer_count": 6,
                            "fast_init": false, "pipeline_read": true, "pipeline_write": true}},
    "aio": {"block_size": 262144, "queue_depth": 32, "thread_count": 2, "single_submit": true,
            "overlap_events": false},
    "offload": {"aio_backend": "threads", "delayed_update": true}})");
  const OffloadConfig& o = cfg.zero.offload_optimizer;
  EXPECT_EQ(o.device, "nvme");
  EXPECT_EQ(o.nvme_path, "/local_nvme");
  EXPECT_EQ(o.buffer_count, 6);
  EXPECT_TRUE(o.pipeline_read);
  EXPECT_TRUE(o.pipeline_write);
  EXPECT_EQ(cfg.zero.sub_group_size, 100000000);
  EXPECT_EQ(cfg.aio.block_size, 262144);
  EXPECT_EQ(cfg.aio.queue_depth, 32);
  EXPECT_EQ(cfg.aio.thread_count, 2);
  EXPECT_TRUE(cfg.aio.single_submit);
  EXPECT_FALSE(cfg.aio.overlap_events);
  EXPECT_TRUE(cfg.warnings.empty());
  // The defaults: DeepSpeed's, pipelining off, one set of buffers is enough.
  cfg = parse(R"({"zero_optimization": {"stage": 1,
                    "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme"}}})");
  EXPECT_EQ(cfg.zero.offload_optimizer.buffer_count, 4);
  EXPECT_FALSE(cfg.zero.offload_optimizer.pipeline_read);
  EXPECT_FALSE(cfg.zero.offload_optimizer.pipeline_write);
  EXPECT_EQ(cfg.zero.sub_group_size, 1000000000);
  // Only one of the two keys, with two sets.
  cfg = parse(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/n",
                    "buffer_count": 6, "pipeline_write": true}}})");
  EXPECT_FALSE(cfg.zero.offload_optimizer.pipeline_read);
  EXPECT_TRUE(cfg.zero.offload_optimizer.pipeline_write);
}

// [Note: inert keys]: validation keys without validation data, and a
// comm.timeout that the environment replaces.
TEST(ConfigParse, InertValidationAndTimeoutKeysAreNamed) {
  TempFile train("inert_train.bin"), val("inert_val.bin");
  Config cfg = parse(R"({"data": {"train": ")" + train.path() + R"("}, "train": {"eval_interval": 5}})");
  ASSERT_EQ(cfg.warnings.size(), 1u);
  EXPECT_CONTAINS(cfg.warnings[0], "train.eval_interval: spaces the validations, but data.val is not set");
  cfg = parse(R"({"data": {"train": ")" + train.path() + R"("}, "train": {"eval_steps": 3}})");
  ASSERT_EQ(cfg.warnings.size(), 1u);
  EXPECT_CONTAINS(cfg.warnings[0], "train.eval_steps: sizes each validation, but data.val is not set");
  cfg = parse(R"({"data": {"train": ")" + train.path() + R"(", "val": ")" + val.path() +
              R"("}, "train": {"eval_interval": 5, "eval_steps": 3}})");
  EXPECT_TRUE(cfg.warnings.empty());
  cfg = parse(R"({"train": {"eval_interval": 5}})");  // the embedded corpus has validation data
  EXPECT_TRUE(cfg.warnings.empty());

  const char* before = std::getenv("ZTRAIN_COMM_TIMEOUT");
  const std::string saved = before ? before : "";
  setenv("ZTRAIN_COMM_TIMEOUT", "5", 1);
  cfg = parse(R"({"comm": {"timeout": 100}})");
  EXPECT_EQ(cfg.comm.timeout, 5);
  ASSERT_EQ(cfg.warnings.size(), 1u);
  EXPECT_CONTAINS(cfg.warnings[0], "comm.timeout: 100.0 is overridden by the environment's ZTRAIN_COMM_TIMEOUT=5");
  cfg = parse(R"({"comm": {"timeout": 5}})");
  EXPECT_TRUE(cfg.warnings.empty());
  if (before) {
    setenv("ZTRAIN_COMM_TIMEOUT", saved.c_str(), 1);
  } else {
    unsetenv("ZTRAIN_COMM_TIMEOUT");
  }
}

// The comma lists of data.train and data.val, as the config checks them and
// the io layer opens them.
TEST(ConfigParse, PathListsAreSplitAtCommasWithSpacesTrimmed) {
  EXPECT_EQ(split_path_list(" a.bin ,\tb c.bin,, "), (std::vector<std::string>{"a.bin", "b c.bin"}));
  EXPECT_EQ(split_path_list("a.bin"), (std::vector<std::string>{"a.bin"}));
  EXPECT_TRUE(split_path_list(" , ").empty());
  EXPECT_TRUE(split_path_list("").empty());
}

TEST(ConfigParse, DataFilesThatExist) {
  TempFile train("data_train.bin"), val("data_val.bin");
  const Config cfg = parse(R"({"data": {"train": ")" + train.path() + R"(", "val": ")" + val.path() + R"("}})");
  EXPECT_FALSE(cfg.data.embedded);
  EXPECT_EQ(cfg.data.train, train.path());
  EXPECT_EQ(cfg.data.val, val.path());
}

TEST(ConfigParse, LoadConfigFromFileWithCommentsAndOverrides) {
  TempFile file("load.json", "// a comment\n{\"train\": {\"steps\": 7} /* another */}\n");
  const Config cfg = load_config(file.path(), {"train.seed=99"});
  EXPECT_EQ(cfg.source, file.path());
  EXPECT_EQ(cfg.train.steps, 7);
  EXPECT_EQ(cfg.train.seed, 99u);
}

void expect_round_trip(const std::string& text, int dp_size) {
  SCOPED_TRACE(text);
  Config first = parse(text);
  resolve_batch(first, dp_size);
  const nlohmann::json resolved = resolved_json(first);
  Config second = parse_config(resolved, "resolved.json");
  resolve_batch(second, dp_size);
  expect_same_config(first, second);
  EXPECT_EQ(resolved, resolved_json(second));
}

TEST(ConfigParse, ResolvedJsonRoundTrip) {
  TempFile train("rt_train.bin");
  expect_round_trip("{}", 1);
  expect_round_trip(kDeepSpeedConfig, 4);
  expect_round_trip(R"({"model": {"n_layer": 3, "d_model": 96, "n_head": 3}, "train_batch_size": 48,
                        "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 100,
                                      "warmup_num_steps": 10, "cos_min_ratio": 0.1}},
                        "checkpoint": {"tag_validation": "Ignore", "keep_last": 0},
                        "activation_checkpointing": {"number_checkpoints": 4, "profile": true},
                        "data": {"train": ")" + train.path() + R"("},
                        "train": {"seed": 18446744073709551615}})",
                    3);
  expect_round_trip(R"({"data": {"train": ")" + train.path() + R"(", "packing": true}})", 1);
  expect_round_trip(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 0.01}},
                        "pipeline": {"pipe_schedule_name": "interleaved", "num_chunks": 2},
                        "zero_optimization": {"offload_optimizer": {"device": "none", "nvme_path": "/nvme"}}})",
                    2);
  expect_round_trip(R"({"zero_optimization": {"stage": 2, "sub_group_size": 5000,
                        "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme", "buffer_count": 7,
                                              "pipeline_read": true, "pipeline_write": false}},
                        "aio": {"block_size": 8192, "intra_op_parallelism": 3, "overlap_events": false},
                        "offload": {"aio_backend": "io_uring", "delayed_update": true}})",
                    2);
  expect_round_trip(R"({"prometheus": {"enabled": true, "port": 9100, "textfile_dir": "/tmp/prom"}})", 1);
  expect_round_trip(R"({"train": {"device_memory_cap_gib": 23.5, "classifier_chunk_mib": 64},
                        "offload": {"delayed_update_warmup": 0}})",
                    1);
  expect_round_trip(R"({"train": {"breadth_first_group": 2}, "gradient_accumulation_steps": 4,
                        "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                              "offload_param": {"device": "cpu"}},
                        "offload": {"param_from_master": true},
                        "model": {"activation_checkpointing": true, "recompute_layers": 1}})",
                    1);

  // Every section is written, with defaults filled in.
  Config cfg = parse("{}");
  nlohmann::json j = resolved_json(cfg);
  EXPECT_EQ(j["train_batch_size"], "auto");  // not resolved yet
  EXPECT_EQ(j["zero_optimization"]["offload_param"]["max_in_cpu"], 1000000000);
  EXPECT_EQ(j["model"]["preset"], "tiny");
  EXPECT_EQ(j["model"]["arch"], "gpt2");
  EXPECT_EQ(j["data"]["embedded"], true);
  EXPECT_TRUE(j["scheduler"].is_null());
  EXPECT_TRUE(j["train"].contains("device_memory_cap_gib"));
  EXPECT_TRUE(j["train"]["device_memory_cap_gib"].is_null());  // no cap
  EXPECT_TRUE(j["train"]["classifier_chunk_mib"].is_null());    // the backend's default
  EXPECT_EQ(j["offload"], (nlohmann::json{{"delayed_update", false}, {"delayed_update_warmup", 10},
                                          {"aio_backend", "auto"}, {"grad_accumulation", "host"},
                                          {"param_from_master", false}}));
  // Unresolved, it still parses back.
  Config again = parse_config(j, "resolved.json");
  EXPECT_TRUE(again.batch.train_auto);
  resolve_batch(cfg, 2);
  EXPECT_EQ(resolved_json(cfg)["train_batch_size"], 8);
}

}  // namespace
}  // namespace zt::test
