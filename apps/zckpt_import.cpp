// zckpt import: a Hugging Face model directory (config.json + model.safetensors
// or a sharded model.safetensors.index.json; F32, BF16 or F16) as a committed
// ztrain checkpoint DIR/step_0 holding the fp32 master weights only. Its
// manifest's config.model is the model section that config.json describes
// (src/io/hf_config.hpp), so `zckpt logits`, `zckpt export` and
// `model.init_from` read it as any checkpoint; the tensors are mapped through
// the model description ([Note: Hugging Face tensor mapping] in
// train/init_from.hpp). Without Adam moments or a training state it is a
// starting point, not a run to resume: `ztrain --resume` refuses it (no
// exp_avg), `model.init_from` takes it.
#include <boost/program_options.hpp>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/error.hpp"
#include "io/checkpoint.hpp"
#include "io/hf_config.hpp"
#include "modules/model_desc.hpp"
#include "train/init_from.hpp"
#include "zckpt_commands.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace zckpt {
namespace {

// Units are written in groups of about this many bytes, one rank file each,
// so that one group is in memory at a time.
constexpr int64_t kFileBytes = int64_t{1} << 31;

}  // namespace

int cmd_import(int argc, char** argv) {
  std::string hf_dir, out_dir;
  po::options_description opts("options");
  opts.add_options()("help,h", "show this help")("out", po::value<std::string>(&out_dir),
                                                 "checkpoint directory to commit into (DIR/step_0/)");
  po::variables_map vm;
  if (!parse_command(argc, argv, opts,
      "usage: zckpt import HF_DIR --out DIR\n\n"
      "Reads a Hugging Face GPT-2 or Llama model (config.json and model.safetensors, or\n"
      "model.safetensors.index.json and its shards; F32, BF16 or F16) and writes its\n"
      "weights as a committed ztrain checkpoint DIR/step_0 (fp32 master weights), for\n"
      "`zckpt logits` and `model.init_from`.\n\n",
      hf_dir, vm))
    return 0;
  if (hf_dir.empty()) throw UsageError("import: HF_DIR is required");
  if (out_dir.empty()) throw UsageError("import: --out DIR is required");
  if (!fs::is_directory(hf_dir)) throw zt::UserError("import: " + hf_dir + ": no such directory");
  if (!zt::is_hf_model_dir(hf_dir))
    throw zt::UserError("import: " + hf_dir + " is not a Hugging Face model directory (config.json, no manifest.json)");

  const nlohmann::json section = zt::source_model_section(hf_dir);
  const zt::Config cfg = zt::parse_config(nlohmann::json{{"model", section}}, hf_dir + "/config.json");
  const zt::ModelDesc desc = zt::describe_model(cfg.model);
  const std::unique_ptr<zt::WeightSource> src = zt::open_weight_source(hf_dir, desc);

  const std::string final_dir = zt::checkpoint_final_dir(out_dir, 0);
  if (fs::exists(final_dir)) throw zt::UserError("import: " + final_dir + " already exists");
  const std::string tmp = zt::checkpoint_tmp_dir(out_dir, 0);
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  std::map<std::string, std::string> sha;
  int file = 0;
  for (int u = 0; u < desc.num_units();) {
    std::vector<std::vector<float>> data;
    std::vector<zt::ShardData> shards;
    int64_t bytes = 0;
    for (; u < desc.num_units() && (shards.empty() || bytes < kFileBytes); ++u) {
      const zt::UnitDesc& ud = desc.units[static_cast<size_t>(u)];
      const int64_t n = ud.numel();
      data.emplace_back(static_cast<size_t>(n));
      src->read(u, 0, n, data.back().data());
      bytes += 4 * n;
    }
    for (size_t i = 0; i < data.size(); ++i) {
      const int unit = u - static_cast<int>(data.size()) + static_cast<int>(i);
      const zt::UnitDesc& ud = desc.units[static_cast<size_t>(unit)];
      shards.push_back({"master", {unit, ud.name, ud.numel(), 0, ud.numel()}, data[i].data()});
    }
    const std::string name = zt::rank_file_name(file++);
    sha[name] = zt::write_shard_file(tmp + "/" + name, shards);
  }
  nlohmann::json manifest = {
      {"config", zt::resolved_json(cfg)},
      {"topology", {{"world", 1}, {"pp", 1}, {"num_chunks", 1}, {"dp", 1}, {"zero_stage", 0}}},
      {"imported_from", src->origin()}};
  zt::commit_checkpoint(out_dir, 0, manifest, sha, /*keep_last=*/0);
  std::cout << "imported " << desc.num_params() << " parameters (" << desc.arch() << ", " << desc.shape.n_layer
            << " layers) from " << src->describe() << " to " << final_dir << "\n";
  return 0;
}

}  // namespace zckpt
