// The two element-wise kernels around cuDNN's attention backward:
// attention_cudnn_cast.cuh.
#include "modules/cuda/attention_cudnn_cast.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/error.hpp"
#include "modules/cuda/attention_detail.cuh"

namespace zt {
namespace {

unsigned grid_for(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 4096 ? blocks : 4096);  // grid-stride loops do the rest
}

template <typename S>
__global__ void round_kernel(const float* __restrict__ src, S* __restrict__ dst, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = attn::from_f32<S>(src[i]);
}

// A block per row, threads along it.
template <typename S>
__global__ void widen_kernel(const S* __restrict__ src, int64_t w, int64_t rows, float* __restrict__ dst,
                             int64_t ld) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x)
    for (int64_t c = threadIdx.x; c < w; c += blockDim.x) dst[r * ld + c] = attn::to_f32(src[r * w + c]);
}

template <typename S>
void launch_round(const float* src, void* dst, int64_t n, cudaStream_t stream) {
  constexpr int kThreads = 256;
  round_kernel<S><<<grid_for(n, kThreads), kThreads, 0, stream>>>(src, static_cast<S*>(dst), n);
  ZT_CUDA_CHECK_LAUNCH();
}

template <typename S>
void launch_widen(const void* src, int64_t w, int64_t rows, float* dst, int64_t ld, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const unsigned blocks = static_cast<unsigned>(rows < 65536 ? rows : 65536);
  widen_kernel<S><<<blocks, kThreads, 0, stream>>>(static_cast<const S*>(src), w, rows, dst, ld);
  ZT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void cudnn_round(DType t, const float* src, void* dst, int64_t n, cudaStream_t stream) {
  ZT_CHECK(t == DType::bf16 || t == DType::f16, "cudnn_round: bf16 or f16, got ", dtype_name(t));
  if (t == DType::bf16) {
    launch_round<__nv_bfloat16>(src, dst, n, stream);
  } else {
    launch_round<__half>(src, dst, n, stream);
  }
}

void cudnn_widen(DType t, const void* src, int64_t w, int64_t rows, float* dst, int64_t ld, cudaStream_t stream) {
  ZT_CHECK(t == DType::bf16 || t == DType::f16, "cudnn_widen: bf16 or f16, got ", dtype_name(t));
  if (t == DType::bf16) {
    launch_widen<__nv_bfloat16>(src, w, rows, dst, ld, stream);
  } else {
    launch_widen<__half>(src, w, rows, dst, ld, stream);
  }
}

}  // namespace zt
