// Helpers of the aio tests: fresh directories, small file systems mounted for
// one test (tmpfs of a given size, read-only, ramfs), aligned buffers.
#pragma once

#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace zt::aio_test {

// A fresh directory under `base`, removed with its contents afterwards.
class TempDir {
 public:
  explicit TempDir(const std::string& base = "/tmp") {
    std::string templ = base + "/zt_aio_XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + templ);
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A file system mounted on a fresh directory for one test; `ok()` is false
// (and `why()` says why) where mounting is not permitted (not root, or a
// container without CAP_SYS_ADMIN): the test skips.
class Mount {
 public:
  Mount(const char* fstype, unsigned long flags, const std::string& data) {
    if (::mount(fstype, dir_.path().c_str(), fstype, flags, data.empty() ? nullptr : data.c_str()) != 0) {
      why_ = std::string("mount -t ") + fstype + " -o " + data + " " + dir_.path() + ": " + std::strerror(errno);
      return;
    }
    mounted_ = true;
  }
  ~Mount() {
    if (mounted_) ::umount2(dir_.path().c_str(), MNT_DETACH);
  }
  bool ok() const { return mounted_; }
  const std::string& why() const { return why_; }
  const std::string& path() const { return dir_.path(); }

 private:
  TempDir dir_;
  bool mounted_ = false;
  std::string why_;
};

// `bytes` bytes aligned to 4096 (every direct-I/O alignment divides it).
class AlignedBuf {
 public:
  explicit AlignedBuf(size_t bytes) : bytes_(bytes) {
    void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (!p) throw std::bad_alloc();
    p_.reset(static_cast<char*>(p));
  }
  char* data() const { return p_.get(); }
  size_t size() const { return bytes_; }
  void fill_random(uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (size_t i = 0; i < bytes_; ++i) p_.get()[i] = static_cast<char>(rng());
  }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  size_t bytes_;
  std::unique_ptr<char, Free> p_;
};

inline std::vector<char> read_file(const std::string& path) {
  std::vector<char> out;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return out;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.insert(out.end(), buf, buf + n);
  std::fclose(f);
  return out;
}

inline std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

}  // namespace zt::aio_test
