// zckpt reshard: a committed checkpoint re-cut for a data-parallel size N.
// Every state (master, exp_avg, exp_avg_sq, ...) of every unit is copied
// bit for bit; for each unit padded = ceil(numel / N) * N, S = padded / N and
// rank r's file holds [r*S, min((r+1)*S, numel)) (ZeRO stage 0: one file,
// rank_00000.h5, with whole units). Pipeline size 1 only: ztrain --resume
// reads any layout, so resharding across pipeline layouts happens on load.
#include <boost/program_options.hpp>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/checkpoint.hpp"
#include "zckpt_commands.hpp"
#include "zckpt_model.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace zckpt {

int cmd_reshard(int argc, char** argv) {
  std::string step_dir, out_dir;
  int dp = 0, stage = -1;
  po::options_description opts("options");
  opts.add_options()("help,h", "show this help")("out", po::value<std::string>(&out_dir),
                                                 "checkpoint directory to commit into (DIR/step_<N>/)")(
      "dp", po::value<int>(&dp), "new data-parallel size")(
      "zero-stage", po::value<int>(&stage), "ZeRO stage of the new layout (default: the checkpoint's)");
  po::variables_map vm;
  if (!parse_command(argc, argv, opts,
      "usage: zckpt reshard STEP_DIR --out DIR --dp N [--zero-stage S]\n\n"
      "Writes a new committed checkpoint DIR/step_<N>/ with the same states laid out\n"
      "for a data-parallel size N (pipeline size 1 checkpoints only; ztrain --resume\n"
      "reads any layout).\n\n",
      step_dir, vm))
    return 0;
  if (step_dir.empty()) throw UsageError("reshard: STEP_DIR is required");
  if (out_dir.empty()) throw UsageError("reshard: --out DIR is required");
  if (dp < 1) throw UsageError("reshard: --dp N (N >= 1) is required");
  if (vm.count("zero-stage") && (stage < 0 || stage > 3))
    throw UsageError("reshard: --zero-stage must be 0, 1, 2 or 3");

  require_verified(step_dir);
  zt::CheckpointReader reader(step_dir);
  nlohmann::json manifest = reader.manifest();
  nlohmann::json topo = manifest.value("topology", nlohmann::json::object());
  const int pp = topo.value("pp", 1);
  if (pp != 1)
    throw zt::UserError("reshard: " + step_dir + " has pipeline size " + std::to_string(pp) +
                        "; only pp 1 checkpoints can be resharded here. Resharding across pipeline layouts "
                        "happens on load: `ztrain --resume` reads any layout");
  if (stage < 0) stage = topo.value("zero_stage", 1);
  if (!manifest.contains("step") || !manifest["step"].is_number_integer())
    throw zt::UserError(step_dir + ": manifest has no integer step");
  const int64_t step = manifest["step"].get<int64_t>();

  topo["dp"] = dp;
  topo["world"] = dp * pp;
  topo["zero_stage"] = stage;
  manifest["topology"] = topo;
  // commit_checkpoint writes these
  for (const char* k : {"version", "step", "files", "manifest_sha256"}) manifest.erase(k);

  const std::vector<int> units = reader.units();
  const std::vector<std::string> states = reader.states();
  const int nfiles = stage == 0 ? 1 : dp;
  const std::string tmp = zt::checkpoint_tmp_dir(out_dir, step);
  if (fs::exists(zt::checkpoint_final_dir(out_dir, step)))
    throw zt::UserError("reshard: " + zt::checkpoint_final_dir(out_dir, step) + " already exists");
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  std::map<std::string, std::string> sha;
  for (int r = 0; r < nfiles; ++r) {  // one rank's shards in memory at a time
    std::vector<std::vector<float>> data;
    std::vector<zt::ShardData> shards;
    data.reserve(units.size() * states.size());
    for (const std::string& state : states)
      for (int u : units) {
        const int64_t numel = reader.unit_numel(u);
        int64_t begin = 0, end = numel;
        if (stage != 0) {
          const int64_t S = (numel + dp - 1) / dp;
          begin = std::min(numel, r * S);
          end = std::min(numel, (r + 1) * S);
        }
        if (end <= begin) continue;
        data.emplace_back(static_cast<size_t>(end - begin));
        reader.read_range(state, u, begin, end, data.back().data());
        shards.push_back({state, {u, reader.unit_name(u), numel, begin, end - begin}, data.back().data()});
      }
    const std::string name = zt::rank_file_name(r);
    sha[name] = zt::write_shard_file(tmp + "/" + name, shards);
  }
  zt::commit_checkpoint(out_dir, step, manifest, sha, /*keep_last=*/0);
  std::cout << "resharded " << step_dir << " to " << zt::checkpoint_final_dir(out_dir, step) << " (dp " << dp
            << ", zero_stage " << stage << ", " << nfiles << " file(s))\n";
  return 0;
}

}  // namespace zckpt
