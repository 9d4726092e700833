#include "pipeline/schedule.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace zt {

ScheduleKind schedule_kind_from_name(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::gpipe;
  if (name == "1f1b") return ScheduleKind::one_f_one_b;
  if (name == "interleaved") return ScheduleKind::interleaved;
  ZT_USER_ERROR("pipeline.pipe_schedule_name \"", name,
                "\" is not a known schedule: use \"1f1b\", \"interleaved\" or \"gpipe\"");
}

const char* schedule_kind_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::gpipe: return "gpipe";
    case ScheduleKind::one_f_one_b: return "1f1b";
    case ScheduleKind::interleaved: return "interleaved";
  }
  return "?";
}

const char* pipe_op_name(PipeOp op) {
  switch (op) {
    case PipeOp::forward: return "Forward";
    case PipeOp::backward: return "Backward";
    case PipeOp::send_act: return "SendAct";
    case PipeOp::recv_act: return "RecvAct";
    case PipeOp::send_grad: return "SendGrad";
    case PipeOp::recv_grad: return "RecvGrad";
    case PipeOp::reduce_grads: return "ReduceGrads";
    case PipeOp::optimizer_step: return "OptimizerStep";
  }
  return "?";
}

std::string to_string(const PipeInstr& instr) {
  if (instr.op == PipeOp::reduce_grads || instr.op == PipeOp::optimizer_step)
    return pipe_op_name(instr.op);
  return detail::concat(pipe_op_name(instr.op), "(mb=", instr.mb, ",c=", instr.chunk, ")");
}

namespace {

// "use 4, 8 or 12": the multiples of P around M that a user would pick.
std::string multiples_near(int M, int P) {
  const int below = (M / P) * P;
  std::vector<int> options;
  if (below >= P) options.push_back(below);
  for (int k = below + P; options.size() < 3; k += P) options.push_back(k);
  return detail::concat(options[0], ", ", options[1], " or ", options[2]);
}

// Warm-up forwards of a stage before its first backward (Megatron's counts).
int warmup_forwards(ScheduleKind kind, int P, int V, int M, int stage) {
  const int total = M * V;
  switch (kind) {
    case ScheduleKind::gpipe: return total;
    case ScheduleKind::one_f_one_b: return std::min(P - stage - 1, total);
    case ScheduleKind::interleaved:
      // [Note: interleaved warm-up] The last stage must have run the forward of
      // every chunk but its last for the first P micro-batches ((V-1)*P) before
      // the first backward comes round; each stage further up waits one more
      // forward for the activation to go down and one more for the gradient to
      // come back, hence 2 per stage of distance to the end.
      return std::min(2 * (P - stage - 1) + (V - 1) * P, total);
  }
  return total;
}

// Virtual micro-batch k in [0, M*V) of a stage: micro-batches go through the
// chunks in groups of P (Megatron): forwards of mb 0..P-1 on chunk 0, then the
// same mbs on chunk 1, ..., then mbs P..2P-1 on chunk 0, and so on. Backwards
// walk the chunks in reverse. With V == 1 this is plain mb order.
struct ChunkMb {
  int chunk;
  int mb;
};
ChunkMb virtual_microbatch(int k, int P, int V, bool forward) {
  const int group = k / P;
  const int chunk_in_order = group % V;
  return {forward ? chunk_in_order : V - 1 - chunk_in_order, (k / (P * V)) * P + k % P};
}

}  // namespace

void validate_schedule(ScheduleKind kind, int P, int V, int M) {
  const char* name = schedule_kind_name(kind);
  if (P < 1) ZT_USER_ERROR("pipeline.parallel_size must be at least 1, found ", P);
  if (V < 1) ZT_USER_ERROR("pipeline.num_chunks must be at least 1, found ", V);
  if (M < 1) ZT_USER_ERROR("num micro-batches must be at least 1, found ", M);
  switch (kind) {
    case ScheduleKind::gpipe:
    case ScheduleKind::one_f_one_b:
      if (V != 1)
        ZT_USER_ERROR("pipeline.num_chunks ", V, " needs the interleaved schedule; the ", name,
                      " schedule holds one chunk per stage: use num_chunks 1 or "
                      "pipe_schedule_name \"interleaved\"");
      if (kind == ScheduleKind::one_f_one_b && M < P)
        ZT_USER_ERROR("num micro-batches ", M, " is less than pipeline.parallel_size ", P,
                      " with the 1f1b schedule: use at least ", P,
                      " micro-batches (gradient_accumulation_steps), or the gpipe schedule");
      break;
    case ScheduleKind::interleaved:
      if (V < 2)
        ZT_USER_ERROR("pipeline.num_chunks ", V,
                      " with the interleaved schedule: use num_chunks 2 or more, or "
                      "pipe_schedule_name \"1f1b\" for one chunk per stage");
      if (M % P != 0)
        ZT_USER_ERROR("num micro-batches ", M, " is not a multiple of pipeline.parallel_size ", P,
                      " with the interleaved schedule: use ", multiples_near(M, P));
      break;
  }
}

