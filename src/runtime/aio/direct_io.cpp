// The direct-I/O alignment of a directory and whether it has O_DIRECT at all
// ([Note: aio alignment] in aio.hpp).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/error.hpp"
#include "runtime/aio/aio.hpp"
#include "runtime/aio/aio_internal.hpp"

namespace zt {
namespace aio_detail {
namespace {

bool power_of_two(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// st_blksize where it is a plausible logical block size, else 4096.
size_t blksize_alignment(uint64_t blksize) {
  return power_of_two(blksize) && blksize >= 512 && blksize <= 4096 ? blksize : 4096;
}

// The alignment statx reports for `path`; 0 where it reports none.
// `said_no_dio`: the kernel reported STATX_DIOALIGN with zeros, its way of
// saying that the file has no direct I/O.
size_t statx_alignment(const std::string& path, uint64_t* blksize, bool* said_no_dio) {
  *said_no_dio = false;
#ifdef STATX_DIOALIGN
  struct statx sx {};
  if (statx(AT_FDCWD, path.c_str(), 0, STATX_BASIC_STATS | STATX_DIOALIGN, &sx) == 0) {
    *blksize = sx.stx_blksize;
    if (sx.stx_mask & STATX_DIOALIGN) {
      if (sx.stx_dio_mem_align == 0 || sx.stx_dio_offset_align == 0) {
        *said_no_dio = true;
        return 0;
      }
      return std::max(sx.stx_dio_mem_align, sx.stx_dio_offset_align);
    }
    return 0;
  }
#endif
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) *blksize = static_cast<uint64_t>(st.st_blksize);
  return 0;
}

// One aligned write with O_DIRECT, the test that counts: some file systems
// accept the open and refuse the transfer.
bool direct_write_works(const std::string& path, size_t alignment, int* err) {
  const int fd = ::open(path.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
  if (fd < 0) {
    *err = errno;
    return false;
  }
  void* raw = nullptr;
  if (posix_memalign(&raw, std::max<size_t>(alignment, 4096), alignment) != 0) {
    ::close(fd);
    *err = ENOMEM;
    return false;
  }
  std::unique_ptr<void, decltype(&std::free)> buf(raw, &std::free);
  std::memset(raw, 0, alignment);
  const ssize_t n = ::pwrite(fd, raw, alignment, 0);
  *err = n < 0 ? errno : 0;
  ::close(fd);
  return n == static_cast<ssize_t>(alignment);
}

std::atomic<int> g_probe_counter{0};

}  // namespace

std::string describe_errno(int err) { return detail::concat(std::strerror(err), " (errno ", err, ")"); }

std::string human_bytes(int64_t bytes) {
  if (bytes >= (int64_t{1} << 30)) return gib(bytes);
  char text[32];
  if (bytes >= (int64_t{1} << 20))
    std::snprintf(text, sizeof text, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  else
    std::snprintf(text, sizeof text, "%lld bytes", static_cast<long long>(bytes));
  return text;
}

std::string gib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return text;
}

DirProbe probe_dir(const std::string& dir) {
  DirProbe probe;
  uint64_t blksize = 0;
  bool said_no_dio = false;
  const std::string path = detail::concat(dir, "/.ztrain-dio-probe-", ::getpid(), "-", g_probe_counter++);
  const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    // Not writable: the directory's own numbers (SwapDir says why it is unusable).
    const size_t a = statx_alignment(dir, &blksize, &said_no_dio);
    probe.alignment = a ? a : blksize_alignment(blksize);
    return probe;
  }
  ::close(fd);
  const size_t a = statx_alignment(path, &blksize, &said_no_dio);
  probe.alignment = a ? a : blksize_alignment(blksize);
  int err = 0;
  if (said_no_dio) {
    probe.direct = false;
    probe.why_buffered = "statx reports no direct I/O for its files";
  } else if (!direct_write_works(path, probe.alignment, &err)) {
    // A wrong guess of the alignment gives EINVAL too: 4096 is the last try.
    if (err == EINVAL && probe.alignment < 4096 && direct_write_works(path, 4096, &err)) {
      probe.alignment = 4096;
    } else if (err == EINVAL || err == EOPNOTSUPP) {
      probe.direct = false;
      probe.why_buffered = detail::concat("O_DIRECT fails there: ", describe_errno(err));
    }
    // Other errors (ENOSPC, EIO) say nothing about O_DIRECT; the swap files
    // meet them again and report them.
  }
  ::unlink(path.c_str());
  return probe;
}

}  // namespace aio_detail

size_t direct_io_alignment(const std::string& dir) { return aio_detail::probe_dir(dir).alignment; }

}  // namespace zt
