// CudaKernels: the Kernels table on one GPU. Every call only enqueues work on
// the kernels' stream (by default the CudaDevice's compute stream) and never
// synchronises the host. Tensors must be in that GPU's memory; storage may be
// f32, bf16 or f16 (f64 storage is CPU-only, except for cast), math is fp32.
//
// What runs where: matrix products on cuBLASLt (modules/cuda/matmul.cuh,
// [Note: matmul precision]); LayerNorm, GELU, embedding, the element-wise ops
// and the reductions on this folder's kernels; attention and the fused
// classifier on attention.cuh and classifier.cuh. Every reduction is
// deterministic (no atomics on floating-point values), so activation
// checkpointing's recomputation is bit-identical to the forward.
//
// Workspace: calls given an Arena take their temporaries from it; bias_grad,
// layernorm_bwd, embedding_bwd, sum_squares and sum_into use a scratch buffer
// of this object (MemTag::workspace) that grows to the largest request and is
// then reused, so steady-state steps allocate nothing.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>

#include "modules/kernels.hpp"
#include "runtime/cuda/cuda_device.hpp"
#include "runtime/cuda/cuda_handles.hpp"

namespace zt {

namespace cuda {
class Matmul;
}
struct ClassifierBlas;
struct ClassifierPlans;

struct CudaKernelsOptions {
  // f32 x f32 products on TF32 tensor cores: faster, but ~1e-3 relative
  // error instead of fp32's ~1e-6 (the parity tests keep it off).
  bool allow_tf32 = false;
  // Device memory cuBLASLt may use per product (NVIDIA advises 32 MiB on Hopper).
  size_t cublaslt_workspace_bytes = size_t{32} << 20;
  // Bound on the logits (and dlogits) the fused classifier holds at once.
  size_t classifier_chunk_bytes = size_t{256} << 20;  // 64 MiB chunks made the backward 2x slower (docs/perf.md)
  // Training's one-pass classifier ([Note: classifier in one pass]): the
  // bound on one chunk of rows' logits (dw is read and written once per
  // chunk, so larger is faster: GPT-2 124M's 16,384 rows in one chunk
  // instead of two of 8,192 took 1.6-2.4% less time on an H200 and an
  // H100, docs/perf.md).
  // ZTRAIN_CLASSIFIER chooses the path (cuda_kernels_fused.cu).
  size_t classifier_one_pass_chunk_bytes = size_t{2} << 30;
};

class CudaKernels final : public Kernels {
 public:
  // Enqueues on dev.stream().
  explicit CudaKernels(CudaDevice& dev, const CudaKernelsOptions& opts = {});
  // Enqueues on `stream` (of dev's GPU). Memory that dev allocates is reused
  // in dev.stream()'s order ([Note: caching allocator]): work on another
  // stream must be ordered against it by the caller.
  CudaKernels(CudaDevice& dev, cudaStream_t stream, const CudaKernelsOptions& opts = {});
  ~CudaKernels() override;
  CudaKernels(const CudaKernels&) = delete;
  CudaKernels& operator=(const CudaKernels&) = delete;

  DeviceKind device() const override { return DeviceKind::cuda; }
  cudaStream_t stream() const { return stream_; }
  CudaDevice& cuda_device() const { return dev_; }

  void matmul(Arena& ws, const Tensor& out, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
              bool accumulate, const Tensor& bias = Tensor()) override;
  void bias_grad(const Tensor& dbias, const Tensor& dout) override;

  void layernorm_fwd(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& w,
                     const Tensor& b, const Tensor& x_copy = Tensor()) override;
  void layernorm_bwd(const Tensor& dx, bool accumulate_dx, const Tensor& dw, const Tensor& db, const Tensor& dout,
                     const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                     const Tensor& dres = Tensor()) override;

  void attention_fwd(Arena& ws, const Tensor& out, const Tensor& lse, const Tensor& qkv, int n_head, const Tensor& doc_start) override;
  void attention_bwd(Arena& ws, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                     const Tensor& lse, int n_head, const Tensor& doc_start) override;

  // Llama: RMSNorm, RoPE and SwiGLU (llama.cuh); grouped-query attention
  // (attention.cuh).
  void rmsnorm_fwd(const Tensor& out, const Tensor& rstd, const Tensor& x, const Tensor& w, double eps,
                   const Tensor& x_copy = Tensor()) override;
  void rmsnorm_bwd(const Tensor& dx, bool accumulate_dx, const Tensor& dw, const Tensor& dout, const Tensor& x,
                   const Tensor& w, const Tensor& rstd, const Tensor& dres = Tensor(),
                   const Tensor& dx_operand = Tensor()) override;
  bool norm_bwd_writes_operand(const Tensor& x, DType partner) override {
    return partner == x.dtype && (partner == DType::bf16 || partner == DType::f16);
  }
  void rope_fwd(const Tensor& q, const Tensor& k, const RopeConfig& rope, const Tensor& doc_start) override;
  void rope_bwd(const Tensor& dq, const Tensor& dk, const RopeConfig& rope, const Tensor& doc_start) override;
  void gqa_attention_fwd(Arena& ws, const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                         const Tensor& v, int n_head, int n_kv_head, const Tensor& doc_start) override;
  void gqa_attention_bwd(Arena& ws, const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                         const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                         int n_head, int n_kv_head, const Tensor& doc_start) override;
  void swiglu_fwd(const Tensor& out, const Tensor& gate, const Tensor& up) override;
  void swiglu_bwd(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate,
                  const Tensor& up) override;

