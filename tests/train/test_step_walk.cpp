// The trainer's step walk under MPI: the loss stays on the device until a
// step is read, and reading it (or not, or evaluating between steps) changes
// nothing in training; one stage and a two-stage pipeline walk the same
// global batch to the same losses; an fp16 step skipped for overflow does
// not count as an update; the step graph's recording is begun, cut and
// launched where [Note: step graph] says, and only where the layout allows;
// wall_clock_breakdown's phases are the spans [Note: phase clock] says; the
// data-parallel collectives carry their time and the time waited for them
// ([Note: communication time]).
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/phase_clock.hpp"
#include "train/trainer.hpp"
#include "train_test_util.hpp"

namespace zt {
namespace {

std::vector<double> losses(Trainer& t, int steps, bool read_every_step, bool evaluate_between = false) {
  std::vector<double> out;
  for (int i = 0; i < steps; ++i) {
    const StepStats st = t.train_step(read_every_step || i == steps - 1);
    if (!(read_every_step || i == steps - 1)) {
      EXPECT_TRUE(std::isnan(st.loss)) << "step " << st.step;
    }
    out.push_back(st.loss);
    if (evaluate_between) t.evaluate();
  }
  return out;
}

TEST(StepWalk, ReadingTheLossOrEvaluatingChangesNothing) {
  const Config cfg = test::small_config(test::log_dir());
  test::CpuRank a, b, c;
  Trainer ta(cfg, a.comms, a.dev, a.kernels), tb(cfg, b.comms, b.dev, b.kernels), tc(cfg, c.comms, c.dev, c.kernels);
  for (Trainer* t : {&ta, &tb, &tc}) EXPECT_FALSE(t->start());
  const std::vector<double> every = losses(ta, 4, true);
  const std::vector<double> last = losses(tb, 4, false);
  const std::vector<double> evaluated = losses(tc, 4, true, true);
  EXPECT_EQ(every.back(), last.back());  // bit for bit
  EXPECT_EQ(every, evaluated);
  EXPECT_EQ(ta.step(), 4);
  // Evaluation is a pure function of the parameters.
  const double v1 = ta.evaluate(), v2 = ta.evaluate();
  EXPECT_EQ(v1, v2);
  EXPECT_EQ(v1, tc.evaluate());
  EXPECT_TRUE(std::isfinite(v1));
}

// The trainer keeps its own copy of the config: what the caller does to its
// Config afterwards (or a temporary's end) changes nothing the trainer does.
TEST(StepWalk, TheTrainerKeepsItsOwnCopyOfTheConfig) {
  const Config cfg = test::small_config(test::log_dir());
  Config callers = cfg;
  test::CpuRank a, b;
  Trainer plain(cfg, a.comms, a.dev, a.kernels), own(callers, b.comms, b.dev, b.kernels);
  callers = test::small_config(test::log_dir(), {"train.eval_steps=3", "gradient_clipping=0.01"});
  for (Trainer* t : {&plain, &own}) EXPECT_FALSE(t->start());
  EXPECT_EQ(losses(own, 2, true), losses(plain, 2, true));  // bit for bit
  const double v = plain.evaluate();
  EXPECT_EQ(own.evaluate(), v);
  // The changed config does change what a trainer built from it evaluates,
  // so the equality above is the copy's doing.
  test::CpuRank c;
  Trainer other(callers, c.comms, c.dev, c.kernels);
  EXPECT_FALSE(other.start());
  losses(other, 2, true);
  EXPECT_NE(other.evaluate(), v);
}

TEST(StepWalk, PipelineWalksMatchOneStage) {
  if (test::world_size() % 2 != 0) GTEST_SKIP() << "needs an even world";
  const Config one = test::small_config(test::log_dir());
  const Config two = test::small_config(test::log_dir(), {}, 2);
  const Config inter = test::small_config(
      test::log_dir(), {"pipeline.pipe_schedule_name=\"interleaved\"", "pipeline.num_chunks=2"}, 2);
  // One stage over all ranks against P=2 (1F1B and interleaved): the same
  // global batch, so the same losses to rounding.
  test::CpuRank r1, r2(2), r3(2);
  Trainer t1(one, r1.comms, r1.dev, r1.kernels), t2(two, r2.comms, r2.dev, r2.kernels),
      t3(inter, r3.comms, r3.dev, r3.kernels);
  for (Trainer* t : {&t1, &t2, &t3}) t->start();
  const std::vector<double> a = losses(t1, 3, true), b = losses(t2, 3, true), c = losses(t3, 3, true);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i], b[i], 1e-5 * a[i]) << "step " << i + 1;
    EXPECT_NEAR(a[i], c[i], 1e-5 * a[i]) << "step " << i + 1;
  }
  EXPECT_NEAR(t1.evaluate(), t2.evaluate(), 1e-5);
}

