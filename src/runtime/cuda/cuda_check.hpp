// Error checks for the CUDA runtime and cuBLASLt: ZT_CUDA_CHECK(expr) and
// ZT_CUBLAS_CHECK(expr) throw zt::Error (rank, host, file:line) carrying the
// library's own name and description of the error and the failing call.
// ZT_CUDA_CHECK_LAUNCH() checks the last kernel launch (llm.c's
// cudaCheck(cudaGetLastError()) after every <<<>>>).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "core/error.hpp"

namespace zt::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t st, const char* expr, const char* file, int line);

}  // namespace zt::cuda

#define ZT_CUDA_CHECK(expr)                                                          \
  do {                                                                               \
    const cudaError_t zt_cuda_err_ = (expr);                                         \
    if (zt_cuda_err_ != cudaSuccess)                                                 \
      ::zt::cuda::throw_cuda_error(zt_cuda_err_, #expr, __FILE__, __LINE__);         \
  } while (0)

#define ZT_CUBLAS_CHECK(expr)                                                        \
  do {                                                                               \
    const cublasStatus_t zt_cublas_st_ = (expr);                                     \
    if (zt_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                      \
      ::zt::cuda::throw_cublas_error(zt_cublas_st_, #expr, __FILE__, __LINE__);      \
  } while (0)

#define ZT_CUDA_CHECK_LAUNCH() ZT_CUDA_CHECK(cudaGetLastError())
