// The optimizer placement of ZeRO-Infinity: fp32 master weights and Adam
// moments in swap files on NVMe, read, updated on the host and written back
// sub-group by sub-group ([Note: NVMe optimizer step] in offload_adamw.hpp).
#include <fcntl.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "optim/offload_adamw.hpp"
#include "optim/offload_detail.hpp"
#include "runtime/transfer.hpp"
#include "zero/param_swap.hpp"

namespace zt {
namespace {

using offload_detail::advance;
using offload_detail::host_adamw;
using offload_detail::put_param;
using offload_detail::tile_ranges;
using offload_detail::to_working;

constexpr const char* kOffloadKey = "zero_optimization.offload_optimizer";
const char* const kFileNames[kNumOptimizerStates] = {"master", "exp_avg", "exp_avg_sq"};

std::string gib(int64_t bytes) {
  char text[48];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return text;
}

// A host buffer whose start is aligned to `alignment` (the pool's buffers
// are transferred with O_DIRECT: [Note: aio alignment]).
struct AlignedBuffer {
  Buffer raw;
  char* data = nullptr;
  AlignedBuffer() = default;
  AlignedBuffer(Device& mem, int64_t bytes, size_t alignment) {
    raw = Buffer(mem, static_cast<size_t>(bytes) + alignment, MemTag::offload);
    const auto p = reinterpret_cast<uintptr_t>(raw.data());
    data = reinterpret_cast<char*>((p + alignment - 1) / alignment * alignment);
  }
  float* data_f32() const { return reinterpret_cast<float*>(data); }
};

// One sub-group: `n` elements at `off` of its shard, with a region of
// `bytes` (n * 4 rounded up to the alignment) at `file_off` of each file.
struct SubGroup {
  int shard = 0;
  int64_t off = 0, n = 0;
  int64_t file_off = 0, bytes = 0;
};

class NvmeOffloadAdamW;

// The live NVMe placements of this process, for remove_nvme_swap_files_now().
std::mutex g_live_mu;
std::set<NvmeOffloadAdamW*> g_live;

class NvmeOffloadAdamW final : public OffloadAdamW {
 public:
  NvmeOffloadAdamW(Device& dev, const AdamWParams& hp, const NvmeOffloadOptions& o)
      : hp_(hp), opts_(o), pool_mem_(dev.host_memory(o.pin_memory)), pinned_(dev.host_memory(true)),
        copies_(dev.make_transfer_queue()) {
    // The config refuses these by name already; the same words for any
    // other caller.
    if (o.sub_group_size < 1)
      ZT_USER_ERROR("zero_optimization.sub_group_size ", o.sub_group_size,
                    ": the NVMe optimizer needs sub-groups of at least 1 element");
    if (o.buffer_count < 3)
      ZT_USER_ERROR(kOffloadKey, ".buffer_count ", o.buffer_count,
                    " is too few for device \"nvme\": each optimizer sub-group in flight needs 3 buffers (master, "
                    "exp_avg, exp_avg_sq)");
    if ((o.pipeline_read || o.pipeline_write) && o.buffer_count < 6)
      ZT_USER_ERROR(kOffloadKey, ".buffer_count ", o.buffer_count, " holds one sub-group in flight, but ",
                    kOffloadKey, ".pipeline_read / pipeline_write need two (buffer_count >= 6)");
    require_backend_usable(o.backend);
    {
      SwapDirOpening one_at_a_time(o.nvme_path);
      dir_ = std::make_unique<SwapDir>(o.nvme_path, o.key, o.run_id, o.rank);
    }
    aio_ = make_aio_engine(o.aio, o.backend, *dir_);
    std::lock_guard<std::mutex> lock(g_live_mu);
    g_live.insert(this);
  }

