// Writing one rank's shard file (checkpoint.hpp) and the HDF5 error reason.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <future>
#include <memory>
#include <set>

#include "core/error.hpp"
#include "io/checkpoint.hpp"
#include "io/h5.hpp"
#include "io/sha256.hpp"

namespace zt {

namespace h5 {

namespace {
herr_t collect_error(unsigned n, const H5E_error2_t* e, void* client) {
  auto* out = static_cast<std::string*>(client);
  if (n >= 3) return 0;  // the innermost three say what failed and why
  if (!out->empty()) out->append("; ");
  out->append(e->func_name != nullptr ? e->func_name : "?");
  out->append(": ");
  out->append(e->desc != nullptr ? e->desc : "");
  return 0;
}
}  // namespace

std::string last_error() {
  std::string msg;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect_error, &msg);
  return msg.empty() ? std::string("unknown HDF5 error") : msg;
}

// [Note: Fletcher32]
// HDF5's H5_checksum_fletcher32 adds big-endian 16-bit words w_0..w_{n-1}
// (an odd last byte is the high byte of a word) with end-around carry:
// sum1 = sum of w_i and sum2 = sum of the running sum1, both modulo 65535,
// where a positive total that is a multiple of 65535 comes out as 0xffff
// (folding never reaches 0 from a positive number) and only a zero total as 0.
// Here the words are split into 8 contiguous segments summed side by side in
// 64 bits (independent dependency chains); segment k's sum2 is shifted by the
// segments' words after it: sum2 = sum over k of (sum2_k + words_after_k *
// sum1_k); the words past the last whole segment follow one by one.
uint32_t fletcher32(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  const size_t words = (bytes + 1) / 2;
  auto word = [&](size_t i) -> uint64_t {
    const uint64_t hi = p[2 * i];
    const uint64_t lo = 2 * i + 1 < bytes ? p[2 * i + 1] : 0;
    return (hi << 8) | lo;
  };
  constexpr int kSeg = 8;
  constexpr uint64_t kMod = 65535;
  const size_t seg = (bytes / 2) / kSeg;  // segments hold whole words only; the tail may end in half a word
  uint64_t s1[kSeg] = {}, s2[kSeg] = {};
  uint64_t any = 0;  // nonzero once any word was (s1 only grows within a block)
  // At most 2^20 words per segment before reducing keeps s2 below 2^56.
  constexpr size_t kBlock = size_t{1} << 20;
  for (size_t j0 = 0; j0 < seg; j0 += kBlock) {
    const size_t j1 = std::min(seg, j0 + kBlock);
    for (size_t j = j0; j < j1; ++j) {
      for (int k = 0; k < kSeg; ++k) {
        const unsigned char* w = p + 2 * (static_cast<size_t>(k) * seg + j);
        s1[k] += (static_cast<uint64_t>(w[0]) << 8) | w[1];
        s2[k] += s1[k];
      }
    }
    for (int k = 0; k < kSeg; ++k) {
      any |= s1[k];
      s1[k] %= kMod;
      s2[k] %= kMod;
    }
  }
  uint64_t sum1 = 0, sum2 = 0;
  for (int k = 0; k < kSeg; ++k) {
    const uint64_t after = static_cast<uint64_t>(kSeg - 1 - k) * seg;  // segment words after k (the tail adds its own)
    sum1 = (sum1 + s1[k]) % kMod;
    sum2 = (sum2 + s2[k] + (after % kMod) * s1[k]) % kMod;
  }
  for (size_t i = static_cast<size_t>(kSeg) * seg; i < words; ++i) {  // the tail
    const uint64_t w = word(i);
    any |= w;
    sum1 = (sum1 + w) % kMod;
    sum2 = (sum2 + sum1) % kMod;
  }
  if (any == 0) return 0;
  // A positive total: residue 0 is 0xffff. sum2 is positive as soon as sum1
  // ever was, i.e. whenever any word is nonzero.
  if (sum1 == 0) sum1 = kMod;
  if (sum2 == 0) sum2 = kMod;
  return static_cast<uint32_t>((sum2 << 16) | sum1);
}

}  // namespace h5

