// Collectives and point-to-point on device memory through NcclCommunicator
// (one GPU per rank; skipped when ranks share a GPU) and StagedMpiCommunicator
// (any number of ranks per GPU), in f32 and bf16. Data are seeded by rank, so
// every rank computes every expected value locally (as nccl-tests do); the
// values are multiples of 1/4 in [-2, 2], so sums over a few ranks are exact
// in bf16 and independent of the reduction order, and results compare exactly.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/device_comm.hpp"
#include "comm/nccl_communicator.hpp"
#include "comm/staged_mpi_communicator.hpp"
#include "comm/topology.hpp"
#include "runtime/cuda/cuda_device.hpp"

void spin_on_stream(cudaStream_t stream, long long cycles);  // spin_kernel.cu

using namespace zt;

namespace {

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

int visible_gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

// Every rank must take the same branch, or the others hang in a collective.
bool on_every_rank(bool ok) {
  int mine = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

float seed(int rank, int64_t i) { return static_cast<float>((rank * 7 + i * 3) % 17 - 8) * 0.25f; }

float reduce_expected(ReduceOp op, int nranks, int64_t i) {
  float acc = seed(0, i);
  for (int r = 1; r < nranks; ++r) {
    const float v = seed(r, i);
    acc = op == ReduceOp::sum ? acc + v : op == ReduceOp::max ? std::max(acc, v) : std::min(acc, v);
  }
  return acc;
}

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    if (cudaMalloc(&p, bytes == 0 ? 1 : bytes) != cudaSuccess) p = nullptr;
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct PinnedBuffer {
  void* p = nullptr;
  explicit PinnedBuffer(size_t bytes) {
    if (cudaMallocHost(&p, bytes == 0 ? 1 : bytes) != cudaSuccess) p = nullptr;
  }
  ~PinnedBuffer() { cudaFreeHost(p); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
};

// Page-locked host memory as a Device, to check that staging slots are
// allocated through it and accounted under MemTag::comm.
class PinnedTestDevice final : public Device {
 public:
  DeviceKind kind() const override { return DeviceKind::cpu; }
  std::string name() const override { return "pinned-test"; }
  void memset_zero(void* p, size_t bytes) override { std::memset(p, 0, bytes); }
  void copy_to_host(void* d, const void* s, size_t n) override { std::memcpy(d, s, n); }
  void copy_from_host(void* d, const void* s, size_t n) override { std::memcpy(d, s, n); }

 protected:
  void* raw_allocate(size_t bytes) override {
    void* p = nullptr;
    ZT_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
    return p;
  }
  void raw_deallocate(void* p, size_t) noexcept override { cudaFreeHost(p); }
};

struct Case {
  const char* backend;
  DType dtype;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(info.param.backend) + "_" + dtype_name(info.param.dtype);
}

class DeviceComm : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    topo_ = std::make_unique<Topology>(1);
    const int gpus = visible_gpus();
    const bool nccl = std::string(GetParam().backend) == "nccl";
    if (!on_every_rank(gpus > 0)) GTEST_SKIP() << "no GPU";
    if (nccl && !on_every_rank(topo_->local_size() <= gpus))
      GTEST_SKIP() << topo_->local_size() << " ranks per node but " << gpus << " GPUs: NCCL needs one GPU per rank";
    select_cuda_device(topo_->local_rank());
    CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    comm_ = make_device_communicator(topo_->world_mpi(), GetParam().backend, stream_);
    ASSERT_STREQ(comm_->backend(), GetParam().backend);
  }
  void TearDown() override {
    comm_.reset();
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  DType dt() const { return GetParam().dtype; }
  int rank() const { return comm_->rank(); }
  int nranks() const { return comm_->size(); }
  Tensor device_tensor(const DeviceBuffer& b, int64_t n) const { return Tensor(b.p, dt(), Shape{n}, DeviceKind::cuda); }

  // Queues a copy of `values` (converted to the case's dtype) on the compute
  // stream; the host does not wait, so the communicator must order after it.
  void upload(const DeviceBuffer& dev, const std::vector<float>& values) {
    const size_t n = values.size(), bytes = n * dtype_size(dt());
    staged_.push_back(std::make_unique<PinnedBuffer>(bytes));
    convert(values.data(), DType::f32, staged_.back()->p, dt(), n);
    ASSERT_EQ(cudaMemcpyAsync(dev.p, staged_.back()->p, bytes, cudaMemcpyHostToDevice, stream_), cudaSuccess);
  }
  void upload_seeded(const DeviceBuffer& dev, int seed_rank, int64_t n, int64_t first = 0) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[i] = seed(seed_rank, first + i);
    upload(dev, v);
  }
  // Copies back on the compute stream (after any handle's wait()) and syncs.
  std::vector<float> download(const DeviceBuffer& dev, int64_t n) {
    const size_t bytes = static_cast<size_t>(n) * dtype_size(dt());
    PinnedBuffer host(bytes);
    std::vector<float> out(static_cast<size_t>(n));
    if (cudaMemcpyAsync(host.p, dev.p, bytes, cudaMemcpyDeviceToHost, stream_) != cudaSuccess ||
        cudaStreamSynchronize(stream_) != cudaSuccess) {
      ADD_FAILURE() << "download failed";
      return out;
    }
    convert(host.p, dt(), out.data(), DType::f32, static_cast<size_t>(n));
    return out;
  }

  std::unique_ptr<Topology> topo_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<DeviceCommunicator> comm_;
  std::vector<std::unique_ptr<PinnedBuffer>> staged_;
};

TEST_P(DeviceComm, AllReduceSumMaxMin) {
  for (int64_t n : {int64_t{1}, int64_t{1037}, (int64_t{1} << 20) + 3}) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
      DeviceBuffer buf(static_cast<size_t>(n) * dtype_size(dt()));
      upload_seeded(buf, rank(), n);
      CommRequest r = comm_->all_reduce(device_tensor(buf, n), op);
      wait(r);
      const std::vector<float> got = download(buf, n);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(got[i], reduce_expected(op, nranks(), i)) << "n " << n << " op " << int(op) << " i " << i;
    }
  }
}

