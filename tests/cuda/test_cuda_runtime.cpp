// CudaDevice (caching allocator, tagged accounting, copies), PinnedHostDevice,
// the RAII handles and device selection. Tests that need a GPU skip without one.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "runtime/cuda/cuda_device.hpp"
#include "runtime/cuda/cuda_handles.hpp"
#include "runtime/cuda/gpu_timeline_cupti.hpp"
#include "runtime/phase_clock.hpp"
#include "runtime/transfer.hpp"

// tests/comm_cuda/spin_kernel.cu: keeps a stream busy for `cycles` clocks.
void spin_on_stream(cudaStream_t stream, long long cycles);
void spin_grid_on_stream(cudaStream_t stream, long long cycles, int blocks);

#define ZT_REQUIRE_GPU()                                                  \
  do {                                                                    \
    if (::zt::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

namespace zt {
namespace {

constexpr int kParams = static_cast<int>(MemTag::params);
constexpr int kGrads = static_cast<int>(MemTag::grads);

TEST(CudaRuntime, DeviceCountNeverThrows) {
  int n = -1;
  EXPECT_NO_THROW(n = cuda_device_count());
  EXPECT_GE(n, 0);  // 0 without a driver or a device: the GPU tests skip on it
}

TEST(CudaRuntime, SizeClasses) {
  EXPECT_EQ(CudaDevice::size_class(0), 512u);
  EXPECT_EQ(CudaDevice::size_class(1), 512u);
  EXPECT_EQ(CudaDevice::size_class(512), 512u);
  EXPECT_EQ(CudaDevice::size_class(513), 1024u);
  EXPECT_EQ(CudaDevice::size_class(size_t{1} << 20), size_t{1} << 20);
  EXPECT_EQ(CudaDevice::size_class((size_t{1} << 20) + 1), size_t{2} << 20);
  EXPECT_EQ(CudaDevice::size_class((size_t{5} << 20) + 3), size_t{6} << 20);
}

TEST(CudaRuntime, CachingAllocatorReusesBlocksAndAccountsByTag) {
  ZT_REQUIRE_GPU();
  CudaDevice dev(0);
  EXPECT_EQ(dev.kind(), DeviceKind::cuda);
  void* p = nullptr;
  {
    Buffer a(dev, 1000, MemTag::params);
    p = a.data();
    EXPECT_EQ(dev.stats().current[kParams], 1000u);
    EXPECT_EQ(dev.reserved_bytes(), 1024u);
    Buffer g(dev, size_t{3} << 20, MemTag::grads);
    EXPECT_EQ(dev.stats().current_total, 1000u + (size_t{3} << 20));
    EXPECT_EQ(dev.reserved_bytes(), 1024u + (size_t{4} << 20));
  }
  // Freed blocks stay cached: the accounting of what callers hold drops,
  // reserved memory does not.
  EXPECT_EQ(dev.stats().current_total, 0u);
  EXPECT_EQ(dev.stats().peak[kParams], 1000u);
  EXPECT_EQ(dev.stats().peak[kGrads], size_t{3} << 20);
  EXPECT_EQ(dev.cached_bytes(), 1024u + (size_t{4} << 20));
  {
    Buffer b(dev, 900, MemTag::activations);  // same size class: the same block
    EXPECT_EQ(b.data(), p);
    EXPECT_EQ(dev.reserved_bytes(), 1024u + (size_t{4} << 20));
    dev.empty_cache();  // drops only the cached 4 MiB block
    EXPECT_EQ(dev.reserved_bytes(), 1024u);
    EXPECT_EQ(dev.cached_bytes(), 0u);
  }
  dev.empty_cache();
  EXPECT_EQ(dev.reserved_bytes(), 0u);
  EXPECT_GE(dev.peak_reserved_bytes(), 1024u + (size_t{4} << 20));
}

TEST(CudaRuntime, OutOfMemoryThrowsAndLeavesNoStickyError) {
  ZT_REQUIRE_GPU();
  CudaDevice dev(0);
  Buffer keep(dev, 4096, MemTag::params);
  { Buffer cached(dev, 8192, MemTag::workspace); }
  try {
    Buffer huge(dev, size_t{1} << 52, MemTag::activations);  // 4 PiB
    FAIL() << "allocation of 4 PiB succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("activations"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(dev.cached_bytes(), 0u) << "the cache is emptied before giving up";
  EXPECT_EQ(dev.stats().current_total, 4096u);
}

TEST(CudaRuntime, MemoryCapBoundsWhatIsTakenFromTheGpuAndReleasesTheCacheFirst) {
  ZT_REQUIRE_GPU();
  constexpr size_t MiB = size_t{1} << 20;
  CudaDevice dev(0);
  const std::string note = "the estimator predicts 6.00 MiB on the device for this rank";
  dev.set_memory_cap(8 * MiB, note);
  Buffer a(dev, MiB + 1, MemTag::params);           // a 2 MiB block
  { Buffer b(dev, 4 * MiB, MemTag::workspace); }  // freed: cached
  EXPECT_EQ(dev.reserved_bytes(), 6 * MiB);
  EXPECT_EQ(dev.cached_bytes(), 4 * MiB);

  // 6 MiB more held fits the cap, but a new 6 MiB block beside the cached one
  // would take 12 MiB from the GPU: the cache goes back first, then it fits.
  {
    Buffer c(dev, 6 * MiB, MemTag::activations);
    EXPECT_EQ(dev.cached_bytes(), 0u);
    EXPECT_EQ(dev.reserved_bytes(), 8 * MiB);
  }
  // Served from the cache: nothing more taken, nothing released.
  {
    Buffer c(dev, 6 * MiB, MemTag::activations);
    EXPECT_EQ(dev.reserved_bytes(), 8 * MiB);
  }
  EXPECT_EQ(dev.cached_bytes(), 6 * MiB);

  // Past the cap in what is held: refused, naming the tag, the bytes held
  // per tag, the cap and the note; the cache is left alone.
  try {
    Buffer over(dev, 7 * MiB, MemTag::optim);
    FAIL() << "7 MiB more under an 8 MiB cap with 1 MiB held";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("out of memory on cuda:0: allocating 7.00 MiB (7340032 bytes) for 'optim' would pass the "
                        "memory cap of 8.00 MiB (8388608 bytes); held now: params 1.00 MiB"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find(note), std::string::npos) << what;
  }
  EXPECT_EQ(dev.cached_bytes(), 6 * MiB);
  EXPECT_EQ(dev.stats().current_total, MiB + 1);

  // Held bytes that fit, in a size class that does not: 6 MiB + 1 is an 8 MiB
  // block beside a's 2 MiB one. The cache is released trying, then it fails.
  try {
    Buffer over(dev, 6 * MiB + 1, MemTag::grads);
    FAIL() << "an 8 MiB block beside a 2 MiB one under an 8 MiB cap";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("for 'grads' would pass the memory cap of 8.00 MiB"), std::string::npos) << what;
    EXPECT_NE(what.find("reserved from the GPU 2.00 MiB"), std::string::npos) << what;
    EXPECT_NE(what.find(note), std::string::npos) << what;
  }
  EXPECT_EQ(dev.cached_bytes(), 0u);
  EXPECT_EQ(dev.reserved_bytes(), 2 * MiB);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(dev.stats().current[static_cast<int>(MemTag::grads)], 0u);

  // Freeing makes room again (a's block is cached, then released for the new one).
  a.reset();
  {
    Buffer fits(dev, 6 * MiB + 1, MemTag::grads);
    EXPECT_EQ(dev.reserved_bytes(), 8 * MiB);
    EXPECT_EQ(dev.cached_bytes(), 0u);
  }
  // No cap: the GPU's own memory is the limit again.
  dev.set_memory_cap(0, "");
  { Buffer big(dev, 16 * MiB, MemTag::activations); }
  EXPECT_GE(dev.peak_reserved_bytes(), 16 * MiB);
}

TEST(CudaRuntime, CopiesAndMemset) {
  ZT_REQUIRE_GPU();
  CudaDevice dev(0);
  const size_t n = 100003;
  std::vector<float> src(n), back(n, -1.0f);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<float>(i) * 0.5f;
  Buffer d(dev, DType::f32, Shape{static_cast<int64_t>(n)}, MemTag::activations);
  EXPECT_EQ(d.tensor().device, DeviceKind::cuda);
  dev.copy_from_host(d.data(), src.data(), n * 4);
  dev.copy_to_host(back.data(), d.data(), n * 4);
  EXPECT_EQ(0, std::memcmp(src.data(), back.data(), n * 4));
  dev.memset_zero(static_cast<char*>(d.data()) + 4, (n - 2) * 4);
  dev.copy_to_host(back.data(), d.data(), n * 4);
  EXPECT_EQ(back[0], src[0]);
  EXPECT_EQ(back[n - 1], src[n - 1]);
  for (size_t i = 1; i + 1 < n; ++i) ASSERT_EQ(back[i], 0.0f) << i;
  dev.synchronize();
}

TEST(CudaRuntime, PinnedHostMemory) {
  ZT_REQUIRE_GPU();
  PinnedHostDevice pinned;
  CudaDevice dev(0);
  Buffer h(pinned, 1 << 20, MemTag::offload);
  EXPECT_EQ(pinned.stats().current[static_cast<int>(MemTag::offload)], size_t{1} << 20);
  EXPECT_EQ(h.tensor().device, DeviceKind::cpu);
  cudaPointerAttributes attr{};
  ZT_CUDA_CHECK(cudaPointerGetAttributes(&attr, h.data()));
  EXPECT_EQ(attr.type, cudaMemoryTypeHost) << "pinned memory must be registered with CUDA";
  std::memset(h.data(), 0x5a, h.bytes());
  Buffer d(dev, h.bytes(), MemTag::comm);
  CudaStream s = CudaStream::create();
  ZT_CUDA_CHECK(cudaMemcpyAsync(d.data(), h.data(), h.bytes(), cudaMemcpyHostToDevice, s.get()));
  s.synchronize();
  pinned.memset_zero(h.data(), h.bytes());
  std::vector<unsigned char> back(h.bytes());
  dev.copy_to_host(back.data(), d.data(), h.bytes());
  for (size_t i = 0; i < back.size(); i += 4099) ASSERT_EQ(back[i], 0x5a) << i;
  EXPECT_EQ(static_cast<unsigned char*>(h.data())[7], 0);
}

// [Note: upload staging]: with the stream held busy, more uploads than slots
// queue behind it. The first `slots` return without waiting for the device
// (the stream is still busy after them), and a slot is refilled only once the
// copy that last read it has run, so every destination holds its own values.
TEST(CudaRuntime, UploadStagingQueuesCopiesAndRefillsASlotOnlyAfterItsCopy) {
  ZT_REQUIRE_GPU();
  CudaDevice dev(0);
  constexpr int kSlots = 3, kUploads = 10;
  constexpr int64_t n = 1 << 16;
  std::unique_ptr<UploadStaging> staging = dev.make_upload_staging(2 * n * sizeof(int32_t), kSlots);
  std::vector<Buffer> dst;  // allocated first: an allocation may synchronise
  for (int k = 0; k < kUploads; ++k) dst.emplace_back(dev, DType::i32, Shape{n}, MemTag::activations);
  dev.synchronize();
  spin_on_stream(dev.stream(), 400000000LL);  // about 0.2 s
  for (int k = 0; k < kUploads; ++k) {
    int32_t* slot = static_cast<int32_t*>(staging->next());
    for (int64_t i = 0; i < 2 * n; ++i) slot[i] = static_cast<int32_t>(k * 1000003 + i);
    staging->upload(dst[static_cast<size_t>(k)].data(), n * sizeof(int32_t), n * sizeof(int32_t));  // the second half
    if (k == kSlots - 1) {
      EXPECT_EQ(cudaStreamQuery(dev.stream()), cudaErrorNotReady) << "an upload waited for the device";
    }
  }
  dev.synchronize();
  std::vector<int32_t> back(static_cast<size_t>(n));
  for (int k = 0; k < kUploads; ++k) {
    dev.copy_to_host(back.data(), dst[static_cast<size_t>(k)].data(), n * sizeof(int32_t));
    for (int64_t i = 0; i < n; i += 997) ASSERT_EQ(back[static_cast<size_t>(i)], k * 1000003 + n + i) << "upload " << k;
  }
}

// [Note: step graph]: eight steps recorded and launched in two pieces each,
// each uploading from the staging slots (two, so the host refills a slot a
// graph still has to read unless the slot's event, recorded inside the
// graph, holds it back) into its own buffer behind a spin that keeps the GPU
// behind the host. One instantiation a piece, then updates (new slot,
// destination and memset value).
TEST(CudaRuntime, StepGraphUpdatesItsOperationsAndHoldsUploadSlotsUntilTheGraphRead) {
  ZT_REQUIRE_GPU();
  CudaDevice dev(0);
  constexpr int kSteps = 8;
  constexpr int64_t n = 1 << 14;
  std::unique_ptr<UploadStaging> staging = dev.make_upload_staging(n * sizeof(int32_t), 2);
  std::vector<Buffer> dst, marks;
  for (int k = 0; k < kSteps; ++k) {
    dst.emplace_back(dev, DType::i32, Shape{n}, MemTag::activations);
    marks.emplace_back(dev, DType::i32, Shape{n}, MemTag::activations);
  }
  std::unique_ptr<StepGraph> graph = dev.make_step_graph();
  ASSERT_NE(graph, nullptr);
  dev.synchronize();
  for (int k = 0; k < kSteps; ++k) {
    int32_t* slot = static_cast<int32_t*>(staging->next());
    for (int64_t i = 0; i < n; ++i) slot[i] = static_cast<int32_t>(k * 1000003 + i);
    graph->begin();
    EXPECT_TRUE(step_capture_active());
    spin_on_stream(dev.stream(), 100000000LL);  // about 50 ms
    staging->upload(dst[static_cast<size_t>(k)].data(), 0, n * sizeof(int32_t));
    graph->cut();  // a second piece
    EXPECT_TRUE(step_capture_active());
    ZT_CUDA_CHECK(cudaMemsetAsync(marks[static_cast<size_t>(k)].data(), k + 1, n * sizeof(int32_t), dev.stream()));
    graph->end_and_launch();
    EXPECT_FALSE(step_capture_active());
  }
  EXPECT_EQ(cudaStreamQuery(dev.stream()), cudaErrorNotReady) << "the host did not run ahead of the graphs";
  dev.synchronize();
  std::vector<int32_t> back(static_cast<size_t>(n));
  for (int k = 0; k < kSteps; ++k) {
    dev.copy_to_host(back.data(), dst[static_cast<size_t>(k)].data(), n * sizeof(int32_t));
    for (int64_t i = 0; i < n; i += 331) ASSERT_EQ(back[static_cast<size_t>(i)], k * 1000003 + i) << "step " << k;
    dev.copy_to_host(back.data(), marks[static_cast<size_t>(k)].data(), n * sizeof(int32_t));
    const int32_t b = k + 1;
    EXPECT_EQ(back[0], b | b << 8 | b << 16 | b << 24) << "step " << k;
  }
  // The spin, the copy and the slot's event record, then the memset.
  EXPECT_NE(graph->summary().find("8 steps, each in 2 graphs of 4 operations in all, 2 instantiations, 14 updates"),
            std::string::npos)
      << graph->summary();
}

// [Note: phase clock] on the GPU: a span is the device's time between two
// marks, not the host's (which only queues the spin), on the stream and
// inside the step's graph alike; the graph of each later step records the
// same events, so it is updated, not instantiated again.
TEST(CudaRuntime, PhaseClockTimesTheDeviceWorkBetweenItsMarks) {
  ZT_REQUIRE_GPU();
  CudaDevice dev(0);
  std::unique_ptr<PhaseClock> clock = dev.make_phase_clock();
  std::unique_ptr<StepGraph> graph = dev.make_step_graph();
  // A spin of 1e8 cycles alone, as the reference (about 50 ms at 2 GHz).
  dev.synchronize();
  clock->restart();
  const int a = clock->mark();
  spin_on_stream(dev.stream(), 100000000LL);
  clock->span(StepPhase::forward, a, clock->mark());
  const double spin = clock->totals()[0];
  ASSERT_GT(spin, 0.01);
  for (int step = 0; step < 4; ++step) {
    const bool graphed = step > 0;
    clock->restart();
    const auto t0 = std::chrono::steady_clock::now();
    if (graphed) graph->begin();
    const int w = clock->mark();
    const int f = clock->mark();
    spin_on_stream(dev.stream(), 100000000LL);
    clock->span(StepPhase::forward, f, clock->mark());
    const int b = clock->mark();
    spin_on_stream(dev.stream(), 200000000LL);
    clock->span(StepPhase::backward, b, clock->mark());
    clock->span(StepPhase::walk, w, clock->mark());
    if (graphed) graph->end_and_launch();
    const double queued = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::array<double, kNumStepPhases> s = clock->totals();
    const auto at = [&s](StepPhase p) { return s[static_cast<size_t>(p)]; };
    EXPECT_LT(queued, 0.5 * spin) << "step " << step << ": the host waited for the spins";
    EXPECT_NEAR(at(StepPhase::forward), spin, 0.1 * spin) << "step " << step;
    EXPECT_NEAR(at(StepPhase::backward), 2 * spin, 0.2 * spin) << "step " << step;
    EXPECT_GE(at(StepPhase::walk), at(StepPhase::forward) + at(StepPhase::backward)) << "step " << step;
    EXPECT_LT(at(StepPhase::walk), 1.05 * (at(StepPhase::forward) + at(StepPhase::backward)) + 1e-3);
    EXPECT_EQ(at(StepPhase::reduce), 0);
  }
  EXPECT_NE(graph->summary().find("1 instantiations, 2 updates"),
            std::string::npos)
      << graph->summary();
}

// A copy stream cannot join the step's graph: the transfer queue refuses
// while it is recorded, and an interrupted recording is ended cleanly.
TEST(CudaRuntime, StepGraphRefusesCopyStreamsAndEndsAnInterruptedRecording) {
  ZT_REQUIRE_GPU();
  CudaDevice dev(0);
  std::unique_ptr<TransferQueue> copies = dev.make_transfer_queue();
  Buffer d(dev, DType::f32, Shape{256}, MemTag::activations);
  std::vector<float> h(256, 1.0f);
  std::unique_ptr<StepGraph> graph = dev.make_step_graph();
  graph->begin();
  EXPECT_THROW(copies->to_device(d.data(), h.data(), d.bytes(), TransferTicket{}), Error);
  graph->abandon();
  EXPECT_FALSE(step_capture_active());
  dev.memset_zero(d.data(), d.bytes());  // the stream runs again
  dev.synchronize();
  graph->begin();
  dev.memset_zero(d.data(), d.bytes());
  graph->end_and_launch();
  dev.synchronize();
  EXPECT_NE(graph->summary().find("1 steps, each in 1 graphs of 1 operations in all, 1 instantiations, 0 updates"),
            std::string::npos)
      << graph->summary();
}

TEST(CudaRuntime, StreamsEventsAndHandlesAreMoveOnlyOwners) {
  ZT_REQUIRE_GPU();
  ZT_CUDA_CHECK(cudaSetDevice(0));
  CudaStream a = CudaStream::create();
  EXPECT_TRUE(static_cast<bool>(a));
  CudaStream b = std::move(a);
  EXPECT_FALSE(static_cast<bool>(a));
  EXPECT_TRUE(static_cast<bool>(b));
  CudaEvent start = CudaEvent::create(true), stop = CudaEvent::create(true);
  start.record(b.get());
  stop.record(b.get());
  stop.synchronize();
  EXPECT_TRUE(stop.ready());
  EXPECT_GE(CudaEvent::elapsed_ms(start, stop), 0.0f);
  CudaEvent order = CudaEvent::create();
  order.record(b.get());
  CudaStream c = CudaStream::create();
  c.wait(order.get());
  c.synchronize();
  CublasLtHandle h = CublasLtHandle::create();
  CublasLtHandle h2 = std::move(h);
  EXPECT_FALSE(static_cast<bool>(h));
  EXPECT_TRUE(static_cast<bool>(h2));
}

TEST(CudaRuntime, SelectDeviceByLocalRank) {
  ZT_REQUIRE_GPU();
  const int n = cuda_device_count();
  for (int rank : {0, 1, 5}) {
    EXPECT_EQ(select_cuda_device(rank), rank % n);
    int cur = -1;
    ZT_CUDA_CHECK(cudaGetDevice(&cur));
    EXPECT_EQ(cur, rank % n);
  }
  ZT_CUDA_CHECK(cudaSetDevice(0));
}

TEST(CudaRuntime, ErrorsCarryTheCudaName) {
  ZT_REQUIRE_GPU();
  try {
    ZT_CUDA_CHECK(cudaSetDevice(1 << 20));
    FAIL() << "cudaSetDevice of a missing device succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cudaErrorInvalidDevice"), std::string::npos) << e.what();
  }
  (void)cudaGetLastError();
}

// The GPU timeline's recorder ([Note: GPU timeline]); skips without a GPU or
// without libcupti (the bundle's lib/ holds it on the GPU host).
class CudaTimeline : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    try {
      timeline = make_cupti_timeline();
    } catch (const UserError& e) {
      GTEST_SKIP() << e.what();
    }
  }
  std::unique_ptr<GpuTimelineRecorder> timeline;
};

