// Device: tagged allocation with peak accounting. Every buffer in ztrain is
// allocated through a Device with a tag, so the peak bytes per tag are known
// at any time and reported at the end of a run. Streams and events are no-ops
// on the CPU (the CUDA device fills them in).
#pragma once

#include <array>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/tensor.hpp"

namespace zt {

enum class MemTag : uint8_t { params, grads, optim, activations, comm, workspace, offload };
constexpr int kNumMemTags = 7;
const char* mem_tag_name(MemTag tag);
// A size for memory messages in the largest binary unit that keeps a leading
// digit: "512 bytes", "1.50 MiB", "21.30 GiB".
std::string human_bytes(size_t bytes);

struct MemoryStats {
  std::array<size_t, kNumMemTags> current{};
  std::array<size_t, kNumMemTags> peak{};
  size_t current_total = 0;
  size_t peak_total = 0;
  std::array<uint64_t, kNumMemTags> allocations{};  // allocate() calls, for tests of steady-state steps
};

class UploadStaging;
class TransferQueue;
class StepGraph;
class PhaseClock;

class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceKind kind() const = 0;
  virtual std::string name() const = 0;
  // The GPU's PCI bus id ("0000:3b:00.0"), which NVML finds it by whatever
  // CUDA_VISIBLE_DEVICES renumbered; "" for the CPU.
  virtual std::string pci_bus_id() const { return ""; }
  // Never returns null: throws with the tag and the current usage on failure.
  void* allocate(size_t bytes, MemTag tag);
  void deallocate(void* p, size_t bytes, MemTag tag) noexcept;
  const MemoryStats& stats() const { return stats_; }
  // [Note: memory cap] A cap of `bytes` on this device (0 = none), so that a
  // large GPU behaves like a smaller one (train.device_memory_cap_gib). An
  // allocation that would take what callers hold (stats().current_total)
  // past it throws, as would an allocation that would take what the device
  // takes from its memory past it (a caching allocator first releases its
  // cache: CudaDevice). The error names the tag, the bytes requested, the
  // bytes held per tag, the cap, and `note` (the caller's figure to compare
  // with, e.g. the memory estimator's for this rank). What is held already
  // is kept, whatever the cap.
  void set_memory_cap(size_t bytes, std::string note);
  // [Note: memory peaks] ZTRAIN_MEMORY_PEAKS=1: what was live at each peak.
  // With it on, every allocation's size is also kept by tag, and each new
  // peak of a tag (and of the total) keeps a copy of what was live then, so
  // an estimate that misses a peak shows which buffers made it. Off by
  // default: one map update per allocation and a copy per new peak. ztrain
  // turns it on before the trainer allocates; buffers allocated before the
  // switch are left out.
  void record_peak_detail();
  // One line per tag with a peak: its bytes and its live buffers by size
  // ("4 x 393.00 MiB"), and a line with what every other tag held at that
  // moment (tags that peak at different times add up to less than their
  // peaks); then the buffers of the total's peak; "" when not recorded.
  std::string describe_peak_detail() const;
  size_t memory_cap() const { return cap_; }
  virtual void memset_zero(void* p, size_t bytes) = 0;
  // Copies between this device's memory and host memory (plain memcpy on CPU).
  virtual void copy_to_host(void* host_dst, const void* dev_src, size_t bytes) = 0;
  virtual void copy_from_host(void* dev_dst, const void* host_src, size_t bytes) = 0;
  virtual void synchronize() {}
  // Host-to-device uploads that do not wait for the device
  // ([Note: upload staging]): `slots` host buffers of `slot_bytes` each.
  virtual std::unique_ptr<UploadStaging> make_upload_staging(size_t slot_bytes, int slots);
  // Copies between this device and host memory that overlap the device's
  // compute ([Note: offload transfers], runtime/transfer.hpp).
  virtual std::unique_ptr<TransferQueue> make_transfer_queue();
  // The training step's device work captured and launched as graphs
  // ([Note: step graph]); null where the device has none (the CPU).
  virtual std::unique_ptr<StepGraph> make_step_graph() { return nullptr; }
  // Marks in this device's order of work, for the step's phase times
  // ([Note: phase clock], runtime/phase_clock.hpp); the base reads the
  // host's clock, right where work is done when its call returns.
  virtual std::unique_ptr<PhaseClock> make_phase_clock();
  // Host memory for offloaded state: page-locked when `pinned` (copies from
  // and to it run asynchronously on a GPU), pageable otherwise. Its buffers
  // are host memory (DeviceKind::cpu) with their own accounting (stats()).
  // The same Device for every call with the same `pinned`; owned by this one.
  Device& host_memory(bool pinned);
  // Its accounting, or null when nothing asked for that host memory.
  const MemoryStats* host_memory_stats(bool pinned) const {
    const std::unique_ptr<Device>& d = host_[pinned ? 1 : 0];
    return d ? &d->stats() : nullptr;
  }

