// GELU, tanh approximation, on raw device pointers:
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.hpp"

namespace zt::cuda {

// out[i] = gelu(x[i]); out and x of dtype t (f32, bf16, f16).
void gelu_fwd(void* out, const void* x, DType t, int64_t n, cudaStream_t stream);
// din[i] = gelu'(x[i]) * dout[i] in fp32; din may alias dout.
void gelu_bwd(float* din, const float* dout, const void* x, DType t, int64_t n, cudaStream_t stream);
// For dout (rows, cols) f32 and x of dtype t: with d = gelu'(x) * dout as
// gelu_bwd computes it, dbias (cols) += column sums of d as bias_grad adds
// them (its workspace, bias_grad_workspace_bytes), and out (rows, cols) of
// dtype out_t (bf16 or f16) = d rounded; d itself is not stored.
void gelu_bwd_bias_grad_and_cast(float* dbias, void* out, DType out_t, const float* dout, const void* x, DType t,
                                 int64_t rows, int64_t cols, void* workspace, cudaStream_t stream);

}  // namespace zt::cuda