// [Note: GPU timeline]: two spinning kernels with the host asleep between
// them and ten memsets queued back to back; what ran before start() and
// after stop() is not recorded.
TEST_F(CudaTimeline, SeesEveryOperationAndTheGaps) {
  cudaStream_t s = nullptr;
  ZT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void* buf = nullptr;
  ZT_CUDA_CHECK(cudaMalloc(&buf, size_t{1} << 20));
  spin_on_stream(s, 1000);  // before start(): not recorded
  ZT_CUDA_CHECK(cudaStreamSynchronize(s));
  timeline->start();
  spin_on_stream(s, 2000000LL);  // about 1 ms
  ZT_CUDA_CHECK(cudaStreamSynchronize(s));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  spin_on_stream(s, 2000000LL);
  for (int i = 0; i < 10; ++i) ZT_CUDA_CHECK(cudaMemsetAsync(buf, i, size_t{1} << 20, s));
  const std::vector<DeviceSpan> spans = timeline->stop();
  spin_on_stream(s, 1000);  // after stop(): not recorded
  ZT_CUDA_CHECK(cudaStreamSynchronize(s));
  const TimelineSummary t = summarize_timeline(spans);
  std::printf("%s", describe_timeline(t, 1).c_str());
  EXPECT_EQ(t.kernels, 2);
  EXPECT_EQ(t.memsets, 10);
  EXPECT_EQ(t.copies, 0);
  EXPECT_GE(t.gaps[3], 1);  // the host's sleep
  EXPECT_GE(t.gap_ns[3], 4'500'000u);
  EXPECT_GT(t.busy_ns, 1'200'000u);  // two spins of 2e6 cycles at up to about 2 GHz
  EXPECT_LT(t.busy_ns + 4'500'000u, t.span_ns + 1);
  // Queued memsets follow one another within microseconds.
  EXPECT_GE(t.gaps[0] + t.gaps[1], 5) << "gaps of up to 10 us between the queued memsets";
  ZT_CUDA_CHECK(cudaFree(buf));
  ZT_CUDA_CHECK(cudaStreamDestroy(s));
}

