// SectionReader: key checking with suggestions, and typed reads whose messages
// name the JSON path, what was expected and what was found.
#include "core/config_reader.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

#include "core/error.hpp"

namespace zt::config_detail {

// ---------------------------------------------------------------- messages

void ParseContext::fail(const std::string& path, const std::string& what) const {
  std::string msg = (source.empty() ? std::string("<config>") : source) + ": ";
  if (!path.empty()) msg += path + ": ";
  msg += what;
  // A value that came from the command line is easy to miss in the file.
  std::string from;
  for (const auto& [key, assignment] : overrides) {
    if (path == key || path.rfind(key + ".", 0) == 0) from = assignment;
  }
  if (!from.empty()) msg += " (set by --set " + from + ")";
  throw UserError(msg);
}

void ParseContext::warn(const std::string& path, const std::string& what) const {
  if (warnings) warnings->push_back((source.empty() ? std::string("<config>") : source) + ": " + path + ": " + what);
}

std::string join_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

std::string show(const json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

std::string to_lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

int edit_distance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<int>> d(n + 1, std::vector<int>(m + 1, 0));
  for (size_t i = 0; i <= n; ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= m; ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);  // "stgae" -> "stage" is one edit
    }
  }
  return d[n][m];
}

std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string w = to_lower(word);
  // Allow more edits in longer names, few enough that the suggestion is likely
  // what was meant.
  const int allowed = w.size() <= 4 ? 1 : w.size() <= 8 ? 2 : 3;
  std::string best;
  int best_d = allowed + 1;
  for (const std::string& c : candidates) {
    const int d = edit_distance(w, to_lower(c));
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

namespace {

std::string format_number(double x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::string join(const std::vector<std::string>& v, const std::string& sep, const std::string& quote = "") {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + quote + v[i] + quote;
  return out;
}

// HuggingFace's DeepSpeed integration fills "auto" values in before DeepSpeed
// sees them; say so instead of only "expected a number".
std::string auto_hint(const json& v) {
  if (v.is_string() && to_lower(v.get<std::string>()) == "auto")
    return " (\"auto\" is a HuggingFace Trainer placeholder; ztrain accepts it only for "
           "train_batch_size, train_micro_batch_size_per_gpu and gradient_accumulation_steps)";
  return "";
}

enum class IntRead { ok, not_integer, out_of_range };

// JSON has one number type; integral floats such as 5e8 are valid integers.
IntRead read_int(const json& v, int64_t& out) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(kInt64Max)) return IntRead::out_of_range;
    out = static_cast<int64_t>(u);
    return IntRead::ok;
  }
  if (v.is_number_integer()) {
    out = v.get<int64_t>();
    return IntRead::ok;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d)) return IntRead::not_integer;
    if (std::fabs(d) >= 9.2e18) return IntRead::out_of_range;
    out = static_cast<int64_t>(d);
    return IntRead::ok;
  }
  return IntRead::not_integer;
}

bool unbounded_above(int64_t hi) { return hi >= kIntMax; }

std::string describe_int(int64_t lo, int64_t hi) {
  if (!unbounded_above(hi)) return "an integer in " + std::to_string(lo) + ".." + std::to_string(hi);
  if (lo == 0) return "a non-negative integer";
  if (lo == 1) return "a positive integer";
  return "an integer >= " + std::to_string(lo);
}

}  // namespace

std::string NumberRange::describe() const {
  const bool has_lo = std::isfinite(lo), has_hi = std::isfinite(hi);
  if (has_lo && has_hi)
    return std::string("a number in ") + (lo_open ? "(" : "[") + format_number(lo) + ", " + format_number(hi) +
           (hi_open ? ")" : "]");
  if (has_lo) return std::string("a number ") + (lo_open ? "> " : ">= ") + format_number(lo);
  if (has_hi) return std::string("a number ") + (hi_open ? "< " : "<= ") + format_number(hi);
  return "a number";
}

bool NumberRange::contains(double x) const {
  if (std::isnan(x)) return false;
  if (lo_open ? !(x > lo) : !(x >= lo)) return false;
  if (hi_open ? !(x < hi) : !(x <= hi)) return false;
  return true;
}

NumberRange at_least(double lo) { return NumberRange{lo, std::numeric_limits<double>::infinity(), false, false}; }
NumberRange above(double lo) { return NumberRange{lo, std::numeric_limits<double>::infinity(), true, false}; }
NumberRange in_closed(double lo, double hi) { return NumberRange{lo, hi, false, false}; }
NumberRange in_half_open(double lo, double hi) { return NumberRange{lo, hi, false, true}; }

