// RMSNorm, rotary embeddings and SwiGLU on the GPU (llama.cuh): one warp per
// row for RMSNorm (column sums through column_reduce.cuh), one thread per
// rotated pair of a row for RoPE (all heads), kVec elements per thread and
// step for SwiGLU. Parity with the CPU reference: tests/cuda/test_llama_parity.cpp.
#include <algorithm>
#include <climits>
#include <type_traits>

#include "modules/cuda/column_reduce.cuh"
#include "modules/cuda/llama.cuh"

namespace zt::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = 256;
constexpr int kMaxHalf = 256;  // head_dim <= 512

// RMSNorm's rows, a warp each, kVec columns a lane and step where C and the
// pointers allow (kVecPath, as LayerNorm's kernels), else one: the scalar
// form loaded 2-byte elements one by one and reached 1.7 TB/s at Llama 3.2
// 1B's rows of 2048 (the profile of 2026-12-04).
template <typename TX, typename TW, bool kVecPath>
__global__ void rmsnorm_fwd_kernel(TX* out, float* rstd, const TX* x, const TW* w, TX* x_copy, int64_t N, int C,
                                   float eps) {
  constexpr int W = kVecPath ? kVec : 1;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const TX* xr = x + row * C;
  float ss = 0.0f;
  for_lane_columns<kVecPath>(lane, C, [&](int c) {
    float v[W];
    load_cols<kVecPath>(xr, c, v);
#pragma unroll
    for (int k = 0; k < W; ++k) ss += v[k] * v[k];
  });
  const float r = 1.0f / sqrtf(warp_sum(ss) / static_cast<float>(C) + eps);
  TX* orow = out + row * C;
  TX* crow = x_copy != nullptr ? x_copy + row * C : nullptr;  // the residual stream's copy, in the same pass
  for_lane_columns<kVecPath>(lane, C, [&](int c) {
    float v[W], wv[W];
    load_cols<kVecPath>(xr, c, v);
    if (crow != nullptr) store_cols<kVecPath>(crow, c, v);  // 16-bit values are exact in f32
    load_cols<kVecPath>(w, c, wv);
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] = v[k] * r * wv[k];
    store_cols<kVecPath>(orow, c, v);
  });
  if (lane == 0) rstd[row] = r;
}

// TD: dout's type, float or TX ([Note: norms' dout in 16 bits] in
// modules/kernels.hpp). The columns a lane takes do not depend on TD (kVec
// either way), so a 16-bit dout gives its f32 widening's bits.
template <typename TX, typename TW, typename TD, bool kVecPath>
__global__ void rmsnorm_bwd_dx_kernel(float* dx, TX* dx16, bool accumulate, const float* dres, const TD* dout,
                                      const TX* x, const TW* w, const float* rstd, int64_t N, int C) {
  constexpr int W = kVecPath ? kVec : 1;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const TX* xr = x + row * C;
  const TD* dr = dout + row * C;
  const float r = rstd[row];
  float gx = 0.0f;
  for_lane_columns<kVecPath>(lane, C, [&](int c) {
    float dv[W], wv[W], xv[W];
    load_cols<kVecPath>(dr, c, dv);
    load_cols<kVecPath>(w, c, wv);
    load_cols<kVecPath>(xr, c, xv);
#pragma unroll
    for (int k = 0; k < W; ++k) gx += dv[k] * wv[k] * xv[k] * r;
  });
  const float gx_mean = warp_sum(gx) / static_cast<float>(C);
  float* dxr = dx + row * C;
  // dx may alias dres: each element is read, then written, by one lane.
  const float* base = dres != nullptr ? dres + row * C : accumulate ? dxr : nullptr;
  TX* const d16 = dx16 != nullptr ? dx16 + row * C : nullptr;
  for_lane_columns<kVecPath>(lane, C, [&](int c) {
    float dv[W], wv[W], xv[W], old[W] = {};
    load_cols<kVecPath>(dr, c, dv);
    load_cols<kVecPath>(w, c, wv);
    load_cols<kVecPath>(xr, c, xv);
    if (base != nullptr) load_cols<kVecPath>(base, c, old);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float v = r * (dv[k] * wv[k] - xv[k] * r * gx_mean);
      dv[k] = base != nullptr ? old[k] + v : v;
    }
    store_cols<kVecPath>(dxr, c, dv);
    if (d16 != nullptr) store_cols<kVecPath>(d16, c, dv);  // cast's rounding of the f32 just stored
  });
}

