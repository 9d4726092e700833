// Entry points of the config layer: reading the file, --set overrides, the
// checks that span sections, and the table of features not available yet.
#include "core/config.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/config_reader.hpp"
#include "core/error.hpp"

namespace zt {

using config_detail::json;
using config_detail::ParseContext;

namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

std::string override_key(const std::string& assignment) { return trim(assignment.substr(0, assignment.find('='))); }

const char* json_kind(const json& v) {
  switch (v.type()) {
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float: return "a number";
    case json::value_t::null: return "null";
    default: return "not an object";
  }
}

// [Note: config nesting] A config is a few levels deep; a document nested
// far deeper (a fuzzer's, or a broken generator's) would exhaust the stack
// in the recursive copies and walks of the parsed value. The text is
// measured before it is parsed: brackets outside strings and comments.
constexpr int kMaxConfigDepth = 64;

int nesting_depth(const std::string& text) {
  int depth = 0, deepest = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {  // a string: skip to its closing quote
      for (++i; i < text.size() && text[i] != '"'; ++i)
        if (text[i] == '\\') ++i;
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      i = text.find('\n', i);
      if (i == std::string::npos) break;
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '*') {
      i = text.find("*/", i + 2);
      if (i == std::string::npos) break;
      ++i;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return deepest;
}

void check_depth(const std::string& text, const std::string& where) {
  if (nesting_depth(text) > kMaxConfigDepth)
    throw UserError(where + "nested more than " + std::to_string(kMaxConfigDepth) +
                    " levels deep (objects and arrays): not a ztrain config");
}

// Rules that involve more than one section.
void check_across_sections(const ParseContext& ctx, const Config& cfg) {
  if (cfg.fp16.enabled && cfg.bf16.enabled)
    ctx.fail("fp16.enabled", "fp16 and bf16 cannot both be enabled; choose one");

  // [Note: activation offload]: the checkpoints of recomputed blocks.
  if (cfg.activation_checkpointing.cpu_checkpointing) {
    if (!cfg.model.activation_checkpointing)
      ctx.fail("activation_checkpointing.cpu_checkpointing",
               "true keeps the checkpoints of recomputed blocks in host memory, but model.activation_checkpointing "
               "is false: nothing is recomputed, so nothing would be kept there; set model.activation_checkpointing "
               "to true, or leave cpu_checkpointing false");
    if (cfg.model.recompute_layers >= 0 && cfg.model.recompute_layers < 2)
      ctx.fail("activation_checkpointing.cpu_checkpointing",
               "true keeps in host memory the output a recomputed block passes to the next recomputed block, but "
               "model.recompute_layers " + std::to_string(cfg.model.recompute_layers) +
                   " recomputes fewer than two blocks: nothing would be kept there; recompute 2 or more, or leave "
                   "cpu_checkpointing false");
  }

  // ztrain's offload section tunes the offload that zero_optimization asks
  // for; with nothing offloaded a setting here would silently do nothing.
  const OffloadOptions& off = cfg.offload;
  const OffloadConfig& opt = cfg.zero.offload_optimizer;
  if (off.delayed_update && opt.device == "none")
    ctx.fail("offload.delayed_update",
             "true needs zero_optimization.offload_optimizer.device \"cpu\" or \"nvme\" (the delayed update "
             "overlaps the offloaded optimizer step with the next step's forward and backward), found \"none\"");
  if (off.grad_accumulation == "device" && (opt.device == "none" || cfg.zero.stage < 2 || opt.ratio < 1.0))
    ctx.fail("offload.grad_accumulation",
             "\"device\" keeps the gradients that land on the host ([Note: gradients on the host]) on the device "
             "until the last micro-batch; they land on the host only at zero_optimization.stage 2 or 3 with "
             "offload_optimizer.device \"cpu\" or \"nvme\" and ratio 1 (found stage " +
                 std::to_string(cfg.zero.stage) + ", device \"" + opt.device + "\", ratio " +
                 std::to_string(opt.ratio) + ")");
  if (off.param_from_master && (cfg.zero.offload_param.device != "cpu" || opt.device != "cpu"))
    ctx.fail("offload.param_from_master",
             "true uploads the parameters from the fp32 master that the host optimizer keeps: it needs "
             "zero_optimization.offload_param.device \"cpu\" and offload_optimizer.device \"cpu\" (found \"" +
                 cfg.zero.offload_param.device + "\" and \"" + opt.device + "\")");
  if (off.param_from_master && off.delayed_update)
    ctx.fail("offload.param_from_master",
             "true uploads the parameters from the master that the delayed update rewrites while the next step "
             "runs: set offload.delayed_update to false, or leave param_from_master false");
  // [Note: bf16 gradients on the host]: the gradients must be on the host.
  if (off.grad_dtype != "fp32") {
    if (opt.device == "none" || cfg.zero.stage < 1 || opt.ratio < 1.0)
      ctx.fail("offload.grad_dtype",
               "\"" + off.grad_dtype + "\" is the dtype of the gradients that land on the host for the offloaded "
               "optimizer; they land there only at zero_optimization.stage 1-3 with offload_optimizer.device "
               "\"cpu\" or \"nvme\" and ratio 1 (found stage " + std::to_string(cfg.zero.stage) + ", device \"" +
                   opt.device + "\", ratio " + std::to_string(opt.ratio) + "); leave it \"fp32\"");
    if (cfg.pipeline.parallel_size > 1)
      ctx.fail("offload.grad_dtype",
               "\"" + off.grad_dtype + "\" with pipeline.parallel_size " + std::to_string(cfg.pipeline.parallel_size) +
                   ": a pipeline lands each micro-batch's gradients and sums the tied embedding's over the stages, "
                   "which would round twice; leave it \"fp32\"");
  }
  // [Note: breadth-first walk]: one stage walks its micro-batches in groups.
  const int group = cfg.train.breadth_first_group;
  if (group > 1 && cfg.pipeline.parallel_size > 1)
    ctx.fail("train.breadth_first_group",
             std::to_string(group) + " walks groups of micro-batches through a whole model on one stage; with "
             "pipeline.parallel_size " + std::to_string(cfg.pipeline.parallel_size) +
             " the pipeline schedule orders them: leave it 1");
  if (group > 1 && off.grad_accumulation == "device")
    ctx.fail("train.breadth_first_group",
             std::to_string(group) + " adds each group's gradients on the device already; offload.grad_accumulation "
             "\"device\" would keep a second accumulator of the whole shard: leave it \"host\"");
  const bool nvme = opt.device == "nvme" || cfg.zero.offload_param.device == "nvme";
  const std::string devices = "neither zero_optimization.offload_optimizer.device nor "
                              "zero_optimization.offload_param.device is \"nvme\" (found \"" +
                              opt.device + "\" and \"" + cfg.zero.offload_param.device + "\")";
  if (off.aio_backend != "auto" && !nvme)
    ctx.fail("offload.aio_backend", "\"" + off.aio_backend + "\" chooses how NVMe offload reads and writes, but " +
                                        devices + "; leave it \"auto\"");
  // DeepSpeed's aio section tunes the NVMe reads and writes only: a value
  // other than the default without NVMe offload would do nothing.
  if (!nvme) {
    const AioConfig a = cfg.aio, d;
    const json* given = cfg.raw.is_object() && cfg.raw.contains("aio") ? &cfg.raw["aio"] : nullptr;
    const bool alias = given && given->is_object() && given->contains("intra_op_parallelism");
    struct Changed {
      bool differs;
      std::string key;
      json value, def;
    };
    const Changed changed[] = {
        {a.block_size != d.block_size, "block_size", a.block_size, d.block_size},
        {a.queue_depth != d.queue_depth, "queue_depth", a.queue_depth, d.queue_depth},
        {a.thread_count != d.thread_count, alias ? "intra_op_parallelism" : "thread_count", a.thread_count,
         d.thread_count},
        {a.single_submit != d.single_submit, "single_submit", a.single_submit, d.single_submit},
        {a.overlap_events != d.overlap_events, "overlap_events", a.overlap_events, d.overlap_events},
    };
    for (const Changed& c : changed)
      if (c.differs)
        ctx.fail("aio." + c.key, c.value.dump() + " tunes the reads and writes of NVMe offload, but " + devices +
                                     "; remove it or leave the default " + c.def.dump());
  }
}

// Parser callback state: DeepSpeed rejects a key given twice in one object
// (json.load with a duplicate-key hook); nlohmann would keep the last silently.
struct DuplicateKeyFinder {
  struct Frame {
    bool is_object;
    std::set<std::string> keys;
    std::string current;
  };
  std::vector<Frame> stack;
  std::string duplicate_path;

  std::string path() const {
    std::string p;
    for (const Frame& f : stack) {
      if (!f.is_object) {
        p += "[]";
        continue;
      }
      if (!f.current.empty()) p += (p.empty() ? "" : ".") + f.current;
    }
    return p;
  }

  bool on_event(json::parse_event_t event, const json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start: stack.push_back({true, {}, {}}); break;
      case json::parse_event_t::array_start: stack.push_back({false, {}, {}}); break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!stack.empty()) stack.pop_back();
        break;
      case json::parse_event_t::key:
        if (!stack.empty()) {
          Frame& f = stack.back();
          f.current = parsed.get<std::string>();
          if (!f.keys.insert(f.current).second && duplicate_path.empty()) duplicate_path = path();
        }
        break;
      case json::parse_event_t::value: break;
    }
    return true;
  }
};

}  // namespace

