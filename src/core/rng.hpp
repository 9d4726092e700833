// Counter-based random numbers: every value is a pure function of a key and a
// counter, so results do not depend on the parallel layout or on the order in
// which ranks draw them. Keys are built from (seed, step, micro-batch, unit, ...).
#pragma once

#include <cmath>
#include <cstdint>

namespace zt {

// SplitMix64 finaliser: a strong 64-bit mixing function.
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Combine key parts into one key.
inline uint64_t rng_key(uint64_t a) { return mix64(a); }
template <typename... Rest>
inline uint64_t rng_key(uint64_t a, uint64_t b, Rest... rest) {
  return rng_key(mix64(a) ^ (b + 0x632be59bd9b4e019ull + (a << 6) + (a >> 2)), static_cast<uint64_t>(rest)...);
}

struct CounterRng {
  uint64_t key;
  uint64_t bits(uint64_t counter) const { return mix64(key ^ mix64(counter)); }
  // Uniform in [0, 1) with 53 bits.
  double uniform(uint64_t counter) const {
    return static_cast<double>(bits(counter) >> 11) * (1.0 / 9007199254740992.0);
  }
  // Standard normal via Box-Muller on two counters (2c, 2c+1).
  double normal(uint64_t counter) const {
    double u1 = uniform(2 * counter);
    double u2 = uniform(2 * counter + 1);
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  // Uniform integer in [0, n).
  uint64_t below(uint64_t counter, uint64_t n) const {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(bits(counter)) * n) >> 64);
  }
};

}  // namespace zt