// What launching as a CUDA graph changes between dependent kernels: 400
// short kernels that fill the device, launched one by one on a stream and
// then as one captured graph, each recorded by the timeline. Both must show
// every kernel; the gaps each prints are the measurement ([Note: GPU
// timeline], docs/perf.md).
TEST_F(CudaTimeline, StreamAgainstGraphLaunches) {
  int sms = 0;
  ZT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaStream_t s = nullptr;
  ZT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  constexpr int kKernels = 400;
  constexpr long long kCycles = 20000;  // about 10 us
  const auto launch_all = [&] {
    for (int i = 0; i < kKernels; ++i) spin_grid_on_stream(s, kCycles, 4 * sms);
  };
  launch_all();  // warm
  ZT_CUDA_CHECK(cudaStreamSynchronize(s));
  timeline->start();
  launch_all();
  const TimelineSummary on_stream = summarize_timeline(timeline->stop());

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ZT_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  launch_all();
  ZT_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  ZT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  ZT_CUDA_CHECK(cudaGraphLaunch(exec, s));  // warm
  ZT_CUDA_CHECK(cudaStreamSynchronize(s));
  timeline->start();
  ZT_CUDA_CHECK(cudaGraphLaunch(exec, s));
  const TimelineSummary as_graph = summarize_timeline(timeline->stop());
  std::printf("%d kernels of %lld cycles x %d blocks, launched one by one:\n%s", kKernels, kCycles, 4 * sms,
              describe_timeline(on_stream, 1).c_str());
  std::printf("the same as one graph:\n%s", describe_timeline(as_graph, 1).c_str());
  std::printf("[ timing   ] mean gap between kernels: %.3f us on the stream, %.3f us in the graph\n",
              static_cast<double>(on_stream.idle_ns()) / (kKernels - 1) * 1e-3,
              static_cast<double>(as_graph.idle_ns()) / (kKernels - 1) * 1e-3);
  EXPECT_EQ(on_stream.kernels, kKernels);
  EXPECT_EQ(as_graph.kernels, kKernels);
  EXPECT_GT(on_stream.busy_ns, 0u);
  EXPECT_GT(as_graph.busy_ns, 0u);
  ZT_CUDA_CHECK(cudaGraphExecDestroy(exec));
  ZT_CUDA_CHECK(cudaGraphDestroy(graph));
  ZT_CUDA_CHECK(cudaStreamDestroy(s));
}

}  // namespace
}  // namespace zt
