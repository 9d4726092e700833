// The flight recorder (comm/flight_recorder.hpp): what each operation records,
// the ring, the operations in flight the watchdog follows, and the records
// MpiCommunicator makes of its own operations.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "comm/topology.hpp"

using namespace zt;

namespace {

struct FakeProbe final : CompletionProbe {
  bool s = false, c = false;
  bool started() override { return s; }
  bool completed() override { return c; }
};

// Says which thread destroyed it (an NCCL probe destroys CUDA events).
struct ThreadProbe final : CompletionProbe {
  explicit ThreadProbe(std::atomic<std::thread::id>* died_on) : died_on_(died_on) {}
  ~ThreadProbe() override { died_on_->store(std::this_thread::get_id()); }
  bool started() override { return true; }
  bool completed() override { return true; }
  std::atomic<std::thread::id>* died_on_;
};

}  // namespace

TEST(FlightRecorder, RecordsContextSequenceAndState) {
  FlightRecorder::set_default_capacity(4);
  FlightRecorder rec("dp", "mpi", {5, 7}, 1);
  set_op_step(12);
  set_op_instr("Backward", 3, 1);
  {
    PhaseScope phase(RunPhase::backward);
    const uint64_t a = rec.record(CommOp::reduce_scatter, -1, 64, DType::bf16, OpState::started);
    rec.complete(a);
  }
  EXPECT_EQ(current_op_context().phase, RunPhase::idle);  // restored
  set_op_instr(nullptr, -1, -1);
  const uint64_t s0 = rec.record(CommOp::send, 0, 8, DType::f32, OpState::started);
  const uint64_t s1 = rec.record(CommOp::send, 0, 8, DType::f32, OpState::started);
  const uint64_t r0 = rec.record(CommOp::recv, 0, 8, DType::f32, OpState::started);
  const uint64_t b = rec.record(CommOp::broadcast, 1, 3, DType::f64, OpState::started);
  rec.complete(s0);
  rec.complete(s1);
  rec.complete(r0);

  const nlohmann::json j = rec.to_json();
  EXPECT_EQ(j["ranks"], nlohmann::json({5, 7}));
  EXPECT_EQ(j["next_seq"], 2);  // two collectives
  const auto& e = j["entries"];
  ASSERT_EQ(e.size(), 4u);  // capacity 4: the reduce-scatter fell out of the ring
  EXPECT_EQ(e[0]["op"], "send");
  EXPECT_EQ(e[0]["p2p_seq"], 0);
  EXPECT_EQ(e[1]["p2p_seq"], 1);
  EXPECT_EQ(e[2]["op"], "recv");
  EXPECT_EQ(e[2]["p2p_seq"], 0);  // counted per direction and peer
  EXPECT_EQ(e[2]["state"], "completed");
  EXPECT_GE(e[2]["t_completed"].get<double>(), e[2]["t_queued"].get<double>());
  EXPECT_EQ(e[3]["op"], "broadcast");
  EXPECT_EQ(e[3]["seq"], 1);
  EXPECT_EQ(e[3]["root"], 1);
  EXPECT_EQ(e[3]["count"], 3);
  EXPECT_EQ(e[3]["dtype"], "f64");
  EXPECT_EQ(e[3]["step"], 12);
  EXPECT_EQ(e[3]["state"], "started");
  EXPECT_EQ(e[3]["t_completed"], -1.0);
  ASSERT_EQ(j["in_flight"].size(), 1u);
  EXPECT_EQ(j["in_flight"][0]["id"], b);

  FlightEntry oldest;
  ASSERT_TRUE(rec.poll(&oldest));
  EXPECT_EQ(oldest.op, CommOp::broadcast);
  rec.complete(b);
  EXPECT_FALSE(rec.poll(&oldest));
  FlightRecorder::set_default_capacity(2048);
}

TEST(FlightRecorder, KeepsTheContextOfEachOperation) {
  FlightRecorder rec("pp", "mpi", {0}, 0);
  set_op_step(3);
  set_op_phase(RunPhase::forward);
  set_op_instr("SendAct", 1, 0);
  rec.record(CommOp::send, 0, 4, DType::f32, OpState::started);
  set_op_phase(RunPhase::checkpoint);
  set_op_instr(nullptr, -1, -1);
  rec.record(CommOp::all_reduce, -1, 1, DType::f64, OpState::started);
  const auto e = rec.to_json()["entries"];
  EXPECT_EQ(e[0]["phase"], "forward");
  EXPECT_EQ(e[0]["instr"], "SendAct(mb=1,c=0)");
  EXPECT_EQ(e[1]["phase"], "checkpoint");
  EXPECT_EQ(e[1]["instr"], "");
  set_op_phase(RunPhase::idle);
}

TEST(FlightRecorder, ProbesTellStartAndCompletion) {
  FlightRecorder rec("dp", "nccl", {0}, 0);
  auto probe = std::make_shared<FakeProbe>();
  const uint64_t id = rec.record(CommOp::all_reduce, -1, 10, DType::f32, OpState::queued, probe);
  FlightEntry oldest;
  ASSERT_TRUE(rec.poll(&oldest));
  EXPECT_EQ(oldest.state, OpState::queued);
  probe->s = true;
  ASSERT_TRUE(rec.poll(&oldest));
  EXPECT_EQ(oldest.state, OpState::started);
  probe->c = true;
  EXPECT_FALSE(rec.poll(&oldest));  // completed: no longer in flight
  const auto e = rec.to_json()["entries"];
  EXPECT_EQ(e[0]["id"], id);
  EXPECT_EQ(e[0]["state"], "completed");
  EXPECT_GE(e[0]["t_started"].get<double>(), 0.0);
}