  ~NvmeOffloadAdamW() override {
    {
      std::lock_guard<std::mutex> lock(g_live_mu);
      g_live.erase(this);
    }
    // In this order: the worker, the device copies into the slots, the
    // transfers on the files (the engine waits for them), then the files.
    try {
      if (worker_.joinable()) worker_.join();
      copies_->wait_all();
    } catch (...) {
    }
    aio_.reset();
    dir_.reset();
  }

  // remove_nvme_swap_files_now(): the files' names go, whatever is in flight
  // (the process is about to end; the lock is left to the next SwapDir).
  void unlink_files() noexcept {
    for (SwapFile* f : files_)
      if (f != nullptr) ::unlink(f->path().c_str());
  }

  const char* name() const override { return "nvme offload"; }
  bool states_on_device() const override { return false; }
  // [Note: gradients on the host]; two buffers for the delayed update.
  int host_gradient_buffers() const override { return opts_.delay_after >= 0 ? 2 : 1; }
  const OffloadStepTimes& last_times() const override { return times_; }
  int64_t nvme_bytes() const override { return file_bytes_; }

  void attach(const std::vector<OwnedShard>& shards) override {
    ZT_CHECK(shards_.empty(), "NVMe optimizer attached twice");
    usable();
    const size_t a = dir_->alignment();
    const int64_t sg = opts_.sub_group_size;
    int64_t at = 0, elements = 0, largest = 0;
    for (const OwnedShard& sh : shards) {
      ZT_CHECK(sh.index == static_cast<int>(shards_.size()), "owned shards out of order");
      Shard s;
      s.sh = &sh;
      s.first = static_cast<int>(groups_.size());
      for (int64_t off = 0; off < sh.numel(); off += sg) {
        SubGroup g;
        g.shard = sh.index;
        g.off = off;
        g.n = std::min(sg, sh.numel() - off);
        g.file_off = at;
        g.bytes = align_up(g.n * static_cast<int64_t>(sizeof(float)), a);
        at += g.bytes;
        largest = std::max(largest, g.n);
        groups_.push_back(g);
      }
      s.count = static_cast<int>(groups_.size()) - s.first;
      elements += sh.numel();
      shards_.push_back(std::move(s));
    }
    if (groups_.empty()) return;  // nothing owned: no files
    check_free_space(3 * at, elements, at);
    for (int k = 0; k < kNumOptimizerStates; ++k) files_[k] = &dir_->file(kFileNames[k], at);
    file_bytes_ = kNumOptimizerStates * at;

    // The pool: buffer_count / 3 sets ([Note: NVMe optimizer step]).
    const int64_t buffer_bytes = align_up(largest * static_cast<int64_t>(sizeof(float)), a);
    const int sets = opts_.buffer_count / kNumOptimizerStates;
    const bool fetch = std::any_of(shards.begin(), shards.end(), [](const OwnedShard& sh) { return !sh.grad_on_host; });
    for (int i = 0; i < sets; ++i) {
      Set st;
      for (AlignedBuffer& b : st.state) b = AlignedBuffer(pool_mem_, buffer_bytes, a);
      if (fetch) st.grad = Buffer(pinned_, DType::f32, Shape{largest}, MemTag::offload);
      st.out = Buffer(pinned_, DType::f32, Shape{largest}, MemTag::offload);  // large enough for any dtype
      sets_.push_back(std::move(st));
    }
    const int left = opts_.buffer_count % kNumOptimizerStates;
    log_info("NVMe optimizer: ", elements, " owned elements (rank 0) in ", groups_.size(), " sub-groups of up to ",
             largest, " in ", dir_->path(), " (3 files of ", at, " bytes, ", dir_->direct() ? "direct" : "buffered",
             " I/O, alignment ", a, ", aio ", aio_backend_name(aio_->backend()), "); ", sets, " set",
             sets > 1 ? "s" : "", " of 3 ", opts_.pin_memory ? "pinned" : "pageable", " buffers of ", buffer_bytes,
             " bytes", left ? detail::concat(" (buffer_count ", opts_.buffer_count, ": ", left, " left over, unused)")
                            : std::string(),
             "; pipeline_read ", opts_.pipeline_read ? "on" : "off", ", pipeline_write ",
             opts_.pipeline_write ? "on" : "off");
  }

