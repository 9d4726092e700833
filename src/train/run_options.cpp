#include "train/run_options.hpp"

namespace zt {

RunOptions run_options(const Config& cfg, int dp, int pp) {
  RunOptions o;
  o.B = cfg.batch.micro_batch;
  o.T = cfg.model.seq_len;
  o.accum = cfg.batch.grad_accum;
  o.global_batch = cfg.batch.train_batch_size;
  ZT_CHECK(o.global_batch == o.B * o.accum * dp, "batch triplet not resolved for ", dp, " data-parallel ranks");
  if (cfg.bf16.enabled) o.param_dtype = o.act_dtype = DType::bf16;
  if (cfg.fp16.enabled) {
    o.param_dtype = o.act_dtype = DType::f16;
    LossScalerConfig lc;
    lc.loss_scale = cfg.fp16.loss_scale;
    lc.initial_scale_power = cfg.fp16.initial_scale_power;
    lc.loss_scale_window = cfg.fp16.loss_scale_window;
    lc.hysteresis = cfg.fp16.hysteresis;
    lc.consecutive_hysteresis = cfg.fp16.consecutive_hysteresis;
    lc.min_loss_scale = cfg.fp16.min_loss_scale;
    o.loss_scaler = lc;
  }

  o.P = pp;
  if (pp > 1) {
    o.V = cfg.pipeline.num_chunks;
    o.schedule = schedule_kind_from_name(cfg.pipeline.pipe_schedule_name);
    o.partition = partition_kind_from_name(cfg.pipeline.partition);
  }
  // A single stage walks the 1F1B list of one stage: forward and backward of
  // each micro-batch in turn.
  validate_schedule(o.schedule, o.P, o.V, static_cast<int>(o.accum));
  o.group = cfg.train.breadth_first_group;
  if (o.group > o.accum)
    ZT_USER_ERROR(cfg.source, ": train.breadth_first_group ", o.group, " is more than the ", o.accum,
                  " micro-batches of a step per rank (gradient_accumulation_steps): use at most ", o.accum);

  const ZeroConfig& z = cfg.zero;
  o.zero.stage = z.stage;
  o.zero.reduce_bucket_size = z.reduce_bucket_size;
  o.zero.allgather_bucket_size = z.allgather_bucket_size;
  o.zero.overlap_comm = z.overlap_comm;
  o.zero.prefetch_bucket_size = z.stage3_prefetch_bucket_size;
  o.zero.param_persistence_threshold = z.stage3_param_persistence_threshold;
  o.zero.max_live_parameters = z.stage3_max_live_parameters;
  o.zero.max_reuse_distance = z.stage3_max_reuse_distance;
  o.zero.param_dtype = o.param_dtype;
  o.zero.offload_params = z.offload_param.device != "none";
  o.zero.param_pin_memory = z.offload_param.pin_memory;
  o.zero.grad_pin_memory = z.offload_optimizer.pin_memory;
  o.zero.grad_accumulate_on_device = cfg.offload.grad_accumulation == "device";
  o.zero.param_from_master = cfg.offload.param_from_master;
  o.zero.micro_batches = o.accum;
  if (o.zero.grad_accumulate_on_device && o.accum < 2)
    ZT_USER_ERROR(cfg.source, ": offload.grad_accumulation \"device\" adds the micro-batches of a step on the device, "
                  "but a step has ", o.accum, " micro-batch per rank (gradient_accumulation_steps); leave it \"host\"");
  o.zero.host_grad_dtype = cfg.offload.grad_dtype == "bf16" ? DType::bf16 : DType::f32;
  // [Note: bf16 gradients on the host]: each element lands once a step.
  if (o.zero.host_grad_dtype != DType::f32 && z.stage >= 2 && o.accum > 1 && !o.zero.grad_accumulate_on_device &&
      o.group < o.accum)
    ZT_USER_ERROR(cfg.source, ": offload.grad_dtype \"", cfg.offload.grad_dtype, "\" rounds each gradient once, when it ",
                  "lands on the host, but at zero_optimization.stage ", z.stage, " a step of ", o.accum,
                  " micro-batches per rank in breadth-first groups of ", o.group, " lands it ",
                  (o.accum + o.group - 1) / o.group, " times, to be added there; set train.breadth_first_group to ",
                  o.accum, ", or offload.grad_accumulation to \"device\", or leave grad_dtype \"fp32\"");
  o.zero.param_buffer_count = z.offload_param.buffer_count;
  o.zero.param_buffer_size = z.offload_param.buffer_size;
  // [Note: parameter offload to NVMe]; the trainer adds the run id and rank.
  o.zero.param_nvme = z.offload_param.device == "nvme";
  if (o.zero.param_nvme) {
    ParamSwapOptions& ps = o.zero.param_swap;
    ps.nvme_path = z.offload_param.nvme_path;
    ps.buffer_count = z.offload_param.buffer_count;
    ps.buffer_size = z.offload_param.buffer_size;
    ps.max_in_cpu = z.offload_param.max_in_cpu;
    ps.pin_memory = z.offload_param.pin_memory;
    aio_settings(cfg, ps.aio, ps.backend);
  }

  const OptimizerConfig& op = cfg.optimizer;
  o.adamw = AdamWParams{op.lr, op.beta1, op.beta2, op.eps, op.weight_decay};
  const SchedulerConfig& sc = cfg.scheduler;
  o.lr.type = sc.type;
  o.lr.base_lr = op.lr;
  o.lr.warmup_min_lr = sc.warmup_min_lr;
  o.lr.warmup_max_lr = sc.warmup_max_lr;
  o.lr.warmup_num_steps = sc.warmup_num_steps;
  o.lr.warmup_type = sc.warmup_type;
  o.lr.total_num_steps = sc.total_num_steps;
  o.lr.warmup_min_ratio = sc.warmup_min_ratio;
  o.lr.cos_min_ratio = sc.cos_min_ratio;
  o.gradient_clipping = cfg.gradient_clipping;
  return o;
}

void aio_settings(const Config& cfg, AioOptions& aio, AioBackend& backend) {
  aio.block_size = cfg.aio.block_size;
  aio.queue_depth = cfg.aio.queue_depth;
  aio.thread_count = cfg.aio.thread_count;
  aio.single_submit = cfg.aio.single_submit;
  aio.overlap_events = cfg.aio.overlap_events;
  const std::string& b = cfg.offload.aio_backend;
  backend = b == "io_uring" ? AioBackend::io_uring : b == "threads" ? AioBackend::threads : AioBackend::automatic;
}

}  // namespace zt
