// Fused AdamW on the GPU for flat fp32 shards: adamw_element of
// optim/adamw_math.hpp ([Note: AdamW formula]) with the scalars of
// adamw_scalars, as the CPU's adamw_update uses them, so that CPU and GPU
// give the same fp32 bits (adamw.cu is compiled with -fmad=false, the GPU's
// counterpart of the CPU build's -ffp-contract=off).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "core/dtype.hpp"
#include "optim/adamw.hpp"
#include "optim/adamw_math.hpp"

namespace zt {

// Updates param, m, v (n fp32 values each, device memory) in place from grad.
// step >= 1 is the bias-correction step; grad_scale multiplies every gradient
// first; decay turns weight decay on for the whole range. When param_copy is
// not null it receives the updated parameters rounded to nearest even in
// copy_dtype (bf16 or f16; f32 is a plain copy). Enqueued on `stream`.
void adamw_update_cuda(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWParams& hp,
                       int64_t step, float grad_scale, bool decay, void* param_copy, DType copy_dtype,
                       cudaStream_t stream);

// The same update over one flat shard of n elements whose weight decay
// `ranges` describe (tiling [0, n) in order, as adamw_update_ranges on the
// CPU takes them), in one launch per 32 ranges rather than one per range:
// the bits of adamw_update_cuda range by range, param_copy (n elements of
// copy_dtype, or null) written in the same pass. verdict: null, or the step's
// verdict in device memory ([Note: verdict on the device] in
// train/grad_finalize.hpp; optim/clip_math.hpp): the kernels then change
// nothing when it says skip, and take its gradient scale in place of
// grad_scale.
void adamw_update_ranges_cuda(float* param, const float* grad, float* m, float* v, int64_t n,
                              const std::vector<DecayRange>& ranges, const AdamWParams& hp, int64_t step,
                              float grad_scale, void* param_copy, DType copy_dtype, const double* verdict,
                              cudaStream_t stream);

}  // namespace zt
