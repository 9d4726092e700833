#include "modules/runner.hpp"

#include <algorithm>

namespace zt {

void MicroBatchState::drop_swaps() {
  if (offload == nullptr) return;
  // A micro-batch abandoned between its forward and its backward may still
  // have copies of its host buffers in flight.
  const bool held = std::any_of(swaps.begin(), swaps.end(),
                                [](const SwappedActivation& s) { return s.where != SwappedActivation::Where::none; });
  if (held) offload->wait_all();
  for (SwappedActivation& s : swaps) offload->drop(s);
}

void MicroBatchState::reset() {
  drop_swaps();
  saved.reset();
  scratch.reset();
  for (Stash& s : stashes) s.t.clear();
  std::fill(inputs.begin(), inputs.end(), Tensor());
  targets = Tensor();
  doc_start = Tensor();
  loss_in_backward = false;
  loss_sum = Tensor();
}

namespace {
std::vector<bool> every_checkpointable(const std::vector<const Unit*>& units, bool on) {
  std::vector<bool> out(units.size(), false);
  for (size_t i = 0; i < units.size(); ++i) out[i] = on && units[i]->checkpointable();
  return out;
}
}  // namespace

UnitRunner::UnitRunner(const std::vector<const Unit*>& units, Kernels& kernels, Device& dev,
                       DType param_dtype, DType act_dtype, bool checkpoint_activations)
    : UnitRunner(units, kernels, dev, param_dtype, act_dtype, every_checkpointable(units, checkpoint_activations)) {}

UnitRunner::UnitRunner(const std::vector<const Unit*>& units, Kernels& kernels, Device& dev,
                       DType param_dtype, DType act_dtype, std::vector<bool> recompute)
    : units_(units),
      kernels_(kernels),
      param_dtype_(param_dtype),
      act_dtype_(act_dtype),
      recompute_(std::move(recompute)) {
  ZT_CHECK(!units_.empty(), "UnitRunner needs at least one unit");
  ZT_CHECK(recompute_.size() == units_.size(), "recompute names ", recompute_.size(), " units, the model has ",
           units_.size());
  for (size_t i = 0; i < units_.size(); ++i)
    ZT_CHECK(!recompute_[i] || units_[i]->checkpointable(), units_[i]->name(),
             " is not checkpointable and cannot be recomputed");
  ZT_CHECK(kernels.device() == dev.kind(), "kernels and device disagree on the device kind");
  ZT_CHECK((param_dtype == DType::f64) == (act_dtype == DType::f64),
           "f64 (test) mode needs both parameters and activations in f64");
}

void UnitRunner::set_activation_offload(ActivationOffload* offload, std::vector<bool> chunk_last) {
  ZT_CHECK(chunk_last.empty() || chunk_last.size() == units_.size(), "chunk_last names ", chunk_last.size(),
           " units, the model has ", units_.size());
  offload_ = offload;
  chunk_last_ = std::move(chunk_last);
}

bool UnitRunner::offloads_output(int i) const {
  return zt::offloads_output(recompute_, i, !chunk_last_.empty() && chunk_last_[static_cast<size_t>(i)]);
}

void UnitRunner::check_range(int first, int last) const {
  ZT_CHECK(0 <= first && first < last && last <= static_cast<int>(units_.size()), "unit range [", first,
           ", ", last, ") outside the model's ", units_.size(), " units");
}

UnitContext UnitRunner::context(MicroBatchState& mb, Arena& keep) const {
  UnitContext ctx;
  ctx.kernels = &kernels_;
  ctx.saved = &keep;
  ctx.scratch = &mb.scratch;
  ctx.B = mb.B;
  ctx.T = mb.T;
  ctx.act_dtype = act_dtype_;
  ctx.targets = mb.targets;
  ctx.doc_start = mb.doc_start;
  ctx.loss_in_backward = mb.loss_in_backward;
  ctx.loss_sum = mb.loss_sum;
  return ctx;
}

Tensor UnitRunner::forward(int first, int last, MicroBatchState& mb, ParamProvider& params,
                           const Tensor& in, const Tensor& targets, const Tensor& doc_start) {
  check_range(first, last);
  ZT_CHECK(in.shape.rank() >= 2, "unit input must be (B, T, ...), got ", in.shape.str());
  const size_t n = units_.size();
  ZT_CHECK(mb.inputs.size() == n && mb.stashes.size() == n && mb.marks.size() == n,
           "MicroBatchState made for ", mb.inputs.size(), " units, the model has ", n);
  mb.B = in.shape[0];
  mb.T = in.shape[1];
  if (targets.defined()) {
    ZT_CHECK(targets.dtype == DType::i32 && targets.numel() == mb.B * mb.T, "targets must be (B, T) i32, got ",
             targets.shape.str());
    mb.targets = targets;
  }
  if (doc_start.defined()) {
    ZT_CHECK(doc_start.dtype == DType::i32 && doc_start.shape == (Shape{mb.B, mb.T}),
             "doc_start must be (B, T) i32, got ", doc_start.shape.str());
    mb.doc_start = doc_start;
  }
  Tensor x = in;
  for (int i = first; i < last; ++i) {
    const Unit& u = *units_[static_cast<size_t>(i)];
    ZT_CHECK(x.shape == u.input_shape(mb.B, mb.T) && x.dtype == u.input_dtype(act_dtype_), u.name(),
             ": input ", x.shape.str(), " ", dtype_name(x.dtype), ", expected ",
             u.input_shape(mb.B, mb.T).str(), " ", dtype_name(u.input_dtype(act_dtype_)));
    mb.inputs[static_cast<size_t>(i)] = x;
    mb.marks[static_cast<size_t>(i)] = mb.saved.mark();
    // [Note: activation offload]: this output is the next unit's input, kept
    // in host memory until that unit's recomputation.
    const bool offload_out = offload_ != nullptr && offloads_output(i);
    if (offload_out) {
      ZT_CHECK(mb.offload == nullptr || mb.offload == offload_, "a micro-batch state used by two offloads");
      mb.offload = offload_;
    }
    const Tensor out = offload_out ? offload_->place(mb.swaps[static_cast<size_t>(i) + 1], u.output_dtype(act_dtype_),
                                                     u.output_shape(mb.B, mb.T))
                                   : mb.saved.alloc(u.output_dtype(act_dtype_), u.output_shape(mb.B, mb.T));
    const bool drop = recompute_[static_cast<size_t>(i)];
    const Arena::Mark scratch_mark = mb.scratch.mark();
    Stash& stash = mb.stashes[static_cast<size_t>(i)];
    stash.t.clear();
    const UnitContext ctx = context(mb, drop ? mb.scratch : mb.saved);
    const std::vector<Tensor> views = params.acquire(i, Phase::forward);
    u.forward(ctx, views, x, out, stash);
    params.release(i, Phase::forward);
    if (drop) stash.t.clear();  // its memory is in scratch, released below
    mb.scratch.release_to(scratch_mark);
    SwappedActivation& in_swap = mb.swaps[static_cast<size_t>(i)];
    // Its one forward reader is queued: to the host for the backward, or free.
    if (in_swap.where == SwappedActivation::Where::device) {
      if (mb.backward_follows)
        offload_->evict(in_swap);
      else
        offload_->drop(in_swap);
    }
    x = out;
  }
  return x;
}

Tensor UnitRunner::backward(int first, int last, MicroBatchState& mb, ParamProvider& params,
                            GradSink& grads, const Tensor& dout, const Tensor& din_out) {
  check_range(first, last);
  ZT_CHECK(mb.inputs.size() == units_.size() && mb.inputs[static_cast<size_t>(first)].defined(),
           "backward of units [", first, ", ", last, ") before their forward");
  const DType gdt = math_dtype(act_dtype_);
  if (first > 0) {
    const Unit& u = *units_[static_cast<size_t>(first)];
    ZT_CHECK(din_out.defined() && din_out.shape == u.input_shape(mb.B, mb.T) && din_out.dtype == gdt, u.name(),
             ": din_out ", din_out.defined() ? din_out.shape.str() + " " + dtype_name(din_out.dtype) : "not given",
             ", expected ", u.input_shape(mb.B, mb.T).str(), " ", dtype_name(gdt));
  } else {
    ZT_CHECK(!din_out.defined(), "backward from unit 0 has no input gradient: din_out must not be given");
  }
  {
    const Unit& u = *units_[static_cast<size_t>(last - 1)];
    ZT_CHECK(dout.shape == u.output_shape(mb.B, mb.T) && dout.dtype == gdt, u.name(), ": dout ",
             dout.shape.str(), " ", dtype_name(dout.dtype), ", expected ", u.output_shape(mb.B, mb.T).str(),
             " ", dtype_name(gdt));
  }
  // Two ping-pong buffers for the activation gradients between units (unit
  // i's din is unit i-1's dout), sized for the largest input in the range
  // after unit first (whose din is din_out).
  const Arena::Mark base = mb.scratch.mark();
  int64_t max_elems = 0;
  for (int i = first + 1; i < last; ++i) {
    max_elems = std::max(max_elems, units_[static_cast<size_t>(i)]->input_shape(mb.B, mb.T).numel());
  }
  Tensor ping[2];
  if (max_elems > 0) {
    ping[0] = mb.scratch.alloc(gdt, Shape{max_elems});
    ping[1] = mb.scratch.alloc(gdt, Shape{max_elems});
  }
  // [Note: the norm writes the products' operand] (kernels.hpp): where a unit
  // writes its din's operand, two more ping-pong buffers in act_dtype, and
  // the unit before reads it as its dout_operand.
  Tensor op_ping[2];
  bool operands = false;
  for (int i = first + 1; i < last && max_elems > 0 && grad_operands_; ++i) {
    const Unit& u = *units_[static_cast<size_t>(i)];
    operands = operands || (u.writes_din_operand() && u.input_dtype(act_dtype_) == act_dtype_ &&
                            kernels_.norm_bwd_writes_operand(mb.inputs[static_cast<size_t>(i)], act_dtype_));
  }
  if (operands) {
    op_ping[0] = mb.scratch.alloc(act_dtype_, Shape{max_elems});
    op_ping[1] = mb.scratch.alloc(act_dtype_, Shape{max_elems});
  }
  Tensor d = dout;
  Tensor d_operand;  // d as the products read it, where the unit after wrote it
  int parity = 0;
  for (int i = last - 1; i >= first; --i) {
    const size_t ui = static_cast<size_t>(i);
    const Unit& u = *units_[ui];
    // [Note: activation offload]: this unit's input back from the host, and
    // the next one's on its way under this unit's compute.
    SwappedActivation& in_swap = mb.swaps[ui];
    if (in_swap.where != SwappedActivation::Where::none) mb.inputs[ui] = offload_->fetch(in_swap);
    if (i > 0 && mb.swaps[ui - 1].where == SwappedActivation::Where::on_host) offload_->prefetch(mb.swaps[ui - 1]);
    const Tensor& x = mb.inputs[ui];
    Stash& stash = mb.stashes[ui];
    const Arena::Mark unit_mark = mb.scratch.mark();
    if (recompute_[ui]) {
      stash.t.clear();
      const UnitContext rctx = context(mb, mb.scratch);
      const Tensor out = mb.scratch.alloc(u.output_dtype(act_dtype_), u.output_shape(mb.B, mb.T));
      const std::vector<Tensor> views = params.acquire(i, Phase::recompute);
      u.forward(rctx, views, x, out, stash);
      params.release(i, Phase::recompute);
    }
    Tensor din;
    if (i == first)
      din = din_out;  // undefined for unit 0
    else
      din = Tensor(ping[parity].data, gdt, u.input_shape(mb.B, mb.T), ping[parity].device);
    UnitContext ctx = context(mb, mb.saved);
    ctx.grads_fresh = grads.grads_fresh(i);
    ctx.dout_operand = d_operand;
    UnitContext::GradOperand din_operand;
    if (i > first && operands && u.writes_din_operand()) {
      din_operand.space = Tensor(op_ping[parity].data, act_dtype_, din.shape, op_ping[parity].device);
      ctx.din_operand = &din_operand;
    }
    const std::vector<Tensor> views = params.acquire(i, Phase::backward);
    const std::vector<Tensor> g = grads.grads(i);
    u.backward(ctx, views, g, x, d, din, stash);
    params.release(i, Phase::backward);
    grads.done(i);
    stash.t.clear();
    mb.scratch.release_to(unit_mark);
    // Unit i's output and stash are dead now (see [Note: micro-batch memory]),
    // and so is its input where the offload holds it.
    mb.saved.release_to(mb.marks[ui]);
    if (in_swap.where != SwappedActivation::Where::none) offload_->drop(in_swap);
    mb.inputs[ui] = Tensor();
    d = din;
    d_operand = din_operand.written ? din_operand.space : Tensor();
    parity ^= 1;
  }
  mb.scratch.release_to(base);
  return din_out;
}

}  // namespace zt
