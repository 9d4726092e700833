#include "train/run_control.hpp"

#include <atomic>
#include <csignal>

namespace zt {
namespace {

std::atomic<int> g_stop_signal{0};
extern "C" void on_stop_signal(int sig) { g_stop_signal.store(sig); }

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
}

bool stop_signal_received() { return g_stop_signal.load() != 0; }

AfterStep after_step(const Config& cfg, int64_t step, bool stopped, bool skipped, bool has_checkpoints,
                     bool has_val) {
  AfterStep a;
  a.last = step >= cfg.train.steps || stopped;
  const bool due = stopped || (cfg.checkpoint.interval > 0 && step % cfg.checkpoint.interval == 0);
  a.save = has_checkpoints && (due || (a.last && cfg.checkpoint.save_at_end));
  a.save_at_end_only = a.save && !due;
  a.validate = has_val && ((cfg.train.eval_interval > 0 && step % cfg.train.eval_interval == 0) || a.last);
  a.print = step % cfg.steps_per_print == 0 || a.last || step == 1 || skipped || a.validate;
  return a;
}

}  // namespace zt
