// LayerNorm forward and backward. One warp per row for everything per row
// (statistics, normalised output, dx); the parameter gradients dw, db are
// column sums done by column_reduce.cuh.
#include "modules/cuda/column_reduce.cuh"
#include "modules/cuda/layernorm.cuh"

#include <atomic>
#include <type_traits>

namespace zt::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr float kEps = 1e-5f;

template <typename TX, typename TW, bool kVecPath>
__global__ void layernorm_fwd_kernel(TX* out, float* mean, float* rstd, const TX* x, const TW* w, const TW* b,
                                     TX* x_copy, int64_t N, int C) {
  constexpr int W = kVecPath ? kVec : 1;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= N) return;
  const TX* xr = x + row * C;
  float s = 0.0f;
  for_lane_columns<kVecPath>(lane, C, [&](int c) {
    float v[W];
    load_cols<kVecPath>(xr, c, v);
#pragma unroll
    for (int k = 0; k < W; ++k) s += v[k];
  });
  const float m = warp_sum(s) / static_cast<float>(C);
  float var = 0.0f;
  for_lane_columns<kVecPath>(lane, C, [&](int c) {
    float v[W];
    load_cols<kVecPath>(xr, c, v);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float d = v[k] - m;
      var += d * d;
    }
  });
  const float r = 1.0f / sqrtf(warp_sum(var) / static_cast<float>(C) + kEps);
  TX* orow = out + row * C;
  TX* crow = x_copy == nullptr ? nullptr : x_copy + row * C;
  for_lane_columns<kVecPath>(lane, C, [&](int c) {
    float v[W], wv[W], bv[W];
    load_cols<kVecPath>(xr, c, v);
    if (crow != nullptr) {  // the residual stream's copy (16-bit values are exact in f32)
      if constexpr (kVecPath) {
        store_vec(crow + c, v);
      } else {
        crow[c] = xr[c];
      }
    }
    load_cols<kVecPath>(w, c, wv);
    load_cols<kVecPath>(b, c, bv);
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] = (v[k] - m) * r * wv[k] + bv[k];
    if constexpr (kVecPath) {
      store_vec(orow + c, v);
    } else {
      orow[c] = from_float<TX>(v[0]);
    }
  });
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// The per-row arithmetic of the backward, shared by layernorm_bwd_dx_kernel
// and the one pass, over W columns of a row in column order: the sums of
// g = dout * w and of g * xhat (xhat = (x - mean) * rstd), and from their
// means dx, added to `old` when `add`. out may be dv.
template <int W>
__device__ __forceinline__ void ln_bwd_row_sums(const float* xv, const float* dv, const float* wv, float m, float r,
                                                float& g_sum, float& gx_sum) {
#pragma unroll
  for (int k = 0; k < W; ++k) {
    const float g = dv[k] * wv[k];
    g_sum += g;
    gx_sum += g * (xv[k] - m) * r;
  }
}
template <int W>
__device__ __forceinline__ void ln_bwd_dx_cols(const float* xv, const float* dv, const float* wv, const float* old,
                                               bool add, float m, float r, float g_mean, float gx_mean, float* out) {
#pragma unroll
  for (int k = 0; k < W; ++k) {
    const float xhat = (xv[k] - m) * r;
    const float v = (dv[k] * wv[k] - g_mean - xhat * gx_mean) * r;
    out[k] = add ? old[k] + v : v;
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * w, added to
// dres (when given) or to dx (accumulate). dx may alias dout (TD float) or
// dres: the first pass only reads, and in the second each element is read
// and then written by the same lane. TD: dout's type, float or TX ([Note:
// norms' dout in 16 bits] in modules/kernels.hpp).
template <typename TX, typename TW, typename TD, bool kVecPath>
__global__ void layernorm_bwd_dx_kernel(float* dx, bool accumulate, const float* dres, const TD* dout,
                                        const TX* x, const TW* w, const float* mean, const float* rstd, int64_t N,
                                        int C) {
  constexpr int W = kVecPath ? kVec : 1;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= N) return;
  const TX* xr = x + row * C;
  const TD* dr = dout + row * C;
  float* dxr = dx + row * C;
  const float* base = dres != nullptr ? dres + row * C : accumulate ? dxr : nullptr;
  const float m = mean[row], r = rstd[row];
  float g_mean = 0.0f, gx_mean = 0.0f;
  for_lane_columns<kVecPath>(lane, C, [&](int c) {
    float xv[W], dv[W], wv[W];
    load_cols<kVecPath>(xr, c, xv);
    load_cols<kVecPath>(dr, c, dv);
    load_cols<kVecPath>(w, c, wv);
    ln_bwd_row_sums<W>(xv, dv, wv, m, r, g_mean, gx_mean);
  });
  g_mean = warp_sum(g_mean) / static_cast<float>(C);
  gx_mean = warp_sum(gx_mean) / static_cast<float>(C);
  for_lane_columns<kVecPath>(lane, C, [&](int c) {
    float xv[W], dv[W], wv[W], old[W] = {};
    load_cols<kVecPath>(xr, c, xv);
    load_cols<kVecPath>(dr, c, dv);
    load_cols<kVecPath>(w, c, wv);
    if (base != nullptr) load_cols<kVecPath>(base, c, old);
    ln_bwd_dx_cols<W>(xv, dv, wv, old, base != nullptr, m, r, g_mean, gx_mean, dv);
    if constexpr (kVecPath) {
      store_vec(dxr + c, dv);
    } else {
      dxr[c] = dv[0];
    }
  });
}

// [Note: LayerNorm backward in one pass] For C a multiple of kVec up to
// 1024 (vector path), dx and the parameter gradients' chunk partial sums come
// from one kernel: a block of 8 warps takes one chunk of column_chunks(N)
// rows, warp w its rows w, w + 8, ... (one row at a time, dx as
// layernorm_bwd_dx_kernel computes it), and each lane keeps, for the
// columns it owns, the running sums of dout * xhat and dout over its rows.
// Those are the sums column_vec_partials_kernel forms (warp w, rows w, w + 8,
// ... in order; lane * kVec + 256 j columns), and the 8 warps' sums are added
// in warp order, so the partials, and dw and db after column_finish, are the
// separate kernels' bits. What it saves is the parameter sums' own read of
// dout and x: on the H200 (Nsight Compute) at GPT-2 124M's shape (16,384
// rows of 768) 63 us against 77 us for the separate kernels. Wider rows stay
// on the separate kernels: at 2048 columns the lane's 128 running sums leave
// one block a multiprocessor (200 registers a thread) and the one pass took
// 123 us against about 120.
template <typename TX, typename TW, typename TD, int NG>
__global__ void __launch_bounds__(32 * kWarpsPerBlock, NG <= 3 ? 2 : 1) layernorm_bwd_fused_kernel(
    float* dx, bool accumulate, const float* dres, float* partial, const TD* dout, const TX* x, const TW* w,
    const float* mean, const float* rstd, int64_t N, int C, int64_t rows_per_chunk) {
  extern __shared__ float sums[];  // (2, C): the block's dw and db partials
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * rows_per_chunk;
  const int64_t r1 = min(r0 + rows_per_chunk, N);
  float acc_w[NG][kVec] = {}, acc_b[NG][kVec] = {};
  for (int64_t row = r0 + warp; row < r1; row += kWarpsPerBlock) {
    const TX* xr = x + row * C;
    const TD* dr = dout + row * C;
    float* dxr = dx + row * C;
    const float* base = dres != nullptr ? dres + row * C : accumulate ? dxr : nullptr;
    const float m = mean[row], r = rstd[row];
    // Up to 768 columns (NG 3) the row's base (dres or dx) is read with x
    // and dout, before the row sums, and kept in registers: one trip to
    // memory a row, not two (the second pass's x and dout come from L1).
    // Wider rows read base in the second pass: kept, it would leave one
    // block a multiprocessor. On the H200 at GPT-2 124M (16,384 rows of 768,
    // 16-bit x and dout) the profile's 25 calls a step went from 1.80 to
    // 1.66 ms (2026-12-04), the same bits.
    constexpr bool kKeep = NG <= 3;
    Vec<float> braw[kKeep ? NG : 1];
    if constexpr (kKeep) {
      if (base != nullptr) {
#pragma unroll
        for (int j = 0; j < NG; ++j) {
          const int c = lane * kVec + j * 32 * kVec;
          if (c < C) braw[j] = *reinterpret_cast<const Vec<float>*>(base + c);
        }
      }
    }
    float g_mean = 0.0f, gx_mean = 0.0f;
#pragma unroll
    for (int j = 0; j < NG; ++j) {
      const int c = lane * kVec + j * 32 * kVec;
      if (c < C) {
        float xv[kVec], dv[kVec], wv[kVec];
        load_vec(xr + c, xv);
        load_vec(dr + c, dv);
        load_vec(w + c, wv);
        ln_bwd_row_sums<kVec>(xv, dv, wv, m, r, g_mean, gx_mean);
      }
    }
    g_mean = warp_sum(g_mean) / static_cast<float>(C);
    gx_mean = warp_sum(gx_mean) / static_cast<float>(C);
#pragma unroll
    for (int j = 0; j < NG; ++j) {
      const int c = lane * kVec + j * 32 * kVec;
      if (c < C) {
        float xv[kVec], dv[kVec], wv[kVec], old[kVec] = {}, out[kVec];
        load_vec(xr + c, xv);
        load_vec(dr + c, dv);
        if (base != nullptr) {
          if constexpr (kKeep) {
#pragma unroll
            for (int k = 0; k < kVec; ++k) old[k] = braw[j].v[k];
          } else {
            load_vec(base + c, old);
          }
        }
        load_vec(w + c, wv);
        ln_bwd_dx_cols<kVec>(xv, dv, wv, old, base != nullptr, m, r, g_mean, gx_mean, out);
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          acc_w[j][k] += dv[k] * ((xv[k] - m) * r);
          acc_b[j][k] += dv[k];
        }
        store_vec(dxr + c, out);
      }
    }
  }
  for (int turn = 0; turn < kWarpsPerBlock; ++turn) {  // warp order
    if (warp == turn) {
#pragma unroll
      for (int j = 0; j < NG; ++j) {
        const int c = lane * kVec + j * 32 * kVec;
        if (c < C) {
#pragma unroll
          for (int k = 0; k < kVec; ++k) {
            sums[c + k] = turn == 0 ? acc_w[j][k] : sums[c + k] + acc_w[j][k];
            sums[C + c + k] = turn == 0 ? acc_b[j][k] : sums[C + c + k] + acc_b[j][k];
          }
        }
      }
    }
    __syncthreads();
  }
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    partial[static_cast<int64_t>(blockIdx.x) * C + c] = sums[c];
    partial[(static_cast<int64_t>(gridDim.x) + blockIdx.x) * C + c] = sums[C + c];
  }
}

