// The run configuration: a DeepSpeed-style JSON file validated once at start-up
// into typed structs. DeepSpeed's keys keep DeepSpeed's meanings and defaults
// (the member initialisers below are those defaults); ztrain's own sections are
// model, data, train, offload, checkpoint and log.
//
// Every error is a zt::UserError whose message starts with the config file and
// the JSON path of the offending key ("config.json: zero_optimization.stage:
// expected 0..3, found 7"). Known DeepSpeed keys that ztrain does not implement
// are accepted and listed in Config::warnings, which the trainer prints.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zt {

// Architectures that model.arch accepts (modules/model_desc.hpp describes each).
const std::vector<std::string>& model_architectures();

// Llama 3's rotary frequency scaling (model.rope_scaling, rope_type "llama3";
// transformers' names and meanings).
struct RopeScalingConfig {
  bool llama3 = false;  // false: no scaling (rope_scaling absent or null)
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position_embeddings = 8192;
};

struct ModelConfig {
  // One of model_architectures(); a preset names its own ("tiny", "gpt2-*":
  // gpt2; "llama-tiny", "llama2-*", "llama3*": llama).
  std::string arch = "gpt2";
  // "tiny", "gpt2-124m", ..., "llama-tiny", "llama2-7b", ...; "" when sizes
  // were given without a preset (missing sizes then come from the arch's
  // tiny preset).
  std::string preset = "tiny";
  int n_layer = 2;
  int n_head = 4;
  int d_model = 64;
  int seq_len = 64;
  int vocab_size = 256;  // tokens are stored as uint16: 2..65536
  // Llama only (keys of another arch are refused by name): the MLP width,
  // key/value heads (dividing n_head; 1 = multi-query), RMSNorm's eps, the
  // rotary base and scaling, and whether lm_head is the embedding table.
  int intermediate_size = 0;
  int num_key_value_heads = 0;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScalingConfig rope_scaling;
  bool tie_word_embeddings = false;
  // Recompute each block's forward during backward instead of keeping its
  // activations.
  bool activation_checkpointing = false;
  // With activation_checkpointing: how many blocks of each pipeline chunk
  // (the first ones) recompute; the rest keep their activations (Megatron-
  // LM's recompute_num_layers, method "block"; [Note: partial
  // recomputation] in modules/model_desc.hpp). -1 (the default) = every block.
  int recompute_layers = -1;
  // Weights to start from (a fine-tuning run: these weights, fresh optimizer
  // state, step 0): a Hugging Face model directory (config.json + safetensors)
  // or a ztrain checkpoint (a step directory or a checkpoint.dir); "" = the
  // random initialisation. Read by train/init_from.hpp; its model must be
  // this config's. A --resume that finds a checkpoint takes precedence.
  std::string init_from;
};

// The file names of a comma list such as data.train ("a.bin, b.bin"): spaces
// and tabs around each trimmed, empty items skipped, no globbing.
std::vector<std::string> split_path_list(const std::string& list);

struct DataConfig {
  std::string train;     // token files (a comma list); each must exist (their format is the io layer's check)
  std::string val;       // "" = none
  bool embedded = true;  // no "data" section: use the built-in synthetic corpus
  // The tokenizer that made the token files (a tokenizer.json or a
  // SentencePiece .model), absolute; "" = none named. The trainer reads only
  // ids; the path goes into checkpoint manifests, and `zckpt export` copies
  // the file beside the weights (with its BOS/EOS ids in config.json).
  std::string tokenizer;
  // Pack whole fine-tuning examples into the rows of a batch, each attending
  // to itself only ([Note: packed rows] in io/packing.hpp); needs data whose
  // loss masks record example starts (zdata finetune).
  bool packing = false;
};

struct TrainConfig {
  int64_t steps = 200;     // optimizer steps
  uint64_t seed = 1234;
  int eval_interval = 50;  // steps between evaluations; 0 = never
  int eval_steps = 10;     // micro-batches per evaluation
  // Most device memory a rank may hold, in GiB (2^30 bytes): the device's
  // allocator refuses to go past it (Device::set_memory_cap), so a large GPU
  // behaves like a smaller one. 0 = no cap (the key absent).
  double device_memory_cap_gib = 0.0;
  // Consecutive steps with a non-finite loss or gradient norm (fp32, bf16;
  // with fp16 those the loss scaler did not already skip) whose update is
  // skipped before the run stops with an error; 0 = the first one stops it.
  int nonfinite_tolerance = 0;
  // [Note: breadth-first walk] (pipeline/executor.hpp): micro-batches that
  // go through each unit together, each unit's forward (then backward) for
  // all of them before the next unit; 1 = one micro-batch at a time.
  int breadth_first_group = 1;
  // Bound on the logits (and dlogits) the fused classifier holds at once, in
  // MiB (2^20 bytes): rows go through it in chunks of at most this many
  // bytes of logits (but at least one row on the CPU, 8 in the CUDA one
  // pass). 0 = the backend's default (the key absent): 8 MiB on the CPU,
  // 2 GiB for the CUDA one pass, 256 MiB for the CUDA two passes.
  double classifier_chunk_mib = 0.0;
};

