// Inside zt_aio only: the directory probe and the piece queues of the two
// back ends ([Note: aio keys] in aio.hpp).
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace zt::aio_detail {

// What a directory's file system does with O_DIRECT: the alignment of its
// transfers and whether it accepts O_DIRECT at all (`why_buffered` when not).
struct DirProbe {
  size_t alignment = 4096;
  bool direct = true;
  std::string why_buffered;
};
// Creates, tests and removes a probe file in `dir`; where no file can be
// created there, the alignment comes from the directory's own statx.
DirProbe probe_dir(const std::string& dir);

// strerror(err) and its number: "No space left on device (errno 28)".
std::string describe_errno(int err);
// bytes in GiB with two decimals.
std::string gib(int64_t bytes);
// bytes in GiB, MiB (two decimals) or bytes, whichever reads best.
std::string human_bytes(int64_t bytes);

// One I/O request: `len` bytes at `offset` of `fd`, of which `done` have been
// transferred. A short transfer is resubmitted for the remainder.
struct Piece {
  int fd = -1;
  bool write = false;
  char* buf = nullptr;
  int64_t offset = 0;
  size_t len = 0;
  size_t done = 0;
  int64_t res = 0;  // the last call's result: bytes moved, or -errno
  struct iovec iov {};
};

// The back end's primitive: hand pieces over and reap their completions.
// At most queue_depth pieces are staged or in flight at once.
class PieceQueue {
 public:
  virtual ~PieceQueue() = default;
  // Prepares the remainder of `p` (done..len); it starts at the next flush().
  virtual void stage(Piece* p) = 0;
  virtual void flush() = 0;
  virtual Piece* reap() = 0;      // blocks for one completion
  virtual Piece* try_reap() = 0;  // a ready completion, or nullptr
  // Pieces handed over and not reaped yet (those a failed flush did not
  // hand over are not counted).
  virtual int in_flight() const = 0;
};

// Throws zt::Error with the reason when the ring cannot be set up.
std::unique_ptr<PieceQueue> make_uring_queue(int queue_depth);
std::unique_ptr<PieceQueue> make_thread_queue(int queue_depth);
// io_uring_queue_init on a one-entry ring; `why` when it fails.
bool probe_io_uring(std::string* why);

}  // namespace zt::aio_detail
