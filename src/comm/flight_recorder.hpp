// The flight recorder: per communicator, a ring of the last N operations
// (collectives and point-to-point transfers) with what the run was doing when
// each was issued, and the set of operations still in flight, which the
// watchdog (comm/watchdog.hpp) follows. Dumped as JSON per rank on a timeout,
// a fatal signal or SIGUSR2; `zdiag flight DIR` reads the dumps of all ranks
// (docs/reliability.md, "Hangs").
//
// [Note: op context] Every operation carries the step, the phase of the step
// (forward, backward, reduce, gather, optimizer, checkpoint, ...) and the
// pipeline instruction being walked. The trainer and the executor set them in
// one per-process context (set_op_step, PhaseScope, set_op_instr) as they
// go, which costs a few relaxed atomic stores; recording an operation copies
// it. Only the main thread issues communication, so the context is the main
// thread's; the fields are separate atomics so the watchdog may read them at
// any time (a read between two stores can pair a new step with an old phase,
// which a diagnostic tolerates).
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/communicator.hpp"

namespace zt {

// report: the loss read and the step line after a step.
enum class RunPhase : uint8_t { idle, init, forward, backward, reduce, gather, optimizer, checkpoint, validate, report };
const char* run_phase_name(RunPhase p);

struct OpContext {
  int64_t step = 0;  // the step being taken (1-based), 0 before the first
  RunPhase phase = RunPhase::idle;
  const char* instr = nullptr;  // the pipeline instruction's kind (a static name), null outside a walk
  int mb = -1, chunk = -1;
};
void set_op_step(int64_t step);
void set_op_phase(RunPhase p);
// `kind` must be a string with static storage (pipe_op_name); null clears.
void set_op_instr(const char* kind, int mb, int chunk);
OpContext current_op_context();
std::string format_instr(const OpContext& c);  // "Forward(mb=1,c=0)", "ReduceGrads", "" outside a walk

// Sets the phase for a scope and restores the previous one.
class PhaseScope {
 public:
  explicit PhaseScope(RunPhase p) : prev_(current_op_context().phase) { set_op_phase(p); }
  ~PhaseScope() { set_op_phase(prev_); }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  RunPhase prev_;
};

enum class OpState : uint8_t { queued, started, completed };
const char* op_state_name(OpState s);

// Tells the watchdog whether an operation it cannot test itself has started
// or completed (NCCL: events on the communicator's stream, queried with
// cudaEventQuery, which never blocks and may be called from any thread).
class CompletionProbe {
 public:
  virtual ~CompletionProbe() = default;
  virtual bool started() = 0;
  virtual bool completed() = 0;
};

struct FlightEntry {
  uint64_t id = 0;        // record number on this communicator (every operation)
  int64_t seq = -1;       // collective sequence number (-1 for point-to-point)
  int64_t p2p_seq = -1;   // k-th send to (or receive from) this peer, from 0 (-1 for collectives)
  CommOp op = CommOp::barrier;
  int peer = -1;          // peer of a send/recv, root of a broadcast, -1 otherwise
  int64_t count = 0;      // elements
  DType dtype = DType::f32;
  const char* what = nullptr;  // device_wait: what the host waits for (static storage)
  OpContext ctx;
  OpState state = OpState::queued;
  double t_queued = -1, t_started = -1, t_completed = -1;  // steady seconds since process start
};

// One per communicator; registered with the process's list (for_each_flight_recorder)
// for its lifetime. Thread-safe: the main thread records, the watchdog reads.
class FlightRecorder {
 public:
  // world_ranks: the members' ranks in MPI_COMM_WORLD, in group order.
  FlightRecorder(std::string name, std::string backend, std::vector<int> world_ranks, int rank);
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // Records an operation as issued; returns its id. `probe` (optional) is
  // polled by the watchdog until it reports completion; without one the
  // issuer calls complete(id) (MPI: when its test succeeds).
  uint64_t record(CommOp op, int peer, int64_t count, DType dtype, OpState state,
                  std::shared_ptr<CompletionProbe> probe = nullptr);
  void complete(uint64_t id);
  // A host wait for the device ([Note: watched host waits]): a device_wait
  // entry, started at once, with no sequence number.
  uint64_t record_wait(const char* what, std::shared_ptr<CompletionProbe> probe);

  // Polls the probes of operations in flight (the watchdog's tick). Returns
  // the oldest operation still in flight, if any, in `oldest`.
  bool poll(FlightEntry* oldest);

  // Called by the watchdog before it ends the job (NCCL: ncclCommAbort).
  void set_abort(std::function<void()> fn);
  void abort_now();

  // JSON of the ring, oldest first. try_only: give up (empty object) when the
  // lock is held, for the fatal-signal dump.
  nlohmann::json to_json(bool try_only = false) const;

  const std::string& name() const { return name_; }
  const std::vector<int>& world_ranks() const { return world_ranks_; }

  // Capacity of the rings of recorders made from now on (comm.flight_recorder_size;
  // 0 keeps no history, the operations in flight are still followed).
  static void set_default_capacity(size_t n);

 private:
  // Stamps `e` (context, time, id, sequence number) and follows it; releases
  // the probes retired since the last call, on this (the issuing) thread.
  uint64_t admit(FlightEntry e, OpState state, std::shared_ptr<CompletionProbe> probe);
  FlightEntry* slot(uint64_t id);  // the ring slot holding `id`, or null when overwritten
  void set_state(FlightEntry& e, OpState s, double t);
  void reap(double t);  // polls the probes of the operations in flight (mu_ held)

  std::string name_, backend_;
  std::vector<int> world_ranks_;
  int rank_;
  mutable std::mutex mu_;
  std::vector<FlightEntry> ring_;
  uint64_t next_id_ = 0;
  int64_t next_seq_ = 0;
  std::map<int, int64_t> sends_, recvs_;  // per peer: the next p2p_seq
  struct InFlight {
    FlightEntry entry;
    std::shared_ptr<CompletionProbe> probe;
  };
  std::map<uint64_t, InFlight> in_flight_;
  // Probes of completed operations, released by the next record() on the
  // issuing thread rather than by the watchdog's reap: destroying a CUDA
  // event waits for the driver's context lock, which a thread blocked in a
  // synchronize holds, so the watchdog would hang behind the very wait it
  // must time out.
  std::vector<std::shared_ptr<CompletionProbe>> retired_;
  std::function<void()> abort_;
};

// Steady seconds since the process started (the time base of the entries).
double flight_clock();
// Unix time at flight_clock() == 0, to convert entry times for the dump.
double flight_clock_epoch();

// Calls `fn` on every live recorder of this process (the watchdog's walk),
// holding the list's lock so that none is destroyed meanwhile.
void for_each_flight_recorder(const std::function<void(FlightRecorder&)>& fn);
// The dump of this rank: the header fields in `header` and every recorder.
nlohmann::json flight_dump_json(const nlohmann::json& header, bool try_only = false);

}  // namespace zt
