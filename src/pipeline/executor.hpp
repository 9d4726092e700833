// The step walk: the executor walks one stage's instruction list for one
// step, for every layout (a single process is a pipeline of one stage). It
// runs the stage's chunks through the UnitRunner, moves activations and their
// gradients point-to-point over the pipeline group, and hands ReduceGrads and
// OptimizerStep to the StepHooks of the layer above (the trainer's gradient
// finalisation and optimizer), so that forward, backward, gradient reduction
// and the update of every layout take this one path.
//
// Each instruction kind has its own small function; run() is the loop that
// dispatches to them. The list is checked first (validate_program): a wrong
// list is refused before anything runs. Sends and receives are issued group
// by group (p2p_groups, [Note: p2p groups] in schedule.hpp): each group inside
// pp.group_start() / group_end(), its receives waited at once after, its
// sends waited before their buffers are released. Peers (p2p_peer) and tags
// (p2p_tag) come from schedule.hpp too, so the order of the list alone
// decides progress, under MPI's tag matching (simulate()) and NCCL's order
// matching (simulate_nccl_p2p()) alike.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "comm/communicator.hpp"
#include "modules/runner.hpp"
#include "pipeline/partition.hpp"
#include "pipeline/schedule.hpp"
#include "runtime/phase_clock.hpp"

namespace zt {

struct PipelineTiming {
  double forward_s = 0, backward_s = 0, p2p_wait_s = 0, total_s = 0;
  double busy() const { return forward_s + backward_s; }
  // Idle time over compute time: the measured counterpart of the
  // schedule's (P-1)/(V*M).
  double bubble() const { return busy() > 0 ? (total_s - busy()) / busy() : 0; }
};

// What a walk asks of the layers above the pipeline.
class StepHooks {
 public:
  virtual ~StepHooks() = default;
  // Fills the (B, T) i32 tokens and targets of micro-batch `mb` (device
  // tensors; the host copies are the hook's business), and its (B, T) i32
  // doc_start when packed() (undefined otherwise). Called once per
  // micro-batch on each stage that needs it: the first stage (tokens), the
  // last (targets) and, when packed(), every stage (attention, positions).
  virtual void load_batch(int mb, const Tensor& tokens, const Tensor& targets, const Tensor& doc_start) = 0;
  // Whether the rows are packed documents ([Note: document masking] in
  // modules/kernels.hpp), whose doc_start every unit reads.
  virtual bool packed() const { return false; }
  // ReduceGrads: every Backward of the step on this stage has run.
  virtual void reduce_grads() = 0;
  // OptimizerStep: after ReduceGrads.
  virtual void optimizer_step() = 0;
};

struct WalkArgs {
  ParamProvider* params = nullptr;
  GradSink* grads = nullptr;  // unused when !train
  StepHooks* hooks = nullptr;
  Tensor dloss;     // (B, T) math dtype: the weight of each token's loss (train)
  Tensor loss_sum;  // (1) f64 on the device: += every token's loss (last chunk's stage)
  // false: an evaluation; Backward, the gradient messages, ReduceGrads and
  // OptimizerStep are skipped.
  bool train = true;
  // [Note: breadth-first walk]: a training walk runs up to `group`
  // consecutive Forwards (Backwards) of one chunk together, unit by unit.
  int group = 1;
};

// [Note: breadth-first walk] A training walk whose list has a run of
// Forwards of the same chunk for several micro-batches (at most
// WalkArgs::group of them, make_breadth_first_schedule) runs them unit by
// unit: the chunk's first unit for each micro-batch of the run, then the
// next unit for each, and so on; a run of Backwards likewise, from the
// chunk's last unit down. Every micro-batch computes exactly what it would
// alone (the runner is called with one unit at a time and the micro-batch's
// own arenas); only the order between micro-batches changes. The parameter
// provider and the gradient sink are told the run's length first
// (set_run_length), so ZeRO-3 gathers a unit once per run instead of once
// per micro-batch, and a unit's gradient buffer sums the run's micro-
// batches in order before its one reduction (ZeroEngine). The cost is
// activation memory: the run's micro-batches are all in flight, and each
// holds two activation-gradient buffers during the backward.

// Growth steps of the arenas ([Note: micro-batch memory] in runner.hpp): each
// micro-batch's saved activations, and the scratch they all share.
struct ArenaChunks {
  size_t saved = size_t{64} << 20;
  size_t scratch = size_t{64} << 20;
};

class PipelineExecutor {
 public:
  // chunks: the P*V global chunks' unit ranges; stage: this rank's index in
  // `pp` (the pipeline group, ranks ordered by stage; a group of one rank
  // when P == 1).
  PipelineExecutor(std::vector<UnitRange> chunks, int P, int V, int stage, UnitRunner& runner, Device& dev,
                   Communicator& pp, int64_t B, int64_t T, ArenaChunks arena_chunks);
  ~PipelineExecutor();
  PipelineExecutor(const PipelineExecutor&) = delete;
  PipelineExecutor& operator=(const PipelineExecutor&) = delete;

