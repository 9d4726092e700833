// SwapDir, the directory behind nvme_path: the checks of the path (a device,
// a file, a missing parent, a directory that cannot be written), the free
// space and preallocation errors, the files and their names, the direct-I/O
// alignment, and the lock that tells a killed run's files (removed by the
// next SwapDir) from a live one's (kept).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "aio_test_util.hpp"
#include "core/error.hpp"
#include "runtime/aio/aio.hpp"

namespace zt {
namespace {

using aio_test::list_dir;
using aio_test::Mount;
using aio_test::TempDir;

constexpr const char* kKey = "zero_optimization.offload_optimizer.nvme_path";

std::string user_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no UserError)";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

bool exists(const std::string& p) { return ::access(p.c_str(), F_OK) == 0; }

std::vector<std::string> swap_names(const std::string& dir) {
  std::vector<std::string> out;
  for (const std::string& n : list_dir(dir))
    if (n.rfind("ztrain-", 0) == 0) out.push_back(n);
  std::sort(out.begin(), out.end());
  return out;
}

TEST(SwapDir, CharacterDeviceNeedsADirectory) {
  const std::string m = user_error([] { SwapDir d("/dev/null", kKey, "r", 0); });
  EXPECT_TRUE(contains(m, kKey)) << m;
  EXPECT_TRUE(contains(m, "/dev/null")) << m;
  EXPECT_TRUE(contains(m, "character device")) << m;
  EXPECT_TRUE(contains(m, "directory")) << m;
  EXPECT_TRUE(contains(m, "/local_nvme/ztrain_swap")) << m;  // the example
  std::printf("[ info ] %s\n", m.c_str());
}

TEST(SwapDir, BlockDeviceNeedsADirectory) {
  std::string dev;
  for (const auto& e : std::filesystem::directory_iterator("/dev")) {
    struct stat st {};
    if (::stat(e.path().c_str(), &st) == 0 && S_ISBLK(st.st_mode)) {
      dev = e.path().string();
      break;
    }
  }
  if (dev.empty()) GTEST_SKIP() << "no block device in /dev here";
  const std::string m = user_error([&] { SwapDir d(dev, kKey, "r", 0); });
  EXPECT_TRUE(contains(m, dev)) << m;
  EXPECT_TRUE(contains(m, "block device")) << m;
  EXPECT_TRUE(contains(m, "directory on a mounted file system")) << m;
}

TEST(SwapDir, RegularFileIsRefused) {
  TempDir tmp;
  const std::string file = tmp / "plain";
  FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  const std::string m = user_error([&] { SwapDir d(file, kKey, "r", 0); });
  EXPECT_TRUE(contains(m, file)) << m;
  EXPECT_TRUE(contains(m, "regular file")) << m;
  EXPECT_TRUE(contains(m, "directory")) << m;
}

TEST(SwapDir, CreatesTheLastFolderOnly) {
  TempDir tmp;
  {
    SwapDir d(tmp / "swap", kKey, "r", 0);
    EXPECT_TRUE(std::filesystem::is_directory(tmp / "swap"));
  }
  const std::string missing = tmp / "no/such/swap";
  const std::string m = user_error([&] { SwapDir d(missing, kKey, "r", 0); });
  EXPECT_TRUE(contains(m, kKey)) << m;
  EXPECT_TRUE(contains(m, missing)) << m;
  EXPECT_TRUE(contains(m, "parent")) << m;
  EXPECT_FALSE(exists(tmp / "no"));
}

// Root writes through chmod 0500, so as root the unwritable directory is a
// read-only tmpfs; elsewhere chmod does it.
TEST(SwapDir, UnwritableDirectoryIsRefused) {
  if (::geteuid() != 0) {
    TempDir tmp;
    ASSERT_EQ(::chmod(tmp.path().c_str(), 0500), 0);
    const std::string m = user_error([&] { SwapDir d(tmp.path(), kKey, "r", 0); });
    ::chmod(tmp.path().c_str(), 0700);
    EXPECT_TRUE(contains(m, "not writable")) << m;
    EXPECT_TRUE(contains(m, tmp.path())) << m;
    return;
  }
  Mount ro("tmpfs", MS_RDONLY, "size=1m");
  if (!ro.ok()) GTEST_SKIP() << "running as root, where chmod does not stop writes, and " << ro.why();
  const std::string m = user_error([&] { SwapDir d(ro.path(), kKey, "r", 0); });
  EXPECT_TRUE(contains(m, kKey)) << m;
  EXPECT_TRUE(contains(m, ro.path())) << m;
  EXPECT_TRUE(contains(m, "not writable")) << m;
  EXPECT_TRUE(contains(m, std::strerror(EROFS))) << m;
}

TEST(SwapDir, FreeSpaceIsChecked) {
  TempDir tmp;
  SwapDir d(tmp.path(), kKey, "r", 0);
  EXPECT_NO_THROW(d.check_free_space(4096, "the optimizer states"));
  const std::string m = user_error([&] { d.check_free_space(int64_t{1} << 60, "the optimizer states"); });
  EXPECT_TRUE(contains(m, kKey)) << m;
  EXPECT_TRUE(contains(m, tmp.path())) << m;
  EXPECT_TRUE(contains(m, "the optimizer states")) << m;
  EXPECT_TRUE(contains(m, "1073741824.00 GiB")) << m;
  EXPECT_TRUE(contains(m, "free")) << m;
}

TEST(SwapDir, NoSpaceToPreallocateNamesTheFile) {
  Mount small("tmpfs", 0, "size=1m");
  if (!small.ok()) GTEST_SKIP() << "cannot mount a small tmpfs: " << small.why();
  SwapDir d(small.path(), kKey, "r", 0);
  d.file("fits", 512 << 10);
  const std::string m = user_error([&] { d.file("too_big", 4 << 20); });
  EXPECT_TRUE(contains(m, kKey)) << m;
  EXPECT_TRUE(contains(m, "ztrain-r-rank0-too_big.swp")) << m;
  EXPECT_TRUE(contains(m, "preallocate")) << m;
  EXPECT_TRUE(contains(m, std::strerror(ENOSPC))) << m;
  EXPECT_FALSE(exists(small.path() + "/ztrain-r-rank0-too_big.swp"));  // not left behind
}

TEST(SwapDir, FilesAreNamedPreallocatedAndRemovedWithTheDir) {
  TempDir tmp;
  {
    SwapDir d(tmp.path(), kKey, "run7", 3);
    const int64_t size = align_up(100000, d.alignment());
    SwapFile& f = d.file("exp_avg", size);
    EXPECT_EQ(f.path(), tmp / "ztrain-run7-rank3-exp_avg.swp");
    EXPECT_EQ(f.size(), size);
    struct stat st {};
    ASSERT_EQ(::stat(f.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_size, size);
    EXPECT_GE(st.st_blocks * 512, size);  // fallocate: the blocks are there
    EXPECT_EQ(&d.file("exp_avg", size), &f);  // the same file again
    EXPECT_THROW(d.file("exp_avg", 2 * size), Error);
    EXPECT_THROW(d.file("odd", 1000 + static_cast<int64_t>(d.alignment())), Error);  // not aligned
    EXPECT_THROW(d.file("a/b", size), Error);
    d.file("exp_avg_sq", size);
    EXPECT_EQ(swap_names(tmp.path()),
              (std::vector<std::string>{"ztrain-run7-rank3-exp_avg.swp", "ztrain-run7-rank3-exp_avg_sq.swp",
                                        "ztrain-run7-rank3.lock"}));
  }
  EXPECT_TRUE(list_dir(tmp.path()).empty());  // files, lock and probes gone
}

TEST(SwapDir, AlignmentIsWhatStatxSaysOrAPowerOfTwo) {
  for (const std::string base : {"/tmp", "/dev/shm"}) {
    if (::access(base.c_str(), W_OK) != 0) continue;
    TempDir tmp(base);
    const size_t a = direct_io_alignment(tmp.path());
    EXPECT_GE(a, 512u) << base;
    EXPECT_LE(a, 4096u) << base;
    EXPECT_EQ(a & (a - 1), 0u) << base;
    SwapDir d(tmp.path(), kKey, "r", 0);
    EXPECT_EQ(d.alignment(), a) << base;
#ifdef STATX_DIOALIGN
    const std::string probe = tmp / "probe";
    const int fd = ::open(probe.c_str(), O_CREAT | O_RDWR, 0600);
    ASSERT_GE(fd, 0);
    ::close(fd);
    struct statx sx {};
    ASSERT_EQ(::statx(AT_FDCWD, probe.c_str(), 0, STATX_DIOALIGN, &sx), 0);
    if ((sx.stx_mask & STATX_DIOALIGN) && sx.stx_dio_offset_align > 0) {
      EXPECT_EQ(a, std::max(sx.stx_dio_mem_align, sx.stx_dio_offset_align)) << base;
    }
    std::printf("[ info ] %s: direct-I/O alignment %zu, O_DIRECT %s, statx DIOALIGN %s\n", base.c_str(), a,
                d.direct() ? "yes" : "no", (sx.stx_mask & STATX_DIOALIGN) ? "reported" : "not reported");
#endif
  }
}

TEST(SwapDir, RunIdsAreChecked) {
  TempDir tmp;
  EXPECT_THROW(SwapDir(tmp.path(), kKey, "a/b", 0), Error);
  EXPECT_THROW(SwapDir(tmp.path(), kKey, "x-rank2", 0), Error);  // would be ambiguous
  EXPECT_THROW(SwapDir(tmp.path(), kKey, "", 0), Error);
}

// Two SwapDirs of the same run id and rank: the second is a mistake of the
// launcher (a live process uses them); other runs and ranks live side by side.
TEST(SwapDir, LiveRunsInOneDirectoryKeepTheirFiles) {
  TempDir tmp;
  SwapDir a(tmp.path(), kKey, "a", 0);
  a.file("m", 4096);
  SwapDir b(tmp.path(), kKey, "b", 0);
  SwapDir a1(tmp.path(), kKey, "a", 1);
  EXPECT_TRUE(exists(tmp / "ztrain-a-rank0-m.swp"));
  EXPECT_TRUE(exists(tmp / "ztrain-a-rank0.lock"));
  const std::string m = user_error([&] { SwapDir again(tmp.path(), kKey, "a", 0); });
  EXPECT_TRUE(contains(m, "another live process")) << m;
  EXPECT_TRUE(exists(tmp / "ztrain-a-rank0-m.swp"));
}

// A child makes a SwapDir with a file and is killed with SIGKILL (nothing
// runs on its way out); `hold` keeps it alive until the parent writes to
// `go`. Returns its pid once its files exist.
pid_t child_with_swap_files(const std::string& dir, const std::string& run, int rank, bool hold, int* go_fd) {
  int ready[2], go[2];
  if (::pipe(ready) != 0 || ::pipe(go) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ready[0]);
    ::close(go[1]);
    try {
      SwapDir d(dir, kKey, run, rank);
      d.file("exp_avg", 1 << 20);
      d.file("exp_avg_sq", 1 << 20);
      char c = 1;
      if (::write(ready[1], &c, 1) != 1) ::_exit(3);
      if (hold && ::read(go[0], &c, 1) < 0) ::_exit(4);
      ::raise(SIGKILL);
    } catch (...) {
    }
    ::_exit(5);
  }
  ::close(ready[1]);
  ::close(go[0]);
  char c = 0;
  const bool ok = ::read(ready[0], &c, 1) == 1;
  ::close(ready[0]);
  if (!ok) {
    ::waitpid(pid, nullptr, 0);
    return -1;
  }
  *go_fd = go[1];
  return pid;
}

void reap_killed(pid_t pid) {
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
}

TEST(SwapDir, FilesOfAKilledRunAreRemovedAndALiveRunsKept) {
  TempDir tmp;
  // A run that is still alive (another job sharing the drive).
  int go_live = -1;
  const pid_t live = child_with_swap_files(tmp.path(), "alive", 2, true, &go_live);
  ASSERT_GT(live, 0);
  // A run killed before it could clean up (its SwapDir leaves the live
  // run's files alone too).
  int go_dead = -1;
  const pid_t dead = child_with_swap_files(tmp.path(), "killed", 2, false, &go_dead);
  ASSERT_GT(dead, 0);
  reap_killed(dead);
  ::close(go_dead);
  EXPECT_TRUE(exists(tmp / "ztrain-alive-rank2-exp_avg.swp"));
  EXPECT_TRUE(exists(tmp / "ztrain-killed-rank2-exp_avg.swp"));
  EXPECT_TRUE(exists(tmp / "ztrain-killed-rank2.lock"));

  testing::internal::CaptureStderr();
  {
    SwapDir next(tmp.path(), kKey, "next", 0);  // another rank: stale files of any rank go
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_TRUE(contains(err, "removed 2 stale swap files of a killed run")) << err;
    EXPECT_TRUE(contains(err, "'killed'")) << err;
    EXPECT_FALSE(contains(err, "'alive'")) << err;
    EXPECT_FALSE(exists(tmp / "ztrain-killed-rank2-exp_avg.swp"));
    EXPECT_FALSE(exists(tmp / "ztrain-killed-rank2-exp_avg_sq.swp"));
    EXPECT_FALSE(exists(tmp / "ztrain-killed-rank2.lock"));
    // The live run's files are untouched.
    EXPECT_TRUE(exists(tmp / "ztrain-alive-rank2-exp_avg.swp"));
    EXPECT_TRUE(exists(tmp / "ztrain-alive-rank2-exp_avg_sq.swp"));
    EXPECT_TRUE(exists(tmp / "ztrain-alive-rank2.lock"));
  }

  // Once the live run is killed too, its files are stale in turn; a restart
  // with the same run id and rank takes its place.
  char c = 1;
  ASSERT_EQ(::write(go_live, &c, 1), 1);
  ::close(go_live);
  reap_killed(live);
  testing::internal::CaptureStderr();
  {
    SwapDir restart(tmp.path(), kKey, "alive", 2);
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_TRUE(contains(err, "removed 2 stale swap files of a killed run (run id 'alive', rank 2")) << err;
    EXPECT_EQ(swap_names(tmp.path()), std::vector<std::string>{"ztrain-alive-rank2.lock"});
  }
  EXPECT_TRUE(list_dir(tmp.path()).empty());
}

}  // namespace
}  // namespace zt
