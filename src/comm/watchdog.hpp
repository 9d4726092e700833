// The watchdog: one thread per process that turns a hang into a loud failure.
//
// [Note: watchdog] A rank that stops (a stuck GPU, a dead node, a deadlock, a
// desynchronised collective) used to leave every other rank waiting inside a
// collective until the job's wall time. The watchdog thread wakes every
// 100 ms and
//   - follows every operation in flight on every communicator (the flight
//     recorders, comm/flight_recorder.hpp): NCCL operations through events
//     it queries with cudaEventQuery; MPI operations are posted non-blocking
//     and the main thread waits in a loop of MPI_Test that marks them
//     complete (MpiCommunicator), so the watchdog itself never calls MPI and
//     MPI_THREAD_FUNNELED stays enough. An operation in flight longer than
//     comm.timeout is a hang;
//   - exchanges heartbeats with its two ring neighbours (rank - 1, rank + 1)
//     over UDP, on sockets whose addresses the ranks exchanged at start. A
//     neighbour silent for comm.timeout is a hang (a process stopped or
//     killed: its heartbeat thread stops with it); one on the same host is
//     sent SIGKILL, since a stopped process answers nothing else and the
//     launcher may wait long before it kills it. A rank that ends normally
//     says goodbye first, so its silence after that is not a hang.
// On a hang it writes this rank's flight recorder (LOG_DIR/flight/rank_R.json),
// sends every rank an "end" datagram (each writes its own dump and exits 3),
// waits 2 s for them, aborts its communicators (ncclCommAbort) and calls
// MPI_Abort with exit code 3 (kExitHang); a detached reaper _exits 5 s later
// if the abort itself hangs. MPI_Abort from this thread is outside the letter
// of MPI_THREAD_FUNNELED; Open MPI's abort is a message to the launcher and an
// exit, and mpirun also ends the job when any process exits non-zero, so every
// process is gone within comm.timeout + 15 s.
//
// SIGUSR2 writes the dump without stopping the run (the thread notices the
// flag); a fatal signal (SIGSEGV, SIGABRT, SIGFPE, SIGILL) writes it from the
// handler on a best-effort basis (locks only tried) before the default action.
#pragma once

#include <string>
#include <vector>

#include "comm/mpi_communicator.hpp"

namespace zt {

struct WatchdogOptions {
  double timeout_s = 600;  // comm.timeout
  std::string dump_dir;    // LOG_DIR/flight
};

// Collective over `world`: exchanges the heartbeat addresses and starts the
// thread. Installs the SIGUSR2 and fatal-signal handlers.
void start_watchdog(MpiCommunicator& world, const WatchdogOptions& opts);
// Says goodbye to the neighbours and joins the thread (idempotent).
void stop_watchdog();

// Stops the watchdog at the end of a scope (every return path of main).
struct WatchdogScope {
  WatchdogScope() = default;
  ~WatchdogScope() { stop_watchdog(); }
  WatchdogScope(const WatchdogScope&) = delete;
  WatchdogScope& operator=(const WatchdogScope&) = delete;
};

// Writes this rank's dump now; returns its path ("" when the watchdog is not
// running or the write failed).
std::string write_flight_dump(const std::string& reason);

// For an error that ends the job from one rank (the abort path): writes this
// rank's dump, tells every rank to write theirs and exit with `exit_code`,
// and waits briefly for them. The caller then aborts the job. No-op when the
// watchdog is not running.
void flight_dump_job(const std::string& reason, int exit_code);

}  // namespace zt
