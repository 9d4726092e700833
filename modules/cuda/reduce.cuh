// Deterministic reductions: bias gradients (column sums) and the f64 sum of
// squares for gradient norms. Neither uses atomics; both give the same bits
// on every run and GPU (see [Note: deterministic column sums]).
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

// Bytes of workspace sum_squares needs for n elements.
size_t sum_squares_workspace_bytes(int64_t n);
// *acc (f64) += sum of x[i]^2, each square and the sums in f64.
void sum_squares(const void* x, DType t, int64_t n, double* acc, void* workspace, cudaStream_t stream);

}  // namespace zt::cuda