TEST_P(DeviceComm, ReduceScatterThenAllGatherEqualsAllReduce) {
  for (int64_t shard : {int64_t{33}, (int64_t{1} << 18) + 1}) {
    const int64_t n = shard * nranks();
    DeviceBuffer in(n * dtype_size(dt())), part(shard * dtype_size(dt())), full(n * dtype_size(dt()));
    upload_seeded(in, rank(), n);
    CommRequest r = comm_->reduce_scatter(device_tensor(in, n), device_tensor(part, shard), ReduceOp::sum);
    wait(r);
    const std::vector<float> got_part = download(part, shard);
    for (int64_t i = 0; i < shard; ++i)
      ASSERT_EQ(got_part[i], reduce_expected(ReduceOp::sum, nranks(), rank() * shard + i)) << i;
    r = comm_->all_gather(device_tensor(part, shard), device_tensor(full, n));
    wait(r);
    const std::vector<float> got = download(full, n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], reduce_expected(ReduceOp::sum, nranks(), i)) << i;
  }
}

TEST_P(DeviceComm, BroadcastFromEveryRoot) {
  const int64_t n = 4099;
  DeviceBuffer buf(n * dtype_size(dt()));
  for (int root = 0; root < nranks(); ++root) {
    upload_seeded(buf, rank(), n);
    CommRequest r = comm_->broadcast(device_tensor(buf, n), root);
    wait(r);
    const std::vector<float> got = download(buf, n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], seed(root, i)) << "root " << root << " i " << i;
  }
}

TEST_P(DeviceComm, SendRecvRingInsideGroup) {
  const int64_t n = 70001;
  const int next = (rank() + 1) % nranks(), prev = (rank() + nranks() - 1) % nranks();
  DeviceBuffer out(n * dtype_size(dt())), in(n * dtype_size(dt()));
  upload_seeded(out, rank(), n);
  comm_->group_start();
  CommRequest rr = comm_->recv(device_tensor(in, n), prev, 3);
  CommRequest rs = comm_->send(device_tensor(out, n), next, 3);
  comm_->group_end();
  wait(rs);
  wait(rr);
  const std::vector<float> got = download(in, n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], seed(prev, i)) << i;
}

