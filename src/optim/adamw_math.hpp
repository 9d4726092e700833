// The AdamW arithmetic, written once for both implementations: the
// hyper-parameters, the per-step scalars (computed on the host, once per
// step) and the update of one element. adamw.cpp runs it over a shard on the
// CPU; cuda/adamw.cu runs it on the GPU. This header compiles as plain C++ and
// under nvcc, where adamw_element is a __host__ __device__ function.
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
// weight < 0.5: a + w*(b - a)). Nothing may be fused: the CPU build uses
// -ffp-contract=off and the GPU build -fmad=false, so both round every
// operation alike and agree bit for bit (IEEE division and sqrt, nvcc's
// defaults, and no flush-to-zero on the GPU). Recent PyTorch fuses its
// vectorised lerp into an FMA, so agreement with PyTorch is to an ulp, not
// bit for bit. A GPU kernel must use this grouping (not CUDA aten's
// value*(t1/t2)) to match its CPU twin.
//
// This is, in exact arithmetic, the documented algorithm
//   p -= lr*wd*p;  m_hat = m/(1-beta1^t);  v_hat = v/(1-beta2^t);
//   p -= lr * m_hat / (sqrt(v_hat) + eps).
// The decay uses the parameter *before* the Adam step (decoupled decay), and
// it never enters m or v. `step` is the 1-based count of applied optimizer
// steps (a step skipped for overflow does not count, as in DeepSpeed, whose
// base optimizer is not called on a skipped step).
#pragma once

#include <math.h>

#include <cstdint>

#if defined(__CUDACC__)
#define ZT_ADAMW_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define ZT_ADAMW_HOST_DEVICE inline
#endif

namespace zt {

struct AdamWParams {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

// The per-step scalars of [Note: AdamW formula], each computed in double and
// rounded once to fp32. A plain struct: kernels take it by value.
struct AdamWScalars {
  float grad_scale;
  float decay_factor;    // 1 - lr*wd (applied only where decay is on)
  float lerp_weight;     // 1 - beta1
  float lerp_rest;       // 1 - lerp_weight, in fp32 as aten's lerp computes it
  bool lerp_from_start;  // aten lerp: |w| < 0.5 ? a + w*(b-a) : b - (b-a)*(1-w)
  float beta2;
  float one_minus_beta2;
  float bias_correction2_sqrt;  // sqrt(1 - beta2^t)
  float eps;
  float neg_step_size;  // -lr / (1 - beta1^t)
};

// The scalars for 1-based step `step`; `grad_scale` multiplies every gradient
// first (the clipping coefficient times 1/loss_scale). Throws on a step < 1
// or betas outside [0, 1).
AdamWScalars adamw_scalars(const AdamWParams& hp, int64_t step, float grad_scale);

// One element of [Note: AdamW formula]: updates p, m and v in place from its
// gradient and returns the new p. decay_factor is s.decay_factor where weight
// decay applies and exactly 1 where it does not (p * 1 is p, bit for bit).
// The lerp branch is a template parameter so that a loop over elements has
// no control flow and vectorises.
template <bool kLerpFromStart>
ZT_ADAMW_HOST_DEVICE float adamw_element(float& p, float& m, float& v, float grad, float decay_factor,
                                         const AdamWScalars& s) {
  const float g = grad * s.grad_scale;
  const float m_new = kLerpFromStart ? m + s.lerp_weight * (g - m) : g - (g - m) * s.lerp_rest;
  const float v_new = v * s.beta2 + s.one_minus_beta2 * g * g;
  const float denom = sqrtf(v_new) / s.bias_correction2_sqrt + s.eps;
  const float p_decayed = p * decay_factor;
  const float p_new = p_decayed + s.neg_step_size * m_new / denom;
  m = m_new;
  v = v_new;
  p = p_new;
  return p_new;
}

}  // namespace zt

#undef ZT_ADAMW_HOST_DEVICE
