#include "optim/offload_adamw.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "optim/adamw.hpp"
#include "optim/offload_detail.hpp"
#include "runtime/job_thread.hpp"
#include "runtime/transfer.hpp"

#if ZT_HAVE_CUDA
#include "optim/cuda/adamw.cuh"
#include "runtime/cuda/cuda_device.hpp"
#endif

namespace zt {
namespace {

using offload_detail::advance;
using offload_detail::host_adamw;
using offload_detail::put_param;
using offload_detail::tile_ranges;
using offload_detail::to_working;

class HostOffloadAdamW final : public OffloadAdamW {
 public:
  HostOffloadAdamW(Device& dev, const AdamWParams& hp, const HostOffloadOptions& o)
      : dev_(dev), hp_(hp), opts_(o), host_(dev.host_memory(o.pin_memory)), pinned_(dev.host_memory(true)),
        copies_(dev.make_transfer_queue()) {
    ZT_CHECK(o.ratio > 0 && o.ratio <= 1, "offload ratio ", o.ratio, " outside (0, 1]");
    ZT_CHECK(o.tile_elements > 0 && o.slots >= 2, "offload tiles of ", o.tile_elements, " elements, ", o.slots,
             " slots");
  }
  ~HostOffloadAdamW() override {
    try {
      join();
      copies_->wait_all();
    } catch (...) {
    }
  }

  const char* name() const override { return "host offload"; }
  bool states_on_device() const override { return false; }
  // [Note: gradients on the host] With every state on the host (ratio 1) the
  // gradients are there too; the delayed update reads step N's while step
  // N+1's backward writes the other buffer.
  int host_gradient_buffers() const override { return opts_.ratio < 1.0 ? 0 : opts_.delay_after >= 0 ? 2 : 1; }
  const OffloadStepTimes& last_times() const override { return times_; }
  const float* host_master(const OwnedShard& sh) override {
    Home& h = home(sh);
    return h.on_host ? h.state[0].as<float>() : nullptr;
  }

  void attach(const std::vector<OwnedShard>& shards) override {
    ZT_CHECK(homes_.empty(), "offloaded optimizer attached twice");
    int64_t total = 0;
    for (const OwnedShard& sh : shards) total += sh.numel();
    // DeepSpeed's ratio: the first `ratio` of the elements (in shard order)
    // go to the host, the rest stay on the device.
    const double on_host = opts_.ratio * static_cast<double>(total);
    int64_t seen = 0;
    for (const OwnedShard& sh : shards) {
      ZT_CHECK(sh.index == static_cast<int>(homes_.size()), "owned shards out of order");
      Home h;
      h.on_host = opts_.ratio >= 1.0 || static_cast<double>(seen) < on_host;
      if (!h.on_host && sh.param_on_host)
        ZT_USER_ERROR("zero_optimization.offload_optimizer.ratio ", opts_.ratio,
                      " keeps part of the optimizer on the device, where the offloaded parameters (offload_param) are "
                      "not: use ratio 1 with offload_param");
      seen += sh.numel();
      Device& where = h.on_host ? host_ : dev_;
      for (Buffer& b : h.state) {
        b = Buffer(where, DType::f32, Shape{sh.numel()}, h.on_host ? MemTag::offload : MemTag::optim);
        where.memset_zero(b.data(), b.bytes());
      }
      homes_.push_back(std::move(h));
      shards_.push_back(&sh);
    }
    ready_.assign(homes_.size(), Ready{});
    // Slots of one tile, or of the largest shard when all are smaller.
    int64_t largest = 1;
    for (const OwnedShard& sh : shards) largest = std::max(largest, sh.numel());
    const int64_t tile = std::min(opts_.tile_elements, largest);
    // Gradient slots only for gradients that are on the device.
    const bool fetch = std::any_of(shards.begin(), shards.end(), [](const OwnedShard& sh) { return !sh.grad_on_host; });
    for (int i = 0; i < opts_.slots; ++i) {
      if (fetch) grad_slots_.emplace_back(pinned_, DType::f32, Shape{tile}, MemTag::offload);
      out_slots_.emplace_back(pinned_, DType::f32, Shape{tile}, MemTag::offload);  // large enough for any dtype
    }
  }

  void update(const OwnedShard& sh, const OptimizerStepScalars& s) override {
    ZT_CHECK(s.verdict == nullptr, "the host AdamW takes the step's verdict on the host, not in device memory");
    pending_.push_back({&sh, s, sh.grad});
  }

