#include "comm/flight_recorder.hpp"

#include <algorithm>
#include <chrono>

#include "core/dtype.hpp"

namespace zt {
namespace {

// [Note: op context]
std::atomic<int64_t> g_step{0};
std::atomic<uint8_t> g_phase{0};
std::atomic<const char*> g_instr{nullptr};
std::atomic<int32_t> g_mb{-1};
std::atomic<int32_t> g_chunk{-1};

std::atomic<size_t> g_capacity{2048};

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::vector<FlightRecorder*>& registry() {
  static std::vector<FlightRecorder*> r;
  return r;
}

const auto kStart = std::chrono::steady_clock::now();
const double kStartUnix =
    std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();

double unix_time(double t) { return t < 0 ? -1.0 : kStartUnix + t; }

nlohmann::json entry_json(const FlightEntry& e) {
  nlohmann::json j;
  j["id"] = e.id;
  if (e.seq >= 0) j["seq"] = e.seq;
  if (e.p2p_seq >= 0) j["p2p_seq"] = e.p2p_seq;
  j["op"] = comm_op_name(e.op);
  if (e.what != nullptr) j["what"] = e.what;
  if (e.op == CommOp::send || e.op == CommOp::recv) j["peer"] = e.peer;
  if (e.op == CommOp::broadcast) j["root"] = e.peer;
  if (e.op != CommOp::device_wait) {
    j["count"] = e.count;
    j["dtype"] = dtype_name(e.dtype);
  }
  j["step"] = e.ctx.step;
  j["phase"] = run_phase_name(e.ctx.phase);
  j["instr"] = format_instr(e.ctx);
  j["state"] = op_state_name(e.state);
  j["t_queued"] = unix_time(e.t_queued);
  j["t_started"] = unix_time(e.t_started);
  j["t_completed"] = unix_time(e.t_completed);
  return j;
}

}  // namespace

const char* run_phase_name(RunPhase p) {
  switch (p) {
    case RunPhase::idle: return "idle";
    case RunPhase::init: return "init";
    case RunPhase::forward: return "forward";
    case RunPhase::backward: return "backward";
    case RunPhase::reduce: return "reduce";
    case RunPhase::gather: return "gather";
    case RunPhase::optimizer: return "optimizer";
    case RunPhase::checkpoint: return "checkpoint";
    case RunPhase::validate: return "validate";
    case RunPhase::report: return "report";
  }
  return "?";
}

const char* op_state_name(OpState s) {
  switch (s) {
    case OpState::queued: return "queued";
    case OpState::started: return "started";
    case OpState::completed: return "completed";
  }
  return "?";
}

void set_op_step(int64_t step) { g_step.store(step, std::memory_order_relaxed); }
void set_op_phase(RunPhase p) { g_phase.store(static_cast<uint8_t>(p), std::memory_order_relaxed); }
void set_op_instr(const char* kind, int mb, int chunk) {
  g_instr.store(kind, std::memory_order_relaxed);
  g_mb.store(mb, std::memory_order_relaxed);
  g_chunk.store(chunk, std::memory_order_relaxed);
}

OpContext current_op_context() {
  OpContext c;
  c.step = g_step.load(std::memory_order_relaxed);
  c.phase = static_cast<RunPhase>(g_phase.load(std::memory_order_relaxed));
  c.instr = g_instr.load(std::memory_order_relaxed);
  c.mb = g_mb.load(std::memory_order_relaxed);
  c.chunk = g_chunk.load(std::memory_order_relaxed);
  return c;
}

std::string format_instr(const OpContext& c) {
  if (c.instr == nullptr) return "";
  if (c.mb < 0) return c.instr;
  return std::string(c.instr) + "(mb=" + std::to_string(c.mb) + ",c=" + std::to_string(c.chunk) + ")";
}

double flight_clock() { return std::chrono::duration<double>(std::chrono::steady_clock::now() - kStart).count(); }
double flight_clock_epoch() { return kStartUnix; }

void FlightRecorder::set_default_capacity(size_t n) { g_capacity.store(n); }

FlightRecorder::FlightRecorder(std::string name, std::string backend, std::vector<int> world_ranks, int rank)
    : name_(std::move(name)), backend_(std::move(backend)), world_ranks_(std::move(world_ranks)), rank_(rank) {
  ring_.resize(g_capacity.load());
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().push_back(this);
}

FlightRecorder::~FlightRecorder() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto& r = registry();
  r.erase(std::remove(r.begin(), r.end(), this), r.end());
}

FlightEntry* FlightRecorder::slot(uint64_t id) {
  if (ring_.empty()) return nullptr;
  FlightEntry& e = ring_[id % ring_.size()];
  return e.id == id ? &e : nullptr;
}

void FlightRecorder::set_state(FlightEntry& e, OpState s, double t) {
  if (s >= OpState::started && e.t_started < 0) e.t_started = t;
  if (s == OpState::completed) e.t_completed = t;
  e.state = std::max(e.state, s);
}