TEST_P(DeviceComm, ManyCallsInFlightCompleteInAnyWaitOrder) {
  const std::vector<int64_t> sizes = {5, 100003, 17, 1 << 19};
  std::vector<std::unique_ptr<DeviceBuffer>> bufs;
  std::vector<CommRequest> reqs;
  for (size_t k = 0; k < sizes.size(); ++k) {
    bufs.push_back(std::make_unique<DeviceBuffer>(sizes[k] * dtype_size(dt())));
    upload_seeded(*bufs.back(), rank(), sizes[k], static_cast<int64_t>(k));
    reqs.push_back(comm_->all_reduce(device_tensor(*bufs.back(), sizes[k]), ReduceOp::sum));
  }
  for (size_t k = sizes.size(); k-- > 0;) wait(reqs[k]);
  for (size_t k = 0; k < sizes.size(); ++k) {
    const std::vector<float> got = download(*bufs[k], sizes[k]);
    for (int64_t i = 0; i < sizes[k]; ++i)
      ASSERT_EQ(got[i], reduce_expected(ReduceOp::sum, nranks(), static_cast<int64_t>(k) + i)) << k << " " << i;
  }
}

// The input is written by a copy queued behind a long kernel, and the result
// read by a copy queued right after wait(): both are stream-ordered only, so a
// missing event wait on either side shows up as stale data. Out of place, so
// that even one rank (where NCCL's reduce_scatter is a copy) moves data.
TEST_P(DeviceComm, OrderedAfterAndBeforeTheComputeStream) {
  const int64_t shard = int64_t{1} << 22, n = shard * nranks();
  DeviceBuffer in(n * dtype_size(dt())), out(shard * dtype_size(dt()));
  CUDA_OK(cudaMemsetAsync(in.p, 0, n * dtype_size(dt()), stream_));
  CUDA_OK(cudaMemsetAsync(out.p, 0, shard * dtype_size(dt()), stream_));
  CUDA_OK(cudaStreamSynchronize(stream_));
  spin_on_stream(stream_, 100'000'000);  // about 50 ms
  upload_seeded(in, rank(), n);
  CommRequest r = comm_->reduce_scatter(device_tensor(in, n), device_tensor(out, shard), ReduceOp::sum);
  wait(r);
  const std::vector<float> got = download(out, shard);
  for (int64_t i = 0; i < shard; ++i)
    ASSERT_EQ(got[i], reduce_expected(ReduceOp::sum, nranks(), rank() * shard + i)) << i;
}

TEST_P(DeviceComm, TestAndWaitHostReportCompletion) {
  const int64_t n = 1 << 16;
  DeviceBuffer buf(n * dtype_size(dt()));
  upload_seeded(buf, rank(), n);
  CommRequest r = comm_->all_reduce(device_tensor(buf, n), ReduceOp::sum);
  auto* h = dynamic_cast<DeviceCommHandle*>(r.get());
  ASSERT_NE(h, nullptr);
  h->wait_host();
  EXPECT_TRUE(r->test());
  r.reset();
  // The host sees the result without any stream synchronisation of its own.
  std::vector<char> host(n * dtype_size(dt()));
  CUDA_OK(cudaMemcpy(host.data(), buf.p, host.size(), cudaMemcpyDeviceToHost));
  std::vector<float> got(n);
  convert(host.data(), dt(), got.data(), DType::f32, n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], reduce_expected(ReduceOp::sum, nranks(), i)) << i;
  comm_->synchronize();
}

TEST_P(DeviceComm, HostTensorsGoToMpiAndBytesAreCounted) {
  comm_->reset_counters();
  EXPECT_DOUBLE_EQ(all_reduce_scalar(*comm_, 1.0), nranks());
  const int64_t shard = 10, n = shard * nranks();
  DeviceBuffer a(n * dtype_size(dt())), b(shard * dtype_size(dt()));
  CUDA_OK(cudaMemsetAsync(a.p, 0, n * dtype_size(dt()), stream_));
  CommRequest r = comm_->all_reduce(device_tensor(a, n), ReduceOp::sum);
  wait(r);
  r = comm_->reduce_scatter(device_tensor(a, n), device_tensor(b, shard), ReduceOp::sum);
  wait(r);
  r = comm_->all_gather(device_tensor(b, shard), device_tensor(a, n));
  wait(r);
  comm_->barrier();
  const CommCounters& c = comm_->counters();
  const uint64_t es = dtype_size(dt());
  EXPECT_EQ(c.bytes[int(CommOp::all_reduce)], 8u + n * es);  // the f64 scalar, then the buffer
  EXPECT_EQ(c.calls[int(CommOp::all_reduce)], 2u);
  EXPECT_EQ(c.bytes[int(CommOp::reduce_scatter)], n * es);
  EXPECT_EQ(c.bytes[int(CommOp::all_gather)], n * es);
  EXPECT_EQ(c.calls[int(CommOp::barrier)], 1u);
}

