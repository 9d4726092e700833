#include "runtime/cuda/cuda_device.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>

#include "core/error.hpp"
#include "runtime/phase_clock.hpp"
#include "runtime/transfer.hpp"

namespace zt {
namespace {

// Makes a device current for one scope and restores the previous one, so a
// CudaDevice works whatever device the calling thread last selected.
class DeviceGuard {
 public:
  explicit DeviceGuard(int ordinal) {
    ZT_CUDA_CHECK(cudaGetDevice(&prev_));
    if (prev_ != ordinal) ZT_CUDA_CHECK(cudaSetDevice(ordinal));
    changed_ = prev_ != ordinal;
  }
  ~DeviceGuard() {
    if (changed_) (void)cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0;
  bool changed_ = false;
};

constexpr size_t kSmallLimit = size_t{1} << 20;  // up to here: 512 B classes
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = size_t{2} << 20;

}  // namespace

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: not an error here
    return 0;
  }
  return n;
}

int select_cuda_device(int local_rank) {
  ZT_CHECK(local_rank >= 0, "local rank must be >= 0, got ", local_rank);
  const int n = cuda_device_count();
  if (n == 0)
    ZT_USER_ERROR("no CUDA device is visible to this process on ", process_host(), " (local rank ", local_rank,
                  "): check CUDA_VISIBLE_DEVICES and the driver");
  const int dev = local_rank % n;
  ZT_CUDA_CHECK(cudaSetDevice(dev));
  set_process_gpu(dev);
  return dev;
}

// ---- CudaDevice ------------------------------------------------------------

size_t CudaDevice::size_class(size_t bytes) {
  if (bytes == 0) bytes = 1;
  const size_t round = bytes <= kSmallLimit ? kSmallRound : kLargeRound;
  return (bytes + round - 1) / round * round;
}

CudaDevice::CudaDevice(int ordinal) : ordinal_(ordinal) {
  const int n = cuda_device_count();
  ZT_CHECK(ordinal >= 0 && ordinal < n, "CUDA device ", ordinal, " requested, ", n, " visible");
  ZT_CUDA_CHECK(cudaSetDevice(ordinal));
  stream_ = CudaStream::create(/*non_blocking=*/true);
}

CudaDevice::~CudaDevice() {
  if (cudaSetDevice(ordinal_) == cudaSuccess) (void)cudaDeviceSynchronize();
  release_cached();
  for (auto& [p, cls] : held_) (void)cudaFree(p);
  held_.clear();
}

void* CudaDevice::raw_allocate(size_t bytes) {
  const size_t cls = size_class(bytes);
  auto it = free_.find(cls);
  if (it != free_.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    cached_ -= cls;
    held_.emplace(p, cls);
    return p;
  }
  DeviceGuard guard(ordinal_);
  void* p = nullptr;
  cudaError_t st = cudaMalloc(&p, cls);
  if (st == cudaErrorMemoryAllocation && cached_ > 0) {
    (void)cudaGetLastError();  // clear it: later launch checks must not see it
    empty_cache();
    st = cudaMalloc(&p, cls);
  }
  if (st == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return nullptr;  // Device::allocate reports the tag and the usage
  }
  ZT_CUDA_CHECK(st);
  held_.emplace(p, cls);
  reserved_ += cls;
  if (reserved_ > peak_reserved_) peak_reserved_ = reserved_;
  return p;
}

void CudaDevice::raw_deallocate(void* p, size_t bytes) noexcept {
  auto it = held_.find(p);
  if (it == held_.end() || it->second != size_class(bytes)) {
    // A pointer this device never handed out, or a wrong size: the caller's
    // bookkeeping is broken and continuing would corrupt the cache.
    std::fprintf(stderr, "CudaDevice %d: deallocate(%p, %zu) of a block it does not hold\n", ordinal_, p,
                 bytes);
    std::abort();
  }
  const size_t cls = it->second;
  held_.erase(it);
  free_[cls].push_back(p);
  cached_ += cls;
}

bool CudaDevice::fits_memory_cap(size_t bytes, size_t cap) {
  const size_t cls = size_class(bytes);
  auto fits = [&] { return cls <= cap && reserved_ <= cap - cls; };
  const auto it = free_.find(cls);
  if (it != free_.end() && !it->second.empty()) return true;  // from the cache: nothing more taken
  if (fits()) return true;
  if (cached_ == 0) return false;
  // Blocks of other size classes sit in the cache: give them back and count again.
  empty_cache();
  return fits();
}

std::string CudaDevice::memory_cap_detail() const {
  return "reserved from the GPU " + human_bytes(reserved_) + " (held blocks rounded up to their size class; " +
         human_bytes(cached_) + " of it cached)";
}

