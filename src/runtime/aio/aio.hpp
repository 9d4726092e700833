// Asynchronous file I/O for NVMe offload (ZeRO-Infinity's `nvme_path`):
// swap files under one directory, read and written through (pinned) host
// buffers by an engine that keeps many requests in flight.
//
//   SwapDir dir(cfg.nvme_path, "zero_optimization.offload_optimizer.nvme_path", run_id, rank);
//   dir.check_free_space(total_bytes, "the optimizer states");
//   SwapFile& f = dir.file("exp_avg", align_up(bytes, dir.alignment()));
//   std::unique_ptr<AioEngine> aio = make_aio_engine(options, AioBackend::automatic, dir);
//   AioHandle w = aio->submit_write(f, pinned, align_up(bytes, dir.alignment()), 0);
//   ...                       // compute while the write is in flight
//   aio->wait(w);             // throws on any I/O error or short transfer
//
// [Note: aio alignment] Files are opened with O_DIRECT where the file system
// supports it, so every transfer's buffer address, byte count and file offset
// must be multiples of the directory's alignment (SwapDir::alignment(),
// direct_io_alignment()); the engine checks this and says which one is not.
// The same rule holds where the directory falls back to buffered I/O, so code
// that runs on tmpfs also runs on an NVMe drive. Pinned buffers from
// cudaHostAlloc and buffers from std::aligned_alloc(4096, ...) are aligned.
//
// Errors: bad configuration (nvme_path, aio.*) throws UserError (exit code 2)
// naming the key; an I/O error or a short transfer throws zt::Error from
// wait() naming the file, the operation (read/write), the offset and the
// system's reason (strerror), e.g. "No space left on device".
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

namespace zt {

// ---- options (DeepSpeed's `aio` section) -------------------------------------

// [Note: aio keys] Both back ends run the same schedule; only the primitive
// that moves one piece differs (an io_uring readv/writev, or a pread/pwrite on
// a pool thread). A transfer (one submit_*) is cut into up to
// `thread_count` contiguous slices of whole blocks, one per lane thread (a
// transfer of fewer blocks than lanes uses fewer lanes, and the next transfer
// starts on the lane after the last one used); each lane runs its slices in
// order, cuts each into `block_size` pieces and keeps up to `queue_depth` of
// them in flight:
//
//   block_size      bytes per I/O request (piece). io_uring: one readv/writev
//                   SQE per piece. threads: one pread/pwrite call per piece.
//                   A positive multiple of the directory's alignment, at most
//                   1 GiB. The last piece of a slice may be shorter.
//   queue_depth     pieces in flight per lane. io_uring: each lane's ring has
//                   queue_depth entries and never holds more. threads: each
//                   lane has queue_depth pool threads, each doing one blocking
//                   pread/pwrite at a time (thread_count * queue_depth pool
//                   threads in all).
//   thread_count    lanes that split one transfer (DeepSpeed's
//                   intra_op_parallelism). io_uring: one thread and one ring
//                   per lane. threads: one lane thread and its pool per lane.
//   single_submit   true: each piece is handed over as soon as it is prepared
//                   (io_uring: one io_uring_submit per SQE; threads: one
//                   lock, push and notify_one per piece). false: the pieces
//                   of a round are prepared, then handed over together
//                   (io_uring: one io_uring_submit for the batch; threads: one
//                   lock and notify_all for the batch).
//   overlap_events  true: a lane refills its queue as soon as completions are
//                   reaped, so queue_depth pieces stay in flight (reap one,
//                   take every other ready completion, submit as many new
//                   pieces). false: submit queue_depth pieces, reap all of
//                   them, then submit the next round (DeepSpeed's sequential
//                   mode). Both back ends act alike.
struct AioOptions {
  int64_t block_size = 1 << 20;
  int queue_depth = 8;
  int thread_count = 1;
  bool single_submit = false;
  bool overlap_events = true;
};

// Throws UserError naming `aio.block_size` (and the alignment and `where`,
// e.g. the directory), `aio.queue_depth` or `aio.thread_count` when a value
// is out of range: block_size > 0, a multiple of `alignment` and at most
// 1 GiB; queue_depth >= 1; thread_count >= 1.
void validate_aio_options(const AioOptions& options, size_t alignment, const std::string& where);

// ---- alignment ---------------------------------------------------------------

// The alignment of O_DIRECT transfers to files in directory `dir`: buffer
// address, size and file offset must each be a multiple of it. Read with
// statx(STATX_DIOALIGN) on a probe file created in `dir` (kernel 6.1+ reports
// it for regular files on ext4, xfs, f2fs, block devices): the larger of
// stx_dio_mem_align and stx_dio_offset_align. Where that is not reported (older
// kernel or glibc, tmpfs, NFS, a directory that cannot be written), the
// file system's st_blksize when it is a power of two from 512 to 4096, else
// 4096: no logical block size of a current device exceeds 4096, and every
// file system that supports O_DIRECT accepts 4096-aligned transfers.
size_t direct_io_alignment(const std::string& dir);

inline int64_t align_up(int64_t bytes, size_t alignment) {
  const auto a = static_cast<int64_t>(alignment);
  return (bytes + a - 1) / a * a;
}

// ---- files -------------------------------------------------------------------

// One swap file, owned by its SwapDir. Its capacity is preallocated.
class SwapFile {
 public:
  ~SwapFile();
  SwapFile(const SwapFile&) = delete;
  SwapFile& operator=(const SwapFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return size_; }  // bytes asked for; also the capacity (a multiple of alignment())
  size_t alignment() const { return alignment_; }
  bool direct() const { return direct_; }  // opened with O_DIRECT
  int fd() const { return fd_; }

