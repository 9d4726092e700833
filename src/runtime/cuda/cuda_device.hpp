// CudaDevice: one GPU as a zt::Device. Allocation goes through a caching
// allocator, and the base class's tagged accounting sees exactly what callers
// hold (stats()), while reserved_bytes() reports what is taken from the GPU
// (held + cached). PinnedHostDevice hands out page-locked host memory for
// offload and communication staging.
//
// [Note: caching allocator] cudaMalloc and cudaFree are slow and cudaFree
// synchronises the whole device, so freed blocks are kept in free lists keyed
// by their rounded size (multiples of 512 B up to 1 MiB, of 2 MiB above) and
// handed out again for a request of the same class. Blocks go back to the GPU
// only on empty_cache(), when a cudaMalloc fails (then the cache is emptied
// and the allocation retried once) or would take reserved_bytes() past the
// memory cap ([Note: memory cap] in runtime/device.hpp; then the cache is
// emptied first, and only what is held counts), and on destruction. Reuse is safe in the
// order of the compute stream: a block freed by the host while kernels on the
// compute stream still use it is handed out again only to work queued later
// on that stream. Memory used on any other stream must be synchronised with
// the compute stream before it is freed (as with PyTorch's record_stream).
// Like Device, a CudaDevice is used from one host thread.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/cuda/cuda_handles.hpp"
#include "runtime/device.hpp"

namespace zt {

// GPUs visible to this process; 0 when there are none or the driver cannot
// be loaded (never throws, so tests can skip on it).
int cuda_device_count();

// Makes GPU local_rank % cuda_device_count() current for the calling thread
// and returns its ordinal; throws when the process sees no GPU.
int select_cuda_device(int local_rank);

class CudaDevice final : public Device {
 public:
  // Makes `ordinal` current for the calling thread and creates the compute
  // stream (non-blocking) on it.
  explicit CudaDevice(int ordinal);
  // Synchronises the GPU and releases every block, cached or still held
  // (Buffers must not outlive their device).
  ~CudaDevice() override;
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  DeviceKind kind() const override { return DeviceKind::cuda; }
  std::string name() const override { return "cuda:" + std::to_string(ordinal_); }
  int ordinal() const { return ordinal_; }
  std::string pci_bus_id() const override;
  // The stream every operation of this device (and, by default, CudaKernels)
  // is queued on.
  cudaStream_t stream() const { return stream_.get(); }

  // Queued on the compute stream; returns at once.
  void memset_zero(void* p, size_t bytes) override;
  // Queued on the compute stream after the work before it, and synchronous:
  // on return the destination holds the data and the source may be reused.
  void copy_to_host(void* host_dst, const void* dev_src, size_t bytes) override;
  void copy_from_host(void* dev_dst, const void* host_src, size_t bytes) override;
  // Waits for the compute stream.
  void synchronize() override;
  // Pinned slots, copies queued on the compute stream ([Note: upload staging]).
  std::unique_ptr<UploadStaging> make_upload_staging(size_t slot_bytes, int slots) override;
  // Two copy streams, one per direction ([Note: offload transfers]).
  std::unique_ptr<TransferQueue> make_transfer_queue() override;
  // The compute stream recorded into CUDA graphs ([Note: step graph]).
  std::unique_ptr<StepGraph> make_step_graph() override;
  // Timing events on the compute stream ([Note: phase clock]).
  std::unique_ptr<PhaseClock> make_phase_clock() override;

  // Bytes taken from the GPU: held by callers plus cached for reuse.
  size_t reserved_bytes() const { return reserved_; }
  size_t peak_reserved_bytes() const { return peak_reserved_; }
  size_t cached_bytes() const { return cached_; }
  // Returns every cached block to the GPU (synchronises the device first).
  void empty_cache();
  // The size class a request of `bytes` is served from.
  static size_t size_class(size_t bytes);

 protected:
  void* raw_allocate(size_t bytes) override;
  void raw_deallocate(void* p, size_t bytes) noexcept override;
  std::unique_ptr<Device> make_pinned_host_memory() override;
  // The cap bounds reserved_bytes(), not only what callers hold: a request
  // that needs a new cudaMalloc past it empties the cache and tries again.
  bool fits_memory_cap(size_t bytes, size_t cap) override;
  std::string memory_cap_detail() const override;

 private:
  void release_cached() noexcept;

  int ordinal_;
  CudaStream stream_;
  std::map<size_t, std::vector<void*>> free_;  // size class -> cached blocks
  std::unordered_map<void*, size_t> held_;     // block -> size class
  size_t reserved_ = 0, peak_reserved_ = 0, cached_ = 0;
};

// Page-locked host memory (cudaHostAlloc, portable to every GPU) for ZeRO
// offload (tag MemTag::offload) and host-staged communication (MemTag::comm):
// copies from and to it run asynchronously and at full PCIe bandwidth. The
// memory is host memory, so its tensors are DeviceKind::cpu and the CPU
// kernels and optimizer use it directly.
class PinnedHostDevice final : public Device {
 public:
  PinnedHostDevice() = default;
  DeviceKind kind() const override { return DeviceKind::cpu; }
  std::string name() const override { return "pinned-host"; }
  void memset_zero(void* p, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override;
  void copy_from_host(void* dst, const void* host_src, size_t bytes) override;

 protected:
  void* raw_allocate(size_t bytes) override;
  void raw_deallocate(void* p, size_t bytes) noexcept override;
};

}  // namespace zt