struct LogConfig {
  std::string dir = "runs/latest";
};

// "comm": hangs become failures ([Note: watchdog] in comm/watchdog.hpp,
// docs/reliability.md). The environment variable ZTRAIN_COMM_TIMEOUT
// (seconds) overrides `timeout`, for job scripts.
struct CommConfig {
  double timeout = 600;                  // seconds an operation may be in flight, or a peer silent
  int64_t flight_recorder_size = 2048;   // operations kept per communicator (0: none)
};

// DeepSpeed's "csv_monitor": on rank 0, one CSV file per event under
// output_path/job_name (Train_Samples_train_loss.csv, ..._lr.csv,
// ..._loss_scale.csv with fp16), each row "samples,value" at the printed
// steps (train/metrics.hpp).
struct CsvMonitorConfig {
  bool enabled = false;
  std::string output_path;  // "" = relative to the working directory
  std::string job_name = "DeepSpeedJobName";
};

// "prometheus": rank 0 exports the run's metrics (train/prometheus_export.hpp,
// docs/monitoring.md): served at http://HOST:port/metrics, and/or written to
// textfile_dir/ztrain.prom in node-exporter's textfile format.
struct PrometheusConfig {
  bool enabled = false;
  int port = 9464;           // 0 = no HTTP server (textfile_dir only)
  std::string textfile_dir;  // "" = no textfile
};

// DeepSpeed "optimizer". ztrain implements AdamW only; "Adam" is read as AdamW,
// as DeepSpeed does with its default adam_w_mode: true.
struct OptimizerConfig {
  std::string type = "AdamW";
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // DeepSpeed's default (PyTorch's AdamW uses 0.01)
};

// DeepSpeed "scheduler". WarmupLR uses the warmup_* keys; WarmupDecayLR adds
// total_num_steps (linear decay to 0 after warmup); WarmupCosineLR uses
// total_num_steps, warmup_min_ratio, warmup_num_steps, cos_min_ratio and
// warmup_type, as ratios of optimizer.lr.
struct SchedulerConfig {
  std::string type;  // "" = constant lr, else WarmupLR|WarmupDecayLR|WarmupCosineLR
  double warmup_min_lr = 0.0;
  double warmup_max_lr = 0.001;
  int64_t warmup_num_steps = 1000;
  std::string warmup_type = "log";  // log|linear
  int64_t total_num_steps = 0;      // required by WarmupDecayLR and WarmupCosineLR
  double warmup_min_ratio = 0.0;
  double cos_min_ratio = 0.0001;
};

// fp16 with DeepSpeed's dynamic loss scaler.
struct Fp16Config {
  bool enabled = false;
  double loss_scale = 0.0;  // 0 = dynamic
  int initial_scale_power = 16;
  int loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1.0;
};

struct Bf16Config {
  bool enabled = false;
};

// zero_optimization.offload_optimizer / offload_param. DeepSpeed accepts
// buffer_size and max_in_cpu for offload_param only, and ratio, fast_init,
// pipeline_read and pipeline_write for offload_optimizer only; the other
// fields keep their defaults.
//
// offload_optimizer with device "nvme" (ZeRO-Infinity; optim/offload_adamw.hpp,
// [Note: NVMe optimizer step]): nvme_path is the swap directory, buffer_count
// the sub-group buffers (3 per sub-group in flight: master, exp_avg,
// exp_avg_sq; at least 3, and at least 6 with pipeline_read or
// pipeline_write), pipeline_read / pipeline_write overlap the reads and
// writes of the sub-groups with the host's AdamW. ratio < 1 and the pipeline
// keys without "nvme" are refused; zero_optimization.sub_group_size (>= 1)
// sizes the sub-groups. fast_init has nothing to choose: the moments are
// never written before the first step, whatever its value (true is named in
// a warning).
struct OffloadConfig {
  std::string device = "none";  // none|cpu|nvme
  std::string nvme_path;        // required when device is nvme
  bool pin_memory = false;
  int buffer_count = 4;  // DeepSpeed: 4 for offload_optimizer, 5 for offload_param
  int64_t buffer_size = 100000000;
  int64_t max_in_cpu = 1000000000;
  double ratio = 1.0;
  bool fast_init = false;
  bool pipeline_read = false;   // offload_optimizer, nvme: read sub-group i+1 while i computes
  bool pipeline_write = false;  // offload_optimizer, nvme: write sub-group i while i+1 computes
};