void CudaDevice::release_cached() noexcept {
  for (auto& [cls, blocks] : free_) {
    for (void* p : blocks) {
      (void)cudaFree(p);
      reserved_ -= cls;
    }
  }
  free_.clear();
  cached_ = 0;
}

void CudaDevice::empty_cache() {
  DeviceGuard guard(ordinal_);
  ZT_CUDA_CHECK(cudaDeviceSynchronize());
  release_cached();
}

void CudaDevice::memset_zero(void* p, size_t bytes) {
  if (bytes == 0) return;
  ZT_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_.get()));
}

void CudaDevice::copy_to_host(void* host_dst, const void* dev_src, size_t bytes) {
  if (bytes == 0) return;
  ZT_CUDA_CHECK(cudaMemcpyAsync(host_dst, dev_src, bytes, cudaMemcpyDefault, stream_.get()));
  stream_.synchronize("a copy to the host");
}

void CudaDevice::copy_from_host(void* dev_dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  ZT_CUDA_CHECK(cudaMemcpyAsync(dev_dst, host_src, bytes, cudaMemcpyDefault, stream_.get()));
  stream_.synchronize("a copy from the host");
}

std::string CudaDevice::pci_bus_id() const {
  char id[32] = {};
  ZT_CUDA_CHECK(cudaDeviceGetPCIBusId(id, static_cast<int>(sizeof id), ordinal_));
  return id;
}

void CudaDevice::synchronize() { stream_.synchronize("the compute stream"); }

namespace {

// [Note: upload staging] on the GPU: pinned slots (so the copy is truly
// asynchronous), each with the event of the last copy that read it.
class PinnedStaging final : public UploadStaging {
 public:
  PinnedStaging(CudaDevice& dev, size_t slot_bytes, int slots) : dev_(dev), slot_bytes_(slot_bytes) {
    ZT_CHECK(slots >= 1, "upload staging needs at least one slot");
    for (int i = 0; i < slots; ++i) {
      buffers_.emplace_back(pinned_, slot_bytes, MemTag::activations);
      events_.push_back(CudaEvent::create());
      used_.push_back(false);
    }
  }
  void* next() override {
    cur_ = (cur_ + 1) % buffers_.size();
    if (used_[cur_]) events_[cur_].synchronize("an upload slot");  // the copy that last read it has run
    used_[cur_] = false;
    return buffers_[cur_].data();
  }
  void upload(void* dst, size_t offset, size_t bytes) override {
    ZT_CHECK(offset + bytes <= slot_bytes_, "upload of ", bytes, " bytes at ", offset, " from a slot of ", slot_bytes_);
    if (bytes == 0) return;
    ZT_CUDA_CHECK(cudaMemcpyAsync(dst, buffers_[cur_].as<char>() + offset, bytes, cudaMemcpyHostToDevice, dev_.stream()));
    events_[cur_].record(dev_.stream());
    used_[cur_] = true;
  }

 private:
  CudaDevice& dev_;
  size_t slot_bytes_;
  PinnedHostDevice pinned_;  // declared before the buffers it allocates
  std::vector<Buffer> buffers_;
  std::vector<CudaEvent> events_;
  std::vector<bool> used_;
  size_t cur_ = 0;
};

}  // namespace

namespace {

// [Note: step graph] on the GPU: the compute stream recorded in relaxed mode
// (other threads, the watchdog's and the offload's, keep making CUDA calls),
// one executable graph per piece of the step kept from step to step and
// updated in place.
class CudaStepGraph final : public StepGraph {
 public:
  explicit CudaStepGraph(CudaDevice& dev) : dev_(dev) {}
  ~CudaStepGraph() override {
    abandon();
    for (cudaGraphExec_t e : execs_) (void)cudaGraphExecDestroy(e);  // freed once a queued launch is done
  }
  CudaStepGraph(const CudaStepGraph&) = delete;
  CudaStepGraph& operator=(const CudaStepGraph&) = delete;

  void begin() override {
    ZT_CHECK(!step_capture_active(), "the step's CUDA graph is already being recorded");
    piece_ = 0;
    nodes_ = 0;
    start_piece();
  }

  void cut() override {
    launch_piece();
    start_piece();
  }

  void end_and_launch() override {
    launch_piece();
    ++steps_;
    pieces_ = piece_;
  }

  void abandon() noexcept override {
    if (!step_capture_active()) return;
    set_step_capture_active(false);
    cudaGraph_t graph = nullptr;
    if (cudaStreamEndCapture(dev_.stream(), &graph) == cudaSuccess && graph != nullptr) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
  }

  std::string summary() const override {
    std::string s = std::to_string(steps_) + " steps, each in " + std::to_string(pieces_) + " graphs of " +
                    std::to_string(nodes_) + " operations in all, " + std::to_string(instantiations_) +
                    " instantiations, " + std::to_string(updates_) + " updates";
    if (last_update_failure_ != 0)
      s += " (an update refused with cudaGraphExecUpdateResult " + std::to_string(last_update_failure_) + ")";
    return s;
  }