 private:
  friend class SwapDir;
  SwapFile(std::string path, int fd, int64_t size, size_t alignment, bool direct)
      : path_(std::move(path)), fd_(fd), size_(size), alignment_(alignment), direct_(direct) {}
  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
  size_t alignment_ = 4096;
  bool direct_ = true;
};

// The directory behind `nvme_path`, for one rank of one run.
//
// [Note: stale swap files] Files are named ztrain-<run_id>-rank<R>-<name>.swp.
// For its lifetime a SwapDir holds flock(LOCK_EX) on
// ztrain-<run_id>-rank<R>.lock (created under a temporary name, locked, then
// linked into place, so a lock file is never visible unlocked). On
// construction it looks at every ztrain-*-rank*.lock in the directory, of any
// run and any rank: one whose flock can be taken (LOCK_NB) belongs to a
// process that is gone (killed: SIGKILL, OOM, a node failure), and it is
// removed with every file of that run id and rank ("removed N stale swap
// files of a killed run (...)"). A lock held by a live process (another run,
// another rank on the same node) keeps its files untouched. A clean
// destruction removes this SwapDir's files and its lock.
class SwapDir {
 public:
  // `key` names the setting in messages (e.g.
  // "zero_optimization.offload_optimizer.nvme_path"). Throws UserError naming
  // the key and the path when the path is a device (a directory on a mounted
  // file system is needed), a file, missing with a missing parent (only the
  // last folder is created), or not writable; or when another live process
  // already uses this run id and rank there. `run_id`: letters, digits, '_',
  // '.', '-' and no "-rank"; the same on every rank of a run, different
  // between runs that share the directory.
  SwapDir(const std::string& path, const std::string& key, const std::string& run_id, int rank);
  ~SwapDir();
  SwapDir(const SwapDir&) = delete;
  SwapDir& operator=(const SwapDir&) = delete;

  const std::string& path() const { return path_; }
  const std::string& key() const { return key_; }
  size_t alignment() const { return alignment_; }  // [Note: aio alignment]
  // False where the file system has no O_DIRECT (tmpfs before Linux 6.6,
  // ramfs; an O_DIRECT open or write fails with EINVAL): files use buffered
  // I/O, with the same alignment rules, said once per directory per process.
  bool direct() const { return direct_; }

  // Throws UserError naming the key, the path, `what` and the GiB needed and
  // free (statvfs f_bavail) when fewer than `bytes_needed` bytes are free.
  void check_free_space(int64_t bytes_needed, const std::string& what) const;

  // The file `name` (letters, digits, '_', '.', '-') of `size` bytes, a
  // positive multiple of alignment(): created and preallocated (fallocate;
  // ftruncate where the file system has no fallocate) on the first call,
  // the same file on later calls with the same size. Running out of space
  // while preallocating throws UserError naming the file, the bytes and the
  // free space. The reference stays valid for the SwapDir's lifetime.
  SwapFile& file(const std::string& name, int64_t size);

