// CpuKernels: LayerNorm and GELU (tanh approximation).
#include <cmath>

#include "modules/cpu_kernels.hpp"
#include "modules/cpu_kernels_detail.hpp"

namespace zt {
namespace {

using cpu::load;
using cpu::narrow;

constexpr double kLayerNormEps = 1e-5;

template <typename TX, typename TW, typename M>
void layernorm_fwd_impl(TX* out, M* mean, M* rstd, const TX* x, const TW* w, const TW* b, int64_t N,
                        int64_t C) {
#pragma omp parallel for schedule(static) if (N * C > cpu::kParallelGrain)
  for (int64_t n = 0; n < N; ++n) {
    const TX* xr = x + n * C;
    M s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < C; ++c) s += load<M>(xr[c]);
    const M m = s / static_cast<M>(C);
    // Two-pass variance: no cancellation when |mean| >> std.
    M v = 0;
#pragma omp simd reduction(+ : v)
    for (int64_t c = 0; c < C; ++c) {
      const M d = load<M>(xr[c]) - m;
      v += d * d;
    }
    const M r = M(1) / std::sqrt(v / static_cast<M>(C) + static_cast<M>(kLayerNormEps));
    TX* orow = out + n * C;
    for (int64_t c = 0; c < C; ++c) {
      orow[c] = narrow<TX>((load<M>(xr[c]) - m) * r * load<M>(w[c]) + load<M>(b[c]));
    }
    mean[n] = m;
    rstd[n] = r;
  }
}

template <typename TX, typename TW, typename M>
void layernorm_bwd_impl(M* dx, bool accumulate, M* dw, M* db, const M* dout, const TX* x, const TW* w,
                        const M* mean, const M* rstd, int64_t N, int64_t C) {
  const bool par = N * C > cpu::kParallelGrain;
  // dw, db: threads own column ranges and walk rows in order (deterministic).
  // Done first so that dx may alias dout.
#pragma omp parallel if (par)
  {
    int64_t c0, c1;
    cpu::split_range(C, omp_get_num_threads(), omp_get_thread_num(), c0, c1);
    for (int64_t n = 0; n < N; ++n) {
      const TX* xr = x + n * C;
      const M* dr = dout + n * C;
      const M m = mean[n], r = rstd[n];
      for (int64_t c = c0; c < c1; ++c) {
        const M xhat = (load<M>(xr[c]) - m) * r;
        dw[c] += dr[c] * xhat;
        db[c] += dr[c];
      }
    }
  }
  // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * w.
#pragma omp parallel for schedule(static) if (par)
  for (int64_t n = 0; n < N; ++n) {
    const TX* xr = x + n * C;
    const M* dr = dout + n * C;
    const M m = mean[n], r = rstd[n];
    M g_mean = 0, gx_mean = 0;
#pragma omp simd reduction(+ : g_mean, gx_mean)
    for (int64_t c = 0; c < C; ++c) {
      const M g = dr[c] * load<M>(w[c]);
      g_mean += g;
      gx_mean += g * (load<M>(xr[c]) - m) * r;
    }
    g_mean /= static_cast<M>(C);
    gx_mean /= static_cast<M>(C);
    M* dxr = dx + n * C;
    for (int64_t c = 0; c < C; ++c) {
      const M xhat = (load<M>(xr[c]) - m) * r;
      const M v = (dr[c] * load<M>(w[c]) - g_mean - xhat * gx_mean) * r;
      dxr[c] = accumulate ? dxr[c] + v : v;
    }
  }
}

}  // namespace

void CpuKernels::layernorm_fwd(const Tensor& out, const Tensor& mean, const Tensor& rstd,
                               const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& x_copy) {
  const int64_t C = cpu::cols(x), N = cpu::rows(x);
  ZT_CHECK(out.numel() == x.numel() && w.numel() == C && b.numel() == C && mean.numel() == N &&
               rstd.numel() == N,
           "layernorm_fwd shapes: x ", x.shape.str(), " out ", out.shape.str(), " w ", w.shape.str());
  ZT_CHECK(out.dtype == x.dtype && b.dtype == w.dtype, "layernorm_fwd: out/x or w/b dtypes differ");
  cpu::with_storage(x.dtype, [&](auto xt) {
    cpu::with_storage(w.dtype, [&](auto wt) {
      using TX = decltype(xt);
      using TW = decltype(wt);
      using M = cpu::math_t<TX, TW>;
      layernorm_fwd_impl<TX, TW, M>(cpu::typed<TX>(out), cpu::math_ptr<M>(mean, "mean"),
                                    cpu::math_ptr<M>(rstd, "rstd"), cpu::typed<const TX>(x),
                                    cpu::typed<const TW>(w), cpu::typed<const TW>(b), N, C);
    });
  });
  // The reference is the unfused composition: the copy's bits are cast's.
  if (x_copy.defined()) cast(x_copy, x);
}

