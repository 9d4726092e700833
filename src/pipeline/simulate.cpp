#include "pipeline/simulate.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace zt {
namespace {

// State of the whole simulated pipeline. Times are -1 until the event happened.
// Index (mb, g) as mb * G + g with G = P*V global chunks.
struct Pipeline {
  int P, V, M, G;
  double tf, tb;
  std::vector<double> fwd_done, bwd_done;  // finish time of Forward / Backward (mb, g)
  std::vector<double> act_sent;            // (mb, g): activation into g was sent, at that time
  std::vector<double> grad_sent;           // (mb, g): gradient into g (from g+1) was sent
  std::vector<char> act_recvd, grad_recvd;
  size_t at(int mb, int g) const { return static_cast<size_t>(mb) * G + g; }
};

struct StageState {
  size_t pc = 0;
  double clock = 0, busy = 0;
  int in_flight = 0, max_in_flight = 0;
  bool reduced = false, stepped = false;
};

enum class Step { done, blocked, error };

// Executes program[st.pc] of `stage` if it can; on a rule violation writes `err`.
Step step(Pipeline& p, int stage, const std::vector<PipeInstr>& program, StageState& st,
          std::string& err) {
  const PipeInstr& in = program[st.pc];
  const auto fail = [&](const std::string& why) {
    err = detail::concat("stage ", stage, " instruction ", st.pc, " ", to_string(in), ": ", why);
    return Step::error;
  };
  if (st.stepped) return fail("after OptimizerStep");
  if (in.op == PipeOp::reduce_grads) {
    for (int mb = 0; mb < p.M; ++mb)
      for (int c = 0; c < p.V; ++c)
        if (p.bwd_done[p.at(mb, c * p.P + stage)] < 0)
          return fail(detail::concat("Backward(mb=", mb, ",c=", c, ") has not run"));
    st.reduced = true;
    ++st.pc;
    return Step::done;
  }
  if (in.op == PipeOp::optimizer_step) {
    if (!st.reduced) return fail("before ReduceGrads");
    if (st.pc + 1 != program.size()) return fail("is not the last instruction");
    st.stepped = true;
    ++st.pc;
    return Step::done;
  }
  if (in.mb < 0 || in.mb >= p.M || in.chunk < 0 || in.chunk >= p.V)
    return fail("micro-batch or chunk out of range");
  const int g = in.chunk * p.P + stage;
  const size_t i = p.at(in.mb, g);
  const bool first = g == 0, last = g == p.G - 1;
  switch (in.op) {
    case PipeOp::recv_act:
      if (first) return fail("global chunk 0 has no activation to receive");
      if (p.act_recvd[i]) return fail("received twice");
      if (p.act_sent[i] < 0) return Step::blocked;
      p.act_recvd[i] = 1;
      st.clock = std::max(st.clock, p.act_sent[i]);
      break;
    case PipeOp::forward:
      if (p.fwd_done[i] >= 0) return fail("forward twice");
      if (!first) {
        if (!p.act_recvd[i]) return fail("input activation not received");
        if (p.fwd_done[p.at(in.mb, g - 1)] < 0 || p.fwd_done[p.at(in.mb, g - 1)] > st.clock)
          return fail("previous chunk's forward has not finished");
      }
      st.clock += p.tf;
      st.busy += p.tf;
      p.fwd_done[i] = st.clock;
      st.max_in_flight = std::max(st.max_in_flight, ++st.in_flight);
      break;
    case PipeOp::send_act:
      if (last) return fail("the last global chunk has no activation to send");
      if (p.fwd_done[i] < 0) return fail("sent before its Forward");
      if (p.act_sent[p.at(in.mb, g + 1)] >= 0) return fail("sent twice");
      p.act_sent[p.at(in.mb, g + 1)] = st.clock;
      break;
    case PipeOp::recv_grad:
      if (last) return fail("the last global chunk has no gradient to receive");
      if (p.grad_recvd[i]) return fail("received twice");
      if (p.grad_sent[i] < 0) return Step::blocked;
      p.grad_recvd[i] = 1;
      st.clock = std::max(st.clock, p.grad_sent[i]);
      break;
    case PipeOp::backward:
      if (p.bwd_done[i] >= 0) return fail("backward twice");
      if (p.fwd_done[i] < 0) return fail("backward before its forward");
      if (!last) {
        if (!p.grad_recvd[i]) return fail("output gradient not received");
        if (p.bwd_done[p.at(in.mb, g + 1)] < 0 || p.bwd_done[p.at(in.mb, g + 1)] > st.clock)
          return fail("next chunk's backward has not finished");
      }
      st.clock += p.tb;
      st.busy += p.tb;
      p.bwd_done[i] = st.clock;
      --st.in_flight;
      break;
    case PipeOp::send_grad:
      if (first) return fail("global chunk 0 has no gradient to send");
      if (p.bwd_done[i] < 0) return fail("sent before its Backward");
      if (p.grad_sent[p.at(in.mb, g - 1)] >= 0) return fail("sent twice");
      p.grad_sent[p.at(in.mb, g - 1)] = st.clock;
      break;
    default:
      return fail("unknown op");
  }
  ++st.pc;
  return Step::done;
}

}  // namespace