// ---------------------------------------------------------------- schema

const SectionSchema& schema(const std::string& id) {
  for (const SectionSchema& s : all_schemas())
    if (s.id == id) return s;
  ZT_THROW("config schema has no section '", id, "'");
}

// ---------------------------------------------------------------- reader

SectionReader::SectionReader(const ParseContext& ctx, const json* obj, const SectionSchema& schema,
                             std::string display_path)
    : ctx_(ctx),
      obj_(obj && !obj->is_null() ? obj : nullptr),
      schema_(schema),
      path_(display_path.empty() ? schema.path : std::move(display_path)) {
  if (!obj_) return;
  if (!obj_->is_object()) {
    if (path_.empty()) ctx_.fail("", "expected a JSON object at the top level, found " + show(*obj_));
    ctx_.fail(path_, "expected an object, found " + show(*obj_));
  }
  check_keys();
}

void SectionReader::fail(const std::string& key, const std::string& what) const { ctx_.fail(path_of(key), what); }
void SectionReader::warn(const std::string& key, const std::string& what) const { ctx_.warn(path_of(key), what); }

void SectionReader::check_known(const std::string& key) const {
  ZT_CHECK(contains(schema_.keys, key), "config key '", key, "' is read but not in schema '", schema_.id, "'");
}

namespace {

// Some "enabled" inside v (any depth): 1 true, 0 none, -1 only false ones.
int nested_enabled(const json& v) {
  if (!v.is_object()) return 0;
  int found = 0;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it.key() == "enabled") {
      if (it.value() == true) return 1;
      found = -1;
      continue;
    }
    const int inner = nested_enabled(it.value());
    if (inner == 1) return 1;
    if (inner == -1) found = -1;
  }
  return found;
}

}  // namespace

bool feature_turned_on(const json& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0;
  if (!v.is_object()) return true;
  if (v.contains("enabled")) return v["enabled"] == true;
  if (v.contains("autotp_size")) return v["autotp_size"].is_number() && v["autotp_size"].get<double>() > 1;
  const int inner = nested_enabled(v);
  return inner == 1 || (inner == 0 && !v.empty());
}

const json* SectionReader::find(const std::string& key) const {
  check_known(key);
  if (!obj_) return nullptr;
  auto it = obj_->find(key);
  if (it == obj_->end() || it->is_null()) return nullptr;
  return &*it;
}

void SectionReader::check_keys() const {
  for (auto it = obj_->begin(); it != obj_->end(); ++it) {
    const std::string& key = it.key();
    if (contains(schema_.keys, key)) continue;
    const IgnoredKey* ignored = nullptr;
    for (const IgnoredKey& k : schema_.ignored)
      if (k.name == key) ignored = &k;
    if (ignored) {
      const json& v = it.value();
      if (ignored->refused) {  // off: nothing is left out
        if (feature_turned_on(v))
          fail(key, "a DeepSpeed feature that changes what is trained, which ztrain does not implement" +
                        (ignored->note.empty() ? std::string() : " (" + ignored->note + ")") +
                        "; remove the section or set \"enabled\": false to train without it");
        continue;
      }
      const bool disabled = v.is_object() && v.contains("enabled") && v["enabled"] == false;
      if (!v.is_null() && v != ignored->harmless && !disabled)
        warn(key, "DeepSpeed option that ztrain does not implement; ignored" +
                      (ignored->note.empty() ? std::string() : " (" + ignored->note + ")"));
      continue;
    }

    std::vector<std::string> here = schema_.keys;
    for (const IgnoredKey& k : schema_.ignored) here.push_back(k.name);
    const std::string near = nearest(key, here);
    if (!near.empty() && edit_distance(to_lower(key), to_lower(near)) <= 1)
      fail(key, "unknown key; did you mean '" + near + "'?");

    // The key may be right but in the wrong section (or for another variant
    // of this section, such as another scheduler type).
    std::vector<std::string> elsewhere, variants;
    for (const SectionSchema& s : all_schemas()) {
      std::vector<std::string> names = s.keys;
      for (const IgnoredKey& k : s.ignored) names.push_back(k.name);
      for (const std::string& name : names) {
        if (to_lower(name) != to_lower(key)) continue;
        if (s.path == schema_.path) {
          if (s.id != schema_.id) variants.push_back(s.id.substr(s.id.find('/') + 1));
        } else if (!contains(elsewhere, join_path(s.path, name))) {
          elsewhere.push_back(join_path(s.path, name));
        }
      }
    }
    if (!variants.empty() && schema_.id.find('/') != std::string::npos)
      fail(key, "not a parameter of " + schema_.id.substr(schema_.id.find('/') + 1) + " (it is one of " +
                    join(variants, ", ") + ")");
    if (!elsewhere.empty()) {
      const std::string where = path_.empty() ? "at the top level" : "in '" + path_ + "'";
      if (elsewhere.size() > 3) elsewhere.resize(3);
      fail(key, "unknown key " + where + "; did you mean " + (elsewhere.size() > 1 ? "one of " : "") +
                    join(elsewhere, ", ", "'") + "?");
    }
    if (!near.empty()) fail(key, "unknown key; did you mean '" + near + "'?");
    fail(key, "unknown key; known keys here: " + join(schema_.keys, ", "));
  }
}