  void detach() noexcept override {
    worker_.wait();  // its error, if any, stays unreported: the run is ending
  }

  void finish() override {
    const double t0 = now_s();
    times_ = OffloadStepTimes{};
    if (!pending_.empty() && opts_.delay_after >= 0 && pending_.front().s.step > opts_.delay_after) {
      finish_delayed();
      times_.total_s = now_s() - t0;
      return;
    }
    // The last streamed update: this step's forward awaited every shard of
    // it, so it is done (or finishing its last copies).
    join();
    if (report_due_) take_worker_times(true);
    upload_delayed();  // a delayed update still pending (none unless the delay was on)
    // Shards kept on the device first: their kernels run while the host works.
    for (const Pending& p : pending_)
      if (!home(*p.shard).on_host) update_on_device(*p.shard, p.s);
    work_.clear();
    for (const Pending& p : pending_)
      if (home(*p.shard).on_host) work_.push_back(p);
    pending_.clear();
    if (work_.empty()) {
      times_.total_s = now_s() - t0;
      return;
    }
    // [Note: streamed update] The tiles run on the worker; finish() returns
    // at once unless a shard's parameters go to a sink (the parameters' swap
    // file, not safe beside the engine's reads of it) or its gradient is
    // fetched from the device (ratio < 1: the next step zeroes it there).
    const bool streamed = std::none_of(work_.begin(), work_.end(), [](const Pending& p) {
      return p.shard->param_sink != nullptr || !p.shard->grad_on_host;
    });
    // [Note: parameter offload to NVMe] (zero/param_swap.hpp): with the
    // parameters in a swap file the shards are updated last unit first, so
    // that the swap's buffers hold the next forward's first units when the
    // step ends (their writes still running) and it reads none of them. Each
    // element's arithmetic is the same in any order.
    if (std::any_of(work_.begin(), work_.end(), [](const Pending& p) { return p.shard->param_sink != nullptr; }))
      std::reverse(work_.begin(), work_.end());
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (const Pending& p : work_) ready_[static_cast<size_t>(p.shard->index)] = Ready{p.shard->numel() == 0, {}};
      failed_ = false;
      await_s_ = 0;
    }
    worker_.start([this] { run_exact(); });
    report_due_ = true;
    if (!streamed) {
      join();
      take_worker_times(false);
    }
    times_.total_s = now_s() - t0;
  }

  void await_shard(const OwnedShard& sh) override {
    std::unique_lock<std::mutex> lk(mu_);
    const Ready& r = ready_.at(static_cast<size_t>(sh.index));
    if (!r.done && !failed_) {
      const double w = now_s();
      cv_.wait(lk, [&] { return r.done || failed_; });
      await_s_ += now_s() - w;
    }
    if (failed_) {
      lk.unlock();
      join();  // rethrows the worker's error
      ZT_THROW("the offloaded optimizer's update failed");
    }
    copies_->compute_waits(r.upload);
  }

  void read_state(const OwnedShard& sh, OptimizerState which, float* host_dst) override {
    join();
    const Buffer& b = home(sh).state[static_cast<int>(which)];
    if (home(sh).on_host) {
      host_memcpy(host_dst, b.data(), b.bytes());
    } else {
      dev_.copy_to_host(host_dst, b.data(), b.bytes());
    }
  }

  void write_state(const OwnedShard& sh, OptimizerState which, const float* host_src) override {
    join();
    Home& h = home(sh);
    const Buffer& b = h.state[static_cast<int>(which)];
    if (h.on_host) {
      host_memcpy(b.data(), host_src, b.bytes());
    } else {
      dev_.copy_from_host(b.data(), host_src, b.bytes());
    }
    if (which != OptimizerState::master || sh.param_from_master) return;
    // The working copy follows the master, through the out slots.
    const size_t es = dtype_size(sh.param_dtype);
    for (int64_t off = 0; off < sh.numel(); off += opts_.tile_elements) {
      const int64_t n = std::min(opts_.tile_elements, sh.numel() - off);
      to_working(out_slots_[0].data(), sh.param_dtype, host_src + off, n);
      copies_->wait(put_param(*copies_, sh, static_cast<size_t>(off) * es, out_slots_[0].data(), static_cast<size_t>(n) * es));
    }
  }

