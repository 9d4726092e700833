// Global-norm gradient clipping and overflow detection on flat fp32 shards.
//
// The global norm is sqrt of the sum over every rank's shards of sum_squares;
// the caller all-reduces the per-rank sums (the optimizer knows no
// communicator). The clipping coefficient then goes into AdamW's grad_scale,
// so gradients are never rewritten in a separate pass:
//
//   norm       = sqrt(allreduce_sum(sum_squares(g_shard))) / loss_scale
//   grad_scale = clip_coefficient(norm, gradient_clipping) / loss_scale
//
// Dividing the norm of the scaled gradient by loss_scale is what DeepSpeed's
// fp16 optimizers do (unscale_and_clip_grads: clip = (norm/scale + 1e-6) /
// max_norm, combined_scale = clip*scale when clip > 1), and equals PyTorch's
// clip_grad_norm_ on the unscaled gradient.
#pragma once

#include <cstdint>

namespace zt {

// Sum of g[i]^2 in double. [Note: deterministic sum] The shard is cut into
// fixed blocks whose partial sums are added in block order, so the result is
// the same bit for bit whatever the thread count (an OpenMP reduction clause
// combines thread partials in an unspecified order, which would make the
// clipping coefficient, and so a resumed run, differ in the last bit).
double sum_squares(const float* g, int64_t n);

// DeepSpeed / torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6),
// applied only when it is below 1. max_norm <= 0 means clipping is off (1).
// A non-finite norm gives a coefficient of 0 (inf) or NaN; callers test for
// overflow (has_inf_or_nan) first and skip the step instead.
float clip_coefficient(double global_norm, double max_norm);

// True when any element is +-inf or NaN (tested on the bit pattern, so it
// holds under any floating-point flags).
bool has_inf_or_nan(const float* x, int64_t n);

}  // namespace zt