// dw's column sums: dout xhat.
template <typename TX, typename TD>
struct RmsNormParamLoad {
  const TD* dout;
  const TX* x;
  const float* rstd;
  int64_t C;
  __device__ void operator()(int64_t r, int64_t c, float (&v)[1]) const {
    v[0] = to_float(dout[r * C + c]) * to_float(x[r * C + c]) * rstd[r];
  }
};

// The same, kVec columns at a time (column_vec_partials_kernel: the same
// sums, bit for bit).
template <typename TX, typename TD>
struct RmsNormParamVecLoad {
  const TD* dout;
  const TX* x;
  const float* rstd;
  int64_t C;
  __device__ void operator()(int64_t r, int64_t c, float (&v)[1][kVec]) const {
    float xv[kVec];
    load_vec(x + r * C + c, xv);
    load_vec(dout + r * C + c, v[0]);
    const float rs = rstd[r];
#pragma unroll
    for (int i = 0; i < kVec; ++i) v[0][i] = v[0][i] * xv[i] * rs;
  }
};

template <typename F>
void with_norm_types(DType xt, DType wt, F&& f) {
  with_float_type(xt, "rmsnorm", [&](auto tx) {
    if (wt == xt) {
      f(tx, tx);
    } else if (wt == DType::f32) {
      f(tx, Type<float>{});
    } else {
      ZT_THROW("rmsnorm: weights ", dtype_name(wt), " with activations ", dtype_name(xt),
               " (weights must match the activations or be f32)");
    }
  });
}

struct RopeFreqs {
  double f[kMaxHalf];
};

// Thread (i, r) of a block: the pair (i, i + half) of every head of row
// blockIdx.x * blockDim.y + r of x and of y. The angle of a (position, i) is
// formed and its cos/sin taken in double once, for all the row's heads of
// both (one thread per pair and head computed it once per head, with 64-bit
// index divisions; one launch per tensor computed it once per tensor).
template <typename T>
__device__ __forceinline__ void rotate_row(T* p, T* end, int64_t hd, int64_t half, int i, float cf, float sf) {
  for (; p < end; p += hd) {
    const float x0 = to_float(p[i]), x1 = to_float(p[i + half]);
    p[i] = from_float<T>(x0 * cf - x1 * sf);
    p[i + half] = from_float<T>(x1 * cf + x0 * sf);
  }
}

template <typename T>
__global__ void rope_kernel(T* x, int64_t width, T* y, int64_t width_y, int64_t rows, int64_t T_len, int64_t half,
                            RopeFreqs freqs, double sign, const int32_t* doc_start) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const int i = static_cast<int>(threadIdx.x);
  if (row >= rows || i >= half) return;
  const int64_t t = row % T_len - (doc_start == nullptr ? 0 : doc_start[row]);
  double s, c;
  sincos(static_cast<double>(t) * freqs.f[i], &s, &c);
  const float cf = static_cast<float>(c), sf = static_cast<float>(sign * s);
  const int64_t hd = 2 * half;
  rotate_row(x + row * width, x + (row + 1) * width, hd, half, i, cf, sf);
  if (y != nullptr) rotate_row(y + row * width_y, y + (row + 1) * width_y, hd, half, i, cf, sf);
}

__device__ __forceinline__ float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

// SwiGLU element by element from `first` on; with kVecPath, [first, n) is
// whole vectors of kVec aligned elements, moved 16 bytes at a time.
template <typename T, bool kVecPath>
__global__ void swiglu_fwd_kernel(T* out, const T* gate, const T* up, int64_t first, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if constexpr (kVecPath) {
    for (int64_t v = start; v < (n - first) / kVec; v += stride) {
      const int64_t i = first + v * kVec;
      float g[kVec], u[kVec];
      load_vec(gate + i, g);
      load_vec(up + i, u);
#pragma unroll
      for (int k = 0; k < kVec; ++k) g[k] = g[k] * sigmoid(g[k]) * u[k];
      store_vec(out + i, g);
    }
  } else {
    for (int64_t i = first + start; i < n; i += stride) {
      const float g = to_float(gate[i]);
      out[i] = from_float<T>(g * sigmoid(g) * to_float(up[i]));
    }
  }
}

