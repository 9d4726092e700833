#include "pipeline/executor.hpp"

#include <algorithm>
#include <chrono>

namespace zt {
namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

// One micro-batch in flight on this stage: its arenas, inputs and the
// messages whose buffers must outlive their transfer.
struct PipelineExecutor::InFlight {
  InFlight(Device& dev, int units, int V, size_t chunk_bytes, Arena& scratch)
      : state(dev, units, chunk_bytes, &scratch), in(V), out(V), act_send(V) {}
  MicroBatchState state;
  Buffer tokens, targets;           // (B, T) i32
  std::vector<Tensor> in, out;      // per local chunk: its input and output
  std::vector<CommRequest> act_send;  // per local chunk: the send of its output
  std::vector<std::pair<Buffer, CommRequest>> grad_sends;
  Buffer grad_in;                   // the received gradient of the chunk about to go backward
  int backwards_left = 0;
};

PipelineExecutor::PipelineExecutor(std::vector<UnitRange> chunks, int P, int V, int stage, UnitRunner& runner,
                                   Device& dev, Kernels& kernels, Communicator& pp, int64_t B, int64_t T,
                                   int64_t d_model, size_t arena_chunk_bytes)
    : chunks_(std::move(chunks)), P_(P), V_(V), stage_(stage), runner_(runner), dev_(dev), kernels_(kernels), pp_(pp),
      B_(B), T_(T), C_(d_model), chunk_bytes_(arena_chunk_bytes),
      scratch_(dev, MemTag::workspace, arena_chunk_bytes), host_loss_(static_cast<size_t>(B * T)) {
  ZT_CHECK(static_cast<int>(chunks_.size()) == P * V, "pipeline: ", chunks_.size(), " chunks for P=", P, " V=", V);
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
    f = std::make_unique<InFlight>(dev_, static_cast<int>(chunks_.back().last), V_, chunk_bytes_, scratch_);
    f->tokens = Buffer(dev_, DType::i32, Shape{B_, T_}, MemTag::activations);
    f->targets = Buffer(dev_, DType::i32, Shape{B_, T_}, MemTag::activations);
  }
  f->state.reset();
  f->backwards_left = V_;
  return *flights_.emplace(mb, std::move(f)).first->second;
}

