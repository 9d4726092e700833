#include "optim/adamw.hpp"

#include <cmath>
#include <type_traits>

#include "core/error.hpp"

namespace zt {
namespace {

// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kParallelMin = int64_t{1} << 15;

// The per-step scalars of [Note: AdamW formula], computed in double and
// rounded once to fp32, as PyTorch does when a Python float meets a float
// tensor.
struct AdamWScalars {
  float grad_scale;
  float decay_factor;   // 1 - lr*wd
  float lerp_weight;    // 1 - beta1
  float lerp_rest;      // 1 - lerp_weight, in fp32 as aten's lerp computes it
  bool lerp_from_start; // aten lerp: |w| < 0.5 ? a + w*(b-a) : b - (b-a)*(1-w)
  float beta2;
  float one_minus_beta2;
  float bias_correction2_sqrt;
  float eps;
  float neg_step_size;  // -lr / (1 - beta1^t)
};

AdamWScalars make_scalars(const AdamWParams& hp, int64_t step, float grad_scale) {
  ZT_CHECK(step >= 1, "AdamW step is 1-based, got ", step);
  ZT_CHECK(hp.beta1 >= 0 && hp.beta1 < 1 && hp.beta2 >= 0 && hp.beta2 < 1,
           "AdamW betas must lie in [0, 1): ", hp.beta1, ", ", hp.beta2);
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(hp.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(hp.beta2, t);
  AdamWScalars s;
  s.grad_scale = grad_scale;
  s.decay_factor = static_cast<float>(1.0 - hp.lr * hp.weight_decay);
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

// Elements [begin, end), work-shared over the enclosing parallel region (or
// run by one thread when there is none). Copy is void for "no working copy".
// The lerp branch is a template parameter so the loop body has no control
// flow and vectorises.
template <bool kLerpFromStart, typename Copy>
void adamw_loop(float* param, const float* grad, float* m, float* v, int64_t begin, int64_t end,
                const AdamWScalars& s, bool decay, Copy* param_copy) {
  // A decay factor of exactly 1 leaves p unchanged bit for bit, so the
  // no-decay case needs no branch in the loop.
  const float decay_factor = decay ? s.decay_factor : 1.0f;
  const float grad_scale = s.grad_scale, w = s.lerp_weight, w_rest = s.lerp_rest;
  const float beta2 = s.beta2, one_minus_beta2 = s.one_minus_beta2;
  const float bc2_sqrt = s.bias_correction2_sqrt, eps = s.eps, neg_step = s.neg_step_size;
#pragma omp for simd schedule(static) nowait
  for (int64_t i = begin; i < end; ++i) {
    const float g = grad[i] * grad_scale;
    float p = param[i] * decay_factor;
    const float mi = m[i];
    const float m_new = kLerpFromStart ? mi + w * (g - mi) : g - (g - mi) * w_rest;
    const float v_new = v[i] * beta2 + one_minus_beta2 * g * g;
    const float denom = std::sqrt(v_new) / bc2_sqrt + eps;
    p = p + neg_step * m_new / denom;
    m[i] = m_new;
    v[i] = v_new;
    param[i] = p;
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
  const AdamWScalars s = make_scalars(hp, step, grad_scale);
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
  const AdamWScalars s = make_scalars(hp, step, grad_scale);
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