TEST(StepWalk, SkippedFp16StepIsNotAnUpdate) {
  setenv("ZT_INJECT_FAULT", "overflow:rank=0,step=2,unit=1", 1);
  const Config cfg = test::small_config(test::log_dir(), {"fp16.enabled=true", "zero_optimization.stage=1"});
  test::CpuRank r;
  Trainer t(cfg, r.comms, r.dev, r.kernels);
  unsetenv("ZT_INJECT_FAULT");
  t.start();
  const StepStats s1 = t.train_step();
  const StepStats s2 = t.train_step();
  EXPECT_FALSE(s1.skipped);
  EXPECT_TRUE(s2.skipped);
  EXPECT_EQ(s2.loss_scale, s1.loss_scale);
  EXPECT_EQ(t.state_json().at("applied_steps").get<int64_t>(), 1);
  EXPECT_EQ(t.state_json().at("step").get<int64_t>(), 2);
}


// A StepGraph that records nothing and logs the calls the walk makes.
class LoggedGraph final : public StepGraph {
 public:
  explicit LoggedGraph(std::vector<std::string>* log) : log_(log) {}
  void begin() override { log_->push_back("begin"); }
  void cut() override { log_->push_back("cut"); }
  void end_and_launch() override { log_->push_back("end"); }
  void abandon() noexcept override { log_->push_back("abandon"); }
  std::string summary() const override { return "logged"; }

 private:
  std::vector<std::string>* log_;
};

// [Note: step graph]: nothing is recorded in the first step; each later step
// begins once, is cut before the 2nd, 3rd, 5th, 9th, ... unit it acquires
// (pieces of 1, 1, 2, 4, ... units) and launched once, at the end of its
// gradient reduction; the steps' losses are those of a walk without it.
// Only one rank at ZeRO stage 0 with the verdict on the device may record.
TEST(StepWalk, StepGraphIsRecordedInDoublingPiecesWhereTheLayoutAllows) {
  const Config cfg = test::small_config(test::log_dir());
  test::CpuRank a, b;
  Trainer plain(cfg, a.comms, a.dev, a.kernels), graphed(cfg, b.comms, b.dev, b.kernels);
  std::vector<std::string> log;
  const std::string why_not = graphed.enable_step_graph(std::make_unique<LoggedGraph>(&log));
  if (test::world_size() > 1) {
    EXPECT_NE(why_not.find("more than one rank"), std::string::npos) << why_not;
  } else {
    EXPECT_EQ(why_not, "");
    EXPECT_EQ(graphed.step_graph_summary(), "logged");
  }
  for (Trainer* t : {&plain, &graphed}) t->start();
  const std::vector<double> want = losses(plain, 3, true);
  std::vector<std::vector<std::string>> per_step;
  std::vector<double> got;
  for (int i = 0; i < 3; ++i) {
    log.clear();
    got.push_back(graphed.train_step(true).loss);
    per_step.push_back(log);
  }
  EXPECT_EQ(got, want);  // bit for bit
  if (test::world_size() > 1) {
    for (const auto& calls : per_step) EXPECT_TRUE(calls.empty());
  } else {
    EXPECT_TRUE(per_step[0].empty()) << "the first step is not recorded";
    // 4 micro-batches x (6 forwards + 6 backwards) = 48 units acquired: cut
    // before the 2nd, 3rd, 5th, 9th, 17th and 33rd.
    const std::vector<std::string> want_calls = {"begin", "cut", "cut", "cut", "cut", "cut", "cut", "end"};
    EXPECT_EQ(per_step[1], want_calls);
    EXPECT_EQ(per_step[2], want_calls);
  }
  EXPECT_EQ(graphed.evaluate(), plain.evaluate());

  // The layouts that may not record say why.
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"zero_optimization.stage=1"}, "ZeRO stage 1"},
      {{"zero_optimization.stage=3"}, "ZeRO stage 3"},
      {{"fp16.enabled=true"}, "verdict read by the host"},
      {{"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=\"cpu\""}, "offload"},
      {{"train.device_memory_cap_gib=100"}, "device memory cap"},
  };
  for (const auto& [sets, reason] : refused) {
    test::CpuRank r;
    Trainer t(test::small_config(test::log_dir(), sets), r.comms, r.dev, r.kernels);
    const std::string why = t.enable_step_graph(std::make_unique<LoggedGraph>(&log));
    EXPECT_NE(why.find(test::world_size() > 1 ? "more than one rank" : reason), std::string::npos)
        << sets.back() << ": " << why;
    EXPECT_EQ(t.step_graph_summary(), "");
  }
  test::CpuRank r;
  Trainer cpu_dev(cfg, r.comms, r.dev, r.kernels);
  if (test::world_size() == 1) {
    EXPECT_EQ(cpu_dev.enable_step_graph(), "a device without graphs");
  }
}