  void update(const OwnedShard& sh, const OptimizerStepScalars& s) override {
    ZT_CHECK(s.verdict == nullptr, "the NVMe AdamW takes the step's verdict on the host, not in device memory");
    usable();
    pending_.push_back({&sh, s, sh.grad});
  }

  void detach() noexcept override {
    if (worker_.joinable()) worker_.join();  // its error, if any, stays unreported: the run is ending
  }

  void finish() override {
    guarded([&] {
      const double t0 = now_s();
      times_ = OffloadStepTimes{};
      if (!pending_.empty() && opts_.delay_after >= 0 && pending_.front().s.step > opts_.delay_after) {
        finish_delayed();
      } else {
        upload_delayed();
        run_subgroups(pending_, false, times_);
        pending_.clear();
      }
      times_.total_s = now_s() - t0;
    });
  }

  void read_state(const OwnedShard& sh, OptimizerState which, float* host_dst) override {
    guarded([&] {
      join();
      const Shard& s = shard(sh);
      const int k = static_cast<int>(which);
      if (!s.on_file[k]) {  // never written: zeros
        std::fill(host_dst, host_dst + sh.numel(), 0.0f);
        return;
      }
      // Through every pool buffer, as many reads in flight as buffers.
      std::vector<char*> bufs = pool_buffers();
      std::vector<AioHandle> handles(bufs.size());
      const int B = static_cast<int>(bufs.size());
      auto issue = [&](int j) {
        const SubGroup& g = groups_[static_cast<size_t>(s.first + j)];
        handles[static_cast<size_t>(j % B)] =
            aio_->submit_read(*files_[k], bufs[static_cast<size_t>(j % B)], static_cast<size_t>(g.bytes), g.file_off);
      };
      for (int j = 0; j < std::min(B, s.count); ++j) issue(j);
      for (int j = 0; j < s.count; ++j) {
        const SubGroup& g = groups_[static_cast<size_t>(s.first + j)];
        aio_->wait(handles[static_cast<size_t>(j % B)]);
        std::memcpy(host_dst + g.off, bufs[static_cast<size_t>(j % B)], static_cast<size_t>(g.n) * sizeof(float));
        if (j + B < s.count) issue(j + B);
      }
    });
  }

  void write_state(const OwnedShard& sh, OptimizerState which, const float* host_src) override {
    guarded([&] {
      join();
      Shard& s = shard(sh);
      const int k = static_cast<int>(which);
      std::vector<char*> bufs = pool_buffers();
      const int B = static_cast<int>(bufs.size());
      std::vector<AioHandle> handles(bufs.size());
      for (int j = 0; j < s.count; ++j) {
        const SubGroup& g = groups_[static_cast<size_t>(s.first + j)];
        char* b = bufs[static_cast<size_t>(j % B)];
        if (j >= B) aio_->wait(handles[static_cast<size_t>(j % B)]);
        const size_t used = static_cast<size_t>(g.n) * sizeof(float);
        std::memcpy(b, host_src + g.off, used);
        std::memset(b + used, 0, static_cast<size_t>(g.bytes) - used);  // the padding: zeros, as never written
        handles[static_cast<size_t>(j % B)] =
            aio_->submit_write(*files_[k], b, static_cast<size_t>(g.bytes), g.file_off);
      }
      for (int j = std::max(0, s.count - B); j < s.count; ++j) aio_->wait(handles[static_cast<size_t>(j % B)]);
      s.on_file[k] = true;
      if (which != OptimizerState::master) return;
      // The working copy follows the master, through the parameter slots.
      const size_t es = dtype_size(sh.param_dtype);
      const size_t K = sets_.size();
      for (int j = 0; j < s.count; ++j) {
        const SubGroup& g = groups_[static_cast<size_t>(s.first + j)];
        Set& st = sets_[static_cast<size_t>(j) % K];
        copies_->wait(st.stored);
        to_working(st.out.data(), sh.param_dtype, host_src + g.off, g.n);
        st.stored = put_param(*copies_, sh, static_cast<size_t>(g.off) * es, st.out.data(), static_cast<size_t>(g.n) * es);
      }
      copies_->wait_all();
      for (Set& st : sets_) st.stored = TransferTicket{};
      // A delayed update's parameters, if any, are older than this master.
      s.param_due = false;
    });
  }

