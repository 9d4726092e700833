// CpuKernels: the Llama operations other than attention (grouped-query
// attention shares the multi-head kernel, cpu_kernels_attention.cpp):
// RMSNorm, rotary position embeddings and SwiGLU.
#include <cmath>
#include <vector>

#include "modules/cpu_kernels.hpp"

#include <type_traits>
#include "modules/cpu_kernels_detail.hpp"

namespace zt {
namespace {

using cpu::load;
using cpu::narrow;

// ---- RMSNorm ---------------------------------------------------------------

template <typename TX, typename TW, typename M>
void rmsnorm_fwd_impl(TX* out, M* rstd, const TX* x, const TW* w, int64_t N, int64_t C, M eps) {
#pragma omp parallel for schedule(static) if (N * C > cpu::kParallelGrain)
  for (int64_t n = 0; n < N; ++n) {
    const TX* xr = x + n * C;
    M ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < C; ++c) {
      const M v = load<M>(xr[c]);
      ss += v * v;
    }
    const M r = M(1) / std::sqrt(ss / static_cast<M>(C) + eps);
    TX* orow = out + n * C;
    for (int64_t c = 0; c < C; ++c) orow[c] = narrow<TX>(load<M>(xr[c]) * r * load<M>(w[c]));
    rstd[n] = r;
  }
}

// With xhat = x rstd and g = dout w: dw += dout xhat and
// dx = rstd (g - xhat mean(g xhat)).
template <typename TX, typename TW, typename M>
void rmsnorm_bwd_impl(M* dx, bool accumulate, M* dw, const M* dout, const TX* x, const TW* w, const M* rstd,
                      int64_t N, int64_t C) {
  const bool par = N * C > cpu::kParallelGrain;
  // dw: threads own column ranges and walk rows in order (deterministic);
  // done first so that dx may alias dout.
#pragma omp parallel if (par)
  {
    int64_t c0, c1;
    cpu::split_range(C, omp_get_num_threads(), omp_get_thread_num(), c0, c1);
    for (int64_t n = 0; n < N; ++n) {
      const TX* xr = x + n * C;
      const M* dr = dout + n * C;
      const M r = rstd[n];
      for (int64_t c = c0; c < c1; ++c) dw[c] += dr[c] * load<M>(xr[c]) * r;
    }
  }
#pragma omp parallel for schedule(static) if (par)
  for (int64_t n = 0; n < N; ++n) {
    const TX* xr = x + n * C;
    const M* dr = dout + n * C;
    const M r = rstd[n];
    M gx_mean = 0;
#pragma omp simd reduction(+ : gx_mean)
    for (int64_t c = 0; c < C; ++c) gx_mean += dr[c] * load<M>(w[c]) * load<M>(xr[c]) * r;
    gx_mean /= static_cast<M>(C);
    M* dxr = dx + n * C;
    for (int64_t c = 0; c < C; ++c) {
      const M v = r * (dr[c] * load<M>(w[c]) - load<M>(xr[c]) * r * gx_mean);
      dxr[c] = accumulate ? dxr[c] + v : v;
    }
  }
}

// ---- rotary embeddings -----------------------------------------------------

// cos and sin of t f_i for t < T, i < head_dim / 2: (T, half) each, angles in
// double, rounded once to the math type.
template <typename M>
void rope_table(std::vector<M>& cs, std::vector<M>& sn, const RopeConfig& rope, int64_t T) {
  const std::vector<double> f = rope_inv_freq(rope);
  const int64_t half = rope.head_dim / 2;
  cs.resize(static_cast<size_t>(T * half));
  sn.resize(cs.size());
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double a = static_cast<double>(t) * f[static_cast<size_t>(i)];
      cs[static_cast<size_t>(t * half + i)] = static_cast<M>(std::cos(a));
      sn[static_cast<size_t>(t * half + i)] = static_cast<M>(std::sin(a));
    }
  }
}

