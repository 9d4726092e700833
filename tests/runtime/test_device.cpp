// CpuDevice: tagged allocation with per-tag and total peaks (MemoryStats),
// the out-of-memory error, its copies; and Buffer: one allocation owned by
// exactly one object, whatever is moved where.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "runtime/device.hpp"

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