 protected:
  virtual void* raw_allocate(size_t bytes) = 0;
  virtual void raw_deallocate(void* p, size_t bytes) noexcept = 0;
  // With a cap set ([Note: memory cap]), asked before raw_allocate once the
  // bytes held fit: whether raw_allocate(bytes) keeps what this device takes
  // from its memory within `cap`, after releasing what it can. The base takes
  // exactly what it holds, so yes.
  virtual bool fits_memory_cap(size_t bytes, size_t cap);
  // For the cap's error: what the device takes beyond what it holds ("" when
  // nothing).
  virtual std::string memory_cap_detail() const { return ""; }
  // The pinned host memory of host_memory(true); the base gives pageable.
  virtual std::unique_ptr<Device> make_pinned_host_memory();

 private:
  [[noreturn]] void throw_over_cap(size_t bytes, MemTag tag) const;

  struct PeakDetail {
    using Sizes = std::map<size_t, int64_t>;  // buffer size -> count live
    std::array<Sizes, kNumMemTags> live, at_peak, at_total_peak;
    std::array<std::array<size_t, kNumMemTags>, kNumMemTags> beside_peak{};  // every tag's bytes at each tag's peak
    std::unordered_set<const void*> counted;  // the allocations in `live`
  };
  MemoryStats stats_;
  std::unique_ptr<PeakDetail> peaks_;
  size_t cap_ = 0;  // 0 = none
  std::string cap_note_;
  std::unique_ptr<Device> host_[2];  // [pinned]
};

class CpuDevice final : public Device {
 public:
  DeviceKind kind() const override { return DeviceKind::cpu; }
  std::string name() const override { return "cpu"; }
  void memset_zero(void* p, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* dev_src, size_t bytes) override;
  void copy_from_host(void* dev_dst, const void* host_src, size_t bytes) override;

 protected:
  void* raw_allocate(size_t bytes) override;
  void raw_deallocate(void* p, size_t bytes) noexcept override;
};

// Move-only owner of one allocation on a Device.
// Host memory in parallel (all OpenMP threads, 16 MiB pieces): zeroing and
// copying the tens of GiB that offloaded states take at start would
// otherwise take a core tens of seconds. Small sizes run on the caller.
void host_memset_zero(void* p, size_t bytes);
void host_memcpy(void* dst, const void* src, size_t bytes);

class Buffer {
 public:
  Buffer() = default;
  Buffer(Device& dev, size_t bytes, MemTag tag);
  // Typed allocation: a buffer for `shape` elements of `dtype`.
  Buffer(Device& dev, DType dtype, Shape shape, MemTag tag);
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void reset() noexcept;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  MemTag tag() const { return tag_; }
  bool empty() const { return data_ == nullptr; }
  // The whole buffer as a tensor (uses the dtype/shape given at construction).
  Tensor tensor() const { return Tensor(data_, dtype_, shape_, dev_ ? dev_->kind() : DeviceKind::cpu); }
  // A view of the buffer with another dtype and shape that fits inside it.
  Tensor view(DType dtype, Shape shape, size_t byte_offset = 0) const;
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }

 private:
  Device* dev_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  MemTag tag_ = MemTag::workspace;
  DType dtype_ = DType::f32;
  Shape shape_;
};