 private:
  struct Home {
    bool on_host = true;
    Buffer state[kNumOptimizerStates];  // master, exp_avg, exp_avg_sq
    // Delayed update: the step's gradient (unless it is on the host
    // already) and the 16-bit result; `delayed` once it had one.
    Buffer grad, param;
    bool delayed = false;
  };
  struct Pending {
    const OwnedShard* shard;
    OptimizerStepScalars s;
    const void* grad;  // the shard's gradient at update(): it moves by step when on the host
  };
  struct Tile {
    const Pending* p;
    int64_t off, n;
  };
  // [Note: streamed update] A shard's update is done, and its parameters'
  // upload (if any) was queued as `upload`.
  struct Ready {
    bool done = true;
    TransferTicket upload;
  };

  // The exact update of work_ on the worker thread, tile by tile ([Note:
  // offload step]); each shard is marked ready after its last tile. The
  // transfer queue is shared with await_shard(): every use holds mu_.
  void run_exact() {
    OffloadStepTimes& t = worker_times_;
    t = OffloadStepTimes{};
    try {
      std::vector<Tile> tiles;
      for (const Pending& p : work_)
        for (int64_t off = 0; off < p.shard->numel(); off += opts_.tile_elements)
          tiles.push_back({&p, off, std::min(opts_.tile_elements, p.shard->numel() - off)});
      const size_t K = out_slots_.size();
      std::vector<TransferTicket> fetched(tiles.size()), stored(tiles.size());
      // A tile's gradient: in host memory already ([Note: gradients on the
      // host]), or fetched into a grad slot.
      auto fetch = [&](size_t i) {
        const Tile& tl = tiles[i];
        if (tl.p->shard->grad_on_host) return;
        fetched[i] = copies_->to_host(grad_slots_[i % K].data(), advance(tl.p->grad, DType::f32, tl.off),
                                      static_cast<size_t>(tl.n) * sizeof(float));
        t.d2h_bytes += static_cast<double>(tl.n) * sizeof(float);
      };
      {
        std::lock_guard<std::mutex> lk(mu_);
        for (size_t i = 0; i < std::min(K, tiles.size()); ++i) fetch(i);
      }
      for (size_t i = 0; i < tiles.size(); ++i) {
        const Tile& tl = tiles[i];
        const OwnedShard& sh = *tl.p->shard;
        Home& h = home(sh);
        double w = now_s();
        {
          std::lock_guard<std::mutex> lk(mu_);
          copies_->wait(fetched[i]);
          if (i >= K) copies_->wait(stored[i - K]);  // the out slot's last upload has run
        }
        const double c = now_s();
        t.d2h_wait_s += c - w;
        const void* g = sh.grad_on_host ? advance(tl.p->grad, sh.grad_dtype, tl.off) : grad_slots_[i % K].data();
        // Offloaded parameters are written in place (no slot, no copy), or
        // not at all when uploads are made from the master.
        const size_t es = dtype_size(sh.param_dtype);
        void* out = sh.param_from_master ? nullptr
                    : sh.param_in_place() ? static_cast<char*>(sh.param) + static_cast<size_t>(tl.off) * es
                                          : out_slots_[i % K].data();
        AdamWParams hp = hp_;
        hp.lr = tl.p->s.lr;
        float* master = h.state[0].as<float>() + tl.off;
        float* m = h.state[1].as<float>() + tl.off;
        float* v = h.state[2].as<float>() + tl.off;
        const std::vector<DecayRange> ranges = tile_ranges(sh, tl.off, tl.n);
        host_adamw(sh, master, g, sh.grad_dtype, m, v, tl.n, ranges, hp, tl.p->s.step, tl.p->s.grad_scale, out);
        w = now_s();
        t.cpu_s += w - c;
        const bool last = tl.off + tl.n == sh.numel();
        std::lock_guard<std::mutex> lk(mu_);
        // The grad slot is free: fetch the tile K ahead into it.
        if (i + K < tiles.size()) fetch(i + K);
        if (!sh.param_in_place() && !sh.param_from_master) {
          stored[i] = put_param(*copies_, sh, static_cast<size_t>(tl.off) * es, out, static_cast<size_t>(tl.n) * es);
          if (!sh.param_on_host) t.h2d_bytes += static_cast<double>(tl.n) * static_cast<double>(es);
        }
        if (last) {
          ready_[static_cast<size_t>(sh.index)] = Ready{true, stored[i]};
          cv_.notify_all();
        }
      }
      const double w = now_s();
      {
        std::lock_guard<std::mutex> lk(mu_);
        for (size_t i = tiles.size() > K ? tiles.size() - K : 0; i < tiles.size(); ++i) copies_->wait(stored[i]);
      }
      t.h2d_wait_s += now_s() - w;
    } catch (...) {
      worker_error_ = std::current_exception();
      std::lock_guard<std::mutex> lk(mu_);
      failed_ = true;
      cv_.notify_all();
    }
  }