 private:
  struct Shard {
    const OwnedShard* sh = nullptr;
    int first = 0, count = 0;  // its sub-groups in groups_
    bool on_file[kNumOptimizerStates] = {false, false, false};  // written at least once; else zeros
    // [Note: delayed parameter update]: the step's gradient and the
    // update's working parameters, in host memory.
    Buffer grad, param;
    bool param_due = false;  // `param` holds parameters not uploaded yet
  };
  // The buffers of one sub-group in flight.
  struct Set {
    AlignedBuffer state[kNumOptimizerStates];  // master, exp_avg, exp_avg_sq
    Buffer grad, out;                          // the gradient from the device; the working parameters to it
    AioHandle reads[kNumOptimizerStates], writes[kNumOptimizerStates];
    bool reading[kNumOptimizerStates] = {false, false, false};
    bool writing[kNumOptimizerStates] = {false, false, false};
    TransferTicket fetched, stored;
  };
  struct Pending {
    const OwnedShard* shard;
    OptimizerStepScalars s;
    const void* grad;  // the shard's gradient at update(): it moves by step when on the host
  };

  // Runs `f`; on any error, the files go with the states ([Note: NVMe
  // optimizer step]) before the error travels on.
  template <typename F>
  void guarded(F&& f) {
    usable();
    try {
      f();
    } catch (...) {
      discard();
      throw;
    }
  }

  void usable() const {
    if (broken_)
      ZT_THROW("the NVMe optimizer's states (", opts_.key, " = ", opts_.nvme_path,
               ") were lost to an earlier error; the run cannot go on");
  }

  // After an error: waits for what is in flight, then removes the files.
  void discard() noexcept {
    broken_ = true;
    try {
      if (worker_.joinable()) worker_.join();
      worker_error_ = nullptr;
      copies_->wait_all();
    } catch (...) {
    }
    aio_.reset();
    if (dir_) {
      log_warn(opts_.key, " = ", opts_.nvme_path, ": removing this rank's swap files after the error below");
      dir_.reset();
    }
    files_[0] = files_[1] = files_[2] = nullptr;
  }

  void check_free_space(int64_t needed, int64_t elements, int64_t per_file) const {
    struct statvfs vfs {};
    if (::statvfs(dir_->path().c_str(), &vfs) != 0) {
      dir_->check_free_space(needed, "the optimizer states");  // its message for what statvfs says
      return;
    }
    const auto free_bytes = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
    if (needed > free_bytes)
      ZT_USER_ERROR(opts_.key, " = ", dir_->path(), ": the optimizer states need ", gib(needed), " (", needed,
                    " bytes: master, exp_avg and exp_avg_sq of ", elements, " owned elements, 3 files of ", per_file,
                    " bytes with the alignment padding) but the file system has ", gib(free_bytes), " (", free_bytes,
                    " bytes) free");
  }

  Shard& shard(const OwnedShard& sh) {
    ZT_CHECK(sh.index >= 0 && sh.index < static_cast<int>(shards_.size()) && shards_[static_cast<size_t>(sh.index)].sh == &sh,
             "shard ", sh.index, " not attached to the NVMe optimizer");
    return shards_[static_cast<size_t>(sh.index)];
  }

