// safetensors files (io/safetensors.hpp). An input that starts with '{' is a
// model.safetensors.index.json up to its first NUL byte, then the bytes of
// the file model-00001.safetensors, read as SafeTensorsDir (sharded Hugging
// Face weights); any other input is a model.safetensors (whose first byte is
// the low byte of its header length). Every tensor of what opens is read back (first and last element,
// and the last 4096 elements), as an import reads the slices it owns.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.hpp"
#include "fuzz_util.hpp"
#include "io/safetensors.hpp"

namespace {
void read_all(const zt::SafeTensorsFile& file, const std::string& name) {
  const zt::SafeTensorsFile::Entry& e = file.entry(name);
  if (e.numel == 0) return;
  (void)file.at(e, 0);
  (void)file.at(e, e.numel - 1);
  const int64_t n = std::min<int64_t>(e.numel, 4096);
  std::vector<float> buf(static_cast<size_t>(n));
  file.read_f32(name, e.numel - n, e.numel, buf.data());
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto pieces = zt::fuzz::split_nul(data, size, 2);
  try {
    if (size == 0 || data[0] != '{') {
      const zt::SafeTensorsFile file(
          zt::fuzz::write_file("model.safetensors", std::string_view(reinterpret_cast<const char*>(data), size)));
      for (const std::string& name : file.names()) read_all(file, name);
      (void)file.metadata().dump();
    } else {
      zt::fuzz::write_file("sharded/model.safetensors.index.json", pieces[0]);
      zt::fuzz::write_file("sharded/model-00001.safetensors", pieces.size() > 1 ? pieces[1] : std::string_view());
      const zt::SafeTensorsDir dir(zt::fuzz::scratch_dir() + "/sharded");
      for (const std::string& name : dir.names()) read_all(dir.file_of(name), name);
      (void)dir.describe();
    }
  } catch (const zt::UserError&) {
  }
  return 0;
}
