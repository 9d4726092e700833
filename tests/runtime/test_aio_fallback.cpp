// AioBackend::automatic where io_uring is refused, as container seccomp
// profiles and kernel.io_uring_disabled refuse it: a child process installs a
// seccomp filter that fails io_uring_setup with EPERM (or ENOSYS), and its
// engines fall back to the thread pool, saying once, with the reason, which
// back end they use. Each case runs in a fresh child of a process that never
// probed io_uring (the probe's answer is kept for the process's lifetime),
// which is why these tests have a binary of their own.
#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "aio_test_util.hpp"
#include "core/error.hpp"
#include "runtime/aio/aio.hpp"

namespace zt {
namespace {

using aio_test::TempDir;

// Fails io_uring_setup with `err`; every other call is allowed.
bool refuse_io_uring(int err) {
#if defined(__NR_io_uring_setup) && defined(__x86_64__)
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (static_cast<unsigned>(err) & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
#else
  (void)err;
  return false;
#endif
}

struct ChildResult {
  int exit_code = -1;
  std::string out;  // the child's stdout: the log and what it reports
};

// Runs `body` in a child whose stdout goes to a file; exit 77: cannot test.
ChildResult in_child(int seccomp_err, const std::string& dir) {
  const std::string log = dir + "/child.out";
  std::fflush(stdout);
  const pid_t pid = ::fork();
  if (pid == 0) {
    FILE* f = std::freopen(log.c_str(), "w", stdout);
    if (!f) ::_exit(76);
    if (seccomp_err != 0 && !refuse_io_uring(seccomp_err)) ::_exit(77);
    int rc = 0;
    try {
      SwapDir swap(dir, "nvme_path", "fallback", 0);
      for (int i = 0; i < 3; ++i) {
        auto aio = make_aio_engine(AioOptions{}, AioBackend::automatic, swap);
        std::printf("backend=%s\n", aio_backend_name(aio->backend()));
        SwapFile& file = swap.file("f", 1 << 20);
        aio_test::AlignedBuf buf(1 << 20);
        buf.fill_random(i);
        aio->wait(aio->submit_write(file, buf.data(), 1 << 20, 0));
      }
      std::string why;
      const bool available = io_uring_available(&why);
      std::printf("available=%d why=%s\n", available ? 1 : 0, why.c_str());
      try {
        make_aio_engine(AioOptions{}, AioBackend::io_uring, swap);
        std::printf("explicit=ok\n");
      } catch (const Error& e) {
        std::printf("explicit=error %s\n", e.message().c_str());
      }
    } catch (const std::exception& e) {
      std::printf("exception %s\n", e.what());
      rc = 1;
    }
    std::fflush(stdout);
    ::_exit(rc);
  }
  ChildResult r;
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  const std::vector<char> bytes = aio_test::read_file(log);
  r.out.assign(bytes.begin(), bytes.end());
  return r;
}

int count(const std::string& s, const std::string& part) {
  int n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

void expect_fallback(int err) {
  TempDir tmp;
  const ChildResult r = in_child(err, tmp.path());
  if (r.exit_code == 77) GTEST_SKIP() << "cannot install a seccomp filter here";
  ASSERT_EQ(r.exit_code, 0) << r.out;
  if (r.out.find("built without liburing") != std::string::npos)
    GTEST_SKIP() << "built without liburing: nothing to fall back from";
  EXPECT_EQ(count(r.out, "backend=threads"), 3) << r.out;
  // Said once, with the reason, for three engines.
  EXPECT_EQ(count(r.out, "aio: thread-pool back end (auto: io_uring is unavailable"), 1) << r.out;
  EXPECT_EQ(count(r.out, " back end ("), 1) << r.out;
  EXPECT_NE(r.out.find(std::strerror(err)), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("available=0 why=io_uring_queue_init: " + std::string(std::strerror(err))), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("explicit=error aio: the io_uring back end is unavailable"), std::string::npos) << r.out;
  std::printf("[ info ] %s", r.out.c_str());
}

TEST(AioFallback, SeccompEpermFallsBackToThreadsSayingWhyOnce) { expect_fallback(EPERM); }
TEST(AioFallback, SeccompEnosysFallsBackToThreadsSayingWhyOnce) { expect_fallback(ENOSYS); }

TEST(AioFallback, WithoutAFilterAutomaticSaysOnceToo) {
  TempDir tmp;
  const ChildResult r = in_child(0, tmp.path());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(count(r.out, " back end (auto"), 1) << r.out;
  if (r.out.find("available=1") != std::string::npos) {
    EXPECT_EQ(count(r.out, "backend=io_uring"), 3) << r.out;
    EXPECT_NE(r.out.find("aio: io_uring back end (auto"), std::string::npos) << r.out;
  } else {
    EXPECT_EQ(count(r.out, "backend=threads"), 3) << r.out;
  }
  std::printf("[ info ] %s", r.out.c_str());
}

}  // namespace
}  // namespace zt