  std::vector<char*> pool_buffers() {
    std::vector<char*> bufs;
    for (Set& st : sets_)
      for (AlignedBuffer& b : st.state) bufs.push_back(b.data);
    return bufs;
  }


  // Waits for the writes of a set's last sub-group.
  void retire_writes(Set& st, OffloadStepTimes& t) {
    const double w = now_s();
    for (int k = 0; k < kNumOptimizerStates; ++k)
      if (st.writing[k]) {
        st.writing[k] = false;
        aio_->wait(st.writes[k]);
      }
    t.nvme_write_wait_s += now_s() - w;
  }

  // The sub-group loop of [Note: NVMe optimizer step] over the shards of
  // `work`. delayed: on the worker thread, from each shard's host gradient
  // into its host parameter copy (no device copies at all).
  void run_subgroups(const std::vector<Pending>& work, bool delayed, OffloadStepTimes& t) {
    struct Item {
      const Pending* p;
      const SubGroup* g;
    };
    std::vector<Item> items;
    for (const Pending& p : work) {
      const Shard& s = shard(*p.shard);
      for (int j = 0; j < s.count; ++j) items.push_back({&p, &groups_[static_cast<size_t>(s.first + j)]});
    }
    const size_t N = items.size(), K = sets_.size();
    auto prepare = [&](size_t i) {
      Set& st = sets_[i % K];
      retire_writes(st, t);  // its buffers are needed again
      const SubGroup& g = *items[i].g;
      const Shard& s = shards_[static_cast<size_t>(g.shard)];
      for (int k = 0; k < kNumOptimizerStates; ++k) {
        if (s.on_file[k]) {
          st.reads[k] = aio_->submit_read(*files_[k], st.state[k].data, static_cast<size_t>(g.bytes), g.file_off);
          st.reading[k] = true;
          t.nvme_read_bytes += static_cast<double>(g.bytes);
        } else {
          std::memset(st.state[k].data, 0, static_cast<size_t>(g.bytes));  // never written: zeros
        }
      }
      if (!delayed && !s.sh->grad_on_host) {
        st.fetched = copies_->to_host(st.grad.data(), advance(items[i].p->grad, DType::f32, g.off),
                                      static_cast<size_t>(g.n) * sizeof(float));
        t.d2h_bytes += static_cast<double>(g.n) * sizeof(float);
      }
    };
    if (N > 0) prepare(0);
    for (size_t i = 0; i < N; ++i) {
      const Item& it = items[i];
      const SubGroup& g = *it.g;
      const OwnedShard& sh = *it.p->shard;
      Shard& s = shards_[static_cast<size_t>(g.shard)];
      Set& st = sets_[i % K];
      if (opts_.pipeline_read && i + 1 < N) prepare(i + 1);
      double w = now_s();
      for (int k = 0; k < kNumOptimizerStates; ++k)
        if (st.reading[k]) {
          st.reading[k] = false;
          aio_->wait(st.reads[k]);
        }
      double c = now_s();
      t.nvme_read_wait_s += c - w;
      const size_t es = dtype_size(sh.param_dtype);
      const void* grad;
      // The engine's host buffer in its dtype, or fp32 fetched or copied
      // from the device.
      const DType grad_dtype = sh.grad_on_host ? sh.grad_dtype : DType::f32;
      void* out;
      if (delayed) {
        grad = advance(sh.grad_on_host ? it.p->grad : s.grad.data(), grad_dtype, g.off);
        out = s.param.as<char>() + static_cast<size_t>(g.off) * es;
      } else {
        copies_->wait(st.fetched);
        copies_->wait(st.stored);  // the parameter slot's last upload has run
        const double now = now_s();
        t.d2h_wait_s += now - c;
        c = now;
        grad = sh.grad_on_host ? advance(it.p->grad, grad_dtype, g.off) : st.grad.data();
        // Offloaded parameters are written in place (no slot, no copy).
        out = sh.param_in_place() ? static_cast<char*>(sh.param) + static_cast<size_t>(g.off) * es : st.out.data();
      }
      AdamWParams hp = hp_;
      hp.lr = it.p->s.lr;
      host_adamw(sh, st.state[0].data_f32(), grad, grad_dtype, st.state[1].data_f32(), st.state[2].data_f32(), g.n,
                 tile_ranges(sh, g.off, g.n), hp, it.p->s.step, it.p->s.grad_scale, out);
      t.cpu_s += now_s() - c;
      if (!delayed && !sh.param_in_place()) {
        // To the device, or to the parameters' swap file ([Note: parameter
        // offload to NVMe]), which copies it at once.
        st.stored = put_param(*copies_, sh, static_cast<size_t>(g.off) * es, out, static_cast<size_t>(g.n) * es);
        if (!sh.param_on_host) t.h2d_bytes += static_cast<double>(g.n) * static_cast<double>(es);
      }
      if (it.p->s.step == opts_.fail_write_at_step) {
        opts_.fail_write_at_step = -1;
        ZT_THROW("aio write of ", files_[0]->path(), " at offset ", g.file_off, " (", g.bytes,
                 " bytes) failed: ", std::strerror(ENOSPC), " (errno ", ENOSPC,
                 ") [injected by ZT_INJECT_FAULT=nvme-write-error at update ", it.p->s.step, "]");
      }
      for (int k = 0; k < kNumOptimizerStates; ++k) {
        st.writes[k] = aio_->submit_write(*files_[k], st.state[k].data, static_cast<size_t>(g.bytes), g.file_off);
        st.writing[k] = true;
        t.nvme_write_bytes += static_cast<double>(g.bytes);
      }
      if (!opts_.pipeline_write) retire_writes(st, t);
      if (!opts_.pipeline_read && i + 1 < N) prepare(i + 1);
    }
    for (Set& st : sets_) retire_writes(st, t);
    for (const Pending& p : work) {
      Shard& s = shard(*p.shard);
      for (bool& on : s.on_file) on = true;
      if (delayed) s.param_due = true;
    }
    if (!delayed) {
      const double w = now_s();
      copies_->wait_all();
      t.h2d_wait_s += now_s() - w;
      for (Set& st : sets_) st.fetched = st.stored = TransferTicket{};
    }
  }

