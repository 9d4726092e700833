// The safetensors format (Hugging Face): an 8-byte little-endian header length
// N, N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]},
// "__metadata__": {string: string}} padded with spaces to a multiple of 8,
// then the raw little-endian tensor bytes (offsets relative to the end of the
// header). Tensors are laid out in the order given.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
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

// A safetensors file opened for reading. The constructor parses the header
// and checks every entry (known dtype, shape, data_offsets inside the file and
// of the size the shape needs), naming the file and the tensor; the data is
// memory-mapped read-only, so a reader touches (and the OS reads) only the
// pages of the elements it asks for: a rank that needs a slice of a tensor
// reads that slice.
class SafeTensorsFile {
 public:
  struct Entry {
    std::string dtype;  // "F32" | "BF16" | "F16"
    std::vector<int64_t> shape;
    int64_t numel = 0;
    uint64_t begin = 0;  // byte offset of the first element, from the file's start
  };
  explicit SafeTensorsFile(const std::string& path);
  ~SafeTensorsFile();
  SafeTensorsFile(const SafeTensorsFile&) = delete;
  SafeTensorsFile& operator=(const SafeTensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const nlohmann::json& metadata() const { return metadata_; }
  bool has(const std::string& name) const { return entries_.count(name) != 0; }
  // UserError "PATH: no tensor 'NAME'" when absent.
  const Entry& entry(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  // Element i (row-major) of tensor `e` as float (bf16 and f16 widen exactly).
  float at(const Entry& e, int64_t i) const;
  // Elements [begin, end) of tensor `name`, as floats, into out.
  void read_f32(const std::string& name, int64_t begin, int64_t end, float* out) const;

 private:
  std::string path_;
  std::map<std::string, Entry> entries_;
  nlohmann::json metadata_;
  const uint8_t* map_ = nullptr;
  size_t map_len_ = 0;
};

// A Hugging Face checkpoint's weights: DIR/model.safetensors, or the shards
// that DIR/model.safetensors.index.json's weight_map names (every shard file
// is opened and its header checked up front; a weight_map entry whose file
// lacks the tensor is an error naming both).
class SafeTensorsDir {
 public:
  explicit SafeTensorsDir(const std::string& dir);
  const std::string& dir() const { return dir_; }
  // The file holding `name`; UserError naming the directory's weight file(s)
  // and the tensor when no file has it.
  const SafeTensorsFile& file_of(const std::string& name) const;
  bool has(const std::string& name) const { return where_.count(name) != 0; }
  std::vector<std::string> names() const;  // sorted
  std::string describe() const;            // "DIR/model.safetensors" or "DIR/model.safetensors.index.json"

 private:
  std::string dir_;
  std::string source_;
  std::vector<std::unique_ptr<SafeTensorsFile>> files_;
  std::map<std::string, const SafeTensorsFile*> where_;
};

}  // namespace zt