// [Note: communication time]: the other ranks join an all-reduce about 100
// ms after rank 0, which meanwhile works 30 ms (a kernel on its compute
// stream and a sleep of the host) and then waits. Rank 0's call took about
// 100 ms, of which it waited about 70: with NCCL the device's times (the
// call on the communication stream, the compute stream's stall in wait()),
// with the staged backend the host's. The times are read once, and only
// those of the calls before hold_device_times().
TEST_P(DeviceComm, CollectivesCarryTheirTimeAndTheTimeWaited) {
  if (nranks() < 2) GTEST_SKIP() << "one rank's collectives are local copies";
  if (dt() != DType::f32) GTEST_SKIP() << "runs in the f32 case";
  const int64_t n = 1 << 16;
  DeviceBuffer buf(n * dtype_size(dt()));
  upload_seeded(buf, rank(), n);
  CUDA_OK(cudaStreamSynchronize(stream_));
  comm_->set_timing(true);
  topo_->world().barrier();
  comm_->reset_counters();
  if (rank() != 0) spin_on_stream(stream_, 200'000'000);  // about 100 ms
  CommRequest r = comm_->all_reduce(device_tensor(buf, n), ReduceOp::sum);
  if (rank() == 0) {
    spin_on_stream(stream_, 60'000'000);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  wait(r);
  const std::vector<float> got = download(buf, n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], reduce_expected(ReduceOp::sum, nranks(), i)) << i;
  CommCounters c = comm_->counters();
  // A later call (as a validation's after the step) is not read with the
  // calls before hold_device_times(): late by 100 ms again, it would double
  // rank 0's time.
  comm_->hold_device_times();
  if (rank() != 0) spin_on_stream(stream_, 200'000'000);
  r = comm_->all_reduce(device_tensor(buf, n), ReduceOp::sum);
  wait(r);
  CUDA_OK(cudaStreamSynchronize(stream_));
  comm_->add_device_times(c);
  const int k = static_cast<int>(CommOp::all_reduce);
  EXPECT_LE(c.waited[k], c.seconds[k]);
  if (rank() == 0) {
    EXPECT_GE(c.seconds[k], 0.07) << comm_->backend();
    // Only NCCL's times wait to be read; the staged backend's are the host's
    // (and two ranks sharing a GPU slice their kernels, so no upper bound).
    if (std::string(comm_->backend()) == "nccl") {
      EXPECT_LE(c.seconds[k], 0.16);
    }
    EXPECT_GE(c.waited[k], 0.03) << comm_->backend();
    EXPECT_LE(c.waited[k], c.seconds[k] - 0.015) << comm_->backend();
  }
  CommCounters again;
  comm_->add_device_times(again);
  EXPECT_EQ(again.seconds[k], 0.0);
  EXPECT_EQ(again.waited[k], 0.0);
  comm_->set_timing(false);
}