namespace {

constexpr int64_t kMaxChunkElems = int64_t{1} << 20;  // 4 MiB of fp32 per chunk

// The start of every HDF5 failure's message here; ZT_H5_CHECK adds what
// failed and HDF5's reason.
std::string cannot_write(const std::string& path) { return "cannot write checkpoint file '" + path + "': "; }

void write_attr_i64(const std::string& path, hid_t obj, const char* name, int64_t value) {
  h5::Id space(H5Screate(H5S_SCALAR), H5Sclose);
  h5::Id attr(H5Acreate2(obj, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  ZT_H5_CHECK(attr.valid() && H5Awrite(attr.get(), H5T_NATIVE_INT64, &value) >= 0, cannot_write(path),
              "attribute ", name);
}

void write_attr_string(const std::string& path, hid_t obj, const char* name, const std::string& value) {
  h5::Id type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), std::max<size_t>(1, value.size()));
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  h5::Id space(H5Screate(H5S_SCALAR), H5Sclose);
  h5::Id attr(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  const std::string padded = value.empty() ? std::string(1, '\0') : value;
  ZT_H5_CHECK(attr.valid() && H5Awrite(attr.get(), type.get(), padded.data()) >= 0, cannot_write(path),
              "attribute ", name);
}

void check_shards(const std::string& path, const std::vector<ShardData>& shards) {
  std::set<std::string> names;
  for (const ShardData& s : shards) {
    const ShardRef& r = s.ref;
    const std::string name = s.state + "/u" + std::to_string(r.unit) + "_" + std::to_string(r.global_offset);
    ZT_CHECK(!s.state.empty() && s.state.find('/') == std::string::npos, path, ": bad state name '", s.state, "'");
    ZT_CHECK(r.unit >= 0 && r.global_offset >= 0 && r.length >= 0 && r.unit_numel >= 0, path, ": bad shard ", name);
    ZT_CHECK(r.length == 0 || s.data != nullptr, path, ": shard ", name, " has no data");
    ZT_CHECK(names.insert(name).second, path, ": shard ", name, " given twice");
  }
}

// Writes a shard's chunks as the Fletcher32 filter would have stored them
// (the data, padded with zeros to a whole chunk, then the checksum), through
// H5Dwrite_chunk: HDF5 writes each one to the file as it comes, with no
// filter pass or copy of its own. `staging` holds one chunk.
void write_chunks_direct(const std::string& path, const std::string& what, hid_t dset, const ShardData& s,
                         std::vector<char>& staging) {
  const int64_t chunk = std::min(s.ref.length, kMaxChunkElems);
  const size_t chunk_bytes = static_cast<size_t>(chunk) * sizeof(float);
  staging.resize(std::max(staging.size(), chunk_bytes + 4));
  for (int64_t begin = 0; begin < s.ref.length; begin += chunk) {
    const size_t n = static_cast<size_t>(std::min(chunk, s.ref.length - begin)) * sizeof(float);
    std::memcpy(staging.data(), s.data + begin, n);
    std::memset(staging.data() + n, 0, chunk_bytes - n);
    const uint32_t sum = h5::fletcher32(staging.data(), chunk_bytes);
    for (int b = 0; b < 4; ++b) staging[chunk_bytes + static_cast<size_t>(b)] = static_cast<char>((sum >> (8 * b)) & 0xFF);
    const hsize_t offset[1] = {static_cast<hsize_t>(begin)};
    ZT_H5_CHECK(H5Dwrite_chunk(dset, H5P_DEFAULT, 0, offset, chunk_bytes + 4, staging.data()) >= 0,
                cannot_write(path), what);
  }
}

void write_dataset(const std::string& path, hid_t group, const ShardData& s, std::vector<char>* direct) {
  const ShardRef& r = s.ref;
  const std::string name = "u" + std::to_string(r.unit) + "_" + std::to_string(r.global_offset);
  const std::string what = "dataset /" + s.state + "/" + name;
  const hsize_t dims[1] = {static_cast<hsize_t>(r.length)};
  h5::Id space(H5Screate_simple(1, dims, nullptr), H5Sclose);
  h5::Id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (r.length > 0) {  // a chunked layout needs a non-empty chunk; empty shards stay contiguous
    const hsize_t chunk[1] = {static_cast<hsize_t>(std::min(r.length, kMaxChunkElems))};
    ZT_H5_CHECK(H5Pset_chunk(dcpl.get(), 1, chunk) >= 0 && H5Pset_fletcher32(dcpl.get()) >= 0, cannot_write(path),
                what);
  }
  h5::Id dset(H5Dcreate2(group, name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
              H5Dclose);
  ZT_H5_CHECK(dset.valid(), cannot_write(path), what);
  if (r.length > 0) {
    if (direct != nullptr) {
      write_chunks_direct(path, what, dset.get(), s, *direct);
    } else {
      ZT_H5_CHECK(H5Dwrite(dset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, s.data) >= 0,
                  cannot_write(path), what);
    }
  }
  write_attr_i64(path, dset.get(), "unit", r.unit);
  write_attr_string(path, dset.get(), "unit_name", r.unit_name);
  write_attr_i64(path, dset.get(), "unit_numel", r.unit_numel);
  write_attr_i64(path, dset.get(), "global_offset", r.global_offset);
  write_attr_i64(path, dset.get(), "length", r.length);
  ZT_H5_CHECK(dset.close(), cannot_write(path), what);
}

// [Note: shard files are built in memory]
// The path for file systems that cannot reserve space (see [Note: direct
// shard files] for the usual one). HDF5 1.10 cannot recover from a failed H5Fclose: when the final metadata
// flush fails (ENOSPC, EFBIG, EIO), the file stays in HDF5's id table, and a
// second H5Fclose, or HDF5's own atexit handler, dereferences freed state and
// segfaults. So HDF5 never touches the disk here: the file is built by the
// core (memory) driver without a backing store, its image is copied out, the
// in-memory file is closed (which cannot fail for want of space), and the
// image is written with write(2) + fsync(2), whose errno is the real reason.
// Cost: the rank's shard payload is held twice in host memory for a moment.
struct Image {
  std::unique_ptr<char[]> data;
  size_t size = 0;
};

Image build_image(const std::string& path, const std::vector<ShardData>& shards) {
  int64_t payload = 0;
  for (const ShardData& s : shards) payload += s.ref.length * static_cast<int64_t>(sizeof(float));
  // One allocation that fits the whole file (payload, chunk checksums and
  // metadata, which is small): growing a multi-GiB image step by step costs
  // copies.
  const size_t increment = static_cast<size_t>(payload + payload / 64 + (int64_t{4} << 20));
  h5::Id fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  ZT_H5_CHECK(fapl.valid() && H5Pset_fapl_core(fapl.get(), increment, /*backing_store=*/0) >= 0, cannot_write(path),
              "file access list");
  h5::Id file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
  ZT_H5_CHECK(file.valid(), cannot_write(path), "create");
  std::vector<std::string> states;
  for (const ShardData& s : shards)
    if (std::find(states.begin(), states.end(), s.state) == states.end()) states.push_back(s.state);
  for (const std::string& state : states) {
    h5::Id group(H5Gcreate2(file.get(), state.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    ZT_H5_CHECK(group.valid(), cannot_write(path), "group /", state);
    for (const ShardData& s : shards)
      if (s.state == state) write_dataset(path, group.get(), s, nullptr);
    ZT_H5_CHECK(group.close(), cannot_write(path), "group /", state);
  }
  ZT_H5_CHECK(H5Fflush(file.get(), H5F_SCOPE_GLOBAL) >= 0, cannot_write(path), "flush");
  const ssize_t size = H5Fget_file_image(file.get(), nullptr, 0);
  ZT_H5_CHECK(size >= 0, cannot_write(path), "file image size");
  Image image{std::unique_ptr<char[]>(new char[static_cast<size_t>(size)]), static_cast<size_t>(size)};  // not zeroed
  ZT_H5_CHECK(H5Fget_file_image(file.get(), image.data.get(), image.size) == size, cannot_write(path), "file image");
  ZT_H5_CHECK(file.close(), cannot_write(path), "close");
  return image;
}

// Writes `image` to `path` and fsyncs it; *created once the file exists.
void write_synced(const std::string& path, const Image& image, bool* created) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) ZT_THROW("cannot create checkpoint file '", path, "': ", std::strerror(errno));
  *created = true;
  size_t done = 0;
  while (done < image.size) {
    const ssize_t n = ::write(fd, image.data.get() + done, image.size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      ZT_THROW("cannot write checkpoint file '", path, "' (", done, " of ", image.size,
               " bytes written): ", std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    ZT_THROW("cannot fsync checkpoint file '", path, "': ", std::strerror(err));
  }
  if (::close(fd) != 0) ZT_THROW("cannot close checkpoint file '", path, "': ", std::strerror(errno));
}

// An upper bound on a shard file's size: payload padded to whole chunks,
// 4 bytes of checksum per chunk, and generously for metadata (object
// headers, attributes, chunk indexes, superblock).
int64_t file_size_bound(const std::vector<ShardData>& shards) {
  int64_t bytes = int64_t{1} << 20;
  for (const ShardData& s : shards) {
    const int64_t chunk = std::max<int64_t>(1, std::min(s.ref.length, kMaxChunkElems));
    const int64_t chunks = (s.ref.length + chunk - 1) / chunk;
    bytes += chunks * (chunk * static_cast<int64_t>(sizeof(float)) + 4 + 512) + 16384;
  }
  return bytes;
}

// Reserves `bytes` of disk for `fd` (fallocate, the file grows to that size).
// Returns false where the file system cannot reserve (not supported), throws
// on a real refusal (no space, file too large) naming the path.
bool reserve(int fd, const std::string& path, int64_t bytes) {
  if (::fallocate(fd, 0, 0, static_cast<off_t>(bytes)) == 0) return true;
  const int err = errno;
  if (err == EOPNOTSUPP || err == ENOSYS || err == ENODEV || err == EINVAL) return false;
  ZT_THROW("cannot write checkpoint file '", path, "': reserving ", bytes, " bytes failed: ", std::strerror(err));
}

// [Note: direct shard files]
// On a file system that can reserve space (fallocate), the file is written
// in place by HDF5's sec2 driver, chunk by chunk with H5Dwrite_chunk, so the
// kernel writes back while later chunks are produced, and nothing is copied
// besides one chunk at a time. The reservation (an upper bound of the file's
// size, taken before HDF5 opens the file and again once it has) is what keeps
// a full disk or a file-size limit from failing an HDF5 write midway, which
// HDF5 1.10 cannot recover from (see [Note: shard files are built in
// memory]); those are refused by fallocate, before HDF5 starts. The file is
// then cut to HDF5's end of allocation, and its SHA-256 is read back (from
// the page cache) while fsync runs. Returns "" when reservation is not
// supported here (the in-memory path is used instead).
std::string write_direct(const std::string& path, const std::vector<ShardData>& shards, bool* created) {
  const int64_t bound = file_size_bound(shards);
  {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) ZT_THROW("cannot create checkpoint file '", path, "': ", std::strerror(errno));
    *created = true;
    struct stat st {};
    const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    bool ok = false;
    try {
      ok = regular && reserve(fd, path, bound);
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
    if (!ok) return "";
  }
  int64_t eoa = 0;
  {
    const h5::Quiet quiet;
    h5::Id fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    ZT_H5_CHECK(fapl.valid() && H5Pset_fapl_sec2(fapl.get()) >= 0, cannot_write(path), "file access list");
    h5::Id file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
    ZT_H5_CHECK(file.valid(), cannot_write(path), "create");
    {
      // H5Fcreate truncated the file: reserve again under HDF5's open file.
      const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0) ZT_THROW("cannot open checkpoint file '", path, "': ", std::strerror(errno));
      const int rc = ::fallocate(fd, 0, 0, static_cast<off_t>(bound));
      const int err = errno;
      ::close(fd);
      if (rc != 0) ZT_THROW("cannot write checkpoint file '", path, "': reserving ", bound, " bytes failed: ", std::strerror(err));
    }
    std::vector<char> staging;
    std::vector<std::string> states;
    for (const ShardData& s : shards)
      if (std::find(states.begin(), states.end(), s.state) == states.end()) states.push_back(s.state);
    for (const std::string& state : states) {
      h5::Id group(H5Gcreate2(file.get(), state.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
      ZT_H5_CHECK(group.valid(), cannot_write(path), "group /", state);
      for (const ShardData& s : shards)
        if (s.state == state) write_dataset(path, group.get(), s, &staging);
      ZT_H5_CHECK(group.close(), cannot_write(path), "group /", state);
    }
    ZT_H5_CHECK(H5Fflush(file.get(), H5F_SCOPE_GLOBAL) >= 0, cannot_write(path), "flush");
    hsize_t size = 0;
    ZT_H5_CHECK(H5Fget_filesize(file.get(), &size) >= 0, cannot_write(path), "file size");
    eoa = static_cast<int64_t>(size);
    ZT_H5_CHECK(file.close(), cannot_write(path), "close");
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) ZT_THROW("cannot open checkpoint file '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || (st.st_size > eoa && ::ftruncate(fd, static_cast<off_t>(eoa)) != 0)) {
    const int err = errno;
    ::close(fd);
    ZT_THROW("cannot cut checkpoint file '", path, "' to ", eoa, " bytes: ", std::strerror(err));
  }
  std::future<std::string> sha = std::async(std::launch::async, [&path] { return sha256_file(path); });
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  std::string hex = sha.get();
  if (rc != 0) ZT_THROW("cannot fsync checkpoint file '", path, "': ", std::strerror(err));
  return hex;
}

}  // namespace

std::string write_shard_file(const std::string& path, const std::vector<ShardData>& shards) {
  check_shards(path, shards);
  bool created = false;
  try {
    if (std::string sha = write_direct(path, shards, &created); !sha.empty()) return sha;
    Image image;
    {
      const h5::Quiet quiet;
      image = build_image(path, shards);
    }
    // The SHA-256 of the bytes being written is taken on a second thread
    // while write(2) and fsync(2) run (the image is only read by both).
    std::future<std::string> sha =
        std::async(std::launch::async, [&image] { return sha256_hex(image.data.get(), image.size); });
    write_synced(path, image, &created);
    return sha.get();
  } catch (...) {
    // Remove only what this call made, and only a regular file (never a device).
    std::error_code ec;
    if (created && std::filesystem::is_regular_file(std::filesystem::symlink_status(path, ec)))
      std::filesystem::remove(path, ec);
    throw;
  }
}

}  // namespace zt
