#include "train/init_from.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "io/checkpoint.hpp"
#include "io/hf_config.hpp"
#include "io/safetensors.hpp"

namespace fs = std::filesystem;

namespace zt {
namespace {

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (int i = 0; i < s.rank(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

ModelDesc describe_section(const nlohmann::json& section, const std::string& source) {
  nlohmann::json m = section;
  m.erase("init_from");  // where that model came from; not part of its shape
  return describe_model(parse_config(nlohmann::json{{"model", m}}, source).model);
}

// The source's model and the run's must have the same units and tensors.
void check_same_model(const ModelDesc& have, const ModelDesc& want, const std::string& source) {
  const std::string run = "this run's model (" + want.arch() + ")";
  if (have.arch() != want.arch())
    ZT_USER_ERROR(source, " holds a ", have.arch(), " model, ", run, " is a ", want.arch(), " (model.arch)");
  if (have.num_units() != want.num_units())
    ZT_USER_ERROR(source, " has ", have.shape.n_layer, " layers, ", run, " has ", want.shape.n_layer, " (model.n_layer)");
  for (int u = 0; u < want.num_units(); ++u) {
    const UnitDesc& a = have.units[static_cast<size_t>(u)];
    const UnitDesc& b = want.units[static_cast<size_t>(u)];
    if (a.tensors.size() != b.tensors.size() || a.name != b.name)
      ZT_USER_ERROR(source, ": unit ", u, " (", a.name, ") has ", a.tensors.size(), " tensors, ", run, "'s unit ", u,
                    " (", b.name, ") has ", b.tensors.size());
    for (size_t t = 0; t < b.tensors.size(); ++t) {
      const TensorDesc& x = a.tensors[t];
      const TensorDesc& y = b.tensors[t];
      if (x.name != y.name || x.shape.numel() != y.shape.numel() || shape_str(x.shape) != shape_str(y.shape))
        ZT_USER_ERROR(source, ": tensor ", x.hf_name, " has shape ", shape_str(x.shape), ", ", run, " needs ",
                      y.hf_name, " of shape ", shape_str(y.shape), " (compare the model sections' sizes)");
    }
  }
}

// The tensors' offsets within their unit's flat buffer.
std::vector<int64_t> offsets(const UnitDesc& u) {
  std::vector<int64_t> off;
  int64_t o = 0;
  for (const TensorDesc& t : u.tensors) {
    off.push_back(o);
    o += t.shape.numel();
  }
  off.push_back(o);
  return off;
}

class CheckpointSource final : public WeightSource {
 public:
  CheckpointSource(const std::string& step_dir, const ModelDesc& want) : dir_(step_dir), reader_(step_dir) {
    const nlohmann::json& m = reader_.manifest();
    if (!m.contains("config") || !m["config"].is_object() || !m["config"].contains("model"))
      ZT_USER_ERROR(step_dir, "/manifest.json has no config.model: not a ztrain checkpoint");
    const std::vector<std::string> states = reader_.states();
    if (std::find(states.begin(), states.end(), "master") == states.end())
      ZT_USER_ERROR(step_dir, ": checkpoint has no master state");
    const ModelDesc have = describe_section(m["config"]["model"], step_dir + "/manifest.json config.model");
    check_same_model(have, want, step_dir);
    for (int u = 0; u < want.num_units(); ++u)
      if (reader_.unit_numel(u) != want.units[static_cast<size_t>(u)].numel())
        ZT_USER_ERROR(step_dir, ": unit ", u, " (", want.units[static_cast<size_t>(u)].name, ") has ",
                      reader_.unit_numel(u), " elements there, ", want.units[static_cast<size_t>(u)].numel(),
                      " in this model");
  }
  void read(int unit, int64_t begin, int64_t end, float* out) override {
    reader_.read_range("master", unit, begin, end, out);
  }
  std::string describe() const override { return "ztrain checkpoint " + dir_; }
  int64_t bytes_read() const override { return reader_.bytes_read(); }
  nlohmann::json origin() const override {
    return {{"checkpoint", fs::absolute(dir_).lexically_normal().string()}, {"config", reader_.manifest()["config"]}};
  }

 private:
  std::string dir_;
  CheckpointReader reader_;
};

class HfSource final : public WeightSource {
 public:
  HfSource(const std::string& dir, const ModelDesc& want) : dir_(dir), files_(dir) {
    hf_config_ = read_hf_config(dir);
    const ModelDesc have = describe_section(hf_model_section(hf_config_, dir + "/config.json"), dir + "/config.json");
    check_same_model(have, want, dir);
    std::set<std::string> used;
    for (const UnitDesc& u : want.units) {
      std::vector<Where> ws;
      for (const TensorDesc& t : u.tensors) {
        Where w;
        w.name = find(t.hf_name);
        w.file = &files_.file_of(w.name);
        w.entry = &w.file->entry(w.name);
        const Shape hs = t.hf_shape();
        std::vector<int64_t> expect;
        for (int i = 0; i < hs.rank(); ++i) expect.push_back(hs[i]);
        if (w.entry->shape != expect)
          ZT_USER_ERROR(w.file->path(), ": tensor '", w.name, "' has shape ", shape_str(w.entry->shape), ", the ",
                        want.arch(), " model of ", dir, "/config.json needs ", shape_str(expect));
        w.layout = t.hf_layout;
        w.shape = t.shape;
        if (w.layout != HfLayout::as_is && w.layout != HfLayout::transposed)
          ZT_THROW("tensor ", t.hf_name, ": no reader for its Hugging Face layout");
        used.insert(w.name);
        ws.push_back(w);
      }
      where_.push_back(std::move(ws));
      offsets_.push_back(offsets(u));
    }
    for (const std::string& n : files_.names()) {
      if (used.count(n) || ignorable(n, want)) continue;
      ZT_USER_ERROR(files_.file_of(n).path(), ": tensor '", n, "' is not part of ztrain's ", want.arch(),
                    " model (an unsupported feature of this checkpoint; its config.json does not say so)");
    }
  }

  void read(int unit, int64_t begin, int64_t end, float* out) override {
    const std::vector<int64_t>& off = offsets_.at(static_cast<size_t>(unit));
    const std::vector<Where>& ws = where_.at(static_cast<size_t>(unit));
    std::fill(out, out + (end - begin), 0.0f);
    for (size_t t = 0; t < ws.size(); ++t) {
      const int64_t b = std::max(begin, off[t]), e = std::min(end, off[t + 1]);
      if (b >= e) continue;
      const Where& w = ws[t];
      float* dst = out + (b - begin);
      const int64_t lb = b - off[t], le = e - off[t];
      if (w.layout == HfLayout::as_is) {
        w.file->read_f32(w.name, lb, le, dst);
      } else {  // transposed: ztrain (R, C) element (r, c) is Hugging Face's (c, r)
        const int64_t R = w.shape[0], C = w.shape[1];
        for (int64_t i = lb; i < le; ++i) dst[i - lb] = w.file->at(*w.entry, (i % C) * R + i / C);
      }
      bytes_ += (e - b) * safetensors_dtype_size(w.entry->dtype);
    }
  }
  std::string describe() const override { return "Hugging Face model " + files_.describe(); }
  int64_t bytes_read() const override { return bytes_; }
  nlohmann::json origin() const override {
    return {{"hf_dir", fs::absolute(dir_).lexically_normal().string()}, {"config", hf_config_}};
  }

 private:
  struct Where {
    std::string name;
    const SafeTensorsFile* file = nullptr;
    const SafeTensorsFile::Entry* entry = nullptr;
    HfLayout layout = HfLayout::as_is;
    Shape shape;
  };

  // The name as the description gives it, or with the LM-head class's prefix
  // added or dropped ([Note: Hugging Face tensor mapping]).
  std::string find(const std::string& name) const {
    std::vector<std::string> tries = {name, "transformer." + name};
    if (name.rfind("model.", 0) == 0) tries.push_back(name.substr(6));
    for (const std::string& n : tries)
      if (files_.has(n)) return n;
    ZT_USER_ERROR(files_.describe(), ": missing tensor '", name, "' (also looked for ", tries[1],
                  tries.size() > 2 ? " and " + tries[2] : std::string(), ")");
  }

  static bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  }

  // Buffers that are not parameters, and a tied head saved anyway.
  static bool ignorable(const std::string& n, const ModelDesc& want) {
    if (ends_with(n, ".attn.bias") || ends_with(n, ".attn.masked_bias") || ends_with(n, "rotary_emb.inv_freq"))
      return want.arch() == "gpt2" || ends_with(n, "inv_freq");
    if (n == "lm_head.weight") {
      for (const UnitDesc& u : want.units)
        for (const TensorDesc& t : u.tensors)
          if (t.hf_name == "lm_head.weight") return false;
      return true;  // the description has no lm_head of its own: tied to the embedding
    }
    return false;
  }

  std::string dir_;
  SafeTensorsDir files_;
  nlohmann::json hf_config_;
  std::vector<std::vector<Where>> where_;
  std::vector<std::vector<int64_t>> offsets_;
  int64_t bytes_ = 0;
};

// A step directory, or the newest complete one of a checkpoint.dir.
std::string step_dir_of(const std::string& path) {
  if (fs::exists(path + "/manifest.json")) return path;
  std::vector<std::string> skipped;
  const std::optional<std::string> found = find_latest_checkpoint(path, &skipped);
  for (const std::string& s : skipped) log_warn("model.init_from: skipping ", s);
  if (!found)
    ZT_USER_ERROR(path, ": neither a Hugging Face model directory (config.json) nor a ztrain checkpoint "
                        "(manifest.json, or step_<N> directories)");
  return *found;
}

}  // namespace

bool is_hf_model_dir(const std::string& path) {
  return fs::exists(path + "/config.json") && !fs::exists(path + "/manifest.json");
}

nlohmann::json source_model_section(const std::string& path) {
  if (is_hf_model_dir(path)) return hf_model_section(read_hf_config(path), path + "/config.json");
  const std::string dir = step_dir_of(path);
  CheckpointReader reader(dir);
  const nlohmann::json& m = reader.manifest();
  if (!m.contains("config") || !m["config"].is_object() || !m["config"].contains("model"))
    ZT_USER_ERROR(dir, "/manifest.json has no config.model: not a ztrain checkpoint");
  nlohmann::json section = m["config"]["model"];
  section.erase("init_from");
  return section;
}

std::unique_ptr<WeightSource> open_weight_source(const std::string& path, const ModelDesc& want) {
  if (!fs::is_directory(path)) ZT_USER_ERROR(path, ": no such directory");
  if (is_hf_model_dir(path)) return std::make_unique<HfSource>(path, want);
  return std::make_unique<CheckpointSource>(step_dir_of(path), want);
}

void init_weights_from(const std::string& path, const ModelDesc& desc, ZeroEngine& zero, Topology& topo) {
  std::string error;
  std::unique_ptr<WeightSource> src;
  try {
    src = open_weight_source(path, desc);
    std::vector<float> host;
    for (const OwnedShard& sh : zero.owned_shards()) {
      host.resize(static_cast<size_t>(sh.end - sh.begin));
      src->read(sh.unit, sh.begin, sh.end, host.data());
      zero.placement().write_state(sh, OptimizerState::master, host.data());
    }
  } catch (const std::exception& e) {
    error = std::string("model.init_from: ") + e.what();
    log_warn(error);
  }
  if (all_reduce_scalar(topo.world(), error.empty() ? 0.0 : 1.0, ReduceOp::max) != 0)
    throw CollectiveError(error.empty() ? "model.init_from " + path + " could not be read on another rank (see its warning)"
                                        : error,
                          kExitBadInput);
  zero.publish_params();
  const double bytes = all_reduce_scalar(topo.world(), static_cast<double>(src->bytes_read()));
  log_info("model.init_from: weights from ", src->describe(), " (", bytes / 1e6,
           " MB read over all ranks), fresh optimizer state, step 0");
}

}  // namespace zt