std::vector<PipeInstr> make_schedule(ScheduleKind kind, int P, int V, int M, int stage) {
  validate_schedule(kind, P, V, M);
  if (stage < 0 || stage >= P)
    ZT_USER_ERROR("pipeline stage ", stage, " is outside 0..", P - 1);
  const int last_global = P * V - 1;
  std::vector<PipeInstr> out;
  out.reserve(static_cast<size_t>(M) * V * 4 + 2);

  auto forward = [&](ChunkMb cm) {
    const int g = cm.chunk * P + stage;
    if (g != 0) out.push_back({PipeOp::recv_act, cm.mb, cm.chunk});
    out.push_back({PipeOp::forward, cm.mb, cm.chunk});
    if (g != last_global) out.push_back({PipeOp::send_act, cm.mb, cm.chunk});
  };
  auto backward = [&](ChunkMb cm) {
    const int g = cm.chunk * P + stage;
    if (g != last_global) out.push_back({PipeOp::recv_grad, cm.mb, cm.chunk});
    out.push_back({PipeOp::backward, cm.mb, cm.chunk});
    if (g != 0) out.push_back({PipeOp::send_grad, cm.mb, cm.chunk});
  };

  const int total = M * V;
  if (kind == ScheduleKind::gpipe) {
    for (int mb = 0; mb < M; ++mb) forward({0, mb});
    for (int mb = M - 1; mb >= 0; --mb) backward({0, mb});
  } else {
    // Warm-up forwards, steady state one forward then one backward, cool-down
    // backwards. Forward k and backward k are both virtual micro-batch k.
    const int warmup = warmup_forwards(kind, P, V, M, stage);
    for (int k = 0; k < warmup; ++k) forward(virtual_microbatch(k, P, V, true));
    for (int i = 0; i < total - warmup; ++i) {
      const ChunkMb f = virtual_microbatch(warmup + i, P, V, true);
      const ChunkMb b = virtual_microbatch(i, P, V, false);
      if (kind == ScheduleKind::one_f_one_b) {
        forward(f);
        backward(b);
        continue;
      }
      // [Note: interleaved exchange] One exchange per steady step, as in
      // Megatron's interleaved schedule: receive both inputs before the
      // forward, send both outputs after the backward, so that with the
      // step's neighbouring sends and receives they form one p2p group
      // (SendAct(f-1) SendGrad(b-1) RecvAct(f) RecvGrad(b)). The 1F1B order
      // (each send right after its compute, each receive right before) leaves
      // a SendGrad alone in a group where stage 0's next forward is of chunk 0
      // (nothing to receive), and NCCL's blocking sends then deadlock
      // (PipelineP2p.GridRunsUnderNcclSemantics). Computes keep their order,
      // so numerics and the simulated bubble are unchanged.
      const int gf = f.chunk * P + stage, gb = b.chunk * P + stage;
      if (gf != 0) out.push_back({PipeOp::recv_act, f.mb, f.chunk});
      if (gb != last_global) out.push_back({PipeOp::recv_grad, b.mb, b.chunk});
      out.push_back({PipeOp::forward, f.mb, f.chunk});
      out.push_back({PipeOp::backward, b.mb, b.chunk});
      if (gf != last_global) out.push_back({PipeOp::send_act, f.mb, f.chunk});
      if (gb != 0) out.push_back({PipeOp::send_grad, b.mb, b.chunk});
    }
    for (int i = total - warmup; i < total; ++i) backward(virtual_microbatch(i, P, V, false));
  }
  out.push_back({PipeOp::reduce_grads});
  out.push_back({PipeOp::optimizer_step});
  return out;
}

