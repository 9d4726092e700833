// Simulation of all pipeline stages together, under the executor's model:
// sends never block (buffered); a RecvX blocks until the peer has executed the
// matching SendX (same kind, micro-batch and chunk boundary); Forward of a
// chunk takes tf time units and Backward tb units; sends, receives,
// ReduceGrads and OptimizerStep take none. It is how the schedules are tested
// without MPI: no deadlock, every dependency met, in-flight bound, bubble.
#pragma once

#include <string>
#include <vector>

#include "pipeline/schedule.hpp"

namespace zt {

struct SimResult {
  bool deadlock = false;
  std::string error;               // first violated rule (or the deadlock), empty if none
  double makespan = 0;             // when the last stage finished its last instruction
  std::vector<double> idle;        // per stage: makespan - busy compute time
  std::vector<int> max_in_flight;  // per stage: most forwards without their backward yet
  double bubble = 0;               // (makespan - ideal) / ideal, ideal = M*V*(tf+tb)
};

// Simulates make_schedule(kind, P, V, M, s) for every stage s with
// tf = 1/V and tb = 2/V per chunk (a whole stage: forward 1, backward 2).
SimResult simulate(ScheduleKind kind, int P, int V, int M);

// Simulates given per-stage programs (programs.size() == P) with the given
// per-chunk times; what simulate() runs, exposed so that tests can check that
// broken programs are caught.
SimResult simulate_programs(const std::vector<std::vector<PipeInstr>>& programs, int V, int M,
                            double tf, double tb);

// [Note: NCCL p2p model] The pipeline's point-to-point traffic under NCCL's
// semantics, taken conservatively: NCCL has no tags, and every op of a rank
// runs on one stream in issue order, a send not finishing before its peer
// has posted the matching receive (messages are larger than NCCL's buffers).
//   - Stage s is pipeline rank s; each op's peer is p2p_peer (schedule.hpp).
//   - Each rank walks its groups (p2p_groups) in order and posts all ops of
//     its current group at once, in the group's order.
//   - The n-th send from a to b pairs with the n-th receive on b from a, in
//     posting order; an op completes once its counterpart is posted.
//   - A rank goes on to its next group only when every op of the current one
//     has completed (the stream's order; compute takes no time here, and the
//     list's data dependencies are simulate()'s business).
// Checked: no deadlock; every order-matched pair carries the same message
// (activation or gradient, micro-batch, boundary) and so the same MPI tag,
// i.e. order matching pairs what tag matching would; each op's peer owns the
// chunk on the other side of its boundary (the ring wrap-around of
// interleaving included); tags are unique within the step; the groups cover
// every executed p2p instruction once.
struct NcclSimResult {
  bool deadlock = false;   // no rank could go on while some had groups left
  bool mismatch = false;   // an order-matched pair carried different messages
  std::string error;       // the first failure (a mismatch before a deadlock), empty if none
  int groups = 0;          // groups over all ranks
  int mixed_groups = 0;    // groups holding both a send and a receive
  int largest_group = 0;   // most ops in one group
};

// `groups[s]` cuts `programs[s]`; train false skips the gradient ops (their
// indices must then be in no group).
NcclSimResult simulate_nccl_p2p(const std::vector<std::vector<PipeInstr>>& programs,
                                const std::vector<std::vector<P2pGroup>>& groups, int V, bool train);
// make_schedule for every stage, cut by p2p_groups: what the executor issues.
NcclSimResult simulate_nccl_p2p(ScheduleKind kind, int P, int V, int M, bool train);

}  // namespace zt
