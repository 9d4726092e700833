#include "runtime/device.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "runtime/phase_clock.hpp"
#include "runtime/transfer.hpp"

namespace zt {
namespace {
constexpr size_t kHostPiece = size_t{16} << 20;
}  // namespace

void host_memset_zero(void* p, size_t bytes) {
  const int64_t pieces = static_cast<int64_t>((bytes + kHostPiece - 1) / kHostPiece);
#pragma omp parallel for schedule(static) if (pieces > 1)
  for (int64_t i = 0; i < pieces; ++i) {
    const size_t at = static_cast<size_t>(i) * kHostPiece;
    std::memset(static_cast<char*>(p) + at, 0, std::min(kHostPiece, bytes - at));
  }
}

void host_memcpy(void* dst, const void* src, size_t bytes) {
  const int64_t pieces = static_cast<int64_t>((bytes + kHostPiece - 1) / kHostPiece);
#pragma omp parallel for schedule(static) if (pieces > 1)
  for (int64_t i = 0; i < pieces; ++i) {
    const size_t at = static_cast<size_t>(i) * kHostPiece;
    std::memcpy(static_cast<char*>(dst) + at, static_cast<const char*>(src) + at, std::min(kHostPiece, bytes - at));
  }
}

}  // namespace zt

namespace zt {

const char* mem_tag_name(MemTag tag) {
  switch (tag) {
    case MemTag::params: return "params";
    case MemTag::grads: return "grads";
    case MemTag::optim: return "optim";
    case MemTag::activations: return "activations";
    case MemTag::comm: return "comm";
    case MemTag::workspace: return "workspace";
    case MemTag::offload: return "offload";
  }
  return "?";
}

std::string human_bytes(size_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double x = static_cast<double>(bytes);
  int u = 0;
  while (x >= 1024.0 && u < 4) {
    x /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%zu bytes", bytes);
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", x, units[u]);
  return buf;
}

void Device::set_memory_cap(size_t bytes, std::string note) {
  cap_ = bytes;
  cap_note_ = std::move(note);
}

bool Device::fits_memory_cap(size_t, size_t) { return true; }

namespace {

// "21.30 GiB (22870690201 bytes)": the exact count where the unit rounds.
std::string human_and_exact_bytes(size_t bytes) {
  return bytes < 1024 ? human_bytes(bytes) : human_bytes(bytes) + " (" + std::to_string(bytes) + " bytes)";
}

}  // namespace

void Device::throw_over_cap(size_t bytes, MemTag tag) const {
  std::string held;
  for (int t = 0; t < kNumMemTags; ++t)
    if (stats_.current[t] > 0)
      held += std::string(held.empty() ? "" : ", ") + mem_tag_name(static_cast<MemTag>(t)) + " " +
              human_bytes(stats_.current[t]);
  if (held.empty()) held = "nothing";
  const std::string detail = memory_cap_detail();
  ZT_THROW("out of memory on ", name(), ": allocating ", human_and_exact_bytes(bytes), " for '", mem_tag_name(tag),
           "' would pass the memory cap of ", human_and_exact_bytes(cap_), "; held now: ", held, " (total ",
           human_bytes(stats_.current_total), ")", detail.empty() ? "" : "; " + detail,
           cap_note_.empty() ? "" : "; " + cap_note_);
}

void* Device::allocate(size_t bytes, MemTag tag) {
  if (bytes == 0) bytes = 1;
  // Held bytes first (written so that no sum overflows), then what the device
  // takes from its memory ([Note: memory cap]).
  if (cap_ > 0 && (bytes > cap_ || stats_.current_total > cap_ - bytes || !fits_memory_cap(bytes, cap_)))
    throw_over_cap(bytes, tag);
  void* p = raw_allocate(bytes);
  if (p == nullptr) {
    ZT_THROW("out of memory on ", name(), ": allocating ", bytes, " bytes for '", mem_tag_name(tag),
             "' with ", stats_.current_total, " bytes in use");
  }
  const int t = static_cast<int>(tag);
  ++stats_.allocations[t];
  stats_.current[t] += bytes;
  stats_.current_total += bytes;
  if (peaks_) {
    ++peaks_->live[static_cast<size_t>(t)][bytes];
    peaks_->counted.insert(p);
  }
  if (stats_.current[t] > stats_.peak[t]) {
    stats_.peak[t] = stats_.current[t];
    if (peaks_) {
      peaks_->at_peak[static_cast<size_t>(t)] = peaks_->live[static_cast<size_t>(t)];
      peaks_->beside_peak[static_cast<size_t>(t)] = stats_.current;
    }
  }
  if (stats_.current_total > stats_.peak_total) {
    stats_.peak_total = stats_.current_total;
    if (peaks_) peaks_->at_total_peak = peaks_->live;
  }
  return p;
}

void Device::deallocate(void* p, size_t bytes, MemTag tag) noexcept {
  if (p == nullptr) return;
  if (bytes == 0) bytes = 1;
  raw_deallocate(p, bytes);
  const int t = static_cast<int>(tag);
  stats_.current[t] -= bytes;
  stats_.current_total -= bytes;
  if (peaks_ && peaks_->counted.erase(p) > 0) {
    PeakDetail::Sizes& live = peaks_->live[static_cast<size_t>(t)];
    auto it = live.find(bytes);
    if (it != live.end() && --it->second == 0) live.erase(it);
  }
}

void Device::record_peak_detail() {
  if (!peaks_) peaks_ = std::make_unique<PeakDetail>();
  for (std::unique_ptr<Device>& h : host_)
    if (h) h->record_peak_detail();
}

std::string Device::describe_peak_detail() const {
  if (!peaks_) return "";
  auto sizes = [](const PeakDetail::Sizes& m) {
    // Largest first; buffers under 1 MiB summed into one entry.
    std::string out;
    size_t small = 0;
    int64_t small_n = 0;
    for (auto it = m.rbegin(); it != m.rend(); ++it) {
      if (it->first < (size_t{1} << 20)) {
        small += it->first * static_cast<size_t>(it->second);
        small_n += it->second;
        continue;
      }
      out += (out.empty() ? "" : ", ") + std::to_string(it->second) + " x " + human_bytes(it->first);
    }
    if (small_n > 0) out += (out.empty() ? "" : ", ") + std::to_string(small_n) + " under 1 MiB (" + human_bytes(small) + ")";
    return out.empty() ? std::string("nothing") : out;
  };
  std::string out;
  for (int t = 0; t < kNumMemTags; ++t) {
    if (stats_.peak[static_cast<size_t>(t)] == 0) continue;
    out += "  " + std::string(mem_tag_name(static_cast<MemTag>(t))) + " peak " +
           human_bytes(stats_.peak[static_cast<size_t>(t)]) + ": " + sizes(peaks_->at_peak[static_cast<size_t>(t)]) + "\n";
    // What the other tags held then: which peaks coincide.
    const std::array<size_t, kNumMemTags>& beside = peaks_->beside_peak[static_cast<size_t>(t)];
    size_t sum = 0;
    std::string others;
    for (int o = 0; o < kNumMemTags; ++o) {
      sum += beside[static_cast<size_t>(o)];
      if (o == t || stats_.peak[static_cast<size_t>(o)] == 0) continue;
      others += (others.empty() ? "" : ", ") + std::string(mem_tag_name(static_cast<MemTag>(o))) + " " +
                human_bytes(beside[static_cast<size_t>(o)]);
    }
    out += "    then " + human_bytes(sum) + " in all" + (others.empty() ? "" : ": " + others) + "\n";
  }
  out += "  at the total's peak (" + human_bytes(stats_.peak_total) + "):\n";
  for (int t = 0; t < kNumMemTags; ++t) {
    const PeakDetail::Sizes& m = peaks_->at_total_peak[static_cast<size_t>(t)];
    if (m.empty()) continue;
    out += "    " + std::string(mem_tag_name(static_cast<MemTag>(t))) + ": " + sizes(m) + "\n";
  }
  return out;
}

void* CpuDevice::raw_allocate(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  return std::aligned_alloc(64, rounded);
}
void CpuDevice::raw_deallocate(void* p, size_t) noexcept { std::free(p); }
void CpuDevice::memset_zero(void* p, size_t bytes) { host_memset_zero(p, bytes); }
void CpuDevice::copy_to_host(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuDevice::copy_from_host(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }

std::unique_ptr<Device> make_cpu_device() { return std::make_unique<CpuDevice>(); }

namespace {

// Host memory for the slots, copies through the device's copy_from_host
// (immediate on the CPU).
class DirectStaging final : public UploadStaging {
 public:
  DirectStaging(Device& dev, size_t slot_bytes) : dev_(dev), slot_(slot_bytes) {}
  void* next() override { return slot_.data(); }
  void upload(void* dst, size_t offset, size_t bytes) override {
    ZT_CHECK(offset + bytes <= slot_.size(), "upload of ", bytes, " bytes at ", offset, " from a slot of ",
             slot_.size());
    dev_.copy_from_host(dst, slot_.data() + offset, bytes);
  }

 private:
  Device& dev_;
  std::vector<unsigned char> slot_;
};

}  // namespace

std::unique_ptr<UploadStaging> Device::make_upload_staging(size_t slot_bytes, int) {
  return std::make_unique<DirectStaging>(*this, slot_bytes);
}

Buffer::Buffer(Device& dev, size_t bytes, MemTag tag)
    : dev_(&dev), data_(dev.allocate(bytes, tag)), bytes_(bytes), tag_(tag), dtype_(DType::f32),
      shape_{static_cast<int64_t>(bytes / 4)} {}

Buffer::Buffer(Device& dev, DType dtype, Shape shape, MemTag tag)
    : Buffer(dev, static_cast<size_t>(shape.numel()) * dtype_size(dtype), tag) {
  dtype_ = dtype;
  shape_ = shape;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    dev_ = o.dev_;
    data_ = o.data_;
    bytes_ = o.bytes_;
    tag_ = o.tag_;
    dtype_ = o.dtype_;
    shape_ = o.shape_;
    o.dev_ = nullptr;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void Buffer::reset() noexcept {
  if (dev_ && data_) dev_->deallocate(data_, bytes_, tag_);
  data_ = nullptr;
  bytes_ = 0;
}

Tensor Buffer::view(DType dtype, Shape shape, size_t byte_offset) const {
  const size_t need = byte_offset + static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  ZT_CHECK(need <= bytes_, "view of ", need, " bytes exceeds buffer of ", bytes_);
  return Tensor(static_cast<char*>(data_) + byte_offset, dtype, shape, dev_ ? dev_->kind() : DeviceKind::cpu);
}

Tensor Arena::alloc(DType dtype, Shape shape) {
  ZT_CHECK(dev_ != nullptr, "arena used before construction");
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  while (true) {
    if (cur_ < chunks_.size()) {
      const size_t start = (used_ + 63) / 64 * 64;
      if (start + bytes <= chunks_[cur_].bytes()) {
        used_ = start + bytes;
        return chunks_[cur_].view(dtype, shape, start);
      }
      if (cur_ + 1 < chunks_.size() && bytes <= chunks_[cur_ + 1].bytes()) {
        ++cur_;
        used_ = 0;
        continue;
      }
      // The next chunk (if any) is too small: insert a fitting one after this.
      ++cur_;
      used_ = 0;
    }
    const size_t size = bytes > chunk_bytes_ ? bytes : chunk_bytes_;
    chunks_.insert(chunks_.begin() + static_cast<std::ptrdiff_t>(cur_), Buffer(*dev_, size, tag_));
  }
}

void Arena::release_to(Mark m) {
  cur_ = m.chunk;
  used_ = m.used;
}

size_t Arena::capacity() const {
  size_t n = 0;
  for (const Buffer& b : chunks_) n += b.bytes();
  return n;
}

namespace {

// Host memory on the CPU backend, accounted apart from the "device" (also
// host memory there): pinned and pageable are both plain allocations.
class HostMemory final : public Device {
 public:
  explicit HostMemory(bool pinned) : pinned_(pinned) {}
  DeviceKind kind() const override { return DeviceKind::cpu; }
  std::string name() const override { return pinned_ ? "host-pinned" : "host"; }
  void memset_zero(void* p, size_t bytes) override { host_memset_zero(p, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }

 protected:
  void* raw_allocate(size_t bytes) override { return std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096); }
  void raw_deallocate(void* p, size_t) noexcept override { std::free(p); }

 private:
  bool pinned_;
};

// [Note: offload transfers] without copy engines: every copy is done when
// queued, through the device's own copies.
class ImmediateTransfers final : public TransferQueue {
 public:
  explicit ImmediateTransfers(Device& dev) : dev_(dev) {}
  TransferTicket to_host(void* host_dst, const void* dev_src, size_t bytes, TransferTicket) override {
    dev_.copy_to_host(host_dst, dev_src, bytes);
    return TransferTicket{++issued_};
  }
  TransferTicket to_device(void* dev_dst, const void* host_src, size_t bytes, TransferTicket) override {
    dev_.copy_from_host(dev_dst, host_src, bytes);
    return TransferTicket{++issued_};
  }
  TransferTicket mark_compute() override { return TransferTicket{++issued_}; }
  void wait(TransferTicket) override {}
  void compute_waits(TransferTicket) override {}
  void wait_all() override {}

 private:
  Device& dev_;
  uint64_t issued_ = 0;
};

}  // namespace

std::unique_ptr<PhaseClock> Device::make_phase_clock() { return std::make_unique<HostPhaseClock>(); }
std::unique_ptr<TransferQueue> Device::make_transfer_queue() { return std::make_unique<ImmediateTransfers>(*this); }

std::unique_ptr<Device> Device::make_pinned_host_memory() { return std::make_unique<HostMemory>(true); }

Device& Device::host_memory(bool pinned) {
  std::unique_ptr<Device>& d = host_[pinned ? 1 : 0];
  if (!d) {
    d = pinned ? make_pinned_host_memory() : std::make_unique<HostMemory>(false);
    if (peaks_) d->record_peak_detail();
  }
  return *d;
}

}  // namespace zt
