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

}  // namespace zt::cuda