 private:
  void remove_stale();
  std::string path_, key_, run_id_;
  int rank_ = 0;
  size_t alignment_ = 4096;
  bool direct_ = true;
  std::string lock_path_;
  int lock_fd_ = -1;
  std::map<std::string, std::unique_ptr<SwapFile>> files_;
};

// Holds flock(LOCK_EX) on the parent directory of `path` while SwapDirs are
// made there, so that the processes of a run (its ranks, on one node) and
// the SwapDirs of one process (the optimizer's and the parameters') open
// their swap directories one at a time. SwapDir's stale-file sweep could
// otherwise remove another process's lock file in the instant between its
// creation under a temporary name and its flock (that SwapDir then fails
// "cannot create ...lock: No such file or directory"; about one in a
// thousand of four processes opening at once). Best effort: where the
// parent cannot be opened or locked, nothing is held (SwapDir then says what
// is wrong with the path).
//
//   { SwapDirOpening one_at_a_time(path); dir = std::make_unique<SwapDir>(path, ...); }
class SwapDirOpening {
 public:
  explicit SwapDirOpening(const std::string& path);
  ~SwapDirOpening();
  SwapDirOpening(const SwapDirOpening&) = delete;
  SwapDirOpening& operator=(const SwapDirOpening&) = delete;

 private:
  int fd_ = -1;
};

// ---- the engine ---------------------------------------------------------------

enum class AioBackend { automatic, io_uring, threads };
const char* aio_backend_name(AioBackend backend);  // "auto", "io_uring", "threads"

// Whether io_uring can be used in this process (built with liburing, and
// io_uring_queue_init works: containers' seccomp profiles and
// kernel.io_uring_disabled make it fail with EPERM or ENOSYS); when not,
// `why` (if given) says why.
bool io_uring_available(std::string* why = nullptr);
// offload.aio_backend "io_uring" where io_uring cannot be used is a
// UserError naming the key and the reason; the other choices pass.
void require_backend_usable(AioBackend backend);

// What an engine has done since it was made: how the keys acted
// ([Note: aio keys]); all counts are over all lanes.
struct AioStats {
  int64_t transfers = 0;  // submit_* calls
  int64_t slices = 0;     // their parts, one per lane used (thread_count)
  int64_t requests = 0;   // pieces issued (block_size), remainders of short transfers included
  int64_t handovers = 0;  // io_uring_submit calls / pool hand-overs (single_submit: one per request)
  int64_t refills = 0;    // hand-overs made while requests of the lane were still in flight (overlap_events)
  int max_in_flight = 0;  // most requests in flight on one lane (queue_depth)
};

// A transfer in flight; redeem it once with AioEngine::wait.
struct AioHandle {
  uint64_t id = 0;
};

// Moves bytes between host buffers and swap files ([Note: aio keys]).
// Used by one thread at a time (the caller serialises); any number of
// transfers may be in flight, and they may be waited for in any order. A
// transfer's buffer must stay alive and untouched until its wait returns.
// Destruction waits for the transfers still in flight and drops their errors.
// The SwapFile (and its SwapDir) must outlive the transfers on it.
class AioEngine {
 public:
  virtual ~AioEngine() = default;
  virtual AioBackend backend() const = 0;  // io_uring or threads
  virtual const AioOptions& options() const = 0;

  // Reads/writes `bytes` at `offset` of `file` into/from `buf`. `buf`,
  // `bytes` and `offset` must be multiples of file.alignment() and the range
  // inside the file ([Note: aio alignment]); zt::Error says which is not.
  // Returns at once; the lanes do the I/O.
  virtual AioHandle submit_read(SwapFile& file, void* buf, size_t bytes, int64_t offset) = 0;
  virtual AioHandle submit_write(SwapFile& file, const void* buf, size_t bytes, int64_t offset) = 0;
  // Blocks until the transfer is done; throws zt::Error naming the file, the
  // operation, the offset and strerror on an I/O error or a short transfer.
  virtual void wait(AioHandle handle) = 0;
  // Whether the transfer is over (wait() would return or throw at once);
  // never blocks. The handle must be in flight.
  virtual bool done(AioHandle handle) const = 0;
  // Counts of what was done; exact for transfers that have been waited for.
  virtual AioStats stats() const = 0;
};

// An engine for files of `dir` (options are validated against its
// alignment). `automatic` uses io_uring when io_uring_available(), else the
// thread pool; the choice and its reason are logged once per process.
// Asking for io_uring where it is unavailable throws zt::Error with the reason.
std::unique_ptr<AioEngine> make_aio_engine(const AioOptions& options, AioBackend backend, const SwapDir& dir);

}  // namespace zt
