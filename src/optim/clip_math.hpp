// The clipping arithmetic, written once for the host and the GPU: the
// coefficient of optim/clip.hpp and the step's verdict that the device
// computes from the reduced sums ([Note: verdict on the device] in
// train/grad_finalize.hpp). Plain C++, and __host__ __device__ under nvcc.
#pragma once

#include <math.h>

#if defined(__CUDACC__)
#define ZT_CLIP_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define ZT_CLIP_HOST_DEVICE inline
#endif

namespace zt {

// DeepSpeed / torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6),
// applied only when it is below 1; max_norm <= 0 turns clipping off (1).
// `!(coef >= 1)` keeps a NaN coefficient visible instead of turning it into 1.
ZT_CLIP_HOST_DEVICE float clip_coefficient_of(double global_norm, double max_norm) {
  if (max_norm <= 0.0) return 1.0f;
  const double coef = max_norm / (global_norm + 1e-6);
  return !(coef >= 1.0) ? static_cast<float>(coef) : 1.0f;
}

// The step's verdict, four doubles: [0] the sum of squares of the (scaled)
// gradient over every rank, [1] nonzero when the loss or the gradient is not
// finite on some rank (the update is then skipped), [2] AdamW's gradient
// multiplier (an fp32 value: clip coefficient / loss scale), [3] the global
// norm of the unscaled gradient. kVerdictSkip and kVerdictGradScale name the
// two an update reads.
constexpr int kVerdictSumSq = 0;
constexpr int kVerdictSkip = 1;
constexpr int kVerdictGradScale = 2;
constexpr int kVerdictNorm = 3;
constexpr int kVerdictLength = 4;

// Sets [1] from [0] and the step's summed loss (null: not checked), before
// the reduction that takes its max over the ranks.
ZT_CLIP_HOST_DEVICE void flag_step_verdict(double* v, const double* loss_sum) {
  const bool finite = isfinite(v[kVerdictSumSq]) && (loss_sum == nullptr || isfinite(*loss_sum));
  v[kVerdictSkip] = finite ? 0.0 : 1.0;
}

// Fills [2] and [3] from [0], as GradientFinalizer does on the host:
// norm = sqrt(sum) / loss_scale, scale = fp32(clip_coefficient(norm) / loss_scale).
ZT_CLIP_HOST_DEVICE void finish_step_verdict(double* v, double max_norm, double loss_scale) {
  const double norm = sqrt(v[kVerdictSumSq]) / loss_scale;
  v[kVerdictNorm] = norm;
  v[kVerdictGradScale] = static_cast<float>(clip_coefficient_of(norm, max_norm) / loss_scale);
}

}  // namespace zt

#undef ZT_CLIP_HOST_DEVICE
