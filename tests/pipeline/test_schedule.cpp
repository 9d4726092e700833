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

// Where `msg` is in `prog`, checked against its compute at `at`: once,
// before it (receives) or after it (sends); GPipe and 1F1B right next to it,
// interleaved with at most one other compute between (the steady state's
// Forward(f) Backward(b) between two exchanges).
void expect_message(const Combo& c, const std::vector<PipeInstr>& prog, size_t at, PipeInstr msg) {
  SCOPED_TRACE(to_string(prog[at]) + " needs " + to_string(msg));
  const size_t end = prog.size() - 2;
  const auto n = std::count(prog.begin(), prog.begin() + static_cast<long>(end), msg);
  ASSERT_EQ(n, 1);
  const size_t j = static_cast<size_t>(std::find(prog.begin(), prog.end(), msg) - prog.begin());
  const bool recv = !is_send(msg.op);
  ASSERT_TRUE(recv ? j < at : j > at);
  if (c.kind != ScheduleKind::interleaved) {
    EXPECT_EQ(recv ? at - j : j - at, 1u);
    return;
  }
  int computes = 0;
  for (size_t k = std::min(j, at) + 1; k < std::max(j, at); ++k)
    computes += prog[k].op == PipeOp::forward || prog[k].op == PipeOp::backward;
  EXPECT_LE(computes, 1);
}

