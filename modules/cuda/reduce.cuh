// Deterministic reductions: bias gradients (column sums), the f64 sum of
// squares for gradient norms and the f64 sum for the loss. None uses atomics;
// each gives the same bits on every run and GPU (see [Note: deterministic
// column sums] and [Note: deterministic sum of squares]).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.hpp"

namespace zt::cuda {

// Bytes of workspace bias_grad needs for dout (rows, cols).
size_t bias_grad_workspace_bytes(int64_t rows, int64_t cols);
// dbias (cols) += column sums of dout (rows, cols), all fp32.
void bias_grad(float* dbias, const float* dout, int64_t rows, int64_t cols, void* workspace, cudaStream_t stream);
// bias_grad of dout (rows, cols) in a 16-bit dtype t, each element widened to
// f32 first: the bits bias_grad gives for the widened matrix.
void bias_grad_16(float* dbias, const void* dout, DType t, int64_t rows, int64_t cols, void* workspace,
                  cudaStream_t stream);
// bias_grad, and out (rows, cols) of dtype out_t (bf16 or f16) = dout
// rounded as cast rounds it, in the same pass over dout; the same workspace.
void bias_grad_and_cast(float* dbias, void* out, DType out_t, const float* dout, int64_t rows, int64_t cols,
                        void* workspace, cudaStream_t stream);

// Bytes of workspace sum_squares and sum_into need for n elements.
size_t sum_workspace_bytes(int64_t n);
// *acc (f64) += sum of x[i]^2, each square and the sums in f64.
void sum_squares(const void* x, DType t, int64_t n, double* acc, void* workspace, cudaStream_t stream);
// *acc (f64) += sum of x[i], the sums in f64.
void sum_into(const void* x, DType t, int64_t n, double* acc, void* workspace, cudaStream_t stream);

}  // namespace zt::cuda