void CpuKernels::layernorm_bwd(const Tensor& dx, bool accumulate_dx, const Tensor& dw,
                               const Tensor& db, const Tensor& dout, const Tensor& x,
                               const Tensor& w, const Tensor& mean, const Tensor& rstd,
                               const Tensor& dres) {
  const int64_t C = cpu::cols(x), N = cpu::rows(x);
  if (dres.defined()) {
    // dx = dres, then += the norm's gradient: the bits of the unfused pair.
    ZT_CHECK(!accumulate_dx && dres.numel() == x.numel() && dx.data != dout.data,
             "layernorm_bwd: dres needs accumulate_dx false, x's shape and dx apart from dout");
    cast(dx, dres);
    accumulate_dx = true;
  }
  ZT_CHECK(dx.numel() == x.numel() && dout.numel() == x.numel() && w.numel() == C &&
               dw.numel() == C && db.numel() == C && mean.numel() == N && rstd.numel() == N,
           "layernorm_bwd shapes: x ", x.shape.str(), " dx ", dx.shape.str());
  cpu::with_storage(x.dtype, [&](auto xt) {
    cpu::with_storage(w.dtype, [&](auto wt) {
      using TX = decltype(xt);
      using TW = decltype(wt);
      using M = cpu::math_t<TX, TW>;
      layernorm_bwd_impl<TX, TW, M>(cpu::math_ptr<M>(dx, "dx"), accumulate_dx, cpu::math_ptr<M>(dw, "dw"),
                                    cpu::math_ptr<M>(db, "db"), cpu::math_ptr<const M>(dout, "dout"),
                                    cpu::typed<const TX>(x), cpu::typed<const TW>(w),
                                    cpu::math_ptr<const M>(mean, "mean"),
                                    cpu::math_ptr<const M>(rstd, "rstd"), N, C);
    });
  });
}

// ---- GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) --------------------

namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;

// tanh(sqrt(2/pi) (x + 0.044715 x^3)). fp32: tanh(u) = 1 - 2 / (1 + e^{2u})
// with the vectorisable exp (absolute error ~1e-7, which is what GELU's
// 0.5 x (1 + tanh) needs); f64: std::tanh.
inline float gelu_tanh(float x) {
  const float u = static_cast<float>(kSqrt2OverPi) * (x + 0.044715f * x * x * x);
  return 1.0f - 2.0f / (1.0f + cpu::fast_exp(2.0f * u));
}
inline double gelu_tanh(double x) { return std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)); }
}  // namespace

void CpuKernels::gelu_fwd(const Tensor& out, const Tensor& x) {
  ZT_CHECK(out.numel() == x.numel() && out.dtype == x.dtype, "gelu_fwd: out ", out.shape.str(), " x ",
           x.shape.str());
  const int64_t n = x.numel();
  cpu::with_storage(x.dtype, [&](auto xt) {
    using TX = decltype(xt);
    using M = cpu::math_t<TX>;
    const TX* xp = cpu::typed<const TX>(x);
    TX* op = cpu::typed<TX>(out);
#pragma omp parallel for simd schedule(static) if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      const M v = load<M>(xp[i]);
      op[i] = narrow<TX>(M(0.5) * v * (M(1) + gelu_tanh(v)));
    }
  });
}

void CpuKernels::gelu_bwd(const Tensor& din, const Tensor& dout, const Tensor& x) {
  ZT_CHECK(din.numel() == x.numel() && dout.numel() == x.numel(), "gelu_bwd shapes");
  const int64_t n = x.numel();
  cpu::with_storage(x.dtype, [&](auto xt) {
    using TX = decltype(xt);
    using M = cpu::math_t<TX>;
    const M k0 = static_cast<M>(kSqrt2OverPi);
    const TX* xp = cpu::typed<const TX>(x);
    const M* dp = cpu::math_ptr<const M>(dout, "dout");
    M* ip = cpu::math_ptr<M>(din, "din");
#pragma omp parallel for simd schedule(static) if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      const M v = load<M>(xp[i]);
      const M th = gelu_tanh(v);
      const M sech2 = M(1) - th * th;  // 1/cosh^2, without cosh's overflow
      const M local = M(0.5) * (M(1) + th) + M(0.5) * v * sech2 * k0 * (M(1) + M(3 * 0.044715) * v * v);
      ip[i] = local * dp[i];
    }
  });
}

}  // namespace zt
