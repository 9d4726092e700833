// validate_program (schedule.hpp): the rules one stage's instruction list
// must follow before the executor walks it.
#include <algorithm>
#include <map>
#include <utility>

#include "core/error.hpp"
#include "pipeline/schedule.hpp"

namespace zt {
namespace {

// Positions of one (micro-batch, chunk)'s instructions in the list; -1 when absent.
struct ChunkSteps {
  long recv_act = -1, forward = -1, send_act = -1;
  long recv_grad = -1, backward = -1, send_grad = -1;
};

[[noreturn]] void refuse(int stage, long at, const PipeInstr& ins, const std::string& why) {
  ZT_THROW("pipeline stage ", stage, ": instruction ", at, " ", to_string(ins), ": ", why);
}

}  // namespace

void validate_program(const std::vector<PipeInstr>& program, int P, int V, int stage, bool train) {
  ZT_CHECK(P >= 1 && V >= 1 && stage >= 0 && stage < P, "validate_program: stage ", stage, " of P=", P, " V=", V);
  const int last_global = P * V - 1;
  std::map<std::pair<int, int>, ChunkSteps> steps;  // by (mb, chunk)
  long reduce = -1, optimizer = -1, last_backward = -1;
  int M = 0;
  for (long i = 0; i < static_cast<long>(program.size()); ++i) {
    const PipeInstr& ins = program[static_cast<size_t>(i)];
    if (!runs_in_walk(ins.op, train)) continue;
    if (ins.op == PipeOp::reduce_grads || ins.op == PipeOp::optimizer_step) {
      if (ins.mb != -1 || ins.chunk != -1) refuse(stage, i, ins, "names a micro-batch or chunk");
      long& at = ins.op == PipeOp::reduce_grads ? reduce : optimizer;
      if (at >= 0) refuse(stage, i, ins, "appears twice");
      at = i;
      continue;
    }
    if (ins.mb < 0) refuse(stage, i, ins, "negative micro-batch");
    if (ins.chunk < 0 || ins.chunk >= V) refuse(stage, i, ins, detail::concat("chunk outside 0..", V - 1));
    if (reduce >= 0) refuse(stage, i, ins, "comes after ReduceGrads");
    M = std::max(M, ins.mb + 1);
    ChunkSteps& s = steps[{ins.mb, ins.chunk}];
    long* slot = nullptr;
    switch (ins.op) {
      case PipeOp::recv_act: slot = &s.recv_act; break;
      case PipeOp::forward: slot = &s.forward; break;
      case PipeOp::send_act: slot = &s.send_act; break;
      case PipeOp::recv_grad: slot = &s.recv_grad; break;
      case PipeOp::backward: slot = &s.backward; break;
      case PipeOp::send_grad: slot = &s.send_grad; break;
      default: refuse(stage, i, ins, "unknown operation");
    }
    if (*slot >= 0) refuse(stage, i, ins, detail::concat("appears twice (first at ", *slot, ")"));
    *slot = i;
    if (ins.op == PipeOp::backward) last_backward = i;
  }
  for (int mb = 0; mb < M; ++mb) {
    for (int c = 0; c < V; ++c) {
      const int g = c * P + stage;
      const auto it = steps.find({mb, c});
      const PipeInstr fwd{PipeOp::forward, mb, c};
      if (it == steps.end() || it->second.forward < 0)
        ZT_THROW("pipeline stage ", stage, ": ", to_string(fwd), " is missing (micro-batches 0..", M - 1, ")");
      const ChunkSteps& s = it->second;
      // A message exists exactly when the chunk has a neighbour on that side,
      // and sits on the right side of its compute.
      const auto message = [&](long at, bool needed, bool before, long compute, PipeOp op, PipeOp compute_op) {
        const PipeInstr msg{op, mb, c};
        if (!needed && at >= 0)
          refuse(stage, at, msg, detail::concat("global chunk ", g, " has no neighbour to talk to"));
        if (needed && at < 0) ZT_THROW("pipeline stage ", stage, ": ", to_string(msg), " is missing");
        if (needed && (before ? at > compute : at < compute))
          refuse(stage, at, msg,
                 detail::concat(before ? "comes after " : "comes before ", to_string(PipeInstr{compute_op, mb, c}),
                                " (instruction ", compute, ")"));
      };
      message(s.recv_act, g != 0, true, s.forward, PipeOp::recv_act, PipeOp::forward);
      message(s.send_act, g != last_global, false, s.forward, PipeOp::send_act, PipeOp::forward);
      if (!train) continue;
      const PipeInstr bwd{PipeOp::backward, mb, c};
      if (s.backward < 0) ZT_THROW("pipeline stage ", stage, ": ", to_string(bwd), " is missing");
      if (s.backward < s.forward) refuse(stage, s.backward, bwd, "comes before its Forward");
      message(s.recv_grad, g != last_global, true, s.backward, PipeOp::recv_grad, PipeOp::backward);
      message(s.send_grad, g != 0, false, s.backward, PipeOp::send_grad, PipeOp::backward);
      if (c + 1 < V) {
        const auto next = steps.find({mb, c + 1});
        if (next != steps.end() && next->second.backward > s.backward)
          refuse(stage, s.backward, bwd,
                 detail::concat("goes back before chunk ", c + 1, " of the same micro-batch (instruction ",
                                next->second.backward, ")"));
      }
    }
  }
  if (!train) return;
  const PipeInstr red{PipeOp::reduce_grads}, opt{PipeOp::optimizer_step};
  if (reduce < 0) ZT_THROW("pipeline stage ", stage, ": ReduceGrads is missing");
  if (reduce < last_backward) refuse(stage, reduce, red, "comes before the last Backward");
  if (optimizer < 0) ZT_THROW("pipeline stage ", stage, ": OptimizerStep is missing");
  if (optimizer < reduce) refuse(stage, optimizer, opt, "comes before ReduceGrads");
  if (optimizer != static_cast<long>(program.size()) - 1) refuse(stage, optimizer, opt, "is not the last instruction");
}

}  // namespace zt