  // The phases of the exact update the worker ran last (reported by the
  // step during which it ran: the next step's when streamed).
  void take_worker_times(bool streamed) {
    report_due_ = false;
    times_.streamed = streamed;
    times_.cpu_s = worker_times_.cpu_s;
    times_.d2h_bytes += worker_times_.d2h_bytes;
    times_.h2d_bytes += worker_times_.h2d_bytes;
    times_.d2h_wait_s += worker_times_.d2h_wait_s;
    times_.h2d_wait_s += worker_times_.h2d_wait_s;
    times_.await_s = await_s_;
  }
  // [Note: delayed parameter update]
  void finish_delayed() {
    times_.delayed = true;
    for (const Pending& p : pending_)
      ZT_CHECK(!p.shard->param_from_master, "the delayed update with offload.param_from_master");
    double w = now_s();
    join();
    report_due_ = false;  // a streamed exact update before the delay: done, not reported
    times_.delayed_wait_s = now_s() - w;
    times_.cpu_s = worker_times_.cpu_s;
    for (const Pending& p : pending_)
      if (!home(*p.shard).on_host) update_on_device(*p.shard, p.s);
    TransferTicket fetched;  // the last gradient copy
    // This step's gradients to the host (the device reuses its buffers) and
    // the last update's parameters to the device, at once on the two copy
    // streams; the uploads wait for the step's kernels (stage 3 gathers
    // read the working shards until the end of the backward).
    for (const Pending& p : pending_) {
      const OwnedShard& sh = *p.shard;
      Home& h = home(sh);
      if (!h.on_host) continue;
      if (!h.delayed) {
        h.delayed = true;
        if (!sh.grad_on_host) h.grad = Buffer(pinned_, DType::f32, Shape{sh.numel()}, MemTag::offload);
        if (sh.param_dtype != DType::f32) h.param = Buffer(pinned_, sh.param_dtype, Shape{sh.numel()}, MemTag::offload);
      }
      if (sh.grad_on_host) continue;  // the engine's other buffer takes the next step's
      fetched = copies_->to_host(h.grad.data(), p.grad, h.grad.bytes());
      times_.d2h_bytes += static_cast<double>(h.grad.bytes());
    }
    // [Note: streamed update] The uploads are not waited for: the next
    // step's forward waits for each shard's (await_shard), and the worker
    // rewrites a shard's result only once its upload is done.
    issue_delayed_uploads();
    w = now_s();
    copies_->wait(fetched);
    times_.d2h_wait_s = now_s() - w;
    std::vector<Pending> work;
    for (const Pending& p : pending_)
      if (home(*p.shard).on_host) work.push_back(p);
    pending_.clear();
    if (work.empty()) return;
    worker_.start([this, work = std::move(work)] {
      try {
        const double c = now_s();
        for (const Pending& p : work) update_whole_on_host(p);
        worker_times_.cpu_s = now_s() - c;
      } catch (...) {
        worker_error_ = std::current_exception();
      }
    });
    uploads_due_ = true;
  }

  // The host update of a whole shard from its delayed gradient (the host
  // copy, or the engine's host buffer of that step).
  void update_whole_on_host(const Pending& p) {
    const OwnedShard& sh = *p.shard;
    const OptimizerStepScalars& s = p.s;
    Home& h = home(sh);
    AdamWParams hp = hp_;
    hp.lr = s.lr;
    float* master = h.state[0].as<float>();
    float* m = h.state[1].as<float>();
    float* v = h.state[2].as<float>();
    const std::vector<DecayRange> ranges = tile_ranges(sh, 0, sh.numel());
    const void* g = sh.grad_on_host ? p.grad : h.grad.data();
    {
      // The last update's parameters leave from the buffer this one writes.
      std::lock_guard<std::mutex> lk(mu_);
      copies_->wait(ready_[static_cast<size_t>(sh.index)].upload);
    }
    host_adamw(sh, master, g, sh.grad_dtype, m, v, sh.numel(), ranges, hp, s.step, s.grad_scale,
               sh.param_dtype == DType::f32 ? static_cast<void*>(master) : h.param.data());
  }

