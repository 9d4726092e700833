// The head's loss: the fused classifier as the GPT-2 and Llama heads call it.
//
// [Note: loss in the backward] In a training walk every forward of the head
// is followed by its backward, and the weight of each token's loss (dloss) is
// known before the step starts. There the head's forward leaves the losses
// to its backward, which computes them together with the gradients in one
// call (Kernels::classifier_fwd_bwd): the CUDA backend then needs three
// products over the logits, not the four of a forward followed by a
// backward that recomputes them. The per-token losses go into the forward's
// output tensor, which lives until that backward, and the head adds them to
// the walk's loss accumulator (UnitContext::loss_sum) once they exist: in
// the forward otherwise. Evaluation walks, and callers that read the losses
// right after the forward, leave loss_in_backward off.
#pragma once

#include "modules/kernels.hpp"
#include "modules/unit.hpp"

namespace zt {

// x: the final norm's output (N, C); w (V, C). Writes `out` (the per-token
// losses) and `lse` (allocated from ctx.saved) now, or keeps `out` in
// `losses` for the backward.
inline void head_loss_fwd(const UnitContext& ctx, const Tensor& out, const Tensor& x, const Tensor& w, Tensor& lse,
                          Tensor& losses) {
  if (ctx.loss_in_backward) {
    losses = out;
    return;
  }
  lse = ctx.saved->alloc(math_dtype(ctx.act_dtype), Shape{ctx.B * ctx.T});
  ctx.kernels->classifier_fwd(*ctx.scratch, out, lse, x, w, ctx.targets);
  if (ctx.loss_sum.defined()) ctx.kernels->sum_into(out, ctx.loss_sum);
}

// dx (N, C) written, dw (V, C) accumulated; `lse` and `losses` as the
// forward left them.
inline void head_loss_bwd(const UnitContext& ctx, const Tensor& dx, const Tensor& dw, const Tensor& dloss,
                          const Tensor& x, const Tensor& w, const Tensor& lse, const Tensor& losses) {
  if (!losses.defined()) {
    ctx.kernels->classifier_bwd(*ctx.scratch, dx, dw, dloss, x, w, ctx.targets, lse);
    return;
  }
  ctx.kernels->classifier_fwd_bwd(*ctx.scratch, losses, dx, dw, dloss, x, w, ctx.targets);
  if (ctx.loss_sum.defined()) ctx.kernels->sum_into(losses, ctx.loss_sum);
}

}  // namespace zt
