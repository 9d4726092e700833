// Single-thread kernels: the verdict is a handful of doubles, read by every
// AdamW launch of the step ([Note: verdict on the device]). IEEE sqrt and
// division (nvcc's defaults) round as the host's do, so the gradient scale has
// the bits GradientFinalizer computes on the host.
#include "optim/cuda/step_verdict.cuh"

#include "core/error.hpp"
#include "optim/clip_math.hpp"

namespace zt {
namespace {

__global__ void verdict_flag_kernel(double* v, const double* loss) { flag_step_verdict(v, loss); }

__global__ void verdict_finish_kernel(double* v, double max_norm, double loss_scale) {
  finish_step_verdict(v, max_norm, loss_scale);
}

}  // namespace

void step_verdict_flag_cuda(double* verdict, const double* loss_sum, cudaStream_t stream) {
  verdict_flag_kernel<<<1, 1, 0, stream>>>(verdict, loss_sum);
  ZT_CUDA_CHECK_LAUNCH();
}

void step_verdict_finish_cuda(double* verdict, double max_norm, double loss_scale, cudaStream_t stream) {
  verdict_finish_kernel<<<1, 1, 0, stream>>>(verdict, max_norm, loss_scale);
  ZT_CUDA_CHECK_LAUNCH();
}

}  // namespace zt
