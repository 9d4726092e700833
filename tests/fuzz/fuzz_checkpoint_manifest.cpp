// A checkpoint's manifest.json (io/checkpoint.hpp), read by verify_checkpoint,
// find_latest_checkpoint (--resume auto) and CheckpointReader (every resume
// and zckpt command). Input: the manifest's text; when a NUL byte follows it,
// the harness first writes the manifest's own checksum into it (as a writer
// that means it would), so that the fuzzer also reaches what lies behind the
// checksum: the list of files and their SHA-256. The step directory holds
// one good shard file, rank_00000.h5, written once by write_shard_file.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "core/error.hpp"
#include "fuzz_util.hpp"
#include "io/checkpoint.hpp"

namespace {

const std::string& step_dir() {
  static const std::string dir = [] {
    const std::string d = zt::fuzz::scratch_dir() + "/ckpt/step_5";
    std::filesystem::create_directories(d);
    static const std::vector<float> values = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    std::vector<zt::ShardData> shards;
    for (const char* state : {"master", "exp_avg"}) {
      shards.push_back({state, {0, "embedding", 6, 0, 6}, values.data()});
      shards.push_back({state, {1, "head", 9, 4, 4}, values.data()});
    }
    zt::write_shard_file(d + "/rank_00000.h5", shards);
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = step_dir();
  const auto pieces = zt::fuzz::split_nul(data, size, 2);
  std::string text(pieces[0]);
  if (pieces.size() > 1) {
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) {
      j["manifest_sha256"] = zt::manifest_checksum(j);
      text = j.dump();
    }
  }
  zt::fuzz::write_file("ckpt/step_5/manifest.json", text);
  (void)zt::verify_checkpoint(dir, /*read_data=*/true);
  std::vector<std::string> skipped, damaged;
  (void)zt::find_latest_checkpoint(zt::fuzz::scratch_dir() + "/ckpt", &skipped, &damaged);
  try {
    zt::CheckpointReader reader(dir);
    std::vector<float> out;
    for (const int unit : reader.units()) {
      const int64_t n = std::min<int64_t>(std::max<int64_t>(reader.unit_numel(unit), 0) + 3, 4096);
      out.resize(static_cast<size_t>(n));
      for (const std::string& state : reader.states()) {
        try {
          reader.read_range(state, unit, 0, n, out.data());
        } catch (const zt::UserError&) {
        }
      }
    }
  } catch (const zt::UserError&) {
  }
  return 0;
}
