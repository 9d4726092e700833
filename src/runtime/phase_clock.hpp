// PhaseClock: how long each phase of a step took on the device that ran it.
//
// [Note: phase clock] wall_clock_breakdown and prometheus report a step's
// forward, backward, reduction and optimizer times. Timed with the host's
// clock, those would be right on the CPU, whose kernels run as they are
// called, and wrong on a GPU: its step queues its work without waiting for it
// ([Note: host round trips]), so the host's forward takes the time to queue
// the forward, and the device's time lands in whichever later call waits.
// So the phases are spans between marks put in the device's own order of
// work: mark() records a point there (CUDA: a timing event on the compute
// stream; inside the step's graph, the graph's own record of it, [Note: step
// graph]), span() names the phase between two marks, and totals() adds each
// phase's spans once the device has passed the last mark (the only wait,
// done when a printed step is reported). A span is the device's time from
// passing one mark to passing the next: its kernels, and the time its stream
// waited for other streams (communication) or for the host to queue more.
// The CPU's clock reads the host's steady clock at each mark.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace zt {

enum class StepPhase : uint8_t { forward, backward, walk, reduce, optimizer };
constexpr int kNumStepPhases = 5;

class PhaseClock {
 public:
  virtual ~PhaseClock() = default;
  // A new step: the marks and spans before are forgotten.
  void restart() {
    spans_.clear();
    marks_ = 0;
  }
  // A point in the device's order of work, after what is queued so far.
  int mark() {
    record(marks_);
    return marks_++;
  }
  // The phase `phase` ran from mark `from` to mark `to`.
  void span(StepPhase phase, int from, int to) { spans_.push_back(Span{phase, from, to}); }
  // Seconds per phase (StepPhase order) of the spans since restart(); waits
  // until the device has passed the last mark.
  std::array<double, kNumStepPhases> totals() {
    std::array<double, kNumStepPhases> s{};
    if (marks_ == 0) return s;
    wait_for(marks_ - 1);
    for (const Span& sp : spans_) s[static_cast<size_t>(sp.phase)] += seconds(sp.from, sp.to);
    return s;
  }
  int marks() const { return marks_; }

 protected:
  // Records mark `index` (0, 1, 2, ... within a step).
  virtual void record(int index) = 0;
  virtual void wait_for(int index) = 0;
  // Seconds from mark `from` to mark `to`, both passed.
  virtual double seconds(int from, int to) const = 0;

 private:
  struct Span {
    StepPhase phase;
    int from, to;
  };
  std::vector<Span> spans_;
  int marks_ = 0;
};

// The host's steady clock, for devices whose work is done when its call
// returns (the CPU).
class HostPhaseClock final : public PhaseClock {
 protected:
  void record(int index) override;
  void wait_for(int) override {}
  double seconds(int from, int to) const override;

 private:
  std::vector<double> t_;
};

}  // namespace zt
