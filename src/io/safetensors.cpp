#include "io/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/dtype.hpp"
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
  if (n > (uint64_t{1} << 30)) throw UserError(path + ": bad safetensors header: length " + std::to_string(n) + " is implausible");
  std::error_code ec;
  const uintmax_t fsize = std::filesystem::file_size(path, ec);
  if (!ec && 8 + n > fsize)
    throw UserError(path + ": bad safetensors header: length " + std::to_string(n) + " runs past the end of the " +
                    std::to_string(fsize) + "-byte file");
  std::string text(n, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(n))) throw UserError(path + ": truncated header");
  if (header_len != nullptr) *header_len = n;
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw UserError(path + ": bad safetensors header: not JSON: " + e.what());
  }
}

namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

}  // namespace

SafeTensorsFile::SafeTensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) ZT_USER_ERROR("cannot open ", path, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    ZT_USER_ERROR("cannot stat ", path, ": ", std::strerror(err));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  // The header is read through the stream reader (length and JSON checks),
  // then held against the real file size.
  uint64_t hlen = 0;
  nlohmann::json header;
  try {
    header = read_safetensors_header(path, &hlen);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (!header.is_object()) {
    ::close(fd);
    ZT_USER_ERROR(path, ": bad safetensors header: not a JSON object");
  }
  const uint64_t data_begin = 8 + hlen;
  const uint64_t data_len = size - data_begin;  // read_safetensors_header checked 8 + hlen <= size
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      metadata_ = v;
      continue;
    }
    const std::string where = path + ": tensor '" + name + "'";
    if (!v.is_object() || !v.contains("dtype") || !v["dtype"].is_string() || !v.contains("shape") ||
        !v["shape"].is_array() || !v.contains("data_offsets") || !v["data_offsets"].is_array() ||
        v["data_offsets"].size() != 2) {
      ::close(fd);
      ZT_USER_ERROR(where, ": bad safetensors header entry (needs dtype, shape and data_offsets [begin, end]): ",
                    v.dump());
    }
    Entry e;
    e.dtype = v["dtype"].get<std::string>();
    if (e.dtype != "F32" && e.dtype != "BF16" && e.dtype != "F16") {
      ::close(fd);
      ZT_USER_ERROR(where, ": unsupported dtype '", e.dtype, "' (ztrain reads F32, BF16 and F16)");
    }
    for (const auto& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) {
        ::close(fd);
        ZT_USER_ERROR(where, ": bad shape ", v["shape"].dump());
      }
      e.shape.push_back(d.get<int64_t>());
    }
    // The element count, refused once its bytes exceed the data section:
    // the product of the dims could otherwise overflow and wrap to a size
    // that matches the bytes present.
    const uint64_t esize = static_cast<uint64_t>(safetensors_dtype_size(e.dtype));
    uint64_t numel = 1;
    bool fits = true;
    for (const int64_t d : e.shape) {
      if (d == 0) {
        numel = 0;
        fits = true;
        break;
      }
      if (fits && numel > data_len / esize / static_cast<uint64_t>(d)) fits = false;
      if (fits) numel *= static_cast<uint64_t>(d);
    }
    e.numel = static_cast<int64_t>(numel);
    const auto& off = v["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      ::close(fd);
      ZT_USER_ERROR(where, ": bad data_offsets ", off.dump());
    }
    const uint64_t b = off[0].get<uint64_t>(), en = off[1].get<uint64_t>();
    const uint64_t need = numel * esize;
    if (b > en || en > data_len) {
      ::close(fd);
      ZT_USER_ERROR(where, ": data_offsets [", b, ", ", en, "] out of range: the file has ", data_len,
                    " data bytes (truncated or corrupt)");
    }
    if (!fits) {
      ::close(fd);
      ZT_USER_ERROR(where, ": shape ", shape_str(e.shape), " of ", e.dtype, " needs more bytes than the file's ",
                    data_len, " data bytes (truncated or corrupt)");
    }
    if (en - b != need) {
      ::close(fd);
      ZT_USER_ERROR(where, ": data_offsets [", b, ", ", en, "] hold ", en - b, " bytes, its shape ",
                    shape_str(e.shape), " and dtype ", e.dtype, " need ", need);
    }
    e.begin = data_begin + b;
    entries_.emplace(name, std::move(e));
  }
  map_len_ = static_cast<size_t>(size);
  if (map_len_ > 0) {
    void* p = ::mmap(nullptr, map_len_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      ZT_USER_ERROR("cannot map ", path, ": ", std::strerror(err));
    }
    map_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping stays valid
}

