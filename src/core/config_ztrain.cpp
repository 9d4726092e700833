// ztrain's own sections: model (architecture, presets), data (files must exist), train,
// offload, checkpoint and log.
#include <filesystem>
#include <fstream>
#include <system_error>

#include "core/config_reader.hpp"

namespace zt::config_detail {

namespace {

struct ModelPreset {
  const char* name;
  const char* arch;
  int n_layer, n_head, d_model, seq_len, vocab_size;
};

// GPT-2 shapes as in the GPT-2 and GPT-3 papers; "tiny" is the test model.
const ModelPreset kModelPresets[] = {
    {"tiny", "gpt2", 2, 4, 64, 64, 256},
    {"gpt2-124m", "gpt2", 12, 12, 768, 1024, 50257},
    {"gpt2-350m", "gpt2", 24, 16, 1024, 1024, 50257},
    {"gpt2-1.3b", "gpt2", 24, 32, 2048, 1024, 50257},
};

// Tokens are stored as uint16, so ids must fit in 0..65535.
constexpr int64_t kMaxVocab = 65536;

void parse_model(const SectionReader& top, Config& cfg) {
  const SectionReader r = top.section("model", "model");
  ModelConfig& m = cfg.model;
  std::vector<std::string> names;
  for (const ModelPreset& p : kModelPresets) names.push_back(p.name);
  // Explicit sizes override the preset's; without a preset they override tiny's.
  const std::string preset_name = r.choice("preset", "", names);
  ModelPreset base = kModelPresets[0];
  for (const ModelPreset& p : kModelPresets)
    if (preset_name == p.name) base = p;

  // The architecture: the preset's (tiny's without one) unless given.
  m.arch = r.choice("arch", base.arch, model_architectures());

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
  m.activation_checkpointing = r.boolean("activation_checkpointing", ModelConfig{}.activation_checkpointing);
  // No preset: "tiny" when the sizes are tiny's, "" (custom) once any is given.
  m.preset = !preset_name.empty() ? preset_name : any_size ? "" : "tiny";

  if (m.d_model % m.n_head != 0)
    r.fail(r.has("d_model") || !r.has("n_head") ? "d_model" : "n_head",
           "d_model (" + std::to_string(m.d_model) + ") must be divisible by n_head (" + std::to_string(m.n_head) +
               ")");
}

// Existence is checked here so a typo fails at start-up on every rank with the
// file's name; the io layer checks the format.
void check_readable_file(const SectionReader& r, const std::string& key, const std::string& file) {
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
  if (fs::is_directory(st)) r.fail(key, "\"" + file + "\" is a directory, expected a token file");
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
    for (const char* key : {"train", "val"})
      if (r.has(key)) r.fail(key, "cannot be given together with data.embedded: true");
    return;
  }
  if (!r.has("train"))
    r.fail("train", "required when the config has a \"data\" section (leave the section out to train on the "
                    "built-in corpus)");
  d.train = r.string("train", "");
  check_readable_file(r, "train", d.train);
  d.val = r.string("val", "");
  if (r.has("val")) check_readable_file(r, "val", d.val);
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
}

void parse_checkpoint(const SectionReader& top, Config& cfg) {
  const SectionReader r = top.section("checkpoint", "checkpoint");
  const CheckpointConfig d;
  CheckpointConfig& c = cfg.checkpoint;
  c.dir = r.string("dir", d.dir);
  c.interval = r.integer("interval", d.interval, 0, kInt64Max);
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
}

void parse_log(const SectionReader& top, Config& cfg) {
  const SectionReader r = top.section("log", "log");
  cfg.log.dir = r.string("dir", LogConfig{}.dir);
  if (cfg.log.dir.empty()) r.fail("dir", "expected a directory name, found \"\"");
}

}  // namespace

void parse_ztrain_sections(const SectionReader& top, Config& cfg) {
  parse_model(top, cfg);
  parse_data(top, cfg);
  parse_train(top, cfg);
  parse_offload_options(top, cfg);
  parse_checkpoint(top, cfg);
  parse_log(top, cfg);
}

}  // namespace zt::config_detail

namespace zt {

const std::vector<std::string>& model_architectures() {
  static const std::vector<std::string> names = {"gpt2"};
  return names;
}

}  // namespace zt
