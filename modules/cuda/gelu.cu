// GELU forward and backward. [Note: GELU parity] The formula is the CPU
// reference's operation for operation (cpu_kernels_norm.cpp: tanh(u) as
// 1 - 2 / (1 + e^{2u}) with cpu::fast_exp's range reduction and polynomial,
// cpu_kernels_detail.hpp), and this file is compiled with -fmad=false, so the
// GPU result equals the CPU's bit for bit on the same input. The exception
// is the forward in a 16-bit dtype: there the polynomial and the IEEE
// division made the kernel compute-bound (1.9 TB/s), so it takes the
// hardware's exp and reciprocal in the equivalent form x / (1 + e^{-2u}),
// within a few fp32 ulps of the exact value before the result is rounded to
// 16 bits: at most one unit of the 16-bit dtype from the CPU's.
#include "modules/cuda/column_reduce.cuh"
#include "modules/cuda/common.cuh"
#include "modules/cuda/gelu.cuh"

#include <type_traits>

namespace zt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;
constexpr float kSqrt2OverPi = 0.7978845608028654f;

// cpu::fast_exp: Cody-Waite reduction x = n ln2 + r and Cephes' degree-6
// polynomial, inputs clamped to [-87, 88].
__device__ __forceinline__ float fast_exp(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float magic = 12582912.0f;  // 1.5 * 2^23
  const float n = (x * 1.44269504088896341f + magic) - magic;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * __int_as_float((static_cast<int>(n) + 127) << 23);
}

__device__ __forceinline__ float gelu_tanh(float x) {
  const float u = kSqrt2OverPi * (x + 0.044715f * x * x * x);
  return 1.0f - 2.0f / (1.0f + fast_exp(2.0f * u));
}

__device__ __forceinline__ float gelu(float v) { return 0.5f * v * (1.0f + gelu_tanh(v)); }

// 0.5 v (1 + tanh u) = v / (1 + e^{-2u}); a large -2u gives e^{-2u} = inf
// and __fdividef returns -0, GELU's limit.
__device__ __forceinline__ float gelu_fast(float v) {
  const float u = kSqrt2OverPi * (v + 0.044715f * v * v * v);
  return __fdividef(v, 1.0f + __expf(-2.0f * u));
}

// The forward for storage type T ([Note: GELU parity]).
template <typename T>
__device__ __forceinline__ float gelu_of(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return gelu(v);
  } else {
    return gelu_fast(v);
  }
}

__device__ __forceinline__ float gelu_grad(float v) {
  const float th = gelu_tanh(v);
  const float sech2 = 1.0f - th * th;
  return 0.5f * (1.0f + th) + 0.5f * v * sech2 * kSqrt2OverPi * (1.0f + static_cast<float>(3 * 0.044715) * v * v);
}

// (n) -> (n); vec: every pointer aligned to its kVec-element vector.
template <typename T>
__global__ void gelu_fwd_kernel(T* out, const T* x, int64_t n, bool vec) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if (vec) {
    const int64_t nv = n / kVec;
    for (int64_t v = tid; v < nv; v += stride) {
      float f[kVec];
      load_vec(x + v * kVec, f);
#pragma unroll
      for (int k = 0; k < kVec; ++k) f[k] = gelu_of<T>(f[k]);
      store_vec(out + v * kVec, f);
    }
    done = nv * kVec;
  }
  for (int64_t i = done + tid; i < n; i += stride) out[i] = from_float<T>(gelu_of<T>(to_float(x[i])));
}

// din may alias dout: each element is read before it is written, by one thread.
template <typename T>
__global__ void gelu_bwd_kernel(float* din, const float* dout, const T* x, int64_t n, bool vec) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if (vec) {
    const int64_t nv = n / kVec;
    for (int64_t v = tid; v < nv; v += stride) {
      float f[kVec], d[kVec];
      load_vec(x + v * kVec, f);
      load_vec(dout + v * kVec, d);
#pragma unroll
      for (int k = 0; k < kVec; ++k) f[k] = gelu_grad(f[k]) * d[k];
      store_vec(din + v * kVec, f);
    }
    done = nv * kVec;
  }
  for (int64_t i = done + tid; i < n; i += stride) din[i] = gelu_grad(to_float(x[i])) * dout[i];
}

