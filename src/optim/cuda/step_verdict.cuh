// The step's verdict computed on the GPU ([Note: verdict on the device] in
// train/grad_finalize.hpp), on the arithmetic of optim/clip_math.hpp. Each is
// one single-thread kernel on `stream`.
#pragma once

#include <cuda_runtime.h>

namespace zt {

// verdict[kVerdictSkip] = 0 when verdict[kVerdictSumSq] and *loss_sum (when
// not null) are finite, else 1.
void step_verdict_flag_cuda(double* verdict, const double* loss_sum, cudaStream_t stream);
// finish_step_verdict on the device.
void step_verdict_finish_cuda(double* verdict, double max_norm, double loss_scale, cudaStream_t stream);

}  // namespace zt