uint64_t FlightRecorder::record(CommOp op, int peer, int64_t count, DType dtype, OpState state,
                                std::shared_ptr<CompletionProbe> probe) {
  FlightEntry e;
  e.op = op;
  e.peer = peer;
  e.count = count;
  e.dtype = dtype;
  return admit(e, state, std::move(probe));
}

uint64_t FlightRecorder::record_wait(const char* what, std::shared_ptr<CompletionProbe> probe) {
  FlightEntry e;
  e.op = CommOp::device_wait;
  e.what = what;
  return admit(e, OpState::started, std::move(probe));
}

uint64_t FlightRecorder::admit(FlightEntry e, OpState state, std::shared_ptr<CompletionProbe> probe) {
  e.ctx = current_op_context();
  e.t_queued = flight_clock();
  set_state(e, state, e.t_queued);
  std::vector<std::shared_ptr<CompletionProbe>> retired;  // released after the lock, on this thread
  std::lock_guard<std::mutex> lock(mu_);
  retired.swap(retired_);
  e.id = next_id_++;
  if (e.op == CommOp::send)
    e.p2p_seq = sends_[e.peer]++;
  else if (e.op == CommOp::recv)
    e.p2p_seq = recvs_[e.peer]++;
  else if (e.op != CommOp::device_wait)
    e.seq = next_seq_++;
  if (!ring_.empty()) ring_[e.id % ring_.size()] = e;
  // Without a watchdog polling (tests, zbench) nothing would reap completed
  // probed operations and their events would pile up: reap here now and then.
  if (probe && in_flight_.size() >= 256 && e.id % 64 == 0) reap(e.t_queued);
  in_flight_.emplace(e.id, InFlight{e, std::move(probe)});
  return e.id;
}

void FlightRecorder::complete(uint64_t id) {
  const double t = flight_clock();
  std::lock_guard<std::mutex> lock(mu_);
  in_flight_.erase(id);
  if (FlightEntry* e = slot(id)) set_state(*e, OpState::completed, t);
}

bool FlightRecorder::poll(FlightEntry* oldest) {
  std::lock_guard<std::mutex> lock(mu_);
  reap(flight_clock());
  if (in_flight_.empty()) return false;
  if (oldest) *oldest = in_flight_.begin()->second.entry;
  return true;
}

void FlightRecorder::reap(double t) {
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    InFlight& f = it->second;
    if (f.probe) {
      if (f.entry.state == OpState::queued && f.probe->started()) {
        set_state(f.entry, OpState::started, t);
        if (FlightEntry* e = slot(it->first)) set_state(*e, OpState::started, t);
      }
      if (f.probe->completed()) {
        if (FlightEntry* e = slot(it->first)) set_state(*e, OpState::completed, t);
        retired_.push_back(std::move(f.probe));
        it = in_flight_.erase(it);
        continue;
      }
    }
    ++it;
  }
}

void FlightRecorder::set_abort(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  abort_ = std::move(fn);
}

void FlightRecorder::abort_now() {
  std::function<void()> fn;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn = abort_;
  }
  if (fn) fn();
}

nlohmann::json FlightRecorder::to_json(bool try_only) const {
  std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
  if (try_only) {
    if (!lock.try_lock()) return nlohmann::json::object();
  } else {
    lock.lock();
  }
  nlohmann::json j;
  j["name"] = name_;
  j["backend"] = backend_;
  j["ranks"] = world_ranks_;
  j["rank"] = rank_;
  j["next_seq"] = next_seq_;
  j["capacity"] = ring_.size();
  nlohmann::json entries = nlohmann::json::array();
  if (!ring_.empty()) {
    const uint64_t n = std::min<uint64_t>(next_id_, ring_.size());
    for (uint64_t id = next_id_ - n; id < next_id_; ++id) entries.push_back(entry_json(ring_[id % ring_.size()]));
  }
  j["entries"] = std::move(entries);
  nlohmann::json flying = nlohmann::json::array();
  for (const auto& [id, f] : in_flight_) flying.push_back(entry_json(f.entry));
  j["in_flight"] = std::move(flying);
  return j;
}

void for_each_flight_recorder(const std::function<void(FlightRecorder&)>& fn) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (FlightRecorder* r : registry()) fn(*r);
}

nlohmann::json flight_dump_json(const nlohmann::json& header, bool try_only) {
  nlohmann::json j = header;
  const OpContext c = current_op_context();
  j["context"] = {{"step", c.step}, {"phase", run_phase_name(c.phase)}, {"instr", format_instr(c)}};
  nlohmann::json comms = nlohmann::json::array();
  std::unique_lock<std::mutex> lock(registry_mutex(), std::defer_lock);
  if (try_only) {
    if (!lock.try_lock()) return j;
  } else {
    lock.lock();
  }
  for (const FlightRecorder* r : registry()) {
    nlohmann::json rj = r->to_json(try_only);
    if (!rj.empty()) comms.push_back(std::move(rj));
  }
  j["communicators"] = std::move(comms);
  return j;
}

}  // namespace zt
