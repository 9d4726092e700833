// One communicator bundle per parallel axis. Every axis of the rank grid
// (data parallel, pipeline, the tied-embedding pair) is one group of ranks
// with two communicators over it: `tensors` moves the run's device tensors
// (NCCL, or MPI staged through pinned host memory, on GPUs; the MPI group
// itself on the CPU) and `host` reduces host scalars and carries control (the
// MPI group). ZeRO, the pipeline and the trainer take an axis from here and
// never ask which backend it is; the CPU and the GPU paths differ only in
// what was attached (attach_device_communicators in device_comm.hpp).
#pragma once

#include <memory>
#include <vector>

#include "comm/topology.hpp"

namespace zt {

struct CommAxis {
  Communicator* tensors = nullptr;  // device tensors of the run
  MpiCommunicator* host = nullptr;  // host memory: scalars, flags, control
  bool present() const { return host != nullptr; }
  int size() const { return host->size(); }
  int rank() const { return host->rank(); }
};

enum class Axis { data, pipeline, tie };
constexpr int kNumAxes = 3;

class CommBundle {
 public:
  // Every axis on the topology's MPI groups (the CPU path). The tie axis is
  // present only on the first and last pipeline stage when P > 1.
  explicit CommBundle(Topology& topo);
  CommBundle(const CommBundle&) = delete;
  CommBundle& operator=(const CommBundle&) = delete;

  const CommAxis& axis(Axis a) const { return axes_[static_cast<int>(a)]; }
  const CommAxis& data() const { return axis(Axis::data); }
  const CommAxis& pipeline() const { return axis(Axis::pipeline); }
  const CommAxis& tie() const { return axis(Axis::tie); }
  // All ranks, host memory only (agreements, logging).
  Communicator& world() { return topo_.world(); }
  Topology& topology() { return topo_; }

  // Moves the axis's device tensors through `c` from now on; the bundle
  // keeps `c` alive. `c` must span the axis's ranks in the same order.
  void set_tensors(Axis a, std::unique_ptr<Communicator> c);

 private:
  Topology& topo_;
  CommAxis axes_[kNumAxes];  // by Axis
  std::vector<std::unique_ptr<Communicator>> owned_;
};

}  // namespace zt
