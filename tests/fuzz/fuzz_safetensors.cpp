// safetensors files (io/safetensors.hpp): the whole input is the file. Every
// tensor of a file that opens is read back (first and last element, and the
// whole tensor when small), as an import reads the slices it owns.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.hpp"
#include "fuzz_util.hpp"
#include "io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      zt::fuzz::write_file("model.safetensors", std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    zt::SafeTensorsFile file(path);
    std::vector<float> buf;
    for (const std::string& name : file.names()) {
      const zt::SafeTensorsFile::Entry& e = file.entry(name);
      if (e.numel == 0) continue;
      (void)file.at(e, 0);
      (void)file.at(e, e.numel - 1);
      const int64_t n = std::min<int64_t>(e.numel, 4096);
      buf.resize(static_cast<size_t>(n));
      file.read_f32(name, e.numel - n, e.numel, buf.data());
    }
    (void)file.metadata().dump();
  } catch (const zt::UserError&) {
  }
  return 0;
}