// Each element of gelu_bwd's result, for the column sums of
// [Note: deterministic column sums] (the bias gradient, in bias_grad's
// order), also written rounded to O into out.
template <typename O, typename X>
struct GeluBwdCastLoad {
  const float* dout;
  const X* x;
  O* out;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t c, float (&v)[1]) const {
    const int64_t i = r * cols + c;
    v[0] = gelu_grad(to_float(x[i])) * dout[i];
    out[i] = from_float<O>(v[0]);
  }
};

// GeluBwdCastLoad, kVec columns at a time (column_vec_partials_kernel).
template <typename O, typename X>
struct GeluBwdCastVecLoad {
  const float* dout;
  const X* x;
  O* out;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t c, float (&v)[1][kVec]) const {
    const int64_t i = r * cols + c;
    float xv[kVec];
    load_vec(x + i, xv);
    load_vec(dout + i, v[0]);
#pragma unroll
    for (int k = 0; k < kVec; ++k) v[0][k] = gelu_grad(xv[k]) * v[0][k];
    store_vec(out + i, v[0]);
  }
};

}  // namespace

void gelu_fwd(void* out, const void* x, DType t, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  with_float_type(t, "gelu_fwd", [&](auto tx) {
    using T = typename decltype(tx)::type;
    const bool vec = vec_aligned<T>(out) && vec_aligned<T>(x);
    gelu_fwd_kernel<<<grid_for(vec ? n / kVec + 1 : n, kThreads, kMaxBlocks), kThreads, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(x), n, vec);
    ZT_CUDA_CHECK_LAUNCH();
  });
}

void gelu_bwd(float* din, const float* dout, const void* x, DType t, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  with_float_type(t, "gelu_bwd", [&](auto tx) {
    using T = typename decltype(tx)::type;
    const bool vec = vec_aligned<T>(x) && vec_aligned<float>(din) && vec_aligned<float>(dout);
    gelu_bwd_kernel<<<grid_for(vec ? n / kVec + 1 : n, kThreads, kMaxBlocks), kThreads, 0, stream>>>(
        din, dout, static_cast<const T*>(x), n, vec);
    ZT_CUDA_CHECK_LAUNCH();
  });
}

void gelu_bwd_bias_grad_and_cast(float* dbias, void* out, DType out_t, const float* dout, const void* x, DType t,
                                 int64_t rows, int64_t cols, void* workspace, cudaStream_t stream) {
  with_float_type(t, "gelu_bwd_bias_grad_and_cast x", [&](auto tx) {
    using X = typename decltype(tx)::type;
    auto run = [&](auto* o) {
      using O = std::remove_pointer_t<decltype(o)>;
      float* partial = static_cast<float*>(workspace);
      const X* xp = static_cast<const X*>(x);
      const bool vec = cols % kVec == 0 && vec_aligned<float>(dout) && vec_aligned<X>(x) && vec_aligned<O>(o);
      column_sums_into<1>(vec, GeluBwdCastVecLoad<O, X>{dout, xp, o, cols}, GeluBwdCastLoad<O, X>{dout, xp, o, cols},
                          dbias, nullptr, partial, rows, cols, stream);
    };
    switch (out_t) {
      case DType::bf16: run(static_cast<__nv_bfloat16*>(out)); return;
      case DType::f16: run(static_cast<__half*>(out)); return;
      default: ZT_THROW("gelu_bwd_bias_grad_and_cast: the operand must be bf16 or f16, got ", dtype_name(out_t));
    }
  });
}

}  // namespace zt::cuda