// O: float, or T (gradients rounded once to the storage dtype). Vector path
// as swiglu_fwd_kernel's; dgate or dup may alias dout (each element is read
// before it is written, by the same thread).
template <typename T, typename O, bool kVecPath>
__global__ void swiglu_bwd_kernel(O* dgate, O* dup, const float* dout, const T* gate, const T* up, int64_t first,
                                  int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if constexpr (kVecPath) {
    for (int64_t v = start; v < (n - first) / kVec; v += stride) {
      const int64_t i = first + v * kVec;
      float g[kVec], u[kVec], d[kVec], dg[kVec], du[kVec];
      load_vec(gate + i, g);
      load_vec(up + i, u);
      load_vec(dout + i, d);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const float sg = sigmoid(g[k]);
        du[k] = d[k] * g[k] * sg;
        dg[k] = d[k] * u[k] * sg * (1.0f + g[k] * (1.0f - sg));
      }
      store_vec(dup + i, du);
      store_vec(dgate + i, dg);
    }
  } else {
    for (int64_t i = first + start; i < n; i += stride) {
      const float g = to_float(gate[i]), u = to_float(up[i]), d = dout[i];
      const float sg = sigmoid(g);
      dup[i] = from_float<O>(d * g * sg);
      dgate[i] = from_float<O>(d * u * sg * (1.0f + g * (1.0f - sg)));
    }
  }
}

}  // namespace

void rmsnorm_fwd(void* out, float* rstd, const void* x, DType xt, const void* w, DType wt, void* x_copy, int64_t N,
                 int64_t C, float eps, cudaStream_t stream) {
  if (N <= 0) return;
  ZT_CHECK(C > 0 && C <= (int64_t{1} << 30), "rmsnorm: C = ", C);
  const unsigned grid = static_cast<unsigned>((N + kWarpsPerBlock - 1) / kWarpsPerBlock);
  with_norm_types(xt, wt, [&](auto tx, auto tw) {
    using TX = typename decltype(tx)::type;
    using TW = typename decltype(tw)::type;
    auto args = [&](auto kernel) {
      kernel<<<grid, 32 * kWarpsPerBlock, 0, stream>>>(static_cast<TX*>(out), rstd, static_cast<const TX*>(x),
                                                       static_cast<const TW*>(w), static_cast<TX*>(x_copy), N,
                                                       static_cast<int>(C), eps);
    };
    if (C % kVec == 0 && vec_aligned<TX>(x) && vec_aligned<TW>(w) && vec_aligned<TX>(out) &&
        (x_copy == nullptr || vec_aligned<TX>(x_copy))) {
      args(rmsnorm_fwd_kernel<TX, TW, true>);
    } else {
      args(rmsnorm_fwd_kernel<TX, TW, false>);
    }
    ZT_CUDA_CHECK_LAUNCH();
  });
}

size_t rmsnorm_bwd_workspace_bytes(int64_t N, int64_t C) { return column_partials_floats(1, N, C) * sizeof(float); }

void rmsnorm_bwd(float* dx, void* dx16, bool accumulate_dx, const float* dres, float* dw, const void* dout, DType dt,
                 const void* x, DType xt, const void* w, DType wt, const float* rstd, int64_t N, int64_t C,
                 void* workspace, cudaStream_t stream) {
  if (N <= 0) return;
  ZT_CHECK(C > 0 && C <= (int64_t{1} << 30), "rmsnorm: C = ", C);
  ZT_CHECK(dt == DType::f32 || dt == xt, "rmsnorm_bwd: dout ", dtype_name(dt), " with x ", dtype_name(xt),
           " (dout must be f32 or x's dtype)");
  const unsigned grid = static_cast<unsigned>((N + kWarpsPerBlock - 1) / kWarpsPerBlock);
  with_norm_types(xt, wt, [&](auto tx, auto tw) {
    using TX = typename decltype(tx)::type;
    using TW = typename decltype(tw)::type;
    auto run = [&](auto td) {
      using TD = typename decltype(td)::type;
      const TD* dp = static_cast<const TD*>(dout);
      // dw first: dx may alias dout.
      const bool vec_sums = C % kVec == 0 && vec_aligned<TX>(x) && vec_aligned<TD>(dout);
      column_sums_into<1>(vec_sums, RmsNormParamVecLoad<TX, TD>{dp, static_cast<const TX*>(x), rstd, C},
                          RmsNormParamLoad<TX, TD>{dp, static_cast<const TX*>(x), rstd, C}, dw, nullptr,
                          static_cast<float*>(workspace), N, C, stream);
      ZT_CHECK(dx16 == nullptr || !(std::is_same_v<TX, float>), "rmsnorm_bwd: a 16-bit copy of dx for f32 x");
      auto args = [&](auto kernel) {
        kernel<<<grid, 32 * kWarpsPerBlock, 0, stream>>>(dx, static_cast<TX*>(dx16), accumulate_dx, dres, dp,
                                                         static_cast<const TX*>(x), static_cast<const TW*>(w), rstd,
                                                         N, static_cast<int>(C));
      };
      if (C % kVec == 0 && vec_aligned<TX>(x) && vec_aligned<TW>(w) && vec_aligned<float>(dx) &&
          vec_aligned<TD>(dout) && (dres == nullptr || vec_aligned<float>(dres)) &&
          (dx16 == nullptr || vec_aligned<TX>(dx16))) {
        args(rmsnorm_bwd_dx_kernel<TX, TW, TD, true>);
      } else {
        args(rmsnorm_bwd_dx_kernel<TX, TW, TD, false>);
      }
      ZT_CUDA_CHECK_LAUNCH();
    };
    if (dt == DType::f32) {
      run(Type<float>{});
    } else if constexpr (!std::is_same_v<TX, float>) {
      run(tx);  // [Note: norms' dout in 16 bits]
    }
  });
}

