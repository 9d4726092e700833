// Keys given where they do nothing ([Note: inert keys]).
#include <initializer_list>
#include <string>

#include "core/config_reader.hpp"

namespace zt::config_detail {
namespace {

// The value at `path` in the config as given (after --set), or nullptr when
// absent or null.
const json* given_at(const json& root, std::initializer_list<const char*> path) {
  const json* node = &root;
  for (const char* key : path) {
    if (!node->is_object()) return nullptr;
    const auto it = node->find(key);
    if (it == node->end()) return nullptr;
    node = &*it;
  }
  return node->is_null() ? nullptr : node;
}

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

// A key and whether the config gives it a value other than its default.
struct Setting {
  const char* path;
  bool differs;
};

// One warning `what` for each setting that differs from its default.
void warn_differing(const ParseContext& ctx, std::initializer_list<Setting> settings, const std::string& what) {
  for (const Setting& s : settings)
    if (s.differs) ctx.warn(s.path, what);
}

}  // namespace

// [Note: inert keys] A key can be valid on its own and still do nothing in
// the config it is given in: a sub-group size without the NVMe optimizer, a
// loss-scaler knob in an fp16 section that is not turned on, a checkpoint
// knob without a checkpoint directory. DeepSpeed ignores such keys without a
// word, and the user reads the config as if they acted. Here each is named
// in a warning that says what it would need, when the config gives it a
// value other than its default. No warning where the config itself says the
// key is idle, so that a DeepSpeed config written out in full stays quiet: a
// section turned off by name ("enabled": false, "device": "none"), or a key
// whose name says where it acts (stage3_* below stage 3). Combinations that
// would train something other than what was asked are errors in
// check_across_sections instead.
void warn_inert_keys(const ParseContext& ctx, const Config& cfg) {
  const json& raw = cfg.raw;
  const Config d;
  const ZeroConfig& z = cfg.zero;
  const std::string stage = std::to_string(z.stage);

  // zero_optimization: DeepSpeed switches whose other value ztrain has no
  // form of.
  struct Fixed {
    const char* key;
    bool value, def;
    const char* why;
  };
  const Fixed fixed[] = {
      {"contiguous_gradients", z.contiguous_gradients, d.zero.contiguous_gradients,
       "ztrain always keeps each unit's gradients in one contiguous buffer"},
      {"reduce_scatter", z.reduce_scatter, d.zero.reduce_scatter,
       "ztrain reduce-scatters the gradients at stages 1-3 and all-reduces them at stage 0, whatever this key"},
      {"allgather_partitions", z.allgather_partitions, d.zero.allgather_partitions,
       "ztrain always gathers the updated shards with all-gather"},
      {"round_robin_gradients", z.round_robin_gradients, d.zero.round_robin_gradients,
       "ztrain copies each unit's gradient shard to the host as its reduction is done, without DeepSpeed's "
       "round-robin order"},
      {"elastic_checkpoint", z.elastic_checkpoint, d.zero.elastic_checkpoint,
       "ztrain's checkpoints load into any data-parallel size, ZeRO stage and pipeline split whatever this key "
       "(docs/checkpoints.md)"},
  };
  for (const Fixed& f : fixed)
    if (given_at(raw, {"zero_optimization", f.key}) && f.value != f.def)
      ctx.warn(std::string("zero_optimization.") + f.key,
               std::string(f.value ? "true" : "false") + " is a DeepSpeed choice that ztrain does not offer: " +
                   f.why + "; ignored");

  // overlap_comm: DeepSpeed's stage 1 overlaps its reductions; ztrain's
  // reduces once, after the backward (stage 0 overlaps in neither).
  if (z.stage == 1 && z.overlap_comm && given_at(raw, {"zero_optimization", "overlap_comm"}))
    ctx.warn("zero_optimization.overlap_comm",
             "true overlaps the gradient reductions with the backward at stages 2 and 3; at stage 1 ztrain reduces "
             "once, after the backward; ignored");
  if (z.sub_group_size != d.zero.sub_group_size && z.offload_optimizer.device != "nvme")
    ctx.warn("zero_optimization.sub_group_size",
             "sizes the sub-groups in which the NVMe optimizer reads, updates and writes its states; "
             "offload_optimizer.device is " + quoted(z.offload_optimizer.device) + ", not \"nvme\"; ignored");

  // Offload sub-keys on a device that does not use them (buffer_count and
  // max_in_cpu with "cpu" are warned where they are read).
  const OffloadConfig& opt = z.offload_optimizer;
  const OffloadConfig& par = z.offload_param;
  if (!opt.nvme_path.empty() && opt.device != "nvme")
    ctx.warn("zero_optimization.offload_optimizer.nvme_path",
             "is the directory of the NVMe optimizer's files; device is " + quoted(opt.device) + "; ignored");
  if (!par.nvme_path.empty() && par.device != "nvme")
    ctx.warn("zero_optimization.offload_param.nvme_path",
             "is the directory of the parameters' swap file; device is " + quoted(par.device) + "; ignored");
  // A section whose device is "none" by default, not by name.
  const bool opt_unnamed = !given_at(raw, {"zero_optimization", "offload_optimizer", "device"});
  const bool par_unnamed = !given_at(raw, {"zero_optimization", "offload_param", "device"});
  if (opt.device == "none" && opt_unnamed && opt.pin_memory &&
      given_at(raw, {"zero_optimization", "offload_optimizer", "pin_memory"}))
    ctx.warn("zero_optimization.offload_optimizer.pin_memory",
             "true page-locks the offloaded optimizer's host memory; no device is given (\"none\"); ignored");
  if (opt.device == "none" && opt_unnamed && opt.ratio != d.zero.offload_optimizer.ratio)
    ctx.warn("zero_optimization.offload_optimizer.ratio",
             "is the fraction of the optimizer offloaded to the host; no device is given (\"none\"); ignored");
  if (par.device == "none" && par_unnamed) {
    if (par.pin_memory && given_at(raw, {"zero_optimization", "offload_param", "pin_memory"}))
      ctx.warn("zero_optimization.offload_param.pin_memory",
               "true page-locks the offloaded parameters' host memory; no device is given (\"none\"); ignored");
    if (par.buffer_count != d.zero.offload_param.buffer_count)
      ctx.warn("zero_optimization.offload_param.buffer_count",
               "counts the offloaded parameters' upload or read buffers; no device is given (\"none\"); ignored");
    if (par.buffer_size != d.zero.offload_param.buffer_size)
      ctx.warn("zero_optimization.offload_param.buffer_size",
               "sizes the offloaded parameters' buffers; no device is given (\"none\"); ignored");
  }
  if (par.pin_memory && cfg.offload.param_from_master &&
      given_at(raw, {"zero_optimization", "offload_param", "pin_memory"}))
    ctx.warn("zero_optimization.offload_param.pin_memory",
             "true page-locks the host copy of the 16-bit parameters, but offload.param_from_master uploads them "
             "from the fp32 master and keeps no such copy; ignored");
  if (!cfg.offload.delayed_update && !given_at(raw, {"offload", "delayed_update"}) &&
      cfg.offload.delayed_update_warmup != d.offload.delayed_update_warmup)
    ctx.warn("offload.delayed_update_warmup",
             "counts the exact steps before the delayed update starts; offload.delayed_update is false; ignored");

  // The loss scaler.
  const Fp16Config& f = cfg.fp16;
  struct Scaler {
    const char* key;
    bool differs;
    bool dynamic_only;
  };
  const Scaler scaler[] = {
      {"loss_scale", f.loss_scale != d.fp16.loss_scale, false},
      {"initial_scale_power", f.initial_scale_power != d.fp16.initial_scale_power, true},
      {"loss_scale_window", f.loss_scale_window != d.fp16.loss_scale_window, true},
      {"hysteresis", f.hysteresis != d.fp16.hysteresis, true},
      {"consecutive_hysteresis", f.consecutive_hysteresis != d.fp16.consecutive_hysteresis, true},
      {"min_loss_scale", f.min_loss_scale != d.fp16.min_loss_scale, true},
  };
  for (const Scaler& s : scaler) {
    if (!s.differs) continue;
    if (!f.enabled && !given_at(raw, {"fp16", "enabled"}))
      ctx.warn(std::string("fp16.") + s.key,
               "sets fp16's loss scaling; fp16.enabled is not given, so fp16 is off; ignored");
    else if (f.enabled && s.dynamic_only && f.loss_scale > 0)
      ctx.warn(std::string("fp16.") + s.key,
               "tunes the dynamic loss scale; fp16.loss_scale " + show(json(f.loss_scale)) +
                   " fixes the scale (0 is dynamic); ignored");
  }

  // The optimizer's lr under a schedule that does not start from it.
  const std::string& sched = cfg.scheduler.type;
  if ((sched == "WarmupLR" || sched == "WarmupDecayLR") && given_at(raw, {"optimizer", "params", "lr"}) &&
      cfg.optimizer.lr != cfg.scheduler.warmup_max_lr)
    ctx.warn("optimizer.params.lr",
             show(json(cfg.optimizer.lr)) + " is not used: scheduler " + sched +
                 " sets the learning rate from scheduler.params.warmup_min_lr to warmup_max_lr (" +
                 show(json(cfg.scheduler.warmup_max_lr)) + ") at every step, as in DeepSpeed");

  // The pipeline's layout keys with one stage.
  if (cfg.pipeline.parallel_size == 1)
    warn_differing(ctx,
                   {{"pipeline.pipe_schedule_name", cfg.pipeline.pipe_schedule_name != d.pipeline.pipe_schedule_name},
                    {"pipeline.num_chunks", cfg.pipeline.num_chunks != d.pipeline.num_chunks},
                    {"pipeline.partition", cfg.pipeline.partition != d.pipeline.partition},
                    {"pipeline.rank_order", cfg.pipeline.rank_order != d.pipeline.rank_order}},
                   "lays out a pipeline of several stages; pipeline.parallel_size is 1; ignored");

  // Checkpoint keys without a directory to save in.
  if (cfg.checkpoint.dir.empty())
    warn_differing(ctx,
                   {{"checkpoint.keep_last", cfg.checkpoint.keep_last != d.checkpoint.keep_last},
                    {"checkpoint.async", cfg.checkpoint.async != d.checkpoint.async},
                    {"checkpoint.save_at_end", cfg.checkpoint.save_at_end != d.checkpoint.save_at_end},
                    {"checkpoint.tag_validation", cfg.checkpoint.tag_validation != d.checkpoint.tag_validation}},
                   "acts on the checkpoints saved under checkpoint.dir, which is not set; ignored");

  // Monitors that are off.
  if (!cfg.csv_monitor.enabled && !given_at(raw, {"csv_monitor", "enabled"}))
    warn_differing(ctx,
                   {{"csv_monitor.output_path", cfg.csv_monitor.output_path != d.csv_monitor.output_path},
                    {"csv_monitor.job_name", cfg.csv_monitor.job_name != d.csv_monitor.job_name}},
                   "csv_monitor.enabled is not given, so no CSV is written; ignored");
  if (!cfg.prometheus.enabled && !given_at(raw, {"prometheus", "enabled"})) {
    if (cfg.prometheus.port != d.prometheus.port)
      ctx.warn("prometheus.port", "prometheus.enabled is not given, so nothing is served; ignored");
    if (cfg.prometheus.textfile_dir != d.prometheus.textfile_dir)
      ctx.warn("prometheus.textfile_dir", "prometheus.enabled is not given, so no textfile is written; ignored");
  }

  // Validation without validation data.
  if (!cfg.data.embedded && cfg.data.val.empty()) {
    if (cfg.train.eval_interval != d.train.eval_interval)
      ctx.warn("train.eval_interval", "spaces the validations, but data.val is not set: nothing is validated; ignored");
    if (cfg.train.eval_steps != d.train.eval_steps)
      ctx.warn("train.eval_steps", "sizes each validation, but data.val is not set: nothing is validated; ignored");
  }
}

}  // namespace zt::config_detail