struct ZeroConfig {
  int stage = 0;
  bool overlap_comm = false;  // DeepSpeed's default: true for stage 3, false otherwise
  bool contiguous_gradients = true;
  bool reduce_scatter = true;
  bool allgather_partitions = true;
  bool round_robin_gradients = false;
  bool elastic_checkpoint = false;
  int64_t reduce_bucket_size = 500000000;  // elements
  int64_t allgather_bucket_size = 500000000;
  int64_t sub_group_size = 1000000000;
  int64_t stage3_prefetch_bucket_size = 50000000;
  int64_t stage3_param_persistence_threshold = 100000;
  int64_t stage3_max_live_parameters = 1000000000;
  int64_t stage3_max_reuse_distance = 1000000000;
  bool stage3_gather_16bit_weights_on_model_save = false;
  OffloadConfig offload_optimizer = OffloadConfig{};
  OffloadConfig offload_param = OffloadConfig{"none", "", false, 5};
};

// ztrain's "offload" section: how offloaded optimizer state is updated and
// moved. Where it lives is DeepSpeed's zero_optimization.offload_optimizer /
// offload_param.
struct OffloadOptions {
  // ZeRO-Offload's delayed parameter update: the CPU optimizer step of step N
  // runs while step N+1's forward and backward run on the device (so step N+1
  // uses the parameters of step N-1). Needs offload_optimizer.device cpu|nvme.
  bool delayed_update = false;
  // Steps run exactly (not delayed) before the delay starts.
  int delayed_update_warmup = 10;
  // NVMe reads and writes: "auto" (io_uring where the kernel allows it, else
  // threads), "io_uring" or "threads"; other than auto needs a device "nvme".
  std::string aio_backend = "auto";
  // Where gradients of the micro-batches of a step add up when they land on
  // the host ([Note: gradients on the host]): "host" (each micro-batch's
  // reduced gradient is copied to the host and added there) or "device" (an
  // fp32 accumulator of the owned shard on the device, 4 bytes per owned
  // parameter, copied to the host once, with the last micro-batch). Needs
  // stage 2 or 3, the optimizer offloaded with ratio 1, and more than one
  // micro-batch per step.
  std::string grad_accumulation = "host";
  // [Note: parameters from the master] (zero/zero_engine.hpp): with
  // offload_param "cpu", keep no 16-bit copy of the parameters on the host
  // and upload them from the fp32 master (2 bytes per parameter less host
  // memory, twice the bytes over PCIe). Needs offload_optimizer "cpu" and
  // no delayed update.
  bool param_from_master = false;
  // [Note: bf16 gradients on the host] (zero/grad_landing.hpp): the dtype
  // of the gradients that land on the host and that the host AdamW reads,
  // "fp32" or "bf16" (rounded once on the device, after the reduction and
  // the accumulation: 2 bytes per owned parameter less host memory and PCIe
  // traffic, 2 fewer for the update to read). Needs the gradients on the
  // host (stage 1-3, offload_optimizer "cpu" or "nvme" with ratio 1, no
  // pipeline) and each gradient landing once a step (no accumulation at
  // stage 2-3, unless one breadth-first group spans the step or
  // grad_accumulation is "device").
  std::string grad_dtype = "fp32";
};

// DeepSpeed's "aio" section: how NVMe offload reads and writes its swap files
// (runtime/aio/aio.hpp, [Note: aio keys]). A value other than the default
// needs an offload device "nvme" (it would do nothing otherwise);
// block_size is checked against the swap directory's direct-I/O alignment
// when the run starts.
struct AioConfig {
  int64_t block_size = 1048576;
  int queue_depth = 8;
  int thread_count = 1;  // DeepSpeed's newer name: intra_op_parallelism
  bool single_submit = false;
  bool overlap_events = true;
};