  // [Note: delayed parameter update]
  void finish_delayed() {
    times_.delayed = true;
    double w = now_s();
    join();
    times_.delayed_wait_s = now_s() - w;
    const OffloadStepTimes& done = worker_times_;  // the update that finished during this step
    times_.cpu_s = done.cpu_s;
    times_.nvme_read_bytes = done.nvme_read_bytes;
    times_.nvme_write_bytes = done.nvme_write_bytes;
    times_.nvme_read_wait_s = done.nvme_read_wait_s;
    times_.nvme_write_wait_s = done.nvme_write_wait_s;
    worker_times_ = OffloadStepTimes{};
    // This step's gradients to the host (the device reuses its buffers) and
    // the last update's parameters to the device, at once on the two copy
    // streams; the uploads wait for the step's kernels (stage 3 gathers read
    // the working shards until the end of the backward).
    for (const Pending& p : pending_) {
      const OwnedShard& sh = *p.shard;
      Shard& s = shard(sh);
      if (s.param.empty()) {
        if (!sh.grad_on_host) s.grad = Buffer(pinned_, DType::f32, Shape{sh.numel()}, MemTag::offload);
        s.param = Buffer(pinned_, sh.param_dtype, Shape{sh.numel()}, MemTag::offload);
      }
      if (sh.grad_on_host) continue;  // the engine's other buffer takes the next step's
      copies_->to_host(s.grad.data(), p.grad, s.grad.bytes());
      times_.d2h_bytes += static_cast<double>(s.grad.bytes());
    }
    issue_delayed_uploads();
    w = now_s();
    copies_->wait_all();
    times_.d2h_wait_s = now_s() - w;
    std::vector<Pending> work = std::move(pending_);
    pending_.clear();
    if (work.empty()) return;
    worker_ = std::thread([this, work = std::move(work)] {
      try {
        run_subgroups(work, true, worker_times_);
      } catch (...) {
        worker_error_ = std::current_exception();
      }
    });
  }