  // Waits for the update in flight on the worker (exact streamed, or
  // delayed), if any.
  void join() {
    worker_.wait();
    if (worker_error_) std::rethrow_exception(std::exchange(worker_error_, nullptr));
  }

  // The parameters of the last delayed update to the device's working copies.
  void upload_delayed() {
    issue_delayed_uploads();
    const double w = now_s();
    copies_->wait_all();
    times_.h2d_wait_s += now_s() - w;
  }

  // Queues the uploads of the last delayed update's parameters, after the
  // kernels queued so far.
  void issue_delayed_uploads() {
    join();
    if (!uploads_due_) return;
    uploads_due_ = false;
    const TransferTicket after = copies_->mark_compute();
    for (size_t i = 0; i < homes_.size(); ++i) {
      Home& h = homes_[i];
      if (!h.on_host || !h.delayed) continue;
      const OwnedShard& sh = *shards_[i];
      const Buffer& src = sh.param_dtype == DType::f32 ? h.state[0] : h.param;
      const TransferTicket t = put_param(*copies_, sh, 0, src.data(), src.bytes(), after);
      ready_[i] = Ready{true, t};
      if (!sh.param_on_host) times_.h2d_bytes += static_cast<double>(src.bytes());
    }
  }


  Home& home(const OwnedShard& sh) {
    ZT_CHECK(sh.index >= 0 && sh.index < static_cast<int>(homes_.size()), "shard ", sh.index,
             " not attached to the offloaded optimizer");
    return homes_[static_cast<size_t>(sh.index)];
  }

  // A shard whose states stay on the device (ratio < 1): the device's AdamW,
  // writing the working copy in the same pass.
  void update_on_device(const OwnedShard& sh, const OptimizerStepScalars& s) {
    Home& h = home(sh);
    AdamWParams hp = hp_;
    hp.lr = s.lr;
    float* master = h.state[0].as<float>();
    float* m = h.state[1].as<float>();
    float* v = h.state[2].as<float>();
#if ZT_HAVE_CUDA
    if (dev_.kind() == DeviceKind::cuda) {
      const size_t es = dtype_size(sh.param_dtype);
      for (const DecaySpan& span : sh.spans) {
        const int64_t off = span.begin - sh.begin;
        void* copy = static_cast<char*>(sh.param) + static_cast<size_t>(off) * es;
        adamw_update_cuda(master + off, sh.grad_f32() + off, m + off, v + off, span.end - span.begin, hp, s.step,
                          s.grad_scale, span.decay, copy, sh.param_dtype, static_cast<CudaDevice&>(dev_).stream());
      }
      return;
    }
#endif
    ZT_CHECK(dev_.kind() == DeviceKind::cpu, "AdamW on ", dev_.name(), ": this build has no CUDA AdamW");
    const std::vector<DecayRange> ranges = tile_ranges(sh, 0, sh.numel());
    host_adamw(sh, master, sh.grad, sh.grad_dtype, m, v, sh.numel(), ranges, hp, s.step, s.grad_scale, sh.param);
  }

  Device& dev_;
  AdamWParams hp_;
  HostOffloadOptions opts_;
  Device& host_;    // the states (pinned or pageable)
  Device& pinned_;  // the slots
  std::unique_ptr<TransferQueue> copies_;
  std::vector<Home> homes_;
  std::vector<Buffer> grad_slots_, out_slots_;
  std::vector<Pending> pending_;
  OffloadStepTimes times_;
  std::vector<const OwnedShard*> shards_;  // attached, by index
  // [Note: delayed parameter update], [Note: streamed update]
  std::exception_ptr worker_error_;
  bool uploads_due_ = false;
  std::vector<Pending> work_;      // the exact update the worker runs
  OffloadStepTimes worker_times_;  // the worker's phases (delayed: its cpu_s only)
  bool report_due_ = false;        // not reported yet
  // Guards copies_ and ready_ while the worker runs.
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Ready> ready_;  // by shard index
  bool failed_ = false;
  double await_s_ = 0;  // host time blocked in await_shard since the update started
  // Last, so that it stops first (a job reads the members above).
  JobThread worker_;
};

}  // namespace

std::unique_ptr<OffloadAdamW> make_host_offload_adamw(Device& dev, const AdamWParams& hp,
                                                      const HostOffloadOptions& opts) {
  return std::make_unique<HostOffloadAdamW>(dev, hp, opts);
}

}  // namespace zt
