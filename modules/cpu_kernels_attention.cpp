// CpuKernels: causal multi-head self-attention, forward and backward.
//
// [Note: attention recomputation] The forward keeps only the log-sum-exp of
// each query's scaled scores (B, NH, T); the backward recomputes every
// probability p = exp(q.k * scale - lse) from q and k, as flash attention
// does. This trades one extra q.k per pair for never holding the
// (B, NH, T, T) probability tensor, which at GPT-2 124M sizes (B 8, T 1024)
// would be 400 MB per layer.
//
// Work is split over (batch, head) pairs; each pair writes only its own
// columns of the output, so there are no races and no reduction-order
// differences between thread counts.
#include <cmath>
#include <limits>

#include "modules/cpu_kernels.hpp"
#include "modules/cpu_kernels_detail.hpp"

namespace zt {
namespace {

using cpu::load;
using cpu::narrow;

struct AttnDims {
  int64_t B, T, C, NH, hs;
};

AttnDims attn_dims(const Tensor& qkv, int n_head) {
  ZT_CHECK(qkv.shape.rank() == 3 && qkv.shape[2] % 3 == 0, "attention: qkv must be (B, T, 3C), got ",
           qkv.shape.str());
  AttnDims d{qkv.shape[0], qkv.shape[1], qkv.shape[2] / 3, n_head, 0};
  ZT_CHECK(n_head > 0 && d.C % n_head == 0, "attention: C ", d.C, " not divisible by n_head ", n_head);
  d.hs = d.C / n_head;
  return d;
}

// Per (b, h) pair, K and V are first transposed into (hs, T) math-precision
// buffers, so that every inner loop runs over key positions t2 with unit
// stride and vectorises, and 16-bit storage is widened once per pair.
template <typename S, typename M>
void gather_transposed(M* dst, const S* src, int64_t T, int64_t stride, int64_t hs) {
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < hs; ++i) dst[i * T + t] = load<M>(src[t * stride + i]);
  }
}

template <typename S, typename M>
void attention_fwd_impl(M* work, S* out, M* lse, const S* qkv, const AttnDims& d) {
  const int64_t T = d.T, C = d.C, C3 = 3 * d.C, hs = d.hs;
  const M scale = M(1) / std::sqrt(static_cast<M>(hs));
  const bool par = d.B * d.NH * T * T * hs > 2 * cpu::kParallelGrain;
#pragma omp parallel if (par)
  {
    // Per thread: K^T, V^T (hs, T), scores (T), the scaled query (hs).
    M* kt = work + static_cast<int64_t>(omp_get_thread_num()) * (2 * hs * T + T + hs);
    M* vt = kt + hs * T;
    M* p = vt + hs * T;
    M* q = p + T;
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < d.B; ++b) {
      for (int64_t h = 0; h < d.NH; ++h) {
        const S* base = qkv + b * T * C3 + h * hs;  // q of token 0, head h
        gather_transposed(kt, base + C, T, C3, hs);
        gather_transposed(vt, base + 2 * C, T, C3, hs);
        for (int64_t t = 0; t < T; ++t) {
          const int64_t n = t + 1;  // causal: keys 0..t
          for (int64_t i = 0; i < hs; ++i) q[i] = load<M>(base[t * C3 + i]) * scale;
          for (int64_t t2 = 0; t2 < n; ++t2) p[t2] = 0;
          for (int64_t i = 0; i < hs; ++i) {
            const M qi = q[i];
            const M* kr = kt + i * T;
#pragma omp simd
            for (int64_t t2 = 0; t2 < n; ++t2) p[t2] += qi * kr[t2];
          }
          M mx = p[0];
#pragma omp simd reduction(max : mx)
          for (int64_t t2 = 1; t2 < n; ++t2) mx = p[t2] > mx ? p[t2] : mx;
          M sum = 0;
#pragma omp simd reduction(+ : sum)
          for (int64_t t2 = 0; t2 < n; ++t2) {
            p[t2] = cpu::fast_exp(p[t2] - mx);
            sum += p[t2];
          }
          const M inv = M(1) / sum;
          S* o = out + (b * T + t) * C + h * hs;
          for (int64_t i = 0; i < hs; ++i) {
            const M* vr = vt + i * T;
            M acc = 0;
#pragma omp simd reduction(+ : acc)
            for (int64_t t2 = 0; t2 < n; ++t2) acc += p[t2] * vr[t2];
            o[i] = narrow<S>(acc * inv);
          }
          lse[(b * d.NH + h) * T + t] = mx + std::log(sum);
        }
      }
    }
  }
}

