// CpuKernels: causal multi-head and grouped-query self-attention, forward
// and backward.
//
// [Note: attention recomputation] The forward keeps only the log-sum-exp of
// each query's scaled scores (B, NH, T); the backward recomputes every
// probability p = exp(q.k * scale - lse) from q and k, as flash attention
// does. This trades one extra q.k per pair for never holding the
// (B, NH, T, T) probability tensor, which at GPT-2 124M sizes (B 8, T 1024)
// would be 400 MB per layer.
//
// Work is split over (batch, key/value head) pairs; each pair writes only its
// own columns of the outputs, so there are no races and no reduction-order
// differences between thread counts. Multi-head attention (GPT-2) is the case
// of one query head per key/value head.
//
// Document masking ([Note: document masking] in kernels.hpp): query t's keys
// are s0..t with s0 = doc_start[b, t] instead of 0..t; the loops run over
// that range only (the masked keys cost nothing), so an undefined doc_start
// (s0 = 0) is the unmasked computation, bit for bit.
#include <cmath>
#include <limits>

#include "modules/cpu_kernels.hpp"
#include "modules/cpu_kernels_detail.hpp"

namespace zt {
namespace {

using cpu::load;
using cpu::narrow;

// Where q, k and v of each token and head live: q of head h at token t of
// sequence b is q + (b T + t) qs + h hs, k and v of key/value head g likewise
// with ks, vs. Query head h reads key/value head h / (NH / NKV) (grouped-query
// attention; NKV = NH is multi-head). The packed GPT-2 layout (B, T, 3C) is
// q = qkv, k = qkv + C, v = qkv + 2C with strides 3C; Llama's q, k, v are
// separate tensors.
struct AttnDims {
  int64_t B, T, NH, NKV, hs;
  int64_t qs, ks, vs;  // elements per token of q, k, v (and of their gradients)
  int64_t C() const { return NH * hs; }  // out and dout: (B, T, NH hs)
};

AttnDims attn_dims(const Tensor& qkv, int n_head) {
  ZT_CHECK(qkv.shape.rank() == 3 && qkv.shape[2] % 3 == 0, "attention: qkv must be (B, T, 3C), got ",
           qkv.shape.str());
  const int64_t C = qkv.shape[2] / 3;
  ZT_CHECK(n_head > 0 && C % n_head == 0, "attention: C ", C, " not divisible by n_head ", n_head);
  return AttnDims{qkv.shape[0], qkv.shape[1], n_head, n_head, C / n_head, 3 * C, 3 * C, 3 * C};
}

AttnDims gqa_dims(const Tensor& q, const Tensor& k, const Tensor& v, int n_head, int n_kv_head) {
  ZT_CHECK(q.shape.rank() == 3 && k.shape.rank() == 3 && v.shape == k.shape && q.shape[0] == k.shape[0] &&
               q.shape[1] == k.shape[1],
           "gqa attention: q (B, T, NH hs), k and v (B, T, NKV hs), got q ", q.shape.str(), " k ", k.shape.str(),
           " v ", v.shape.str());
  ZT_CHECK(n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0 && q.shape[2] % n_head == 0,
           "gqa attention: n_kv_head ", n_kv_head, " must divide n_head ", n_head, " and n_head the width ",
           q.shape[2]);
  const int64_t hs = q.shape[2] / n_head;
  ZT_CHECK(k.shape[2] == n_kv_head * hs, "gqa attention: k width ", k.shape[2], " is not n_kv_head ", n_kv_head,
           " x head size ", hs);
  ZT_CHECK(q.dtype == k.dtype && q.dtype == v.dtype, "gqa attention: q, k, v dtypes differ");
  return AttnDims{q.shape[0], q.shape[1], n_head, n_kv_head, hs, q.shape[2], k.shape[2], k.shape[2]};
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
void attention_fwd_impl(M* work, S* out, M* lse, const S* qp, const S* kp, const S* vp, const int32_t* doc,
                        const AttnDims& d) {
  const int64_t T = d.T, C = d.C(), hs = d.hs, G = d.NH / d.NKV;
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
      for (int64_t kh = 0; kh < d.NKV; ++kh) {
        gather_transposed(kt, kp + b * T * d.ks + kh * hs, T, d.ks, hs);
        gather_transposed(vt, vp + b * T * d.vs + kh * hs, T, d.vs, hs);
        for (int64_t h = kh * G; h < (kh + 1) * G; ++h) {
          const S* base = qp + b * T * d.qs + h * hs;  // q of token 0, head h
          for (int64_t t = 0; t < T; ++t) {
            // Causal, within t's document: keys s0..t, p[j] for key s0 + j.
            const int64_t s0 = cpu::doc_start_of(doc, b * T + t), n = t + 1 - s0;
            for (int64_t i = 0; i < hs; ++i) q[i] = load<M>(base[t * d.qs + i]) * scale;
            for (int64_t t2 = 0; t2 < n; ++t2) p[t2] = 0;
            for (int64_t i = 0; i < hs; ++i) {
              const M qi = q[i];
              const M* kr = kt + i * T + s0;
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
              const M* vr = vt + i * T + s0;
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
}

// With s = q.k * scale, p = exp(s - lse), o = sum p v and D = do . o:
//   dv += p do;  dp = do . v;  ds = p (dp - D);  dq += ds scale k;  dk += ds scale q.
// dk and dv of a key/value head accumulate over the queries of every head
// of its group, in order, in (hs, T) buffers, and are written once at the
// end (one thread owns each (b, key/value head): no races).
template <typename S, typename M>
void attention_bwd_impl(M* work, M* dqp, M* dkp, M* dvp, const M* dout, const S* qp, const S* kp, const S* vp,
                        const S* out, const M* lse, const int32_t* doc, const AttnDims& d) {
  const int64_t T = d.T, C = d.C(), hs = d.hs, G = d.NH / d.NKV;
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
      for (int64_t kh = 0; kh < d.NKV; ++kh) {
        gather_transposed(kt, kp + b * T * d.ks + kh * hs, T, d.ks, hs);
        gather_transposed(vt, vp + b * T * d.vs + kh * hs, T, d.vs, hs);
        for (int64_t j = 0; j < 2 * hs * T; ++j) dkt[j] = 0;  // dkt and dvt
        for (int64_t h = kh * G; h < (kh + 1) * G; ++h) {
          const S* base = qp + b * T * d.qs + h * hs;
          M* dbase = dqp + b * T * d.qs + h * hs;
          for (int64_t t = 0; t < T; ++t) {
            const int64_t s0 = cpu::doc_start_of(doc, b * T + t), n = t + 1 - s0;  // keys s0..t
            for (int64_t i = 0; i < hs; ++i) q[i] = load<M>(base[t * d.qs + i]);
            const M* g = dout + (b * T + t) * C + h * hs;
            const S* o = out + (b * T + t) * C + h * hs;
            M D = 0;
            for (int64_t i = 0; i < hs; ++i) D += g[i] * load<M>(o[i]);
            const M L = lse[(b * d.NH + h) * T + t];
            for (int64_t t2 = 0; t2 < n; ++t2) p[t2] = 0, ds[t2] = 0;
            for (int64_t i = 0; i < hs; ++i) {
              const M qi = q[i] * scale, gi = g[i];
              const M* kr = kt + i * T + s0;
              const M* vr = vt + i * T + s0;
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
            M* dq = dbase + t * d.qs;
            for (int64_t i = 0; i < hs; ++i) {
              const M qi = q[i], gi = g[i];
              const M* kr = kt + i * T + s0;
              M* dkr = dkt + i * T + s0;
              M* dvr = dvt + i * T + s0;
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
        }
        M* dkb = dkp + b * T * d.ks + kh * hs;
        M* dvb = dvp + b * T * d.vs + kh * hs;
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t i = 0; i < hs; ++i) {
            dkb[t * d.ks + i] = dkt[i * T + t];
            dvb[t * d.vs + i] = dvt[i * T + t];
          }
        }
      }
    }
  }
}

}  // namespace

void CpuKernels::attention_fwd(Arena& ws, const Tensor& out, const Tensor& lse, const Tensor& qkv,
                               int n_head, const Tensor& doc_start) {
  const AttnDims d = attn_dims(qkv, n_head);
  const int32_t* doc = cpu::doc_starts(doc_start, d.B, d.T, "attention_fwd");
  const int64_t C = d.C();
  ZT_CHECK(out.shape == (Shape{d.B, d.T, C}) && out.dtype == qkv.dtype, "attention_fwd: out ",
           out.shape.str(), " for qkv ", qkv.shape.str());
  ZT_CHECK(lse.numel() == d.B * d.NH * d.T, "attention_fwd: lse must be (B, NH, T)");
  cpu::Staging st(ws);
  cpu::with_storage(qkv.dtype, [&](auto qt) {
    using S = decltype(qt);
    using M = cpu::math_t<S>;
    M* work = st.temp<M>(static_cast<int64_t>(omp_get_max_threads()) * (2 * d.hs * d.T + d.T + d.hs));
    const S* p = cpu::typed<const S>(qkv);
    attention_fwd_impl<S, M>(work, cpu::typed<S>(out), cpu::math_ptr<M>(lse, "lse"), p, p + C, p + 2 * C, doc, d);
  });
}

void CpuKernels::attention_bwd(Arena& ws, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                               const Tensor& out, const Tensor& lse, int n_head, const Tensor& doc_start) {
  const AttnDims d = attn_dims(qkv, n_head);
  const int32_t* doc = cpu::doc_starts(doc_start, d.B, d.T, "attention_bwd");
  const int64_t C = d.C();
  ZT_CHECK(dqkv.numel() == qkv.numel() && dout.numel() == d.B * d.T * C && out.numel() == dout.numel() &&
               lse.numel() == d.B * d.NH * d.T && out.dtype == qkv.dtype,
           "attention_bwd shapes");
  cpu::Staging st(ws);
  cpu::with_storage(qkv.dtype, [&](auto qt) {
    using S = decltype(qt);
    using M = cpu::math_t<S>;
    M* work = st.temp<M>(static_cast<int64_t>(omp_get_max_threads()) * (4 * d.hs * d.T + 2 * d.T + d.hs));
    const S* p = cpu::typed<const S>(qkv);
    M* dp = cpu::math_ptr<M>(dqkv, "dqkv");
    attention_bwd_impl<S, M>(work, dp, dp + C, dp + 2 * C, cpu::math_ptr<const M>(dout, "dout"), p, p + C,
                             p + 2 * C, cpu::typed<const S>(out), cpu::math_ptr<const M>(lse, "lse"), doc, d);
  });
}

void CpuKernels::gqa_attention_fwd(Arena& ws, const Tensor& out, const Tensor& lse, const Tensor& q,
                                   const Tensor& k, const Tensor& v, int n_head, int n_kv_head, const Tensor& doc_start) {
  const AttnDims d = gqa_dims(q, k, v, n_head, n_kv_head);
  const int32_t* doc = cpu::doc_starts(doc_start, d.B, d.T, "gqa_attention_fwd");
  ZT_CHECK(out.shape == q.shape && out.dtype == q.dtype, "gqa_attention_fwd: out ", out.shape.str(), " for q ",
           q.shape.str());
  ZT_CHECK(lse.numel() == d.B * d.NH * d.T, "gqa_attention_fwd: lse must be (B, NH, T)");
  cpu::Staging st(ws);
  cpu::with_storage(q.dtype, [&](auto qt) {
    using S = decltype(qt);
    using M = cpu::math_t<S>;
    M* work = st.temp<M>(static_cast<int64_t>(omp_get_max_threads()) * (2 * d.hs * d.T + d.T + d.hs));
    attention_fwd_impl<S, M>(work, cpu::typed<S>(out), cpu::math_ptr<M>(lse, "lse"), cpu::typed<const S>(q),
                             cpu::typed<const S>(k), cpu::typed<const S>(v), doc, d);
  });
}

void CpuKernels::gqa_attention_bwd(Arena& ws, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                   const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& out, const Tensor& lse, int n_head, int n_kv_head, const Tensor& doc_start) {
  const AttnDims d = gqa_dims(q, k, v, n_head, n_kv_head);
  const int32_t* doc = cpu::doc_starts(doc_start, d.B, d.T, "gqa_attention_bwd");
  ZT_CHECK(dq.numel() == q.numel() && dk.numel() == k.numel() && dv.numel() == v.numel() &&
               dout.numel() == q.numel() && out.numel() == q.numel() && lse.numel() == d.B * d.NH * d.T &&
               out.dtype == q.dtype,
           "gqa_attention_bwd shapes");
  cpu::Staging st(ws);
  cpu::with_storage(q.dtype, [&](auto qt) {
    using S = decltype(qt);
    using M = cpu::math_t<S>;
    M* work = st.temp<M>(static_cast<int64_t>(omp_get_max_threads()) * (4 * d.hs * d.T + 2 * d.T + d.hs));
    attention_bwd_impl<S, M>(work, cpu::math_ptr<M>(dq, "dq"), cpu::math_ptr<M>(dk, "dk"), cpu::math_ptr<M>(dv, "dv"),
                             cpu::math_ptr<const M>(dout, "dout"), cpu::typed<const S>(q), cpu::typed<const S>(k),
                             cpu::typed<const S>(v), cpu::typed<const S>(out), cpu::math_ptr<const M>(lse, "lse"), doc, d);
  });
}

}  // namespace zt
