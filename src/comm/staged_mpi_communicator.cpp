#include "comm/staged_mpi_communicator.hpp"

#include "core/clock.hpp"

namespace zt {
namespace {

constexpr size_t kAlign = 256;
constexpr size_t kSlotGranule = size_t{64} << 10;  // slots grow in 64 KiB steps

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

bool is_half(DType t) { return t == DType::bf16 || t == DType::f16; }

// Where a result goes back to device memory once MPI is done. With `wide`
// set, the f32 result is first rounded into `host` as `dtype`.
struct CopyBack {
  void* dev = nullptr;
  void* host = nullptr;
  size_t bytes = 0;
  const float* wide = nullptr;
  DType dtype = DType::f32;
  size_t n = 0;
};

// Times itself as an MPI request does ([Note: communication time]), from
// `issued`: the MPI call, after the blocking copy to the host.
class StagedHandle final : public DeviceCommHandle {
 public:
  StagedHandle(StagedMpiCommunicator* owner, size_t slot, CommRequest mpi, CopyBack back, cudaStream_t stream,
               CommOp op, double issued)
      : owner_(owner), slot_(slot), mpi_(std::move(mpi)), back_(back), stream_(stream), op_(op), issued_(issued) {}
  ~StagedHandle() override {
    // Like MpiRequest: a dropped handle completes here, or the slot would be
    // reused under a live MPI call. Destructors never throw.
    try {
      finish(true);
    } catch (...) {
    }
  }
  void wait() override { finish(true); }
  bool test() override {
    if (finished_) return true;
    if (!mpi_->test()) return false;
    finish(false);
    return true;
  }
  void wait_host() override {
    finish(true);
    watched_stream_sync(stream_, "a staged collective's copy back");
  }

 private:
  // `waiting`: the caller blocks here until MPI is done.
  void finish(bool waiting) {
    if (finished_) return;
    finished_ = true;
    const double t = now_s();
    ::zt::wait(mpi_);
    const double done = now_s();
    owner_->add_time(op_, done - issued_, waiting ? done - t : 0.0);
    if (back_.wide != nullptr) convert(back_.wide, DType::f32, back_.host, back_.dtype, back_.n);
    if (back_.bytes > 0) {
      ZT_CUDA_CHECK(cudaMemcpyAsync(back_.dev, back_.host, back_.bytes, cudaMemcpyHostToDevice, stream_));
    }
    owner_->release_slot(slot_, stream_);
  }

  StagedMpiCommunicator* owner_;
  size_t slot_;
  CommRequest mpi_;
  CopyBack back_;
  cudaStream_t stream_;
  CommOp op_;
  double issued_;
  bool finished_ = false;
};

// Carves a staging slot into consecutive 256-byte aligned regions. The slot
// returns to the pool if the call fails before a handle takes it.
class SlotLayout {
 public:
  SlotLayout(StagedMpiCommunicator& c, std::initializer_list<size_t> sizes) : owner_(c) {
    size_t total = 0;
    for (size_t s : sizes) {
      offsets_.push_back(total);
      total += align_up(s, kAlign);
    }
    base_ = static_cast<char*>(c.acquire_slot(total, &slot_));
  }
  ~SlotLayout() {
    if (!owned_) return;
    try {
      owner_.release_slot(slot_, owner_.compute_stream());
    } catch (...) {
    }
  }
  SlotLayout(const SlotLayout&) = delete;
  SlotLayout& operator=(const SlotLayout&) = delete;
  void* region(size_t i) const { return base_ + offsets_[i]; }
  // Hands the slot to a handle, which releases it.
  size_t take() {
    owned_ = false;
    return slot_;
  }

