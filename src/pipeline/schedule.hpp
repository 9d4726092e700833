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

// The ordered instruction list of `stage` for one optimizer step. Each
// compute has its messages: RecvAct(mb,c) before Forward(mb,c) unless its
// global chunk is 0, SendAct(mb,c) after it unless its global chunk is the
// last, RecvGrad(mb,c) before Backward(mb,c) unless its global chunk is the
// last, SendGrad(mb,c) after it unless its global chunk is 0. GPipe and 1F1B
// put each receive immediately before its compute and each send immediately
// after. The interleaved steady state runs Forward(f) Backward(b) back to back
// between one exchange and the next ([Note: interleaved exchange] in
// schedule.cpp): RecvAct(f) RecvGrad(b) Forward(f) Backward(b) SendAct(f)
// SendGrad(b), so at most one compute separates a message from its own.
// Ends with ReduceGrads, OptimizerStep. Validates first.
std::vector<PipeInstr> make_schedule(ScheduleKind kind, int P, int V, int M, int stage);

// The evaluation list of `stage` (forwards only, for PipelineExecutor::run
// with train false): each micro-batch in turn through every local chunk,
// RecvAct(mb,c) Forward(mb,c) SendAct(mb,c), the receive left out for global
// chunk 0 and the send for the last; no ReduceGrads / OptimizerStep. Any
// P, V, M >= 1.
std::vector<PipeInstr> make_forward_schedule(int P, int V, int M, int stage);

// Checks one stage's list before the executor walks it, and throws zt::Error
// naming the first broken rule and the instruction (a hand-written or
// corrupted list is refused, never half-run). With train false the gradient
// instructions, ReduceGrads and OptimizerStep are skipped and not checked.
// The micro-batches are 0..M-1 with M = 1 + the largest mb in the list.
//   - every op names a local chunk 0..V-1 and a micro-batch >= 0 (ReduceGrads
//     and OptimizerStep name none);
//   - each (mb, c) runs Forward once and, training, Backward once after it;
//     a micro-batch goes back through its chunks in the reverse order;
//   - RecvAct once before the Forward it feeds, unless its global chunk is 0;
//     SendAct once after it, unless its global chunk is the last; RecvGrad
//     once before its Backward unless last; SendGrad once after it unless 0;
//   - training: ReduceGrads once after every Backward, then OptimizerStep
//     once, as the last instruction.
void validate_program(const std::vector<PipeInstr>& program, int P, int V, int stage, bool train);

// One stage holding the whole model (P = V = 1), its M micro-batches in
// groups of G ([Note: breadth-first walk] in executor.hpp): per group, the
// Forwards of its micro-batches in order, then their Backwards in the same
// order (each unit's gradient then sums the micro-batches in the order of
// the 1F1B list); ReduceGrads, OptimizerStep. 1 <= G <= M; when G does
// not divide M the last group takes the M mod G left (the first groups are
// the full ones: with the exact update offloaded, the first group's forward
// is what runs under the previous step's host update, [Note: streamed
// update] in optim/offload_adamw.hpp). At most G micro-batches are in
// flight.
std::vector<PipeInstr> make_breadth_first_schedule(int M, int G);

// The most (micro-batch, chunk) pairs of `stage` that have run Forward but not
// yet Backward at any point of its list: the activation memory bound.
//   gpipe: M*V;  1f1b: min(P - stage, M);
//   interleaved: w + 1 with w = min(2*(P-stage-1) + (V-1)*P, M*V) warm-up
//   forwards, or M*V when the warm-up already covers everything.
int max_in_flight(ScheduleKind kind, int P, int V, int M, int stage);

// --- Point-to-point: peers, identities and groups --------------------------
//
// Stage s is rank s of the pipeline group. Activations go to the next stage
// and gradients to the previous one, round the ring: the last stage's output
// of local chunk c (c < V-1) goes to stage 0's chunk c+1.

inline bool is_p2p(PipeOp op) {
  return op == PipeOp::send_act || op == PipeOp::recv_act || op == PipeOp::send_grad ||
         op == PipeOp::recv_grad;
}
inline bool is_send(PipeOp op) { return op == PipeOp::send_act || op == PipeOp::send_grad; }
// Backward and the gradient messages.
inline bool is_grad_op(PipeOp op) {
  return op == PipeOp::backward || op == PipeOp::send_grad || op == PipeOp::recv_grad;
}
// Whether a walk runs `op`: an evaluation (train false) skips the gradient
// ops, ReduceGrads and OptimizerStep; they neither run nor join or split a
// p2p group, and validate_program does not check them.
inline bool runs_in_walk(PipeOp op, bool train) {
  return train || !(is_grad_op(op) || op == PipeOp::reduce_grads || op == PipeOp::optimizer_step);
}

// The pipeline rank a p2p instruction of `stage` talks to: (stage+1)%P for
// SendAct and RecvGrad, (stage-1+P)%P for RecvAct and SendGrad.
int p2p_peer(const PipeInstr& instr, int P, int stage);

// What a message carries, the same on both ends: activation or gradient,
// micro-batch, and the boundary it crosses, named by the global chunk on its
// downstream side (the boundary between global chunks b-1 and b).
struct P2pMessage {
  bool grad = false;
  int mb = -1;
  int boundary = -1;
};
inline bool operator==(const P2pMessage& a, const P2pMessage& b) {
  return a.grad == b.grad && a.mb == b.mb && a.boundary == b.boundary;
}
P2pMessage p2p_message(const PipeInstr& instr, int P, int stage);
std::string to_string(const P2pMessage& m);  // e.g. "act(mb=3,boundary=5)"
// The MPI tag of the message (unique per message of one step).
int p2p_tag(const P2pMessage& m, int P, int V);

// [Note: p2p groups] A stage's list is cut into groups of p2p instructions:
// a group is a maximal run of SendX/RecvX with no executed compute between
// (what runs_in_walk skips with train false neither joins nor splits a
// group). Each group is issued as one NCCL group
// (ncclGroupStart/End): every op of the group is posted, in list order, before
// any is waited, so a send and a receive that need their peers' mirrored pair
// (1F1B's SendAct(k+1)+RecvGrad(k) against SendGrad(k)+RecvAct(k+1)) proceed
// together, as in Megatron's send_forward_recv_backward. The executor and
// simulate_nccl_p2p (simulate.hpp) both take the groups from here.
struct P2pGroup {
  std::vector<size_t> ops;  // indices into the stage's list, in posting order
};
std::vector<P2pGroup> p2p_groups(const std::vector<PipeInstr>& stage_schedule, bool train);

// Ideal bubble fraction (bubble time over ideal compute time) for equal
// per-chunk times: (P-1)/(V*M) for 1f1b and interleaved, (P-1)/M for gpipe.
double ideal_bubble(ScheduleKind kind, int P, int V, int M);

}  // namespace zt
