// `ztrain --profile`: the GPU time of every Kernels operation of a run, by
// kernel class, with the rate it achieved.
//
// [Note: kernel profile] ProfiledKernels wraps the CudaKernels of a run and
// brackets each call with two CUDA events on the kernels' stream, so what it
// measures is device time, not host time, and it changes nothing in the order
// of the work (events are only recorded; they are read in batches of a few
// thousand, once the later of them has completed). Calls are grouped into
// classes: products by shape and dtypes (TFLOP/s from 2 M N K), attention by
// direction and shape (the causal FLOPs FlashAttention counts: 2 B H T^2 hs
// forward, 2.5 times that backward), the classifier (2 N V C forward, 4 N V C
// backward: its model FLOPs, though the backward recomputes the logits), and
// memory-bound operations by name (GB/s from the bytes of their tensors,
// read or written once each). A call's host work between its two events
// (building a cuBLASLt plan or a cuDNN graph the first time) is charged to it
// when the device waits for it: `cuda_kernel_profile` saw its first product
// take 36 ms that way, so a slow class is worth a second look at the host:
// the table's last column is the host's own time inside each call (steady
// clock around it), which tells such a class apart. What a step spends outside these calls (the
// optimizer, communication, host-to-device copies, gaps) is the step's wall
// time minus their sum, printed as such.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "modules/kernels.hpp"

namespace zt {

class ProfiledKernels final : public Kernels {
 public:
  ProfiledKernels(std::unique_ptr<Kernels> inner, cudaStream_t stream);
  ~ProfiledKernels() override;
  ProfiledKernels(const ProfiledKernels&) = delete;
  ProfiledKernels& operator=(const ProfiledKernels&) = delete;

  // The table: per step (steps > 0) time, share, calls and rate of each class,
  // and wall_seconds / steps against their sum. Waits for the stream.
  std::string report(int64_t steps, double wall_seconds);
  // Forgets what was measured so far (the first step's plan and graph
  // builds); waits for the stream.
  void reset();

  DeviceKind device() const override { return inner_->device(); }
  void matmul(Arena& ws, const Tensor& out, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
              bool accumulate, const Tensor& bias) override;
  void bias_grad(const Tensor& dbias, const Tensor& dout) override;
  void layernorm_fwd(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& w,
                     const Tensor& b, const Tensor& x_copy) override;
  void layernorm_bwd(const Tensor& dx, bool accumulate_dx, const Tensor& dw, const Tensor& db, const Tensor& dout,
                     const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                     const Tensor& dres) override;
  void attention_fwd(Arena& ws, const Tensor& out, const Tensor& lse, const Tensor& qkv, int n_head,
                     const Tensor& doc_start) override;
  void attention_bwd(Arena& ws, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                     const Tensor& lse, int n_head, const Tensor& doc_start) override;
  void rmsnorm_fwd(const Tensor& out, const Tensor& rstd, const Tensor& x, const Tensor& w, double eps,
                   const Tensor& x_copy) override;
  void rmsnorm_bwd(const Tensor& dx, bool accumulate_dx, const Tensor& dw, const Tensor& dout, const Tensor& x,
                   const Tensor& w, const Tensor& rstd, const Tensor& dres, const Tensor& dx_operand) override;
  bool norm_bwd_writes_operand(const Tensor& x, DType partner) override {
    return inner_->norm_bwd_writes_operand(x, partner);
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
  void embedding_fwd(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                     const Tensor& doc_start) override;
  void embedding_bwd(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                     const Tensor& doc_start) override;
  void add(const Tensor& out, const Tensor& a, const Tensor& b) override;
  void cast(const Tensor& dst, const Tensor& src) override;
  Tensor matmul_operand(Arena& ws, const Tensor& t, DType partner) override;
  Tensor bias_grad_and_operand(Arena& ws, const Tensor& dbias, const Tensor& dout, DType partner) override;
  Tensor attention_bwd_bias_grad_and_operand(Arena& ws, const Tensor& dbias, const Tensor& dqkv, const Tensor& dout,
                                             const Tensor& qkv, const Tensor& out, const Tensor& lse, int n_head,
                                             const Tensor& doc_start, DType partner) override;
  DType norm_bwd_dout_dtype(const Tensor& x, DType math) override {
    return inner_->norm_bwd_dout_dtype(x, math);
  }
  DType gqa_grad_dtype(const Tensor& q, const Tensor& doc_start, DType math) override {
    return inner_->gqa_grad_dtype(q, doc_start, math);
  }
  DType attention_bwd_dout_dtype(const Tensor& qkv, const Tensor& doc_start, DType math) override {
    return inner_->attention_bwd_dout_dtype(qkv, doc_start, math);
  }
  Tensor gelu_bwd_bias_grad_and_operand(Arena& ws, const Tensor& dbias, const Tensor& dout, const Tensor& x,
                                        DType partner) override;
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
  struct Class {
    double ms = 0, flops = 0, bytes = 0;
    double host_ms = 0;  // the host's time inside the calls (launch work, plan lookups, casts queued)
    int64_t calls = 0;
  };
  struct Pending {
    std::string key;
    double flops, bytes;
    cudaEvent_t start, stop;
    double host_ms;
  };
  // Runs fn between two events, charged to `key`.
  template <typename Fn>
  void timed(std::string key, double flops, double bytes, Fn&& fn);
  void drain();  // folds the completed pending records into classes_
  cudaEvent_t event();

  std::unique_ptr<Kernels> inner_;
  cudaStream_t stream_;
  std::vector<Pending> pending_;
  std::vector<cudaEvent_t> free_;
  std::map<std::string, Class> classes_;
};

}  // namespace zt

namespace zt {

// The device's dense bf16 peak as measured here: the best of several
// 8192 x 8192 x 8192 bf16 products through `kernels` (cuBLASLt, fp32
// accumulation) on its stream, in FLOP/s. 0 when the 384 MiB of operands
// cannot be allocated: the step line then shows model TFLOP/s without MFU.
// About 20 ms, before training.
double measure_bf16_peak_flops(Device& dev, Kernels& kernels, cudaStream_t stream);

}  // namespace zt
