// The engine: transfers cut into lanes and pieces, the schedule of
// [Note: aio keys] (aio.hpp), run over either back end's PieceQueue.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "runtime/aio/aio.hpp"
#include "runtime/aio/aio_internal.hpp"

namespace zt {
namespace {

using aio_detail::describe_errno;
using aio_detail::Piece;
using aio_detail::PieceQueue;

// The largest piece: io_uring reports a result in 32 bits, and Linux moves at
// most 0x7ffff000 bytes per call.
constexpr int64_t kMaxBlockSize = int64_t{1} << 30;

// One submit_*: its lanes report to it. Of several failing pieces the one at
// the lowest file offset is reported, whichever lane finished first, so the
// message is the same on every run.
struct Request {
  std::string path;
  bool write = false;
  int lanes_left = 0;  // guarded by LaneEngine::done_mu_
  bool done = false;   // guarded by LaneEngine::done_mu_
  std::mutex mu;
  std::string error;   // guarded by mu
  int64_t error_at = std::numeric_limits<int64_t>::max();  // guarded by mu
  std::atomic<bool> failed{false};

  // `at`: the file offset of the failing piece (-1: the engine itself broke).
  void fail(const std::string& msg, int64_t at = -1) {
    std::lock_guard<std::mutex> lock(mu);
    if (error.empty() || at < error_at) {
      error = msg;
      error_at = at;
    }
    failed = true;
  }
};

// One lane's part of a transfer: whole blocks, contiguous.
struct Slice {
  std::shared_ptr<Request> req;
  int fd = -1;
  char* buf = nullptr;
  int64_t offset = 0;
  size_t bytes = 0;
};

const char* op_name(bool write) { return write ? "write" : "read"; }

class LaneEngine;

// A thread with its own queue (ring or pool) that runs slices in order.
class Lane {
 public:
  Lane(LaneEngine& engine, std::unique_ptr<PieceQueue> queue) : engine_(engine), queue_(std::move(queue)) {}
  void start() { thread_ = std::thread([this] { loop(); }); }
  void stop_and_join() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }
  void push(Slice s) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      slices_.push_back(std::move(s));
    }
    cv_.notify_one();
  }

 private:
  void loop();
  void run(const Slice& s);
  void drain_after_queue_failure(Request& r, const std::string& what);

  LaneEngine& engine_;
  std::unique_ptr<PieceQueue> queue_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Slice> slices_;
  bool stop_ = false;
  std::string broken_;  // the queue failed; every later slice fails with this
};

class LaneEngine final : public AioEngine {
 public:
  LaneEngine(const AioOptions& options, AioBackend backend) : options_(options), backend_(backend) {
    for (int i = 0; i < options_.thread_count; ++i) {
      auto q = backend == AioBackend::io_uring ? aio_detail::make_uring_queue(options_.queue_depth)
                                               : aio_detail::make_thread_queue(options_.queue_depth);
      lanes_.push_back(std::make_unique<Lane>(*this, std::move(q)));
    }
    for (auto& l : lanes_) l->start();
  }
  ~LaneEngine() override {
    // Lanes finish the slices they hold (buffers may still be written by the
    // kernel otherwise), then stop.
    for (auto& l : lanes_) l->stop_and_join();
  }

  AioBackend backend() const override { return backend_; }
  const AioOptions& options() const override { return options_; }

  AioHandle submit_read(SwapFile& file, void* buf, size_t bytes, int64_t offset) override {
    return submit(file, static_cast<char*>(buf), bytes, offset, false);
  }
  AioHandle submit_write(SwapFile& file, const void* buf, size_t bytes, int64_t offset) override {
    return submit(file, static_cast<char*>(const_cast<void*>(buf)), bytes, offset, true);
  }

  void wait(AioHandle handle) override {
    auto it = pending_.find(handle.id);
    ZT_CHECK(it != pending_.end(), "aio handle ", handle.id, " is not in flight (never submitted, or waited for)");
    std::shared_ptr<Request> r = it->second;
    pending_.erase(it);
    {
      std::unique_lock<std::mutex> lock(done_mu_);
      done_cv_.wait(lock, [&] { return r->done; });
    }
    if (r->failed) {
      std::lock_guard<std::mutex> lock(r->mu);
      ZT_THROW(r->error);
    }
  }

