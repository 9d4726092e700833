// Internal to the GPT-2 units: deterministic parameter initialisation.
#pragma once

#include <cstdint>

#include "core/rng.hpp"

namespace zt::gpt_init {

// out[i] = std * N(0, 1) drawn at counter begin + i of the stream keyed by
// (seed, unit, param): any shard of a parameter initialises identically.
inline void normal(float* out, int64_t begin, int64_t count, double std, uint64_t seed, int unit,
                   int param) {
  const CounterRng rng{rng_key(seed, static_cast<uint64_t>(unit), static_cast<uint64_t>(param))};
  for (int64_t i = 0; i < count; ++i) {
    out[i] = static_cast<float>(std * rng.normal(static_cast<uint64_t>(begin + i)));
  }
}

inline void constant(float* out, int64_t count, float value) {
  for (int64_t i = 0; i < count; ++i) out[i] = value;
}

constexpr double kWeightStd = 0.02;    // GPT-2's initializer_range
constexpr double kPositionStd = 0.01;  // wpe, as in GPT-2 / llm.c

}  // namespace zt::gpt_init
