// Internal to the config layer: the schema (which keys each section allows) and
// a reader that checks one JSON object against it and reads typed values with
// path-aware messages. Only src/core/config*.cpp include this.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config.hpp"

namespace zt::config_detail {

using nlohmann::json;

// A DeepSpeed key that ztrain accepts without implementing it. A warning is
// recorded unless the value is null, equals `harmless` (DeepSpeed's default),
// or is an object with "enabled": false.
//
// [Note: features that change what is trained] A DeepSpeed feature that
// would change the model, its arithmetic or its data (sparse attention,
// curriculum learning, AMP, tensor parallelism, ...) is refused instead when
// the config turns it on (`refused`): training without it would give
// another run than the one asked for, with a warning lost among the ranks'
// output. Monitoring and profiling sections stay warnings.
struct IgnoredKey {
  std::string name;
  json harmless;
  std::string note;  // appended to the warning when not empty
  bool refused = false;
};

// Whether a DeepSpeed feature section turns its feature on: a scalar other
// than null, false or 0; an object whose own "enabled" is true, or without
// one, some "enabled": true inside it, or no "enabled" anywhere and some
// key at all (sparse_attention's {"mode": ...}); "autotp_size" above 1
// (tensor_parallel).
bool feature_turned_on(const json& v);

struct SectionSchema {
  std::string id;    // unique: the JSON path, plus "/Type" for variants (scheduler params)
  std::string path;  // JSON path shown in messages; "" = top level
  std::vector<std::string> keys;  // keys ztrain reads
  std::vector<IgnoredKey> ignored;
};

const std::vector<SectionSchema>& all_schemas();
const SectionSchema& schema(const std::string& id);  // ZT_CHECKs that it exists

// Where messages go. Overrides are remembered so that an error about a value
// set on the command line says so.
struct ParseContext {
  std::string source;
  std::vector<std::string>* warnings = nullptr;
  std::vector<std::pair<std::string, std::string>> overrides;  // (key path, assignment)

  [[noreturn]] void fail(const std::string& path, const std::string& what) const;
  void warn(const std::string& path, const std::string& what) const;
};

// Warnings for keys given where they do nothing ([Note: inert keys] in
// config_inert.cpp), after every section is parsed and checked.
void warn_inert_keys(const ParseContext& ctx, const Config& cfg);

std::string join_path(const std::string& parent, const std::string& key);
// A JSON value for messages: strings quoted, long values shortened.
std::string show(const json& v);
// Optimal string alignment distance (edits plus adjacent transpositions).
int edit_distance(const std::string& a, const std::string& b);
// The candidate nearest to `word` if it is close enough to be a likely typo.
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);
std::string to_lower(std::string s);

// Bounds for real-valued keys.
struct NumberRange {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false;
  bool hi_open = false;
  std::string describe() const;  // "a number > 0", "a number in [0, 1)"
  bool contains(double x) const;
};
NumberRange at_least(double lo);
NumberRange above(double lo);
NumberRange in_closed(double lo, double hi);
NumberRange in_half_open(double lo, double hi);  // [lo, hi)

constexpr int64_t kIntMax = std::numeric_limits<int>::max();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// Reads one JSON object at a known path. Construction checks that it is an
// object and that every key is known (unknown: error with the nearest key;
// DeepSpeed-only: warning). Every getter returns `def` for an absent or null
// key. A key read here must be listed in the schema (checked).
class SectionReader {
 public:
  SectionReader(const ParseContext& ctx, const json* obj, const SectionSchema& schema,
                std::string display_path = {});

  bool present() const { return obj_ != nullptr; }
  const std::string& path() const { return path_; }
  std::string path_of(const std::string& key) const { return join_path(path_, key); }
  const json* find(const std::string& key) const;  // nullptr when absent or null
  bool has(const std::string& key) const { return find(key) != nullptr; }
  [[noreturn]] void fail(const std::string& key, const std::string& what) const;
  void warn(const std::string& key, const std::string& what) const;

  bool boolean(const std::string& key, bool def) const;
  int64_t integer(const std::string& key, int64_t def, int64_t lo, int64_t hi) const;
  uint64_t unsigned_integer(const std::string& key, uint64_t def) const;
  double number(const std::string& key, double def, const NumberRange& range) const;
  std::string string(const std::string& key, const std::string& def) const;
  // One of `options`, matched case-insensitively; returns the option's spelling.
  std::string choice(const std::string& key, const std::string& def,
                     const std::vector<std::string>& options) const;

  // The sub-object `key`, checked against schema `schema_id`.
  SectionReader section(const std::string& key, const std::string& schema_id) const;
  // Of several names for one setting (DeepSpeed aliases), the one given, or
  // `names[0]` when none is; two given is an error.
  std::string pick_alias(const std::vector<std::string>& names) const;

 private:
  void check_keys() const;
  void check_known(const std::string& key) const;

  const ParseContext& ctx_;
  const json* obj_;
  const SectionSchema& schema_;
  std::string path_;
};

// Section parsers, each filling its part of `cfg` from the top-level reader.
void parse_batch_triplet(const SectionReader& top, Config& cfg);            // config_batch.cpp
void parse_deepspeed_sections(const SectionReader& top, Config& cfg);       // config_deepspeed.cpp
void parse_ztrain_sections(const SectionReader& top, Config& cfg);          // config_ztrain.cpp

}  // namespace zt::config_detail
