// Which keys each config section allows. `keys` are read by config.cpp; the
// `ignored` lists are DeepSpeed keys that ztrain accepts without implementing,
// with DeepSpeed's default as the value that needs no warning. The whole table
// is also what "did you mean" searches when a key sits in the wrong section.
#include "core/config_reader.hpp"

namespace zt::config_detail {

namespace {

// A DeepSpeed feature section, harmless when absent or "enabled": false.
IgnoredKey feature(const char* name, const char* note = "") { return IgnoredKey{name, json(), note}; }
// [Note: features that change what is trained]: an error when turned on.
IgnoredKey refused(const char* name, const char* note = "") { return IgnoredKey{name, json(), note, true}; }

const char* const kMetricsNote = "ztrain writes its own metrics under log.dir";

std::vector<SectionSchema> build_schemas() {
  std::vector<SectionSchema> s;

  s.push_back({"", "",
               {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                "gradient_clipping", "steps_per_print", "wall_clock_breakdown", "fp16", "bf16", "bfloat16",
                "optimizer", "scheduler", "zero_optimization", "aio", "activation_checkpointing", "pipeline",
                "model", "data", "train", "offload", "checkpoint", "log", "csv_monitor",
                "prometheus", "comm"},
               {{"prescale_gradients", false, ""},
                {"gradient_predivide_factor", 1.0, ""},
                {"communication_data_type", json(), "ztrain reduces gradients in fp32"},
                {"seq_parallel_comm_data_type", "fp32", ""},
                {"sparse_gradients", false, ""},
                {"zero_allow_untested_optimizer", false, ""},
                {"zero_force_ds_cpu_optimizer", true, ""},
                {"fp32_allreduce", false, "ztrain reduces gradients in fp32"},
                {"disable_allgather", false, ""},
                {"dump_state", false, ""},
                {"memory_breakdown", false, ""},
                {"vocabulary_size", json(), "use model.vocab_size"},
                {"graph_harvesting", false, ""},
                {"dataloader_drop_last", false, ""},
                {"use_data_before_expert_parallelism", false, ""},
                {"data_types", json::object(), "ztrain accumulates gradients in fp32"},
                refused("amp", "ztrain's mixed precision is bf16.enabled or fp16.enabled"),
                feature("flops_profiler"),
                feature("tensorboard", kMetricsNote),
                feature("wandb", kMetricsNote),
                feature("comet", kMetricsNote),
                feature("comms_logger"),
                refused("sparse_attention", "ztrain's attention is dense and causal"),
                refused("data_efficiency"),
                refused("curriculum_learning"),
                refused("compression_training"),
                refused("elasticity", "the batch is train_batch_size, train_micro_batch_size_per_gpu and "
                                      "gradient_accumulation_steps"),
                feature("autotuning"),
                feature("eigenvalue"),
                refused("progressive_layer_drop"),
                refused("quantize_training"),
                feature("weight_quantization"),
                feature("hybrid_engine"),
                feature("nebula"),
                feature("compile"),
                feature("timers"),
                refused("torch_autocast", "ztrain's mixed precision is bf16.enabled or fp16.enabled"),
                refused("tensor_parallel", "ztrain splits a model by ZeRO and pipeline.parallel_size")}});

  s.push_back({"fp16", "fp16",
               {"enabled", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
                "consecutive_hysteresis", "min_loss_scale"},
               {{"auto_cast", false, ""}, {"fp16_master_weights_and_grads", false, ""}, {"fused_mode", true, ""}}});
  s.push_back({"bf16", "bf16", {"enabled"}, {{"immediate_grad_update", true, ""}}});

  s.push_back({"optimizer", "optimizer", {"type", "params"}, {{"legacy_fusion", false, ""}}});
  s.push_back({"optimizer.params", "optimizer.params",
               {"lr", "betas", "eps", "weight_decay", "torch_adam", "adam_w_mode", "bias_correction", "amsgrad"},
               {}});

  s.push_back({"scheduler", "scheduler", {"type", "params"}, {}});
  const IgnoredKey last_batch_index{"last_batch_index", -1, "ztrain resumes the schedule from the checkpoint's step"};
  s.push_back({"scheduler.params/WarmupLR", "scheduler.params",
               {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type"},
               {last_batch_index}});
  s.push_back({"scheduler.params/WarmupDecayLR", "scheduler.params",
               {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type", "total_num_steps"},
               {last_batch_index}});
  s.push_back({"scheduler.params/WarmupCosineLR", "scheduler.params",
               {"total_num_steps", "warmup_min_ratio", "warmup_num_steps", "cos_min_ratio", "warmup_type"},
               {last_batch_index}});

  // DeepSpeed accepts both its field names and the stage3_* aliases.
  s.push_back({"zero_optimization", "zero_optimization",
               {"stage", "overlap_comm", "contiguous_gradients", "reduce_scatter", "allgather_partitions",
                "round_robin_gradients", "elastic_checkpoint", "reduce_bucket_size", "allgather_bucket_size",
                "sub_group_size", "stage3_prefetch_bucket_size", "prefetch_bucket_size",
                "stage3_param_persistence_threshold", "param_persistence_threshold", "stage3_max_live_parameters",
                "max_live_parameters", "stage3_max_reuse_distance", "max_reuse_distance",
                "stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save",
                "stage3_gather_fp16_weights_on_model_save", "offload_optimizer", "offload_param", "cpu_offload",
                "cpu_offload_param", "cpu_offload_use_pin_memory"},
               {{"load_from_fp32_weights", true, ""},
                {"ignore_unused_parameters", true, ""},
                {"legacy_stage1", false, ""},
                {"grad_hooks", true, ""},
                {"stage3_model_persistence_threshold", json(), ""},
                {"model_persistence_threshold", json(), ""},
                {"stage3_module_granularity_threshold", 0, ""},
                {"module_granularity_threshold", 0, ""},
                {"stage3_use_all_reduce_for_fetch_params", false, ""},
                {"use_all_reduce_for_fetch_params", false, ""},
                {"use_multi_rank_bucket_allreduce", true, ""},
                {"zero_hpz_partition_size", 1, ""},
                {"zero_quantized_weights", false, ""},
                {"zero_quantized_nontrainable_weights", false, ""},
                {"zero_quantized_gradients", false, ""},
                {"zeropp_loco_param", json(), ""},
                {"mics_shard_size", -1, ""},
                {"mics_hierarchical_params_gather", false, ""},
                {"memory_efficient_linear", true, ""},
                {"pipeline_loading_checkpoint", false, ""},
                {"override_module_apply", true, ""},
                {"log_trace_cache_warnings", false, ""}}});
  s.push_back({"zero_optimization.offload_optimizer", "zero_optimization.offload_optimizer",
               {"device", "nvme_path", "buffer_count", "pin_memory", "fast_init", "ratio", "pipeline_read",
                "pipeline_write"},
               {}});
  s.push_back({"zero_optimization.offload_param", "zero_optimization.offload_param",
               {"device", "nvme_path", "buffer_count", "buffer_size", "max_in_cpu", "pin_memory"},
               {}});

  s.push_back({"aio", "aio",
               {"block_size", "queue_depth", "thread_count", "intra_op_parallelism", "single_submit",
                "overlap_events"},
               {{"use_gds", false, ""}}});
  s.push_back({"activation_checkpointing", "activation_checkpointing",
               {"partition_activations", "cpu_checkpointing", "contiguous_memory_optimization",
                "number_checkpoints", "synchronize_checkpoint_boundary", "profile"},
               {}});
  // DeepSpeed's own pipeline keys (for its PipelineModule) are accepted; the
  // ztrain keys above them describe the same thing in Megatron's terms.
  s.push_back({"pipeline", "pipeline",
               {"parallel_size", "pipe_schedule_name", "num_chunks", "partition", "rank_order"},
               {{"stages", "auto", "use pipeline.parallel_size"},
                {"seed_layers", false, ""},
                {"activation_checkpoint_interval", 0, "use model.activation_checkpointing"},
                {"pipe_partitioned", true, ""},
                {"grad_partitioned", true, ""},
                {"use_reentrant", true, ""}}});

  s.push_back({"model", "model",
               {"arch", "preset", "n_layer", "n_head", "d_model", "seq_len", "vocab_size", "activation_checkpointing",
                "recompute_layers", "intermediate_size", "num_key_value_heads", "rms_norm_eps", "rope_theta", "rope_scaling",
                "tie_word_embeddings", "init_from"},
               {}});
  s.push_back({"model.rope_scaling", "model.rope_scaling",
               {"rope_type", "type", "factor", "low_freq_factor", "high_freq_factor",
                "original_max_position_embeddings"},
               {}});
  s.push_back({"data", "data", {"train", "val", "embedded", "tokenizer", "packing"}, {}});
  s.push_back({"train", "train",
               {"steps", "seed", "eval_interval", "eval_steps", "device_memory_cap_gib", "nonfinite_tolerance",
                "breadth_first_group", "classifier_chunk_mib"},
               {}});
  s.push_back({"offload", "offload", {"delayed_update", "delayed_update_warmup", "aio_backend", "grad_accumulation",
                                       "param_from_master", "grad_dtype"}, {}});
  s.push_back({"checkpoint", "checkpoint",
               {"dir", "interval", "save_at_end", "keep_last", "async", "tag_validation"},
               {{"load_universal", false, ""},
                {"use_node_local_storage", false, ""},
                {"parallel_write", json{{"pipeline_stage", false}}, ""}}});
  s.push_back({"log", "log", {"dir"}, {}});
  s.push_back({"csv_monitor", "csv_monitor", {"enabled", "output_path", "job_name"}, {}});
  s.push_back({"prometheus", "prometheus", {"enabled", "port", "textfile_dir"}, {}});
  s.push_back({"comm", "comm", {"timeout", "flight_recorder_size"}, {}});
  return s;
}

}  // namespace

const std::vector<SectionSchema>& all_schemas() {
  static const std::vector<SectionSchema> schemas = build_schemas();
  return schemas;
}

}  // namespace zt::config_detail
