// UnitRunner: forward and backward of a contiguous range of units for one
// micro-batch, with activation checkpointing. It is the only code that calls
// ParamProvider and GradSink, so ZeRO and the pipeline see units only through
// it.
//
// [Note: micro-batch memory] Everything a micro-batch allocates comes from two
// arenas in its MicroBatchState. `saved` (MemTag::activations) holds, per
// unit in forward order, the unit's output and (unless checkpointed) its
// stash; backward walks the units in reverse and releases each unit's region
// as soon as its backward is done, so `saved` is used LIFO and is empty again
// when the micro-batch has gone back through every unit it went forward
// through. `scratch` (MemTag::workspace) holds temporaries and, for a
// checkpointed unit, the stash of its forward and of its recomputation; it is
// released after every unit call. Arenas keep their chunks, so from the
// second micro-batch on a step allocates nothing.
//
// With checkpointing, a recomputed unit (every checkpointable one, or the
// first few of each chunk: [Note: partial recomputation] in model_desc.hpp)
// keeps only its input (which is the previous unit's output, kept anyway)
// and its output; its stash goes to scratch and is dropped. Before its backward the forward is
// re-run under Phase::recompute, and the recomputation is bit-identical
// because every kernel is deterministic.
#pragma once

#include <vector>

#include "modules/activation_offload.hpp"
#include "modules/kernels.hpp"
#include "modules/unit.hpp"

namespace zt {

struct MicroBatchState {
  // num_units: units in the whole model. chunk_bytes: the arenas' growth
  // step (tests use small chunks so that capacity() tracks the high-water
  // mark closely). shared_scratch: an arena to use as `scratch` instead of
  // an own one; `scratch` is empty between UnitRunner calls, so micro-batches
  // in flight together (the pipeline) can share one.
  MicroBatchState(Device& dev, int num_units, size_t chunk_bytes = size_t{64} << 20,
                  Arena* shared_scratch = nullptr)
      : saved(dev, MemTag::activations, chunk_bytes),
        own_scratch(shared_scratch != nullptr ? Arena() : Arena(dev, MemTag::workspace, chunk_bytes)),
        scratch(shared_scratch != nullptr ? *shared_scratch : own_scratch),
        inputs(static_cast<size_t>(num_units)),
        stashes(static_cast<size_t>(num_units)),
        marks(static_cast<size_t>(num_units)),
        swaps(static_cast<size_t>(num_units)) {}
  ~MicroBatchState() { drop_swaps(); }
  MicroBatchState(const MicroBatchState&) = delete;
  MicroBatchState& operator=(const MicroBatchState&) = delete;
  Arena saved;
  Arena own_scratch;  // unused when the scratch is shared
  Arena& scratch;
  // Indexed by unit (whole model): each unit's forward input (a view; the
  // first unit's input is owned by the caller), stash, and the mark of
  // `saved` before its forward.
  std::vector<Tensor> inputs;
  std::vector<Stash> stashes;
  std::vector<Arena::Mark> marks;
  // [Note: activation offload]: per unit, its input when the runner's
  // offload keeps it in host memory between forward and backward, and the
  // offload that holds its device slot. With `backward_follows` false (an
  // evaluation) such an input is not copied to the host: its slot goes back
  // to the pool once its reader's forward is queued.
  std::vector<SwappedActivation> swaps;
  ActivationOffload* offload = nullptr;
  bool backward_follows = true;
  Tensor targets;  // (B, T) i32, owned by the caller
  // (B, T) i32 or undefined, owned by the caller: the documents of packed
  // rows ([Note: document masking] in kernels.hpp), for every unit's context.
  Tensor doc_start;
  // Copied into every unit's context ([Note: loss in the backward] in
  // modules/head_loss.hpp); set by the caller for each walk.
  bool loss_in_backward = false;
  Tensor loss_sum;
  int64_t B = 0, T = 0;
  // Drops everything (for reuse after an abandoned micro-batch).
  void reset();
  // Gives the offload's device slots back ([Note: activation offload]).
  void drop_swaps();
};

class UnitRunner {
 public:
  // units: the whole model (indices are unit indices of ParamProvider and
  // GradSink). act_dtype: storage of activations; param_dtype: storage of the
  // parameter views the provider hands out.
  UnitRunner(const std::vector<const Unit*>& units, Kernels& kernels, Device& dev, DType param_dtype,
             DType act_dtype, bool checkpoint_activations);
  // [Note: partial recomputation] in model_desc.hpp: unit i recomputes its
  // forward in backward iff recompute[i] (one entry per unit; only
  // checkpointable units may be named). The constructor above names every
  // checkpointable unit, or none.
  UnitRunner(const std::vector<const Unit*>& units, Kernels& kernels, Device& dev, DType param_dtype,
             DType act_dtype, std::vector<bool> recompute);

  // Forward of units [first, last). `in` is unit first's input ((B, T) i32
  // tokens for unit 0) and must stay valid until this range's backward;
  // targets (B, T) i32 likewise (read by the head, also in backward), and
  // doc_start (B, T) i32 when the rows are packed documents (read by every
  // unit, also in backward and recomputation). An undefined targets or
  // doc_start keeps what mb holds.
  Tensor forward(int first, int last, MicroBatchState& mb, ParamProvider& params, const Tensor& in,
                 const Tensor& targets, const Tensor& doc_start = Tensor());

  // Backward of units [first, last) in reverse order; dout is the gradient
  // of unit last-1's output (for the head: the weight of each token's loss,
  // (B, T) in math_dtype(act)). Ranges of one micro-batch go back in the
  // reverse order they went forward. Unit first's input gradient, in
  // math_dtype(act), is written into the caller's `din_out` (required when
  // first > 0, with the shape of unit first's input; not given when first is
  // 0, which has none), so a pipeline stage sends it from there without a
  // copy. Returns din_out.
  Tensor backward(int first, int last, MicroBatchState& mb, ParamProvider& params, GradSink& grads,
                  const Tensor& dout, const Tensor& din_out = Tensor());

  int num_units() const { return static_cast<int>(units_.size()); }
  const Unit& unit(int i) const { return *units_.at(static_cast<size_t>(i)); }
  DType act_dtype() const { return act_dtype_; }
  DType param_dtype() const { return param_dtype_; }
  // [Note: the norm writes the products' operand] (kernels.hpp): on by
  // default; off, every unit converts its dout itself (the tests compare).
  void set_grad_operands(bool on) { grad_operands_ = on; }
  // [Note: activation offload]: the outputs that a recomputed unit passes to
  // a recomputed unit of the same pipeline chunk wait for the backward in
  // host memory, through `offload` (null: in `saved`). chunk_last[u] (one
  // entry per unit, or empty for one chunk): u is the last unit of its
  // chunk, whose output goes to the next stage. Set before the first forward.
  void set_activation_offload(ActivationOffload* offload, std::vector<bool> chunk_last = {});
  // Whether unit i's output goes through the offload when it is set.
  bool offloads_output(int i) const;

 private:
  UnitContext context(MicroBatchState& mb, Arena& keep) const;
  void check_range(int first, int last) const;

  std::vector<const Unit*> units_;
  Kernels& kernels_;
  DType param_dtype_, act_dtype_;
  std::vector<bool> recompute_;  // per unit
  bool grad_operands_ = true;
  ActivationOffload* offload_ = nullptr;
  std::vector<bool> chunk_last_;  // per unit, or empty
};

}  // namespace zt
