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
//
// [Note: GELU in the epilogue] In 16 bits the MLP's GELU lives in the
// epilogues of its products. Forward, GELU_AUX_BIAS: the first product adds
// the bias and writes both the pre-activation (the aux output, kept for the
// backward) and its GELU (the next product's input, also kept, so the
// backward does not recompute it). Backward, DGELU: the product that gives
// the GELU output's gradient multiplies each fp32 accumulator by GELU's
// derivative at the kept pre-activation and rounds once to the 16-bit
// output, the operand of the next two products; neither the fp32 gradient
// nor a separate pass over it exists, and the bias gradient is summed from
// the rounded operand (what the weight gradient reads too). cuBLASLt's GELU
// is the tanh form, the CPU's formula to fp32 rounding (cuda_kernels_parity
// GeluForwardInTheEpilogue and GeluBackwardInTheEpilogue).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <tuple>
#include <vector>

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
  // out (M, N) = gelu'(pre) * (a op(b)) ([Note: GELU in the epilogue]):
  // out, a, b and pre (M, N) of one 16-bit dtype, N a multiple of 8 and pre
  // 16-byte aligned. False (nothing enqueued) where those do not hold or
  // cuBLASLt has no algorithm.
  bool run_dgelu(const Tensor& out, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                 const Tensor& pre, cudaStream_t stream);
  // pre (M, N) = a op(b) + bias and out = gelu(pre) in one product
  // (GELU_AUX_BIAS): out, pre, a, b and bias (N) of one 16-bit dtype, N a
  // multiple of 8, pre and bias 16-byte aligned; false (nothing enqueued)
  // otherwise or where cuBLASLt has no algorithm.
  bool run_bias_gelu(const Tensor& out, const Tensor& pre, const Tensor& a, bool trans_a, const Tensor& b,
                     bool trans_b, const Tensor& bias, cudaStream_t stream);

 private:
  struct Plan;
  enum class Epi { none, bias, dgelu, bias_gelu_aux };
  // (m, n, k, lda, ldb, ta, tb, in type, out type, epilogue, alignments of
  // A, B, C, alignment of the epilogue's aux input)
  using Key =
      std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, int, int, int, int, int, int, int>;
  static Key key(const void* d, DType d_type, const void* a, bool ta, const void* b, bool tb, DType in_type,
                 int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, Epi epi, const void* aux = nullptr);
  // D (col-major N x M) = op(b) op(a) [+ beta D] [+ bias] on pointers of one
  // input type; with aux (D's shape and type), the DGELU epilogue reading it
  // or, given a bias too, GELU_AUX_BIAS writing it. False (and nothing
  // enqueued) when cuBLASLt has no algorithm.
  bool gemm(void* d, DType d_type, const void* a, bool ta, const void* b, bool tb, DType in_type, int64_t M,
            int64_t N, int64_t K, int64_t lda, int64_t ldb, float beta, const void* bias, cudaStream_t stream,
            const void* aux = nullptr);
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
