// The pipeline executor: walks one stage's instruction list for one step,
// running its chunks through the UnitRunner and moving activations and their
// gradients point-to-point through a Communicator over the pipeline group.
// The list's sends and receives are issued group by group (p2p_groups,
// [Note: p2p groups] in schedule.hpp): each group inside pp.group_start() /
// group_end(), its receives waited at once after, its sends waited before
// their buffers are released. Peers (p2p_peer) and tags (p2p_tag) come from
// schedule.hpp too, so the order of the list alone decides progress, under
// MPI's tag matching (simulate()) and NCCL's order matching
// (simulate_nccl_p2p()) alike.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "comm/communicator.hpp"
#include "modules/runner.hpp"
#include "pipeline/partition.hpp"
#include "pipeline/schedule.hpp"

namespace zt {

struct PipelineTiming {
  double forward_s = 0, backward_s = 0, p2p_wait_s = 0, total_s = 0;
  double busy() const { return forward_s + backward_s; }
  // Idle time over compute time: the measured counterpart of the
  // schedule's (P-1)/(V*M).
  double bubble() const { return busy() > 0 ? (total_s - busy()) / busy() : 0; }
};

class PipelineExecutor {
 public:
  // chunks: the P*V global chunks' unit ranges; stage: this rank's index in
  // `pp` (the pipeline group, ranks ordered by stage).
  PipelineExecutor(std::vector<UnitRange> chunks, int P, int V, int stage, UnitRunner& runner, Device& dev,
                   Kernels& kernels, Communicator& pp, int64_t B, int64_t T, int64_t d_model,
                   size_t arena_chunk_bytes);
  ~PipelineExecutor();

  // Fills the (B, T) i32 tokens and targets of micro-batch mb (host copies
  // into device buffers are the callback's business).
  using LoadBatch = std::function<void(int mb, const Tensor& tokens, const Tensor& targets)>;

  // Runs the instructions up to ReduceGrads; returns the sum of the per-token
  // losses of every micro-batch (on the last stage; 0 elsewhere). `dloss`
  // (B, T) is the gradient seed of each token's loss. With train false, only
  // the forwards run (evaluation) and Backward/gradient instructions are
  // skipped.
  double run(const std::vector<PipeInstr>& schedule, ParamProvider& params, GradSink& grads, const LoadBatch& load,
             const Tensor& dloss, bool train, PipelineTiming* timing = nullptr);

  bool first_stage() const { return stage_ == 0; }
  bool last_stage() const { return stage_ == P_ - 1; }

 private:
  struct InFlight;
  InFlight& flight(int mb);
  int global(int chunk) const { return chunk * P_ + stage_; }

  std::vector<UnitRange> chunks_;
  int P_, V_, stage_;
  UnitRunner& runner_;
  Device& dev_;
  Kernels& kernels_;
  Communicator& pp_;
  int64_t B_, T_, C_;
  size_t chunk_bytes_;  // growth step of each micro-batch's arenas
  Arena scratch_;       // the workspace every micro-batch in flight shares
  std::map<int, std::unique_ptr<InFlight>> flights_;      // by micro-batch
  std::vector<std::unique_ptr<InFlight>> pool_;           // finished, kept for reuse
  std::vector<float> host_loss_;
};

}  // namespace zt