// Column values of the parameter gradients: dw gets dout * xhat, db dout.
template <typename TX, typename TD>
struct LayerNormParamLoad {
  const TD* dout;
  const TX* x;
  const float* mean;
  const float* rstd;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t c, float (&v)[2]) const {
    const float d = to_float(dout[r * cols + c]);
    v[0] = d * ((to_float(x[r * cols + c]) - mean[r]) * rstd[r]);
    v[1] = d;
  }
};

// LayerNormParamLoad, kVec columns at a time (column_vec_partials_kernel).
template <typename TX, typename TD>
struct LayerNormParamVecLoad {
  const TD* dout;
  const TX* x;
  const float* mean;
  const float* rstd;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t c, float (&v)[2][kVec]) const {
    float xv[kVec];
    load_vec(x + r * cols + c, xv);
    load_vec(dout + r * cols + c, v[1]);
    const float m = mean[r], rs = rstd[r];
#pragma unroll
    for (int i = 0; i < kVec; ++i) v[0][i] = v[1][i] * ((xv[i] - m) * rs);
  }
};

// Calls f(Type<TX>, Type<TW>) for TW = TX or TW = float.
template <typename F>
void with_ln_types(DType xt, DType wt, F&& f) {
  with_float_type(xt, "layernorm x", [&](auto tx) {
    using TX = typename decltype(tx)::type;
    if (wt == xt) {
      f(tx, tx);
    } else if (wt == DType::f32) {
      f(tx, Type<float>{});
    } else {
      ZT_THROW("layernorm: weights ", dtype_name(wt), " with activations ", dtype_name(xt),
               " (weights must match the activations or be f32)");
    }
  });
}

