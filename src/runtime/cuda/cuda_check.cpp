#include "runtime/cuda/cuda_check.hpp"

namespace zt::cuda {

void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  int dev = -1;
  // Best effort: the device may be what failed.
  if (cudaGetDevice(&dev) != cudaSuccess) dev = -1;
  throw Error(detail::concat("CUDA error ", cudaGetErrorName(err), " (", cudaGetErrorString(err),
                             ") on device ", dev, " in ", expr),
              file, line);
}

void throw_cublas_error(cublasStatus_t st, const char* expr, const char* file, int line) {
  throw Error(detail::concat("cuBLAS error ", cublasLtGetStatusName(st), " (",
                             cublasLtGetStatusString(st), ") in ", expr),
              file, line);
}

}  // namespace zt::cuda