  void gelu_fwd(const Tensor& out, const Tensor& x) override;
  void gelu_bwd(const Tensor& din, const Tensor& dout, const Tensor& x) override;

  void classifier_fwd(Arena& ws, const Tensor& losses, const Tensor& lse, const Tensor& x, const Tensor& w,
                      const Tensor& targets) override;
  void classifier_bwd(Arena& ws, const Tensor& dx, const Tensor& dw, const Tensor& dloss, const Tensor& x,
                      const Tensor& w, const Tensor& targets, const Tensor& lse) override;
  void classifier_fwd_bwd(Arena& ws, const Tensor& losses, const Tensor& dx, const Tensor& dw, const Tensor& dloss,
                          const Tensor& x, const Tensor& w, const Tensor& targets) override;

  void embedding_fwd(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe, const Tensor& doc_start) override;
  void embedding_bwd(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens, const Tensor& doc_start) override;

  void add(const Tensor& out, const Tensor& a, const Tensor& b) override;
  void cast(const Tensor& dst, const Tensor& src) override;
  Tensor matmul_operand(Arena& ws, const Tensor& t, DType partner) override;
  Tensor bias_grad_and_operand(Arena& ws, const Tensor& dbias, const Tensor& dout, DType partner) override;
  Tensor attention_bwd_bias_grad_and_operand(Arena& ws, const Tensor& dbias, const Tensor& dqkv, const Tensor& dout,
                                             const Tensor& qkv, const Tensor& out, const Tensor& lse, int n_head,
                                             const Tensor& doc_start, DType partner) override;
  // x's dtype when it is 16-bit ([Note: norms' dout in 16 bits] in
  // modules/kernels.hpp).
  DType norm_bwd_dout_dtype(const Tensor& x, DType math) override {
    return (x.dtype == DType::bf16 || x.dtype == DType::f16) && math == DType::f32 ? x.dtype : math;
  }
  // qkv's dtype where cuDNN would run the backward ([Note: attention's dout
  // in 16 bits] in modules/kernels.hpp).
  DType attention_bwd_dout_dtype(const Tensor& qkv, const Tensor& doc_start, DType math) override;
  DType gqa_grad_dtype(const Tensor& q, const Tensor& doc_start, DType math) override {
    return attention_bwd_dout_dtype(q, doc_start, math);  // the same condition: cuDNN's own dtype
  }
  Tensor gelu_bwd_bias_grad_and_operand(Arena& ws, const Tensor& dbias, const Tensor& dout, const Tensor& x,
                                        DType partner) override;
  // GELU and its derivative in the products' epilogues ([Note: GELU in the
  // epilogue]) where everything is one 16-bit dtype; ZTRAIN_GELU=separate
  // (read at every call) runs the products and GELU's own passes instead.
  void matmul_bias_gelu(Arena& ws, const Tensor& out, const Tensor& pre, const Tensor& a, const Tensor& w,
                        bool trans_w, const Tensor& bias) override;
  Tensor matmul_gelu_bwd_bias_grad_and_operand(Arena& ws, const Tensor& dbias, DType math, const Tensor& dout,
                                               const Tensor& w, bool trans_w, const Tensor& pre,
                                               DType partner) override;
  void zero(const Tensor& t) override;
  void zero_spans(const Tensor& flat, const std::vector<ZeroSpan>& spans) override;
  void scale(const Tensor& x, double alpha) override;
  void sum_squares(const Tensor& x, const Tensor& acc) override;
  void sum_into(const Tensor& x, const Tensor& acc) override;
  void check_overflow(const Tensor& x, const Tensor& flag) override;

 private:
  // The scratch buffer, grown to at least `bytes` (only ever grows).
  void* scratch(size_t bytes);
  // The cuBLASLt handle and workspace, as the classifier launchers take them.
  ClassifierBlas blas() const;

  CudaDevice& dev_;
  cudaStream_t stream_;
  CublasLtHandle lt_;
  Buffer lt_workspace_;
  std::unique_ptr<cuda::Matmul> matmul_;
  std::shared_ptr<ClassifierPlans> classifier_plans_;  // the classifier's products, by shape
  Buffer scratch_;
  size_t classifier_chunk_bytes_;
  size_t classifier_one_pass_chunk_bytes_;
};

}  // namespace zt