// Rotate-half: (x0, x1) = (x[i], x[i + half]) becomes (x0 c - x1 s, x1 c + x0 s);
// the inverse (backward) uses -s. Token t is at position t - doc[b, t]
// ([Note: document masking] in kernels.hpp; doc null: position t).
template <typename T, typename M>
void rope_impl(T* x, int64_t B, int64_t Tn, int64_t width, const RopeConfig& rope, bool inverse,
               const int32_t* doc) {
  std::vector<M> cs, sn;
  rope_table(cs, sn, rope, Tn);
  const int64_t hd = rope.head_dim, half = hd / 2, H = width / hd;
  const M sign = inverse ? M(-1) : M(1);
#pragma omp parallel for schedule(static) if (B * Tn * width > cpu::kParallelGrain)
  for (int64_t bt = 0; bt < B * Tn; ++bt) {
    const int64_t t = bt % Tn - cpu::doc_start_of(doc, bt);
    const M* c = cs.data() + t * half;
    const M* s = sn.data() + t * half;
    for (int64_t h = 0; h < H; ++h) {
      T* xr = x + bt * width + h * hd;
      for (int64_t i = 0; i < half; ++i) {
        const M x0 = load<M>(xr[i]), x1 = load<M>(xr[i + half]);
        const M si = sign * s[i];
        xr[i] = narrow<T>(x0 * c[i] - x1 * si);
        xr[i + half] = narrow<T>(x1 * c[i] + x0 * si);
      }
    }
  }
}

void check_rope(const Tensor& x, const RopeConfig& rope, const char* what) {
  ZT_CHECK(x.shape.rank() == 3 && rope.head_dim >= 2 && rope.head_dim % 2 == 0 && x.shape[2] % rope.head_dim == 0,
           what, ": x must be (B, T, H * head_dim) with an even head_dim ", rope.head_dim, ", got ", x.shape.str());
}

// ---- SwiGLU ----------------------------------------------------------------

template <typename M>
inline M sigmoid(M g) {
  return M(1) / (M(1) + cpu::fast_exp(-g));
}

}  // namespace

void CpuKernels::rmsnorm_fwd(const Tensor& out, const Tensor& rstd, const Tensor& x, const Tensor& w, double eps,
                             const Tensor& x_copy) {
  const int64_t C = cpu::cols(x), N = cpu::rows(x);
  ZT_CHECK(out.shape == x.shape && out.dtype == x.dtype && w.numel() == C && rstd.numel() == N,
           "rmsnorm_fwd: out ", out.shape.str(), " x ", x.shape.str(), " w ", w.shape.str(), " rstd ",
           rstd.shape.str());
  ZT_CHECK(eps > 0, "rmsnorm_fwd: eps must be > 0, got ", eps);
  cpu::with_storage(x.dtype, [&](auto xt) {
    cpu::with_storage(w.dtype, [&](auto wt) {
      using TX = decltype(xt);
      using TW = decltype(wt);
      using M = cpu::math_t<TX, TW>;
      rmsnorm_fwd_impl<TX, TW, M>(cpu::typed<TX>(out), cpu::math_ptr<M>(rstd, "rstd"), cpu::typed<const TX>(x),
                                  cpu::typed<const TW>(w), N, C, static_cast<M>(eps));
    });
  });
  if (x_copy.defined()) cast(x_copy, x);  // the unfused composition's bits
}

void CpuKernels::rmsnorm_bwd(const Tensor& dx, bool accumulate_dx, const Tensor& dw, const Tensor& dout,
                             const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dres,
                             const Tensor& dx_operand) {
  ZT_CHECK(!dx_operand.defined(), "rmsnorm_bwd: the CPU's products read dx itself (norm_bwd_writes_operand is false)");
  const int64_t C = cpu::cols(x), N = cpu::rows(x);
  if (dres.defined()) {
    ZT_CHECK(!accumulate_dx && dres.numel() == x.numel() && dx.data != dout.data,
             "rmsnorm_bwd: dres needs accumulate_dx false, x's shape and dx apart from dout");
    cast(dx, dres);  // then += the norm's gradient: the unfused pair's bits
    accumulate_dx = true;
  }
  ZT_CHECK(dx.numel() == x.numel() && dout.numel() == x.numel() && w.numel() == C && dw.numel() == C &&
               rstd.numel() == N,
           "rmsnorm_bwd shapes: dx ", dx.shape.str(), " x ", x.shape.str(), " dw ", dw.shape.str());
  cpu::with_storage(x.dtype, [&](auto xt) {
    cpu::with_storage(w.dtype, [&](auto wt) {
      using TX = decltype(xt);
      using TW = decltype(wt);
      using M = cpu::math_t<TX, TW>;
      rmsnorm_bwd_impl<TX, TW, M>(cpu::math_ptr<M>(dx, "dx"), accumulate_dx, cpu::math_ptr<M>(dw, "dw"),
                                  cpu::math_ptr<const M>(dout, "dout"), cpu::typed<const TX>(x),
                                  cpu::typed<const TW>(w), cpu::math_ptr<const M>(rstd, "rstd"), N, C);
    });
  });
}

