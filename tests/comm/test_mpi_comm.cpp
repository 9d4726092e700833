// Collectives of MpiCommunicator with data seeded by rank, so every rank can
// compute every expected value locally (as nccl-tests do).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "comm/topology.hpp"

using namespace zt;

namespace {
float seed_value(int rank, int i) { return static_cast<float>(rank * 1000 + i) * 0.5f; }
}  // namespace

TEST(MpiCommunicator, AllReduceSumMatchesLocalSum) {
  Topology topo(1);
  Communicator& c = topo.world();
  const int n = 1037;
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = seed_value(c.rank(), i);
  all_reduce_sync(c, Tensor(x.data(), DType::f32, Shape{n}));
  for (int i = 0; i < n; ++i) {
    float expect = 0;
    for (int r = 0; r < c.size(); ++r) expect += seed_value(r, i);
    ASSERT_FLOAT_EQ(x[i], expect) << i;
  }
  EXPECT_EQ(c.counters().bytes[static_cast<int>(CommOp::all_reduce)], n * 4u);
}

TEST(MpiCommunicator, ReduceScatterThenAllGatherEqualsAllReduce) {
  Topology topo(1);
  Communicator& c = topo.dp();
  const int shard = 33, n = shard * c.size();
  std::vector<float> x(n), part(shard), full(n);
  for (int i = 0; i < n; ++i) x[i] = seed_value(c.rank(), i);
  CommRequest r = c.reduce_scatter(Tensor(x.data(), DType::f32, Shape{n}), Tensor(part.data(), DType::f32, Shape{shard}),
                                   ReduceOp::sum);
  wait(r);
  for (int i = 0; i < shard; ++i) {
    float expect = 0;
    for (int rr = 0; rr < c.size(); ++rr) expect += seed_value(rr, c.rank() * shard + i);
    ASSERT_FLOAT_EQ(part[i], expect);
  }
  r = c.all_gather(Tensor(part.data(), DType::f32, Shape{shard}), Tensor(full.data(), DType::f32, Shape{n}));
  wait(r);
  for (int i = 0; i < n; ++i) {
    float expect = 0;
    for (int rr = 0; rr < c.size(); ++rr) expect += seed_value(rr, i);
    ASSERT_FLOAT_EQ(full[i], expect);
  }
}

TEST(MpiCommunicator, BroadcastAndPointToPointRing) {
  Topology topo(1);
  Communicator& c = topo.world();
  int v = c.rank() == 0 ? 42 : -1;
  CommRequest r = c.broadcast(Tensor(&v, DType::i32, Shape{1}), 0);
  wait(r);
  EXPECT_EQ(v, 42);
  if (c.size() == 1) return;
  const int next = (c.rank() + 1) % c.size(), prev = (c.rank() + c.size() - 1) % c.size();
  int out = c.rank(), in = -1;
  CommRequest rr = c.recv(Tensor(&in, DType::i32, Shape{1}), prev, 7);
  CommRequest rs = c.send(Tensor(&out, DType::i32, Shape{1}), next, 7);
  wait(rs);
  wait(rr);
  EXPECT_EQ(in, prev);
  EXPECT_DOUBLE_EQ(all_reduce_scalar(c, 1.0), c.size());
  EXPECT_DOUBLE_EQ(all_reduce_scalar(c, c.rank(), ReduceOp::max), c.size() - 1);
}

namespace {
void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }
constexpr int kAllReduce = static_cast<int>(CommOp::all_reduce);
}  // namespace