bool SectionReader::boolean(const std::string& key, bool def) const {
  const json* v = find(key);
  if (!v) return def;
  if (!v->is_boolean()) fail(key, "expected true or false, found " + show(*v) + auto_hint(*v));
  return v->get<bool>();
}

int64_t SectionReader::integer(const std::string& key, int64_t def, int64_t lo, int64_t hi) const {
  const json* v = find(key);
  if (!v) return def;
  int64_t x = 0;
  const IntRead r = read_int(*v, x);
  if (r == IntRead::not_integer) fail(key, "expected " + describe_int(lo, hi) + ", found " + show(*v) + auto_hint(*v));
  if (r == IntRead::ok && x >= lo && x <= hi) return x;
  if (!unbounded_above(hi)) fail(key, "expected " + std::to_string(lo) + ".." + std::to_string(hi) + ", found " + show(*v));
  if (r == IntRead::ok && x < lo) fail(key, "expected " + describe_int(lo, hi) + ", found " + show(*v));
  fail(key, "expected an integer <= " + std::to_string(hi) + ", found " + show(*v));
}

uint64_t SectionReader::unsigned_integer(const std::string& key, uint64_t def) const {
  const json* v = find(key);
  if (!v) return def;
  if (v->is_number_unsigned()) return v->get<uint64_t>();
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && d >= 0 && d < 1.8446744073709552e19) return static_cast<uint64_t>(d);
  }
  fail(key, "expected a non-negative integer, found " + show(*v) + auto_hint(*v));
}

double SectionReader::number(const std::string& key, double def, const NumberRange& range) const {
  const json* v = find(key);
  if (!v) return def;
  if (!v->is_number()) fail(key, "expected " + range.describe() + ", found " + show(*v) + auto_hint(*v));
  const double x = v->get<double>();
  if (!range.contains(x)) fail(key, "expected " + range.describe() + ", found " + show(*v));
  return x;
}

std::string SectionReader::string(const std::string& key, const std::string& def) const {
  const json* v = find(key);
  if (!v) return def;
  if (!v->is_string()) fail(key, "expected a string, found " + show(*v));
  return v->get<std::string>();
}

std::string SectionReader::choice(const std::string& key, const std::string& def,
                                  const std::vector<std::string>& options) const {
  const json* v = find(key);
  if (!v) return def;
  if (v->is_string()) {
    const std::string s = to_lower(v->get<std::string>());
    for (const std::string& o : options)
      if (to_lower(o) == s) return o;
  }
  std::string msg = "expected one of " + join(options, ", ", "\"") + ", found " + show(*v);
  if (v->is_string()) {
    const std::string near = nearest(v->get<std::string>(), options);
    if (!near.empty()) msg += "; did you mean \"" + near + "\"?";
  }
  fail(key, msg);
}

SectionReader SectionReader::section(const std::string& key, const std::string& schema_id) const {
  return SectionReader(ctx_, find(key), schema(schema_id), path_of(key));
}

std::string SectionReader::pick_alias(const std::vector<std::string>& names) const {
  std::vector<std::string> given;
  for (const std::string& n : names)
    if (has(n)) given.push_back(n);
  if (given.size() > 1) fail(given[1], "names the same setting as '" + given[0] + "'; give only one of them");
  return given.empty() ? names.front() : given.front();
}

}  // namespace zt::config_detail
