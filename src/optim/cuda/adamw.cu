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
#include "optim/clip_math.hpp"
#include "optim/cuda/adamw.cuh"

namespace zt {
namespace {

// The working copy, rounded to nearest even as zt::from_f32 on the host.
__device__ __forceinline__ void store_copy(float* dst, float v) { *dst = v; }
__device__ __forceinline__ void store_copy(__nv_bfloat16* dst, float v) { *dst = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store_copy(__half* dst, float v) { *dst = __float2half_rn(v); }
// Four consecutive elements of the copy in one store (dst aligned to four
// elements), each rounded as store_copy rounds it.
__device__ __forceinline__ void store_copy4(float* dst, float4 p) { *reinterpret_cast<float4*>(dst) = p; }
template <typename T>
__device__ __forceinline__ void store_copy4(T* dst, float4 p) {
  union {
    T h[4];
    uint2 u;
  } pack;
  store_copy(&pack.h[0], p.x);
  store_copy(&pack.h[1], p.y);
  store_copy(&pack.h[2], p.z);
  store_copy(&pack.h[3], p.w);
  *reinterpret_cast<uint2*>(dst) = pack.u;
}

// Up to kMaxRanges decay ranges of one launch: exclusive ends (relative to
// the launch's first element, ascending, the last = n) and each range's
// decay factor (s.decay_factor, or exactly 1 without decay).
constexpr int kMaxRanges = 32;
struct DecayTable {
  int count;
  int64_t end[kMaxRanges];
  float factor[kMaxRanges];
};

// The range holding element e: the first with end > e.
__device__ __forceinline__ int range_of(const DecayTable& t, int64_t e) {
  int lo = 0, hi = t.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (t.end[mid] > e) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// Copy is void for "no working copy". vec: every pointer 16-byte aligned, so
// four elements move per access (and the copy's four in one store when the
// copy is aligned to four elements: copy_vec); the four take their decay
// factors from their own ranges. verdict: null, or the step's verdict on the
// device ([Note: verdict on the device], optim/clip_math.hpp), which skips the
// update or gives its gradient scale in place of s.grad_scale.
template <bool kLerpFromStart, typename Copy>
__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n, AdamWScalars s,
                             const __grid_constant__ DecayTable t, Copy* copy, bool vec, bool copy_vec,
                             const double* verdict) {
  if (verdict != nullptr) {
    if (verdict[kVerdictSkip] != 0.0) return;
    s.grad_scale = static_cast<float>(verdict[kVerdictGradScale]);
  }
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
      const int k = range_of(t, 4 * i);
      float f[4] = {t.factor[k], t.factor[k], t.factor[k], t.factor[k]};
      if (4 * i + 3 >= t.end[k]) {  // the four straddle a range's end
        for (int j = 1; j < 4; ++j) f[j] = t.factor[range_of(t, 4 * i + j)];
      }
      adamw_element<kLerpFromStart>(p.x, mm.x, vv.x, g.x, f[0], s);
      adamw_element<kLerpFromStart>(p.y, mm.y, vv.y, g.y, f[1], s);
      adamw_element<kLerpFromStart>(p.z, mm.z, vv.z, g.z, f[2], s);
      adamw_element<kLerpFromStart>(p.w, mm.w, vv.w, g.w, f[3], s);
      reinterpret_cast<float4*>(param)[i] = p;
      reinterpret_cast<float4*>(m)[i] = mm;
      reinterpret_cast<float4*>(v)[i] = vv;
      if constexpr (!std::is_void_v<Copy>) {
        if (copy_vec) {
          store_copy4(copy + 4 * i, p);
        } else {
          store_copy(copy + 4 * i + 0, p.x);
          store_copy(copy + 4 * i + 1, p.y);
          store_copy(copy + 4 * i + 2, p.z);
          store_copy(copy + 4 * i + 3, p.w);
        }
      }
    }
    done = nv * 4;
  }
  for (int64_t i = done + tid; i < n; i += stride) {
    const float p = adamw_element<kLerpFromStart>(param[i], m[i], v[i], grad[i], t.factor[range_of(t, i)], s);
    if constexpr (!std::is_void_v<Copy>) store_copy(copy + i, p);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

namespace {

// One launch over n elements whose decay the table gives.
void launch_adamw(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWScalars& s,
                  const DecayTable& t, void* param_copy, DType copy_dtype, const double* verdict,
                  cudaStream_t stream) {
  const bool vec = aligned16(param) && aligned16(grad) && aligned16(m) && aligned16(v);
  // Four elements of the copy: 16 bytes in f32, 8 in bf16/f16.
  const bool copy_vec = param_copy != nullptr && reinterpret_cast<uintptr_t>(param_copy) % (4 * dtype_size(copy_dtype)) == 0;
  // A grid-stride loop over at most 8192 blocks of 256 threads.
  constexpr int kThreads = 256;
  const int64_t work = vec ? n / 4 + 1 : n;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(8192, (work + kThreads - 1) / kThreads));
  auto run = [&](auto copy) {
    if (s.lerp_from_start) {
      adamw_kernel<true><<<grid, kThreads, 0, stream>>>(param, grad, m, v, n, s, t, copy, vec, copy_vec, verdict);
    } else {
      adamw_kernel<false><<<grid, kThreads, 0, stream>>>(param, grad, m, v, n, s, t, copy, vec, copy_vec, verdict);
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

}  // namespace

void adamw_update_cuda(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWParams& hp,
                       int64_t step, float grad_scale, bool decay, void* param_copy, DType copy_dtype,
                       cudaStream_t stream) {
  ZT_CHECK(n >= 0, "negative length ", n);
  const AdamWScalars s = adamw_scalars(hp, step, grad_scale);
  if (n == 0) return;
  DecayTable t{};
  t.count = 1;
  t.end[0] = n;
  t.factor[0] = decay ? s.decay_factor : 1.0f;
  launch_adamw(param, grad, m, v, n, s, t, param_copy, copy_dtype, nullptr, stream);
}

void adamw_update_ranges_cuda(float* param, const float* grad, float* m, float* v, int64_t n,
                              const std::vector<DecayRange>& ranges, const AdamWParams& hp, int64_t step,
                              float grad_scale, void* param_copy, DType copy_dtype, const double* verdict,
                              cudaStream_t stream) {
  ZT_CHECK(n >= 0, "negative length ", n);
  const AdamWScalars s = adamw_scalars(hp, step, grad_scale);
  int64_t at = 0;
  for (const DecayRange& r : ranges) {
    ZT_CHECK(r.begin == at && r.end > r.begin, "AdamW decay ranges must tile [0, ", n, ") in order: got [",
             r.begin, ", ", r.end, ") after ", at);
    at = r.end;
  }
  ZT_CHECK(at == n, "AdamW decay ranges end at ", at, ", not at the shard's ", n, " elements");
  for (size_t b = 0; b < ranges.size(); b += kMaxRanges) {
    const size_t count = std::min<size_t>(kMaxRanges, ranges.size() - b);
    const int64_t base = ranges[b].begin;
    DecayTable t{};
    t.count = static_cast<int>(count);
    for (size_t j = 0; j < count; ++j) {
      t.end[j] = ranges[b + j].end - base;
      t.factor[j] = ranges[b + j].decay ? s.decay_factor : 1.0f;
    }
    void* copy = param_copy == nullptr ? nullptr : static_cast<char*>(param_copy) + base * dtype_size(copy_dtype);
    launch_adamw(param + base, grad + base, m + base, v + base, t.end[count - 1], s, t, copy, copy_dtype, verdict,
                 stream);
  }
}

}  // namespace zt
