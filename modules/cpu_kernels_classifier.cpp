// CpuKernels: the classifier (x . W^T over the vocabulary) fused with softmax
// cross-entropy.
//
// [Note: chunked classifier] The logits of N = B*T rows over V classes would
// be the largest activation of the model (GPT-2 124M, B 8, T 1024: 1.6 GB in
// fp32). Rows are processed in chunks whose logits fit in
// classifier_chunk_bytes; the forward keeps only each row's log-sum-exp, and
// the backward recomputes the chunk's logits, turns them into
// dlogits = (softmax - onehot) * dloss in place, and immediately feeds them
// to the two matrix products dx = dlogits . W and dW += dlogits^T . x
// (the llm.c / Liger-kernel approach).
#include <cblas.h>

#include <climits>
#include <cmath>

#include "modules/cpu_kernels.hpp"
#include "modules/cpu_kernels_detail.hpp"

namespace zt {
namespace {

void gemm_rm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
             const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), 1.0f, A,
              static_cast<int>(lda), B, static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}
void gemm_rm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda,
             const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), 1.0, A,
              static_cast<int>(lda), B, static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}

struct ClsDims {
  int64_t N, C, V, R;  // rows, channels, classes, rows per chunk
};

ClsDims cls_dims(const Tensor& x, const Tensor& w, const Tensor& targets, size_t chunk_bytes,
                 size_t elem) {
  ClsDims d{cpu::rows(x), cpu::cols(x), cpu::rows(w), 0};
  ZT_CHECK(cpu::cols(w) == d.C, "classifier: x ", x.shape.str(), " and weight ", w.shape.str());
  ZT_CHECK(targets.numel() == d.N && targets.dtype == DType::i32, "classifier: targets must be ", d.N, " i32");
  ZT_CHECK(d.V <= INT_MAX && d.N <= INT_MAX && d.C <= INT_MAX, "classifier dimensions exceed BLAS int");
  const int32_t* tg = cpu::typed<const int32_t>(targets);
  for (int64_t n = 0; n < d.N; ++n) ZT_CHECK(tg[n] < d.V, "target ", tg[n], " outside vocabulary of ", d.V);
  const int64_t by_budget = static_cast<int64_t>(chunk_bytes / (static_cast<size_t>(d.V) * elem));
  d.R = std::max<int64_t>(1, std::min<int64_t>(d.N, by_budget));
  return d;
}

template <typename M>
void classifier_fwd_impl(cpu::Staging& st, M* losses, M* lse, const Tensor& x, const Tensor& w,
                         const int32_t* tg, const ClsDims& d) {
  const M* X = st.in<M>(x);
  const M* W = st.in<M>(w);
  M* logits = st.temp<M>(d.R * d.V);  // (R, V): the only logits that ever exist
  for (int64_t r0 = 0; r0 < d.N; r0 += d.R) {
    const int64_t rr = std::min(d.R, d.N - r0);
    gemm_rm(false, true, rr, d.V, d.C, X + r0 * d.C, d.C, W, d.C, M(0), logits, d.V);
#pragma omp parallel for schedule(static) if (rr * d.V > cpu::kParallelGrain)
    for (int64_t i = 0; i < rr; ++i) {
      const M* row = logits + i * d.V;
      M mx = row[0];
      for (int64_t v = 1; v < d.V; ++v) mx = row[v] > mx ? row[v] : mx;
      M sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t v = 0; v < d.V; ++v) sum += cpu::fast_exp(row[v] - mx);
      const int64_t n = r0 + i;
      const M l = mx + std::log(sum);
      lse[n] = l;
      losses[n] = tg[n] < 0 ? M(0) : l - row[tg[n]];
    }
  }
}

