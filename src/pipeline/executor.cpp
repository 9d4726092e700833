#include "pipeline/executor.hpp"

#include <algorithm>
#include <array>

#include "comm/flight_recorder.hpp"
#include "core/clock.hpp"

namespace zt {

// One micro-batch in flight on this stage: its arenas, inputs and the
// messages whose buffers must outlive their transfer.
struct PipelineExecutor::InFlight {
  InFlight(Device& dev, int units, int V, size_t chunk_bytes, Arena& scratch, int64_t B, int64_t T)
      : state(dev, units, chunk_bytes, &scratch),
        tokens(dev, DType::i32, Shape{B, T}, MemTag::activations),
        targets(dev, DType::i32, Shape{B, T}, MemTag::activations),
        in(static_cast<size_t>(V)),
        out(static_cast<size_t>(V)),
        act_send(static_cast<size_t>(V)) {}
  MicroBatchState state;
  Buffer tokens, targets;             // (B, T) i32
  Buffer doc_start;                   // (B, T) i32, allocated for packed rows only
  std::vector<Tensor> in, out;        // per local chunk: its input and output
  std::vector<CommRequest> act_send;  // per local chunk: the send of its output
  std::vector<std::pair<Buffer, CommRequest>> grad_sends;  // input gradients and their sends
  Buffer grad_in;  // the received gradient of the chunk about to go backward
};

// The state of one run(): its arguments, timing, and what waits for a drain.
struct PipelineExecutor::Walk {
  Walk(const std::vector<PipeInstr>& p, const WalkArgs& a) : program(p), args(a) {
    for (size_t i = 0; i < program.size(); ++i) {
      const PipeInstr& ins = program[i];
      if (!executed(ins) || ins.mb < 0) continue;
      if (static_cast<size_t>(ins.mb) >= last_of.size()) last_of.resize(static_cast<size_t>(ins.mb) + 1, 0);
      last_of[static_cast<size_t>(ins.mb)] = i;
    }
  }
  bool executed(const PipeInstr& ins) const { return runs_in_walk(ins.op, args.train); }
  // Whether instruction i is the last one micro-batch ins.mb runs on this stage.
  bool leaves_after(size_t i) const {
    const PipeInstr& ins = program[i];
    return ins.mb >= 0 && last_of[static_cast<size_t>(ins.mb)] == i;
  }
  const std::vector<PipeInstr>& program;
  const WalkArgs& args;
  PipelineTiming t;
  std::vector<size_t> last_of;  // per micro-batch: index of its last executed instruction
  std::vector<CommRequest> recvs;  // of the open p2p group
  std::vector<std::pair<Buffer, CommRequest>> sends;  // gradient sends of retired micro-batches
  std::vector<std::unique_ptr<InFlight>> leavers;     // retired, with an activation send in flight
};

PipelineExecutor::PipelineExecutor(std::vector<UnitRange> chunks, int P, int V, int stage, UnitRunner& runner,
                                   Device& dev, Communicator& pp, int64_t B, int64_t T, ArenaChunks arena_chunks)
    : chunks_(std::move(chunks)), P_(P), V_(V), stage_(stage), runner_(runner), dev_(dev), pp_(pp),
      B_(B), T_(T), chunks_bytes_(arena_chunks), scratch_(dev, MemTag::workspace, arena_chunks.scratch) {
  ZT_CHECK(static_cast<int>(chunks_.size()) == P * V, "pipeline: ", chunks_.size(), " chunks for P=", P, " V=", V);
  ZT_CHECK(chunks_.front().first == 0 && chunks_.back().last == runner.num_units(), "pipeline: the chunks cover units [",
           chunks_.front().first, ", ", chunks_.back().last, "), the model has ", runner.num_units());
  ZT_CHECK(pp.size() == P && pp.rank() == stage, "pipeline group of ", pp.size(), " ranks, rank ", pp.rank(),
           " for P=", P, " stage ", stage);
}

PipelineExecutor::~PipelineExecutor() = default;

PipelineExecutor::InFlight& PipelineExecutor::flight(int mb) {
  auto it = flights_.find(mb);
  if (it != flights_.end()) return *it->second;
  std::unique_ptr<InFlight> f;
  if (!pool_.empty()) {
    f = std::move(pool_.back());
    pool_.pop_back();
  } else {
    f = std::make_unique<InFlight>(dev_, runner_.num_units(), V_, chunks_bytes_.saved, scratch_, B_, T_);
  }
  f->state.reset();
  return *flights_.emplace(mb, std::move(f)).first->second;
}

// The flight recorder's context ([Note: op context] in comm/flight_recorder.hpp):
// the instruction being walked and its phase.
static void note_instr(const PipeInstr& ins, bool train) {
  RunPhase phase = RunPhase::forward;
  switch (ins.op) {
    case PipeOp::forward:
    case PipeOp::send_act:
    case PipeOp::recv_act: phase = train ? RunPhase::forward : RunPhase::validate; break;
    case PipeOp::backward:
    case PipeOp::send_grad:
    case PipeOp::recv_grad: phase = RunPhase::backward; break;
    case PipeOp::reduce_grads: phase = RunPhase::reduce; break;
    case PipeOp::optimizer_step: phase = RunPhase::optimizer; break;
  }
  set_op_phase(phase);
  set_op_instr(pipe_op_name(ins.op), ins.mb, ins.chunk);
}

void PipelineExecutor::run(const std::vector<PipeInstr>& program, const WalkArgs& args, PipelineTiming* timing) {
  validate_program(program, P_, V_, stage_, args.train);
  ZT_CHECK(args.params != nullptr && args.hooks != nullptr && (!args.train || args.grads != nullptr),
           "pipeline: a walk needs a parameter provider, hooks and (training) a gradient sink");
  const double start = now_s();
  Walk w(program, args);
  const int start_mark = open_span(w);
  const std::vector<P2pGroup> groups = p2p_groups(program, args.train);
  size_t next_group = 0;
  for (size_t i = 0; i < program.size(); ++i) {
    const PipeInstr& ins = program[i];
    if (!w.executed(ins)) continue;
    note_instr(ins, args.train);
    switch (ins.op) {
      case PipeOp::forward:
      case PipeOp::backward: {
        // [Note: breadth-first walk]: the run of this op on this chunk.
        std::vector<int> mbs{ins.mb};
        size_t j = i + 1;
        if (args.train)
          for (; j < program.size() && static_cast<int>(mbs.size()) < args.group; ++j) {
            const PipeInstr& next = program[j];
            if (next.op != ins.op || next.chunk != ins.chunk) break;
            mbs.push_back(next.mb);
          }
        if (ins.op == PipeOp::forward)
          forward(w, ins.chunk, mbs);
        else
          backward(w, ins.chunk, mbs);
        bool retired = false;
        for (size_t k = i; k < j; ++k)
          if (w.leaves_after(k)) {
            retire(w, program[k].mb);
            retired = true;
          }
        if (retired) drain(w);
        i = j - 1;
        continue;
      }
      case PipeOp::reduce_grads:
        w.t.total_s = now_s() - start;  // the walk's own time ends here
        close_span(StepPhase::walk, start_mark);
        args.hooks->reduce_grads();
        break;
      case PipeOp::optimizer_step:
        args.hooks->optimizer_step();
        break;
      default: {  // a send or receive: the p2p group it starts
        ZT_CHECK(next_group < groups.size() && groups[next_group].ops.front() == i, "pipeline: instruction ", i, " ",
                 to_string(ins), " does not start a p2p group");
        const P2pGroup& grp = groups[next_group++];
        p2p_group(w, grp);
        i = grp.ops.back();  // the group's ops are in list order; skipped ones between stay skipped
        continue;
      }
    }
    if (w.leaves_after(i)) {
      retire(w, ins.mb);
      drain(w);
    }
  }
  set_op_instr(nullptr, -1, -1);
  ZT_CHECK(next_group == groups.size(), "pipeline: ", groups.size() - next_group, " p2p groups not run");
  ZT_CHECK(flights_.empty(), "pipeline: ", flights_.size(), " micro-batches did not finish");
  if (!args.train) w.t.total_s = now_s() - start;
  if (timing) *timing = w.t;
}

// Forward of `chunk` for the micro-batches `mbs` (one, or a breadth-first
// run: [Note: breadth-first walk]). One micro-batch goes through the chunk
// in one runner call; a run goes unit by unit, each unit for every
// micro-batch in turn.
void PipelineExecutor::forward(Walk& w, int chunk, const std::vector<int>& mbs) {
  const int g = global(chunk), last = P_ * V_ - 1;
  const UnitRange r = range(chunk);
  const size_t n = mbs.size();
  // Each micro-batch's data, at its first forward on this stage (chunk 0
  // runs before the stage's later chunks): the stages holding the first and
  // the last chunk need tokens and targets, and with packed rows every stage
  // needs doc_start.
  const bool packed = w.args.hooks->packed();
  std::vector<InFlight*> fs;
  std::vector<Tensor> x;
  for (int mb : mbs) {
    InFlight& f = flight(mb);
    f.state.backward_follows = w.args.train;  // [Note: activation offload]
    if (packed && f.doc_start.empty()) f.doc_start = Buffer(dev_, DType::i32, Shape{B_, T_}, MemTag::activations);
    if (chunk == 0 && (stage_ == 0 || stage_ == P_ - 1 || packed))
      w.args.hooks->load_batch(mb, f.tokens.tensor(), f.targets.tensor(), packed ? f.doc_start.tensor() : Tensor());
    if (g == 0) f.in[static_cast<size_t>(chunk)] = f.tokens.tensor();
    // The per-token losses stay on the device: the head adds them to the
    // walk's accumulator in its forward or, when training, in its backward
    // ([Note: loss in the backward] in modules/head_loss.hpp), so in the
    // order of the backwards (the reverse for gpipe). No host
    // synchronisation.
    if (g == last) {
      f.state.loss_in_backward = w.args.train;
      f.state.loss_sum = w.args.loss_sum;
    }
    fs.push_back(&f);
    x.push_back(f.in[static_cast<size_t>(chunk)]);
  }
  const int per_call = n == 1 ? r.last - r.first : 1;  // units per runner call
  const double t0 = now_s();
  const int m0 = open_span(w);
  w.args.params->set_run_length(static_cast<int>(n));
  for (int u = r.first; u < r.last; u += per_call)
    for (size_t k = 0; k < n; ++k) {
      InFlight& f = *fs[k];
      x[k] = runner_.forward(u, u + per_call, f.state, *w.args.params, x[k], f.targets.tensor(),
                             packed ? f.doc_start.tensor() : Tensor());
    }
  w.args.params->set_run_length(1);
  for (size_t k = 0; k < n; ++k) fs[k]->out[static_cast<size_t>(chunk)] = x[k];
  w.t.forward_s += now_s() - t0;
  close_span(StepPhase::forward, m0);
}

// Backward of `chunk` for `mbs`, as forward: one runner call for one
// micro-batch, unit by unit for a run.
void PipelineExecutor::backward(Walk& w, int chunk, const std::vector<int>& mbs) {
  const int g = global(chunk);
  const UnitRange r = range(chunk);
  const size_t n = mbs.size();
  const DType gdt = math_dtype(runner_.act_dtype());
  std::vector<InFlight*> fs;
  std::vector<Tensor> d;
  std::vector<Buffer> din_out(n);
  for (size_t k = 0; k < n; ++k) {
    InFlight& f = flight(mbs[k]);
    // The output's send must be done before backward releases its memory.
    wait(f.act_send[static_cast<size_t>(chunk)]);
    fs.push_back(&f);
    d.push_back(g == P_ * V_ - 1 ? w.args.dloss : f.grad_in.tensor());
    // The input gradient is written straight into the buffer it is sent from.
    if (g != 0) din_out[k] = take_comm_buffer(gdt, runner_.unit(r.first).input_shape(B_, T_));
  }
  const int per_call = n == 1 ? r.last - r.first : 1;
  // A run keeps each micro-batch's gradient between two units of the chunk:
  // two ping-pong buffers per micro-batch, as wide as the widest input after
  // the chunk's first unit (one runner call over the chunk has its own).
  const Arena::Mark base = scratch_.mark();
  std::vector<std::array<Tensor, 2>> ping(per_call == 1 ? n : 0);
  int64_t max_elems = 0;
  for (int u = r.first + 1; u < r.last && !ping.empty(); ++u)
    max_elems = std::max(max_elems, runner_.unit(u).input_shape(B_, T_).numel());
  if (max_elems > 0)
    for (auto& p : ping) p = {scratch_.alloc(gdt, Shape{max_elems}), scratch_.alloc(gdt, Shape{max_elems})};
  const double t0 = now_s();
  const int m0 = open_span(w);
  w.args.params->set_run_length(static_cast<int>(n));
  w.args.grads->set_run_length(static_cast<int>(n));
  int parity = 0;
  for (int hi = r.last; hi > r.first; hi -= per_call) {
    const int lo = hi - per_call;
    for (size_t k = 0; k < n; ++k) {
      Tensor din;
      if (lo == r.first)
        din = din_out[k].tensor();  // undefined for global chunk 0
      else
        din = Tensor(ping[k][parity].data, gdt, runner_.unit(lo).input_shape(B_, T_), ping[k][parity].device);
      runner_.backward(lo, hi, fs[k]->state, *w.args.params, *w.args.grads, d[k], din);
      d[k] = din;
    }
    parity ^= 1;
  }
  w.args.grads->set_run_length(1);
  w.args.params->set_run_length(1);
  w.t.backward_s += now_s() - t0;
  close_span(StepPhase::backward, m0);
  scratch_.release_to(base);
  for (size_t k = 0; k < n; ++k) {
    InFlight& f = *fs[k];
    if (g != 0) f.grad_sends.emplace_back(std::move(din_out[k]), CommRequest());
    if (!f.grad_in.empty()) give_back(std::move(f.grad_in));
  }
}

int PipelineExecutor::open_span(const Walk& w) { return clock_ != nullptr && w.args.train ? clock_->mark() : -1; }
void PipelineExecutor::close_span(StepPhase phase, int from) {
  if (from >= 0) clock_->span(phase, from, clock_->mark());
}

Buffer PipelineExecutor::take_comm_buffer(DType dtype, const Shape& shape) {
  for (auto it = comm_pool_.begin(); it != comm_pool_.end(); ++it) {
    const Tensor t = it->tensor();
    if (t.dtype == dtype && t.shape == shape) {
      Buffer b = std::move(*it);
      comm_pool_.erase(it);
      return b;
    }
  }
  return Buffer(dev_, dtype, shape, MemTag::comm);
}

void PipelineExecutor::give_back(Buffer b) { comm_pool_.push_back(std::move(b)); }

void PipelineExecutor::recv_act(Walk& w, const PipeInstr& ins, int peer, int tag) {
  InFlight& f = flight(ins.mb);
  // The chunk's input lives until its backward: take it from the
  // micro-batch's saved arena, below the chunk's own activations.
  const Unit& first = runner_.unit(range(ins.chunk).first);
  Tensor& in = f.in[static_cast<size_t>(ins.chunk)];
  in = f.state.saved.alloc(first.input_dtype(runner_.act_dtype()), first.input_shape(B_, T_));
  w.recvs.push_back(pp_.recv(in, peer, tag));
}

void PipelineExecutor::send_act(const PipeInstr& ins, int peer, int tag) {
  InFlight& f = flight(ins.mb);
  f.act_send[static_cast<size_t>(ins.chunk)] = pp_.send(f.out[static_cast<size_t>(ins.chunk)], peer, tag);
}

void PipelineExecutor::recv_grad(Walk& w, const PipeInstr& ins, int peer, int tag) {
  InFlight& f = flight(ins.mb);
  const Unit& last = runner_.unit(range(ins.chunk).last - 1);
  f.grad_in = take_comm_buffer(math_dtype(runner_.act_dtype()), last.output_shape(B_, T_));
  w.recvs.push_back(pp_.recv(f.grad_in.tensor(), peer, tag));
}

void PipelineExecutor::send_grad(const PipeInstr& ins, int peer, int tag) {
  InFlight& f = flight(ins.mb);
  ZT_CHECK(!f.grad_sends.empty() && !f.grad_sends.back().second, "pipeline: ", to_string(ins),
           " without an input gradient to send");
  auto& [buf, req] = f.grad_sends.back();
  req = pp_.send(buf.tensor(), peer, tag);
}

// [Note: p2p groups] (schedule.hpp): each group is one group_start() /
// group_end(); its ops are posted in list order, then its receives waited.
// A micro-batch whose last instruction is in the group retires at once (its
// arenas may serve a receive of the same group); what its sends still read
// waits for the drain after the group.
void PipelineExecutor::p2p_group(Walk& w, const P2pGroup& group) {
  pp_.group_start();
  for (size_t i : group.ops) {
    const PipeInstr& ins = w.program[i];
    const int peer = p2p_peer(ins, P_, stage_);
    const int tag = p2p_tag(p2p_message(ins, P_, stage_), P_, V_);
    note_instr(ins, w.args.train);
    switch (ins.op) {
      case PipeOp::recv_act: recv_act(w, ins, peer, tag); break;
      case PipeOp::send_act: send_act(ins, peer, tag); break;
      case PipeOp::recv_grad: recv_grad(w, ins, peer, tag); break;
      case PipeOp::send_grad: send_grad(ins, peer, tag); break;
      default: ZT_THROW("pipeline: ", to_string(ins), " in a p2p group");
    }
    if (w.leaves_after(i)) retire(w, ins.mb);
  }
  pp_.group_end();
  const double t0 = now_s();
  for (CommRequest& r : w.recvs) wait(r);
  w.recvs.clear();
  w.t.p2p_wait_s += now_s() - t0;
  drain(w);
}

void PipelineExecutor::retire(Walk& w, int mb) {
  auto it = flights_.find(mb);
  ZT_CHECK(it != flights_.end(), "pipeline: micro-batch ", mb, " retired twice");
  std::unique_ptr<InFlight> f = std::move(it->second);
  flights_.erase(it);
  for (auto& gs : f->grad_sends) w.sends.push_back(std::move(gs));
  f->grad_sends.clear();
  // An evaluation's last chunk output may still be on its way out.
  const bool sending = std::any_of(f->act_send.begin(), f->act_send.end(), [](const CommRequest& r) { return !!r; });
  (sending ? w.leavers : pool_).push_back(std::move(f));
}

void PipelineExecutor::drain(Walk& w) {
  // On a GPU wait() orders the compute stream after the send, so the
  // buffer's next use (a receive or a backward, queued later) comes after it.
  for (auto& [buf, req] : w.sends) {
    wait(req);
    give_back(std::move(buf));
  }
  w.sends.clear();
  for (auto& f : w.leavers) {
    for (CommRequest& a : f->act_send) wait(a);
    pool_.push_back(std::move(f));
  }
  w.leavers.clear();
}

}  // namespace zt