 private:
  void start_piece() {
    ZT_CUDA_CHECK(cudaStreamBeginCapture(dev_.stream(), cudaStreamCaptureModeRelaxed));
    set_step_capture_active(true);
  }

  // Ends the piece's recording and launches it, updating the executable
  // graph of this piece of the last step, or making one.
  void launch_piece() {
    ZT_CHECK(step_capture_active(), "the step's CUDA graph is not being recorded");
    set_step_capture_active(false);
    cudaGraph_t graph = nullptr;
    const cudaError_t st = cudaStreamEndCapture(dev_.stream(), &graph);
    if (st != cudaSuccess) {
      (void)cudaGetLastError();
      ZT_THROW("recording the step's CUDA graph failed (", cudaGetErrorName(st), ": ", cudaGetErrorString(st),
               "): an operation of the step cannot be recorded; ZTRAIN_CUDA_GRAPH=0 runs the step without a "
               "graph");
    }
    struct GraphOwner {
      cudaGraph_t g;
      ~GraphOwner() { (void)cudaGraphDestroy(g); }
    } owner{graph};
    size_t nodes = 0;
    ZT_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
    nodes_ += nodes;
    if (piece_ == execs_.size()) execs_.push_back(nullptr);
    cudaGraphExec_t& exec = execs_[piece_++];
    if (exec != nullptr) {
      cudaGraphExecUpdateResultInfo info{};
      if (cudaGraphExecUpdate(exec, graph, &info) == cudaSuccess) {
        ++updates_;
        ZT_CUDA_CHECK(cudaGraphLaunch(exec, dev_.stream()));
        return;
      }
      (void)cudaGetLastError();  // other operations: instantiated anew below
      last_update_failure_ = static_cast<int>(info.result);
      ZT_CUDA_CHECK(cudaGraphExecDestroy(exec));  // a launch still queued keeps its copy
      exec = nullptr;
    }
    ZT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    ++instantiations_;
    ZT_CUDA_CHECK(cudaGraphLaunch(exec, dev_.stream()));
  }

  CudaDevice& dev_;
  std::vector<cudaGraphExec_t> execs_;  // one per piece of the step
  size_t piece_ = 0;                    // the piece being recorded
  int64_t steps_ = 0, instantiations_ = 0, updates_ = 0;
  size_t pieces_ = 0, nodes_ = 0;       // of the last step
  int last_update_failure_ = 0;
};

}  // namespace

std::unique_ptr<StepGraph> CudaDevice::make_step_graph() { return std::make_unique<CudaStepGraph>(*this); }

namespace {

// [Note: phase clock] on the GPU: a mark is a timing event recorded on the
// compute stream (in the step's graph while it is recorded: CudaEvent's
// record). The events are made once and reused, mark i by event i, so a step
// recorded as a graph records the same events as the step before and its
// graph is updated, not instantiated anew.
class CudaPhaseClock final : public PhaseClock {
 public:
  explicit CudaPhaseClock(CudaDevice& dev) : dev_(dev) {}

 protected:
  void record(int index) override {
    while (events_.size() <= static_cast<size_t>(index)) events_.push_back(CudaEvent::create(true));
    events_[static_cast<size_t>(index)].record(dev_.stream());
  }
  void wait_for(int index) override {
    events_[static_cast<size_t>(index)].synchronize("the step's last phase mark (wall_clock_breakdown)");
  }
  double seconds(int from, int to) const override {
    return 1e-3 * CudaEvent::elapsed_ms(events_[static_cast<size_t>(from)], events_[static_cast<size_t>(to)]);
  }

 private:
  CudaDevice& dev_;
  std::vector<CudaEvent> events_;
};

}  // namespace

std::unique_ptr<PhaseClock> CudaDevice::make_phase_clock() { return std::make_unique<CudaPhaseClock>(*this); }

std::unique_ptr<UploadStaging> CudaDevice::make_upload_staging(size_t slot_bytes, int slots) {
  return std::make_unique<PinnedStaging>(*this, slot_bytes, slots);
}

