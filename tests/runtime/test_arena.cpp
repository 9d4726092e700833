// Arena: bump allocation inside chunks, marks released in LIFO order, reset,
// and growth by whole chunks that are kept, so that a second pass over the
// same requests allocates nothing from the device.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/error.hpp"
#include "runtime/device.hpp"

namespace zt {
namespace {

size_t held(const Device& d, MemTag t) { return d.stats().current[static_cast<int>(t)]; }
char* at(const Tensor& t) { return static_cast<char*>(t.data); }

TEST(Arena, BumpsInsideAChunkWithAlignedTensors) {
  CpuDevice d;
  Arena a(d, MemTag::activations, 4096);
  EXPECT_EQ(a.capacity(), 0u) << "nothing is allocated before the first request";
  const Tensor x = a.alloc(DType::f32, Shape{3});       // 12 bytes
  const Tensor y = a.alloc(DType::bf16, Shape{2, 5});   // next 64-byte boundary
  const Tensor z = a.alloc(DType::f64, Shape{10});
  EXPECT_EQ(a.capacity(), 4096u);
  EXPECT_EQ(held(d, MemTag::activations), 4096u) << "the chunk carries the arena's tag";
  EXPECT_EQ(at(y) - at(x), 64);
  EXPECT_EQ(at(z) - at(y), 64);
  for (const Tensor* t : {&x, &y, &z}) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % 64, 0u);
    EXPECT_EQ(t->device, DeviceKind::cpu);
  }
  EXPECT_EQ(y.dtype, DType::bf16);
  EXPECT_EQ(y.shape, (Shape{2, 5}));
  // The tensors do not overlap: writing each leaves the others intact.
  std::memset(x.data, 1, x.bytes());
  std::memset(y.data, 2, y.bytes());
  std::memset(z.data, 3, z.bytes());
  EXPECT_EQ(at(x)[x.bytes() - 1], 1);
  EXPECT_EQ(at(y)[0], 2);
  EXPECT_EQ(at(y)[y.bytes() - 1], 2);
  EXPECT_EQ(at(z)[0], 3);
}

TEST(Arena, MarksReleaseEverythingAfterThem) {
  CpuDevice d;
  Arena a(d, MemTag::workspace, 4096);
  const Tensor keep = a.alloc(DType::f32, Shape{100});
  const Arena::Mark m = a.mark();
  const Tensor t1 = a.alloc(DType::f32, Shape{50});
  const Arena::Mark inner = a.mark();
  const Tensor t2 = a.alloc(DType::f32, Shape{50});
  a.release_to(inner);
  EXPECT_EQ(a.alloc(DType::f32, Shape{50}).data, t2.data) << "released memory is handed out again";
  a.release_to(m);
  EXPECT_EQ(a.alloc(DType::f32, Shape{50}).data, t1.data);
  EXPECT_NE(a.alloc(DType::f32, Shape{1}).data, keep.data) << "memory before the mark stays taken";
  a.reset();
  EXPECT_EQ(a.alloc(DType::f32, Shape{100}).data, keep.data) << "reset releases everything";
  EXPECT_EQ(a.capacity(), 4096u);
}

TEST(Arena, GrowsByChunksAndKeepsThem) {
  CpuDevice d;
  Arena a(d, MemTag::activations, 1024);
  // 400 bytes, then 800 that do not fit behind them: a second chunk.
  const Tensor x = a.alloc(DType::f32, Shape{100});
  const Tensor y = a.alloc(DType::f32, Shape{200});
  EXPECT_EQ(a.capacity(), 2048u);
  // A request larger than a chunk gets a chunk of its own size.
  const Tensor big = a.alloc(DType::f32, Shape{1000});
  EXPECT_EQ(a.capacity(), 2048u + 4000u);
  EXPECT_EQ(held(d, MemTag::activations), a.capacity());

  // The same requests after reset reuse the same memory and allocate nothing.
  const size_t peak = d.stats().peak_total;
  for (int pass = 0; pass < 3; ++pass) {
    a.reset();
    EXPECT_EQ(a.alloc(DType::f32, Shape{100}).data, x.data);
    EXPECT_EQ(a.alloc(DType::f32, Shape{200}).data, y.data);
    EXPECT_EQ(a.alloc(DType::f32, Shape{1000}).data, big.data);
  }
  EXPECT_EQ(a.capacity(), 6048u);
  EXPECT_EQ(d.stats().peak_total, peak);
}

TEST(Arena, ARequestTooLargeForTheNextChunkGetsOneInsertedBeforeIt) {
  CpuDevice d;
  Arena a(d, MemTag::activations, 1024);
  const Tensor first = a.alloc(DType::f32, Shape{100});   // chunk A
  const Tensor second = a.alloc(DType::f32, Shape{200});  // chunk B
  a.reset();
  EXPECT_EQ(a.alloc(DType::f32, Shape{100}).data, first.data);
  // 2000 bytes fit neither behind the first tensor in A nor in B (1024): a
  // new chunk C goes between them, and B stays for what follows.
  const Tensor large = a.alloc(DType::f32, Shape{500});
  EXPECT_EQ(a.capacity(), 1024u * 2 + 2000u);
  EXPECT_NE(large.data, second.data);
  EXPECT_EQ(a.alloc(DType::f32, Shape{200}).data, second.data) << "B is used after C";
  // Later passes replay the same layout without growing.
  a.reset();
  EXPECT_EQ(a.alloc(DType::f32, Shape{100}).data, first.data);
  EXPECT_EQ(a.alloc(DType::f32, Shape{500}).data, large.data);
  EXPECT_EQ(a.alloc(DType::f32, Shape{200}).data, second.data);
  EXPECT_EQ(a.capacity(), 1024u * 2 + 2000u);
}

TEST(Arena, ChunksAreFreedWithTheArenaAndEmptyTensorsAreFine) {
  CpuDevice d;
  {
    Arena a(d, MemTag::workspace, 256);
    const Tensor e = a.alloc(DType::f32, Shape{0});
    EXPECT_EQ(e.numel(), 0);
    a.alloc(DType::f32, Shape{1000});
    EXPECT_GT(held(d, MemTag::workspace), 0u);
  }
  EXPECT_EQ(held(d, MemTag::workspace), 0u);
  Arena unset;
  EXPECT_THROW(unset.alloc(DType::f32, Shape{1}), Error);
}

}  // namespace
}  // namespace zt
