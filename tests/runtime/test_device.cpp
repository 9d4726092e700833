// CpuDevice: tagged allocation with per-tag and total peaks (MemoryStats),
// the out-of-memory error, the memory cap, its copies; and Buffer: one
// allocation owned by exactly one object, whatever is moved where.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "runtime/device.hpp"
#include "runtime/phase_clock.hpp"

namespace zt {
namespace {

constexpr MemTag kTags[] = {MemTag::params,    MemTag::grads,     MemTag::optim,  MemTag::activations,
                            MemTag::comm,      MemTag::workspace, MemTag::offload};

size_t current(const Device& d, MemTag t) { return d.stats().current[static_cast<int>(t)]; }
size_t peak(const Device& d, MemTag t) { return d.stats().peak[static_cast<int>(t)]; }

TEST(MemTag, EveryTagHasItsOwnName) {
  // The names appear in memory reports and metrics; kNumMemTags sizes the stats.
  std::set<std::string> names;
  for (MemTag t : kTags) names.insert(mem_tag_name(t));
  EXPECT_EQ(names.size(), std::size(kTags));
  EXPECT_EQ(static_cast<int>(std::size(kTags)), kNumMemTags);
  EXPECT_STREQ(mem_tag_name(MemTag::params), "params");
  EXPECT_STREQ(mem_tag_name(MemTag::offload), "offload");
}

TEST(CpuDevice, Identity) {
  const std::unique_ptr<Device> d = make_cpu_device();
  EXPECT_EQ(d->kind(), DeviceKind::cpu);
  EXPECT_EQ(d->name(), "cpu");
  d->synchronize();  // a no-op on the CPU
}

TEST(CpuDevice, CountsBytesPerTagAndKeepsPeaks) {
  CpuDevice d;
  for (MemTag t : kTags) EXPECT_EQ(current(d, t), 0u);
  void* p = d.allocate(1000, MemTag::params);
  void* g = d.allocate(3000, MemTag::grads);
  EXPECT_EQ(current(d, MemTag::params), 1000u);
  EXPECT_EQ(current(d, MemTag::grads), 3000u);
  EXPECT_EQ(d.stats().current_total, 4000u);
  EXPECT_EQ(d.stats().peak_total, 4000u);

  d.deallocate(g, 3000, MemTag::grads);
  void* o = d.allocate(500, MemTag::optim);
  void* g2 = d.allocate(1000, MemTag::grads);
  // Current falls on free; peaks stay at their highest, per tag and in total
  // (the total peak is the highest sum at one time, not a sum of tag peaks).
  EXPECT_EQ(current(d, MemTag::grads), 1000u);
  EXPECT_EQ(peak(d, MemTag::grads), 3000u);
  EXPECT_EQ(peak(d, MemTag::optim), 500u);
  EXPECT_EQ(d.stats().current_total, 2500u);
  EXPECT_EQ(d.stats().peak_total, 4000u);
  for (MemTag t : {MemTag::activations, MemTag::comm, MemTag::workspace, MemTag::offload})
    EXPECT_EQ(peak(d, t), 0u) << mem_tag_name(t);

  d.deallocate(p, 1000, MemTag::params);
  d.deallocate(o, 500, MemTag::optim);
  d.deallocate(g2, 1000, MemTag::grads);
  for (MemTag t : kTags) EXPECT_EQ(current(d, t), 0u) << mem_tag_name(t);
  EXPECT_EQ(d.stats().current_total, 0u);
  EXPECT_EQ(d.stats().peak_total, 4000u);
  EXPECT_EQ(peak(d, MemTag::params), 1000u);
}

TEST(CpuDevice, PeakDetailNamesTheBuffersAliveAtEachPeak) {
  CpuDevice d;
  EXPECT_EQ(d.describe_peak_detail(), "") << "nothing is recorded unless asked";
  const size_t MiB = size_t{1} << 20;
  void* before = d.allocate(4 * MiB, MemTag::comm);  // before the switch: left out
  d.record_peak_detail();
  void* a = d.allocate(4 * MiB, MemTag::comm);
  d.deallocate(before, 4 * MiB, MemTag::comm);  // takes `a`, of its size, off nothing
  void* b = d.allocate(4 * MiB, MemTag::comm);
  void* c = d.allocate(2 * MiB, MemTag::comm);  // comm's peak: 4, 4, 2 MiB
  void* w = d.allocate(8 * MiB, MemTag::workspace);  // the total's peak: those and 8 MiB
  d.deallocate(a, 4 * MiB, MemTag::comm);
  d.deallocate(w, 8 * MiB, MemTag::workspace);
  void* s1 = d.allocate(1000, MemTag::comm);
  void* s2 = d.allocate(24, MemTag::comm);
  void* w2 = d.allocate(3 * MiB, MemTag::workspace);  // under both peaks: changes neither
  const std::string t = d.describe_peak_detail();
  EXPECT_NE(t.find("  comm peak 10.00 MiB: 2 x 4.00 MiB, 1 x 2.00 MiB\n"), std::string::npos) << t;
  EXPECT_NE(t.find("  workspace peak 8.00 MiB: 1 x 8.00 MiB\n"), std::string::npos) << t;
  // What every other tag held at each tag's peak: whether the peaks coincide.
  EXPECT_NE(t.find("comm peak 10.00 MiB: 2 x 4.00 MiB, 1 x 2.00 MiB\n    then 10.00 MiB in all: workspace 0 bytes\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("workspace peak 8.00 MiB: 1 x 8.00 MiB\n    then 18.00 MiB in all: comm 10.00 MiB\n"), std::string::npos)
      << t;
  EXPECT_NE(t.find("at the total's peak (18.00 MiB):\n    comm: 2 x 4.00 MiB, 1 x 2.00 MiB\n    workspace: 1 x 8.00 MiB\n"),
            std::string::npos)
      << t;
  EXPECT_EQ(t.find("params"), std::string::npos) << "a tag never used is left out: " << t;
  // Buffers under 1 MiB are summed into one entry.
  void* big = d.allocate(10 * MiB, MemTag::comm);
  EXPECT_NE(d.describe_peak_detail().find("comm peak 16.00 MiB: 1 x 10.00 MiB, 1 x 4.00 MiB, 1 x 2.00 MiB, 2 under 1 "
                                          "MiB (1.00 KiB)\n"),
            std::string::npos)
      << d.describe_peak_detail();
  EXPECT_NE(d.describe_peak_detail().find("at the total's peak (19.00 MiB):\n    comm: 1 x 10.00 MiB"), std::string::npos)
      << d.describe_peak_detail();
  // Host memory made after the switch records too.
  Device& pinned = d.host_memory(true);
  void* h = pinned.allocate(2 * MiB, MemTag::offload);
  EXPECT_NE(pinned.describe_peak_detail().find("offload peak 2.00 MiB: 1 x 2.00 MiB"), std::string::npos);
  pinned.deallocate(h, 2 * MiB, MemTag::offload);
  for (auto [p, n, tag] : {std::tuple{b, 4 * MiB, MemTag::comm}, {c, 2 * MiB, MemTag::comm}, {s1, size_t{1000}, MemTag::comm},
                           {s2, size_t{24}, MemTag::comm}, {w2, 3 * MiB, MemTag::workspace}, {big, 10 * MiB, MemTag::comm}})
    d.deallocate(p, n, tag);
  EXPECT_EQ(d.stats().current_total, 0u);
}

TEST(CpuDevice, MemoryIsAlignedWritableAndZeroBytesCountAsOne) {
  CpuDevice d;
  for (size_t bytes : {size_t{1}, size_t{63}, size_t{64}, size_t{1000}, size_t{1} << 20}) {
    auto* p = static_cast<unsigned char*>(d.allocate(bytes, MemTag::workspace));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
    std::memset(p, 0xab, bytes);
    EXPECT_EQ(p[bytes - 1], 0xab);
    d.deallocate(p, bytes, MemTag::workspace);
  }
  // A zero-byte request still returns a distinct pointer, counted as 1 byte
  // both ways, so the books balance.
  void* z = d.allocate(0, MemTag::comm);
  EXPECT_NE(z, nullptr);
  EXPECT_EQ(current(d, MemTag::comm), 1u);
  d.deallocate(z, 0, MemTag::comm);
  EXPECT_EQ(current(d, MemTag::comm), 0u);
  d.deallocate(nullptr, 100, MemTag::comm);  // ignored
  EXPECT_EQ(d.stats().current_total, 0u);
}

TEST(CpuDevice, OutOfMemoryNamesTheTagAndLeavesTheBooksAlone) {
  CpuDevice d;
  void* p = d.allocate(128, MemTag::params);
  try {
    d.allocate(size_t{1} << 62, MemTag::activations);  // more than any address space holds
    FAIL() << "a 4 EiB allocation succeeded";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("out of memory on cpu"), std::string::npos) << what;
    EXPECT_NE(what.find("'activations'"), std::string::npos) << what;
    EXPECT_NE(what.find("128 bytes in use"), std::string::npos) << what;
  }
  EXPECT_EQ(current(d, MemTag::activations), 0u);
  EXPECT_EQ(peak(d, MemTag::activations), 0u);
  EXPECT_EQ(d.stats().current_total, 128u);
  d.deallocate(p, 128, MemTag::params);
}

// The text of the zt::Error that `f` throws ("" and a test failure when none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected zt::Error, nothing was thrown";
  return "";
}

#define EXPECT_CONTAINS(message, part) \
  EXPECT_NE(std::string(message).find(part), std::string::npos) << "expected: " << (part) << "\nin: " << (message)

TEST(CpuDevice, MemoryCapRefusesAllocationsPastItAndNamesWhatIsHeld) {
  CpuDevice d;
  EXPECT_EQ(d.memory_cap(), 0u);  // none by default
  const std::string note = "the estimator predicts 9.00 KiB on the device for this rank";
  d.set_memory_cap(10000, note);
  EXPECT_EQ(d.memory_cap(), 10000u);
  void* p = d.allocate(4000, MemTag::params);
  void* g = d.allocate(6000, MemTag::grads);  // exactly up to the cap
  EXPECT_EQ(d.stats().current_total, 10000u);

  const std::string what = error_of([&] { d.allocate(1, MemTag::activations); });
  EXPECT_CONTAINS(what, "out of memory on cpu: allocating 1 bytes for 'activations'");
  EXPECT_CONTAINS(what, "would pass the memory cap of 9.77 KiB (10000 bytes)");
  EXPECT_CONTAINS(what, "held now: params 3.91 KiB, grads 5.86 KiB (total 9.77 KiB)");
  EXPECT_CONTAINS(what, "; " + note);
  // The refused request leaves the books as they were.
  EXPECT_EQ(current(d, MemTag::activations), 0u);
  EXPECT_EQ(peak(d, MemTag::activations), 0u);
  EXPECT_EQ(d.stats().current_total, 10000u);
  // A zero-byte request is one byte, against the cap too.
  EXPECT_CONTAINS(error_of([&] { d.allocate(0, MemTag::comm); }), "for 'comm' would pass the memory cap");

  // Freeing makes room again, up to the cap and no further.
  d.deallocate(g, 6000, MemTag::grads);
  void* a = d.allocate(5000, MemTag::activations);
  EXPECT_CONTAINS(error_of([&] { d.allocate(1001, MemTag::workspace); }),
                  "held now: params 3.91 KiB, activations 4.88 KiB (total 8.79 KiB)");
  void* w = d.allocate(1000, MemTag::workspace);
  EXPECT_EQ(d.stats().current_total, 10000u);
  d.deallocate(w, 1000, MemTag::workspace);
  d.deallocate(a, 5000, MemTag::activations);

  // A request bigger than the cap on its own is refused (no overflowing sum
  // lets it through), and so is everything once what is held passes a cap
  // set later; what is held is kept.
  EXPECT_CONTAINS(error_of([&] { d.allocate(SIZE_MAX, MemTag::optim); }), "for 'optim' would pass the memory cap");
  d.set_memory_cap(1000, "");
  const std::string no_note = error_of([&] { d.allocate(1, MemTag::optim); });
  EXPECT_CONTAINS(no_note, "memory cap of 1000 bytes; held now: params 3.91 KiB (total 3.91 KiB)");
  EXPECT_EQ(no_note.find("; the estimator"), std::string::npos) << no_note;
  EXPECT_EQ(current(d, MemTag::params), 4000u);

  // 0 lifts the cap.
  d.set_memory_cap(0, "");
  void* big = d.allocate(size_t{1} << 20, MemTag::activations);
  d.deallocate(big, size_t{1} << 20, MemTag::activations);
  d.deallocate(p, 4000, MemTag::params);
  EXPECT_EQ(d.stats().current_total, 0u);

  // Nothing held: the message says so.
  d.set_memory_cap(100, "note");
  EXPECT_CONTAINS(error_of([&] { Buffer b(d, 101, MemTag::params); }), "held now: nothing (total 0 bytes); note");
}

// A device that takes more from its memory than it hands out (as a caching
// allocator does): each allocation takes a whole 1000-byte block.
class BlockDevice final : public Device {
 public:
  DeviceKind kind() const override { return DeviceKind::cpu; }
  std::string name() const override { return "blocks"; }
  void memset_zero(void*, size_t) override {}
  void copy_to_host(void*, const void*, size_t) override {}
  void copy_from_host(void*, const void*, size_t) override {}
  size_t taken = 0;
  int asked = 0;