TEST(FlightRecorder, ReapsCompletedProbesWithoutAWatchdog) {
  // zbench and the tests run no watchdog: probed operations (NCCL events)
  // that completed must not pile up in the in-flight set.
  FlightRecorder rec("dp", "nccl", {0}, 0);
  auto done = std::make_shared<FakeProbe>();
  done->s = done->c = true;
  for (int i = 0; i < 1000; ++i) rec.record(CommOp::all_reduce, -1, 1, DType::f32, OpState::queued, done);
  EXPECT_LT(rec.to_json()["in_flight"].size(), 400u);
  auto pending = std::make_shared<FakeProbe>();
  for (int i = 0; i < 1000; ++i) rec.record(CommOp::all_reduce, -1, 1, DType::f32, OpState::queued, pending);
  EXPECT_GE(rec.to_json()["in_flight"].size(), 1000u);  // not completed: all still followed
}

TEST(FlightRecorder, TheWatchdogsPollNeverDestroysAProbe) {
  // Destroying a CUDA event waits for the driver's lock, which a thread
  // blocked in a synchronize holds: the watchdog thread, which polls, must
  // not be the one to drop a completed operation's probe (found on the
  // H200: the watchdog hung behind the very wait it had to time out). The
  // next record on the issuing thread releases it.
  FlightRecorder rec("dp", "nccl", {0}, 0);
  std::atomic<std::thread::id> died_on{};
  rec.record(CommOp::all_reduce, -1, 1, DType::f32, OpState::queued, std::make_shared<ThreadProbe>(&died_on));
  std::thread watchdog([&] { EXPECT_FALSE(rec.poll(nullptr)); });  // completed: reaped
  const std::thread::id watchdog_id = watchdog.get_id();
  watchdog.join();
  EXPECT_NE(died_on.load(), watchdog_id);
  EXPECT_EQ(died_on.load(), std::thread::id{});  // still held
  rec.record(CommOp::all_reduce, -1, 1, DType::f32, OpState::started);
  EXPECT_EQ(died_on.load(), std::this_thread::get_id());
}

TEST(FlightRecorder, HostWaitsReleaseRetiredProbesToo) {
  // The 'device' recorder holds only host waits ([Note: watched host waits]):
  // their probes, reaped by the watchdog, are released by the next wait, so
  // they do not pile up over a run.
  FlightRecorder rec("device", "device", {0}, 0);
  std::atomic<std::thread::id> died_on{};
  const uint64_t id = rec.record_wait("an event", std::make_shared<ThreadProbe>(&died_on));
  std::thread watchdog([&] { EXPECT_FALSE(rec.poll(nullptr)); });
  watchdog.join();
  rec.complete(id);
  EXPECT_EQ(died_on.load(), std::thread::id{});
  rec.complete(rec.record_wait("an event", std::make_shared<FakeProbe>()));
  EXPECT_EQ(died_on.load(), std::this_thread::get_id());
  EXPECT_FALSE(rec.to_json()["entries"][1].contains("seq"));  // waits are not collectives
}

TEST(FlightRecorder, MpiCommunicatorRecordsEveryOperation) {
  Topology topo(1);
  MpiCommunicator& w = topo.world_mpi();
  const int64_t before = w.recorder().to_json()["next_seq"];
  double x = 1;
  all_reduce_sync(w, Tensor(&x, DType::f64, Shape{1}));
  w.barrier();
  EXPECT_EQ(x, w.size());
  nlohmann::json j = w.recorder().to_json();
  EXPECT_EQ(j["next_seq"].get<int64_t>(), before + 2);
  EXPECT_TRUE(j["in_flight"].empty());
  const auto& e = j["entries"];
  EXPECT_EQ(e[e.size() - 2]["op"], "all_reduce");
  EXPECT_EQ(e[e.size() - 2]["state"], "completed");
  EXPECT_EQ(e[e.size() - 1]["op"], "barrier");
  EXPECT_EQ(e[e.size() - 1]["state"], "completed");
  std::vector<int> members = j["ranks"];
  EXPECT_EQ(static_cast<int>(members.size()), w.size());

  if (w.size() < 2) return;
  // A receive posted and not yet matched stays in flight until its wait.
  const int peer = w.rank() ^ 1;
  if (peer >= w.size()) return;  // odd world: the last rank sits out
  float in = 0, out = static_cast<float>(w.rank());
  CommRequest r = w.recv(Tensor(&in, DType::f32, Shape{1}), peer, 9);
  FlightEntry oldest;
  ASSERT_TRUE(w.recorder().poll(&oldest));
  EXPECT_EQ(oldest.op, CommOp::recv);
  EXPECT_EQ(oldest.peer, peer);
  CommRequest s = w.send(Tensor(&out, DType::f32, Shape{1}), peer, 9);
  wait(s);
  wait(r);
  EXPECT_EQ(in, static_cast<float>(peer));
  EXPECT_FALSE(w.recorder().poll(&oldest));
}
