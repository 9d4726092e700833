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

}  // namespace zt