 protected:
  static size_t block(size_t bytes) { return (bytes + 999) / 1000 * 1000; }
  void* raw_allocate(size_t bytes) override {
    taken += block(bytes);
    return std::malloc(bytes);
  }
  void raw_deallocate(void* p, size_t bytes) noexcept override {
    taken -= block(bytes);
    std::free(p);
  }
  bool fits_memory_cap(size_t bytes, size_t cap) override {
    ++asked;
    return taken + block(bytes) <= cap;
  }
  std::string memory_cap_detail() const override { return "taken " + std::to_string(taken) + " bytes in blocks"; }
};

TEST(Device, MemoryCapAlsoBoundsWhatADeviceTakesBeyondWhatItHolds) {
  BlockDevice d;
  void* p = d.allocate(10, MemTag::params);  // no cap: the device is not asked
  EXPECT_EQ(d.asked, 0);
  d.set_memory_cap(2500, "predicted 2 KiB");
  void* b = d.allocate(10, MemTag::grads);  // held 20, taken 2000
  EXPECT_EQ(d.asked, 1);
  // 30 bytes held would fit, a third block does not.
  const std::string what = error_of([&] { d.allocate(10, MemTag::activations); });
  EXPECT_CONTAINS(what, "allocating 10 bytes for 'activations' would pass the memory cap of 2.44 KiB");
  EXPECT_CONTAINS(what, "held now: params 10 bytes, grads 10 bytes (total 20 bytes); taken 2000 bytes in blocks; "
                        "predicted 2 KiB");
  EXPECT_EQ(d.stats().current_total, 20u);
  // Held bytes past the cap are refused before the device is asked.
  const int asked = d.asked;
  EXPECT_CONTAINS(error_of([&] { d.allocate(2490, MemTag::optim); }), "for 'optim' would pass the memory cap");
  EXPECT_EQ(d.asked, asked);
  d.deallocate(b, 10, MemTag::grads);
  EXPECT_NO_THROW(d.deallocate(d.allocate(10, MemTag::activations), 10, MemTag::activations));
  d.deallocate(p, 10, MemTag::params);
}

// [Note: phase clock] on the CPU: the host's time between marks, each
// phase's spans added, forgotten at restart().
TEST(CpuDevice, PhaseClockAddsTheHostsTimeOfEachPhasesSpans) {
  CpuDevice dev;
  std::unique_ptr<PhaseClock> clock = dev.make_phase_clock();
  for (int round = 0; round < 2; ++round) {
    clock->restart();
    EXPECT_EQ(clock->totals(), (std::array<double, kNumStepPhases>{}));
    const int a = clock->mark();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const int b = clock->mark();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const int c = clock->mark();
    clock->span(StepPhase::forward, a, b);
    clock->span(StepPhase::forward, b, c);
    clock->span(StepPhase::optimizer, b, c);
    clock->span(StepPhase::walk, a, c);
    EXPECT_EQ(clock->marks(), 3);
    const std::array<double, kNumStepPhases> s = clock->totals();
    EXPECT_GE(s[static_cast<size_t>(StepPhase::forward)], 0.030);
    EXPECT_LT(s[static_cast<size_t>(StepPhase::forward)], 0.5);
    EXPECT_GE(s[static_cast<size_t>(StepPhase::optimizer)], 0.010);
    EXPECT_LT(s[static_cast<size_t>(StepPhase::optimizer)], s[static_cast<size_t>(StepPhase::forward)]);
    EXPECT_DOUBLE_EQ(s[static_cast<size_t>(StepPhase::walk)], s[static_cast<size_t>(StepPhase::forward)]);
    EXPECT_EQ(s[static_cast<size_t>(StepPhase::backward)], 0);
  }
}

TEST(CpuDevice, CopiesAndZeroing) {
  CpuDevice d;
  std::vector<float> host(257);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i) * 0.5f - 7.0f;
  Buffer b(d, DType::f32, Shape{257}, MemTag::activations);
  d.copy_from_host(b.data(), host.data(), b.bytes());
  std::vector<float> back(host.size(), -1.0f);
  d.copy_to_host(back.data(), b.data(), b.bytes());
  EXPECT_EQ(back, host);
  // Zeroing a sub-range leaves its neighbours.
  d.memset_zero(b.as<float>() + 1, 255 * sizeof(float));
  d.copy_to_host(back.data(), b.data(), b.bytes());
  EXPECT_EQ(back[0], host[0]);
  EXPECT_EQ(back[256], host[256]);
  for (size_t i = 1; i < 256; ++i) ASSERT_EQ(back[i], 0.0f) << i;
}

TEST(Buffer, OwnsOneAllocationAndFreesItOnce) {
  CpuDevice d;
  {
    Buffer b(d, DType::bf16, Shape{3, 5}, MemTag::params);
    EXPECT_FALSE(b.empty());
    EXPECT_EQ(b.bytes(), 30u);
    EXPECT_EQ(b.tag(), MemTag::params);
    EXPECT_EQ(current(d, MemTag::params), 30u);
    const Tensor t = b.tensor();
    EXPECT_EQ(t.data, b.data());
    EXPECT_EQ(t.dtype, DType::bf16);
    EXPECT_EQ(t.shape, (Shape{3, 5}));
    EXPECT_EQ(t.device, DeviceKind::cpu);
  }
  EXPECT_EQ(current(d, MemTag::params), 0u);

  // An untyped buffer reads as f32 over its whole bytes.
  Buffer raw(d, 64, MemTag::comm);
  EXPECT_EQ(raw.tensor().dtype, DType::f32);
  EXPECT_EQ(raw.tensor().shape, (Shape{16}));
  raw.reset();
  EXPECT_TRUE(raw.empty());
  EXPECT_EQ(raw.bytes(), 0u);
  raw.reset();  // idempotent
  EXPECT_EQ(current(d, MemTag::comm), 0u);

  const Buffer none;
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.data(), nullptr);
}