SimResult simulate_programs(const std::vector<std::vector<PipeInstr>>& programs, int V, int M,
                            double tf, double tb) {
  const int P = static_cast<int>(programs.size());
  ZT_CHECK(P >= 1 && V >= 1 && M >= 1, "P=", P, " V=", V, " M=", M);
  Pipeline p{P, V, M, P * V, tf, tb, {}, {}, {}, {}, {}, {}};
  const size_t n = static_cast<size_t>(M) * p.G;
  p.fwd_done.assign(n, -1);
  p.bwd_done.assign(n, -1);
  p.act_sent.assign(n, -1);
  p.grad_sent.assign(n, -1);
  p.act_recvd.assign(n, 0);
  p.grad_recvd.assign(n, 0);
  std::vector<StageState> stages(P);
  SimResult r;

  // Run every stage as far as it goes, round after round, until none moves.
  // Clocks only combine through message times (max), so the round order does
  // not change any time.
  for (bool progress = true; progress && r.error.empty();) {
    progress = false;
    for (int s = 0; s < P && r.error.empty(); ++s) {
      while (stages[s].pc < programs[s].size()) {
        const Step res = step(p, s, programs[s], stages[s], r.error);
        if (res != Step::done) break;
        progress = true;
      }
    }
  }
  if (r.error.empty()) {
    std::string where;
    for (int s = 0; s < P; ++s)
      if (stages[s].pc < programs[s].size())
        where += detail::concat(where.empty() ? "" : ", ", "stage ", s, " at ",
                                to_string(programs[s][stages[s].pc]));
    if (!where.empty()) {
      r.deadlock = true;
      r.error = "deadlock: " + where;
    }
  }
  for (int s = 0; s < P && r.error.empty(); ++s)
    if (!stages[s].stepped) r.error = detail::concat("stage ", s, " never ran OptimizerStep");
  for (size_t i = 0; i < n && r.error.empty(); ++i) {
    const int mb = static_cast<int>(i) / p.G, g = static_cast<int>(i) % p.G;
    if (p.fwd_done[i] < 0 || p.bwd_done[i] < 0)
      r.error = detail::concat("micro-batch ", mb, " global chunk ", g, " missed its ",
                               p.fwd_done[i] < 0 ? "forward" : "backward");
    else if ((p.act_sent[i] >= 0) != (p.act_recvd[i] != 0) ||
             (p.grad_sent[i] >= 0) != (p.grad_recvd[i] != 0))
      r.error = detail::concat("micro-batch ", mb, " global chunk ", g,
                               ": a send without its receive");
  }

  r.idle.resize(P);
  r.max_in_flight.resize(P);
  for (const StageState& st : stages) r.makespan = std::max(r.makespan, st.clock);
  for (int s = 0; s < P; ++s) {
    r.idle[s] = r.makespan - stages[s].busy;
    r.max_in_flight[s] = stages[s].max_in_flight;
  }
  const double ideal = M * (tf + tb) * V;
  r.bubble = (r.makespan - ideal) / ideal;
  return r;
}

