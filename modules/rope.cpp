#include "modules/rope.hpp"

#include <cmath>

#include "core/error.hpp"

namespace zt {

std::vector<double> rope_inv_freq(const RopeConfig& rope) {
  ZT_CHECK(rope.head_dim >= 2 && rope.head_dim % 2 == 0, "rope: head_dim must be even, got ", rope.head_dim);
  ZT_CHECK(rope.theta > 0, "rope: theta must be > 0, got ", rope.theta);
  const int64_t half = rope.head_dim / 2;
  std::vector<double> f(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    f[static_cast<size_t>(i)] =
        1.0 / std::pow(rope.theta, static_cast<double>(2 * i) / static_cast<double>(rope.head_dim));
  if (!rope.llama3) return f;
  ZT_CHECK(rope.factor > 0 && rope.low_freq_factor > 0 && rope.high_freq_factor > rope.low_freq_factor &&
               rope.original_max_position_embeddings > 0,
           "rope: bad llama3 scaling (factor ", rope.factor, ", low_freq_factor ", rope.low_freq_factor,
           ", high_freq_factor ", rope.high_freq_factor, ", original_max_position_embeddings ",
           rope.original_max_position_embeddings, ")");
  const double old_len = rope.original_max_position_embeddings;
  const double low_wavelen = old_len / rope.low_freq_factor;
  const double high_wavelen = old_len / rope.high_freq_factor;
  const double pi = std::acos(-1.0);
  for (double& v : f) {
    const double wavelen = 2.0 * pi / v;
    if (wavelen > low_wavelen) {
      v = v / rope.factor;  // low frequencies: interpolated
    } else if (wavelen >= high_wavelen) {
      const double s = (old_len / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor);
      v = (1.0 - s) * v / rope.factor + s * v;
    }  // high frequencies: kept
  }
  return f;
}

}  // namespace zt