namespace {

// [Note: offload transfers] on the GPU. A ticket's id says its kind in its
// low two bits (0: device-to-host copy, 1: host-to-device copy, 2: compute
// mark); each kind's events complete in the order they were recorded (one
// stream each), so waiting for a ticket retires every earlier one of its kind.
class CudaTransfers final : public TransferQueue {
 public:
  explicit CudaTransfers(CudaDevice& dev) : dev_(dev) {
    for (int k = 0; k < 2; ++k) kind_[k].stream = CudaStream::create(true);
  }
  ~CudaTransfers() override {
    try {
      wait_all();
    } catch (...) {
    }
  }
  TransferTicket to_host(void* host_dst, const void* dev_src, size_t bytes, TransferTicket after_mark) override {
    refuse_in_step_graph("a copy to the host");
    if (after_mark.id != 0) {
      // Read the source as the compute stream left it at the mark (a retired
      // mark's work is done).
      ZT_CHECK(after_mark.id % 4 == 2, "to_host after a ticket that is not a compute mark");
      if (cudaEvent_t e = event(after_mark)) kind_[0].stream.wait(e);
    } else {
      // Read the source as the compute stream leaves it.
      const CudaEvent after = CudaEvent::create();
      after.record(dev_.stream());
      kind_[0].stream.wait(after.get());
    }
    ZT_CUDA_CHECK(cudaMemcpyAsync(host_dst, dev_src, bytes, cudaMemcpyDeviceToHost, kind_[0].stream.get()));
    return record(0, kind_[0].stream.get());
  }
  TransferTicket to_device(void* dev_dst, const void* host_src, size_t bytes, TransferTicket after) override {
    refuse_in_step_graph("a copy from the host");
    if (after.id != 0) {
      ZT_CHECK(after.id % 4 == 2, "to_device after a ticket that is not a compute mark");
      if (cudaEvent_t e = event(after)) kind_[1].stream.wait(e);
    }
    ZT_CUDA_CHECK(cudaMemcpyAsync(dev_dst, host_src, bytes, cudaMemcpyHostToDevice, kind_[1].stream.get()));
    return record(1, kind_[1].stream.get());
  }
  TransferTicket mark_compute() override { return record(2, dev_.stream()); }
  void wait(TransferTicket t) override {
    if (t.id == 0) return;
    Kind& k = kind_[t.id % 4];
    while (!k.events.empty() && k.events.front().first <= t.id) {
      k.events.front().second.synchronize();
      k.events.pop_front();
    }
  }
  void compute_waits(TransferTicket t) override {
    refuse_in_step_graph("the compute stream waiting for a copy");
    if (cudaEvent_t e = event(t)) ZT_CUDA_CHECK(cudaStreamWaitEvent(dev_.stream(), e, 0));
  }
  void wait_all() override {
    for (int k = 0; k < 2; ++k) kind_[k].stream.synchronize();
    for (Kind& k : kind_) k.events.clear();
  }

 private:
  struct Kind {
    CudaStream stream;  // none for compute marks
    std::deque<std::pair<uint64_t, CudaEvent>> events;
  };
  TransferTicket record(int k, cudaStream_t on) {
    const uint64_t id = ++count_ * 4 + static_cast<uint64_t>(k);
    CudaEvent ev = CudaEvent::create();
    ev.record(on);
    kind_[k].events.emplace_back(id, std::move(ev));
    // Marks nobody waits for would pile up: retire the oldest (done long
    // since, in practice) beyond a few hundred.
    if (k == 2 && kind_[k].events.size() > 256) {
      kind_[k].events.front().second.synchronize();
      kind_[k].events.pop_front();
    }
    return TransferTicket{id};
  }
  // The copy streams are not part of the step's graph ([Note: step graph]):
  // a copy ordered after recorded work would run before it.
  static void refuse_in_step_graph(const char* what) {
    ZT_CHECK(!step_capture_active(), what, " on a copy stream while the step's CUDA graph is recorded: this layout "
             "cannot run in a graph (ZTRAIN_CUDA_GRAPH=0 runs it without)");
  }
  // The event of a ticket still queued; null once retired (the work is done).
  cudaEvent_t event(TransferTicket t) {
    if (t.id == 0) return nullptr;
    for (const auto& [id, ev] : kind_[t.id % 4].events)
      if (id == t.id) return ev.get();
    return nullptr;
  }
  CudaDevice& dev_;
  Kind kind_[3];
  uint64_t count_ = 0;
};

}  // namespace

std::unique_ptr<TransferQueue> CudaDevice::make_transfer_queue() { return std::make_unique<CudaTransfers>(*this); }

std::unique_ptr<Device> CudaDevice::make_pinned_host_memory() { return std::make_unique<PinnedHostDevice>(); }

// ---- PinnedHostDevice ----------------------------------------------------------

void* PinnedHostDevice::raw_allocate(size_t bytes) {
  void* p = nullptr;
  const cudaError_t st = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (st == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return nullptr;
  }
  ZT_CUDA_CHECK(st);
  return p;
}

void PinnedHostDevice::raw_deallocate(void* p, size_t) noexcept { (void)cudaFreeHost(p); }
void PinnedHostDevice::memset_zero(void* p, size_t bytes) { host_memset_zero(p, bytes); }
void PinnedHostDevice::copy_to_host(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void PinnedHostDevice::copy_from_host(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }

}  // namespace zt
