#include "io/safetensors.hpp"

#include <set>

#include "core/error.hpp"

namespace zt {
namespace {

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw UserError("safetensors: negative dimension");
    n *= d;
  }
  return n;
}

}  // namespace

int64_t safetensors_dtype_size(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "BF16" || dtype == "F16") return 2;
  throw UserError("safetensors: unsupported dtype '" + dtype + "' (expected F32, BF16 or F16)");
}

SafeTensorsWriter::SafeTensorsWriter(const std::string& path, const std::vector<Spec>& specs,
                                     const nlohmann::json& metadata)
    : path_(path) {
  // nlohmann::json sorts keys; the byte layout follows `specs` through data_offsets.
  nlohmann::json header = nlohmann::json::object();
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const Spec& s : specs) {
    if (s.name == "__metadata__" || !seen.insert(s.name).second)
      throw UserError("safetensors: duplicate or reserved tensor name '" + s.name + "'");
    const uint64_t bytes = static_cast<uint64_t>(numel(s.shape) * safetensors_dtype_size(s.dtype));
    header[s.name] = {{"dtype", s.dtype}, {"shape", s.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  expected_ = offset;
  if (!metadata.is_null()) {
    if (!metadata.is_object()) throw UserError("safetensors: metadata must be an object of strings");
    nlohmann::json meta = nlohmann::json::object();
    for (const auto& [k, v] : metadata.items()) meta[k] = v.is_string() ? v.get<std::string>() : v.dump();
    if (!meta.empty()) header["__metadata__"] = meta;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t n = text.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xFF);
  out_.open(path, std::ios::binary | std::ios::trunc);
  if (!out_) ZT_THROW("cannot create ", path);
  out_.write(reinterpret_cast<const char*>(len), 8);
  out_.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!out_) ZT_THROW("write failed: ", path);
}

void SafeTensorsWriter::write(const void* bytes, size_t n) {
  if (written_ + n > expected_)
    throw UserError("safetensors: more data than the header declares for " + path_);
  out_.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(n));
  if (!out_) ZT_THROW("write failed: ", path_);
  written_ += n;
}

void SafeTensorsWriter::finish() {
  if (written_ != expected_)
    throw UserError("safetensors: " + std::to_string(written_) + " data bytes written, header declares " +
                    std::to_string(expected_) + " for " + path_);
  out_.flush();
  out_.close();
  if (out_.fail()) ZT_THROW("write failed: ", path_);
}

void write_safetensors(const std::string& path, const std::vector<SafeTensor>& tensors,
                       const nlohmann::json& metadata) {
  std::vector<SafeTensorsWriter::Spec> specs;
  for (const SafeTensor& t : tensors) {
    const int64_t bytes = numel(t.shape) * safetensors_dtype_size(t.dtype);
    if (static_cast<int64_t>(t.data.size()) != bytes)
      throw UserError("safetensors: tensor '" + t.name + "' has " + std::to_string(t.data.size()) +
                      " bytes, its shape and dtype need " + std::to_string(bytes));
    specs.push_back({t.name, t.dtype, t.shape});
  }
  SafeTensorsWriter w(path, specs, metadata);
  for (const SafeTensor& t : tensors) w.write(t.data.data(), t.data.size());
  w.finish();
}

nlohmann::json read_safetensors_header(const std::string& path, uint64_t* header_len) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError("cannot open " + path);
  unsigned char len[8];
  if (!in.read(reinterpret_cast<char*>(len), 8)) throw UserError(path + ": shorter than 8 bytes");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n > (uint64_t{1} << 30)) throw UserError(path + ": header length " + std::to_string(n) + " is implausible");
  std::string text(n, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(n))) throw UserError(path + ": truncated header");
  if (header_len != nullptr) *header_len = n;
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw UserError(path + ": header is not JSON: " + e.what());
  }
}

}  // namespace zt
