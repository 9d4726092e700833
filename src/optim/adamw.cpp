#include "optim/adamw.hpp"

#include <type_traits>

#include "core/error.hpp"

namespace zt {
namespace {

// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kParallelMin = int64_t{1} << 15;

// Elements [begin, end), work-shared over the enclosing parallel region (or
// run by one thread when there is none). Copy is void for "no working copy".
template <bool kLerpFromStart, typename Copy>
void adamw_loop(float* param, const float* grad, float* m, float* v, int64_t begin, int64_t end,
                const AdamWScalars& scalars, bool decay, Copy* param_copy) {
  // A local copy: no store in the loop can alias it, so its fields stay in
  // registers.
  const AdamWScalars s = scalars;
  const float decay_factor = decay ? s.decay_factor : 1.0f;
#pragma omp for simd schedule(static) nowait
  for (int64_t i = begin; i < end; ++i) {
    const float p = adamw_element<kLerpFromStart>(param[i], m[i], v[i], grad[i], decay_factor, s);
    if constexpr (!std::is_void_v<Copy>) param_copy[i] = from_f32<Copy>(p);
  }
}

template <typename Copy>
void adamw_loop(float* param, const float* grad, float* m, float* v, int64_t begin, int64_t end,
                const AdamWScalars& s, bool decay, Copy* param_copy) {
  if (s.lerp_from_start) {
    adamw_loop<true>(param, grad, m, v, begin, end, s, decay, param_copy);
  } else {
    adamw_loop<false>(param, grad, m, v, begin, end, s, decay, param_copy);
  }
}

template <typename Copy>
void update_one(float* param, const float* grad, float* m, float* v, int64_t n,
                const AdamWParams& hp, int64_t step, float grad_scale, bool decay,
                Copy* param_copy) {
  ZT_CHECK(n >= 0, "negative length ", n);
  const AdamWScalars s = adamw_scalars(hp, step, grad_scale);
#pragma omp parallel if (n >= kParallelMin)
  adamw_loop(param, grad, m, v, 0, n, s, decay, param_copy);
}

template <typename Copy>
void update_ranges(float* param, const float* grad, float* m, float* v, int64_t n,
                   const std::vector<DecayRange>& ranges, const AdamWParams& hp, int64_t step,
                   float grad_scale, Copy* param_copy) {
  int64_t expect = 0;
  for (const DecayRange& r : ranges) {
    ZT_CHECK(r.begin == expect && r.end > r.begin, "decay ranges must tile the shard [0, ", n,
             "): range [", r.begin, ", ", r.end, ") where ", expect, " was expected");
    expect = r.end;
  }
  ZT_CHECK(expect == n, "decay ranges cover [0, ", expect, ") of a shard of ", n, " elements");
  const AdamWScalars s = adamw_scalars(hp, step, grad_scale);
  // One team for all ranges; `nowait` lets threads move to the next range
  // without a barrier, which is safe because the ranges are disjoint.
#pragma omp parallel if (n >= kParallelMin)
  for (const DecayRange& r : ranges) {
    adamw_loop(param, grad, m, v, r.begin, r.end, s, r.decay, param_copy);
  }
}

}  // namespace

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWParams& hp, int64_t step, float grad_scale, bool decay) {
  update_one<void>(param, grad, m, v, n, hp, step, grad_scale, decay, nullptr);
}

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWParams& hp, int64_t step, float grad_scale, bool decay,
                  bf16* param_copy) {
  if (param_copy == nullptr) return adamw_update(param, grad, m, v, n, hp, step, grad_scale, decay);
  update_one(param, grad, m, v, n, hp, step, grad_scale, decay, param_copy);
}

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWParams& hp, int64_t step, float grad_scale, bool decay,
                  f16* param_copy) {
  if (param_copy == nullptr) return adamw_update(param, grad, m, v, n, hp, step, grad_scale, decay);
  update_one(param, grad, m, v, n, hp, step, grad_scale, decay, param_copy);
}

void adamw_update_ranges(float* param, const float* grad, float* m, float* v, int64_t n,
                         const std::vector<DecayRange>& ranges, const AdamWParams& hp,
                         int64_t step, float grad_scale, bf16* param_copy) {
  if (param_copy == nullptr) {
    update_ranges<void>(param, grad, m, v, n, ranges, hp, step, grad_scale, nullptr);
  } else {
    update_ranges(param, grad, m, v, n, ranges, hp, step, grad_scale, param_copy);
  }
}

void adamw_update_ranges(float* param, const float* grad, float* m, float* v, int64_t n,
                         const std::vector<DecayRange>& ranges, const AdamWParams& hp,
                         int64_t step, float grad_scale, f16* param_copy) {
  if (param_copy == nullptr) {
    update_ranges<void>(param, grad, m, v, n, ranges, hp, step, grad_scale, nullptr);
  } else {
    update_ranges(param, grad, m, v, n, ranges, hp, step, grad_scale, param_copy);
  }
}

}  // namespace zt