double PipelineExecutor::run(const std::vector<PipeInstr>& schedule, ParamProvider& params, GradSink& grads,
                             const LoadBatch& load, const Tensor& dloss, bool train, PipelineTiming* timing) {
  const double start = now_s();
  PipelineTiming t;
  double loss_sum = 0;
  const DType act = runner_.act_dtype();
  const DType grad_dtype = math_dtype(act);
  const int last_global = P_ * V_ - 1;

  // A micro-batch leaves the stage after its last local instruction: in
  // training its last backward (and the send after it), in evaluation its
  // last forward (and the send after it); its buffers go back to the pool.
  const auto leaves = [&](const PipeInstr& ins, const InFlight& f) {
    const int g = global(ins.chunk);
    return train ? f.backwards_left == 0 && (g == 0 || ins.op == PipeOp::send_grad)
                 : ins.chunk == V_ - 1 &&
                       ((g == last_global && ins.op == PipeOp::forward) || ins.op == PipeOp::send_act);
  };
  const auto release = [&](int mb) {
    auto it = flights_.find(mb);
    InFlight& f = *it->second;
    for (CommRequest& a : f.act_send) wait(a);
    for (auto& [buf, req] : f.grad_sends) wait(req);
    f.grad_sends.clear();
    pool_.push_back(std::move(it->second));
    flights_.erase(it);
  };

  // [Note: p2p groups] (schedule.hpp): each group is one group_start() /
  // group_end(); its ops are posted in list order, then its receives waited.
  // Sends keep their requests and are waited before their buffers go.
  const std::vector<P2pGroup> groups = p2p_groups(schedule, train);
  size_t next_group = 0;
  std::vector<std::pair<Buffer, CommRequest>> group_sends;  // of micro-batches that left inside the group
  std::vector<std::unique_ptr<InFlight>> group_leavers;     // ... whose arenas a send of the group reads
  const auto run_group = [&](const P2pGroup& grp) {
    std::vector<CommRequest> recvs;
    pp_.group_start();
    for (size_t i : grp.ops) {
      const PipeInstr& ins = schedule[i];
      InFlight& f = flight(ins.mb);
      const int c = ins.chunk;
      const P2pMessage m = p2p_message(ins, P_, stage_);
      const int peer = p2p_peer(ins, P_, stage_);
      const int tg = p2p_tag(m, P_, V_);
      switch (ins.op) {
        case PipeOp::recv_act:
          // The chunk's input lives until its backward: take it from the
          // micro-batch's saved arena, below the chunk's own activations.
          f.in[c] = f.state.saved.alloc(act, Shape{B_, T_, C_});
          recvs.push_back(pp_.recv(f.in[c], peer, tg));
          break;
        case PipeOp::send_act:
          f.act_send[c] = pp_.send(f.out[c], peer, tg);
          break;
        case PipeOp::recv_grad:
          f.grad_in = Buffer(dev_, grad_dtype, Shape{B_, T_, C_}, MemTag::comm);
          recvs.push_back(pp_.recv(f.grad_in.tensor(), peer, tg));
          break;
        case PipeOp::send_grad: {
          auto& [buf, req] = f.grad_sends.back();
          req = pp_.send(buf.tensor(), peer, tg);
          break;
        }
        default:
          ZT_THROW("pipeline: ", to_string(ins), " in a p2p group");
      }
      if (!leaves(ins, f)) continue;
      // Its sends are still in the group, so it cannot be waited on yet. Its
      // gradient copies wait in group_sends; the micro-batch's arenas go back
      // to the pool now (a receive of this group may reuse them) unless one
      // of the group's sends reads them (its output, in evaluation).
      auto it = flights_.find(ins.mb);
      for (auto& gs : f.grad_sends) group_sends.push_back(std::move(gs));
      f.grad_sends.clear();
      const bool read = std::any_of(f.act_send.begin(), f.act_send.end(), [](const CommRequest& r) { return !!r; });
      (read ? group_leavers : pool_).push_back(std::move(it->second));
      flights_.erase(it);
    }
    pp_.group_end();
    const double w = now_s();
    for (CommRequest& r : recvs) wait(r);
    t.p2p_wait_s += now_s() - w;
    for (auto& [buf, req] : group_sends) wait(req);
    group_sends.clear();
    for (auto& f : group_leavers) {
      for (CommRequest& a : f->act_send) wait(a);
      pool_.push_back(std::move(f));
    }
    group_leavers.clear();
  };

  for (size_t i = 0; i < schedule.size(); ++i) {
    const PipeInstr& ins = schedule[i];
    if (ins.op == PipeOp::reduce_grads || ins.op == PipeOp::optimizer_step) break;
    if (!train && is_grad_op(ins.op)) continue;
    if (is_p2p(ins.op)) {
      ZT_CHECK(next_group < groups.size() && groups[next_group].ops.front() == i,
               "pipeline: instruction ", i, " ", to_string(ins), " does not start a p2p group");
      const P2pGroup& grp = groups[next_group++];
      run_group(grp);
      i = grp.ops.back();  // the group's ops are in list order; the skipped ones between stay skipped
      continue;
    }
    InFlight& f = flight(ins.mb);
    const int c = ins.chunk;
    const int g = global(c);
    const UnitRange r = chunks_[static_cast<size_t>(g)];
    switch (ins.op) {
      case PipeOp::forward: {
        if (g == 0 || g == last_global) load(ins.mb, f.tokens.tensor(), f.targets.tensor());
        if (g == 0) f.in[c] = f.tokens.tensor();
        const double t0 = now_s();
        f.out[c] = runner_.forward(r.first, r.last, f.state, params, f.in[c], f.targets.tensor());
        if (g == last_global) {
          dev_.copy_to_host(host_loss_.data(), f.out[c].data, host_loss_.size() * sizeof(float));
          for (float l : host_loss_) loss_sum += l;
        }
        t.forward_s += now_s() - t0;
        break;
      }
      case PipeOp::backward: {
        // The output's send must be done before its memory is released.
        wait(f.act_send[c]);
        const Tensor dout = g == last_global ? dloss : f.grad_in.tensor();
        const double t0 = now_s();
        Tensor din = runner_.backward(r.first, r.last, f.state, params, grads, dout);
        t.backward_s += now_s() - t0;
        if (g != 0) {
          // din lives in the saved arena until the next call for this
          // micro-batch: send a copy.
          Buffer copy(dev_, grad_dtype, Shape{B_, T_, C_}, MemTag::comm);
          kernels_.cast(copy.tensor(), din);
          f.grad_sends.emplace_back(std::move(copy), CommRequest());
        }
        f.grad_in.reset();
        --f.backwards_left;
        break;
      }
      default:
        ZT_THROW("pipeline: unexpected ", to_string(ins));
    }
    if (leaves(ins, f)) release(ins.mb);
  }
  ZT_CHECK(next_group == groups.size(), "pipeline: ", groups.size() - next_group, " p2p groups not run");
  // Evaluation (and anything left): finish every transfer, return the states.
  for (auto& [mb, f] : flights_) {
    for (CommRequest& a : f->act_send) wait(a);
    for (auto& [buf, req] : f->grad_sends) wait(req);
    f->grad_sends.clear();
    pool_.push_back(std::move(f));
  }
  flights_.clear();
  t.total_s = now_s() - start;
  if (timing) *timing = t;
  return loss_sum;
}

}  // namespace zt
