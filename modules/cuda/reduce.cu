// Bias gradients, the sum of squares and the plain sum.
#include "modules/cuda/column_reduce.cuh"
#include "modules/cuda/reduce.cuh"

#include <type_traits>

namespace zt::cuda {
namespace {

struct DoutLoad {
  const float* dout;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t c, float (&v)[1]) const { v[0] = dout[r * cols + c]; }
};

// A 16-bit matrix's elements widened to f32, one or kVec at a time.
template <typename T>
struct Widen16Load {
  const T* x;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t c, float (&v)[1]) const { v[0] = to_float(x[r * cols + c]); }
};
template <typename T>
struct Widen16VecLoad {
  const T* x;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t c, float (&v)[1][kVec]) const { load_vec(x + r * cols + c, v[0]); }
};

// DoutCastLoad, kVec columns at a time (column_vec_partials_kernel).
template <typename O>
struct DoutCastVecLoad {
  const float* dout;
  O* out;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t c, float (&v)[1][kVec]) const {
    const int64_t i = r * cols + c;
    load_vec(dout + i, v[0]);
    store_vec(out + i, v[0]);
  }
};

// DoutLoad that also writes each element it reads, rounded to O, into out:
// the column sums visit every element exactly once.
template <typename O>
struct DoutCastLoad {
  const float* dout;
  O* out;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t c, float (&v)[1]) const {
    const int64_t i = r * cols + c;
    v[0] = dout[i];
    out[i] = from_float<O>(v[0]);
  }
};

// [Note: deterministic sum of squares] A grid whose size depends on n alone
// (kSumBlocks at most) writes one f64 partial per block: each thread sums its
// grid-stride elements in order, the block adds its threads' sums by a fixed
// tree; one warp then adds the partials in a fixed order. The plain sum
// (sum_into) runs the same kernels without the squaring.
constexpr int kSumThreads = 256;
constexpr int64_t kSumBlocks = 1024;

int64_t sum_blocks(int64_t n) {
  const int64_t per_block = int64_t{kSumThreads} * 32;  // at least 32 elements a thread
  return std::min<int64_t>(kSumBlocks, std::max<int64_t>(1, (n + per_block - 1) / per_block));
}

__device__ double block_sum(double v) {
  __shared__ double warp_sums[kSumThreads / 32];
  v = warp_sum(v);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  double s = 0;
  if (threadIdx.x == 0) {
    for (int w = 0; w < kSumThreads / 32; ++w) s += warp_sums[w];
  }
  return s;  // valid in thread 0
}

// kSquare: sum x^2 (sum_squares), else x (sum_into). vec: x is aligned to
// kVec elements (never for f64), so a thread reads 16 or 32 bytes at a time.
template <bool kSquare, typename T>
__global__ void sum_partial_kernel(const T* x, int64_t n, bool vec, double* partial) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  double s = 0;
  int64_t done = 0;
  if constexpr (sizeof(T) < 8) {
    if (vec) {
      const int64_t nv = n / kVec;
      for (int64_t v = tid; v < nv; v += stride) {
        float f[kVec];
        load_vec(x + v * kVec, f);
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          const double e = f[k];
          s += kSquare ? e * e : e;
        }
      }
      done = nv * kVec;
    }
  }
  for (int64_t i = done + tid; i < n; i += stride) {
    const double e = to_double(x[i]);
    s += kSquare ? e * e : e;
  }
  s = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sum_finish_kernel(const double* partial, int64_t blocks, double* acc) {
  double s = 0;
  for (int64_t b = threadIdx.x; b < blocks; b += 32) s += partial[b];
  s = warp_sum(s);
  if (threadIdx.x == 0) *acc += s;
}

}  // namespace

size_t bias_grad_workspace_bytes(int64_t rows, int64_t cols) {
  return column_partials_floats(1, rows, cols) * sizeof(float);
}

void bias_grad(float* dbias, const float* dout, int64_t rows, int64_t cols, void* workspace, cudaStream_t stream) {
  column_sums_into<1>(DoutLoad{dout, cols}, dbias, nullptr, static_cast<float*>(workspace), rows, cols, stream);
}

void bias_grad_16(float* dbias, const void* dout, DType t, int64_t rows, int64_t cols, void* workspace,
                  cudaStream_t stream) {
  auto run = [&](const auto* x) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(x)>>;
    const bool vec = cols % kVec == 0 && vec_aligned<T>(x);
    column_sums_into<1>(vec, Widen16VecLoad<T>{x, cols}, Widen16Load<T>{x, cols}, dbias, nullptr,
                        static_cast<float*>(workspace), rows, cols, stream);
  };
  switch (t) {
    case DType::bf16: run(static_cast<const __nv_bfloat16*>(dout)); return;
    case DType::f16: run(static_cast<const __half*>(dout)); return;
    default: ZT_THROW("bias_grad_16: dout must be bf16 or f16, got ", dtype_name(t));
  }
}

void bias_grad_and_cast(float* dbias, void* out, DType out_t, const float* dout, int64_t rows, int64_t cols,
                        void* workspace, cudaStream_t stream) {
  auto run = [&](auto* o) {
    using O = std::remove_pointer_t<decltype(o)>;
    float* partial = static_cast<float*>(workspace);
    const bool vec = cols % kVec == 0 && vec_aligned<float>(dout) && vec_aligned<O>(o);
    column_sums_into<1>(vec, DoutCastVecLoad<O>{dout, o, cols}, DoutCastLoad<O>{dout, o, cols}, dbias, nullptr,
                        partial, rows, cols, stream);
  };
  switch (out_t) {
    case DType::bf16: run(static_cast<__nv_bfloat16*>(out)); return;
    case DType::f16: run(static_cast<__half*>(out)); return;
    default: ZT_THROW("bias_grad_and_cast: the operand must be bf16 or f16, got ", dtype_name(out_t));
  }
}

size_t sum_workspace_bytes(int64_t n) { return static_cast<size_t>(sum_blocks(n)) * sizeof(double); }

namespace {

template <bool kSquare>
void sum_launch(const void* x, DType t, int64_t n, double* acc, void* workspace, cudaStream_t stream,
                const char* what) {
  if (n <= 0) return;
  const int64_t blocks = sum_blocks(n);
  double* partial = static_cast<double*>(workspace);
  with_any_float_type(t, what, [&](auto tx) {
    using T = typename decltype(tx)::type;
    sum_partial_kernel<kSquare><<<static_cast<unsigned>(blocks), kSumThreads, 0, stream>>>(
        static_cast<const T*>(x), n, vec_aligned<T>(x), partial);
    ZT_CUDA_CHECK_LAUNCH();
  });
  sum_finish_kernel<<<1, 32, 0, stream>>>(partial, blocks, acc);
  ZT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void sum_squares(const void* x, DType t, int64_t n, double* acc, void* workspace, cudaStream_t stream) {
  sum_launch<true>(x, t, n, acc, workspace, stream, "sum_squares");
}

void sum_into(const void* x, DType t, int64_t n, double* acc, void* workspace, cudaStream_t stream) {
  sum_launch<false>(x, t, n, acc, workspace, stream, "sum_into");
}

}  // namespace zt::cuda
