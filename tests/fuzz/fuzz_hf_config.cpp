// A Hugging Face config.json (io/hf_config.hpp), as `zckpt import` and
// model.init_from read it: the whole input is DIR/config.json. A model
// section that comes out must be one the run config accepts (the import
// writes it into a checkpoint's config), or a UserError.
#include <cstddef>
#include <cstdint>

#include "core/config.hpp"
#include "core/error.hpp"
#include "fuzz_util.hpp"
#include "io/hf_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = zt::fuzz::write_file("hf/config.json", std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    const nlohmann::json hf = zt::read_hf_config(zt::fuzz::scratch_dir() + "/hf");
    const nlohmann::json section = zt::hf_model_section(hf, path);
    (void)zt::parse_config(nlohmann::json{{"model", section}}, "hf-import");
  } catch (const zt::UserError&) {
  }
  return 0;
}