  bool done(AioHandle handle) const override {
    auto it = pending_.find(handle.id);
    ZT_CHECK(it != pending_.end(), "aio handle ", handle.id, " is not in flight (never submitted, or waited for)");
    std::lock_guard<std::mutex> lock(done_mu_);
    return it->second->done;
  }

  AioStats stats() const override {
    AioStats st;
    st.transfers = transfers_;
    st.slices = slices_.load();
    st.requests = requests_.load();
    st.handovers = handovers_.load();
    st.refills = refills_.load();
    st.max_in_flight = max_in_flight_.load();
    return st;
  }

  // A lane's counts for one slice.
  void count(int64_t requests, int64_t handovers, int64_t refills, int max_in_flight) {
    slices_.fetch_add(1, std::memory_order_relaxed);
    requests_.fetch_add(requests, std::memory_order_relaxed);
    handovers_.fetch_add(handovers, std::memory_order_relaxed);
    refills_.fetch_add(refills, std::memory_order_relaxed);
    int seen = max_in_flight_.load(std::memory_order_relaxed);
    while (max_in_flight > seen && !max_in_flight_.compare_exchange_weak(seen, max_in_flight)) {
    }
  }

  // Called by a lane when its slice of `r` is over.
  void slice_done(Request& r) {
    std::lock_guard<std::mutex> lock(done_mu_);
    if (--r.lanes_left == 0) {
      r.done = true;
      done_cv_.notify_all();
    }
  }

 private:
  AioHandle submit(SwapFile& file, char* buf, size_t bytes, int64_t offset, bool write) {
    const size_t a = file.alignment();
    const char* op = op_name(write);
    ZT_CHECK(file.fd() >= 0, "aio ", op, " of ", file.path(), ": the file is closed");
    ZT_CHECK(options_.block_size % static_cast<int64_t>(a) == 0, "aio ", op, " of ", file.path(),
             ": aio.block_size ", options_.block_size, " is not a multiple of the file's alignment ", a,
             " (an engine made for another directory?)");
    ZT_CHECK(reinterpret_cast<uintptr_t>(buf) % a == 0, "aio ", op, " of ", file.path(), ": the buffer address ",
             static_cast<const void*>(buf), " is not a multiple of the direct-I/O alignment ", a);
    ZT_CHECK(bytes % a == 0, "aio ", op, " of ", file.path(), ": ", bytes,
             " bytes is not a multiple of the direct-I/O alignment ", a);
    ZT_CHECK(offset >= 0 && offset % static_cast<int64_t>(a) == 0, "aio ", op, " of ", file.path(),
             ": offset ", offset, " is not a non-negative multiple of the direct-I/O alignment ", a);
    ZT_CHECK(offset + static_cast<int64_t>(bytes) <= file.size(), "aio ", op, " of ", file.path(), ": ", bytes,
             " bytes at offset ", offset, " run past the file's ", file.size(), " bytes");

    ++transfers_;
    auto r = std::make_shared<Request>();
    r->path = file.path();
    r->write = write;
    const AioHandle h{next_id_++};
    // Whole blocks per lane, as even as can be; lanes without any get nothing.
    const auto bs = static_cast<size_t>(options_.block_size);
    const size_t blocks = (bytes + bs - 1) / bs;
    const size_t per_lane = (blocks + lanes_.size() - 1) / lanes_.size();
    std::vector<Slice> slices;
    for (size_t i = 0; i < lanes_.size() && per_lane > 0; ++i) {
      const size_t begin = i * per_lane * bs;
      if (begin >= bytes) break;
      const size_t end = std::min(bytes, begin + per_lane * bs);
      slices.push_back(Slice{r, file.fd(), buf + begin, offset + static_cast<int64_t>(begin), end - begin});
    }
    r->lanes_left = static_cast<int>(slices.size());
    r->done = slices.empty();
    pending_.emplace(h.id, r);
    // Transfers smaller than thread_count blocks leave lanes idle: the next
    // one starts on the lane after the last one used.
    for (Slice& sl : slices) {
      lanes_[next_lane_]->push(std::move(sl));
      next_lane_ = (next_lane_ + 1) % lanes_.size();
    }
    return h;
  }

