// The parameter shards of ZeRO-Infinity's offload_param "nvme" in a swap
// file ([Note: parameter offload to NVMe] in param_swap.hpp).
#include "core/clock.hpp"
#include "zero/param_swap.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <set>

#include "core/error.hpp"
#include "core/log.hpp"

namespace zt {
namespace {

constexpr const char* kKey = "zero_optimization.offload_param";

// The live swaps of this process, for ParamSwap::remove_files_now().
std::mutex g_live_mu;
std::set<const SwapFile*> g_live_files;

}  // namespace

ParamSwap::ParamSwap(const ParamSwapOptions& o, Device& dev, TransferQueue& copies, DType dtype,
                     const std::vector<int64_t>& shard_elems, const std::vector<std::string>& names)
    : dtype_(dtype), copies_(copies), names_(names), key_(std::string(kKey) + ".nvme_path") {
  ZT_CHECK(shard_elems.size() == names.size(), "parameter swap: ", shard_elems.size(), " shards, ", names.size(),
           " names");
  if (o.buffer_count < 1)
    ZT_USER_ERROR(kKey, ".buffer_count ", o.buffer_count,
                  ": device \"nvme\" reads each unit's parameters into one of buffer_count pinned buffers; give at "
                  "least 1");
  require_backend_usable(o.backend);
  {
    SwapDirOpening one_at_a_time(o.nvme_path);
    dir_ = std::make_unique<SwapDir>(o.nvme_path, key_, o.run_id + "-param", o.rank);
  }
  const size_t a = dir_->alignment();
  const size_t es = dtype_size(dtype);
  // The first units (in unit order) that fit in max_in_cpu stay in host
  // memory; the rest get their regions of the file.
  units_.resize(shard_elems.size());
  int64_t largest = 0, file_units = 0, file_elems = 0;
  bool filling = true;
  for (size_t u = 0; u < shard_elems.size(); ++u) {
    UnitSlot& s = units_[u];
    s.elems = shard_elems[u];
    if (s.elems < 0) continue;
    s.bytes = s.elems * static_cast<int64_t>(es);
    if (filling && resident_elems_ + s.elems <= o.max_in_cpu) {
      s.resident = true;
      s.offset = resident_elems_;
      resident_elems_ += s.elems;
      continue;
    }
    filling = false;
    if (s.elems > o.buffer_size)
      ZT_USER_ERROR(kKey, ".buffer_size ", o.buffer_size, " is smaller than the shard of unit ", u, " ('",
                    names[u], "'): ", s.elems, " elements; device \"nvme\" reads a unit's shard into one buffer, "
                    "give at least that");
    s.region = align_up(s.bytes, a);
    s.offset = file_bytes_;
    file_bytes_ += s.region;
    largest = std::max(largest, s.elems);
    ++file_units;
    file_elems += s.elems;
  }
  if (resident_elems_ > 0) {
    resident_ = Buffer(dev.host_memory(o.pin_memory), dtype, Shape{resident_elems_}, MemTag::offload);
    dev.host_memory(o.pin_memory).memset_zero(resident_.data(), resident_.bytes());
  }
  if (file_bytes_ > 0) {
    dir_->check_free_space(file_bytes_, "the parameters");
    file_ = &dir_->file("params", file_bytes_);
    aio_ = make_aio_engine(o.aio, o.backend, *dir_);
    const int64_t buffer_bytes = align_up(largest * static_cast<int64_t>(es), a);
    bufs_.resize(static_cast<size_t>(o.buffer_count));
    for (Buf& b : bufs_) {
      b.raw = Buffer(dev.host_memory(true), static_cast<size_t>(buffer_bytes) + a, MemTag::offload);
      const auto p = reinterpret_cast<uintptr_t>(b.raw.data());
      b.data = reinterpret_cast<char*>((p + a - 1) / a * a);
    }
    std::lock_guard<std::mutex> lock(g_live_mu);
    g_live_files.insert(file_);
    log_info("NVMe parameters: ", file_elems, " owned elements of ", file_units, " units (rank 0) in ",
             file_->path(), " (", file_bytes_, " bytes, ", dir_->direct() ? "direct" : "buffered",
             " I/O, alignment ", a, ", aio ", aio_backend_name(aio_->backend()), "), ", resident_elems_,
             " resident in host memory (max_in_cpu ", o.max_in_cpu, "); ", o.buffer_count,
             " pinned read buffers of ", buffer_bytes, " bytes");
  } else {
    log_info("NVMe parameters: all ", resident_elems_, " owned elements resident in host memory (", kKey,
             ".max_in_cpu ", o.max_in_cpu, "): nothing on ", o.nvme_path);
  }
}

ParamSwap::~ParamSwap() {
  std::lock_guard<std::mutex> lock(g_live_mu);
  g_live_files.erase(file_);
}

void ParamSwap::remove_files_now() noexcept {
  std::lock_guard<std::mutex> lock(g_live_mu);
  for (const SwapFile* f : g_live_files)
    if (f != nullptr) ::unlink(f->path().c_str());
}

void* ParamSwap::resident_shard(int u) const {
  const UnitSlot& s = units_[static_cast<size_t>(u)];
  ZT_CHECK(s.resident, "unit ", u, " is not resident in host memory");
  return const_cast<char*>(resident_.as<char>()) + static_cast<size_t>(s.offset) * dtype_size(dtype_);
}

void ParamSwap::wait_read(Buf& b) {
  const double t0 = now_s();
  aio_->wait(b.io);
  stats_.read_wait_s += now_s() - t0;
  b.state = State::loaded;
}

void ParamSwap::wait_write(Buf& b) {
  if (!b.write_pending) return;
  const double t0 = now_s();
  aio_->wait(b.io);
  stats_.write_wait_s += now_s() - t0;
  b.write_pending = false;
}

void ParamSwap::release(Buf& b) {
  ZT_CHECK(!b.write_pending && b.state != State::reading, "parameter swap: a buffer released with I/O in flight");
  if (b.unit >= 0) units_[static_cast<size_t>(b.unit)].buffer = -1;
  b.unit = -1;
  b.state = State::free;
  b.filled = 0;
}

// A free buffer, its last upload done. Without waiting: a free one, else
// the one least recently used of those kept with no transfer in flight (a
// unit used, or written to the file). With may_wait, one is made free: the
// oldest write is waited for, else the read issued furthest ahead dropped.
int ParamSwap::take_buffer(bool may_wait) {
  auto ready = [&](int i) {
    copies_.wait(bufs_[static_cast<size_t>(i)].upload);
    bufs_[static_cast<size_t>(i)].upload = TransferTicket{};
    return i;
  };
  for (size_t i = 0; i < bufs_.size(); ++i)
    if (bufs_[i].state == State::free) return ready(static_cast<int>(i));
  int kept = -1;
  for (size_t i = 0; i < bufs_.size(); ++i) {
    const Buf& b = bufs_[i];
    const bool idle = b.state == State::kept && (!b.write_pending || aio_->done(b.io));
    if (idle && (kept < 0 || b.seq < bufs_[static_cast<size_t>(kept)].seq)) kept = static_cast<int>(i);
  }
  if (kept >= 0) {
    Buf& b = bufs_[static_cast<size_t>(kept)];
    wait_write(b);  // at once; throws the write's error
    release(b);
    return ready(kept);
  }
  if (!may_wait) return -1;
  int write = -1, ahead = -1;
  for (size_t i = 0; i < bufs_.size(); ++i) {
    const Buf& b = bufs_[i];
    if (b.state == State::kept && b.write_pending && (write < 0 || b.seq < bufs_[static_cast<size_t>(write)].seq))
      write = static_cast<int>(i);
    if ((b.state == State::reading || b.state == State::loaded) &&
        (ahead < 0 || b.seq > bufs_[static_cast<size_t>(ahead)].seq))
      ahead = static_cast<int>(i);
  }
  const int i = write >= 0 ? write : ahead;
  ZT_CHECK(i >= 0, "parameter swap: every one of the ", bufs_.size(),
           " buffers holds a unit's parameters being put (offload_param.buffer_count)");
  Buf& b = bufs_[static_cast<size_t>(i)];
  if (b.state == State::reading) wait_read(b);
  wait_write(b);
  release(b);
  return ready(i);
}

void ParamSwap::issue_read(int u, int i) {
  UnitSlot& s = units_[static_cast<size_t>(u)];
  ZT_CHECK(s.written, "parameter swap: unit ", u, " ('", names_[static_cast<size_t>(u)],
           "') read before its parameters were written");
  Buf& b = bufs_[static_cast<size_t>(i)];
  b.io = aio_->submit_read(*file_, b.data, static_cast<size_t>(s.region), s.offset);
  b.state = State::reading;
  b.unit = u;
  b.seq = ++seq_;
  s.buffer = i;
  stats_.read_bytes += static_cast<double>(s.region);
  ++stats_.reads;
}

bool ParamSwap::prefetch(int u) {
  const UnitSlot& s = units_[static_cast<size_t>(u)];
  ZT_CHECK(s.elems >= 0, "parameter swap: unit ", u, " is not held by this rank");
  if (s.resident) return true;
  if (s.buffer >= 0) {  // in flight, loaded or kept: held for its use, not taken for another read
    Buf& b = bufs_[static_cast<size_t>(s.buffer)];
    if (b.state == State::kept) b.state = State::loaded;
    return true;
  }
  const int i = take_buffer(false);
  if (i < 0) return false;
  issue_read(u, i);
  return true;
}

const void* ParamSwap::shard(int u) {
  const UnitSlot& s = units_[static_cast<size_t>(u)];
  ZT_CHECK(s.elems >= 0, "parameter swap: unit ", u, " is not held by this rank");
  if (s.resident) return resident_shard(u);
  if (s.buffer >= 0 && bufs_[static_cast<size_t>(s.buffer)].state == State::staging) {
    const Buf& b = bufs_[static_cast<size_t>(s.buffer)];
    ZT_THROW("parameter swap: unit ", u, " ('", names_[static_cast<size_t>(u)], "') read after ", b.filled,
             " of its ", s.bytes, " bytes of new parameters were put");
  }
  if (s.buffer < 0) issue_read(u, take_buffer(true));
  Buf& b = bufs_[static_cast<size_t>(s.buffer)];
  if (b.state == State::reading) wait_read(b);
  // Kept from an earlier use, or the unit's new parameters with their write
  // still in flight: the upload reads the buffer beside the write.
  if (b.state == State::kept) b.state = State::loaded;
  ZT_CHECK(b.state == State::loaded && b.unit == u, "parameter swap: unit ", u, " not loaded");
  return b.data;
}

void ParamSwap::used(int u, TransferTicket upload) {
  UnitSlot& s = units_[static_cast<size_t>(u)];
  if (s.resident) return;
  ZT_CHECK(s.buffer >= 0 && bufs_[static_cast<size_t>(s.buffer)].state == State::loaded, "parameter swap: unit ",
           u, " used without being loaded");
  // Kept: the next use takes it again unless the buffer is taken first.
  Buf& b = bufs_[static_cast<size_t>(s.buffer)];
  b.state = State::kept;
  b.seq = ++seq_;
  b.upload = upload;
}

void ParamSwap::put(const OwnedShard& sh, size_t byte_offset, const void* src, size_t bytes) {
  const int u = sh.unit;
  UnitSlot& s = units_[static_cast<size_t>(u)];
  ZT_CHECK(s.elems >= 0 && static_cast<int64_t>(byte_offset + bytes) <= s.bytes, "parameter swap: bytes [",
           byte_offset, ", ", byte_offset + bytes, ") of unit ", u, "'s shard of ", s.bytes, " bytes");
  if (s.resident) {
    host_memcpy(static_cast<char*>(resident_shard(u)) + byte_offset, src, bytes);
    return;
  }
  if (s.buffer >= 0) {
    Buf& b = bufs_[static_cast<size_t>(s.buffer)];
    if (b.state == State::reading) wait_read(b);  // the old parameters
    wait_write(b);                                 // an earlier put's
    if (b.state == State::loaded || b.state == State::kept) {  // the old parameters: becomes the new ones' buffer
      copies_.wait(b.upload);  // an upload from it may still be in flight
      b.upload = TransferTicket{};
      b.state = State::staging;
      b.filled = 0;
      b.seq = ++seq_;
    }
  } else {
    const int i = take_buffer(true);
    Buf& b = bufs_[static_cast<size_t>(i)];
    b.state = State::staging;
    b.unit = u;
    b.filled = 0;
    b.seq = ++seq_;
    s.buffer = i;
  }
  Buf& b = bufs_[static_cast<size_t>(s.buffer)];
  host_memcpy(b.data + byte_offset, src, bytes);
  b.filled += static_cast<int64_t>(bytes);
  ZT_CHECK(b.filled <= s.bytes, "parameter swap: unit ", u, " put ", b.filled, " bytes of a ", s.bytes,
           "-byte shard");
  if (b.filled < s.bytes) return;
  // Complete: the region, its padding zero, goes to the file while the
  // optimizer works on the next shards; the buffer keeps the unit.
  std::memset(b.data + s.bytes, 0, static_cast<size_t>(s.region - s.bytes));
  b.io = aio_->submit_write(*file_, b.data, static_cast<size_t>(s.region), s.offset);
  b.write_pending = true;
  b.state = State::kept;
  s.written = true;
  stats_.write_bytes += static_cast<double>(s.region);
  ++stats_.writes;
}

ParamSwapStats ParamSwap::take_stats() {
  ParamSwapStats s = stats_;
  stats_ = ParamSwapStats{};
  return s;
}

}  // namespace zt
