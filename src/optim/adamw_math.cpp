#include "optim/adamw_math.hpp"

#include <cmath>

#include "core/error.hpp"

namespace zt {

AdamWScalars adamw_scalars(const AdamWParams& hp, int64_t step, float grad_scale) {
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

}  // namespace zt