SafeTensorsFile::~SafeTensorsFile() {
  if (map_ != nullptr) ::munmap(const_cast<uint8_t*>(map_), map_len_);
}

const SafeTensorsFile::Entry& SafeTensorsFile::entry(const std::string& name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) ZT_USER_ERROR(path_, ": no tensor '", name, "'");
  return it->second;
}

std::vector<std::string> SafeTensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : entries_) out.push_back(k);
  return out;
}

float SafeTensorsFile::at(const Entry& e, int64_t i) const {
  if (e.dtype == "F32") {
    float v;
    std::memcpy(&v, map_ + e.begin + 4 * static_cast<uint64_t>(i), 4);
    return v;
  }
  uint16_t bits;
  std::memcpy(&bits, map_ + e.begin + 2 * static_cast<uint64_t>(i), 2);
  if (e.dtype == "BF16") return bf16_to_f32(bf16{bits});
  return f16_to_f32(f16{bits});
}

void SafeTensorsFile::read_f32(const std::string& name, int64_t begin, int64_t end, float* out) const {
  const Entry& e = entry(name);
  ZT_CHECK(begin >= 0 && begin <= end && end <= e.numel, path_, ": range [", begin, ", ", end, ") of '", name,
           "' with ", e.numel, " elements");
  if (e.dtype == "F32") {
    std::memcpy(out, map_ + e.begin + 4 * static_cast<uint64_t>(begin), 4 * static_cast<size_t>(end - begin));
    return;
  }
  for (int64_t i = begin; i < end; ++i) out[i - begin] = at(e, i);
}

SafeTensorsDir::SafeTensorsDir(const std::string& dir) : dir_(dir) {
  namespace fs = std::filesystem;
  const std::string single = dir + "/model.safetensors", index = dir + "/model.safetensors.index.json";
  if (fs::exists(index)) {
    source_ = index;
    std::ifstream in(index);
    if (!in) ZT_USER_ERROR("cannot read ", index);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      ZT_USER_ERROR(index, ": not JSON: ", e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      ZT_USER_ERROR(index, ": no weight_map object");
    std::map<std::string, const SafeTensorsFile*> by_file;
    for (const auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string()) ZT_USER_ERROR(index, ": weight_map.", name, ": expected a file name");
      const std::string f = file.get<std::string>();
      if (f.find('/') != std::string::npos) ZT_USER_ERROR(index, ": weight_map.", name, ": '", f, "' is not a file of ", dir);
      auto it = by_file.find(f);
      if (it == by_file.end()) {
        files_.push_back(std::make_unique<SafeTensorsFile>(dir + "/" + f));
        it = by_file.emplace(f, files_.back().get()).first;
      }
      if (!it->second->has(name))
        ZT_USER_ERROR(index, ": weight_map puts tensor '", name, "' in ", f, ", which has no such tensor");
      where_[name] = it->second;
    }
  } else if (fs::exists(single)) {
    source_ = single;
    files_.push_back(std::make_unique<SafeTensorsFile>(single));
    for (const std::string& n : files_.back()->names()) where_[n] = files_.back().get();
  } else {
    ZT_USER_ERROR(dir, ": no model.safetensors or model.safetensors.index.json (ztrain imports safetensors only)");
  }
}

const SafeTensorsFile& SafeTensorsDir::file_of(const std::string& name) const {
  const auto it = where_.find(name);
  if (it == where_.end()) ZT_USER_ERROR(source_, ": missing tensor '", name, "'");
  return *it->second;
}

std::vector<std::string> SafeTensorsDir::names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : where_) out.push_back(k);
  return out;
}

std::string SafeTensorsDir::describe() const { return source_; }

}  // namespace zt