void rope(void* x, int64_t width, void* y, int64_t width_y, DType t, int64_t B, int64_t T, const RopeConfig& rope,
          bool inverse, const int32_t* doc_start, cudaStream_t stream) {
  const int64_t half = rope.head_dim / 2;
  ZT_CHECK(half >= 1 && half <= kMaxHalf && width % rope.head_dim == 0 &&
               (y == nullptr || width_y % rope.head_dim == 0),
           "rope: head_dim ", rope.head_dim, " (at most ", 2 * kMaxHalf, ") must divide the widths ", width, " and ",
           width_y);
  if (B * T * width <= 0) return;
  RopeFreqs freqs{};
  const std::vector<double> f = rope_inv_freq(rope);
  for (int64_t i = 0; i < half; ++i) freqs.f[i] = f[static_cast<size_t>(i)];
  with_float_type(t, "rope", [&](auto tx) {
    using TT = typename decltype(tx)::type;
    const dim3 block(static_cast<unsigned>(half), static_cast<unsigned>(std::max<int64_t>(1, kThreads / half)));
    const int64_t blocks = (B * T + block.y - 1) / block.y;
    ZT_CHECK(blocks <= INT_MAX, "rope: ", B * T, " rows");
    rope_kernel<TT><<<static_cast<unsigned>(blocks), block, 0, stream>>>(
        static_cast<TT*>(x), width, static_cast<TT*>(y), width_y, B * T, T, half, freqs, inverse ? -1.0 : 1.0,
        doc_start);
    ZT_CUDA_CHECK_LAUNCH();
  });
}

void swiglu_fwd(void* out, const void* gate, const void* up, DType t, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  with_float_type(t, "swiglu_fwd", [&](auto tx) {
    using TT = typename decltype(tx)::type;
    auto* o = static_cast<TT*>(out);
    auto* g = static_cast<const TT*>(gate);
    auto* u = static_cast<const TT*>(up);
    const bool vec = vec_aligned<TT>(o) && vec_aligned<TT>(g) && vec_aligned<TT>(u);
    const int64_t nv = vec ? n / kVec * kVec : 0;  // elements of the vector path
    if (nv > 0) swiglu_fwd_kernel<TT, true><<<grid_for(nv / kVec, kThreads), kThreads, 0, stream>>>(o, g, u, 0, nv);
    if (nv < n) swiglu_fwd_kernel<TT, false><<<grid_for(n - nv, kThreads), kThreads, 0, stream>>>(o, g, u, nv, n);
    ZT_CUDA_CHECK_LAUNCH();
  });
}

void swiglu_bwd(void* dgate, void* dup, bool grads_in_storage, const float* dout, const void* gate, const void* up,
                DType t, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  with_float_type(t, "swiglu_bwd", [&](auto tx) {
    using TT = typename decltype(tx)::type;
    auto run = [&](auto* dg, auto* du) {
      using O = std::remove_pointer_t<decltype(dg)>;
      auto* g = static_cast<const TT*>(gate);
      auto* u = static_cast<const TT*>(up);
      const bool vec = vec_aligned<O>(dg) && vec_aligned<O>(du) && vec_aligned<float>(dout) && vec_aligned<TT>(g) &&
                       vec_aligned<TT>(u);
      const int64_t nv = vec ? n / kVec * kVec : 0;
      if (nv > 0)
        swiglu_bwd_kernel<TT, O, true><<<grid_for(nv / kVec, kThreads), kThreads, 0, stream>>>(dg, du, dout, g, u,
                                                                                               0, nv);
      if (nv < n)
        swiglu_bwd_kernel<TT, O, false><<<grid_for(n - nv, kThreads), kThreads, 0, stream>>>(dg, du, dout, g, u,
                                                                                            nv, n);
    };
    if (grads_in_storage) {
      run(static_cast<TT*>(dgate), static_cast<TT*>(dup));
    } else {
      run(static_cast<float*>(dgate), static_cast<float*>(dup));
    }
    ZT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace zt::cuda