std::vector<PipeInstr> make_forward_schedule(int P, int V, int M, int stage) {
  if (P < 1 || V < 1 || M < 1)
    ZT_USER_ERROR("pipeline evaluation needs P, V and M of at least 1, found P=", P, " V=", V, " M=", M);
  if (stage < 0 || stage >= P)
    ZT_USER_ERROR("pipeline stage ", stage, " is outside 0..", P - 1);
  const int last_global = P * V - 1;
  std::vector<PipeInstr> out;
  for (int mb = 0; mb < M; ++mb)
    for (int c = 0; c < V; ++c) {
      const int g = c * P + stage;
      if (g > 0) out.push_back({PipeOp::recv_act, mb, c});
      out.push_back({PipeOp::forward, mb, c});
      if (g < last_global) out.push_back({PipeOp::send_act, mb, c});
    }
  return out;
}

std::vector<PipeInstr> make_breadth_first_schedule(int M, int G) {
  if (M < 1 || G < 1 || G > M)
    ZT_USER_ERROR("breadth-first groups of ", G, " micro-batches in a step of ", M, ": a group holds 1 to ", M);
  std::vector<PipeInstr> out;
  for (int first = 0; first < M; first += G) {
    const int end = std::min(first + G, M);  // the last group takes what is left
    for (int mb = first; mb < end; ++mb) out.push_back({PipeOp::forward, mb, 0});
    for (int mb = first; mb < end; ++mb) out.push_back({PipeOp::backward, mb, 0});
  }
  out.push_back({PipeOp::reduce_grads});
  out.push_back({PipeOp::optimizer_step});
  return out;
}

int max_in_flight(ScheduleKind kind, int P, int V, int M, int stage) {
  validate_schedule(kind, P, V, M);
  if (stage < 0 || stage >= P)
    ZT_USER_ERROR("pipeline stage ", stage, " is outside 0..", P - 1);
  const int warmup = warmup_forwards(kind, P, V, M, stage);
  // After the warm-up, the steady state runs one more forward before each backward.
  return warmup < M * V ? warmup + 1 : warmup;
}

int p2p_peer(const PipeInstr& instr, int P, int stage) {
  switch (instr.op) {
    case PipeOp::send_act:
    case PipeOp::recv_grad: return (stage + 1) % P;
    case PipeOp::recv_act:
    case PipeOp::send_grad: return (stage - 1 + P) % P;
    default: ZT_THROW("p2p_peer of ", to_string(instr), ", which is not point-to-point");
  }
}

P2pMessage p2p_message(const PipeInstr& instr, int P, int stage) {
  const int g = instr.chunk * P + stage;
  switch (instr.op) {
    case PipeOp::send_act: return {false, instr.mb, g + 1};
    case PipeOp::recv_act: return {false, instr.mb, g};
    case PipeOp::send_grad: return {true, instr.mb, g};
    case PipeOp::recv_grad: return {true, instr.mb, g + 1};
    default: ZT_THROW("p2p_message of ", to_string(instr), ", which is not point-to-point");
  }
}

std::string to_string(const P2pMessage& m) {
  return detail::concat(m.grad ? "grad" : "act", "(mb=", m.mb, ",boundary=", m.boundary, ")");
}

int p2p_tag(const P2pMessage& m, int P, int V) { return (m.mb * P * V + m.boundary) * 2 + (m.grad ? 1 : 0); }

std::vector<P2pGroup> p2p_groups(const std::vector<PipeInstr>& stage_schedule, bool train) {
  std::vector<P2pGroup> out;
  bool open = false;  // the last group still takes ops
  for (size_t i = 0; i < stage_schedule.size(); ++i) {
    const PipeOp op = stage_schedule[i].op;
    if (!runs_in_walk(op, train)) continue;  // skipped: neither joins nor splits
    if (!is_p2p(op)) {
      open = false;  // executed compute (or ReduceGrads / OptimizerStep) closes the group
      continue;
    }
    if (!open) out.emplace_back();
    out.back().ops.push_back(i);
    open = true;
  }
  return out;
}

double ideal_bubble(ScheduleKind kind, int P, int V, int M) {
  validate_schedule(kind, P, V, M);
  if (kind == ScheduleKind::gpipe) return static_cast<double>(P - 1) / M;
  return static_cast<double>(P - 1) / (static_cast<double>(V) * M);
}

}  // namespace zt
