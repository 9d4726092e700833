#include "zero/grad_landing.hpp"

#include <utility>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "modules/cpu_kernels.hpp"

namespace zt {

GradLanding::GradLanding(TransferQueue& copies, Device& pinned, int max_in_flight)
    : copies_(copies), pinned_(pinned), max_in_flight_(max_in_flight) {
  ZT_CHECK(max_in_flight >= 1, "gradient landing with ", max_in_flight, " pieces in flight");
  slots_.resize(static_cast<size_t>(max_in_flight));
  slot_busy_.assign(slots_.size(), false);
}

GradLanding::~GradLanding() {
  // Never free a staging buffer a copy still reads, nor a slot an add reads.
  try {
    copies_.wait_all();
  } catch (...) {
  }
  adder_.wait();
}

void GradLanding::begin_step() {
  ZT_CHECK(queue_.empty(), "a new step while gradient pieces are still landing");
  adder_.wait();
  seen_.clear();
  first_landed_ = 0;
  times_ = GradLandingTimes{};
  add_s_ = 0;
}

int GradLanding::take_slot() {
  std::unique_lock<std::mutex> lk(mu_);
  auto free_slot = [&] {
    for (size_t i = 0; i < slot_busy_.size(); ++i)
      if (!slot_busy_[i]) return static_cast<int>(i);
    return -1;
  };
  if (free_slot() < 0) {  // every slot waits for its add
    const double w = now_s();
    cv_.wait(lk, [&] { return free_slot() >= 0; });
    times_.wait_s += now_s() - w;
  }
  const int slot = free_slot();
  slot_busy_[static_cast<size_t>(slot)] = true;
  return slot;
}

void GradLanding::land(void* host_dst, Buffer staging, int64_t count, double* sq_into, int sq_parts) {
  while (static_cast<int>(queue_.size()) >= max_in_flight_) retire_oldest();
  const DType dtype = staging.tensor().dtype;
  const size_t bytes = static_cast<size_t>(count) * dtype_size(dtype);
  InFlight f;
  f.staging = std::move(staging);
  f.dst = host_dst;
  f.count = count;
  const bool first = seen_.insert(host_dst).second;
  // [Note: bf16 gradients on the host]: rounded values are never added.
  ZT_CHECK(first || dtype == DType::f32, "a ", dtype_name(dtype),
           " gradient piece landed a second time in a step (offload.grad_dtype needs each element to land once)");
  if (first) {
    ZT_CHECK(sq_into == nullptr, "a gradient piece's first landing asked for its sum of squares on the host");
    f.ticket = copies_.to_host(host_dst, f.staging.data(), bytes);
    first_landed_ += count;
  } else {
    const int slot = take_slot();
    Buffer& b = slots_[static_cast<size_t>(slot)];  // no add reads it now
    if (b.empty() || b.tensor().numel() < count) b = Buffer(pinned_, DType::f32, Shape{count}, MemTag::offload);
    f.slot = slot;
    f.sq_into = sq_into;
    f.sq_parts = sq_parts;
    f.ticket = copies_.to_host(b.data(), f.staging.data(), bytes);
  }
  times_.bytes += static_cast<double>(bytes);
  queue_.push_back(std::move(f));
}

void GradLanding::retire_oldest() {
  InFlight& f = queue_.front();
  const double w = now_s();
  copies_.wait(f.ticket);
  times_.wait_s += now_s() - w;
  if (f.slot >= 0) {
    // The add runs on the landing's own thread, in landing order (so an
    // element's pieces add up in the device path's order), while this one
    // goes on queueing the backward; the slot is free once it ran.
    float* dst = static_cast<float*>(f.dst);
    const float* src = slots_[static_cast<size_t>(f.slot)].as<float>();
    const int64_t n = f.count;
    const size_t slot = static_cast<size_t>(f.slot);
    double* sq = f.sq_into;
    const int parts = f.sq_parts;
    adder_.start([this, dst, src, n, slot, sq, parts] {
      const double t = now_s();
      // What the device path computes (Kernels::add of the reduced piece
      // into the shard): one float add per element; with `sq`, the sum of
      // squares of the result in the same pass.
      if (sq != nullptr) {
        *sq = add_sum_squares(dst, src, n, parts);
      } else {
#pragma omp parallel for simd schedule(static) if (n > (int64_t{1} << 16))
        for (int64_t i = 0; i < n; ++i) dst[i] = dst[i] + src[i];
      }
      std::lock_guard<std::mutex> lk(mu_);
      slot_busy_[slot] = false;
      add_s_ += now_s() - t;
      cv_.notify_all();
    });
  }
  queue_.pop_front();  // frees the staging buffer
}

void GradLanding::drain() {
  while (!queue_.empty()) retire_oldest();
  const double w = now_s();
  adder_.wait();
  times_.wait_s += now_s() - w;
  std::lock_guard<std::mutex> lk(mu_);
  times_.add_s = add_s_;
}

}  // namespace zt