  // Waits for the delayed update in flight, if any; its error is this call's.
  void join() {
    if (!worker_.joinable()) return;
    worker_.join();
    if (worker_error_) std::rethrow_exception(std::exchange(worker_error_, nullptr));
  }

  // The parameters of the last delayed update to the shards' working copies.
  void upload_delayed() {
    if (!issue_delayed_uploads()) return;
    const double w = now_s();
    copies_->wait_all();
    times_.h2d_wait_s += now_s() - w;
  }

  // Queues the uploads of the last delayed update's parameters, after the
  // kernels queued so far; whether there were any.
  bool issue_delayed_uploads() {
    join();
    bool any = false;
    TransferTicket after;
    for (Shard& s : shards_) {
      if (!s.param_due) continue;
      if (!any) after = copies_->mark_compute();
      s.param_due = false;
      any = true;
      put_param(*copies_, *s.sh, 0, s.param.data(), s.param.bytes(), after);
      if (!s.sh->param_on_host) times_.h2d_bytes += static_cast<double>(s.param.bytes());
    }
    return any;
  }

  AdamWParams hp_;
  NvmeOffloadOptions opts_;
  Device& pool_mem_;  // the sets' state buffers (pinned or pageable: pin_memory)
  Device& pinned_;    // the gradient and parameter slots, the delayed update's copies
  std::unique_ptr<TransferQueue> copies_;
  // Destroyed in the destructor, engine first: the engine's transfers use
  // the files and the buffers below.
  std::unique_ptr<SwapDir> dir_;
  SwapFile* files_[kNumOptimizerStates] = {nullptr, nullptr, nullptr};
  std::vector<Shard> shards_;
  std::vector<SubGroup> groups_;
  std::vector<Set> sets_;
  std::unique_ptr<AioEngine> aio_;
  std::vector<Pending> pending_;
  OffloadStepTimes times_;
  int64_t file_bytes_ = 0;  // the swap files' bytes (nvme_bytes)
  bool broken_ = false;
  // [Note: delayed parameter update]: the worker runs run_subgroups; it alone
  // uses the engine and the sets while it runs (every other call joins first).
  std::thread worker_;
  std::exception_ptr worker_error_;
  OffloadStepTimes worker_times_;
};

// SwapDir's run ids: letters, digits, '_', '.', '-', and never "-rank".
std::string sanitized(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '.' || c == '-';
    out += ok ? c : '_';
  }
  for (size_t at; (at = out.find("-rank")) != std::string::npos;) out[at] = '_';
  return out;
}

}  // namespace

std::string nvme_run_id() {
  std::string job;
  for (const char* var : {"SLURM_JOB_ID", "PBS_JOBID"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') {
      job = sanitized(v);
      break;
    }
  }
  const std::string pid = detail::concat("p", ::getpid());
  return job.empty() ? pid : job + "-" + pid;
}

void remove_nvme_swap_files_now() noexcept {
  {
    std::lock_guard<std::mutex> lock(g_live_mu);
    for (NvmeOffloadAdamW* p : g_live) p->unlink_files();
  }
  ParamSwap::remove_files_now();  // offload_param "nvme"
}

std::unique_ptr<OffloadAdamW> make_nvme_offload_adamw(Device& dev, const AdamWParams& hp,
                                                      const NvmeOffloadOptions& opts) {
  return std::make_unique<NvmeOffloadAdamW>(dev, hp, opts);
}

}  // namespace zt
