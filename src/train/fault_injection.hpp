// Fault injection for the fault tests, from the environment variable
// ZT_INJECT_FAULT, parsed by injected_fault() where a fault can strike (the
// trainer when it is made, the checkpointer when it is made):
//   rank=R,step=S                     rank R throws at step S (the abort path)
//   overflow:rank=R,step=S,unit=U     rank R's gradient of unit U becomes inf
//   kill-in-save:rank=R,step=S        rank R dies by SIGKILL half-way through
//                                     writing its checkpoint file of step S
//   write-error:rank=R,step=S         that write fails like a full disk
//   nvme-write-error:rank=R,step=S    rank R's NVMe optimizer (offload_optimizer
//                                     device "nvme") fails its first swap-file
//                                     write of update S like a full disk
// Hangs, for the watchdog's tests (comm/watchdog.hpp):
//   hang:rank=R,step=S                rank R stops issuing anything at the
//                                     start of step S (it sleeps; its
//                                     heartbeat goes on, like a deadlock)
//   hang-in-save:rank=R,step=S        rank R sleeps half-way through writing
//                                     its checkpoint file of step S
//   desync:rank=R,step=S              rank R issues one extra all-reduce (one
//                                     f64) on the data-parallel axis as step
//                                     S starts: from there on the ranks'
//                                     collectives no longer match
//   stall-stream:rank=R,step=S        CUDA: rank R's compute stream stops at
//                                     the start of step S (a host function
//                                     enqueued on it never returns), so the
//                                     work queued after it never runs and the
//                                     host blocks at its next wait for the
//                                     device. CPU: rank R waits at step S,
//                                     through the same watched wait, for a
//                                     device that never finishes
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/error.hpp"

namespace zt {

struct InjectedFault {
  enum class Kind {
    none, throw_at_step, overflow, kill_in_save, write_error, nvme_write_error,
    hang, hang_in_save, desync, stall_stream
  };
  Kind kind = Kind::none;
  int rank = -1;
  int64_t step = -1;
  int unit = -1;
  bool at(Kind k, int world_rank, int64_t s) const { return kind == k && rank == world_rank && step == s; }
};

// The injected hangs: sleep until the watchdog ends the job.
[[noreturn]] inline void hang_forever() {
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

inline InjectedFault injected_fault() {
  InjectedFault f;
  const char* e = std::getenv("ZT_INJECT_FAULT");
  if (e == nullptr) return f;
  long long r = -1, s = -1, u = -1;
  if (std::sscanf(e, "overflow:rank=%lld,step=%lld,unit=%lld", &r, &s, &u) == 3) {
    f.kind = InjectedFault::Kind::overflow;
  } else if (std::sscanf(e, "kill-in-save:rank=%lld,step=%lld", &r, &s) == 2) {
    f.kind = InjectedFault::Kind::kill_in_save;
  } else if (std::sscanf(e, "nvme-write-error:rank=%lld,step=%lld", &r, &s) == 2) {
    f.kind = InjectedFault::Kind::nvme_write_error;
  } else if (std::sscanf(e, "write-error:rank=%lld,step=%lld", &r, &s) == 2) {
    f.kind = InjectedFault::Kind::write_error;
  } else if (std::sscanf(e, "hang:rank=%lld,step=%lld", &r, &s) == 2) {
    f.kind = InjectedFault::Kind::hang;
  } else if (std::sscanf(e, "hang-in-save:rank=%lld,step=%lld", &r, &s) == 2) {
    f.kind = InjectedFault::Kind::hang_in_save;
  } else if (std::sscanf(e, "desync:rank=%lld,step=%lld", &r, &s) == 2) {
    f.kind = InjectedFault::Kind::desync;
  } else if (std::sscanf(e, "stall-stream:rank=%lld,step=%lld", &r, &s) == 2) {
    f.kind = InjectedFault::Kind::stall_stream;
  } else if (std::sscanf(e, "rank=%lld,step=%lld", &r, &s) == 2) {
    f.kind = InjectedFault::Kind::throw_at_step;
  } else {
    ZT_USER_ERROR("ZT_INJECT_FAULT='", e, "': expected rank=R,step=S, overflow:rank=R,step=S,unit=U, ",
                  "kill-in-save:rank=R,step=S, write-error:rank=R,step=S, nvme-write-error:rank=R,step=S, ",
                  "hang:rank=R,step=S, hang-in-save:rank=R,step=S, desync:rank=R,step=S or ",
                  "stall-stream:rank=R,step=S");
  }
  f.rank = static_cast<int>(r);
  f.step = s;
  f.unit = static_cast<int>(u);
  return f;
}

}  // namespace zt
