// The safetensors format (Hugging Face): an 8-byte little-endian header length
// N, N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]},
// "__metadata__": {string: string}} padded with spaces to a multiple of 8,
// then the raw little-endian tensor bytes (offsets relative to the end of the
// header). Tensors are laid out in the order given.
#pragma once

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace zt {

struct SafeTensor {
  std::string name;
  std::string dtype;  // "F32" | "BF16" | "F16"
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // numel(shape) * element size bytes
};

// Bytes per element of a safetensors dtype ("F32" 4, "BF16"/"F16" 2); UserError otherwise.
int64_t safetensors_dtype_size(const std::string& dtype);

// Writes PATH (all tensors in memory). zt::Error naming the path on I/O
// failure; UserError on a duplicate name or a data size that does not match.
void write_safetensors(const std::string& path, const std::vector<SafeTensor>& tensors,
                       const nlohmann::json& metadata);

// Streaming writer for tensors too large to hold at once: the header is
// written from names, dtypes and shapes up front, then each tensor's bytes
// are appended in order with write() (any number of calls per tensor), and
// finish() checks every byte arrived, flushes and closes.
class SafeTensorsWriter {
 public:
  struct Spec {
    std::string name;
    std::string dtype;
    std::vector<int64_t> shape;
  };
  SafeTensorsWriter(const std::string& path, const std::vector<Spec>& specs, const nlohmann::json& metadata);
  void write(const void* bytes, size_t n);
  void finish();

 private:
  std::string path_;
  std::ofstream out_;
  uint64_t expected_ = 0;
  uint64_t written_ = 0;
};

// The parsed JSON header of a safetensors file (UserError if malformed), and
// its length in bytes (the data starts at 8 + *header_len).
nlohmann::json read_safetensors_header(const std::string& path, uint64_t* header_len = nullptr);

}  // namespace zt
