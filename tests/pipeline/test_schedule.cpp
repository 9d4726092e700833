// Pipeline schedules tested without MPI: every stage's list is simulated with
// all the others (pipeline/simulate.hpp) over a grid of sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <utility>

#include "core/error.hpp"
#include "pipeline/schedule.hpp"
#include "pipeline/simulate.hpp"

namespace zt {
namespace {

struct Combo {
  ScheduleKind kind;
  int P, V, M;
};

std::string describe(const Combo& c) {
  return detail::concat(schedule_kind_name(c.kind), " P=", c.P, " V=", c.V, " M=", c.M);
}

// Every valid (kind, P, V, M) with P in 1..8, V in 1..4, M in P..4P.
std::vector<Combo> valid_grid() {
  std::vector<Combo> out;
  for (int P = 1; P <= 8; ++P)
    for (int M = P; M <= 4 * P; ++M) {
      out.push_back({ScheduleKind::gpipe, P, 1, M});
      out.push_back({ScheduleKind::one_f_one_b, P, 1, M});
      for (int V = 2; V <= 4; ++V)
        if (M % P == 0) out.push_back({ScheduleKind::interleaved, P, V, M});
    }
  return out;
}

// Structure of one stage's list, checked on the list alone: the recv/compute/
// send adjacency the executor relies on, and each (mb, chunk) forward once
// before its backward once.
void check_program_shape(const Combo& c, int stage, const std::vector<PipeInstr>& prog) {
  const int last = c.P * c.V - 1;
  ASSERT_GE(prog.size(), 2u);
  EXPECT_EQ(prog[prog.size() - 2].op, PipeOp::reduce_grads);
  EXPECT_EQ(prog.back().op, PipeOp::optimizer_step);
  std::map<std::pair<int, int>, size_t> fwd_at, bwd_at;
  for (size_t i = 0; i + 2 < prog.size(); ++i) {
    const PipeInstr& in = prog[i];
    const int g = in.chunk * c.P + stage;
    const auto key = std::make_pair(in.mb, in.chunk);
    if (in.op == PipeOp::forward) {
      EXPECT_TRUE(fwd_at.emplace(key, i).second) << "forward twice";
      if (g != 0) {
        EXPECT_TRUE(i > 0 && prog[i - 1] == (PipeInstr{PipeOp::recv_act, in.mb, in.chunk}));
      }
      if (g != last) {
        EXPECT_TRUE(prog[i + 1] == (PipeInstr{PipeOp::send_act, in.mb, in.chunk}));
      }
    } else if (in.op == PipeOp::backward) {
      EXPECT_TRUE(bwd_at.emplace(key, i).second) << "backward twice";
      if (g != last) {
        EXPECT_TRUE(i > 0 && prog[i - 1] == (PipeInstr{PipeOp::recv_grad, in.mb, in.chunk}));
      }
      if (g != 0) {
        EXPECT_TRUE(prog[i + 1] == (PipeInstr{PipeOp::send_grad, in.mb, in.chunk}));
      }
    } else {
      EXPECT_NE(in.op, PipeOp::reduce_grads);
      EXPECT_NE(in.op, PipeOp::optimizer_step);
    }
  }
  EXPECT_EQ(fwd_at.size(), static_cast<size_t>(c.M * c.V));
  EXPECT_EQ(bwd_at.size(), static_cast<size_t>(c.M * c.V));
  for (const auto& [key, i] : fwd_at) {
    auto b = bwd_at.find(key);
    ASSERT_NE(b, bwd_at.end());
    EXPECT_LT(i, b->second);
  }
}

TEST(PipelineSchedule, GridSimulatesWithoutDeadlockAndMeetsBounds) {
  int checked = 0;
  for (const Combo& c : valid_grid()) {
    SCOPED_TRACE(describe(c));
    ASSERT_NO_THROW(validate_schedule(c.kind, c.P, c.V, c.M));
    for (int s = 0; s < c.P; ++s) {
      SCOPED_TRACE(detail::concat("stage ", s));
      check_program_shape(c, s, make_schedule(c.kind, c.P, c.V, c.M, s));
    }
    const SimResult r = simulate(c.kind, c.P, c.V, c.M);
    ASSERT_FALSE(r.deadlock) << r.error;
    ASSERT_EQ(r.error, "");
    ASSERT_EQ(r.max_in_flight.size(), static_cast<size_t>(c.P));
    for (int s = 0; s < c.P; ++s) {
      EXPECT_EQ(r.max_in_flight[s], max_in_flight(c.kind, c.P, c.V, c.M, s)) << "stage " << s;
      // Every stage computes M*V chunks of 1/V + 2/V: busy 3*M, the rest is idle.
      EXPECT_NEAR(r.idle[s], r.makespan - 3.0 * c.M, 1e-9);
    }
    // Equal per-chunk times make the classic formulas exact for all three
    // kinds, gpipe included: its last stage ends its forwards at M+P-1 and the
    // backward wave reaches stage 0 after 2*(M+P-1), so makespan 3*(M+P-1)
    // against ideal 3*M.
    EXPECT_NEAR(r.bubble, ideal_bubble(c.kind, c.P, c.V, c.M), 1e-9);
    EXPECT_NEAR(r.makespan, 3.0 * c.M * (1 + r.bubble), 1e-9);
    ++checked;
  }
  EXPECT_GT(checked, 300);
}

TEST(PipelineSchedule, InFlightBoundsMatchTheirFormulas) {
  // 1F1B: stage s keeps P - s micro-batches alive, independent of M; GPipe
  // keeps all M; interleaved keeps its warm-up + 1.
  EXPECT_EQ(max_in_flight(ScheduleKind::one_f_one_b, 4, 1, 16, 0), 4);
  EXPECT_EQ(max_in_flight(ScheduleKind::one_f_one_b, 4, 1, 16, 3), 1);
  EXPECT_EQ(max_in_flight(ScheduleKind::gpipe, 4, 1, 16, 2), 16);
  EXPECT_EQ(max_in_flight(ScheduleKind::interleaved, 4, 2, 8, 0), 2 * 3 + 4 + 1);
  EXPECT_EQ(max_in_flight(ScheduleKind::interleaved, 4, 2, 8, 3), 4 + 1);
  EXPECT_EQ(max_in_flight(ScheduleKind::interleaved, 4, 2, 4, 0), 8);  // warm-up covers all M*V
  EXPECT_DOUBLE_EQ(ideal_bubble(ScheduleKind::interleaved, 4, 2, 8), 3.0 / 16);
  EXPECT_DOUBLE_EQ(ideal_bubble(ScheduleKind::one_f_one_b, 4, 1, 8), 3.0 / 8);
  EXPECT_DOUBLE_EQ(ideal_bubble(ScheduleKind::gpipe, 4, 1, 8), 3.0 / 8);
}

TEST(PipelineSchedule, InterleavedOrderFollowsMegatron) {
  // P=2, V=2, M=4, stage 0: forwards of mbs 0,1 on chunk 0, then on chunk 1,
  // then mbs 2,3; backwards start from chunk 1 (the model's last chunk).
  std::vector<std::pair<int, int>> fwd, bwd;  // (mb, chunk)
  for (const PipeInstr& in : make_schedule(ScheduleKind::interleaved, 2, 2, 4, 0)) {
    if (in.op == PipeOp::forward) fwd.push_back({in.mb, in.chunk});
    if (in.op == PipeOp::backward) bwd.push_back({in.mb, in.chunk});
  }
  const std::vector<std::pair<int, int>> want_fwd = {{0, 0}, {1, 0}, {0, 1}, {1, 1},
                                                     {2, 0}, {3, 0}, {2, 1}, {3, 1}};
  const std::vector<std::pair<int, int>> want_bwd = {{0, 1}, {1, 1}, {0, 0}, {1, 0},
                                                     {2, 1}, {3, 1}, {2, 0}, {3, 0}};
  EXPECT_EQ(fwd, want_fwd);
  EXPECT_EQ(bwd, want_bwd);
}

TEST(PipelineSchedule, NamesRoundTrip) {
  EXPECT_EQ(schedule_kind_from_name("gpipe"), ScheduleKind::gpipe);
  EXPECT_EQ(schedule_kind_from_name("1f1b"), ScheduleKind::one_f_one_b);
  EXPECT_EQ(schedule_kind_from_name("interleaved"), ScheduleKind::interleaved);
  try {
    schedule_kind_from_name("zero_bubble");
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("\"1f1b\""), std::string::npos) << e.what();
  }
  EXPECT_STREQ(pipe_op_name(PipeOp::recv_grad), "RecvGrad");
  EXPECT_EQ(to_string(PipeInstr{PipeOp::forward, 3, 1}), "Forward(mb=3,c=1)");
}

// Expects validate_schedule to throw a UserError whose message holds `hint`.
void expect_invalid(ScheduleKind kind, int P, int V, int M, const std::string& hint) {
  SCOPED_TRACE(detail::concat(schedule_kind_name(kind), " P=", P, " V=", V, " M=", M));
  try {
    validate_schedule(kind, P, V, M);
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(hint), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_schedule(kind, P, V, M, 0), UserError);
}

TEST(PipelineSchedule, InvalidCombinationsSayWhatWouldWork) {
  expect_invalid(ScheduleKind::interleaved, 4, 2, 6,
                 "num micro-batches 6 is not a multiple of pipeline.parallel_size 4 with the "
                 "interleaved schedule: use 4, 8 or 12");
  expect_invalid(ScheduleKind::interleaved, 4, 2, 3, "use 4, 8 or 12");
  expect_invalid(ScheduleKind::interleaved, 4, 1, 8, "use num_chunks 2 or more");
  expect_invalid(ScheduleKind::one_f_one_b, 4, 2, 8, "use num_chunks 1");
  expect_invalid(ScheduleKind::gpipe, 2, 3, 8, "use num_chunks 1");
  expect_invalid(ScheduleKind::one_f_one_b, 4, 1, 3, "use at least 4");
  expect_invalid(ScheduleKind::gpipe, 0, 1, 3, "parallel_size must be at least 1");
  expect_invalid(ScheduleKind::gpipe, 2, 0, 3, "num_chunks must be at least 1");
  expect_invalid(ScheduleKind::gpipe, 2, 1, 0, "micro-batches must be at least 1");
  EXPECT_NO_THROW(validate_schedule(ScheduleKind::gpipe, 4, 1, 3));  // GPipe allows M < P
  EXPECT_THROW(make_schedule(ScheduleKind::one_f_one_b, 4, 1, 8, 4), UserError);
}

// The simulator itself must catch broken programs, or the grid test proves nothing.
TEST(PipelineSimulator, CatchesDeadlockAndBrokenDependencies) {
  const ScheduleKind k = ScheduleKind::one_f_one_b;
  std::vector<std::vector<PipeInstr>> progs = {make_schedule(k, 2, 1, 2, 0),
                                               make_schedule(k, 2, 1, 2, 1)};
  ASSERT_EQ(simulate_programs(progs, 1, 2, 1, 2).error, "");

  // With 3 stages, the middle one waits for a gradient before it passes on any
  // activation: a cycle of receives.
  std::vector<std::vector<PipeInstr>> dead;
  for (int s = 0; s < 3; ++s) dead.push_back(make_schedule(k, 3, 1, 3, s));
  dead[1].insert(dead[1].begin(), PipeInstr{PipeOp::recv_grad, 0, 0});
  dead[1].erase(std::find(dead[1].begin() + 1, dead[1].end(), PipeInstr{PipeOp::recv_grad, 0, 0}));
  SimResult r = simulate_programs(dead, 1, 3, 1, 2);
  EXPECT_TRUE(r.deadlock);
  EXPECT_NE(r.error.find("deadlock"), std::string::npos) << r.error;

  // Stage 1 (the last) runs a backward before its forward.
  auto early = progs;
  early[1].insert(early[1].begin(), PipeInstr{PipeOp::backward, 1, 0});
  r = simulate_programs(early, 1, 2, 1, 2);
  EXPECT_FALSE(r.deadlock);
  EXPECT_NE(r.error.find("backward before its forward"), std::string::npos) << r.error;

  // A forward dropped: its send never happens, so its receiver deadlocks.
  auto missing = progs;
  missing[0].erase(missing[0].begin(), missing[0].begin() + 2);  // Forward(0), SendAct(0)
  EXPECT_TRUE(simulate_programs(missing, 1, 2, 1, 2).deadlock);

  // OptimizerStep before ReduceGrads.
  auto order = progs;
  std::swap(order[0][order[0].size() - 1], order[0][order[0].size() - 2]);
  r = simulate_programs(order, 1, 2, 1, 2);
  EXPECT_NE(r.error.find("before ReduceGrads"), std::string::npos) << r.error;
}

TEST(PipelineSchedule, PrintSmallInterleaved) {
  const int P = 2, V = 2, M = 4;
  std::cout << "interleaved P=" << P << " V=" << V << " M=" << M << "\n";
  for (int s = 0; s < P; ++s) {
    std::cout << "stage " << s << ":";
    for (const PipeInstr& in : make_schedule(ScheduleKind::interleaved, P, V, M, s))
      std::cout << " " << to_string(in);
    std::cout << "\n";
  }
  const SimResult r = simulate(ScheduleKind::interleaved, P, V, M);
  std::cout << "makespan " << r.makespan << " bubble " << r.bubble << " (ideal "
            << ideal_bubble(ScheduleKind::interleaved, P, V, M) << ")\n";
  EXPECT_EQ(r.error, "");
}

}  // namespace
}  // namespace zt