void apply_override(json& root, const std::string& assignment) {
  const std::string where = "--set " + assignment + ": ";
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos)
    throw UserError(where + "expected KEY=VALUE, e.g. zero_optimization.stage=0 or data.train=tokens.bin");
  // A VALUE that is not JSON is kept as a string, and the key's names become
  // object keys: either would make the config unprintable (--dry-run, the
  // checkpoint manifest) if it were not UTF-8, which JSON text must be.
  try {
    (void)json(assignment).dump();
  } catch (const json::type_error&) {
    throw UserError(where + "not valid UTF-8 text (a config is JSON, whose strings are UTF-8)");
  }
  const std::string key = override_key(assignment);
  const std::string text = assignment.substr(eq + 1);

  std::vector<std::string> parts;
  std::stringstream ss(key);
  for (std::string part; std::getline(ss, part, '.');) parts.push_back(part);
  if (key.empty() || key.back() == '.' || parts.empty())
    throw UserError(where + "expected a key path such as zero_optimization.stage before '='");
  for (const std::string& p : parts)
    if (p.empty()) throw UserError(where + "empty name in key path '" + key + "'");

  // VALUE as JSON (numbers, booleans, arrays, quoted strings); otherwise the
  // text itself, so that paths need no quoting on a command line.
  check_depth(text, where + "VALUE ");
  json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) value = text;

  if (root.is_null()) root = json::object();
  if (!root.is_object()) throw UserError(where + "the config is " + json_kind(root) + ", not an object");
  json* node = &root;
  std::string walked;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    walked = config_detail::join_path(walked, parts[i]);
    json& next = (*node)[parts[i]];
    if (next.is_null()) next = json::object();
    if (!next.is_object())
      throw UserError(where + "'" + walked + "' is " + json_kind(next) + " (" + config_detail::show(next) +
                      "), not an object");
    node = &next;
  }
  if (value.is_null())
    node->erase(parts.back());  // back to the default
  else
    (*node)[parts.back()] = std::move(value);
}

