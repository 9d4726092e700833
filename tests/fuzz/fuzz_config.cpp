// The run config (core/config.hpp): a JSON file and --set overrides.
// Input: the config file's text, then up to 8 NUL-separated "key=VALUE"
// overrides. A config that loads is also resolved for a data-parallel size
// taken from its text (DeepSpeed's batch arithmetic) and printed as the
// resolved JSON, as --dry-run does.
#include <cstddef>
#include <cstdint>

#include "core/config.hpp"
#include "core/error.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto pieces = zt::fuzz::split_nul(data, size, 9);
  const std::string path = zt::fuzz::write_file("config.json", pieces[0]);
  std::vector<std::string> overrides(pieces.begin() + 1, pieces.end());
  try {
    zt::Config cfg = zt::load_config(path, overrides);
    (void)zt::resolved_json(cfg).dump();
    zt::resolve_batch(cfg, 1 + static_cast<int>(size % 7));
    (void)zt::resolved_json(cfg).dump();
  } catch (const zt::UserError&) {
  }
  return 0;
}