  // Walks `program` (this stage's list; validate_program first).
  void run(const std::vector<PipeInstr>& program, const WalkArgs& args, PipelineTiming* timing = nullptr);

  // Training walks put their forwards, backwards and the walk up to
  // ReduceGrads on `clock` as spans ([Note: phase clock]); null: none. The
  // caller restarts it and reads it.
  void set_phase_clock(PhaseClock* clock) { clock_ = clock; }

  bool first_stage() const { return stage_ == 0; }
  bool last_stage() const { return stage_ == P_ - 1; }

 private:
  struct InFlight;
  struct Walk;
  InFlight& flight(int mb);
  int global(int chunk) const { return chunk * P_ + stage_; }
  const UnitRange& range(int chunk) const { return chunks_[static_cast<size_t>(global(chunk))]; }

  // One function per instruction kind.
  // Forward or Backward of `chunk` for one micro-batch, or for a run of
  // them ([Note: breadth-first walk]).
  void forward(Walk& w, int chunk, const std::vector<int>& mbs);
  void backward(Walk& w, int chunk, const std::vector<int>& mbs);
  void recv_act(Walk& w, const PipeInstr& ins, int peer, int tag);
  void send_act(const PipeInstr& ins, int peer, int tag);
  void recv_grad(Walk& w, const PipeInstr& ins, int peer, int tag);
  void send_grad(const PipeInstr& ins, int peer, int tag);
  void p2p_group(Walk& w, const P2pGroup& group);
  // A micro-batch after its last instruction: its pending sends and buffers
  // go to the walk's deferred lists (waited by drain) or straight back.
  void retire(Walk& w, int mb);
  void drain(Walk& w);
  // Message buffers (received gradients, sent input gradients) are taken
  // from a pool and given back once their transfer and their use are done,
  // so a step after the first allocates none.
  Buffer take_comm_buffer(DType dtype, const Shape& shape);
  void give_back(Buffer b);

  // The mark that opens a timed span: -1 without a clock or outside training.
  int open_span(const Walk& w);
  void close_span(StepPhase phase, int from);

  std::vector<UnitRange> chunks_;
  int P_, V_, stage_;
  UnitRunner& runner_;
  PhaseClock* clock_ = nullptr;
  Device& dev_;
  Communicator& pp_;
  int64_t B_, T_;
  ArenaChunks chunks_bytes_;
  Arena scratch_;  // the workspace every micro-batch in flight shares
  std::map<int, std::unique_ptr<InFlight>> flights_;  // by micro-batch
  std::vector<std::unique_ptr<InFlight>> pool_;       // finished, kept for reuse
  std::vector<Buffer> comm_pool_;                     // message buffers not in use
};

}  // namespace zt
