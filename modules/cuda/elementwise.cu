// Element-wise kernels. Each operation is a small functor with a vector step
// (kVec elements from an aligned index) and a scalar step; one grid-stride
// kernel runs either.
#include <cmath>

#include "modules/cuda/common.cuh"
#include "modules/cuda/elementwise.cuh"

namespace zt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;  // grid-stride beyond this

template <typename Op>
__global__ void elementwise_kernel(Op op, int64_t n, bool vec) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (vec) {
    const int64_t nv = n / kVec;
    for (int64_t v = tid; v < nv; v += stride) op.vec(v * kVec);
    const int64_t tail = nv * kVec + tid;  // the last n % kVec elements
    if (tail < n) op.one(tail);
  } else {
    for (int64_t i = tid; i < n; i += stride) op.one(i);
  }
}

template <typename Op>
void launch(const Op& op, int64_t n, bool vec, cudaStream_t stream) {
  if (n <= 0) return;
  const int64_t items = vec ? (n + kVec - 1) / kVec : n;
  elementwise_kernel<<<grid_for(items, kThreads, kMaxBlocks), kThreads, 0, stream>>>(op, n, vec);
  ZT_CUDA_CHECK_LAUNCH();
}

template <typename TO, typename TA>
struct AddOp {
  TO* out;
  const TA* a;
  const TA* b;
  __device__ void vec(int64_t i) const {
    float x[kVec], y[kVec];
    load_vec(a + i, x);
    load_vec(b + i, y);
#pragma unroll
    for (int k = 0; k < kVec; ++k) x[k] += y[k];
    store_vec(out + i, x);
  }
  __device__ void one(int64_t i) const { out[i] = from_float<TO>(to_float(a[i]) + to_float(b[i])); }
};

// Every conversion between f32, f64, bf16 and f16 equals the host's
// (cpu::cast_into) when it goes through fp32: the host also narrows f64 to
// 16 bits through fp32, and the f32 <-> f64 steps are exact or one rounding.
template <typename TD, typename TS>
struct CastOp {
  TD* dst;
  const TS* src;
  __device__ void vec(int64_t i) const {
    if constexpr (sizeof(TD) == 8 || sizeof(TS) == 8) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) one(i + k);
    } else {
      float x[kVec];
      load_vec(src + i, x);
      store_vec(dst + i, x);
    }
  }
  __device__ void one(int64_t i) const {
    if constexpr (sizeof(TD) == 8) {
      dst[i] = static_cast<double>(to_float(src[i]));
    } else {
      dst[i] = from_float<TD>(to_float(src[i]));
    }
  }
};

template <typename T>
struct ScaleOp {
  T* x;
  float alpha;
  __device__ void vec(int64_t i) const {
    float v[kVec];
    load_vec(x + i, v);
#pragma unroll
    for (int k = 0; k < kVec; ++k) v[k] *= alpha;
    store_vec(x + i, v);
  }
  __device__ void one(int64_t i) const { x[i] = from_float<T>(to_float(x[i]) * alpha); }
};

struct ScaleF64Op {
  double* x;
  double alpha;
  __device__ void vec(int64_t i) const {
#pragma unroll
    for (int k = 0; k < kVec; ++k) one(i + k);
  }
  __device__ void one(int64_t i) const { x[i] *= alpha; }
};

template <typename T>
struct OverflowOp {
  const T* x;
  int32_t* flag;
  __device__ void vec(int64_t i) const {
    bool bad = false;
    if constexpr (sizeof(T) == 8) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) bad |= !isfinite(x[i + k]);
    } else {
      float v[kVec];
      load_vec(x + i, v);
#pragma unroll
      for (int k = 0; k < kVec; ++k) bad |= !isfinite(v[k]);
    }
    if (bad) *flag = 1;  // every writer stores the same value
  }
  __device__ void one(int64_t i) const {
    if (!isfinite(to_double(x[i]))) *flag = 1;
  }
};

template <typename TO, typename TB>
__global__ void bias_broadcast_kernel(TO* out, const TB* bias, int64_t rows, int64_t cols, bool accumulate) {
  const int64_t n = rows * cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float b = to_float(bias[i % cols]);
    out[i] = from_float<TO>(accumulate ? to_float(out[i]) + b : b);
  }
}

}  // namespace

void add(void* out, DType out_t, const void* a, const void* b, DType in_t, int64_t n, cudaStream_t stream) {
  with_float_type(out_t, "add out", [&](auto to) {
    with_float_type(in_t, "add inputs", [&](auto ta) {
      using TO = typename decltype(to)::type;
      using TA = typename decltype(ta)::type;
      const bool vec = vec_aligned<TO>(out) && vec_aligned<TA>(a) && vec_aligned<TA>(b);
      launch(AddOp<TO, TA>{static_cast<TO*>(out), static_cast<const TA*>(a), static_cast<const TA*>(b)}, n, vec,
             stream);
    });
  });
}

void cast(void* dst, DType dst_t, const void* src, DType src_t, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  if (dst_t == src_t) {
    if (dst != src) {
      ZT_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * dtype_size(dst_t),
                                    cudaMemcpyDeviceToDevice, stream));
    }
    return;
  }
  with_any_float_type(dst_t, "cast dst", [&](auto td) {
    with_any_float_type(src_t, "cast src", [&](auto ts) {
      using TD = typename decltype(td)::type;
      using TS = typename decltype(ts)::type;
      const bool vec = vec_aligned<TD>(dst) && vec_aligned<TS>(src);
      launch(CastOp<TD, TS>{static_cast<TD*>(dst), static_cast<const TS*>(src)}, n, vec, stream);
    });
  });
}

void scale(void* x, DType t, double alpha, int64_t n, cudaStream_t stream) {
  if (t == DType::f64) {
    launch(ScaleF64Op{static_cast<double*>(x), alpha}, n, vec_aligned<double>(x), stream);
    return;
  }
  with_float_type(t, "scale", [&](auto tx) {
    using T = typename decltype(tx)::type;
    launch(ScaleOp<T>{static_cast<T*>(x), static_cast<float>(alpha)}, n, vec_aligned<T>(x), stream);
  });
}

void bias_broadcast(void* out, DType out_t, const void* bias, DType bias_t, int64_t rows, int64_t cols,
                    bool accumulate, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  with_float_type(out_t, "bias_broadcast out", [&](auto to) {
    with_float_type(bias_t, "bias", [&](auto tb) {
      using TO = typename decltype(to)::type;
      using TB = typename decltype(tb)::type;
      bias_broadcast_kernel<<<grid_for(rows * cols, kThreads, kMaxBlocks), kThreads, 0, stream>>>(
          static_cast<TO*>(out), static_cast<const TB*>(bias), rows, cols, accumulate);
      ZT_CUDA_CHECK_LAUNCH();
    });
  });
}

void check_overflow(const void* x, DType t, int64_t n, int32_t* flag, cudaStream_t stream) {
  with_any_float_type(t, "check_overflow", [&](auto tx) {
    using T = typename decltype(tx)::type;
    launch(OverflowOp<T>{static_cast<const T*>(x), flag}, n, vec_aligned<T>(x), stream);
  });
}

}  // namespace zt::cuda