SimResult simulate(ScheduleKind kind, int P, int V, int M) {
  std::vector<std::vector<PipeInstr>> programs;
  for (int s = 0; s < P; ++s) programs.push_back(make_schedule(kind, P, V, M, s));
  return simulate_programs(programs, V, M, 1.0 / V, 2.0 / V);
}

}  // namespace zt

namespace zt {
namespace {

// One posted op, for the messages.
struct PostedOp {
  int stage;
  size_t group;
  size_t instr;
};

struct Channel {  // messages from one rank to another (or itself)
  std::vector<PostedOp> sends, recvs;
};

}  // namespace

NcclSimResult simulate_nccl_p2p(const std::vector<std::vector<PipeInstr>>& programs,
                                const std::vector<std::vector<P2pGroup>>& groups, int V, bool train) {
  const int P = static_cast<int>(programs.size());
  ZT_CHECK(P >= 1 && V >= 1 && groups.size() == programs.size(), "P=", P, " V=", V, " with ", groups.size(),
           " group lists");
  const int G = P * V;
  NcclSimResult r;
  const auto fail = [&](std::string why) {
    if (r.error.empty()) r.error = std::move(why);
  };
  const auto where = [&](int s, size_t gi, size_t i) {
    return detail::concat("stage ", s, " group ", gi, " instruction ", i, " ", to_string(programs[s][i]));
  };

  // Static checks: coverage, peers against chunk ownership, unique tags.
  std::vector<std::pair<int, P2pMessage>> tags;  // (tag, message) of every send
  for (int s = 0; s < P; ++s) {
    std::vector<int> seen(programs[s].size(), 0);
    for (size_t gi = 0; gi < groups[s].size(); ++gi) {
      const P2pGroup& grp = groups[s][gi];
      if (grp.ops.empty()) fail(detail::concat("stage ", s, " group ", gi, " is empty"));
      bool sends = false, recvs = false;
      for (size_t i : grp.ops) {
        if (i >= programs[s].size() || !is_p2p(programs[s][i].op) || (!train && is_grad_op(programs[s][i].op))) {
          fail(detail::concat("stage ", s, " group ", gi, " holds instruction ", i,
                              ", which is not an executed send or receive"));
          continue;
        }
        ++seen[i];
        const PipeInstr& in = programs[s][i];
        const P2pMessage m = p2p_message(in, P, s);
        const int peer = p2p_peer(in, P, s);
        // The rank on the other side owns global chunk `boundary` (activation
        // sent, gradient received) or `boundary - 1` (the other two).
        const bool downstream_peer = in.op == PipeOp::send_act || in.op == PipeOp::recv_grad;
        const int other_chunk = downstream_peer ? m.boundary : m.boundary - 1;
        if (in.chunk < 0 || in.chunk >= V || m.boundary < 1 || m.boundary >= G)
          fail(where(s, gi, i) + ": crosses no boundary between chunks of the model");
        else if (other_chunk % P != peer)
          fail(detail::concat(where(s, gi, i), ": its peer is stage ", peer, " but global chunk ", other_chunk,
                              " lives on stage ", other_chunk % P));
        if (is_send(in.op)) {
          sends = true;
          tags.emplace_back(p2p_tag(m, P, V), m);
        } else {
          recvs = true;
        }
      }
      ++r.groups;
      r.mixed_groups += sends && recvs;
      r.largest_group = std::max(r.largest_group, static_cast<int>(grp.ops.size()));
    }
    for (size_t i = 0; i < programs[s].size(); ++i) {
      const PipeOp op = programs[s][i].op;
      const bool executed_p2p = is_p2p(op) && (train || !is_grad_op(op));
      if (executed_p2p && seen[i] != 1)
        fail(detail::concat("stage ", s, " instruction ", i, " ", to_string(programs[s][i]), " is in ", seen[i],
                            " groups, not 1"));
    }
  }
  std::sort(tags.begin(), tags.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 1; i < tags.size(); ++i)
    if (tags[i].first == tags[i - 1].first)
      fail(detail::concat("tag ", tags[i].first, " names both ", to_string(tags[i - 1].second), " and ",
                          to_string(tags[i].second)));
  if (!r.error.empty()) return r;

  // The run: post, pair in order, advance group by group.
  std::vector<Channel> ch(static_cast<size_t>(P) * P);  // index src * P + dst
  auto channel = [&](int src, int dst) -> Channel& { return ch[static_cast<size_t>(src) * P + dst]; };
  // Position of each posted op in its channel's list, per stage and instruction.
  std::vector<std::vector<size_t>> pos(P);
  for (int s = 0; s < P; ++s) pos[s].assign(programs[s].size(), 0);
  std::vector<size_t> cur(P, 0);
  const auto post = [&](int s) {
    if (cur[s] >= groups[s].size()) return;
    for (size_t i : groups[s][cur[s]].ops) {
      const PipeInstr& in = programs[s][i];
      const int peer = p2p_peer(in, P, s);
      std::vector<PostedOp>& list = is_send(in.op) ? channel(s, peer).sends : channel(peer, s).recvs;
      pos[s][i] = list.size();
      list.push_back({s, cur[s], i});
    }
  };
  const auto completed = [&](int s, size_t i) {
    const PipeInstr& in = programs[s][i];
    const int peer = p2p_peer(in, P, s);
    const std::vector<PostedOp>& other = is_send(in.op) ? channel(s, peer).recvs : channel(peer, s).sends;
    return other.size() > pos[s][i];
  };
  for (int s = 0; s < P; ++s) post(s);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < P; ++s)
      while (cur[s] < groups[s].size()) {
        const auto& ops = groups[s][cur[s]].ops;
        if (!std::all_of(ops.begin(), ops.end(), [&](size_t i) { return completed(s, i); })) break;
        ++cur[s];
        post(s);
        progress = true;
      }
  }

  // Order matching against tag matching, channel by channel, in posting order.
  for (int a = 0; a < P && !r.mismatch; ++a)
    for (int b = 0; b < P && !r.mismatch; ++b) {
      const Channel& c = channel(a, b);
      for (size_t n = 0; n < std::min(c.sends.size(), c.recvs.size()); ++n) {
        const PostedOp& snd = c.sends[n];
        const PostedOp& rcv = c.recvs[n];
        const P2pMessage ms = p2p_message(programs[a][snd.instr], P, a);
        const P2pMessage mr = p2p_message(programs[b][rcv.instr], P, b);
        if (ms == mr && p2p_tag(ms, P, V) == p2p_tag(mr, P, V)) continue;
        r.mismatch = true;
        r.error = detail::concat("mismatch: message ", n, " from stage ", a, " to stage ", b, ": ",
                                 where(a, snd.group, snd.instr), " sends ", to_string(ms), " (tag ",
                                 p2p_tag(ms, P, V), ") but ", where(b, rcv.group, rcv.instr), " receives ",
                                 to_string(mr), " (tag ", p2p_tag(mr, P, V), ")");
        break;
      }
    }

  std::string stuck;
  for (int s = 0; s < P; ++s) {
    if (cur[s] >= groups[s].size()) continue;
    for (size_t i : groups[s][cur[s]].ops)
      if (!completed(s, i))
        stuck += detail::concat(stuck.empty() ? "" : "; ", where(s, cur[s], i), " (",
                                is_send(programs[s][i].op) ? "to" : "from", " stage ",
                                p2p_peer(programs[s][i], P, s), ") waits");
  }
  if (!stuck.empty()) {
    r.deadlock = true;
    fail("deadlock: " + stuck);
  }
  return r;
}

NcclSimResult simulate_nccl_p2p(ScheduleKind kind, int P, int V, int M, bool train) {
  std::vector<std::vector<PipeInstr>> programs;
  std::vector<std::vector<P2pGroup>> groups;
  for (int s = 0; s < P; ++s) {
    programs.push_back(make_schedule(kind, P, V, M, s));
    groups.push_back(p2p_groups(programs.back(), train));
  }
  return simulate_nccl_p2p(programs, groups, V, train);
}

}  // namespace zt
