// The two element-wise kernels around cuDNN's attention backward
// (attention_cudnn.cpp), host declarations only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.hpp"

namespace zt {

// dst (n elements of t, bf16 or f16) = src (f32) rounded to nearest even.
void cudnn_round(DType t, const float* src, void* dst, int64_t n, cudaStream_t stream);
// dst row r (f32, row stride ld) = src row r (t, bf16 or f16, dense, w
// columns), for rows rows.
void cudnn_widen(DType t, const void* src, int64_t w, int64_t rows, float* dst, int64_t ld, cudaStream_t stream);

}  // namespace zt
