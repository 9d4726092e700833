// Fused AdamW: one thread per element (four per access where aligned), the
// arithmetic of adamw_element ([Note: AdamW formula] in optim/adamw_math.hpp)
// with the scalars computed once on the host by adamw_scalars. With
// -fmad=false, IEEE division and sqrt (nvcc's defaults) and no flush-to-zero,
// every operation rounds as on the CPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "core/error.hpp"
#include "optim/cuda/adamw.cuh"

namespace zt {
namespace {

// The working copy, rounded to nearest even as zt::from_f32 on the host.
__device__ __forceinline__ void store_copy(float* dst, float v) { *dst = v; }
__device__ __forceinline__ void store_copy(__nv_bfloat16* dst, float v) { *dst = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store_copy(__half* dst, float v) { *dst = __float2half_rn(v); }

// Copy is void for "no working copy". decay_factor is s.decay_factor, or
// exactly 1 without decay. vec: every pointer 16-byte aligned, so four
// elements move per access (the copy's stores stay element by element).
template <bool kLerpFromStart, typename Copy>
__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n, AdamWScalars s,
                             float decay_factor, Copy* copy, bool vec) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if (vec) {
    const int64_t nv = n / 4;
    for (int64_t i = tid; i < nv; i += stride) {
      float4 p = reinterpret_cast<float4*>(param)[i];
      float4 mm = reinterpret_cast<float4*>(m)[i];
      float4 vv = reinterpret_cast<float4*>(v)[i];
      const float4 g = reinterpret_cast<const float4*>(grad)[i];
      adamw_element<kLerpFromStart>(p.x, mm.x, vv.x, g.x, decay_factor, s);
      adamw_element<kLerpFromStart>(p.y, mm.y, vv.y, g.y, decay_factor, s);
      adamw_element<kLerpFromStart>(p.z, mm.z, vv.z, g.z, decay_factor, s);
      adamw_element<kLerpFromStart>(p.w, mm.w, vv.w, g.w, decay_factor, s);
      reinterpret_cast<float4*>(param)[i] = p;
      reinterpret_cast<float4*>(m)[i] = mm;
      reinterpret_cast<float4*>(v)[i] = vv;
      if constexpr (!std::is_void_v<Copy>) {
        store_copy(copy + 4 * i + 0, p.x);
        store_copy(copy + 4 * i + 1, p.y);
        store_copy(copy + 4 * i + 2, p.z);
        store_copy(copy + 4 * i + 3, p.w);
      }
    }
    done = nv * 4;
  }
  for (int64_t i = done + tid; i < n; i += stride) {
    const float p = adamw_element<kLerpFromStart>(param[i], m[i], v[i], grad[i], decay_factor, s);
    if constexpr (!std::is_void_v<Copy>) store_copy(copy + i, p);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void adamw_update_cuda(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWParams& hp,
                       int64_t step, float grad_scale, bool decay, void* param_copy, DType copy_dtype,
                       cudaStream_t stream) {
  ZT_CHECK(n >= 0, "negative length ", n);
  const AdamWScalars s = adamw_scalars(hp, step, grad_scale);
  if (n == 0) return;
  const float decay_factor = decay ? s.decay_factor : 1.0f;
  const bool vec = aligned16(param) && aligned16(grad) && aligned16(m) && aligned16(v);
  // A grid-stride loop over at most 8192 blocks of 256 threads.
  constexpr int kThreads = 256;
  const int64_t work = vec ? n / 4 + 1 : n;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(8192, (work + kThreads - 1) / kThreads));
  auto run = [&](auto copy) {
    if (s.lerp_from_start) {
      adamw_kernel<true><<<grid, kThreads, 0, stream>>>(param, grad, m, v, n, s, decay_factor, copy, vec);
    } else {
      adamw_kernel<false><<<grid, kThreads, 0, stream>>>(param, grad, m, v, n, s, decay_factor, copy, vec);
    }
    ZT_CUDA_CHECK_LAUNCH();
  };
  if (param_copy == nullptr) {
    run(static_cast<void*>(nullptr));
    return;
  }
  switch (copy_dtype) {
    case DType::bf16: run(static_cast<__nv_bfloat16*>(param_copy)); return;
    case DType::f16: run(static_cast<__half*>(param_copy)); return;
    case DType::f32: run(static_cast<float*>(param_copy)); return;
    default: ZT_THROW("adamw_update_cuda: working copy must be bf16, f16 or f32, got ", dtype_name(copy_dtype));
  }
}

}  // namespace zt