// A clock whose mark i is at i seconds: each phase's total is the number of
// marks its spans cover, which says where the walk put them.
class CountingClock final : public PhaseClock {
 public:
  explicit CountingClock(int* waits) : waits_(waits) {}

 protected:
  void record(int) override {}
  void wait_for(int index) override {
    EXPECT_EQ(index, marks() - 1) << "totals() waits for the last mark";
    ++*waits_;
  }
  double seconds(int from, int to) const override { return to - from; }

 private:
  int* waits_;
};

// [Note: phase clock]: with wall_clock_breakdown the step's phases are spans
// between marks: each forward and backward its own (two marks), the walk
// from its start to ReduceGrads, then the reduction and the optimizer step;
// a step whose loss is read reads them (one wait), one that is not, not,
// and an evaluation between puts no mark.
TEST(StepWalk, PhaseTimesAreSpansOfTheDeviceClock) {
  const Config cfg = test::small_config(test::log_dir(), {"wall_clock_breakdown=true"});
  const double M = static_cast<double>(cfg.batch.grad_accum);
  test::CpuRank r;
  Trainer t(cfg, r.comms, r.dev, r.kernels);
  int waits = 0;
  t.set_phase_clock(std::make_unique<CountingClock>(&waits));
  t.start();
  for (int i = 0; i < 3; ++i) {
    const StepStats st = t.train_step(i != 1);
    if (i == 1) {
      EXPECT_EQ(waits, 1) << "an unread step's phases are not read";
      t.evaluate();
      continue;
    }
    // Marks: the walk's start; M x (forward's two, backward's two); the walk's
    // end; the reduction's two; the optimizer's two.
    EXPECT_EQ(st.timing.walk.forward_s, M) << "step " << st.step;
    EXPECT_EQ(st.timing.walk.backward_s, M);
    EXPECT_EQ(st.timing.walk.total_s, 4 * M + 1);
    EXPECT_EQ(st.timing.reduce_s, 1);
    EXPECT_EQ(st.timing.optimizer_s, 1);
  }
  EXPECT_EQ(waits, 2);
}

// The CPU's own clock ([Note: phase clock]): the host's time between marks.
TEST(StepWalk, CpuPhaseTimesAreTheHostsTimeOfEachPhase) {
  const Config cfg = test::small_config(test::log_dir(), {"wall_clock_breakdown=true"});
  test::CpuRank r;
  Trainer t(cfg, r.comms, r.dev, r.kernels);
  t.start();
  for (int i = 0; i < 2; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const StepStats st = t.train_step(true);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const StepTiming& p = st.timing;
    EXPECT_GT(p.walk.forward_s, 0);
    EXPECT_GT(p.walk.backward_s, 0);
    EXPECT_GT(p.reduce_s, 0);
    EXPECT_GT(p.optimizer_s, 0);
    EXPECT_GE(p.walk.total_s, p.walk.forward_s + p.walk.backward_s);
    EXPECT_LE(p.walk.total_s + p.reduce_s + p.optimizer_s, wall);
  }
}

// [Note: communication time] at stage 2 over two ranks: every collective
// kind the step uses carries a time, of which at most all was waited for.
// Without overlap_comm, each reduction is waited for as soon as it is made,
// so little of it is hidden; with it, the backward's polls see reductions
// complete and the waited part is smaller than the reductions' time.
TEST(StepWalk, DataParallelCollectivesCarryTheirTimeAndTheTimeWaited) {
  if (test::world_size() != 2) GTEST_SKIP() << "two ranks";
  for (const bool overlap : {false, true}) {
    const Config cfg = test::small_config(
        test::log_dir(), {"wall_clock_breakdown=true", "zero_optimization.stage=2",
                          std::string("zero_optimization.overlap_comm=") + (overlap ? "true" : "false")});
    test::CpuRank r;
    Trainer t(cfg, r.comms, r.dev, r.kernels);
    t.start();
    for (int i = 0; i < 2; ++i) {
      const StepStats st = t.train_step(true);
      for (CommOp op : {CommOp::reduce_scatter, CommOp::all_gather}) {
        const int k = static_cast<int>(op);
        ASSERT_GT(st.comm.calls[k], 0u) << comm_op_name(op);
        EXPECT_GT(st.comm.seconds[k], 0) << comm_op_name(op);
        EXPECT_LE(st.comm.waited[k], st.comm.seconds[k]) << comm_op_name(op);
      }
      const CollectiveTime ct = collective_time(st.comm, 2);
      ASSERT_FALSE(std::isnan(ct.hidden_fraction));
      const int rs = static_cast<int>(CommOp::reduce_scatter);
      if (!overlap) {
        EXPECT_LT(1 - st.comm.waited[rs] / st.comm.seconds[rs], 0.5) << "step " << st.step;
      }
    }
  }
}

}  // namespace
}  // namespace zt