std::vector<std::string> split_path_list(const std::string& list) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= list.size()) {
    size_t comma = list.find(',', at);
    if (comma == std::string::npos) comma = list.size();
    const std::string item = list.substr(at, comma - at);
    const size_t first = item.find_first_not_of(" \t"), last = item.find_last_not_of(" \t");
    if (first != std::string::npos) out.push_back(item.substr(first, last - first + 1));
    at = comma + 1;
  }
  return out;
}

void check_available_features(const Config& cfg) {
  // [Note: features not available yet] The config layer knows every key the
  // design has; this table lists the settings the rest of this build cannot run
  // yet. A feature's row is deleted by the change that implements it.
  struct Unavailable {
    bool requested;
    const char* path;
    std::string found;
    const char* available_now;
  };
  // Every feature of the design runs now: no rows (offload_param "nvme" was
  // the last).
  const std::vector<Unavailable> rows = {};
  ParseContext ctx{cfg.source, nullptr, {}};
  for (const Unavailable& row : rows)
    if (row.requested) ctx.fail(row.path, row.found + " is not available yet in this version of ztrain (" +
                                              row.available_now + ")");
}

Config parse_config(const json& j, const std::string& source, const std::vector<std::string>& overrides) {
  Config cfg;
  cfg.source = source;
  cfg.raw = j;
  ParseContext ctx{source, &cfg.warnings, {}};
  for (const std::string& o : overrides) {
    try {
      apply_override(cfg.raw, o);
    } catch (const UserError& e) {
      throw UserError((source.empty() ? std::string("<config>") : source) + ": " + e.what());
    }
    ctx.overrides.emplace_back(override_key(o), o);
  }

  const config_detail::SectionReader top(ctx, &cfg.raw, config_detail::schema(""));
  config_detail::parse_batch_triplet(top, cfg);
  config_detail::parse_deepspeed_sections(top, cfg);
  config_detail::parse_ztrain_sections(top, cfg);
  check_across_sections(ctx, cfg);
  config_detail::warn_inert_keys(ctx, cfg);
  check_available_features(cfg);
  return cfg;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw UserError(path + ": is a directory, not a config file (a ztrain config is one JSON file)");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(path + ": cannot open config file: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();

  check_depth(text.str(), path + ": ");
  DuplicateKeyFinder dup;
  json j;
  try {
    j = json::parse(
        text.str(), [&](int, json::parse_event_t event, json& parsed) { return dup.on_event(event, parsed); },
        /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const json::exception& e) {
    // A syntax error, or a number out of range (1e400). Drop nlohmann's
    // "[json.exception.parse_error.101] " prefix.
    std::string what = e.what();
    const size_t close = what.find("] ");
    if (what.rfind("[json.exception", 0) == 0 && close != std::string::npos) what = what.substr(close + 2);
    throw UserError(path + ": invalid JSON: " + what);
  }
  if (!dup.duplicate_path.empty()) throw UserError(path + ": " + dup.duplicate_path + ": key given twice");
  // `null`, `[]` or `3` would otherwise read as a config of defaults.
  if (!j.is_object()) throw UserError(path + ": the config is " + json_kind(j) + ", not a JSON object ({...})");
  return parse_config(j, path, overrides);
}

}  // namespace zt