template <typename M>
void classifier_bwd_impl(cpu::Staging& st, M* dx, M* dw, const M* dloss, const Tensor& x,
                         const Tensor& w, const int32_t* tg, const M* lse, const ClsDims& d) {
  const M* X = st.in<M>(x);
  const M* W = st.in<M>(w);
  M* logits = st.temp<M>(d.R * d.V);
  for (int64_t r0 = 0; r0 < d.N; r0 += d.R) {
    const int64_t rr = std::min(d.R, d.N - r0);
    gemm_rm(false, true, rr, d.V, d.C, X + r0 * d.C, d.C, W, d.C, M(0), logits, d.V);
#pragma omp parallel for schedule(static) if (rr * d.V > cpu::kParallelGrain)
    for (int64_t i = 0; i < rr; ++i) {
      M* row = logits + i * d.V;
      const int64_t n = r0 + i;
      const M g = tg[n] < 0 ? M(0) : dloss[n];  // ignored rows get no gradient
      const M l = lse[n];
#pragma omp simd
      for (int64_t v = 0; v < d.V; ++v) row[v] = cpu::fast_exp(row[v] - l) * g;
      if (tg[n] >= 0) row[tg[n]] -= g;
    }
    // dx (rr, C) = dlogits (rr, V) . W (V, C)
    gemm_rm(false, false, rr, d.C, d.V, logits, d.V, W, d.C, M(0), dx + r0 * d.C, d.C);
    // dW (V, C) += dlogits^T (V, rr) . x (rr, C)
    gemm_rm(true, false, d.V, d.C, rr, logits, d.V, X + r0 * d.C, d.C, M(1), dw, d.C);
  }
}

}  // namespace

void CpuKernels::classifier_fwd(Arena& ws, const Tensor& losses, const Tensor& lse, const Tensor& x,
                                const Tensor& w, const Tensor& targets) {
  const bool dbl = x.dtype == DType::f64 || w.dtype == DType::f64;
  const ClsDims d = cls_dims(x, w, targets, classifier_chunk_bytes_, dbl ? 8 : 4);
  ZT_CHECK(losses.numel() == d.N && lse.numel() == d.N, "classifier_fwd: losses and lse must have ", d.N,
           " elements");
  const int32_t* tg = cpu::typed<const int32_t>(targets);
  cpu::Staging st(ws);
  if (dbl) {
    classifier_fwd_impl<double>(st, cpu::math_ptr<double>(losses, "losses"), cpu::math_ptr<double>(lse, "lse"),
                                x, w, tg, d);
  } else {
    classifier_fwd_impl<float>(st, cpu::math_ptr<float>(losses, "losses"), cpu::math_ptr<float>(lse, "lse"),
                               x, w, tg, d);
  }
}

void CpuKernels::classifier_bwd(Arena& ws, const Tensor& dx, const Tensor& dw, const Tensor& dloss,
                                const Tensor& x, const Tensor& w, const Tensor& targets,
                                const Tensor& lse) {
  const bool dbl = x.dtype == DType::f64 || w.dtype == DType::f64;
  const ClsDims d = cls_dims(x, w, targets, classifier_chunk_bytes_, dbl ? 8 : 4);
  ZT_CHECK(dx.numel() == d.N * d.C && dw.numel() == d.V * d.C && dloss.numel() == d.N &&
               lse.numel() == d.N,
           "classifier_bwd shapes");
  const int32_t* tg = cpu::typed<const int32_t>(targets);
  cpu::Staging st(ws);
  if (dbl) {
    classifier_bwd_impl<double>(st, cpu::math_ptr<double>(dx, "dx"), cpu::math_ptr<double>(dw, "dw"),
                                cpu::math_ptr<const double>(dloss, "dloss"), x, w, tg,
                                cpu::math_ptr<const double>(lse, "lse"), d);
  } else {
    classifier_bwd_impl<float>(st, cpu::math_ptr<float>(dx, "dx"), cpu::math_ptr<float>(dw, "dw"),
                               cpu::math_ptr<const float>(dloss, "dloss"), x, w, tg,
                               cpu::math_ptr<const float>(lse, "lse"), d);
  }
}

}  // namespace zt