  friend class Lane;
  AioOptions options_;
  AioBackend backend_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  // The caller's thread only.
  uint64_t next_id_ = 1;
  size_t next_lane_ = 0;
  int64_t transfers_ = 0;
  // Lanes' counts (stats()).
  std::atomic<int64_t> slices_{0}, requests_{0}, handovers_{0}, refills_{0};
  std::atomic<int> max_in_flight_{0};
  std::unordered_map<uint64_t, std::shared_ptr<Request>> pending_;
  mutable std::mutex done_mu_;
  std::condition_variable done_cv_;
};

void Lane::loop() {
  for (;;) {
    Slice s;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !slices_.empty(); });
      if (slices_.empty()) return;  // stop_, nothing left
      s = std::move(slices_.front());
      slices_.pop_front();
    }
    if (!broken_.empty())
      s.req->fail(broken_);
    else
      run(s);
    engine_.slice_done(*s.req);
  }
}

// The queue itself failed (io_uring_submit or io_uring_wait_cqe): the request
// fails, the pieces the kernel holds are reaped (their buffers belong to the
// caller again only then), and the lane refuses all later slices.
void Lane::drain_after_queue_failure(Request& r, const std::string& what) {
  broken_ = detail::concat("aio ", op_name(r.write), " of ", r.path, ": the I/O queue failed: ", what);
  r.fail(broken_);
  try {
    while (queue_->in_flight() > 0) queue_->reap();
  } catch (const std::exception& e) {
    log_message(LogLevel::error, detail::concat(broken_, "; reaping what is in flight failed too: ", e.what()));
    std::terminate();
  }
}

void Lane::run(const Slice& s) {
  Request& r = *s.req;
  const AioOptions& o = engine_.options_;
  const auto bs = static_cast<size_t>(o.block_size);
  std::vector<Piece> pieces((s.bytes + bs - 1) / bs);
  for (size_t i = 0; i < pieces.size(); ++i) {
    Piece& p = pieces[i];
    p.fd = s.fd;
    p.write = r.write;
    p.buf = s.buf + i * bs;
    p.offset = s.offset + static_cast<int64_t>(i * bs);
    p.len = std::min(bs, s.bytes - i * bs);
  }
  const size_t n = pieces.size();
  const int depth = o.queue_depth;
  size_t next = 0;
  int in_flight = 0;
  int unflushed = 0;  // staged, not handed over yet
  int64_t requests = 0, handovers = 0, refills = 0;
  int max_in_flight = 0;

  auto handover = [&] {
    if (unflushed == 0) return;
    queue_->flush();
    unflushed = 0;
    ++handovers;
  };
  auto stage = [&](Piece* p) {
    queue_->stage(p);
    ++in_flight;
    ++unflushed;
    ++requests;
    max_in_flight = std::max(max_in_flight, in_flight);
    if (o.single_submit) handover();
  };
  // Up to `room` new pieces, handed over one by one or as one batch.
  auto fill = [&](int room) {
    int staged = 0;
    while (staged < room && next < n && !r.failed) {
      stage(&pieces[next++]);
      ++staged;
    }
    handover();
    return staged;
  };
  auto complete = [&](Piece* p) {
    --in_flight;
    const int64_t at = p->offset + static_cast<int64_t>(p->done);
    const size_t want = p->len - p->done;
    if (p->res < 0) {
      r.fail(detail::concat("aio ", op_name(p->write), " of ", r.path, " at offset ", at, " (", want,
                            " bytes) failed: ", describe_errno(static_cast<int>(-p->res))),
             at);
      return;
    }
    if (p->res == 0) {
      r.fail(detail::concat("aio ", op_name(p->write), " of ", r.path, " at offset ", at, " (", want,
                            " bytes): short ", op_name(p->write), ", no bytes moved (",
                            p->write ? "the device accepts no more" : "end of file", ")"),
             at);
      return;
    }
    p->done += static_cast<size_t>(p->res);
    // A short transfer: the rest goes again, and tells why if it fails.
    if (p->done < p->len && !r.failed) {
      stage(p);
      handover();
    }
  };

  try {
    if (o.overlap_events) {
      fill(depth);
      while (in_flight > 0) {
        complete(queue_->reap());
        while (Piece* p = queue_->try_reap()) complete(p);
        const int busy = in_flight;
        if (fill(depth - in_flight) > 0 && busy > 0) ++refills;
      }
    } else {
      while (next < n && !r.failed) {
        fill(depth);
        while (in_flight > 0) complete(queue_->reap());
      }
    }
  } catch (const std::exception& e) {
    // Before `pieces` go: the kernel still holds some of them.
    drain_after_queue_failure(r, e.what());
  }
  engine_.count(requests, handovers, refills, max_in_flight);
}

