// resolved_json: the Config written back as a config file with every default
// filled in. It must parse back to the same Config (tests hold it to that), so
// it writes only keys the parser reads, under their documented names.
#include "core/config.hpp"

namespace zt {

using nlohmann::json;

namespace {

json null_if_empty(const std::string& s) { return s.empty() ? json() : json(s); }

// A derived triplet member that resolve_batch has not filled yet stays "auto".
json batch_value(int64_t value) { return value > 0 ? json(value) : json("auto"); }

json offload_json(const OffloadConfig& o, bool for_params) {
  json j = {{"device", o.device},
            {"nvme_path", null_if_empty(o.nvme_path)},
            {"pin_memory", o.pin_memory},
            {"buffer_count", o.buffer_count}};
  if (for_params) {
    j["buffer_size"] = o.buffer_size;
    j["max_in_cpu"] = o.max_in_cpu;
  } else {
    j["fast_init"] = o.fast_init;
    j["ratio"] = o.ratio;
    j["pipeline_read"] = o.pipeline_read;
    j["pipeline_write"] = o.pipeline_write;
  }
  return j;
}

json scheduler_json(const SchedulerConfig& s) {
  if (s.type.empty()) return json();  // constant learning rate: no scheduler
  json p = {{"warmup_num_steps", s.warmup_num_steps}, {"warmup_type", s.warmup_type}};
  if (s.type == "WarmupLR" || s.type == "WarmupDecayLR") {
    p["warmup_min_lr"] = s.warmup_min_lr;
    p["warmup_max_lr"] = s.warmup_max_lr;
  }
  if (s.type == "WarmupCosineLR") {
    p["warmup_min_ratio"] = s.warmup_min_ratio;
    p["cos_min_ratio"] = s.cos_min_ratio;
  }
  if (s.type == "WarmupDecayLR" || s.type == "WarmupCosineLR") p["total_num_steps"] = s.total_num_steps;
  return {{"type", s.type}, {"params", p}};
}

json model_json(const ModelConfig& m) {
  json j = {{"arch", m.arch},
            {"n_layer", m.n_layer},   {"n_head", m.n_head},         {"d_model", m.d_model},
            {"seq_len", m.seq_len},   {"vocab_size", m.vocab_size}, {"activation_checkpointing", m.activation_checkpointing}};
  if (!m.preset.empty()) j["preset"] = m.preset;  // "" (custom sizes) has no key
  if (m.recompute_layers >= 0) j["recompute_layers"] = m.recompute_layers;
  if (!m.init_from.empty()) j["init_from"] = m.init_from;
  if (m.arch == "llama") {  // another arch refuses these keys
    j["intermediate_size"] = m.intermediate_size;
    j["num_key_value_heads"] = m.num_key_value_heads;
    j["rms_norm_eps"] = m.rms_norm_eps;
    j["rope_theta"] = m.rope_theta;
    const RopeScalingConfig& r = m.rope_scaling;
    j["rope_scaling"] = r.llama3 ? json{{"rope_type", "llama3"},
                                        {"factor", r.factor},
                                        {"low_freq_factor", r.low_freq_factor},
                                        {"high_freq_factor", r.high_freq_factor},
                                        {"original_max_position_embeddings", r.original_max_position_embeddings}}
                                 : json{{"rope_type", "default"}};
    j["tie_word_embeddings"] = m.tie_word_embeddings;
  }
  return j;
}

json data_json(const DataConfig& d) {
  if (d.embedded) return {{"embedded", true}};
  json j = {{"train", d.train}, {"val", null_if_empty(d.val)}};
  if (!d.tokenizer.empty()) j["tokenizer"] = d.tokenizer;
  if (d.packing) j["packing"] = true;
  return j;
}

json zero_json(const ZeroConfig& z) {
  return {{"stage", z.stage},
          {"overlap_comm", z.overlap_comm},
          {"contiguous_gradients", z.contiguous_gradients},
          {"reduce_scatter", z.reduce_scatter},
          {"allgather_partitions", z.allgather_partitions},
          {"round_robin_gradients", z.round_robin_gradients},
          {"elastic_checkpoint", z.elastic_checkpoint},
          {"reduce_bucket_size", z.reduce_bucket_size},
          {"allgather_bucket_size", z.allgather_bucket_size},
          {"sub_group_size", z.sub_group_size},
          {"stage3_prefetch_bucket_size", z.stage3_prefetch_bucket_size},
          {"stage3_param_persistence_threshold", z.stage3_param_persistence_threshold},
          {"stage3_max_live_parameters", z.stage3_max_live_parameters},
          {"stage3_max_reuse_distance", z.stage3_max_reuse_distance},
          {"stage3_gather_16bit_weights_on_model_save", z.stage3_gather_16bit_weights_on_model_save},
          {"offload_optimizer", offload_json(z.offload_optimizer, false)},
          {"offload_param", offload_json(z.offload_param, true)}};
}

}  // namespace

json resolved_json(const Config& cfg) {
  const Fp16Config& f = cfg.fp16;
  const OptimizerConfig& o = cfg.optimizer;
  const AioConfig& a = cfg.aio;
  const ActivationCheckpointingConfig& ac = cfg.activation_checkpointing;
  const PipelineConfig& p = cfg.pipeline;
  const CheckpointConfig& c = cfg.checkpoint;
  json j;
  j["train_batch_size"] = batch_value(cfg.batch.train_batch_size);
  j["train_micro_batch_size_per_gpu"] = batch_value(cfg.batch.micro_batch);
  j["gradient_accumulation_steps"] = batch_value(cfg.batch.grad_accum);
  j["gradient_clipping"] = cfg.gradient_clipping;
  j["steps_per_print"] = cfg.steps_per_print;
  j["wall_clock_breakdown"] = cfg.wall_clock_breakdown;
  j["fp16"] = {{"enabled", f.enabled},
               {"loss_scale", f.loss_scale},
               {"initial_scale_power", f.initial_scale_power},
               {"loss_scale_window", f.loss_scale_window},
               {"hysteresis", f.hysteresis},
               {"consecutive_hysteresis", f.consecutive_hysteresis},
               {"min_loss_scale", f.min_loss_scale}};
  j["bf16"] = {{"enabled", cfg.bf16.enabled}};
  j["optimizer"] = {{"type", o.type},
                    {"params",
                     {{"lr", o.lr}, {"betas", {o.beta1, o.beta2}}, {"eps", o.eps}, {"weight_decay", o.weight_decay}}}};
  j["scheduler"] = scheduler_json(cfg.scheduler);
  j["zero_optimization"] = zero_json(cfg.zero);
  j["aio"] = {{"block_size", a.block_size},
              {"queue_depth", a.queue_depth},
              {"thread_count", a.thread_count},
              {"single_submit", a.single_submit},
              {"overlap_events", a.overlap_events}};
  j["activation_checkpointing"] = {
      {"partition_activations", ac.partition_activations},
      {"cpu_checkpointing", ac.cpu_checkpointing},
      {"contiguous_memory_optimization", ac.contiguous_memory_optimization},
      {"number_checkpoints", ac.number_checkpoints > 0 ? json(ac.number_checkpoints) : json()},
      {"synchronize_checkpoint_boundary", ac.synchronize_checkpoint_boundary},
      {"profile", ac.profile}};
  j["pipeline"] = {{"parallel_size", p.parallel_size},
                   {"pipe_schedule_name", p.pipe_schedule_name},
                   {"num_chunks", p.num_chunks},
                   {"partition", p.partition},
                   {"rank_order", p.rank_order}};
  j["model"] = model_json(cfg.model);
  j["data"] = data_json(cfg.data);
  j["train"] = {{"steps", cfg.train.steps},
                {"seed", cfg.train.seed},
                {"eval_interval", cfg.train.eval_interval},
                {"eval_steps", cfg.train.eval_steps},
                // null: no cap (0 is not a valid value to write)
                {"device_memory_cap_gib",
                 cfg.train.device_memory_cap_gib > 0 ? json(cfg.train.device_memory_cap_gib) : json()},
                {"nonfinite_tolerance", cfg.train.nonfinite_tolerance},
                {"breadth_first_group", cfg.train.breadth_first_group},
                // null: the backend's default
                {"classifier_chunk_mib",
                 cfg.train.classifier_chunk_mib > 0 ? json(cfg.train.classifier_chunk_mib) : json()}};
  j["offload"] = {{"delayed_update", cfg.offload.delayed_update},
                  {"delayed_update_warmup", cfg.offload.delayed_update_warmup},
                  {"aio_backend", cfg.offload.aio_backend},
                  {"grad_accumulation", cfg.offload.grad_accumulation},
                  {"param_from_master", cfg.offload.param_from_master}};
  j["checkpoint"] = {{"dir", null_if_empty(c.dir)},
                     {"interval", c.interval},
                     {"save_at_end", c.save_at_end},
                     {"keep_last", c.keep_last},
                     {"async", c.async},
                     {"tag_validation", c.tag_validation}};
  j["log"] = {{"dir", cfg.log.dir}};
  j["comm"] = {{"timeout", cfg.comm.timeout}, {"flight_recorder_size", cfg.comm.flight_recorder_size}};
  j["csv_monitor"] = {{"enabled", cfg.csv_monitor.enabled},
                      {"output_path", cfg.csv_monitor.output_path},
                      {"job_name", cfg.csv_monitor.job_name}};
  j["prometheus"] = {{"enabled", cfg.prometheus.enabled},
                     {"port", cfg.prometheus.port},
                     {"textfile_dir", null_if_empty(cfg.prometheus.textfile_dir)}};
  return j;
}

}  // namespace zt