TEST(Buffer, MovesTransferOwnership) {
  CpuDevice d;
  Buffer a(d, DType::f32, Shape{100}, MemTag::grads);
  void* const pa = a.data();

  Buffer b(std::move(a));
  EXPECT_TRUE(a.empty());  // the moved-from state is part of the contract
  EXPECT_EQ(a.bytes(), 0u);
  EXPECT_EQ(b.data(), pa);
  EXPECT_EQ(b.tensor().shape, (Shape{100}));
  EXPECT_EQ(current(d, MemTag::grads), 400u) << "a move allocates and frees nothing";

  // Move assignment frees what the target held, then takes the source's.
  Buffer c(d, DType::f32, Shape{10}, MemTag::optim);
  EXPECT_EQ(current(d, MemTag::optim), 40u);
  c = std::move(b);
  EXPECT_EQ(current(d, MemTag::optim), 0u);
  EXPECT_EQ(current(d, MemTag::grads), 400u);
  EXPECT_EQ(c.data(), pa);
  EXPECT_EQ(c.tag(), MemTag::grads);
  EXPECT_TRUE(b.empty());

  Buffer& self = c;
  c = std::move(self);  // self-move keeps the allocation
  EXPECT_EQ(c.data(), pa);
  EXPECT_EQ(current(d, MemTag::grads), 400u);

  // Buffers in a growing vector are moved, never copied or double-freed.
  std::vector<Buffer> many;
  for (int i = 0; i < 20; ++i) many.emplace_back(d, 64, MemTag::workspace);
  EXPECT_EQ(current(d, MemTag::workspace), 20u * 64u);
  many.clear();
  EXPECT_EQ(current(d, MemTag::workspace), 0u);
  c.reset();
  EXPECT_EQ(d.stats().current_total, 0u);
}

TEST(Buffer, ViewsStayInside) {
  CpuDevice d;
  Buffer b(d, 256, MemTag::activations);
  const Tensor v = b.view(DType::f16, Shape{4, 8}, 64);
  EXPECT_EQ(static_cast<char*>(v.data) - static_cast<char*>(b.data()), 64);
  EXPECT_EQ(v.dtype, DType::f16);
  EXPECT_EQ(v.shape, (Shape{4, 8}));
  EXPECT_NO_THROW(b.view(DType::f64, Shape{32}, 0));   // exactly the whole buffer
  EXPECT_THROW(b.view(DType::f64, Shape{32}, 8), Error);  // one element past the end
  EXPECT_THROW(b.view(DType::f32, Shape{65}), Error);
}

}  // namespace
}  // namespace zt
