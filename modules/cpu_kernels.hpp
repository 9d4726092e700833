// CpuKernels: the reference implementation of the Kernels table. Plain loops
// with OpenMP, CBLAS sgemm/dgemm for every matrix product, fp32 arithmetic for
// f32/bf16/f16 storage and double arithmetic for f64 storage (the precision
// the finite-difference tests need). Every reduction has a fixed order, so
// results are bit-reproducible for a given thread count.
//
// Threads: OpenMP loops use the ambient OpenMP setting and BLAS its own; this
// class never changes either (the trainer owns thread counts). BLAS is never
// called from inside an OpenMP region.
#pragma once

#include <cstddef>

#include "modules/kernels.hpp"

namespace zt {

class CpuKernels final : public Kernels {
 public:
  // classifier_chunk_bytes bounds the logits the fused classifier holds at
  // once: rows per chunk = max(1, chunk_bytes / (V * sizeof(math type))).
  explicit CpuKernels(size_t classifier_chunk_bytes = size_t{8} << 20)
      : classifier_chunk_bytes_(classifier_chunk_bytes) {}
  DeviceKind device() const override { return DeviceKind::cpu; }

  void matmul(Arena& ws, const Tensor& out, const Tensor& a, bool trans_a, const Tensor& b,
              bool trans_b, bool accumulate, const Tensor& bias = Tensor()) override;
  void bias_grad(const Tensor& dbias, const Tensor& dout) override;

  void layernorm_fwd(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                     const Tensor& w, const Tensor& b, const Tensor& x_copy = Tensor()) override;
  void layernorm_bwd(const Tensor& dx, bool accumulate_dx, const Tensor& dw, const Tensor& db,
                     const Tensor& dout, const Tensor& x, const Tensor& w, const Tensor& mean,
                     const Tensor& rstd, const Tensor& dres = Tensor()) override;

  void attention_fwd(Arena& ws, const Tensor& out, const Tensor& lse, const Tensor& qkv,
                     int n_head, const Tensor& doc_start) override;
  void attention_bwd(Arena& ws, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                     const Tensor& out, const Tensor& lse, int n_head, const Tensor& doc_start) override;

  void rmsnorm_fwd(const Tensor& out, const Tensor& rstd, const Tensor& x, const Tensor& w,
                   double eps, const Tensor& x_copy = Tensor()) override;
  void rmsnorm_bwd(const Tensor& dx, bool accumulate_dx, const Tensor& dw, const Tensor& dout,
                   const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dres = Tensor(),
                   const Tensor& dx_operand = Tensor()) override;
  void rope_fwd(const Tensor& q, const Tensor& k, const RopeConfig& rope, const Tensor& doc_start) override;
  void rope_bwd(const Tensor& dq, const Tensor& dk, const RopeConfig& rope, const Tensor& doc_start) override;
  void gqa_attention_fwd(Arena& ws, const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                         const Tensor& v, int n_head, int n_kv_head, const Tensor& doc_start) override;
  void gqa_attention_bwd(Arena& ws, const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                         const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                         const Tensor& lse, int n_head, int n_kv_head, const Tensor& doc_start) override;
  void swiglu_fwd(const Tensor& out, const Tensor& gate, const Tensor& up) override;
  void swiglu_bwd(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate,
                  const Tensor& up) override;

  void gelu_fwd(const Tensor& out, const Tensor& x) override;
  void gelu_bwd(const Tensor& din, const Tensor& dout, const Tensor& x) override;

  void classifier_fwd(Arena& ws, const Tensor& losses, const Tensor& lse, const Tensor& x,
                      const Tensor& w, const Tensor& targets) override;
  void classifier_bwd(Arena& ws, const Tensor& dx, const Tensor& dw, const Tensor& dloss,
                      const Tensor& x, const Tensor& w, const Tensor& targets,
                      const Tensor& lse) override;

  void embedding_fwd(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                     const Tensor& wpe, const Tensor& doc_start) override;
  void embedding_bwd(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                     const Tensor& tokens, const Tensor& doc_start) override;

  void add(const Tensor& out, const Tensor& a, const Tensor& b) override;
  void cast(const Tensor& dst, const Tensor& src) override;
  void zero(const Tensor& t) override;
  void scale(const Tensor& x, double alpha) override;
  void sum_squares(const Tensor& x, const Tensor& acc) override;
  void sum_into(const Tensor& x, const Tensor& acc) override;
  void check_overflow(const Tensor& x, const Tensor& flag) override;

  size_t classifier_chunk_bytes() const { return classifier_chunk_bytes_; }

 private:
  size_t classifier_chunk_bytes_;
};

// [Note: host sums of squares] CpuKernels::sum_squares cuts its n elements
// into sum_squares_parts(n) ranges (the calling thread's OpenMP thread count,
// or one range below the parallel grain), sums each range's squares in
// index order in double, and adds the range sums in range order. The ranges
// depend on n and on `parts` only, not on the team that runs them.
// add_sum_squares adds src into dst (float adds, CpuKernels::add's bits) and
// returns the sum of squares of the new dst in that order for `parts`
// ranges: given sum_squares_parts(n) from the thread that would call
// sum_squares, the sum has its bits whichever thread computes it (a landing
// thread whose team differs: zero/grad_landing.hpp), in the add's one pass.
int sum_squares_parts(int64_t n);
double add_sum_squares(float* dst, const float* src, int64_t n, int parts);

}  // namespace zt