template <typename TX, typename TW>
bool ln_vec_ok(const void* x, const void* w, const void* b, const void* y, int64_t C) {
  return C % kVec == 0 && vec_aligned<TX>(x) && vec_aligned<TW>(w) && vec_aligned<TW>(b) && vec_aligned<TX>(y);
}

}  // namespace

void layernorm_fwd(void* out, float* mean, float* rstd, const void* x, DType xt, const void* w, const void* b,
                   DType wt, void* x_copy, int64_t N, int64_t C, cudaStream_t stream) {
  if (N <= 0) return;
  ZT_CHECK(C > 0 && C <= (int64_t{1} << 30), "layernorm: C = ", C);
  const unsigned grid = static_cast<unsigned>((N + kWarpsPerBlock - 1) / kWarpsPerBlock);
  with_ln_types(xt, wt, [&](auto tx, auto tw) {
    using TX = typename decltype(tx)::type;
    using TW = typename decltype(tw)::type;
    auto args = [&](auto kernel) {
      kernel<<<grid, 32 * kWarpsPerBlock, 0, stream>>>(static_cast<TX*>(out), mean, rstd, static_cast<const TX*>(x),
                                                       static_cast<const TW*>(w), static_cast<const TW*>(b),
                                                       static_cast<TX*>(x_copy), N, static_cast<int>(C));
    };
    if (ln_vec_ok<TX, TW>(x, w, b, out, C) && (x_copy == nullptr || vec_aligned<TX>(x_copy))) {
      args(layernorm_fwd_kernel<TX, TW, true>);
    } else {
      args(layernorm_fwd_kernel<TX, TW, false>);
    }
    ZT_CUDA_CHECK_LAUNCH();
  });
}

