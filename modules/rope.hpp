// Rotary position embeddings (RoPE) as Hugging Face's Llama applies them: the
// "rotate half" convention (dimension i of a head pairs with i + head_dim/2,
// not with i + 1 as in the original RoPE paper's interleaved form), inverse
// frequencies theta^(-2i/head_dim), and optionally Llama 3's frequency
// scaling. The parameters are plain numbers so that every backend computes
// the same angles from them (rope_inv_freq).
#pragma once

#include <cstdint>
#include <vector>

namespace zt {

struct RopeConfig {
  int64_t head_dim = 0;  // even
  double theta = 10000.0;
  // Llama 3 frequency scaling (rope_scaling.rope_type "llama3"); off: the
  // plain frequencies.
  bool llama3 = false;
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position_embeddings = 8192.0;
};

// The head_dim / 2 inverse frequencies, in double. With llama3 scaling, as
// transformers' _compute_llama3_parameters defines it: a frequency whose
// wavelength 2 pi / f exceeds original / low_freq_factor is divided by
// factor; one whose wavelength is below original / high_freq_factor is kept;
// in between, s = (original / wavelength - low) / (high - low) blends them,
// (1 - s) f / factor + s f. (transformers computes in float32; double here
// differs from it by float rounding only.)
std::vector<double> rope_inv_freq(const RopeConfig& rope);

}  // namespace zt
