// The two back ends' PieceQueue: an io_uring ring (liburing) and a pool of
// threads doing pread/pwrite ([Note: aio keys] in aio.hpp).
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "runtime/aio/aio_internal.hpp"

#ifdef ZT_HAVE_LIBURING
#include <liburing.h>
#endif

namespace zt::aio_detail {
namespace {

#ifdef ZT_HAVE_LIBURING
// One ring of queue_depth entries, used by one lane thread.
class UringQueue final : public PieceQueue {
 public:
  explicit UringQueue(int depth) {
    const int rc = io_uring_queue_init(static_cast<unsigned>(depth), &ring_, 0);
    if (rc < 0) ZT_THROW("io_uring_queue_init(", depth, "): ", describe_errno(-rc));
  }
  ~UringQueue() override { io_uring_queue_exit(&ring_); }

  void stage(Piece* p) override {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    ZT_CHECK(sqe != nullptr, "io_uring submission queue full (", staged_, " staged, ", in_flight_, " in flight)");
    p->iov.iov_base = p->buf + p->done;
    p->iov.iov_len = p->len - p->done;
    const auto off = static_cast<__u64>(p->offset + static_cast<int64_t>(p->done));
    // readv/writev: in every kernel with io_uring (read/write need 5.6).
    if (p->write)
      io_uring_prep_writev(sqe, p->fd, &p->iov, 1, off);
    else
      io_uring_prep_readv(sqe, p->fd, &p->iov, 1, off);
    io_uring_sqe_set_data(sqe, p);
    ++staged_;
  }

  void flush() override {
    while (staged_ > 0) {
      const int rc = io_uring_submit(&ring_);
      if (rc == -EINTR) continue;
      if (rc <= 0) ZT_THROW("io_uring_submit: ", rc == 0 ? std::string("nothing submitted") : describe_errno(-rc));
      staged_ -= rc;
      in_flight_ += rc;
    }
  }

  Piece* reap() override {
    io_uring_cqe* cqe = nullptr;
    int rc;
    while ((rc = io_uring_wait_cqe(&ring_, &cqe)) == -EINTR) {
    }
    if (rc < 0) ZT_THROW("io_uring_wait_cqe: ", describe_errno(-rc));
    return take(cqe);
  }

  Piece* try_reap() override {
    io_uring_cqe* cqe = nullptr;
    if (io_uring_peek_cqe(&ring_, &cqe) != 0 || cqe == nullptr) return nullptr;
    return take(cqe);
  }

  int in_flight() const override { return in_flight_; }

 private:
  Piece* take(io_uring_cqe* cqe) {
    auto* p = static_cast<Piece*>(io_uring_cqe_get_data(cqe));
    p->res = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    --in_flight_;
    return p;
  }
  io_uring ring_{};
  int staged_ = 0;
  int in_flight_ = 0;
};
#endif

// queue_depth threads, each doing one blocking pread/pwrite at a time.
class ThreadQueue final : public PieceQueue {
 public:
  explicit ThreadQueue(int depth) {
    for (int i = 0; i < depth; ++i) threads_.emplace_back([this] { work(); });
  }
  ~ThreadQueue() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  void stage(Piece* p) override { staged_.push_back(p); }

  // One lock for the batch; one wake-up for one piece, all for more.
  void flush() override {
    if (staged_.empty()) return;
    const size_t count = staged_.size();
    {
      std::lock_guard<std::mutex> lock(mu_);
      todo_.insert(todo_.end(), staged_.begin(), staged_.end());
      in_flight_ += static_cast<int>(count);
    }
    staged_.clear();
    if (count == 1)
      work_cv_.notify_one();
    else
      work_cv_.notify_all();
  }

  Piece* reap() override {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return !done_.empty(); });
    return pop_done();
  }

  Piece* try_reap() override {
    std::lock_guard<std::mutex> lock(mu_);
    return done_.empty() ? nullptr : pop_done();
  }

  int in_flight() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return in_flight_;
  }

 private:
  Piece* pop_done() {
    Piece* p = done_.front();
    done_.pop_front();
    --in_flight_;
    return p;
  }

  void work() {
    for (;;) {
      Piece* p;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait(lock, [&] { return stop_ || !todo_.empty(); });
        if (todo_.empty()) return;
        p = todo_.front();
        todo_.pop_front();
      }
      char* at = p->buf + p->done;
      const size_t want = p->len - p->done;
      const off_t off = p->offset + static_cast<off_t>(p->done);
      ssize_t n;
      do {
        n = p->write ? ::pwrite(p->fd, at, want, off) : ::pread(p->fd, at, want, off);
      } while (n < 0 && errno == EINTR);
      p->res = n < 0 ? -static_cast<int64_t>(errno) : static_cast<int64_t>(n);
      {
        std::lock_guard<std::mutex> lock(mu_);
        done_.push_back(p);
      }
      done_cv_.notify_one();
    }
  }

  std::vector<Piece*> staged_;  // the lane's thread only
  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Piece*> todo_, done_;
  int in_flight_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

std::unique_ptr<PieceQueue> make_uring_queue(int queue_depth) {
#ifdef ZT_HAVE_LIBURING
  return std::make_unique<UringQueue>(queue_depth);
#else
  (void)queue_depth;
  ZT_THROW("ztrain was built without liburing (install liburing-dev and reconfigure)");
#endif
}

std::unique_ptr<PieceQueue> make_thread_queue(int queue_depth) { return std::make_unique<ThreadQueue>(queue_depth); }

bool probe_io_uring(std::string* why) {
#ifdef ZT_HAVE_LIBURING
  io_uring ring{};
  const int rc = io_uring_queue_init(1, &ring, 0);
  if (rc < 0) {
    *why = detail::concat("io_uring_queue_init: ", describe_errno(-rc));
    return false;
  }
  io_uring_queue_exit(&ring);
  *why = "";
  return true;
#else
  *why = "ztrain was built without liburing (install liburing-dev and reconfigure)";
  return false;
#endif
}

}  // namespace zt::aio_detail
