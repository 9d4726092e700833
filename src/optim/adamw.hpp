// AdamW on flat fp32 shards, CPU vectorised (OpenMP parallel for simd).
//
// A rank holds, per unit, a contiguous range of the unit's flat parameter
// buffer with its fp32 master weights, Adam m and v, and the fp32 gradient of
// the same range. These functions update such a range in place; they know
// nothing of how the range was cut (ZeRO stage, DP size): the caller says which
// sub-ranges take weight decay (DecayRange).
//
// [Note: AdamW formula] The update reproduces torch.optim.AdamW (the
// single-tensor path of torch/optim/adam.py with decoupled_weight_decay=True),
// operation for operation, in fp32 per element with the per-step scalars
// computed in double and rounded once to fp32, as PyTorch does with its Python
// float scalars on a float tensor:
//
//   g      = grad * grad_scale                       (unscale / clip first)
//   p      = p * (1 - lr*wd)                         (decay: p.mul_(1 - lr*wd))
//   m      = lerp(m, g, 1 - beta1)                   (exp_avg.lerp_)
//   v      = v*beta2 + ((1 - beta2)*g)*g             (mul_ then addcmul_)
//   denom  = sqrt(v) / sqrt(1 - beta2^t) + eps       (eps added after the bias
//                                                     correction: sqrt(v_hat)+eps)
//   p      = p + ((-lr/(1 - beta1^t)) * m) / denom   (addcdiv_, value=-step_size)
//
// The lerp, addcmul and addcdiv groupings are those of aten's CPU kernels
// (PointwiseOpsKernel.cpp: self + value*t1*t2, self + value*t1/t2; lerp with
// weight < 0.5: a + w*(b - a)). ztrain is built with -ffp-contract=off so
// nothing is fused; recent PyTorch fuses its vectorised lerp into an FMA, so
// agreement with PyTorch is to an ulp, not bit for bit. A GPU kernel must use
// this grouping (not CUDA aten's value*(t1/t2)) to match its CPU twin.
//
// This is, in exact arithmetic, the documented algorithm
//   p -= lr*wd*p;  m_hat = m/(1-beta1^t);  v_hat = v/(1-beta2^t);
//   p -= lr * m_hat / (sqrt(v_hat) + eps).
// The decay uses the parameter *before* the Adam step (decoupled decay), and
// it never enters m or v. `step` is the 1-based count of applied optimizer
// steps (a step skipped for overflow does not count, as in DeepSpeed, whose
// base optimizer is not called on a skipped step).
//
// Every element is independent, so the result is bit-identical whatever the
// thread count and however the buffer is sharded.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.hpp"

namespace zt {

struct AdamWParams {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

// Updates param, m, v (all length n) in place from grad. `step` >= 1 is the
// bias-correction step; `grad_scale` multiplies every gradient first (the
// clipping coefficient times 1/loss_scale); `decay` turns weight decay on for
// the whole range.
void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWParams& hp, int64_t step, float grad_scale, bool decay);

// Same update, and in the same pass writes the updated parameter rounded to
// nearest even into `param_copy` (the low-precision working copy).
void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWParams& hp, int64_t step, float grad_scale, bool decay,
                  bf16* param_copy);
void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWParams& hp, int64_t step, float grad_scale, bool decay,
                  f16* param_copy);

// A sub-range [begin, end) of a shard, in shard-local element offsets, and
// whether weight decay applies to it.
struct DecayRange {
  int64_t begin;
  int64_t end;
  bool decay;
};

// Updates one flat shard of n elements whose decay is described by `ranges`.
// The ranges must tile [0, n) exactly: sorted, contiguous, non-empty (padding
// at the end of a unit is a range with decay=false). A gap or overlap is a
// bug in the caller's shard description, so it throws rather than guessing.
// One parallel region covers all ranges. `param_copy` may be null (no copy),
// or point to n elements of the working copy (the overload picks its type).
void adamw_update_ranges(float* param, const float* grad, float* m, float* v, int64_t n,
                         const std::vector<DecayRange>& ranges, const AdamWParams& hp,
                         int64_t step, float grad_scale, bf16* param_copy = nullptr);
void adamw_update_ranges(float* param, const float* grad, float* m, float* v, int64_t n,
                         const std::vector<DecayRange>& ranges, const AdamWParams& hp,
                         int64_t step, float grad_scale, f16* param_copy);

}  // namespace zt