void log_once(const std::string& msg) {
  static std::mutex mu;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mu);
  if (said.insert(msg).second) log_info(msg);
}

}  // namespace

const char* aio_backend_name(AioBackend backend) {
  switch (backend) {
    case AioBackend::automatic: return "auto";
    case AioBackend::io_uring: return "io_uring";
    case AioBackend::threads: return "threads";
  }
  return "?";
}

void require_backend_usable(AioBackend backend) {
  if (backend != AioBackend::io_uring) return;
  std::string why;
  if (!io_uring_available(&why))
    ZT_USER_ERROR("offload.aio_backend \"io_uring\": io_uring cannot be used here (", why,
                  "); use \"auto\" (io_uring where it works, else threads) or \"threads\"");
}

bool io_uring_available(std::string* why) {
  // Probed once: the answer does not change within a process.
  static const std::pair<bool, std::string> probe = [] {
    std::string reason;
    const bool ok = aio_detail::probe_io_uring(&reason);
    return std::make_pair(ok, reason);
  }();
  if (why) *why = probe.second;
  return probe.first;
}

void validate_aio_options(const AioOptions& o, size_t alignment, const std::string& where) {
  const auto a = static_cast<int64_t>(alignment);
  if (o.block_size <= 0 || o.block_size % a != 0)
    ZT_USER_ERROR("aio.block_size = ", o.block_size, " must be a positive multiple of ", alignment,
                  " bytes, the direct-I/O alignment of ", where);
  if (o.block_size > kMaxBlockSize)
    ZT_USER_ERROR("aio.block_size = ", o.block_size, " is larger than the most one request may move, ",
                  kMaxBlockSize, " bytes (1 GiB)");
  if (o.queue_depth < 1) ZT_USER_ERROR("aio.queue_depth = ", o.queue_depth, " must be at least 1");
  if (o.thread_count < 1)
    ZT_USER_ERROR("aio.thread_count (intra_op_parallelism) = ", o.thread_count, " must be at least 1");
}

std::unique_ptr<AioEngine> make_aio_engine(const AioOptions& options, AioBackend backend, const SwapDir& dir) {
  validate_aio_options(options, dir.alignment(), detail::concat(dir.key(), " = ", dir.path()));
  if (backend == AioBackend::threads) {
    log_once("aio: thread-pool back end (asked for)");
    return std::make_unique<LaneEngine>(options, AioBackend::threads);
  }
  std::string why;
  if (io_uring_available(&why)) {
    try {
      auto engine = std::make_unique<LaneEngine>(options, AioBackend::io_uring);
      log_once(backend == AioBackend::io_uring ? "aio: io_uring back end (asked for)"
                                               : "aio: io_uring back end (auto: io_uring works here)");
      return engine;
    } catch (const Error& e) {
      why = e.message();  // e.g. io_uring_queue_init with many lanes: ENOMEM under a small RLIMIT_MEMLOCK
    }
  }
  if (backend == AioBackend::io_uring) ZT_THROW("aio: the io_uring back end is unavailable: ", why);
  log_once(detail::concat("aio: thread-pool back end (auto: io_uring is unavailable: ", why, ")"));
  return std::make_unique<LaneEngine>(options, AioBackend::threads);
}

}  // namespace zt