// DeepSpeed's activation_checkpointing section configures its checkpointing
// API; ztrain's recompute switch is model.activation_checkpointing. Non-default
// values here are accepted with a warning.
struct ActivationCheckpointingConfig {
  bool partition_activations = false;
  bool cpu_checkpointing = false;
  bool contiguous_memory_optimization = false;
  bool synchronize_checkpoint_boundary = false;
  bool profile = false;
  int number_checkpoints = 0;  // 0 = not given (DeepSpeed: null)
};

struct PipelineConfig {
  int parallel_size = 1;
  std::string pipe_schedule_name = "1f1b";  // 1f1b|interleaved|gpipe
  int num_chunks = 1;                       // model chunks per rank (interleaved: >= 2)
  std::string partition = "parameters";     // uniform|parameters
  // ztrain: order of the axes in the rank numbering, fastest first
  // ([Note: rank order] in comm/topology.hpp): "dp-pp" keeps each stage's
  // data-parallel group on consecutive ranks.
  std::string rank_order = "dp-pp";
};

struct CheckpointConfig {
  std::string dir;       // "" = none
  int64_t interval = 0;  // steps between checkpoints; 0 = off
  bool save_at_end = true;  // with dir: save after the last step (as Megatron-LM does)
  int keep_last = 2;     // 0 = keep all
  bool async = false;
  // Check that all ranks save under the same tag. DeepSpeed's strings map to
  // it: "Ignore" -> false, "Warn" and "Fail" -> true (ztrain fails).
  bool tag_validation = true;
};

// The batch triplet. Values the config gives are kept with *_auto false; the
// others (absent or "auto") have *_auto true and are derived by resolve_batch,
// so it can be called again with another data-parallel size. 0 = not resolved.
struct BatchConfig {
  int64_t train_batch_size = 0;
  int64_t micro_batch = 0;  // train_micro_batch_size_per_gpu
  int64_t grad_accum = 0;   // gradient_accumulation_steps
  bool train_auto = true;
  bool micro_auto = true;
  bool accum_auto = true;
};

// Micro-batch per rank when neither train_batch_size nor
// train_micro_batch_size_per_gpu is given.
constexpr int64_t kDefaultMicroBatch = 4;

struct Config {
  std::string source;   // file path, for messages
  nlohmann::json raw;   // after --set overrides, before defaults
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  LogConfig log;
  CommConfig comm;
  CsvMonitorConfig csv_monitor;
  PrometheusConfig prometheus;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  Fp16Config fp16;
  Bf16Config bf16;
  ZeroConfig zero;
  AioConfig aio;
  OffloadOptions offload;
  ActivationCheckpointingConfig activation_checkpointing;
  PipelineConfig pipeline;
  CheckpointConfig checkpoint;
  BatchConfig batch;
  double gradient_clipping = 0.0;  // max global gradient norm; 0 = off
  int64_t steps_per_print = 10;
  bool wall_clock_breakdown = false;
  std::vector<std::string> warnings;  // known DeepSpeed keys that ztrain does not implement, etc.
};

// Reads, parses and validates a config file. `overrides` are "a.b.c=VALUE"
// strings from --set, applied in order before validation (see apply_override).
// JSON comments are allowed; a key given twice in one object is an error.
// Throws zt::UserError.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

// Same, from an already parsed document; `source` names it in messages.
// Relative data paths are checked against the working directory.
Config parse_config(const nlohmann::json& j, const std::string& source,
                    const std::vector<std::string>& overrides = {});

// Applies one --set assignment "a.b.c=VALUE" to `root`. VALUE is parsed as
// JSON; if it is not valid JSON it is taken as a string (data.train=x.bin).
// Missing intermediate objects are created; VALUE null removes the key (back to
// its default). A path through a non-object is a UserError naming the override.
void apply_override(nlohmann::json& root, const std::string& assignment);

// Fills cfg.batch from the given members of the triplet and the data-parallel
// size, with DeepSpeed's rules: train_batch_size = micro * accum * dp. Errors
// show the arithmetic.
void resolve_batch(Config& cfg, int dp_size);

// Rejects features that the config layer accepts but this build cannot run yet
// (ZeRO stages 1-3, offload, fp16, pipeline parallelism, checkpointing), each
// as "<path>: ... is not available yet". Called by parse_config; one table row
// per feature, deleted when the feature lands.
void check_available_features(const Config& cfg);

// The fully resolved config: every section with its defaults filled in and the
// batch triplet as resolved ("auto" where resolve_batch has not run yet). It
// parses back to the same Config (for --dry-run printing and checkpoint
// manifests).
nlohmann::json resolved_json(const Config& cfg);

}  // namespace zt
