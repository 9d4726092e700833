// SwapDir: the checks of nvme_path, the swap files, and the lock that tells
// the files of a killed run from those of a live one ([Note: stale swap
// files] in aio.hpp).
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "runtime/aio/aio.hpp"
#include "runtime/aio/aio_internal.hpp"

namespace zt {
namespace {

using aio_detail::describe_errno;
using aio_detail::gib;

constexpr const char* kPrefix = "ztrain-";
constexpr const char* kExample = "/local_nvme/ztrain_swap";

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
bool starts_with(const std::string& s, const std::string& head) { return s.compare(0, head.size(), head) == 0; }

bool name_chars_ok(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string parent_of(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return p.substr(0, slash);
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return names;
  while (const dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
  ::closedir(d);
  return names;
}

// "ztrain-<run>-rank<R>": the run id and rank, or false.
bool parse_stem(const std::string& stem, std::string* run, int* rank) {
  if (!starts_with(stem, kPrefix)) return false;
  const size_t at = stem.rfind("-rank");
  if (at == std::string::npos || at <= std::string(kPrefix).size()) return false;
  const std::string digits = stem.substr(at + 5);
  if (digits.empty() || digits.size() > 9) return false;
  for (char c : digits)
    if (c < '0' || c > '9') return false;
  *run = stem.substr(std::string(kPrefix).size(), at - std::string(kPrefix).size());
  *rank = std::stoi(digits);
  return true;
}

// Says once per directory per process that it has no O_DIRECT.
void say_buffered_once(const std::string& path, const std::string& key, const std::string& why) {
  static std::mutex mu;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mu);
  if (!said.insert(path).second) return;
  log_warn(key, " = ", path, ": no direct I/O on this file system (", why,
           "); swap files use buffered I/O through the page cache");
}

std::atomic<int> g_tmp_counter{0};

}  // namespace

SwapDirOpening::SwapDirOpening(const std::string& path) {
  fd_ = ::open(parent_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ >= 0 && ::flock(fd_, LOCK_EX) != 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

SwapDirOpening::~SwapDirOpening() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

SwapFile::~SwapFile() {
  if (fd_ >= 0) ::close(fd_);
}

SwapDir::SwapDir(const std::string& path, const std::string& key, const std::string& run_id, int rank)
    : path_(path), key_(key), run_id_(run_id), rank_(rank) {
  if (path_.empty()) ZT_USER_ERROR(key_, " is empty: give a directory on a mounted file system, e.g. ", kExample);
  while (path_.size() > 1 && path_.back() == '/') path_.pop_back();
  ZT_CHECK(name_chars_ok(run_id_) && run_id_.find("-rank") == std::string::npos,
           "swap run id '", run_id_, "' must be letters, digits, '_', '.', '-' without \"-rank\"");
  ZT_CHECK(rank_ >= 0, "swap rank ", rank_);

  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    const int err = errno;
    if (err != ENOENT)
      ZT_USER_ERROR(key_, " = ", path_, " cannot be examined: ", describe_errno(err));
    const std::string parent = parent_of(path_);
    struct stat pst {};
    if (::stat(parent.c_str(), &pst) != 0 || !S_ISDIR(pst.st_mode))
      ZT_USER_ERROR(key_, " = ", path_, " does not exist, nor does its parent directory ", parent,
                    " (only the last folder is created): give a directory on a mounted file system, e.g. ",
                    kExample);
    if (::mkdir(path_.c_str(), 0700) != 0 && errno != EEXIST)
      ZT_USER_ERROR(key_, " = ", path_, " could not be created: ", describe_errno(errno));
    if (::stat(path_.c_str(), &st) != 0)
      ZT_USER_ERROR(key_, " = ", path_, " cannot be examined: ", describe_errno(errno));
  }
  if (S_ISBLK(st.st_mode) || S_ISCHR(st.st_mode))
    ZT_USER_ERROR(key_, " = ", path_, " is a ", S_ISBLK(st.st_mode) ? "block" : "character",
                  " device; NVMe offload needs a directory on a mounted file system (format and mount the "
                  "drive, then give a folder on it, e.g. ",
                  kExample, ")");
  if (S_ISREG(st.st_mode))
    ZT_USER_ERROR(key_, " = ", path_, " is a regular file; it must be a directory on a mounted file system, e.g. ",
                  kExample);
  if (!S_ISDIR(st.st_mode))
    ZT_USER_ERROR(key_, " = ", path_, " is not a directory; give a directory on a mounted file system, e.g. ",
                  kExample);

  // The lock, created under a temporary name and locked before it is linked
  // into place; creating it is also the test that the directory is writable.
  const std::string stem = detail::concat(kPrefix, run_id_, "-rank", rank_);
  lock_path_ = detail::concat(path_, "/", stem, ".lock");
  const std::string tmp = detail::concat(lock_path_, "-tmp-", ::getpid(), "-", g_tmp_counter++);
  lock_fd_ = ::open(tmp.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (lock_fd_ < 0)
    ZT_USER_ERROR(key_, " = ", path_, " is not writable (creating ", tmp, ": ", describe_errno(errno), ")");
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    ::close(lock_fd_);
    lock_fd_ = -1;
    ZT_THROW("flock of ", tmp, ": ", describe_errno(err));
  }

  const aio_detail::DirProbe probe = aio_detail::probe_dir(path_);
  alignment_ = probe.alignment;
  direct_ = probe.direct;
  if (!direct_) say_buffered_once(path_, key_, probe.why_buffered);

  remove_stale();

  if (::link(tmp.c_str(), lock_path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    ::close(lock_fd_);
    lock_fd_ = -1;
    if (err == EEXIST)
      ZT_USER_ERROR(key_, " = ", path_, ": another live process uses run id '", run_id_, "' and rank ", rank_,
                    " there (", lock_path_, " is locked); give each run its own id");
    ZT_USER_ERROR(key_, " = ", path_, ": cannot create ", lock_path_, ": ", describe_errno(err));
  }
  ::unlink(tmp.c_str());
}

SwapDir::~SwapDir() {
  // Files first, the lock last: a crash in between leaves a lock whose files
  // the next SwapDir removes.
  for (auto& [name, f] : files_) {
    ::close(f->fd_);
    f->fd_ = -1;
    ::unlink(f->path_.c_str());
  }
  files_.clear();
  if (lock_fd_ >= 0) {
    ::unlink(lock_path_.c_str());
    ::close(lock_fd_);
  }
}

void SwapDir::remove_stale() {
  struct Stale {
    std::string lock, stem;  // stem: "ztrain-<run>-rank<R>"
    std::string run;
    int rank;
  };
  std::vector<Stale> candidates;
  std::vector<std::string> tmp_locks;
  for (const std::string& name : list_dir(path_)) {
    if (!starts_with(name, kPrefix)) continue;
    if (name.find(".lock-tmp-") != std::string::npos) {
      tmp_locks.push_back(name);
      continue;
    }
    if (!ends_with(name, ".lock")) continue;
    Stale s;
    s.lock = name;
    s.stem = name.substr(0, name.size() - 5);
    if (parse_stem(s.stem, &s.run, &s.rank)) candidates.push_back(s);
  }

  // Takes the lock of `name` when no live process holds it; the open file
  // must still be the one under that name (another SwapDir may have removed
  // it meanwhile). Returns the locked descriptor or -1.
  auto take_if_stale = [&](const std::string& name) {
    const std::string p = detail::concat(path_, "/", name);
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat a {}, b {};
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0 || ::fstat(fd, &a) != 0 || ::stat(p.c_str(), &b) != 0 ||
        a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
      ::close(fd);
      return -1;
    }
    return fd;
  };

  // A temporary lock is unlocked for an instant between its creation and its
  // flock: one whose creator (the pid in its name) still runs on this host
  // is left alone, or its creator would lose it before linking it.
  auto creator_alive = [](const std::string& name) {
    const size_t at = name.find(".lock-tmp-");
    const long pid = std::strtol(name.c_str() + at + 10, nullptr, 10);
    return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
  };
  for (const std::string& name : tmp_locks) {
    if (creator_alive(name)) continue;
    const int fd = take_if_stale(name);
    if (fd < 0) continue;
    ::unlink(detail::concat(path_, "/", name).c_str());
    ::close(fd);
  }

  for (const Stale& s : candidates) {
    const int fd = take_if_stale(s.lock);
    if (fd < 0) continue;  // a live run's: never touched
    const std::string prefix = s.stem + "-";
    int removed = 0;
    int64_t bytes = 0;
    for (const std::string& name : list_dir(path_)) {
      if (!starts_with(name, prefix) || !ends_with(name, ".swp")) continue;
      const std::string p = detail::concat(path_, "/", name);
      struct stat st {};
      const int64_t size = ::stat(p.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_blocks) * 512 : 0;
      if (::unlink(p.c_str()) == 0) {
        ++removed;
        bytes += size;
      }
    }
    ::unlink(detail::concat(path_, "/", s.lock).c_str());
    ::close(fd);
    log_warn(key_, " = ", path_, ": removed ", removed, " stale swap files of a killed run (run id '", s.run,
             "', rank ", s.rank, ", ", aio_detail::human_bytes(bytes), ") and its lock ", s.lock);
  }
}

void SwapDir::check_free_space(int64_t bytes_needed, const std::string& what) const {
  struct statvfs vfs {};
  if (::statvfs(path_.c_str(), &vfs) != 0)
    ZT_USER_ERROR(key_, " = ", path_, ": cannot read the free space (statvfs: ", describe_errno(errno), ")");
  const auto free_bytes = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
  if (bytes_needed > free_bytes)
    ZT_USER_ERROR(key_, " = ", path_, ": ", what, " need ", gib(bytes_needed), " (", bytes_needed,
                  " bytes) but the file system has ", gib(free_bytes), " free");
}

SwapFile& SwapDir::file(const std::string& name, int64_t size) {
  ZT_CHECK(name_chars_ok(name), "swap file name '", name, "' must be letters, digits, '_', '.', '-'");
  ZT_CHECK(size > 0 && size % static_cast<int64_t>(alignment_) == 0, "swap file '", name, "' of ", size,
           " bytes: the size must be a positive multiple of ", alignment_, " (align_up(bytes, alignment()))");
  auto it = files_.find(name);
  if (it != files_.end()) {
    ZT_CHECK(it->second->size() == size, "swap file '", name, "' exists with ", it->second->size(),
             " bytes, asked for ", size);
    return *it->second;
  }
  const std::string p = detail::concat(path_, "/", kPrefix, run_id_, "-rank", rank_, "-", name, ".swp");
  const int flags = O_CREAT | O_TRUNC | O_RDWR | O_CLOEXEC | (direct_ ? O_DIRECT : 0);
  const int fd = ::open(p.c_str(), flags, 0600);
  if (fd < 0) ZT_THROW("creating swap file ", p, ": ", describe_errno(errno));
  if (::fallocate(fd, 0, 0, size) != 0) {
    int err = errno;
    if (err == EOPNOTSUPP || err == ENOSYS) err = ::ftruncate(fd, size) == 0 ? 0 : errno;
    if (err != 0) {
      ::close(fd);
      ::unlink(p.c_str());
      if (err == ENOSPC || err == EDQUOT) {
        struct statvfs vfs {};
        const int64_t free_bytes =
            ::statvfs(path_.c_str(), &vfs) == 0 ? static_cast<int64_t>(vfs.f_bavail) * vfs.f_frsize : -1;
        ZT_USER_ERROR(key_, " = ", path_, ": no space to preallocate swap file ", p, " (", gib(size), ", ", size,
                      " bytes; ", free_bytes >= 0 ? gib(free_bytes) : std::string("unknown"),
                      " free): ", describe_errno(err));
      }
      ZT_THROW("preallocating swap file ", p, " (", size, " bytes): ", describe_errno(err));
    }
  }
  auto f = std::unique_ptr<SwapFile>(new SwapFile(p, fd, size, alignment_, direct_));
  SwapFile& ref = *f;
  files_.emplace(name, std::move(f));
  return ref;
}

}  // namespace zt
