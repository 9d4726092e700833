// ztrain's own sections: model (architecture, presets), data (files must exist), train,
// offload, checkpoint and log.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "core/config_reader.hpp"
#include "core/error.hpp"

namespace zt::config_detail {

namespace {

struct ModelPreset {
  const char* name;
  const char* arch;
  int n_layer, n_head, d_model, seq_len, vocab_size;
  // Llama only: intermediate_size, num_key_value_heads, rms_norm_eps,
  // rope_theta, rope_scaling, tie_word_embeddings.
  int ffn = 0, kv_heads = 0;
  double eps = 1e-5, theta = 10000.0;
  RopeScalingConfig scaling = {};
  bool tie = false;
};

constexpr RopeScalingConfig kNoScaling{};
// Llama 3.1's and 3.2's published scalings (their config.json rope_scaling).
constexpr RopeScalingConfig kLlama31Scaling{true, 8.0, 1.0, 4.0, 8192};
constexpr RopeScalingConfig kLlama32Scaling{true, 32.0, 1.0, 4.0, 8192};
// llama-tiny's: its 16-wide heads have wavelengths from 6 to 20,000
// positions, so with original 256 (high band < 64, low band > 256) every
// regime of the llama3 scaling is exercised.
constexpr RopeScalingConfig kTinyScaling{true, 4.0, 1.0, 4.0, 256};

// GPT-2 shapes as in the GPT-2 and GPT-3 papers; "tiny" is the test model.
// Llama shapes as the published Hugging Face config.json files (meta-llama/
// Llama-2-{7b,13b,70b}-hf, Meta-Llama-3-{8B,70B}, Llama-3.1-{8B,70B},
// Llama-3.2-1B); seq_len is max_position_embeddings, except Llama 3.1's and
// 3.2's 131,072, which is reached by the rope scaling from its original 8,192
// (the training length here).
// "llama-tiny" is the Llama test model: grouped-query (2 kv heads of 4) with
// the llama3 scaling.
const ModelPreset kModelPresets[] = {
    {"tiny", "gpt2", 2, 4, 64, 64, 256},
    {"gpt2-124m", "gpt2", 12, 12, 768, 1024, 50257},
    {"gpt2-350m", "gpt2", 24, 16, 1024, 1024, 50257},
    {"gpt2-1.3b", "gpt2", 24, 32, 2048, 1024, 50257},
    {"llama-tiny", "llama", 2, 4, 64, 64, 256, 176, 2, 1e-5, 10000.0, kTinyScaling, false},
    {"llama2-7b", "llama", 32, 32, 4096, 4096, 32000, 11008, 32, 1e-5, 10000.0, kNoScaling, false},
    {"llama2-13b", "llama", 40, 40, 5120, 4096, 32000, 13824, 40, 1e-5, 10000.0, kNoScaling, false},
    {"llama2-70b", "llama", 80, 64, 8192, 4096, 32000, 28672, 8, 1e-5, 10000.0, kNoScaling, false},
    {"llama3-8b", "llama", 32, 32, 4096, 8192, 128256, 14336, 8, 1e-5, 500000.0, kNoScaling, false},
    {"llama3-70b", "llama", 80, 64, 8192, 8192, 128256, 28672, 8, 1e-5, 500000.0, kNoScaling, false},
    {"llama3.1-8b", "llama", 32, 32, 4096, 8192, 128256, 14336, 8, 1e-5, 500000.0, kLlama31Scaling, false},
    {"llama3.1-70b", "llama", 80, 64, 8192, 8192, 128256, 28672, 8, 1e-5, 500000.0, kLlama31Scaling, false},
    {"llama3.2-1b", "llama", 16, 32, 2048, 8192, 128256, 8192, 8, 1e-5, 500000.0, kLlama32Scaling, true},
};

// The keys that only one architecture reads: given for another, refused by name.
const char* const kLlamaKeys[] = {"intermediate_size", "num_key_value_heads", "rms_norm_eps",
                                  "rope_theta",        "rope_scaling",        "tie_word_embeddings"};

// Token shards hold uint16 or uint32 ids (src/io/token_shard.hpp) and the
// trainer's token tensors are int32. 2^24 is far above any published
// vocabulary (Llama 3: 128,256) and keeps the CUDA classifier's row grid
// (ceil(V / 512) <= 65535 blocks) and its int-sized chunks in range.
constexpr int64_t kMaxVocab = int64_t{1} << 24;

// model.rope_scaling: absent or null keeps the preset's; an object is
// rope_type (transformers' older configs say "type") "default" (no scaling,
// as in transformers) or "llama3" with all four numbers. Other types
// (linear, dynamic, yarn, ...) are refused by name.
RopeScalingConfig parse_rope_scaling(const SectionReader& m, const RopeScalingConfig& def) {
  if (!m.has("rope_scaling")) return def;
  if (!m.find("rope_scaling")->is_object())
    m.fail("rope_scaling", "expected an object (\"rope_type\": \"llama3\" and its four keys) or null, found " +
                               show(*m.find("rope_scaling")));
  const SectionReader r = m.section("rope_scaling", "model.rope_scaling");
  const std::string type_key = r.pick_alias({"rope_type", "type"});
  if (!r.has(type_key)) r.fail("rope_type", "required (\"llama3\")");
  const std::string type = r.string(type_key, "");
  const char* const numbers[] = {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
  RopeScalingConfig s;
  if (type == "default") {
    for (const char* key : numbers)
      if (r.has(key)) r.fail(key, "applies to rope_type \"llama3\" only; this rope_type is \"default\"");
    return s;
  }
  if (type != "llama3")
    r.fail(type_key, "rope scaling \"" + type + "\" is not supported; ztrain implements \"llama3\" (and \"default\": none)");
  s.llama3 = true;
  for (const char* key : numbers)
    if (!r.has(key)) r.fail(key, "required for rope_type \"llama3\"");
  s.factor = r.number("factor", 0, above(0));
  s.low_freq_factor = r.number("low_freq_factor", 0, above(0));
  s.high_freq_factor = r.number("high_freq_factor", 0, above(0));
  s.original_max_position_embeddings =
      static_cast<int>(r.integer("original_max_position_embeddings", 0, 1, kIntMax));
  if (s.high_freq_factor <= s.low_freq_factor)
    r.fail("high_freq_factor", "must be greater than low_freq_factor (" + show(s.low_freq_factor) + "), found " +
                                   show(s.high_freq_factor));
  return s;
}

void parse_model(const SectionReader& top, Config& cfg) {
  const SectionReader r = top.section("model", "model");
  ModelConfig& m = cfg.model;
  std::vector<std::string> names;
  for (const ModelPreset& p : kModelPresets) names.push_back(p.name);
  // Explicit sizes override the preset's; without a preset they override the
  // tiny preset of the architecture ("tiny", "llama-tiny").
  const std::string preset_name = r.choice("preset", "", names);
  ModelPreset base = kModelPresets[0];
  for (const ModelPreset& p : kModelPresets)
    if (preset_name == p.name) base = p;

  // The architecture: the preset's (tiny's without one) unless given.
  m.arch = r.choice("arch", base.arch, model_architectures());
  if (!preset_name.empty() && m.arch != base.arch)
    r.fail("arch", "\"" + m.arch + "\" contradicts preset \"" + preset_name + "\", a \"" + base.arch + "\"");
  if (preset_name.empty() && m.arch == "llama")
    for (const ModelPreset& p : kModelPresets)
      if (std::string(p.name) == "llama-tiny") base = p;
  if (m.arch != "llama")
    for (const char* key : kLlamaKeys)
      if (r.has(key)) r.fail(key, "applies to model.arch \"llama\" only; this model is a \"" + m.arch + "\"");

  bool any_size = false;
  auto size = [&](const std::string& key, int def, int64_t lo, int64_t hi) {
    any_size = any_size || r.has(key);
    return static_cast<int>(r.integer(key, def, lo, hi));
  };
  m.n_layer = size("n_layer", base.n_layer, 1, kIntMax);
  m.n_head = size("n_head", base.n_head, 1, kIntMax);
  m.d_model = size("d_model", base.d_model, 1, kIntMax);
  m.seq_len = size("seq_len", base.seq_len, 1, kIntMax);
  m.vocab_size = size("vocab_size", base.vocab_size, 2, kMaxVocab);
  if (m.arch == "llama") {
    m.intermediate_size = size("intermediate_size", base.ffn, 1, kIntMax);
    m.num_key_value_heads = size("num_key_value_heads", base.kv_heads, 1, kIntMax);
    m.rms_norm_eps = r.number("rms_norm_eps", base.eps, above(0));
    m.rope_theta = r.number("rope_theta", base.theta, above(0));
    m.rope_scaling = parse_rope_scaling(r, base.scaling);
    m.tie_word_embeddings = r.boolean("tie_word_embeddings", base.tie);
    any_size = any_size || r.has("rms_norm_eps") || r.has("rope_theta") || r.has("rope_scaling") ||
               r.has("tie_word_embeddings");
  }
  m.activation_checkpointing = r.boolean("activation_checkpointing", ModelConfig{}.activation_checkpointing);
  m.recompute_layers = static_cast<int>(r.integer("recompute_layers", -1, 0, kIntMax));
  if (r.has("recompute_layers") && !m.activation_checkpointing)
    r.fail("recompute_layers",
           "counts the blocks that recompute under activation checkpointing, which is off: set "
           "model.activation_checkpointing to true, or leave recompute_layers out");
  m.init_from = r.string("init_from", "");
  if (r.has("init_from") && m.init_from.empty()) r.fail("init_from", "expected a directory, found \"\"");
  // Absolute, for checkpoint manifests (zckpt export follows it to a
  // tokenizer); whether it exists is the trainer's check when it reads it,
  // so a manifest naming a directory removed since still parses.
  if (!m.init_from.empty()) m.init_from = std::filesystem::absolute(m.init_from).lexically_normal().string();
  // No preset: the tiny one when the sizes are its, "" (custom) once any is given.
  m.preset = !preset_name.empty() ? preset_name : any_size ? "" : base.name;

  if (m.d_model % m.n_head != 0)
    r.fail(r.has("d_model") || !r.has("n_head") ? "d_model" : "n_head",
           "d_model (" + std::to_string(m.d_model) + ") must be divisible by n_head (" + std::to_string(m.n_head) +
               ")");
  if (m.arch == "llama") {
    if (m.n_head % m.num_key_value_heads != 0)
      r.fail(r.has("num_key_value_heads") || !r.has("n_head") ? "num_key_value_heads" : "n_head",
             "num_key_value_heads (" + std::to_string(m.num_key_value_heads) + ") must divide n_head (" +
                 std::to_string(m.n_head) + ")");
    if ((m.d_model / m.n_head) % 2 != 0)
      r.fail(r.has("d_model") ? "d_model" : "n_head",
             "the head size d_model / n_head (" + std::to_string(m.d_model / m.n_head) +
                 ") must be even for rotary embeddings");
  }
}

// Existence is checked here so a typo fails at start-up on every rank with the
// file's name; the io layer checks the format.
void check_readable_file(const SectionReader& r, const std::string& key, const std::string& file,
                         const char* what = "a token file") {
  namespace fs = std::filesystem;
  if (file.empty()) r.fail(key, "expected a file name, found \"\"");
  std::error_code ec;
  const fs::file_status st = fs::status(file, ec);
  std::string where;
  if (fs::path(file).is_relative()) {
    std::error_code cwd_ec;
    where = " (relative to the working directory " + fs::current_path(cwd_ec).string() + ")";
  }
  if (!fs::exists(st)) r.fail(key, "file \"" + file + "\" does not exist" + where);
  if (fs::is_directory(st)) r.fail(key, "\"" + file + "\" is a directory, expected " + what);
  std::ifstream in(file, std::ios::binary);
  if (!in) r.fail(key, "file \"" + file + "\" cannot be opened for reading" + where);
}

void parse_data(const SectionReader& top, Config& cfg) {
  const SectionReader r = top.section("data", "data");
  DataConfig& d = cfg.data;
  d = DataConfig{};
  if (!r.present()) return;  // built-in corpus
  // resolved_json writes {"embedded": true} for the built-in corpus.
  d.embedded = r.boolean("embedded", false);
  if (d.embedded) {
    for (const char* key : {"train", "val", "tokenizer"})
      if (r.has(key)) r.fail(key, "cannot be given together with data.embedded: true");
    if (r.boolean("packing", false))
      r.fail("packing", "the built-in corpus has no example boundaries to pack (packing needs data from zdata finetune)");
    return;
  }
  d.packing = r.boolean("packing", false);
  if (!r.has("train"))
    r.fail("train", "required when the config has a \"data\" section (leave the section out to train on the "
                    "built-in corpus)");
  // Each shard of the comma list must be readable, split as the reader
  // splits it (split_path_list, TokenDataset::open_list).
  const auto check_shards = [&r](const char* key, const std::string& list) {
    const std::vector<std::string> files = split_path_list(list);
    if (files.empty()) r.fail(key, "expected a file name or a comma list of them, found \"" + list + "\"");
    for (const std::string& f : files) check_readable_file(r, key, f);
  };
  d.train = r.string("train", "");
  check_shards("train", d.train);
  d.val = r.string("val", "");
  if (r.has("val")) check_shards("val", d.val);
  if (r.has("tokenizer")) {
    d.tokenizer = r.string("tokenizer", "");
    check_readable_file(r, "tokenizer", d.tokenizer, "a tokenizer file (tokenizer.json or a SentencePiece .model)");
    d.tokenizer = std::filesystem::absolute(d.tokenizer).lexically_normal().string();  // read later by zckpt export
  }
}

void parse_train(const SectionReader& top, Config& cfg) {
  const SectionReader r = top.section("train", "train");
  const TrainConfig d;
  TrainConfig& t = cfg.train;
  t.steps = r.integer("steps", d.steps, 1, kInt64Max);
  t.seed = r.unsigned_integer("seed", d.seed);
  t.eval_interval = static_cast<int>(r.integer("eval_interval", d.eval_interval, 0, kIntMax));
  t.eval_steps = static_cast<int>(r.integer("eval_steps", d.eval_steps, 1, kIntMax));
  // Absent (or null) is no cap; a cap of 0 would refuse every allocation, so
  // a given value must be positive.
  t.device_memory_cap_gib = r.number("device_memory_cap_gib", d.device_memory_cap_gib, above(0));
  t.nonfinite_tolerance = static_cast<int>(r.integer("nonfinite_tolerance", d.nonfinite_tolerance, 0, kIntMax));
  t.breadth_first_group = static_cast<int>(r.integer("breadth_first_group", d.breadth_first_group, 1, kIntMax));
  // Absent (or null) is the backend's default; a given bound must be positive.
  t.classifier_chunk_mib = r.number("classifier_chunk_mib", d.classifier_chunk_mib, above(0));
}

// Only the values here; the rules that involve zero_optimization's offload
// devices are checked across sections (config.cpp).
void parse_offload_options(const SectionReader& top, Config& cfg) {
  const SectionReader r = top.section("offload", "offload");
  const OffloadOptions d;
  OffloadOptions& o = cfg.offload;
  o.delayed_update = r.boolean("delayed_update", d.delayed_update);
  o.delayed_update_warmup =
      static_cast<int>(r.integer("delayed_update_warmup", d.delayed_update_warmup, 0, kIntMax));
  o.aio_backend = r.choice("aio_backend", d.aio_backend, {"auto", "io_uring", "threads"});
  o.grad_accumulation = r.choice("grad_accumulation", d.grad_accumulation, {"host", "device"});
  o.param_from_master = r.boolean("param_from_master", d.param_from_master);
  o.grad_dtype = r.choice("grad_dtype", d.grad_dtype, {"fp32", "bf16"});
}

void parse_checkpoint(const SectionReader& top, Config& cfg) {
  const SectionReader r = top.section("checkpoint", "checkpoint");
  const CheckpointConfig d;
  CheckpointConfig& c = cfg.checkpoint;
  c.dir = r.string("dir", d.dir);
  c.interval = r.integer("interval", d.interval, 0, kInt64Max);
  c.save_at_end = r.boolean("save_at_end", d.save_at_end);
  c.keep_last = static_cast<int>(r.integer("keep_last", d.keep_last, 0, kIntMax));
  c.async = r.boolean("async", d.async);
  // A bool, or DeepSpeed's mode names; "Warn" becomes a failing check because
  // ranks that disagree on the tag would write a checkpoint that cannot resume.
  c.tag_validation = d.tag_validation;
  if (const json* v = r.find("tag_validation")) {
    if (v->is_boolean()) {
      c.tag_validation = v->get<bool>();
    } else if (v->is_string()) {
      c.tag_validation = r.choice("tag_validation", "Warn", {"Ignore", "Warn", "Fail"}) != "Ignore";
    } else {
      r.fail("tag_validation", "expected true, false, \"Ignore\", \"Warn\" or \"Fail\", found " + show(*v));
    }
  }
  if (c.interval > 0 && c.dir.empty())
    r.fail("interval", "checkpoints every " + std::to_string(c.interval) + " steps need checkpoint.dir");
  if (!c.dir.empty() && c.interval == 0)
    r.warn("interval", c.save_at_end ? "absent or 0: checkpoint.dir gets a checkpoint only at the end of the run and "
                                       "on SIGTERM/SIGUSR1; set checkpoint.interval to save during the run"
                                     : "absent or 0 with save_at_end false: checkpoint.dir gets a checkpoint only on "
                                       "SIGTERM/SIGUSR1");
}

void parse_log(const SectionReader& top, Config& cfg) {
  const SectionReader r = top.section("log", "log");
  cfg.log.dir = r.string("dir", LogConfig{}.dir);
  if (cfg.log.dir.empty()) r.fail("dir", "expected a directory name, found \"\"");
}

void parse_csv_monitor(const SectionReader& top, Config& cfg) {
  const SectionReader r = top.section("csv_monitor", "csv_monitor");
  const CsvMonitorConfig d;
  CsvMonitorConfig& c = cfg.csv_monitor;
  c.enabled = r.boolean("enabled", d.enabled);
  c.output_path = r.string("output_path", d.output_path);
  c.job_name = r.string("job_name", d.job_name);
  if (c.job_name.empty() || c.job_name.find('/') != std::string::npos)
    r.fail("job_name", "expected a directory name without '/', found \"" + c.job_name + "\"");
}

void parse_prometheus(const SectionReader& top, Config& cfg) {
  const SectionReader r = top.section("prometheus", "prometheus");
  const PrometheusConfig d;
  PrometheusConfig& c = cfg.prometheus;
  c.enabled = r.boolean("enabled", d.enabled);
  c.port = static_cast<int>(r.integer("port", d.port, 0, 65535));
  c.textfile_dir = r.string("textfile_dir", d.textfile_dir);
  if (c.enabled && c.port == 0 && c.textfile_dir.empty())
    r.fail("port", "0 (no HTTP server) needs prometheus.textfile_dir, or there is nowhere to export to");
}

// "comm". ZTRAIN_COMM_TIMEOUT overrides comm.timeout (job scripts set it
// without editing the config). NCCL_TIMEOUT is no NCCL variable and bounds
// nothing: a warning says so rather than letting it look like a setting.
void parse_comm(const SectionReader& top, Config& cfg) {
  const SectionReader r = top.section("comm", "comm");
  const CommConfig d;
  CommConfig& c = cfg.comm;
  c.timeout = r.number("timeout", d.timeout, above(0));
  c.flight_recorder_size = r.integer("flight_recorder_size", d.flight_recorder_size, 0, 1 << 24);
  if (const char* env = std::getenv("ZTRAIN_COMM_TIMEOUT"); env != nullptr) {
    char* end = nullptr;
    const double v = std::strtod(env, &end);
    if (end == env || *end != '\0' || !(v > 0) || !std::isfinite(v))
      ZT_USER_ERROR("ZTRAIN_COMM_TIMEOUT='", env, "': expected a number of seconds > 0");
    if (r.has("timeout") && v != c.timeout)
      r.warn("timeout", show(json(c.timeout)) + " is overridden by the environment's ZTRAIN_COMM_TIMEOUT=" + env);
    c.timeout = v;
  }
  if (std::getenv("NCCL_TIMEOUT") != nullptr)
    cfg.warnings.push_back(std::string("NCCL_TIMEOUT is set (") + std::getenv("NCCL_TIMEOUT") +
                           ") but has no effect: NCCL reads no such variable. ztrain's collective timeout is "
                           "\"comm\": {\"timeout\": seconds} or ZTRAIN_COMM_TIMEOUT (docs/reliability.md)");
}

}  // namespace

void parse_ztrain_sections(const SectionReader& top, Config& cfg) {
  parse_model(top, cfg);
  parse_data(top, cfg);
  parse_train(top, cfg);
  parse_offload_options(top, cfg);
  parse_checkpoint(top, cfg);
  parse_log(top, cfg);
  parse_csv_monitor(top, cfg);
  parse_prometheus(top, cfg);
  parse_comm(top, cfg);
}

}  // namespace zt::config_detail

namespace zt {

const std::vector<std::string>& model_architectures() {
  static const std::vector<std::string> names = {"gpt2", "llama"};
  return names;
}

}  // namespace zt
