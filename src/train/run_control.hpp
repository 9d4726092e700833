// Run control: the stop signals and what happens after each step.
//
// SIGTERM and SIGUSR1 (what SLURM and PBS send before a time limit or a
// preemption) set a flag; the flag of every rank rides on the step's
// gradient agreement ([Note: stop agreement] in grad_finalize.cpp), so all
// ranks finish the same step, save a checkpoint and exit 0.
#pragma once

#include <cstdint>

#include "core/config.hpp"

namespace zt {

// Installs the SIGTERM / SIGUSR1 handlers (idempotent).
void install_stop_handlers();
// Whether this process received a stop signal.
bool stop_signal_received();

// What the trainer does once step `step` (1-based) is taken.
struct AfterStep {
  bool last = false;      // the run ends after this step
  bool save = false;      // write a checkpoint
  bool validate = false;  // run the validation loss
  bool print = false;     // the step line and its metrics record (reads the loss)
  bool save_at_end_only = false;  // the save is checkpoint.save_at_end's alone (no interval, no stop)
};

// `stopped`: all ranks agreed to stop; `skipped`: fp16 skipped the update;
// `has_checkpoints`, `has_val`: checkpoint.dir is set, there is a val split.
AfterStep after_step(const Config& cfg, int64_t step, bool stopped, bool skipped, bool has_checkpoints,
                     bool has_val);

}  // namespace zt
