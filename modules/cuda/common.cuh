// Internal to the CUDA kernels: storage <-> fp32 conversion on the device,
// 8-element vector loads and stores, warp reductions, dtype dispatch on the
// host, and tensor checks. Every kernel does its arithmetic in fp32 (f64 only
// where the Kernels contract says so: sum_squares, and f64 casts).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "core/error.hpp"
#include "core/tensor.hpp"
#include "runtime/device.hpp"

namespace zt::cuda {

// log2(e): exp(x) is 2^(x log2 e), the form the hardware's ex2 takes.
constexpr float kLog2e = 1.4426950408889634f;

// ---- element conversion ----------------------------------------------------
// Round to nearest even, as zt::from_f32 on the host (NaN payloads aside).
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(double v) { return static_cast<float>(v); }
__device__ __forceinline__ double to_double(float v) { return v; }
__device__ __forceinline__ double to_double(double v) { return v; }
__device__ __forceinline__ double to_double(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ double to_double(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ double from_float<double>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }

// ---- vectors of kVec elements ------------------------------------------------
// Element-wise kernels move kVec = 8 elements per thread and step: one 16-byte
// access for 16-bit types, two for f32, four for f64. The vector path is taken
// only when every pointer is aligned to its vector (vec_aligned); the
// remaining n % 8 elements and unaligned tensors go element by element.
constexpr int kVec = 8;

template <typename T>
struct alignas(sizeof(T) * kVec) Vec {
  T v[kVec];
};

template <typename T>
__device__ __forceinline__ void load_vec(const T* p, float (&f)[kVec]) {
  const Vec<T> x = *reinterpret_cast<const Vec<T>*>(p);
#pragma unroll
  for (int i = 0; i < kVec; ++i) f[i] = to_float(x.v[i]);
}

template <typename T>
__device__ __forceinline__ void store_vec(T* p, const float (&f)[kVec]) {
  Vec<T> x;
#pragma unroll
  for (int i = 0; i < kVec; ++i) x.v[i] = from_float<T>(f[i]);
  *reinterpret_cast<Vec<T>*>(p) = x;
}

template <typename T>
inline bool vec_aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % sizeof(Vec<T>) == 0;
}

// ---- a warp per row ------------------------------------------------------------
// The norms' kernels (LayerNorm, RMSNorm) give a row to a warp.
// for_lane_columns visits the row's columns owned by `lane`, kVec at a time
// (kVecPath: C is a multiple of kVec and every row start is vector-aligned)
// or one at a time: f(c) takes columns c .. c + width - 1; load_cols and
// store_cols move them as floats.
template <bool kVecPath, typename F>
__device__ __forceinline__ void for_lane_columns(int lane, int C, F&& f) {
  if constexpr (kVecPath) {
    for (int c = lane * kVec; c < C; c += 32 * kVec) f(c);
  } else {
    for (int c = lane; c < C; c += 32) f(c);
  }
}

template <bool kVecPath, typename T>
__device__ __forceinline__ void load_cols(const T* p, int c, float (&v)[kVecPath ? kVec : 1]) {
  if constexpr (kVecPath) {
    load_vec(p + c, v);
  } else {
    v[0] = to_float(p[c]);
  }
}

template <bool kVecPath, typename T>
__device__ __forceinline__ void store_cols(T* p, int c, const float (&v)[kVecPath ? kVec : 1]) {
  if constexpr (kVecPath) {
    store_vec(p + c, v);
  } else {
    p[c] = from_float<T>(v[0]);
  }
}

// ---- reductions ------------------------------------------------------------------
// Butterfly sums: the same order on every run, so results are reproducible.
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// ---- launch geometry --------------------------------------------------------------
inline unsigned grid_for(int64_t work_items, int threads_per_block, int64_t max_blocks = 65535LL * 16) {
  int64_t g = (work_items + threads_per_block - 1) / threads_per_block;
  if (g < 1) g = 1;
  if (g > max_blocks) g = max_blocks;
  return static_cast<unsigned>(g);
}

// ---- host-side dtype dispatch ------------------------------------------------------
template <typename T>
struct Type {
  using type = T;
};

// Calls f(Type<T>{}) for the 16/32-bit floating storage types.
template <typename F>
void with_float_type(DType t, const char* what, F&& f) {
  switch (t) {
    case DType::f32: f(Type<float>{}); return;
    case DType::bf16: f(Type<__nv_bfloat16>{}); return;
    case DType::f16: f(Type<__half>{}); return;
    default: ZT_THROW(what, ": CUDA kernels take f32, bf16 or f16 storage, got ", dtype_name(t));
  }
}

// Same, f64 included (casts and the optimizer's reductions).
template <typename F>
void with_any_float_type(DType t, const char* what, F&& f) {
  if (t == DType::f64) {
    f(Type<double>{});
  } else {
    with_float_type(t, what, f);
  }
}

// ---- tensor checks -------------------------------------------------------------------
inline void check_on_device(const Tensor& t, const char* what) {
  ZT_CHECK(t.device == DeviceKind::cuda, what, " is not in GPU memory");
  ZT_CHECK(t.data != nullptr || t.numel() == 0, what, " has no data");
}

inline void check_dtype(const Tensor& t, DType dt, const char* what) {
  ZT_CHECK(t.dtype == dt, what, " must be ", dtype_name(dt), ", got ", dtype_name(t.dtype));
}

inline int64_t cols(const Tensor& t) { return t.shape.rank() == 0 ? 1 : t.shape[-1]; }
inline int64_t rows(const Tensor& t) { return cols(t) == 0 ? 0 : t.numel() / cols(t); }

}  // namespace zt::cuda
