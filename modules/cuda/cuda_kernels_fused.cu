// CudaKernels: the fused attention and classifier, which delegate to their
// launchers (attention.cuh, classifier.cuh) on the kernels' stream, sharing
// this object's cuBLASLt handle and workspace.
#include <cstdlib>
#include <string>

#include "modules/cuda/attention.cuh"
#include "modules/cuda/attention_cudnn.cuh"
#include "modules/cuda/classifier.cuh"
#include "modules/cuda/common.cuh"
#include "modules/cuda/cuda_kernels.hpp"
#include "modules/cuda/elementwise.cuh"
#include "modules/cuda/reduce.cuh"

namespace zt {

using cuda::check_dtype;
using cuda::check_on_device;
using cuda::cols;
using cuda::rows;

namespace {

// The classifier takes x and w in one dtype. With f32 weights and 16-bit
// activations, w is rounded to the activations' dtype in the arena (as
// [Note: matmul precision] does for any mixed product).
Tensor classifier_weight(Arena& ws, const Tensor& x, const Tensor& w, cudaStream_t stream) {
  if (w.dtype == x.dtype) return w;
  ZT_CHECK(w.dtype == DType::f32, "classifier: weight ", dtype_name(w.dtype), " with activations ",
           dtype_name(x.dtype), " (weights must match the activations or be f32)");
  const Tensor w16 = ws.alloc(x.dtype, w.shape);
  cuda::cast(w16.data, w16.dtype, w.data, w.dtype, w.numel(), stream);
  return w16;
}

}  // namespace

void CudaKernels::attention_fwd(Arena& ws, const Tensor& out, const Tensor& lse, const Tensor& qkv, int n_head,
                                const Tensor& doc_start) {
  attention_fwd_cuda(out, lse, qkv, n_head, doc_start, ws, stream_);
}

void CudaKernels::attention_bwd(Arena& ws, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                const Tensor& out, const Tensor& lse, int n_head, const Tensor& doc_start) {
  attention_bwd_cuda(dqkv, dout, qkv, out, lse, n_head, doc_start, ws, stream_);
}

// cuDNN's 16-bit gradients are the operand as they come (when the products
// take that dtype), and the bias gradient sums them widened: the bits of
// attention_bwd's widening followed by bias_grad_and_operand.
Tensor CudaKernels::attention_bwd_bias_grad_and_operand(Arena& ws, const Tensor& dbias, const Tensor& dqkv,
                                                        const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                                        const Tensor& lse, int n_head, const Tensor& doc_start,
                                                        DType partner) {
  if (!doc_start.defined() && dqkv.dtype == DType::f32 && partner == qkv.dtype &&
      (partner == DType::bf16 || partner == DType::f16)) {
    const int64_t N = cols(dqkv), R = rows(dqkv);
    ZT_CHECK(dbias.numel() == N, "attention_bwd_bias_grad_and_operand: dbias ", dbias.shape.str(), " for dqkv ",
             dqkv.shape.str());
    check_on_device(dbias, "dbias");
    check_dtype(dbias, DType::f32, "dbias");
    const Arena::Mark m = ws.mark();
    const Tensor op = ws.alloc(partner, dqkv.shape);
    if (attention_bwd_cuda_16bit(op, dout, qkv, out, lse, n_head, ws, stream_)) {
      cuda::bias_grad_16(static_cast<float*>(dbias.data), op.data, partner, R, N,
                         scratch(cuda::bias_grad_workspace_bytes(R, N)), stream_);
      return op;
    }
    ws.release_to(m);  // the flash kernels run: f32 gradients, then the fused pass
  }
  // A 16-bit dout where cuDNN declined the call after all (a shape it
  // refuses) is widened for the flash kernels by attention_bwd.
  return Kernels::attention_bwd_bias_grad_and_operand(ws, dbias, dqkv, dout, qkv, out, lse, n_head, doc_start,
                                                      partner);
}

DType CudaKernels::attention_bwd_dout_dtype(const Tensor& qkv, const Tensor& doc_start, DType math) {
  const bool sixteen = qkv.dtype == DType::bf16 || qkv.dtype == DType::f16;
  return sixteen && math == DType::f32 && !doc_start.defined() && attention_cudnn_selected() ? qkv.dtype : math;
}

void CudaKernels::gqa_attention_fwd(Arena& ws, const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                                    const Tensor& v, int n_head, int n_kv_head, const Tensor& doc_start) {
  gqa_attention_fwd_cuda(out, lse, q, k, v, n_head, n_kv_head, doc_start, ws, stream_);
}

void CudaKernels::gqa_attention_bwd(Arena& ws, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                    const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor& lse, int n_head, int n_kv_head,
                                    const Tensor& doc_start) {
  gqa_attention_bwd_cuda(dq, dk, dv, dout, q, k, v, out, lse, n_head, n_kv_head, doc_start, ws, stream_);
}

void CudaKernels::classifier_fwd(Arena& ws, const Tensor& losses, const Tensor& lse, const Tensor& x,
                                 const Tensor& w, const Tensor& targets) {
  ArenaScope scope(ws);
  const Tensor wx = classifier_weight(ws, x, w, stream_);
  classifier_fwd_cuda(ws, losses, lse, x, wx, targets, blas(), stream_, classifier_chunk_bytes_);
}

void CudaKernels::classifier_bwd(Arena& ws, const Tensor& dx, const Tensor& dw, const Tensor& dloss,
                                 const Tensor& x, const Tensor& w, const Tensor& targets, const Tensor& lse) {
  ArenaScope scope(ws);
  const Tensor wx = classifier_weight(ws, x, w, stream_);
  classifier_bwd_cuda(ws, dx, dw, dloss, x, wx, targets, lse, blas(), stream_, classifier_chunk_bytes_);
}

// The path ZTRAIN_CLASSIFIER names (Kernels::classifier_path_from_env).
void CudaKernels::classifier_fwd_bwd(Arena& ws, const Tensor& losses, const Tensor& dx, const Tensor& dw,
                                     const Tensor& dloss, const Tensor& x, const Tensor& w, const Tensor& targets) {
  const ClassifierPath path = classifier_path_from_env();
  if (path == ClassifierPath::separate) {
    Kernels::classifier_fwd_bwd(ws, losses, dx, dw, dloss, x, w, targets);
    return;
  }
  ArenaScope scope(ws);
  const Tensor wx = classifier_weight(ws, x, w, stream_);
  classifier_fwd_bwd_cuda(ws, losses, dx, dw, dloss, x, wx, targets, blas(), stream_,
                          classifier_one_pass_chunk_bytes_, path == ClassifierPath::one_pass_f32 ? DType::f32 : x.dtype);
}

ClassifierBlas CudaKernels::blas() const {
  return ClassifierBlas{lt_.get(), lt_workspace_.data(), lt_workspace_.bytes(), classifier_plans_.get()};
}

}  // namespace zt