 private:
  StagedMpiCommunicator& owner_;
  char* base_ = nullptr;
  size_t slot_ = 0;
  bool owned_ = true;
  std::vector<size_t> offsets_;
};

void copy_to_host_and_sync(void* host, const Tensor& dev, cudaStream_t s) {
  ZT_CUDA_CHECK(cudaMemcpyAsync(host, dev.data, dev.bytes(), cudaMemcpyDeviceToHost, s));
  watched_stream_sync(s, "a staged collective's copy to the host");
}

bool on_host(const Tensor& a, const Tensor& b) {
  ZT_CHECK(a.device == b.device, "StagedMpiCommunicator: input and output on different devices");
  return a.device == DeviceKind::cpu;
}

}  // namespace

StagedMpiCommunicator::StagedMpiCommunicator(MpiCommunicator& group, cudaStream_t compute, Device* staging_memory)
    : group_(group), staging_memory_(staging_memory) {
  ZT_CHECK(staging_memory == nullptr || staging_memory->kind() == DeviceKind::cpu,
           "staging memory must be host memory (a PinnedHostDevice), not ", staging_memory->name());
  compute_ = compute;
}

void* StagedMpiCommunicator::allocate_pinned(size_t bytes) {
  if (staging_memory_ != nullptr) return staging_memory_->allocate(bytes, MemTag::comm);
  void* p = nullptr;
  ZT_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
  return p;
}

void StagedMpiCommunicator::free_pinned(void* p, size_t bytes) noexcept {
  if (staging_memory_ != nullptr) {
    staging_memory_->deallocate(p, bytes, MemTag::comm);
  } else {
    cudaFreeHost(p);
  }
}

StagedMpiCommunicator::~StagedMpiCommunicator() {
  for (Slot& s : slots_) {
    // A busy slot belongs to a handle that outlived us; leaking it is safer
    // than freeing memory under a live MPI call.
    if (s.busy || s.host == nullptr) continue;
    cudaEventSynchronize(s.copied_back.get());
    free_pinned(s.host, s.bytes);
  }
}

size_t StagedMpiCommunicator::staging_bytes() const {
  size_t n = 0;
  for (const Slot& s : slots_) n += s.bytes;
  return n;
}

void* StagedMpiCommunicator::acquire_slot(size_t bytes, size_t* slot) {
  bytes = align_up(bytes == 0 ? 1 : bytes, kSlotGranule);
  size_t best = slots_.size(), largest_free = slots_.size();
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].busy) continue;
    if (slots_[i].bytes >= bytes && (best == slots_.size() || slots_[i].bytes < slots_[best].bytes)) best = i;
    if (largest_free == slots_.size() || slots_[i].bytes > slots_[largest_free].bytes) largest_free = i;
  }
  if (best == slots_.size()) {
    // Grow the largest free slot, or add one when every slot is in flight.
    if (largest_free == slots_.size()) {
      slots_.emplace_back();
      largest_free = slots_.size() - 1;
    }
    Slot& s = slots_[largest_free];
    if (s.host != nullptr) {
      watched_event_sync(s.copied_back.get(), "a staging slot");
      free_pinned(s.host, s.bytes);
      s.host = nullptr;
      s.bytes = 0;
    }
    s.host = allocate_pinned(bytes);
    s.bytes = bytes;
    best = largest_free;
  }
  Slot& s = slots_[best];
  // The slot's last result may still be on its way to the device.
  watched_event_sync(s.copied_back.get(), "a staging slot");
  s.busy = true;
  *slot = best;
  return s.host;
}

void StagedMpiCommunicator::release_slot(size_t slot, cudaStream_t stream) {
  Slot& s = slots_.at(slot);
  s.busy = false;
  ZT_CUDA_CHECK(cudaEventRecord(s.copied_back.get(), stream));
}

void StagedMpiCommunicator::synchronize() {
  for (Slot& s : slots_) watched_event_sync(s.copied_back.get(), "a staging slot");
}

CommRequest StagedMpiCommunicator::all_reduce(Tensor buf, ReduceOp op) {
  count(CommOp::all_reduce, buf.bytes());
  if (buf.device == DeviceKind::cpu) return group_.all_reduce(buf, op);
  const size_t n = static_cast<size_t>(buf.numel());
  const bool widen = is_half(buf.dtype);
  SlotLayout slot(*this, {buf.bytes(), widen ? n * 4 : 0});
  copy_to_host_and_sync(slot.region(0), buf, compute_);
  CopyBack back{buf.data, slot.region(0), buf.bytes()};
  Tensor staged(slot.region(0), buf.dtype, Shape{buf.numel()});
  if (widen) {
    convert(slot.region(0), buf.dtype, slot.region(1), DType::f32, n);
    staged = Tensor(slot.region(1), DType::f32, Shape{buf.numel()});
    back.wide = static_cast<const float*>(slot.region(1));
    back.dtype = buf.dtype;
    back.n = n;
  }
  const double issued = now_s();
  CommRequest r = group_.all_reduce(staged, op);
  return std::make_unique<StagedHandle>(this, slot.take(), std::move(r), back, compute_, CommOp::all_reduce,
                                        issued);
}