// [Note: one-rank group]: NCCL on one rank runs its collectives as copies on
// the compute stream, so a CUDA graph records them; launched, the graph
// gives the collectives' results.
TEST_P(DeviceComm, OneRankCollectivesAreRecordedInAGraph) {
  if (std::string(GetParam().backend) != "nccl" || nranks() != 1) {
    EXPECT_FALSE(comm_->graph_safe());
    GTEST_SKIP() << "NCCL on one rank";
  }
  EXPECT_TRUE(comm_->graph_safe());
  const int64_t n = 4099;
  DeviceBuffer a(n * dtype_size(dt())), b(n * dtype_size(dt())), c(n * dtype_size(dt()));
  upload_seeded(a, 0, n);
  CUDA_OK(cudaMemsetAsync(b.p, 0, n * dtype_size(dt()), stream_));
  CUDA_OK(cudaMemsetAsync(c.p, 0, n * dtype_size(dt()), stream_));
  CUDA_OK(cudaStreamSynchronize(stream_));
  comm_->reset_counters();
  cudaGraph_t graph = nullptr;
  CUDA_OK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
  CommRequest r = comm_->reduce_scatter(device_tensor(a, n), device_tensor(b, n), ReduceOp::sum);
  wait(r);
  r = comm_->all_reduce(device_tensor(b, n), ReduceOp::sum);
  wait(r);
  r = comm_->broadcast(device_tensor(b, n), 0);
  wait(r);
  r = comm_->all_gather(device_tensor(b, n), device_tensor(c, n));
  wait(r);
  CUDA_OK(cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_OK(cudaGraphLaunch(exec, stream_));
  const std::vector<float> got = download(c, n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], seed(0, i)) << i;
  EXPECT_EQ(comm_->counters().calls[int(CommOp::all_gather)], 1u);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// Types outside the f32/bf16 matrix, once per backend.
TEST_P(DeviceComm, AllReduceOtherTypes) {
  if (dt() != DType::f32) GTEST_SKIP() << "runs in the f32 case";
  const int n = 513;
  DeviceBuffer buf(n * 8);
  for (DType t : {DType::f64, DType::f16, DType::i32}) {
    std::vector<char> host(n * dtype_size(t));
    for (int i = 0; i < n; ++i) {
      const float v = seed(rank(), i);
      if (t == DType::i32) reinterpret_cast<int32_t*>(host.data())[i] = static_cast<int32_t>(v * 4);
      else convert(&v, DType::f32, host.data() + i * dtype_size(t), t, 1);
    }
    // On the compute stream: a plain cudaMemcpy runs on the legacy stream,
    // which a non-blocking stream does not wait for.
    CUDA_OK(cudaMemcpyAsync(buf.p, host.data(), host.size(), cudaMemcpyHostToDevice, stream_));
    CommRequest r = comm_->all_reduce(Tensor(buf.p, t, Shape{n}, DeviceKind::cuda), ReduceOp::sum);
    wait(r);
    CUDA_OK(cudaMemcpyAsync(host.data(), buf.p, host.size(), cudaMemcpyDeviceToHost, stream_));
    CUDA_OK(cudaStreamSynchronize(stream_));
    for (int i = 0; i < n; ++i) {
      const float expect = reduce_expected(ReduceOp::sum, nranks(), i);
      float got = 0;
      if (t == DType::i32) got = reinterpret_cast<int32_t*>(host.data())[i] / 4.0f;
      else convert(host.data() + i * dtype_size(t), t, &got, DType::f32, 1);
      ASSERT_EQ(got, expect) << dtype_name(t) << " " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, DeviceComm,
                         ::testing::Values(Case{"nccl", DType::f32}, Case{"nccl", DType::bf16}, Case{"mpi", DType::f32},
                                           Case{"mpi", DType::bf16}),
                         case_name);

TEST(DeviceCommFactory, AutoPicksMpiWhenRanksShareAGpuAndNcclRefusesThem) {
  Topology topo(1);
  const int gpus = visible_gpus();
  if (!on_every_rank(gpus > 0)) GTEST_SKIP() << "no GPU";
  select_cuda_device(topo.local_rank());
  const bool shared = !on_every_rank(topo.local_size() <= gpus);
  EXPECT_EQ(group_shares_a_gpu(topo.world_mpi()), shared);
  std::unique_ptr<DeviceCommunicator> c = make_device_communicator(topo.world_mpi(), "auto", nullptr);
  EXPECT_STREQ(c->backend(), shared ? "mpi" : "nccl");
  c.reset();
  if (shared) {
    EXPECT_THROW({ NcclCommunicator refused(topo.world_mpi()); }, UserError);
  }
  EXPECT_THROW(make_device_communicator(topo.world_mpi(), "gloo", nullptr), UserError);
}

TEST(StagedMpiCommunicator, StagingSlotsAreKeptAndAccountedUnderComm) {
  Topology topo(1);
  if (!on_every_rank(visible_gpus() > 0)) GTEST_SKIP() << "no GPU";
  select_cuda_device(topo.local_rank());
  PinnedTestDevice pinned;
  const int64_t n = 300000;
  DeviceBuffer buf(n * 4);
  ASSERT_EQ(cudaMemset(buf.p, 0, n * 4), cudaSuccess);
  StagedMpiCommunicator comm(topo.world_mpi(), nullptr, &pinned);
  all_reduce_sync(comm, Tensor(buf.p, DType::f32, Shape{n}, DeviceKind::cuda));
  const size_t held = comm.staging_bytes();
  EXPECT_GE(held, size_t(n * 4));
  EXPECT_EQ(pinned.stats().current[int(MemTag::comm)], held);
  all_reduce_sync(comm, Tensor(buf.p, DType::f32, Shape{n / 2}, DeviceKind::cuda));
  EXPECT_EQ(comm.staging_bytes(), held) << "a smaller call reuses the slot";
}

// [Note: communication time] through NCCL on one GPU per rank, one rank
// included (its collectives sent to NCCL: set_one_rank_copies(false)). The
// communication stream is kept busy about 100 ms before a reduce-scatter;
// the compute stream works about 30 ms, then waits for it. The call's own
// time is the reduce-scatter alone, the wait about 70 ms; a later call
// after hold_device_times() is not read, and the times are read once.
TEST(NcclCommunicator, CallsAndWaitsAreTimedOnTheDevice) {
  Topology topo(1);
  const int gpus = visible_gpus();
  if (!on_every_rank(gpus > 0 && topo.local_size() <= gpus)) GTEST_SKIP() << "needs one GPU per rank";
  select_cuda_device(topo.local_rank());
  cudaStream_t compute = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  {
    NcclCommunicator comm(topo.world_mpi(), compute);
    comm.set_one_rank_copies(false);
    EXPECT_FALSE(comm.graph_safe());
    comm.set_timing(true);
    const int64_t shard = int64_t{1} << 22, n = shard * comm.size();
    DeviceBuffer in(n * 4), out(shard * 4);
    CUDA_OK(cudaMemset(in.p, 0, n * 4));
    CUDA_OK(cudaMemset(out.p, 0, shard * 4));
    const Tensor tin(in.p, DType::f32, Shape{n}, DeviceKind::cuda);
    const Tensor tout(out.p, DType::f32, Shape{shard}, DeviceKind::cuda);
    topo.world().barrier();
    comm.reset_counters();
    spin_on_stream(comm.comm_stream(), 200'000'000);
    CommRequest r = comm.reduce_scatter(tin, tout, ReduceOp::sum);
    spin_on_stream(compute, 60'000'000);
    wait(r);
    CUDA_OK(cudaStreamSynchronize(compute));
    CommCounters c;
    comm.hold_device_times();
    spin_on_stream(comm.comm_stream(), 200'000'000);
    r = comm.all_reduce(tin, ReduceOp::sum);
    wait(r);
    CUDA_OK(cudaStreamSynchronize(compute));
    comm.add_device_times(c);
    const int rs = static_cast<int>(CommOp::reduce_scatter), ar = static_cast<int>(CommOp::all_reduce);
    EXPECT_GT(c.seconds[rs], 0.0);
    EXPECT_LT(c.seconds[rs], 0.02) << "the call alone, not the work queued before it";
    EXPECT_GE(c.waited[rs], 0.04);
    EXPECT_LE(c.waited[rs], 0.15);
    EXPECT_EQ(c.seconds[ar], 0.0) << "a call after hold_device_times()";
    EXPECT_EQ(c.waited[ar], 0.0);
    CommCounters again;
    comm.add_device_times(again);
    EXPECT_EQ(again.waited[rs], 0.0);
    comm.synchronize();
  }
  CUDA_OK(cudaStreamDestroy(compute));
}

TEST(NcclCommunicator, WaitingInsideAnOpenGroupIsAnError) {
  Topology topo(1);
  const int gpus = visible_gpus();
  if (!on_every_rank(gpus > 0 && topo.local_size() <= gpus)) GTEST_SKIP() << "needs one GPU per rank";
  select_cuda_device(topo.local_rank());
  NcclCommunicator comm(topo.world_mpi());
  const int64_t n = 64;
  DeviceBuffer buf(n * 4);
  ASSERT_EQ(cudaMemset(buf.p, 0, n * 4), cudaSuccess);
  comm.group_start();
  CommRequest r = comm.all_reduce(Tensor(buf.p, DType::f32, Shape{n}, DeviceKind::cuda), ReduceOp::sum);
  EXPECT_FALSE(r->test());
  EXPECT_THROW(r->wait(), Error);
  comm.group_end();
  wait_host(r);
  comm.synchronize();
}

}  // namespace
