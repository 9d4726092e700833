// Matrix products through cuBLASLt, with the row-major contract of
// Kernels::matmul: out (M, N) = [out +] op(a) op(b) [+ bias].
//
// [Note: matmul precision] Inputs of one product share a type: f32 x f32 runs
// in fp32 (CUBLAS_COMPUTE_32F, no TF32 unless allowed, so results match the
// CPU's sgemm to rounding); when either input is 16-bit, both are 16-bit
// (an f32 operand, e.g. an activation gradient meeting a bf16 weight, is
// rounded to that type first, as in mixed-precision training everywhere) and
// the product runs on the tensor cores with fp32 accumulation. The output is
// written directly in its own dtype where cuBLASLt supports it (16-bit or f32
// from 16-bit inputs; f32 from f32 inputs), so a bf16 product accumulated
// into an fp32 weight gradient (beta = 1) is one call and one rounding. The
// bias is the BIAS epilogue (bias in the output's dtype) where cuBLASLt has
// an algorithm for it; otherwise the output is first set to (out +) bias and
// the product added with beta = 1. Where cuBLASLt has no 16-bit algorithm
// for the leading dimensions or pointer alignments at hand, the product runs
// in fp32 on converted copies.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <tuple>

#include "core/tensor.hpp"
#include "runtime/device.hpp"

namespace zt::cuda {

class Matmul {
 public:
  // workspace: device memory cuBLASLt may use (32 MiB or more on Hopper).
  Matmul(cublasLtHandle_t handle, void* workspace, size_t workspace_bytes, bool allow_tf32);
  ~Matmul();
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;

  // The Kernels::matmul contract; temporaries (converted operands, an fp32
  // staging output) come from `ws` and are released before returning.
  void run(Arena& ws, const Tensor& out, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
           bool accumulate, const Tensor& bias, cudaStream_t stream);

 private:
  struct Plan;
  // (m, n, k, lda, ldb, ta, tb, in type, out type, bias, alignments of A, B, C)
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, int, int, bool, int, int, int>;
  static Key key(const void* d, DType d_type, const void* a, bool ta, const void* b, bool tb, DType in_type,
                 int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, bool bias);
  // D (col-major N x M) = op(b) op(a) [+ beta D] [+ bias] on pointers of one
  // input type; false (and nothing enqueued) when cuBLASLt has no algorithm.
  bool gemm(void* d, DType d_type, const void* a, bool ta, const void* b, bool tb, DType in_type, int64_t M,
            int64_t N, int64_t K, int64_t lda, int64_t ldb, float beta, const void* bias, cudaStream_t stream);
  // D = [D +] op(a) op(b) [+ bias] with both inputs brought to in_type: the
  // bias epilogue, else the bias written first; false (D untouched) when no
  // algorithm exists.
  bool product(Arena& ws, void* d, DType d_type, const Tensor& a, bool ta, const Tensor& b, bool tb, DType in_type,
               bool accumulate, const Tensor& bias, int64_t M, int64_t N, int64_t K, cudaStream_t stream);
  Plan* plan(const Key& wanted);

  cublasLtHandle_t handle_;
  void* workspace_;
  size_t workspace_bytes_;
  bool allow_tf32_;
  bool warned_fp32_fallback_ = false;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace zt::cuda