CommRequest StagedMpiCommunicator::reduce_scatter(Tensor in, Tensor out, ReduceOp op) {
  ZT_CHECK(in.dtype == out.dtype && in.numel() == out.numel() * size(), "reduce_scatter: in has ", in.numel(),
           " elements, out ", out.numel(), ", group size ", size());
  count(CommOp::reduce_scatter, in.bytes());
  if (on_host(in, out)) return group_.reduce_scatter(in, out, op);
  const bool widen = is_half(in.dtype);
  const size_t n_in = static_cast<size_t>(in.numel()), n_out = static_cast<size_t>(out.numel());
  SlotLayout slot(*this, {in.bytes(), out.bytes(), widen ? n_in * 4 : 0, widen ? n_out * 4 : 0});
  copy_to_host_and_sync(slot.region(0), in, compute_);
  CopyBack back{out.data, slot.region(1), out.bytes()};
  Tensor staged_in(slot.region(0), in.dtype, Shape{in.numel()});
  Tensor staged_out(slot.region(1), out.dtype, Shape{out.numel()});
  if (widen) {
    convert(slot.region(0), in.dtype, slot.region(2), DType::f32, n_in);
    staged_in = Tensor(slot.region(2), DType::f32, Shape{in.numel()});
    staged_out = Tensor(slot.region(3), DType::f32, Shape{out.numel()});
    back.wide = static_cast<const float*>(slot.region(3));
    back.dtype = out.dtype;
    back.n = n_out;
  }
  const double issued = now_s();
  CommRequest r = group_.reduce_scatter(staged_in, staged_out, op);
  return std::make_unique<StagedHandle>(this, slot.take(), std::move(r), back, compute_, CommOp::reduce_scatter,
                                        issued);
}

CommRequest StagedMpiCommunicator::all_gather(Tensor in, Tensor out) {
  ZT_CHECK(in.dtype == out.dtype && out.numel() == in.numel() * size(), "all_gather: in has ", in.numel(),
           " elements, out ", out.numel(), ", group size ", size());
  count(CommOp::all_gather, out.bytes());
  if (on_host(in, out)) return group_.all_gather(in, out);
  SlotLayout slot(*this, {in.bytes(), out.bytes()});
  copy_to_host_and_sync(slot.region(0), in, compute_);
  const double issued = now_s();
  CommRequest r = group_.all_gather(Tensor(slot.region(0), in.dtype, Shape{in.numel()}),
                                    Tensor(slot.region(1), out.dtype, Shape{out.numel()}));
  return std::make_unique<StagedHandle>(this, slot.take(), std::move(r), CopyBack{out.data, slot.region(1), out.bytes()},
                                        compute_, CommOp::all_gather,
                                        issued);
}

CommRequest StagedMpiCommunicator::broadcast(Tensor buf, int root) {
  count(CommOp::broadcast, buf.bytes());
  if (buf.device == DeviceKind::cpu) return group_.broadcast(buf, root);
  SlotLayout slot(*this, {buf.bytes()});
  const bool is_root = rank() == root;
  if (is_root) copy_to_host_and_sync(slot.region(0), buf, compute_);
  const double issued = now_s();
  CommRequest r = group_.broadcast(Tensor(slot.region(0), buf.dtype, Shape{buf.numel()}), root);
  // The root's device buffer already holds the data.
  CopyBack back = is_root ? CopyBack{} : CopyBack{buf.data, slot.region(0), buf.bytes()};
  return std::make_unique<StagedHandle>(this, slot.take(), std::move(r), back, compute_, CommOp::broadcast,
                                        issued);
}

CommRequest StagedMpiCommunicator::send(Tensor buf, int peer, int tag) {
  count(CommOp::send, buf.bytes());
  if (buf.device == DeviceKind::cpu) return group_.send(buf, peer, tag);
  SlotLayout slot(*this, {buf.bytes()});
  copy_to_host_and_sync(slot.region(0), buf, compute_);
  const double issued = now_s();
  CommRequest r = group_.send(Tensor(slot.region(0), buf.dtype, Shape{buf.numel()}), peer, tag);
  return std::make_unique<StagedHandle>(this, slot.take(), std::move(r), CopyBack{}, compute_, CommOp::send,
                                        issued);
}

CommRequest StagedMpiCommunicator::recv(Tensor buf, int peer, int tag) {
  count(CommOp::recv, buf.bytes());
  if (buf.device == DeviceKind::cpu) return group_.recv(buf, peer, tag);
  SlotLayout slot(*this, {buf.bytes()});
  const double issued = now_s();
  CommRequest r = group_.recv(Tensor(slot.region(0), buf.dtype, Shape{buf.numel()}), peer, tag);
  return std::make_unique<StagedHandle>(this, slot.take(), std::move(r), CopyBack{buf.data, slot.region(0), buf.bytes()},
                                        compute_, CommOp::recv,
                                        issued);
}

void StagedMpiCommunicator::barrier() {
  count(CommOp::barrier, 0);
  group_.barrier();
}

}  // namespace zt