// Bump allocator for activations and workspace whose lifetime is one
// micro-batch or one step: allocation is a pointer bump, reset() frees all.
// It grows by adding chunks when a request does not fit (in practice only in
// the first step); chunks are kept, so later steps allocate nothing.
class Arena {
 public:
  Arena() = default;
  Arena(Device& dev, MemTag tag, size_t chunk_bytes = size_t{64} << 20)
      : dev_(&dev), tag_(tag), chunk_bytes_(chunk_bytes) {}
  Tensor alloc(DType dtype, Shape shape);
  // Marks let a caller free everything allocated after a point (LIFO).
  struct Mark {
    size_t chunk = 0;
    size_t used = 0;
  };
  Mark mark() const { return {cur_, chunks_.empty() ? 0 : used_}; }
  void release_to(Mark m);
  void reset() { release_to(Mark{}); }
  size_t capacity() const;

 private:
  Device* dev_ = nullptr;
  MemTag tag_ = MemTag::activations;
  size_t chunk_bytes_ = 0;
  std::vector<Buffer> chunks_;
  size_t cur_ = 0;   // index of the chunk being filled
  size_t used_ = 0;  // bytes used in chunks_[cur_]
};

// Releases what a scope took from an arena, however the scope is left. On a
// device, memory released while kernels still use it is reused only by work
// queued later on the same stream.
class ArenaScope {
 public:
  explicit ArenaScope(Arena& ws) : ws_(ws), mark_(ws.mark()) {}
  ~ArenaScope() { ws_.release_to(mark_); }
  ArenaScope(const ArenaScope&) = delete;
  ArenaScope& operator=(const ArenaScope&) = delete;

 private:
  Arena& ws_;
  Arena::Mark mark_;
};

// [Note: upload staging] A micro-batch's tokens go to the device without the
// host waiting for the device: the host writes them into a staging slot and
// queues the copy; a slot is written again only once the device has run the
// copy that last read it (an event per slot on the GPU). With more slots
// than uploads between two host synchronisations of the step (one per
// micro-batch, plus one), the host never waits on a slot in practice. On
// the CPU the copy is done at once and a slot is free again immediately.
class UploadStaging {
 public:
  virtual ~UploadStaging() = default;
  // The next slot: slot_bytes of host memory to fill. Waits only while the
  // copy that last read this slot is still queued.
  virtual void* next() = 0;
  // Queues copies out of the slot next() returned: `bytes` from `offset` of
  // the slot to device memory `dst`. Returns at once.
  virtual void upload(void* dst, size_t offset, size_t bytes) = 0;
};

// [Note: step graph] The device work a training step queues between its
// first forward and the end of its gradient reduction, recorded and launched
// as graphs (CUDA graphs) instead of operation by operation: the GPU
// then goes from one kernel to the next without the queue's launch latency
// (0.25 us between dependent kernels in a graph against 1.1 us on a stream
// on an H200; docs/perf.md, "CUDA graph of the step"). The host code of the
// step runs as it does without the graph, every step: begin() starts
// recording the compute stream, the operations queued until cut() or
// end_and_launch() are recorded instead of run, and each of those two calls
// updates the graph of the same piece of the step before with them (the
// same operations with new arguments: the upload slot, any temporary) or
// instantiates a new one when they differ in kind or order, then launches
// it where the operations would have run; cut() records the next piece.
// The step is cut into pieces (StepWalk: 1, 1, 2, 4, 8, ... units'
// forwards or backwards) so that the GPU starts on the first piece while
// the host still records the rest: one graph of the whole step kept the GPU
// idle while the host recorded it after the step's verdict, which the host
// waits for (2.6 ms a step at GPT-2 124M on an H200). What may happen
// between begin() and end_and_launch() is what
// a step without host round trips does ([Note: host round trips]): no
// synchronisation, no copy to the host, no allocation from the device's
// memory (the caching allocator's reuse is fine: the graph keeps the stream's
// order), and no other stream ordered after the recorded work before the
// launch. An event recorded in between for the host or another stream
// (an upload slot's, a compute mark) becomes the graph's own record of it.
class StepGraph {
 public:
  virtual ~StepGraph() = default;
  virtual void begin() = 0;
  virtual void cut() = 0;
  virtual void end_and_launch() = 0;
  // Ends a recording that an error interrupted, launching nothing.
  virtual void abandon() noexcept = 0;
  // "N steps, each in P graphs of K operations in all, I instantiations, U
  // updates".
  virtual std::string summary() const = 0;
};

std::unique_ptr<Device> make_cpu_device();

}  // namespace zt
