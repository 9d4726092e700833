// Fused AdamW. [Note: AdamW formula] in optim/adamw.hpp gives the operation
// order; the per-step scalars are computed here exactly as the CPU's
// make_scalars does (double, rounded once to fp32). With -fmad=false, IEEE
// division and sqrt (nvcc's defaults) and no flush-to-zero, every operation
// rounds as on the CPU.
#include <cmath>

#include "modules/cuda/adamw.cuh"
#include "modules/cuda/common.cuh"

namespace zt {
namespace {

struct AdamWScalars {
  float grad_scale;
  float decay_factor;  // 1 - lr*wd, or exactly 1 without decay
  float lerp_weight;   // 1 - beta1
  float lerp_rest;     // 1 - lerp_weight in fp32
  bool lerp_from_start;
  float beta2;
  float one_minus_beta2;
  float bias_correction2_sqrt;
  float eps;
  float neg_step_size;  // -lr / (1 - beta1^t)
};

AdamWScalars make_scalars(const AdamWParams& hp, int64_t step, float grad_scale, bool decay) {
  ZT_CHECK(step >= 1, "AdamW step is 1-based, got ", step);
  ZT_CHECK(hp.beta1 >= 0 && hp.beta1 < 1 && hp.beta2 >= 0 && hp.beta2 < 1, "AdamW betas must lie in [0, 1): ",
           hp.beta1, ", ", hp.beta2);
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(hp.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(hp.beta2, t);
  AdamWScalars s;
  s.grad_scale = grad_scale;
  s.decay_factor = decay ? static_cast<float>(1.0 - hp.lr * hp.weight_decay) : 1.0f;
  s.lerp_weight = static_cast<float>(1.0 - hp.beta1);
  s.lerp_rest = 1.0f - s.lerp_weight;
  s.lerp_from_start = std::fabs(s.lerp_weight) < 0.5f;
  s.beta2 = static_cast<float>(hp.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - hp.beta2);
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s.eps = static_cast<float>(hp.eps);
  s.neg_step_size = static_cast<float>(-(hp.lr / bias_correction1));
  return s;
}

__device__ __forceinline__ float adamw_element(float& p, float& m, float& v, float grad, const AdamWScalars& s) {
  const float g = grad * s.grad_scale;
  float pn = p * s.decay_factor;
  const float m_new = s.lerp_from_start ? m + s.lerp_weight * (g - m) : g - (g - m) * s.lerp_rest;
  const float v_new = v * s.beta2 + s.one_minus_beta2 * g * g;
  const float denom = sqrtf(v_new) / s.bias_correction2_sqrt + s.eps;
  pn = pn + s.neg_step_size * m_new / denom;
  m = m_new;
  v = v_new;
  p = pn;
  return pn;
}

// Copy is void for "no working copy". vec: every pointer 16-byte aligned, so
// four elements move per access (the copy's 8-byte store is then aligned too).
template <typename Copy>
__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n, AdamWScalars s,
                             Copy* copy, bool vec) {
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
      float out[4];
      out[0] = adamw_element(p.x, mm.x, vv.x, g.x, s);
      out[1] = adamw_element(p.y, mm.y, vv.y, g.y, s);
      out[2] = adamw_element(p.z, mm.z, vv.z, g.z, s);
      out[3] = adamw_element(p.w, mm.w, vv.w, g.w, s);
      reinterpret_cast<float4*>(param)[i] = p;
      reinterpret_cast<float4*>(m)[i] = mm;
      reinterpret_cast<float4*>(v)[i] = vv;
      if constexpr (!std::is_void_v<Copy>) {
        for (int k = 0; k < 4; ++k) copy[4 * i + k] = cuda::from_float<Copy>(out[k]);
      }
    }
    done = nv * 4;
  }
  for (int64_t i = done + tid; i < n; i += stride) {
    const float p = adamw_element(param[i], m[i], v[i], grad[i], s);
    if constexpr (!std::is_void_v<Copy>) copy[i] = cuda::from_float<Copy>(p);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void adamw_update_cuda(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWParams& hp,
                       int64_t step, float grad_scale, bool decay, void* param_copy, DType copy_dtype,
                       cudaStream_t stream) {
  ZT_CHECK(n >= 0, "negative length ", n);
  const AdamWScalars s = make_scalars(hp, step, grad_scale, decay);
  if (n == 0) return;
  const bool vec = aligned16(param) && aligned16(grad) && aligned16(m) && aligned16(v);
  constexpr int kThreads = 256;
  const unsigned grid = cuda::grid_for(vec ? n / 4 + 1 : n, kThreads, 8192);
  auto run = [&](auto copy) {
    adamw_kernel<<<grid, kThreads, 0, stream>>>(param, grad, m, v, n, s, copy, vec);
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