// With s = q.k * scale, p = exp(s - lse), o = sum p v and D = do . o:
//   dv += p do;  dp = do . v;  ds = p (dp - D);  dq += ds scale k;  dk += ds scale q.
// dk and dv of a pair accumulate over queries in (hs, T) buffers and are
// written to dqkv once at the end.
template <typename S, typename M>
void attention_bwd_impl(M* work, M* dqkv, const M* dout, const S* qkv, const S* out, const M* lse,
                        const AttnDims& d) {
  const int64_t T = d.T, C = d.C, C3 = 3 * d.C, hs = d.hs;
  const M scale = M(1) / std::sqrt(static_cast<M>(hs));
  const bool par = d.B * d.NH * T * T * hs > 2 * cpu::kParallelGrain;
#pragma omp parallel if (par)
  {
    // Per thread: K^T, V^T, dK^T, dV^T (hs, T); p, ds (T); q (hs).
    M* kt = work + static_cast<int64_t>(omp_get_thread_num()) * (4 * hs * T + 2 * T + hs);
    M* vt = kt + hs * T;
    M* dkt = vt + hs * T;
    M* dvt = dkt + hs * T;
    M* p = dvt + hs * T;
    M* ds = p + T;
    M* q = ds + T;
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < d.B; ++b) {
      for (int64_t h = 0; h < d.NH; ++h) {
        const S* base = qkv + b * T * C3 + h * hs;
        M* dbase = dqkv + b * T * C3 + h * hs;
        gather_transposed(kt, base + C, T, C3, hs);
        gather_transposed(vt, base + 2 * C, T, C3, hs);
        for (int64_t j = 0; j < 2 * hs * T; ++j) dkt[j] = 0;  // dkt and dvt
        for (int64_t t = 0; t < T; ++t) {
          const int64_t n = t + 1;
          for (int64_t i = 0; i < hs; ++i) q[i] = load<M>(base[t * C3 + i]);
          const M* g = dout + (b * T + t) * C + h * hs;
          const S* o = out + (b * T + t) * C + h * hs;
          M D = 0;
          for (int64_t i = 0; i < hs; ++i) D += g[i] * load<M>(o[i]);
          const M L = lse[(b * d.NH + h) * T + t];
          for (int64_t t2 = 0; t2 < n; ++t2) p[t2] = 0, ds[t2] = 0;
          for (int64_t i = 0; i < hs; ++i) {
            const M qi = q[i] * scale, gi = g[i];
            const M* kr = kt + i * T;
            const M* vr = vt + i * T;
#pragma omp simd
            for (int64_t t2 = 0; t2 < n; ++t2) {
              p[t2] += qi * kr[t2];   // scaled score
              ds[t2] += gi * vr[t2];  // dp
            }
          }
#pragma omp simd
          for (int64_t t2 = 0; t2 < n; ++t2) {
            p[t2] = cpu::fast_exp(p[t2] - L);
            ds[t2] = p[t2] * (ds[t2] - D) * scale;
          }
          M* dq = dbase + t * C3;
          for (int64_t i = 0; i < hs; ++i) {
            const M qi = q[i], gi = g[i];
            const M* kr = kt + i * T;
            M* dkr = dkt + i * T;
            M* dvr = dvt + i * T;
            M acc = 0;
#pragma omp simd reduction(+ : acc)
            for (int64_t t2 = 0; t2 < n; ++t2) {
              acc += ds[t2] * kr[t2];
              dkr[t2] += ds[t2] * qi;
              dvr[t2] += p[t2] * gi;
            }
            dq[i] = acc;
          }
        }
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t i = 0; i < hs; ++i) {
            dbase[t * C3 + C + i] = dkt[i * T + t];
            dbase[t * C3 + 2 * C + i] = dvt[i * T + t];
          }
        }
      }
    }
  }
}

}  // namespace

void CpuKernels::attention_fwd(Arena& ws, const Tensor& out, const Tensor& lse, const Tensor& qkv,
                               int n_head) {
  const AttnDims d = attn_dims(qkv, n_head);
  ZT_CHECK(out.shape == (Shape{d.B, d.T, d.C}) && out.dtype == qkv.dtype, "attention_fwd: out ",
           out.shape.str(), " for qkv ", qkv.shape.str());
  ZT_CHECK(lse.numel() == d.B * d.NH * d.T, "attention_fwd: lse must be (B, NH, T)");
  cpu::Staging st(ws);
  cpu::with_storage(qkv.dtype, [&](auto qt) {
    using S = decltype(qt);
    using M = cpu::math_t<S>;
    M* work = st.temp<M>(static_cast<int64_t>(omp_get_max_threads()) * (2 * d.hs * d.T + d.T + d.hs));
    attention_fwd_impl<S, M>(work, cpu::typed<S>(out), cpu::math_ptr<M>(lse, "lse"),
                             cpu::typed<const S>(qkv), d);
  });
}

void CpuKernels::attention_bwd(Arena& ws, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                               const Tensor& out, const Tensor& lse, int n_head) {
  const AttnDims d = attn_dims(qkv, n_head);
  ZT_CHECK(dqkv.numel() == qkv.numel() && dout.numel() == d.B * d.T * d.C && out.numel() == dout.numel() &&
               lse.numel() == d.B * d.NH * d.T && out.dtype == qkv.dtype,
           "attention_bwd shapes");
  cpu::Staging st(ws);
  cpu::with_storage(qkv.dtype, [&](auto qt) {
    using S = decltype(qt);
    using M = cpu::math_t<S>;
    M* work = st.temp<M>(static_cast<int64_t>(omp_get_max_threads()) * (4 * d.hs * d.T + 2 * d.T + d.hs));
    attention_bwd_impl<S, M>(work, cpu::math_ptr<M>(dqkv, "dqkv"), cpu::math_ptr<const M>(dout, "dout"),
                             cpu::typed<const S>(qkv), cpu::typed<const S>(out),
                             cpu::math_ptr<const M>(lse, "lse"), d);
  });
}

}  // namespace zt