// [Note: communication time]: rank 0 makes the call, works 30 ms, then
// waits; the others join 200 ms after the barrier. Its call took about 200
// ms, of which it waited about 170 (the bounds leave room for ranks that
// leave the barrier apart on a loaded machine). Then rank 0 polls test()
// instead of waiting: the call's time is counted and none of it as waited.
TEST(MpiCommunicator, CountsTheTimeOfEachCallAndTheTimeWaitedForIt) {
  Topology topo(1);
  Communicator& c = topo.world();
  float x = 1;
  const Tensor t(&x, DType::f32, Shape{1});
  const int late = c.size() > 1 ? 200 : 0;
  c.barrier();
  c.reset_counters();
  if (c.rank() == 0) {
    CommRequest r = c.all_reduce(t, ReduceOp::sum);
    sleep_ms(30);
    wait(r);
  } else {
    sleep_ms(late);
    all_reduce_sync(c, t);
  }
  const CommCounters& n = c.counters();
  EXPECT_LE(n.waited[kAllReduce], n.seconds[kAllReduce]);
  if (c.rank() == 0) {
    EXPECT_GE(n.seconds[kAllReduce], 0.029);
    if (late > 0) {
      EXPECT_GE(n.seconds[kAllReduce], 0.120);
      EXPECT_GE(n.waited[kAllReduce], 0.060);
      EXPECT_LE(n.waited[kAllReduce], n.seconds[kAllReduce] - 0.025);
      const CollectiveTime ct = collective_time(n, c.size());
      EXPECT_NEAR(ct.hidden_fraction, 1 - n.waited[kAllReduce] / n.seconds[kAllReduce], 1e-12);
      EXPECT_LT(ct.hidden_fraction, 0.6);
    }
  }

  c.barrier();
  c.reset_counters();
  if (c.rank() == 0) {
    CommRequest r = c.all_reduce(t, ReduceOp::sum);
    while (!r->test()) sleep_ms(5);
    r.reset();
  } else {
    sleep_ms(late);
    all_reduce_sync(c, t);
  }
  if (c.rank() == 0) {
    EXPECT_EQ(c.counters().waited[kAllReduce], 0.0);
    EXPECT_GE(c.counters().seconds[kAllReduce], late > 0 ? 0.120 : 0.0);
    if (late > 0) {
      EXPECT_EQ(collective_time(c.counters(), c.size()).hidden_fraction, 1.0);
    }
  }
  // reset_counters() zeroes the times too.
  c.reset_counters();
  EXPECT_EQ(c.counters().seconds[kAllReduce], 0.0);
  EXPECT_TRUE(std::isnan(collective_time(c.counters(), c.size()).hidden_fraction));
}

TEST(CommCounters, CollectiveTimeAddsTheCollectivesOnly) {
  CommCounters n;
  n.seconds[static_cast<int>(CommOp::reduce_scatter)] = 0.3;
  n.waited[static_cast<int>(CommOp::reduce_scatter)] = 0.1;
  n.seconds[static_cast<int>(CommOp::all_gather)] = 0.1;
  n.waited[static_cast<int>(CommOp::all_gather)] = 0.1;
  n.seconds[static_cast<int>(CommOp::send)] = 5;  // point-to-point: not a collective
  n.waited[static_cast<int>(CommOp::recv)] = 5;
  const CollectiveTime ct = collective_time(n, 2);
  EXPECT_DOUBLE_EQ(ct.seconds, 0.4);
  EXPECT_DOUBLE_EQ(ct.waited, 0.2);
  EXPECT_DOUBLE_EQ(ct.hidden_fraction, 0.5);
  EXPECT_TRUE(std::isnan(collective_time(n, 1).hidden_fraction)) << "one rank hides nothing";
  n.waited[static_cast<int>(CommOp::all_reduce)] = 1;  // more waited than taken (clocks apart): clamped
  EXPECT_EQ(collective_time(n, 2).hidden_fraction, 0.0);
}

TEST(Topology, GroupsMatchTheGrid) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const int pp = world % 2 == 0 ? 2 : 1;
  Topology topo(pp);
  EXPECT_EQ(topo.pp_size() * topo.dp_size(), world);
  EXPECT_EQ(topo.dp().size(), topo.dp_size());
  EXPECT_EQ(topo.pp().size(), topo.pp_size());
  EXPECT_EQ(topo.dp().rank(), topo.dp_rank());
  EXPECT_EQ(topo.world_rank(), topo.dp_rank() + topo.dp_size() * topo.pp_rank());
  // Every member of my dp group has my stage.
  const int stage = topo.pp_rank();
  EXPECT_DOUBLE_EQ(all_reduce_scalar(topo.dp(), stage, ReduceOp::max), stage);
  EXPECT_DOUBLE_EQ(all_reduce_scalar(topo.dp(), stage, ReduceOp::min), stage);
}