namespace {
std::atomic<uint64_t> g_one_pass_calls{0};
}  // namespace

uint64_t layernorm_bwd_one_pass_calls() { return g_one_pass_calls.load(std::memory_order_relaxed); }

size_t layernorm_bwd_workspace_bytes(int64_t N, int64_t C) {
  return column_partials_floats(2, N, C) * sizeof(float);
}

void layernorm_bwd(float* dx, bool accumulate_dx, const float* dres, float* dw, float* db, const void* dout,
                   DType dt, const void* x, DType xt, const void* w, DType wt, const float* mean, const float* rstd,
                   int64_t N, int64_t C, void* workspace, cudaStream_t stream) {
  if (N <= 0) return;
  ZT_CHECK(C > 0 && C <= (int64_t{1} << 30), "layernorm: C = ", C);
  ZT_CHECK(dt == DType::f32 || dt == xt, "layernorm_bwd: dout ", dtype_name(dt), " with x ", dtype_name(xt),
           " (dout must be f32 or x's dtype)");
  const unsigned grid = static_cast<unsigned>((N + kWarpsPerBlock - 1) / kWarpsPerBlock);
  with_ln_types(xt, wt, [&](auto tx, auto tw) {
    using TX = typename decltype(tx)::type;
    using TW = typename decltype(tw)::type;
    auto run = [&](auto td) {
      using TD = typename decltype(td)::type;
      const TX* xp = static_cast<const TX*>(x);
      const TD* dp = static_cast<const TD*>(dout);
      float* partial = static_cast<float*>(workspace);
      const bool vec = ln_vec_ok<TX, TW>(x, w, w, x, C) && vec_aligned<float>(dx) && vec_aligned<TD>(dout) &&
                       (dres == nullptr || vec_aligned<float>(dres));
      if (vec && C <= 4 * 32 * kVec) {  // [Note: LayerNorm backward in one pass]
        const ColumnChunks ch = column_chunks(N);
        auto fused = [&](auto kernel) {
          kernel<<<static_cast<unsigned>(ch.chunks), 32 * kWarpsPerBlock, 2 * C * sizeof(float), stream>>>(
              dx, accumulate_dx, dres, partial, dp, xp, static_cast<const TW*>(w), mean, rstd, N,
              static_cast<int>(C), ch.rows_per_chunk);
        };
        if (C <= 3 * 32 * kVec) {
          fused(layernorm_bwd_fused_kernel<TX, TW, TD, 3>);
        } else {
          fused(layernorm_bwd_fused_kernel<TX, TW, TD, 4>);
        }
        ZT_CUDA_CHECK_LAUNCH();
        column_finish<2>(dw, db, partial, ch.chunks, C, stream);
        g_one_pass_calls.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      // Parameter gradients first: dx may alias dout.
      const bool vec_sums = C % kVec == 0 && vec_aligned<TX>(x) && vec_aligned<TD>(dout);
      column_sums_into<2>(vec_sums, LayerNormParamVecLoad<TX, TD>{dp, xp, mean, rstd, C},
                          LayerNormParamLoad<TX, TD>{dp, xp, mean, rstd, C}, dw, db, partial, N, C, stream);
      auto args = [&](auto kernel) {
        kernel<<<grid, 32 * kWarpsPerBlock, 0, stream>>>(dx, accumulate_dx, dres, dp, xp, static_cast<const TW*>(w),
                                                         mean, rstd, N, static_cast<int>(C));
      };
      if (vec) {
        args(layernorm_bwd_dx_kernel<TX, TW, TD, true>);
      } else {
        args(layernorm_bwd_dx_kernel<TX, TW, TD, false>);
      }
      ZT_CUDA_CHECK_LAUNCH();
    };
    if (dt == DType::f32) {
      run(Type<float>{});
    } else if constexpr (!std::is_same_v<TX, float>) {
      run(tx);  // [Note: norms' dout in 16 bits] (modules/kernels.hpp)
    }
  });
}

}  // namespace zt::cuda