void CpuKernels::rope_fwd(const Tensor& q, const Tensor& k, const RopeConfig& rope, const Tensor& doc_start) {
  for (const Tensor* x : {&q, &k}) {
    if (!x->defined()) continue;
    check_rope(*x, rope, "rope_fwd");
    const int32_t* doc = cpu::doc_starts(doc_start, x->shape[0], x->shape[1], "rope_fwd");
    cpu::with_storage(x->dtype, [&](auto xt) {
      using T = decltype(xt);
      rope_impl<T, cpu::math_t<T>>(cpu::typed<T>(*x), x->shape[0], x->shape[1], x->shape[2], rope, false, doc);
    });
  }
}

void CpuKernels::rope_bwd(const Tensor& dq, const Tensor& dk, const RopeConfig& rope, const Tensor& doc_start) {
  for (const Tensor* dx : {&dq, &dk}) {
    if (!dx->defined()) continue;
    check_rope(*dx, rope, "rope_bwd");
    const int32_t* doc = cpu::doc_starts(doc_start, dx->shape[0], dx->shape[1], "rope_bwd");
    if (dx->dtype == DType::f64) {
      rope_impl<double, double>(cpu::math_ptr<double>(*dx, "dx"), dx->shape[0], dx->shape[1], dx->shape[2], rope,
                                true, doc);
    } else {
      rope_impl<float, float>(cpu::math_ptr<float>(*dx, "dx"), dx->shape[0], dx->shape[1], dx->shape[2], rope, true,
                              doc);
    }
  }
}

void CpuKernels::swiglu_fwd(const Tensor& out, const Tensor& gate, const Tensor& up) {
  ZT_CHECK(out.numel() == gate.numel() && up.numel() == gate.numel() && out.dtype == gate.dtype &&
               up.dtype == gate.dtype,
           "swiglu_fwd: out ", out.shape.str(), " gate ", gate.shape.str(), " up ", up.shape.str());
  const int64_t n = gate.numel();
  cpu::with_storage(gate.dtype, [&](auto gt) {
    using T = decltype(gt);
    using M = cpu::math_t<T>;
    T* o = cpu::typed<T>(out);
    const T* g = cpu::typed<const T>(gate);
    const T* u = cpu::typed<const T>(up);
#pragma omp parallel for simd schedule(static) if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      const M gv = load<M>(g[i]);
      o[i] = narrow<T>(gv * sigmoid(gv) * load<M>(u[i]));
    }
  });
}

// d up = dout silu(g); d gate = dout up silu'(g), silu'(g) = sig (1 + g (1 - sig)).
void CpuKernels::swiglu_bwd(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate,
                            const Tensor& up) {
  const int64_t n = gate.numel();
  ZT_CHECK(dgate.numel() == n && dup.numel() == n && dout.numel() == n && up.numel() == n && up.dtype == gate.dtype,
           "swiglu_bwd shapes: dgate ", dgate.shape.str(), " gate ", gate.shape.str());
  ZT_CHECK(dgate.dtype == dup.dtype, "swiglu_bwd: dgate and dup dtypes differ");
  cpu::with_storage(gate.dtype, [&](auto gt) {
    using T = decltype(gt);
    using M = cpu::math_t<T>;
    const M* d = cpu::math_ptr<const M>(dout, "dout");
    const T* g = cpu::typed<const T>(gate);
    const T* u = cpu::typed<const T>(up);
    // Gradients in the math dtype, or rounded once to the storage dtype.
    auto run = [&](auto* dg, auto* du) {
      using O = std::remove_pointer_t<decltype(dg)>;
#pragma omp parallel for simd schedule(static) if (n > cpu::kParallelGrain)
      for (int64_t i = 0; i < n; ++i) {
        const M gv = load<M>(g[i]), uv = load<M>(u[i]), dv = d[i];
        const M sg = sigmoid(gv);
        du[i] = cpu::narrow<O>(dv * gv * sg);
        dg[i] = cpu::narrow<O>(dv * uv * sg * (M(1) + gv * (M(1) - sg)));
      }
    };
    if (dgate.dtype == gate.dtype && (gate.dtype == DType::bf16 || gate.dtype == DType::f16)) {
      run(cpu::typed<T>(dgate), cpu::typed<T>(dup));
    } else {
      run(cpu::math_ptr<M>(dgate, "dgate"), cpu::math_ptr<M>(dup, "dup"));
    }
  });
}

}  // namespace zt