// Structure of one stage's list, checked on the list alone: where each
// compute's messages are (schedule.hpp), and each (mb, chunk) forward once
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
      if (g != 0) expect_message(c, prog, i, {PipeOp::recv_act, in.mb, in.chunk});
      if (g != last) expect_message(c, prog, i, {PipeOp::send_act, in.mb, in.chunk});
    } else if (in.op == PipeOp::backward) {
      EXPECT_TRUE(bwd_at.emplace(key, i).second) << "backward twice";
      if (g != last) expect_message(c, prog, i, {PipeOp::recv_grad, in.mb, in.chunk});
      if (g != 0) expect_message(c, prog, i, {PipeOp::send_grad, in.mb, in.chunk});
    } else {
      EXPECT_TRUE(is_p2p(in.op)) << to_string(in);
      const int g_msg = in.op == PipeOp::send_act || in.op == PipeOp::recv_grad ? g + 1 : g;
      EXPECT_TRUE(g_msg >= 1 && g_msg <= last) << to_string(in) << " crosses no boundary";
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

// --- NCCL point-to-point (simulate.hpp, [Note: NCCL p2p model]) ------------

TEST(PipelineP2p, PeersAndMessagesFollowTheRing) {
  // P=4, V=2: stage 3's chunk 0 is global chunk 3; its output goes round the
  // ring to stage 0's chunk 1 (global 4), and the gradient comes back.
  const int P = 4, V = 2;
  EXPECT_EQ(p2p_peer({PipeOp::send_act, 5, 0}, P, 3), 0);
  EXPECT_EQ(p2p_peer({PipeOp::recv_grad, 5, 0}, P, 3), 0);
  EXPECT_EQ(p2p_peer({PipeOp::recv_act, 5, 1}, P, 0), 3);
  EXPECT_EQ(p2p_peer({PipeOp::send_grad, 5, 1}, P, 0), 3);
  EXPECT_EQ(p2p_peer({PipeOp::send_act, 5, 0}, P, 1), 2);
  EXPECT_EQ(p2p_peer({PipeOp::send_grad, 5, 0}, P, 1), 0);
  const P2pMessage act{false, 5, 4}, grad{true, 5, 4};
  EXPECT_EQ(p2p_message({PipeOp::send_act, 5, 0}, P, 3), act);
  EXPECT_EQ(p2p_message({PipeOp::recv_act, 5, 1}, P, 0), act);
  EXPECT_EQ(p2p_message({PipeOp::send_grad, 5, 1}, P, 0), grad);
  EXPECT_EQ(p2p_message({PipeOp::recv_grad, 5, 0}, P, 3), grad);
  EXPECT_NE(p2p_tag(act, P, V), p2p_tag(grad, P, V));
  EXPECT_EQ(to_string(act), "act(mb=5,boundary=4)");
}

TEST(PipelineP2p, GroupsAreRunsOfSendsAndReceivesBetweenComputes) {
  // 1F1B P=2 M=3 stage 0: F0 SA0 | F1 SA1 RG0 B0 | F2 SA2 RG1 B1 | RG2 B2.
  const auto prog = make_schedule(ScheduleKind::one_f_one_b, 2, 1, 3, 0);
  std::vector<std::vector<std::string>> got;
  for (const P2pGroup& g : p2p_groups(prog, true)) {
    got.emplace_back();
    for (size_t i : g.ops) got.back().push_back(to_string(prog[i]));
  }
  const std::vector<std::vector<std::string>> want = {
      {"SendAct(mb=0,c=0)"},
      {"SendAct(mb=1,c=0)", "RecvGrad(mb=0,c=0)"},
      {"SendAct(mb=2,c=0)", "RecvGrad(mb=1,c=0)"},
      {"RecvGrad(mb=2,c=0)"}};
  EXPECT_EQ(got, want);
  // Evaluation skips the gradient ops, so each send stands alone.
  EXPECT_EQ(p2p_groups(prog, false).size(), 3u);
  for (const P2pGroup& g : p2p_groups(prog, false)) EXPECT_EQ(g.ops.size(), 1u);
  // The last stage of 1F1B P=2: RA0 | F0 B0 | SG0 RA1 | F1 B1 | SG1 RA2 | ...
  const auto last = make_schedule(ScheduleKind::one_f_one_b, 2, 1, 3, 1);
  const auto groups = p2p_groups(last, true);
  ASSERT_EQ(groups.size(), 4u);
  EXPECT_EQ(to_string(last[groups[1].ops[0]]), "SendGrad(mb=0,c=0)");
  EXPECT_EQ(to_string(last[groups[1].ops[1]]), "RecvAct(mb=1,c=0)");
  // Evaluation: RA0 | F0 | RA1 | F1 | RA2 | F2 (the skipped SendGrad joins nothing).
  EXPECT_EQ(p2p_groups(last, false).size(), 3u);
}

// The whole grid, train and eval, under NCCL's order matching and one stream
// per rank: no deadlock, and order matching pairs what tag matching pairs.
TEST(PipelineP2p, GridRunsUnderNcclSemantics) {
  int checked = 0, mixed = 0;
  for (const Combo& c : valid_grid())
    for (bool train : {true, false}) {
      SCOPED_TRACE(describe(c) + (train ? " train" : " eval"));
      const NcclSimResult r = simulate_nccl_p2p(c.kind, c.P, c.V, c.M, train);
      ASSERT_EQ(r.error, "");
      ASSERT_FALSE(r.deadlock);
      ASSERT_FALSE(r.mismatch);
      // A group holds the sends after one compute and the receives before
      // the next: one of each, or in the interleaved steady state two of
      // each ([Note: interleaved exchange]).
      EXPECT_LE(r.largest_group, c.kind == ScheduleKind::interleaved ? 4 : 2);
      mixed += r.mixed_groups;
      ++checked;
    }
  EXPECT_GT(checked, 600);
  EXPECT_GT(mixed, 0);  // the groups that ungrouped NCCL calls would deadlock on
}

// The evaluation list (make_forward_schedule: each micro-batch through all
// its chunks), for every P 1..8, V 1..4, M 1..4P.
TEST(PipelineP2p, ForwardOnlyListsRunUnderNcclSemantics) {
  int checked = 0;
  for (int P = 1; P <= 8; ++P)
    for (int V = 1; V <= 4; ++V)
      for (int M = 1; M <= 4 * P; ++M) {
        SCOPED_TRACE(detail::concat("forward only P=", P, " V=", V, " M=", M));
        std::vector<std::vector<PipeInstr>> progs;
        std::vector<std::vector<P2pGroup>> groups;
        for (int s = 0; s < P; ++s) {
          progs.push_back(make_forward_schedule(P, V, M, s));
          groups.push_back(p2p_groups(progs.back(), false));
          EXPECT_EQ(std::count_if(progs.back().begin(), progs.back().end(),
                                  [](const PipeInstr& in) { return in.op == PipeOp::forward; }),
                    M * V);
        }
        const NcclSimResult r = simulate_nccl_p2p(progs, groups, V, false);
        ASSERT_EQ(r.error, "");
        ++checked;
      }
  EXPECT_EQ(checked, 576);  // 4 values of V times 4P values of M, summed over P = 1..8
}

// Each op in its own group: what issuing NCCL calls one by one on a stream
// does. 1F1B's steady state then deadlocks (stage 0's SendAct(1) waits for
// stage 1's RecvAct(1), which comes after its SendGrad(0), which waits for
// stage 0's RecvGrad(0), which comes after SendAct(1)); the grouped cut runs.
TEST(PipelineP2p, CatchesTheUngroupedDeadlock) {
  const int P = 2, V = 1, M = 4;
  std::vector<std::vector<PipeInstr>> progs;
  std::vector<std::vector<P2pGroup>> grouped, single;
  for (int s = 0; s < P; ++s) {
    progs.push_back(make_schedule(ScheduleKind::one_f_one_b, P, V, M, s));
    grouped.push_back(p2p_groups(progs.back(), true));
    single.emplace_back();
    for (const P2pGroup& g : grouped.back())
      for (size_t i : g.ops) single.back().push_back(P2pGroup{{i}});
  }
  EXPECT_EQ(simulate_nccl_p2p(progs, grouped, V, true).error, "");
  const NcclSimResult r = simulate_nccl_p2p(progs, single, V, true);
  EXPECT_TRUE(r.deadlock);
  EXPECT_FALSE(r.mismatch);
  EXPECT_NE(r.error.find("deadlock: stage 0 group 1 instruction 3 SendAct(mb=1,c=0) (to stage 1) waits"),
            std::string::npos) << r.error;
  EXPECT_NE(r.error.find("stage 1 group 1 instruction 3 SendGrad(mb=0,c=0) (to stage 0) waits"),
            std::string::npos) << r.error;
  // The MPI model (buffered sends, tag matching) has no such deadlock.
  EXPECT_EQ(simulate_programs(progs, V, M, 1, 2).error, "");

  // Ungrouped, even the longer pipelines deadlock.
  for (int P2 : {3, 4, 8}) {
    std::vector<std::vector<PipeInstr>> p2;
    std::vector<std::vector<P2pGroup>> s2;
    for (int s = 0; s < P2; ++s) {
      p2.push_back(make_schedule(ScheduleKind::one_f_one_b, P2, 1, 2 * P2, s));
      s2.emplace_back();
      for (const P2pGroup& g : p2p_groups(p2.back(), true))
        for (size_t i : g.ops) s2.back().push_back(P2pGroup{{i}});
    }
    EXPECT_TRUE(simulate_nccl_p2p(p2, s2, 1, true).deadlock) << "P=" << P2;
  }
}

// The same computes with each message right next to its compute (1F1B's
// order, the interleaved list's before [Note: interleaved exchange]).
std::vector<PipeInstr> messages_next_to_computes(const std::vector<PipeInstr>& prog) {
  std::vector<PipeInstr> out;
  const auto has = [&](PipeInstr m) { return std::find(prog.begin(), prog.end(), m) != prog.end(); };
  for (const PipeInstr& in : prog) {
    if (in.op != PipeOp::forward && in.op != PipeOp::backward) continue;
    const bool f = in.op == PipeOp::forward;
    const PipeInstr recv{f ? PipeOp::recv_act : PipeOp::recv_grad, in.mb, in.chunk};
    const PipeInstr send{f ? PipeOp::send_act : PipeOp::send_grad, in.mb, in.chunk};
    if (has(recv)) out.push_back(recv);
    out.push_back(in);
    if (has(send)) out.push_back(send);
  }
  out.push_back({PipeOp::reduce_grads});
  out.push_back({PipeOp::optimizer_step});
  return out;
}

// Interleaved with every message next to its compute is fine for MPI but
// deadlocks under NCCL: stage 0's SendGrad(mb=0,c=1) is alone in its group
// (the next forward is of chunk 0, nothing to receive) and waits for stage 1,
// which waits in its own group for a receive stage 0 posts only later.
TEST(PipelineP2p, InterleavedNeedsOneExchangePerStep) {
  const int P = 2, V = 2, M = 4;
  std::vector<std::vector<PipeInstr>> progs;
  std::vector<std::vector<P2pGroup>> groups;
  for (int s = 0; s < P; ++s) {
    progs.push_back(messages_next_to_computes(make_schedule(ScheduleKind::interleaved, P, V, M, s)));
    groups.push_back(p2p_groups(progs.back(), true));
  }
  EXPECT_EQ(simulate_programs(progs, V, M, 1.0 / V, 2.0 / V).error, "");
  const NcclSimResult r = simulate_nccl_p2p(progs, groups, V, true);
  EXPECT_TRUE(r.deadlock);
  EXPECT_NE(r.error.find("stage 0 group 5 instruction 14 SendGrad(mb=0,c=1) (to stage 1) waits"),
            std::string::npos) << r.error;

  // Within a group the order counts too: with P = 2 both neighbours are one
  // rank, so activations and gradients share a channel, and receiving the
  // gradient before the activation pairs each with the other's send.
  progs.clear();
  groups.clear();
  for (int s = 0; s < P; ++s) {
    progs.push_back(make_schedule(ScheduleKind::interleaved, P, V, M, s));
    for (size_t i = 0; i + 1 < progs.back().size(); ++i)
      if (progs.back()[i].op == PipeOp::recv_act && progs.back()[i + 1].op == PipeOp::recv_grad)
        std::swap(progs.back()[i], progs.back()[i + 1]);
    groups.push_back(p2p_groups(progs.back(), true));
  }
  EXPECT_EQ(simulate_programs(progs, V, M, 1.0 / V, 2.0 / V).error, "");
  const NcclSimResult swapped = simulate_nccl_p2p(progs, groups, V, true);
  EXPECT_TRUE(swapped.mismatch);
  EXPECT_NE(swapped.error.find("SendAct(mb=2,c=0) sends act(mb=2,boundary=1)"), std::string::npos)
      << swapped.error;
  EXPECT_NE(swapped.error.find("receives grad(mb=0,boundary=2)"), std::string::npos) << swapped.error;
}

// Tag matching (MPI) pairs messages by identity, order matching (NCCL) by
// position: a receiver that takes micro-batch 1 before micro-batch 0 is fine
// for the first and wrong for the second.
TEST(PipelineP2p, CatchesOrderMismatchThatTagsWouldHide) {
  const int P = 2, V = 1, M = 2;
  std::vector<std::vector<PipeInstr>> progs;
  for (int s = 0; s < P; ++s) progs.push_back(make_schedule(ScheduleKind::gpipe, P, V, M, s));
  // Stage 1 (the last): RA0 F0 RA1 F1 ... -> RA1 F1 RA0 F0 ...
  ASSERT_EQ(to_string(progs[1][0]), "RecvAct(mb=0,c=0)");
  ASSERT_EQ(to_string(progs[1][2]), "RecvAct(mb=1,c=0)");
  std::swap(progs[1][0], progs[1][2]);
  std::swap(progs[1][1], progs[1][3]);
  ASSERT_EQ(simulate_programs(progs, V, M, 1, 2).error, "");  // tags: fine
  std::vector<std::vector<P2pGroup>> groups;
  for (const auto& p : progs) groups.push_back(p2p_groups(p, true));
  const NcclSimResult r = simulate_nccl_p2p(progs, groups, V, true);
  EXPECT_TRUE(r.mismatch);
  EXPECT_NE(r.error.find("mismatch: message 0 from stage 0 to stage 1: stage 0 group 0 instruction 1 "
                         "SendAct(mb=0,c=0) sends act(mb=0,boundary=1)"),
            std::string::npos) << r.error;
  EXPECT_NE(r.error.find("receives act(mb=1,boundary=1)"), std::string::npos) << r.error;

  // A group that names a compute instruction, or leaves a receive out, is refused.
  auto bad = groups;
  bad[0][0].ops.push_back(0);  // Forward(mb=0)
  EXPECT_NE(simulate_nccl_p2p(progs, bad, V, true).error.find("not an executed send or receive"),
            std::string::npos);
  bad = groups;
  bad[1].erase(bad[1].begin());
  EXPECT_NE(simulate_nccl_p2p(progs, bad, V, true).error.find("is in 0 groups, not 1"), std::string::npos);
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

namespace zt {
namespace {

// [Note: breadth-first walk]: groups of G, forwards then backwards in
// micro-batch order, a valid list of one stage with at most G in flight.
TEST(PipelineSchedule, BreadthFirstGroups) {
  const std::vector<PipeInstr> p = make_breadth_first_schedule(6, 3);
  EXPECT_NO_THROW(validate_program(p, 1, 1, 0, true));
  std::string order;
  for (const PipeInstr& i : p) order += to_string(i) + " ";
  EXPECT_EQ(order,
            "Forward(mb=0,c=0) Forward(mb=1,c=0) Forward(mb=2,c=0) Backward(mb=0,c=0) Backward(mb=1,c=0) "
            "Backward(mb=2,c=0) Forward(mb=3,c=0) Forward(mb=4,c=0) Forward(mb=5,c=0) Backward(mb=3,c=0) "
            "Backward(mb=4,c=0) Backward(mb=5,c=0) ReduceGrads OptimizerStep ");
  int in_flight = 0, most = 0;
  for (const PipeInstr& i : p) {
    in_flight += i.op == PipeOp::forward ? 1 : i.op == PipeOp::backward ? -1 : 0;
    most = std::max(most, in_flight);
  }
  EXPECT_EQ(most, 3);
  EXPECT_EQ(make_breadth_first_schedule(4, 4).size(), 10u);
  EXPECT_THROW(make_breadth_first_schedule(4, 5), UserError);
  EXPECT_THROW(make_breadth_first_schedule(4, 0), UserError);
}

// A group that does not divide the step: the full groups first, the last
// takes what is left.
TEST(PipelineSchedule, BreadthFirstGroupsTheLastTakesWhatIsLeft) {
  const std::vector<PipeInstr> p = make_breadth_first_schedule(5, 3);
  EXPECT_NO_THROW(validate_program(p, 1, 1, 0, true));
  std::string order;
  for (const PipeInstr& i : p) order += to_string(i) + " ";
  EXPECT_EQ(order,
            "Forward(mb=0,c=0) Forward(mb=1,c=0) Forward(mb=2,c=0) Backward(mb=0,c=0) Backward(mb=1,c=0) "
            "Backward(mb=2,c=0) Forward(mb=3,c=0) Forward(mb=4,c=0) Backward(mb=3,c=0) Backward(mb=4,c=0) "
            "ReduceGrads OptimizerStep ");
}

}  // namespace
}  // namespace zt
