// The pipeline schedule as data (DESIGN.md, "Pipeline schedule as data"): a
// pure function maps (stages P, chunks per stage V, micro-batches M, stage s)
// to the ordered instruction list that stage s walks for one optimizer step.
// The executor only walks the list; simulate.hpp proves the lists of all
// stages together free of deadlock and of broken dependencies.
//
// Chunk numbering: the model's layers are cut into P*V chunks in order. Stage
// s holds local chunks c = 0..V-1, which are global chunks g = c*P + s
// (Megatron's virtual pipeline layout), so activations go round the ring of
// stages V times: global chunk g-1 lives on stage (s-1+P)%P.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zt {

enum class ScheduleKind { gpipe, one_f_one_b, interleaved };

// "gpipe", "1f1b", "interleaved" (DeepSpeed's pipeline.pipe_schedule_name);
// UserError naming the accepted names otherwise.
ScheduleKind schedule_kind_from_name(const std::string& name);
const char* schedule_kind_name(ScheduleKind kind);

enum class PipeOp : uint8_t {
  forward,
  backward,
  send_act,   // output of local chunk `chunk` for `mb` -> stage holding global chunk g+1
  recv_act,   // input of local chunk `chunk` for `mb` <- stage holding global chunk g-1
  send_grad,  // input-gradient of local chunk `chunk` -> stage holding global chunk g-1
  recv_grad,  // output-gradient of local chunk `chunk` <- stage holding global chunk g+1
  reduce_grads,
  optimizer_step,
};
const char* pipe_op_name(PipeOp op);

struct PipeInstr {
  PipeOp op;
  int mb = -1;     // micro-batch 0..M-1; -1 for reduce_grads / optimizer_step
  int chunk = -1;  // LOCAL chunk 0..V-1 on this stage; global chunk = chunk * P + stage
};
inline bool operator==(const PipeInstr& a, const PipeInstr& b) {
  return a.op == b.op && a.mb == b.mb && a.chunk == b.chunk;
}
std::string to_string(const PipeInstr& instr);  // e.g. "F(mb=3,c=1)", "RecvGrad(mb=0,c=0)"

// Checks (P, V, M) for the kind and throws UserError with the values that
// would work:
//   all kinds:   P >= 1, V >= 1, M >= 1
//   gpipe, 1f1b: V == 1
//   1f1b:        M >= P
//   interleaved: V >= 2 and M a multiple of P (hence M >= P)
void validate_schedule(ScheduleKind kind, int P, int V, int M);

// The ordered instruction list of `stage` for one optimizer step. Every
// Forward(mb,c) is immediately preceded by RecvAct(mb,c) unless its global
// chunk is 0 and immediately followed by SendAct(mb,c) unless its global chunk
// is the last; every Backward(mb,c) is immediately preceded by RecvGrad(mb,c)
// unless its global chunk is the last and immediately followed by
// SendGrad(mb,c) unless its global chunk is 0. Ends with ReduceGrads,
// OptimizerStep. Validates first.
std::vector<PipeInstr> make_schedule(ScheduleKind kind, int P, int V, int M, int stage);

// The most (micro-batch, chunk) pairs of `stage` that have run Forward but not
// yet Backward at any point of its list: the activation memory bound.
//   gpipe: M*V;  1f1b: min(P - stage, M);
//   interleaved: w + 1 with w = min(2*(P-stage-1) + (V-1)*P, M*V) warm-up
//   forwards, or M*V when the warm-up already covers everything.
int max_in_flight(ScheduleKind kind, int P, int V, int M, int stage);

// Ideal bubble fraction (bubble time over ideal compute time) for equal
// per-chunk times: (P-1)/(V*M) for 1f1b and interleaved, (P-1)/M for gpipe.
double ideal_bubble(ScheduleKind kind, int P, int V, int M);

}  // namespace zt
